//! The cluster fixture end to end: GPU nodes whose register annotation a reader
//! decodes, GPU pods created over HTTP through the real hami-webhook, the scheduler
//! emulator and an extender that places by the registered devices, and waits that
//! report what they waited for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use hami_core::codec::decode_node_register;
use hami_server::chunked::ChunkedBody;
use hami_server::test_support::TestCa;
use hami_server::{CancellationToken, TlsConfig, handler_fn};
use hami_testkit::fixture::{Cluster, GPU, GPUMEM, GpuNode, GpuPod, REGISTER_ANNOTATION};
use hami_testkit::scheduler::{ExtenderConfig, ManagedResource, Scheduler, SchedulerConfig};
use hami_webhook::rules::RuleConfig;
use hami_webhook::run::{Service, serve_service};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::net::TcpListener;

const WAIT: Duration = Duration::from_secs(30);

/// An extender (not node-cache capable: it gets whole nodes) that keeps the nodes
/// with enough healthy registered GPUs of enough memory, like a tiny HAMi.
async fn device_extender() -> (std::net::SocketAddr, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let handler = handler_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let args: Value = serde_json::from_slice(&body).unwrap();
        let limits = &args["Pod"]["spec"]["containers"][0]["resources"]["limits"];
        let want = |k: &str| {
            limits[k]
                .as_str()
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(0)
        };
        let (gpus, mem) = (want(GPU).max(1), want(GPUMEM));
        let mut keep = Vec::new();
        let mut failed = BTreeMap::new();
        for node in args["Nodes"]["items"].as_array().unwrap() {
            let reg = node["metadata"]["annotations"][REGISTER_ANNOTATION]
                .as_str()
                .unwrap_or("");
            let devices = decode_node_register(reg).unwrap_or_default();
            let fitting = devices
                .iter()
                .filter(|d| d.health && d.mem_mib >= mem)
                .count() as u32;
            if fitting >= gpus {
                keep.push(node.clone());
            } else {
                failed.insert(
                    node["metadata"]["name"].as_str().unwrap().to_string(),
                    "CardInsufficientMemory".to_string(),
                );
            }
        }
        let out = json!({"Nodes": {"metadata": {}, "items": keep}, "NodeNames": null, "FailedNodes": failed, "Error": ""});
        hyper::Response::builder()
            .header("content-type", "application/json")
            .body(ChunkedBody::from(Bytes::from(
                serde_json::to_vec(&out).unwrap(),
            )))
            .unwrap()
    });
    tokio::spawn(hami_server::serve(
        listener,
        TlsConfig::None,
        handler,
        stop.clone(),
    ));
    (addr, stop)
}

