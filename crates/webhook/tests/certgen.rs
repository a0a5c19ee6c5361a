#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! certgen against the test kit's API server emulator, with the real kube client.

use std::time::{Duration, SystemTime};

use hami_server::test_support::{https_request, request};
use hami_server::{CancellationToken, TlsConfig, handler_fn, respond, serve};
use hami_testkit::ApiServer;
use hami_webhook::certgen::{
    CertBundle, CertgenError, SecretAction, bundle_from_secret, check, dns_names, ensure, generate,
};
use hami_webhook::cli::CertgenArgs;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use serde_json::json;

const NS: &str = "hami-system";
const SVC: &str = "hami-webhook";

fn client(server: &ApiServer) -> Client {
    Client::try_from(Config::new(server.url().parse().unwrap())).unwrap()
}

/// An emulator with the webhook's namespace, and a client for it.
async fn cluster() -> (ApiServer, Client) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = ApiServer::start().await.unwrap();
    let client = client(&server);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    (server, client)
}

fn args(webhook_config: Option<&str>) -> CertgenArgs {
    CertgenArgs {
        namespace: NS.into(),
        service_name: SVC.into(),
        secret_name: "hami-webhook-tls".into(),
        webhook_config_name: webhook_config.map(str::to_string),
        validity_days: 365,
        renew_before_days: 30,
    }
}

async fn create_webhook_config(client: &Client) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let webhook = |name: &str, path: &str| {
        json!({
            "name": name,
            "admissionReviewVersions": ["v1", "v1beta1"],
            "clientConfig": {"service": {"namespace": NS, "name": SVC, "path": path, "port": 443}},
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "*"}]
        })
    };
    let cfg: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "hami-webhook"},
        "webhooks": [webhook("vgpu.hami.io", "/webhook"), webhook("mutate.hami.io", "/mutate")]
    }))
    .unwrap();
    api.create(&PostParams::default(), &cfg).await.unwrap();
}

async fn ca_bundles(client: &Client) -> Vec<Option<Vec<u8>>> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    api.get("hami-webhook")
        .await
        .unwrap()
        .webhooks
        .unwrap()
        .into_iter()
        .map(|w| w.client_config.ca_bundle.map(|b| b.0))
        .collect()
}

#[tokio::test]
async fn creates_secret_patches_ca_bundle_and_keeps_a_valid_secret() {
    let (_server, client) = cluster().await;
    create_webhook_config(&client).await;

    let report = ensure(client.clone(), &args(Some("hami-webhook")))
        .await
        .unwrap();
    assert_eq!(report.secret, SecretAction::Created);
    assert_eq!(report.webhooks_patched, 2);

    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let secret = secrets.get("hami-webhook-tls").await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let bundle = bundle_from_secret(&secret).unwrap();
    assert_eq!(bundle.ca_pem, report.ca_pem);
    let ca = Some(bundle.ca_pem.as_bytes().to_vec());
    assert_eq!(ca_bundles(&client).await, vec![ca.clone(), ca.clone()]);

    // The stored pair serves TLS that a client trusting ca.crt accepts for the
    // Service's DNS name.
    let dir = std::env::temp_dir().join(format!("hami-certgen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tls.crt"), &bundle.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &bundle.key_pem).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve(
        listener,
        TlsConfig::Files {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        },
        handler_fn(|_| async { respond::text(hyper::StatusCode::OK, "hello") }),
        shutdown.clone(),
    ));
    for name in dns_names(SVC, NS) {
        let resp = https_request(
            addr,
            &name,
            &bundle.ca_pem,
            request("GET", "/", "").unwrap(),
        )
        .await
        .unwrap();
        assert_eq!(resp.text(), "hello\n");
    }
    shutdown.cancel();
    task.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    // Second run: nothing to do.
    let before = secret.metadata.resource_version.clone();
    let again = ensure(client.clone(), &args(Some("hami-webhook")))
        .await
        .unwrap();
    assert_eq!(again.secret, SecretAction::Kept);
    assert_eq!(again.webhooks_patched, 0);
    let after = secrets.get("hami-webhook-tls").await.unwrap();
    assert_eq!(after.metadata.resource_version, before);

    // A webhook whose caBundle was reset is patched again from the kept Secret.
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut cfg = api.get("hami-webhook").await.unwrap();
    cfg.webhooks.as_mut().unwrap()[1].client_config.ca_bundle = None;
    api.replace("hami-webhook", &PostParams::default(), &cfg)
        .await
        .unwrap();
    let third = ensure(client.clone(), &args(Some("hami-webhook")))
        .await
        .unwrap();
    assert_eq!(third.secret, SecretAction::Kept);
    assert_eq!(third.webhooks_patched, 1);
    assert_eq!(ca_bundles(&client).await, vec![ca.clone(), ca]);
}

