//! The real hami-webhook behind a `MutatingWebhookConfiguration`, as the chart
//! installs it: HTTPS with a serving certificate from our certgen, the CA in
//! `caBundle`, the chart's selectors and `failurePolicy: Fail`.

use std::net::SocketAddr;
use std::path::PathBuf;

use base64::Engine;
use hami_core::config::DeviceConfig;
use hami_server::TlsConfig;
use hami_server::supervise::RestartPolicy;
use hami_webhook::certgen;
use hami_webhook::rules::RuleConfig;
use hami_webhook::run::{Service, serve_service};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::component::{HarnessError, Running};

pub const NAMESPACE: &str = "kube-system";
pub const SERVICE: &str = "hami-webhook";
pub const CONFIGURATION: &str = "hami-webhook";
pub const WEBHOOK_NAME: &str = "vgpu.hami-rs.io";
/// The Service port the configuration names.
pub const SERVICE_PORT: u16 = 443;

/// The webhook while it runs, with its admin address (/readyz, /metrics).
#[derive(Debug)]
pub(crate) struct RunningWebhook {
    pub running: Running,
    pub admin: SocketAddr,
}

/// Everything needed to (re)start the webhook on the same address.
pub(crate) struct WebhookSetup {
    pub addr: SocketAddr,
    pub ca_pem: String,
    cert: PathBuf,
    key: PathBuf,
    rules: RuleConfig,
    /// The API server's client, for the quota rule's ResourceQuota watch.
    client: kube::Client,
}

impl std::fmt::Debug for WebhookSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSetup")
            .field("addr", &self.addr)
            .field("cert", &self.cert)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl WebhookSetup {
    /// Makes a CA and a serving certificate for the Service's DNS names (written under
    /// `dir`) and reserves a loopback port. Returns the first listener, so that the port
    /// stays ours.
    pub async fn prepare(
        dir: &std::path::Path,
        scheduler_name: &str,
        devices: DeviceConfig,
        client: kube::Client,
    ) -> Result<(Self, TcpListener), HarnessError> {
        let names = certgen::dns_names(SERVICE, NAMESPACE);
        let bundle = certgen::generate(&names, 1)
            .map_err(|e| HarnessError::Setup(format!("webhook certificate: {e}")))?;
        let cert = dir.join(certgen::TLS_CRT);
        let key = dir.join(certgen::TLS_KEY);
        std::fs::write(&cert, &bundle.cert_pem).map_err(HarnessError::io("writing tls.crt"))?;
        std::fs::write(&key, &bundle.key_pem).map_err(HarnessError::io("writing tls.key"))?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(HarnessError::io("binding the webhook port"))?;
        let addr = listener
            .local_addr()
            .map_err(HarnessError::io("webhook address"))?;
        let rules = RuleConfig {
            scheduler_name: scheduler_name.to_string(),
            devices,
            ..RuleConfig::default()
        };
        Ok((
            Self {
                addr,
                ca_pem: bundle.ca_pem,
                cert,
                key,
                rules,
                client,
            },
            listener,
        ))
    }

    /// Serves on `listener` (or on this setup's address again, after a restart).
    pub async fn start(
        &self,
        listener: Option<TcpListener>,
    ) -> Result<RunningWebhook, HarnessError> {
        let listener = match listener {
            Some(l) => l,
            None => crate::rebind(self.addr, "webhook").await?,
        };
        let admin_listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(HarnessError::io("binding the webhook admin port"))?;
        let svc = Service {
            listener,
            admin_listener,
            tls: TlsConfig::Files {
                cert: self.cert.clone(),
                key: self.key.clone(),
            },
            rules: self.rules.clone(),
            body_limit: hami_webhook::handler::DEFAULT_BODY_LIMIT,
            certificate_check: hami_webhook::run::CERTIFICATE_CHECK,
            restart: RestartPolicy::default(),
            quota_client: Some(self.client.clone()),
        };
        let admin = svc
            .admin_listener
            .local_addr()
            .map_err(HarnessError::io("webhook admin address"))?;
        let stop = CancellationToken::new();
        Ok(RunningWebhook {
            running: Running::spawn("hami-webhook", stop.clone(), serve_service(svc, stop)),
            admin,
        })
    }

    /// The chart's `MutatingWebhookConfiguration` (v1) pointing at the Service.
    pub fn configuration(&self) -> Value {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let not_ignored =
            json!([{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]);
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": CONFIGURATION},
            "webhooks": [{
                "name": WEBHOOK_NAME,
                "admissionReviewVersions": ["v1", "v1beta1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "reinvocationPolicy": "Never",
                "timeoutSeconds": 10,
                "clientConfig": {
                    "service": {"namespace": NAMESPACE, "name": SERVICE, "path": "/mutate", "port": SERVICE_PORT},
                    "caBundle": ca,
                },
                "rules": [{
                    "operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["pods"], "scope": "Namespaced",
                }],
                "namespaceSelector": {"matchExpressions": not_ignored},
                "objectSelector": {"matchExpressions": not_ignored},
            }],
        })
    }
}
