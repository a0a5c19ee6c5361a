#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The service over real sockets: HTTPS with rcgen certificates (and their rotation),
//! both paths, body limits, garbage, and the admin port's metrics.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{container, patched, pod, review};
use hami_server::test_support::{TestCa, http_request, https_request, request, write_atomically};
use hami_server::{CancellationToken, TlsConfig};
use hami_webhook::rules::RuleConfig;
use hami_webhook::run::{RunError, Service, serve_service};
use hyper::StatusCode;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

struct Running {
    addr: SocketAddr,
    admin: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), RunError>>,
    _dir: TempDir,
    cert: PathBuf,
    key: PathBuf,
    ca: TestCa,
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn start(body_limit: usize) -> Running {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("hami-webhook-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = TestCa::new("webhook test ca").unwrap();
    let leaf = ca
        .leaf(
            "hami-webhook",
            &["hami-webhook.kube-system.svc", "127.0.0.1"],
        )
        .unwrap();
    let cert = dir.join("tls.crt");
    let key = dir.join("tls.key");
    std::fs::write(&cert, &leaf.cert).unwrap();
    std::fs::write(&key, &leaf.key).unwrap();

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let admin = admin_listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve_service(
        Service {
            listener,
            admin_listener,
            tls: TlsConfig::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            rules: RuleConfig::default(),
            body_limit,
            certificate_check: Duration::from_millis(50),
            restart: hami_server::supervise::RestartPolicy::default(),
            quota_client: None,
        },
        shutdown.clone(),
    ));
    Running {
        addr,
        admin,
        shutdown,
        task,
        _dir: TempDir(dir),
        cert,
        key,
        ca,
    }
}

impl Running {
    async fn post(
        &self,
        path: &str,
        body: impl Into<bytes::Bytes>,
    ) -> (StatusCode, Value, Vec<u8>) {
        let resp = https_request(
            self.addr,
            "hami-webhook.kube-system.svc",
            &self.ca.pem(),
            request("POST", path, body).unwrap(),
        )
        .await
        .unwrap();
        let json = serde_json::from_slice(&resp.body).unwrap_or(Value::Null);
        (
            resp.status,
            json,
            resp.peer_cert
                .map(|c| c.as_ref().to_vec())
                .unwrap_or_default(),
        )
    }