#[tokio::test]
async fn invalid_or_expiring_secret_is_replaced() {
    let (_server, client) = cluster().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);

    // Garbage in the Secret.
    let garbage: Secret = serde_json::from_value(json!({
        "metadata": {"name": "hami-webhook-tls", "namespace": NS},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": "nope", "tls.key": "nope", "ca.crt": "nope"}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &garbage)
        .await
        .unwrap();
    let report = ensure(client.clone(), &args(None)).await.unwrap();
    assert_eq!(report.secret, SecretAction::Replaced);
    let stored = bundle_from_secret(&secrets.get("hami-webhook-tls").await.unwrap()).unwrap();
    let names = dns_names(SVC, NS);
    check(&stored, &names, SystemTime::now()).unwrap();

    // A certificate that expires within the renewal window.
    let short = generate(&names, 10).unwrap();
    let mut s = secrets.get("hami-webhook-tls").await.unwrap();
    s.data = Some(
        [
            ("tls.crt", &short.cert_pem),
            ("tls.key", &short.key_pem),
            ("ca.crt", &short.ca_pem),
        ]
        .into_iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                k8s_openapi::ByteString(v.as_bytes().to_vec()),
            )
        })
        .collect(),
    );
    secrets
        .replace("hami-webhook-tls", &PostParams::default(), &s)
        .await
        .unwrap();
    let report = ensure(client.clone(), &args(None)).await.unwrap();
    assert_eq!(report.secret, SecretAction::Replaced);
    assert_ne!(report.ca_pem, short.ca_pem);

    // A certificate for another Service.
    let other = generate(&dns_names("other", NS), 365).unwrap();
    assert!(check(&other, &names, SystemTime::now()).is_err());
}

#[tokio::test]
async fn missing_webhook_configuration_is_a_clear_error() {
    let (_server, client) = cluster().await;
    let err = ensure(client, &args(Some("absent"))).await.unwrap_err();
    assert!(
        matches!(err, CertgenError::WebhookConfigMissing { .. }),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "MutatingWebhookConfiguration absent not found; install it before running certgen"
    );
}

#[test]
fn check_rejects_mismatched_key_and_expired_certificates() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let names = dns_names(SVC, NS);
    let a = generate(&names, 365).unwrap();
    let b = generate(&names, 365).unwrap();
    check(&a, &names, SystemTime::now()).unwrap();
    let mixed = CertBundle {
        key_pem: b.key_pem.clone(),
        ..a.clone()
    };
    assert!(check(&mixed, &names, SystemTime::now()).is_err());
    let wrong_ca = CertBundle {
        ca_pem: b.ca_pem.clone(),
        ..a.clone()
    };
    assert!(check(&wrong_ca, &names, SystemTime::now()).is_err());
    let later = SystemTime::now() + Duration::from_secs(400 * 24 * 3600);
    let err = check(&a, &names, later).unwrap_err();
    assert!(err.contains("not valid for hami-webhook"), "{err}");
}