struct Webhook {
    _stop: CancellationToken,
    dir: std::path::PathBuf,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The real hami-webhook behind a MutatingWebhookConfiguration in `cluster`.
async fn install_webhook(cluster: &Cluster) -> Webhook {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = std::env::temp_dir().join(format!("fixture-webhook-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = TestCa::new("fixture ca").unwrap();
    let leaf = ca
        .leaf("hami-webhook", &["hami-webhook.kube-system.svc"])
        .unwrap();
    std::fs::write(dir.join("tls.crt"), &leaf.cert).unwrap();
    std::fs::write(dir.join("tls.key"), &leaf.key).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    cluster.server().register_service(
        "kube-system",
        "hami-webhook",
        443,
        listener.local_addr().unwrap(),
    );
    let stop = CancellationToken::new();
    tokio::spawn(serve_service(
        Service {
            listener,
            admin_listener,
            tls: TlsConfig::Files {
                cert: dir.join("tls.crt"),
                key: dir.join("tls.key"),
            },
            rules: RuleConfig::default(),
            body_limit: 1 << 20,
            certificate_check: hami_webhook::run::CERTIFICATE_CHECK,
            restart: hami_server::supervise::RestartPolicy::default(),
            quota_client: None,
        },
        stop.clone(),
    ));
    cluster
        .store()
        .create(
            &hami_testkit::resources::MUTATING_WEBHOOK_CONFIGURATIONS,
            None,
            json!({"metadata": {"name": "hami-webhook"}, "webhooks": [{
                "name": "vgpu.hami.io",
                "clientConfig": {"service": {"namespace": "kube-system", "name": "hami-webhook", "path": "/mutate"},
                                 "caBundle": base64::engine::general_purpose::STANDARD.encode(ca.pem())},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            }]}),
        )
        .unwrap();
    Webhook { _stop: stop, dir }
}

#[tokio::test]
async fn gpu_pods_go_through_webhook_scheduler_and_extender() {
    let cluster = Cluster::start().await.unwrap();
    let nodes = cluster.add_gpu_nodes(2, 4).unwrap();
    assert_eq!(nodes[1].name, "gpu-node-1");
    // A third node whose GPUs are small and one unhealthy.
    cluster
        .add_node(&GpuNode::new("small-node", 2).memory_mib(8192).unhealthy(1))
        .unwrap();
    let _webhook = install_webhook(&cluster).await;
    let (ext_addr, _ext) = device_extender().await;
    let ext = ExtenderConfig {
        url_prefix: format!("http://{ext_addr}"),
        bind_verb: String::new(),
        node_cache_capable: false,
        managed_resources: [GPU, GPUMEM]
            .iter()
            .map(|r| ManagedResource {
                name: r.to_string(),
                ignored_by_scheduler: true,
            })
            .collect(),
        ..ExtenderConfig::default()
    };
    let _sched = Scheduler::start(
        cluster.client().unwrap(),
        SchedulerConfig {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
            ..SchedulerConfig::new("hami-scheduler").with_extender(ext)
        },
    );

    // No schedulerName: the webhook routes the GPU pod to hami-scheduler.
    let created = cluster
        .create_pod(&GpuPod::new("small").gpus(1).gpumem(4000))
        .await
        .unwrap();
    assert_eq!(created["spec"]["schedulerName"], "hami-scheduler");
    let node = cluster
        .wait_pod_bound("default", "small", WAIT)
        .await
        .unwrap();
    assert_eq!(node, "gpu-node-0", "first feasible node by name");
    let scheduled = cluster
        .wait_for("the Scheduled event of small", WAIT, |_| {
            cluster
                .events_for("default", "small")
                .into_iter()
                .find(|e| e["reason"] == "Scheduled")
        })
        .await
        .unwrap();
    assert_eq!(
        scheduled["message"],
        "Successfully assigned default/small to gpu-node-0"
    );

    // Two 8 GiB GPUs needed: the small node has one healthy one.
    cluster.add_namespace("team-a", &[("team", "a")]).unwrap();
    cluster
        .create_pod(&GpuPod::new("pair").namespace("team-a").gpus(2).gpumem(6000))
        .await
        .unwrap();
    assert_eq!(
        cluster
            .wait_pod_bound("team-a", "pair", WAIT)
            .await
            .unwrap(),
        "gpu-node-0"
    );

    let _ = cluster
        .create_pod(&GpuPod::new("huge").gpus(1).gpumem(100_000))
        .await
        .unwrap();
    let (reason, message) = cluster
        .wait_pod_unschedulable("default", "huge", WAIT)
        .await
        .unwrap();
    assert_eq!(reason, "Unschedulable");
    assert_eq!(
        message,
        "0/3 nodes are available: 3 CardInsufficientMemory."
    );
    let err = cluster
        .wait_pod_bound("default", "huge", Duration::from_millis(300))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "timed out after 300ms waiting for pod default/huge to be bound to a node"
        ),
        "{text}"
    );
    assert!(
        text.contains("PodScheduled=False Unschedulable: 0/3 nodes are available"),
        "{text}"
    );
}

#[tokio::test]
async fn waits_name_what_is_missing() {
    let cluster = Cluster::start().await.unwrap();
    let err = cluster
        .wait_pod_bound("default", "ghost", Duration::from_millis(100))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "timed out after 100ms waiting for pod default/ghost to be bound to a node (last seen: no such pod)"
    );
    let err = cluster
        .wait_pod_unschedulable("default", "ghost", Duration::from_millis(100))
        .await
        .unwrap_err();
    assert_eq!(
        err.what,
        "pod default/ghost to be marked PodScheduled=False"
    );
    // A custom wait on the store ends as soon as the awaited change lands.
    let store = Arc::clone(cluster.store());
    let later = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        store
            .create(
                &hami_testkit::resources::NODES,
                None,
                GpuNode::new("late", 1).to_object(),
            )
            .unwrap();
    });
    let gpus = cluster
        .wait_for("node late", WAIT, |s| {
            s.get(&hami_testkit::resources::NODES, None, "late")
                .ok()
                .and_then(|n| n.pointer("/status/allocatable/nvidia.com~1gpu").cloned())
        })
        .await
        .unwrap();
    assert_eq!(gpus, "10");
    later.await.unwrap();
}
