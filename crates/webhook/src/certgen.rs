//! `hami-webhook certgen`: the webhook's TLS bootstrap without a third-party image.
//!
//! Creates a CA and a serving certificate for the webhook Service, keeps them in a
//! `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`, `ca.crt`) and writes the CA into
//! `caBundle` of every webhook of the MutatingWebhookConfiguration. A Secret that
//! already holds a valid pair for the Service is kept, so re-running (every Helm
//! upgrade) does not rotate certificates needlessly.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use crate::cli::CertgenArgs;

pub const TLS_CRT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CRT: &str = "ca.crt";
pub const SECRET_TYPE: &str = "kubernetes.io/tls";

/// Attempts at a read-modify-write of the webhook configuration before giving up on
/// conflicts.
const CONFLICT_RETRIES: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum CertgenError {
    #[error("cannot build a Kubernetes client (in-cluster config or KUBECONFIG): {0}")]
    Client(String),
    #[error("{action}: {source}")]
    Kube { action: String, source: kube::Error },
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("time arithmetic overflowed for a validity of {days} days")]
    Validity { days: u32 },
    #[error("MutatingWebhookConfiguration {name} not found; install it before running certgen")]
    WebhookConfigMissing { name: String },
    #[error(
        "MutatingWebhookConfiguration {name} kept changing; gave up after {CONFLICT_RETRIES} conflicts"
    )]
    Conflicts { name: String },
}

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> CertgenError {
    let action = action.into();
    move |source| CertgenError::Kube { action, source }
}

/// The PEM texts a Secret holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertBundle {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// The names clients may use for the Service.
pub fn dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// A fresh CA and a serving certificate for `names`, both valid `validity_days`.
pub fn generate(names: &[String], validity_days: u32) -> Result<CertBundle, CertgenError> {
    let now = time::OffsetDateTime::now_utc();
    // Back-dated a little so a node whose clock lags accepts the certificate at once.
    let not_before = now - time::Duration::hours(1);
    let not_after = now
        .checked_add(time::Duration::days(i64::from(validity_days)))
        .ok_or(CertgenError::Validity {
            days: validity_days,
        })?;

    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "hami-webhook-ca");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.not_before = not_before;
    ca.not_after = not_after;
    let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;

    let mut leaf = CertificateParams::new(names.to_vec())?;
    let cn = names.first().map(String::as_str).unwrap_or("hami-webhook");
    leaf.distinguished_name.push(DnType::CommonName, cn);
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = not_before;
    leaf.not_after = not_after;
    let key = KeyPair::generate()?;
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(CertBundle {
        ca_pem: issuer.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Whether `bundle` can serve `names` until `valid_until`: the key matches the
/// certificate, which chains to the CA and is valid for every name at that time.
/// The error says why not.
pub fn check(bundle: &CertBundle, names: &[String], valid_until: SystemTime) -> Result<(), String> {
    let provider = hami_server::tls::provider();
    hami_server::tls::pair_from_pem(
        bundle.cert_pem.as_bytes(),
        bundle.key_pem.as_bytes(),
        &provider,
    )
    .map_err(|e| e.to_string())?;
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(bundle.ca_pem.as_bytes()) {
        let ca = ca.map_err(|e| format!("{CA_CRT}: {e}"))?;
        roots
            .add(ca)
            .map_err(|e| format!("{CA_CRT} is not a usable CA: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("{CA_CRT} holds no certificate"));
    }
    let chain = CertificateDer::pem_slice_iter(bundle.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{TLS_CRT}: {e}"))?;
    let Some((leaf, intermediates)) = chain.split_first() else {
        return Err(format!("{TLS_CRT} holds no certificate"));
    };
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| e.to_string())?;
    let at = valid_until
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|_| "time before 1970".to_string())?;
    for name in names {
        let server_name = ServerName::try_from(name.clone()).map_err(|e| format!("{name}: {e}"))?;
        verifier
            .verify_server_cert(
                leaf,
                intermediates,
                &server_name,
                &[],
                UnixTime::since_unix_epoch(at),
            )
            .map_err(|e| format!("not valid for {name} until the renewal deadline: {e}"))?;
    }
    Ok(())
}

/// Reads a bundle from Secret data; None when a key is missing or not UTF-8.
pub fn bundle_from_secret(secret: &Secret) -> Option<CertBundle> {
    let data = secret.data.as_ref()?;
    let text = |k: &str| {
        data.get(k)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
    };
    Some(CertBundle {
        ca_pem: text(CA_CRT)?,
        cert_pem: text(TLS_CRT)?,
        key_pem: text(TLS_KEY)?,
    })
}

fn secret_data(bundle: &CertBundle) -> BTreeMap<String, ByteString> {
    BTreeMap::from([
        (
            CA_CRT.to_string(),
            ByteString(bundle.ca_pem.clone().into_bytes()),
        ),
        (
            TLS_CRT.to_string(),
            ByteString(bundle.cert_pem.clone().into_bytes()),
        ),
        (
            TLS_KEY.to_string(),
            ByteString(bundle.key_pem.clone().into_bytes()),
        ),
    ])
}

/// What happened to the Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretAction {
    /// It held a valid pair, left as is.
    Kept,
    Created,
    /// It held no valid pair (missing keys, wrong names, expiring); overwritten.
    Replaced,
}

/// The outcome of one certgen run.
#[derive(Debug, Clone)]
pub struct Report {
    pub secret: SecretAction,
    /// The CA now in the Secret.
    pub ca_pem: String,
    /// Webhooks whose caBundle was changed.
    pub webhooks_patched: usize,
}

/// Makes sure the Secret holds a valid pair and the webhook configuration trusts it.
pub async fn ensure(client: kube::Client, args: &CertgenArgs) -> Result<Report, CertgenError> {
    let names = dns_names(&args.service_name, &args.namespace);
    let renew_by =
        SystemTime::now() + Duration::from_secs(u64::from(args.renew_before_days) * 24 * 3600);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &args.namespace);
    let what = format!("secret {}/{}", args.namespace, args.secret_name);

    let existing = secrets
        .get_opt(&args.secret_name)
        .await
        .map_err(kube_err(format!("reading {what}")))?;
    let (action, bundle) = match existing {
        Some(secret) => match bundle_from_secret(&secret).map(|b| {
            let verdict = check(&b, &names, renew_by);
            (b, verdict)
        }) {
            Some((bundle, Ok(()))) => {
                tracing::info!(secret = %what, "secret holds a valid certificate; kept");
                (SecretAction::Kept, bundle)
            }
            invalid => {
                let why = match invalid {
                    Some((_, Err(why))) => why,
                    _ => format!("missing one of {TLS_CRT}, {TLS_KEY}, {CA_CRT}"),
                };
                tracing::info!(secret = %what, reason = %why, "replacing the certificate");
                let bundle = generate(&names, args.validity_days)?;
                let mut updated = secret;
                updated.data = Some(secret_data(&bundle));
                updated.string_data = None;
                updated.type_ = Some(SECRET_TYPE.to_string());
                secrets
                    .replace(&args.secret_name, &PostParams::default(), &updated)
                    .await
                    .map_err(kube_err(format!("replacing {what}")))?;
                (SecretAction::Replaced, bundle)
            }
        },
        None => {
            let bundle = generate(&names, args.validity_days)?;
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(args.secret_name.clone()),
                    namespace: Some(args.namespace.clone()),
                    ..Default::default()
                },
                data: Some(secret_data(&bundle)),
                type_: Some(SECRET_TYPE.to_string()),
                ..Default::default()
            };
            match secrets.create(&PostParams::default(), &secret).await {
                Ok(_) => {
                    tracing::info!(secret = %what, "secret created");
                    (SecretAction::Created, bundle)
                }
                // Another certgen won the race: use what it stored.
                Err(kube::Error::Api(status)) if status.is_already_exists() => {
                    let theirs = secrets
                        .get(&args.secret_name)
                        .await
                        .map_err(kube_err(format!("re-reading {what}")))?;
                    match bundle_from_secret(&theirs) {
                        Some(b) if check(&b, &names, renew_by).is_ok() => (SecretAction::Kept, b),
                        _ => {
                            return Err(CertgenError::Kube {
                                action: format!("creating {what}"),
                                source: kube::Error::Api(status),
                            });
                        }
                    }
                }
                Err(e) => return Err(kube_err(format!("creating {what}"))(e)),
            }
        }
    };

    let webhooks_patched = match &args.webhook_config_name {
        Some(name) => patch_ca_bundle(client, name, bundle.ca_pem.as_bytes()).await?,
        None => 0,
    };
    Ok(Report {
        secret: action,
        ca_pem: bundle.ca_pem,
        webhooks_patched,
    })
}

