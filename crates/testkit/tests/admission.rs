//! Mutating admission against the real `hami-webhook` over HTTPS (and a recording
//! webhook for the wire details): patches applied, denials with the webhook's
//! status, selectors, failure policies, timeouts, TLS verification, review versions,
//! reinvocation and warnings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use hami_server::chunked::ChunkedBody;
use hami_server::test_support::TestCa;
use hami_server::{CancellationToken, TlsConfig, handler_fn};
use hami_testkit::ApiServer;
use hami_webhook::rules::RuleConfig;
use hami_webhook::run::{Service, serve_service};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use serde_json::{Value, json};
use tokio::net::TcpListener;

const NS: &str = "kube-system";
const SVC: &str = "hami-webhook";

struct Tls {
    ca: TestCa,
    cert: PathBuf,
    key: PathBuf,
    dir: PathBuf,
}

impl Drop for Tls {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tls(tag: &str) -> Tls {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = std::env::temp_dir().join(format!(
        "testkit-admission-{tag}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = TestCa::new("admission test ca").unwrap();
    let leaf = ca
        .leaf("webhook", &[&format!("{SVC}.{NS}.svc"), "127.0.0.1"])
        .unwrap();
    let cert = dir.join("tls.crt");
    let key = dir.join("tls.key");
    std::fs::write(&cert, &leaf.cert).unwrap();
    std::fs::write(&key, &leaf.key).unwrap();
    Tls { ca, cert, key, dir }
}

fn ca_bundle(ca: &TestCa) -> String {
    base64::engine::general_purpose::STANDARD.encode(ca.pem())
}

/// The real hami-webhook on 127.0.0.1 over HTTPS; stops when the token drops.
async fn start_hami_webhook(t: &Tls) -> (SocketAddr, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    tokio::spawn(serve_service(
        Service {
            listener,
            admin_listener,
            tls: TlsConfig::Files {
                cert: t.cert.clone(),
                key: t.key.clone(),
            },
            rules: RuleConfig::default(),
            body_limit: 3 * 1024 * 1024,
            certificate_check: hami_webhook::run::CERTIFICATE_CHECK,
            restart: hami_server::supervise::RestartPolicy::default(),
            quota_client: None,
        },
        shutdown.clone(),
    ));
    (addr, shutdown)
}

/// A webhook that records every review and answers with `respond(review)`.
type Responder = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

async fn start_recorder(
    t: &Tls,
    respond: Responder,
) -> (SocketAddr, Arc<Mutex<Vec<Value>>>, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let shutdown = CancellationToken::new();
    let log = seen.clone();
    let handler = handler_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let log = log.clone();
        let respond = respond.clone();
        async move {
            let uri = req.uri().to_string();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let mut review: Value = serde_json::from_slice(&body).unwrap();
            review["_uri"] = uri.into();
            let answer = respond(&review);
            log.lock().unwrap().push(review);
            hyper::Response::builder()
                .header("content-type", "application/json")
                .body(ChunkedBody::from(Bytes::from(
                    serde_json::to_vec(&answer).unwrap(),
                )))
                .unwrap()
        }
    });
    tokio::spawn(hami_server::serve(
        listener,
        TlsConfig::Files {
            cert: t.cert.clone(),
            key: t.key.clone(),
        },
        handler,
        shutdown.clone(),
    ));
    (addr, seen, shutdown)
}

fn allow_with(patch: Option<Value>, warnings: &[&str]) -> Responder {
    let warnings: Vec<String> = warnings.iter().map(|s| s.to_string()).collect();
    Arc::new(move |review: &Value| {
        let mut resp = json!({"uid": review["request"]["uid"], "allowed": true});
        if let Some(p) = &patch {
            resp["patchType"] = "JSONPatch".into();
            resp["patch"] = base64::engine::general_purpose::STANDARD
                .encode(serde_json::to_vec(p).unwrap())
                .into();
        }
        if !warnings.is_empty() {
            resp["warnings"] = json!(warnings);
        }
        json!({"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": resp})
    })
}

fn client(server: &ApiServer) -> Client {
    Client::try_from(Config::new(server.url().parse().unwrap())).unwrap()
}

/// A MutatingWebhookConfiguration as HAMi's chart writes it.
fn hami_config(name: &str, client_config: Value, extra: Value) -> Value {
    let mut hook = json!({
        "name": "vgpu.hami.io",
        "clientConfig": client_config,
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
        "namespaceSelector": {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]},
        "objectSelector": {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]},
    });
    for (k, v) in extra.as_object().unwrap() {
        hook[k] = v.clone();
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [hook],
    })
}