    async fn admin_get(&self, path: &str) -> (StatusCode, String) {
        let resp = http_request(self.admin, request("GET", path, "").unwrap())
            .await
            .unwrap();
        (resp.status, resp.text())
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn admission_over_https_on_both_paths() {
    let srv = start(1 << 20).await;
    let original = pod(vec![container("train", json!({"nvidia.com/gpu": "2"}))]);
    for (path, version) in [
        ("/mutate", "admission.k8s.io/v1"),
        ("/webhook", "admission.k8s.io/v1beta1"),
    ] {
        let body = serde_json::to_vec(&review(version, "uid-https", original.clone())).unwrap();
        let (status, resp, _) = srv.post(path, body).await;
        assert_eq!(status, StatusCode::OK, "{resp}");
        assert_eq!(resp["apiVersion"], version);
        assert_eq!(resp["response"]["uid"], "uid-https");
        let got = patched(&original, &resp);
        assert_eq!(got["spec"]["schedulerName"], "hami-scheduler");
        assert_eq!(
            got["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"],
            "100"
        );
    }
    srv.stop().await;
}

#[tokio::test]
async fn garbage_oversized_and_wrong_routes_get_4xx_and_the_server_survives() {
    let srv = start(4096).await;
    let (status, body, _) = srv.post("/mutate", "this is not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("body is not an AdmissionReview"),
        "{body}"
    );

    let (status, body, _) = srv
        .post(
            "/mutate",
            r#"{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("unsupported AdmissionReview apiVersion")
    );

    let big = vec![b' '; 5000];
    let (status, body, _) = srv.post("/mutate", big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        body["error"],
        "request body is larger than the limit of 4096 bytes"
    );

    let (status, _, _) = srv.post("/other", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let get = https_request(
        srv.addr,
        "127.0.0.1",
        &srv.ca.pem(),
        request("GET", "/mutate", "").unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(get.status, StatusCode::METHOD_NOT_ALLOWED);

    // Still serving.
    let ok = serde_json::to_vec(&review(
        "admission.k8s.io/v1",
        "after",
        pod(vec![container("c", json!({}))]),
    ))
    .unwrap();
    let (status, resp, _) = srv.post("/mutate", ok).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(resp["response"]["allowed"], true);
    srv.stop().await;
}

#[tokio::test]
async fn certificate_rotation_is_picked_up() {
    let srv = start(1 << 20).await;
    let body = serde_json::to_vec(&review(
        "admission.k8s.io/v1",
        "r",
        pod(vec![container("c", json!({}))]),
    ))
    .unwrap();
    let (_, _, first) = srv.post("/mutate", body.clone()).await;
    assert!(!first.is_empty());

    let next = srv
        .ca
        .leaf("hami-webhook-rotated", &["hami-webhook.kube-system.svc"])
        .unwrap();
    write_atomically(&srv.key, next.key.as_bytes()).unwrap();
    write_atomically(&srv.cert, next.cert.as_bytes()).unwrap();
    let (status, _, second) = srv.post("/mutate", body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(second, next.der);
    assert_ne!(second, first);
    srv.stop().await;
}

impl Running {
    /// Waits (bounded) until `/readyz` answers `status` with a text containing `text`.
    async fn wait_ready(&self, status: StatusCode, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (got, body) = self.admin_get("/readyz").await;
            if got == status && body.contains(text) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "/readyz stayed {got} {body:?}, waiting for {status} {text:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The certificate check task: an expired certificate in the files (which the server
/// serves, as it is a usable pair) turns `/readyz` not ready naming the file; a valid
/// one makes it ready again; files that do not load leave the previous verdict.
#[tokio::test]
async fn readiness_follows_the_validity_of_the_served_certificate() {
    let srv = start(1 << 20).await;
    srv.wait_ready(StatusCode::OK, "ready").await;
    let sans = ["hami-webhook.kube-system.svc"];
    let old = srv.ca.expired_leaf("hami-webhook-old", &sans).unwrap();
    write_atomically(&srv.key, old.key.as_bytes()).unwrap();
    write_atomically(&srv.cert, old.cert.as_bytes()).unwrap();
    let expected = format!(
        "tls certificate: the certificate served from {} expired at 2001-01-01T00:00:00Z",
        srv.cert.display()
    );
    srv.wait_ready(StatusCode::SERVICE_UNAVAILABLE, &expected)
        .await;
    // Garbage in the files: the expired pair stays in use, and so does the verdict.
    write_atomically(&srv.cert, b"not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    srv.wait_ready(StatusCode::SERVICE_UNAVAILABLE, &expected)
        .await;
    let fresh = srv.ca.leaf("hami-webhook-new", &sans).unwrap();
    write_atomically(&srv.key, fresh.key.as_bytes()).unwrap();
    write_atomically(&srv.cert, fresh.cert.as_bytes()).unwrap();
    srv.wait_ready(StatusCode::OK, "ready").await;
    srv.stop().await;
}

#[tokio::test]
async fn admin_port_reports_readiness_and_metrics() {
    let srv = start(4096).await;
    assert_eq!(srv.admin_get("/livez").await.0, StatusCode::OK);
    assert_eq!(srv.admin_get("/readyz").await.0, StatusCode::OK);

    let gpu = serde_json::to_vec(&review(
        "admission.k8s.io/v1",
        "m1",
        pod(vec![container("c", json!({"nvidia.com/gpu": "1"}))]),
    ))
    .unwrap();
    let mut privileged = pod(vec![container("c", json!({"nvidia.com/gpu": "1"}))]);
    privileged["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    let denied = serde_json::to_vec(&review("admission.k8s.io/v1", "m2", privileged)).unwrap();
    srv.post("/mutate", gpu.clone()).await;
    srv.post("/mutate", gpu).await;
    srv.post("/mutate", denied).await;
    srv.post("/mutate", "junk").await;

    let (status, text) = srv.admin_get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        text.contains(r#"hami_webhook_admission_requests_total{result="patched",rule="none"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"hami_webhook_admission_requests_total{result="denied",rule="privileged"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"hami_webhook_admission_requests_total{result="bad_request",rule="none"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains("hami_webhook_admission_duration_seconds_count 4"),
        "{text}"
    );
    srv.stop().await;
}

#[tokio::test]
async fn unusable_certificate_stops_startup_with_a_clear_error() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = serve_service(
        Service {
            listener,
            admin_listener,
            tls: TlsConfig::Files {
                cert: "/nonexistent/tls.crt".into(),
                key: "/nonexistent/tls.key".into(),
            },
            rules: RuleConfig::default(),
            body_limit: 1024,
            certificate_check: hami_webhook::run::CERTIFICATE_CHECK,
            restart: hami_server::supervise::RestartPolicy::default(),
            quota_client: None,
        },
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/tls.crt"), "{err}");
}