/// Sets `caBundle` of every webhook in the configuration; returns how many changed.
pub async fn patch_ca_bundle(
    client: kube::Client,
    name: &str,
    ca_pem: &[u8],
) -> Result<usize, CertgenError> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client);
    for _ in 0..CONFLICT_RETRIES {
        let Some(mut config) = api.get_opt(name).await.map_err(kube_err(format!(
            "reading MutatingWebhookConfiguration {name}"
        )))?
        else {
            return Err(CertgenError::WebhookConfigMissing {
                name: name.to_string(),
            });
        };
        let mut changed = 0;
        for webhook in config.webhooks.iter_mut().flatten() {
            if webhook
                .client_config
                .ca_bundle
                .as_ref()
                .map(|b| b.0.as_slice())
                != Some(ca_pem)
            {
                webhook.client_config.ca_bundle = Some(ByteString(ca_pem.to_vec()));
                changed += 1;
            }
        }
        if changed == 0 {
            tracing::info!(config = name, "caBundle already up to date");
            return Ok(0);
        }
        match api.replace(name, &PostParams::default(), &config).await {
            Ok(_) => {
                tracing::info!(config = name, webhooks = changed, "caBundle patched");
                return Ok(changed);
            }
            Err(kube::Error::Api(status)) if status.is_conflict() => {
                tracing::debug!(config = name, "conflict writing caBundle; retrying");
            }
            Err(e) => {
                return Err(kube_err(format!(
                    "updating MutatingWebhookConfiguration {name}"
                ))(e));
            }
        }
    }
    Err(CertgenError::Conflicts {
        name: name.to_string(),
    })
}

/// Entry point of the subcommand: in-cluster config, else KUBECONFIG.
pub async fn run(args: CertgenArgs) -> Result<Report, CertgenError> {
    let client = kube::Client::try_default()
        .await
        .map_err(|e| CertgenError::Client(e.to_string()))?;
    let report = ensure(client, &args).await?;
    tracing::info!(
        secret = ?report.secret,
        webhooks_patched = report.webhooks_patched,
        "certgen done"
    );
    Ok(report)
}