async fn configure(server: &ApiServer, cfg: Value) {
    let res = hami_testkit::resources::MUTATING_WEBHOOK_CONFIGURATIONS;
    server.store().create(&res, None, cfg).unwrap();
}

fn gpu_pod(name: &str, labels: Value, privileged: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{
            "name": "main", "image": "nvidia/cuda:12.4.0-base-ubuntu22.04",
            "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}},
            "securityContext": {"privileged": privileged}
        }]}
    }))
    .unwrap()
}

fn plain_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1"}]}
    }))
    .unwrap()
}

fn api_error(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn hami_webhook_mutates_denies_and_is_skipped_by_selectors() {
    let t = tls("hami");
    let server = ApiServer::start().await.unwrap();
    let (addr, _stop) = start_hami_webhook(&t).await;
    server.register_service(NS, SVC, 443, addr);
    configure(
        &server,
        hami_config(
            "hami-webhook",
            json!({"service": {"namespace": NS, "name": SVC, "path": "/mutate"}, "caBundle": ca_bundle(&t.ca)}),
            json!({}),
        ),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let pp = PostParams::default();

    let gpu = pods
        .create(&pp, &gpu_pod("gpu", json!({}), false))
        .await
        .unwrap();
    let spec = gpu.spec.unwrap();
    assert_eq!(spec.scheduler_name.as_deref(), Some("hami-scheduler"));
    // Defaulting ran before the webhook (requests copied from limits) and is kept.
    let req = spec.containers[0]
        .resources
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap();
    assert_eq!(req["nvidia.com/gpumem"].0, "3000");
    let stored = pods.get("gpu").await.unwrap();
    assert_eq!(
        stored.spec.unwrap().scheduler_name.as_deref(),
        Some("hami-scheduler")
    );

    let plain = pods.create(&pp, &plain_pod("plain")).await.unwrap();
    assert_eq!(
        plain.spec.unwrap().scheduler_name.as_deref(),
        Some("default-scheduler")
    );

    let (code, _, message) = api_error(
        pods.create(&pp, &gpu_pod("root", json!({}), true))
            .await
            .unwrap_err(),
    );
    assert!((400..500).contains(&code), "{code}");
    assert!(
        message.starts_with(
            "admission webhook \"vgpu.hami.io\" denied the request: container main is privileged"
        ),
        "{message}"
    );
    assert!(
        pods.get_opt("root").await.unwrap().is_none(),
        "denied pods are not stored"
    );

    // objectSelector and namespaceSelector keep labelled pods and namespaces out.
    let skipped = pods
        .create(
            &pp,
            &gpu_pod("opted-out", json!({"hami.io/webhook": "ignore"}), true),
        )
        .await
        .unwrap();
    assert_eq!(
        skipped.spec.unwrap().scheduler_name.as_deref(),
        Some("default-scheduler")
    );
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client(&server));
    namespaces
        .create(
            &pp,
            &serde_json::from_value(
                json!({"metadata": {"name": "quiet", "labels": {"hami.io/webhook": "ignore"}}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let quiet: Api<Pod> = Api::namespaced(client(&server), "quiet");
    let q = quiet
        .create(&pp, &gpu_pod("q", json!({}), true))
        .await
        .unwrap();
    assert_eq!(
        q.spec.unwrap().scheduler_name.as_deref(),
        Some("default-scheduler")
    );
}

#[tokio::test]
async fn url_webhooks_and_v1beta1_reviews() {
    let t = tls("url");
    let server = ApiServer::start().await.unwrap();
    let (addr, _stop) = start_hami_webhook(&t).await;
    configure(
        &server,
        hami_config(
            "by-url",
            json!({"url": format!("https://127.0.0.1:{}/webhook", addr.port()), "caBundle": ca_bundle(&t.ca)}),
            json!({"admissionReviewVersions": ["v1beta1"]}),
        ),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let gpu = pods
        .create(&PostParams::default(), &gpu_pod("gpu", json!({}), false))
        .await
        .unwrap();
    assert_eq!(
        gpu.spec.unwrap().scheduler_name.as_deref(),
        Some("hami-scheduler")
    );
}

#[tokio::test]
async fn review_wire_shape_warnings_and_version_choice() {
    let t = tls("shape");
    let server = ApiServer::start().await.unwrap();
    let patch = json!([{"op": "add", "path": "/metadata/labels", "value": {"seen": "yes"}}]);
    let (addr, seen, _stop) = start_recorder(
        &t,
        allow_with(Some(patch), &["be careful", "twice \"quoted\""]),
    )
    .await;
    server.register_service(NS, SVC, 8443, addr);
    configure(
        &server,
        hami_config(
            "recorder",
            json!({"service": {"namespace": NS, "name": SVC, "path": "/mutate", "port": 8443}, "caBundle": ca_bundle(&t.ca)}),
            json!({"admissionReviewVersions": ["v2", "v1", "v1beta1"], "timeoutSeconds": 7}),
        ),
    )
    .await;
    // Over raw HTTP to see the Warning headers kubectl prints.
    let body = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "job-"},
                      "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let resp = hami_server::test_support::http_request(
        server.addr(),
        hami_server::test_support::request(
            "POST",
            "/api/v1/namespaces/default/pods?fieldManager=kubectl-create",
            serde_json::to_vec(&body).unwrap(),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status.as_u16(), 201, "{}", resp.text());
    let warnings: Vec<&str> = resp
        .headers
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        warnings,
        ["299 - \"be careful\"", "299 - \"twice \\\"quoted\\\"\""]
    );
    let created: Value = serde_json::from_slice(&resp.body).unwrap();
    assert_eq!(created["metadata"]["labels"]["seen"], "yes");
    assert!(
        created["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("job-")
    );

    let reviews = seen.lock().unwrap().clone();
    assert_eq!(reviews.len(), 1);
    let r = &reviews[0];
    assert_eq!(r["_uri"], "/mutate?timeout=7s");
    assert_eq!(
        r["apiVersion"], "admission.k8s.io/v1",
        "first supported of the list"
    );
    assert_eq!(r["kind"], "AdmissionReview");
    let q = &r["request"];
    assert_eq!(q["uid"].as_str().unwrap().len(), 36);
    assert_eq!(
        q["kind"],
        json!({"group": "", "version": "v1", "kind": "Pod"})
    );
    assert_eq!(
        q["resource"],
        json!({"group": "", "version": "v1", "resource": "pods"})
    );
    assert_eq!(q["requestKind"], q["kind"]);
    assert_eq!(q["requestResource"], q["resource"]);
    assert_eq!(q["namespace"], "default");
    assert!(
        q.get("name").is_none(),
        "generateName: no name yet, as on the real server"
    );
    assert_eq!(q["operation"], "CREATE");
    assert_eq!(q["userInfo"]["username"], "system:admin");
    assert_eq!(q["dryRun"], false);
    assert_eq!(
        q["options"],
        json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-create"})
    );
    assert_eq!(
        q["object"]["spec"]["schedulerName"], "default-scheduler",
        "defaulted before admission"
    );
    assert_eq!(q["object"]["metadata"]["namespace"], "default");
    assert!(q["object"]["metadata"].get("uid").is_none());
}

#[tokio::test]
async fn failure_policies_timeouts_and_tls_verification() {
    let t = tls("fail");
    let server = ApiServer::start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let pp = PostParams::default();

    // A service nobody registered: Fail refuses the create, Ignore admits it.
    configure(
        &server,
        hami_config(
            "a-missing",
            json!({"service": {"namespace": NS, "name": "nowhere"}, "caBundle": ca_bundle(&t.ca)}),
            json!({}),
        ),
    )
    .await;
    let (code, reason, message) = api_error(pods.create(&pp, &plain_pod("p1")).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (500, "InternalError"));
    assert!(message.starts_with("Internal error occurred: failed calling webhook \"vgpu.hami.io\": failed to call webhook: Post \"https://nowhere.kube-system.svc:443/?timeout=10s\""), "{message}");
    let mwc: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        Api::all(client(&server));
    mwc.patch(
        "a-missing",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Json::<()>(
            serde_json::from_value(
                json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]),
            )
            .unwrap(),
        ),
    )
    .await
    .unwrap();
    pods.create(&pp, &plain_pod("p1")).await.unwrap();

    // A server whose certificate the caBundle does not vouch for.
    let (addr, _stop) = start_hami_webhook(&t).await;
    server.register_service(NS, SVC, 443, addr);
    let other_ca = TestCa::new("someone else").unwrap();
    configure(&server, hami_config("b-wrong-ca", json!({"service": {"namespace": NS, "name": SVC, "path": "/mutate"}, "caBundle": ca_bundle(&other_ca)}), json!({}))).await;
    let (code, _, message) = api_error(pods.create(&pp, &plain_pod("p2")).await.unwrap_err());
    assert_eq!(code, 500);
    assert!(message.contains("tls"), "{message}");
    mwc.delete("b-wrong-ca", &Default::default()).await.unwrap();

    // A webhook that accepts connections and never answers: the call times out.
    let hang = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hang_addr = hang.local_addr().unwrap();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = hang.accept().await {
            held.push(s);
        }
    });
    configure(
        &server,
        hami_config(
            "c-slow",
            json!({"url": format!("https://127.0.0.1:{}/", hang_addr.port()), "caBundle": ca_bundle(&t.ca)}),
            json!({"timeoutSeconds": 1}),
        ),
    )
    .await;
    let started = std::time::Instant::now();
    let (code, _, message) = api_error(pods.create(&pp, &plain_pod("p3")).await.unwrap_err());
    assert_eq!(code, 500);
    assert!(message.contains("context deadline exceeded"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the 1 s timeout applied"
    );
    holder.abort();

    // A webhook that takes no version the server speaks fails as a call error.
    mwc.delete("c-slow", &Default::default()).await.unwrap();
    configure(&server, hami_config("d-versions", json!({"service": {"namespace": NS, "name": SVC, "path": "/mutate"}, "caBundle": ca_bundle(&t.ca)}), json!({"admissionReviewVersions": ["v2"]}))).await;
    let (_, _, message) = api_error(pods.create(&pp, &plain_pod("p4")).await.unwrap_err());
    assert!(message.contains("admissionReviewVersions"), "{message}");
}

#[tokio::test]
async fn reinvocation_and_order_of_configurations() {
    let t = tls("reinvoke");
    let server = ApiServer::start().await.unwrap();
    // "a-first" labels the pod with how many labels it saw; "b-second" adds one.
    let counting: Responder = Arc::new(|review: &Value| {
        let n = review["request"]["object"]["metadata"]["labels"]
            .as_object()
            .map_or(0, |m| m.len());
        let patch = json!([{"op": "add", "path": "/metadata/annotations", "value": {"labels-seen": n.to_string()}}]);
        allow_with(Some(patch), &[])(review)
    });
    let (first, first_seen, _s1) = start_recorder(&t, counting).await;
    let (second, second_seen, _s2) = start_recorder(
        &t,
        allow_with(
            Some(json!([{"op": "add", "path": "/metadata/labels", "value": {"added": "by-b"}}])),
            &[],
        ),
    )
    .await;
    let url = |a: SocketAddr| json!({"url": format!("https://127.0.0.1:{}/m", a.port()), "caBundle": ca_bundle(&t.ca)});
    // Created in reverse order: calls go by configuration name.
    configure(&server, hami_config("b-second", url(second), json!({}))).await;
    configure(
        &server,
        hami_config(
            "a-first",
            url(first),
            json!({"reinvocationPolicy": "IfNeeded"}),
        ),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let p = pods
        .create(&PostParams::default(), &plain_pod("p"))
        .await
        .unwrap();
    assert_eq!(
        first_seen.lock().unwrap().len(),
        2,
        "reinvoked once after b changed the pod"
    );
    assert_eq!(second_seen.lock().unwrap().len(), 1);
    let annotations = p.metadata.annotations.unwrap();
    assert_eq!(
        annotations["labels-seen"], "1",
        "the reinvocation saw b's label"
    );
    assert_eq!(p.metadata.labels.unwrap()["added"], "by-b");
}
