//! Failure paths: every early return gives back what it took, bad input never panics,
//! and nodes whose device plugin stops reporting leave and rejoin scheduling.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, Knobs, chosen, decided_by_hami, gpu_pod, gpus, node_object};
use hami_core::codec::{NodeLock, encode_node_lock};
use hami_k8s::patch::{MetadataPatch, PodRef, patch_node, patch_pod};
use hami_server::test_support::{http_request, request};
use hami_testkit::store::{DeleteOptions, Preconditions};
use hami_testkit::{Fault, resources};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn limits(mem: u32) -> serde_json::Value {
    json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": mem.to_string()})
}

#[tokio::test]
async fn bind_refuses_wrong_nodes_unknown_pods_and_pods_deleted_after_filter() {
    install_crypto();
    let c = Cluster::start(
        &[("n1", gpus("n1", 1, 10_000)), ("n2", gpus("n2", 1, 10_000))],
        Knobs::default(),
    )
    .await;
    c.create(&gpu_pod("p", &[limits(6000)], json!({}))).await;
    let node = chosen(&c.filter("p").await).unwrap();
    let other = if node == "n1" { "n2" } else { "n1" };
    let b = c.bind("p", other).await;
    assert!(
        b.error
            .contains(&format!("placed on node {node} by /filter, not on {other}")),
        "{}",
        b.error
    );
    assert_eq!(c.node_lock(other).await, None);

    // Deleted between Filter and Bind: refused, nothing left behind.
    let uid = c.pods().get("p").await.unwrap().metadata.uid.unwrap();
    c.pods()
        .delete("p", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let b: hami_scheduler::wire::ExtenderBindingResult = c
        .post(
            "/bind",
            json!({"PodName": "p", "PodNamespace": "default", "PodUID": uid, "Node": node}),
        )
        .await;
    assert_ne!(b.error, "");
    assert_eq!(c.node_lock(&node).await, None, "lock left behind");
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.allocated_mem().await.values().sum::<u64>() != 0 {
        assert!(Instant::now() < deadline, "reservation left behind");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Never filtered.
    c.create(&gpu_pod("q", &[limits(100)], json!({}))).await;
    let b = c.bind("q", "n1").await;
    assert!(b.error.contains("must be filtered again"), "{}", b.error);
    let b: hami_scheduler::wire::ExtenderBindingResult = c
        .post(
            "/bind",
            json!({"PodName": "nope", "PodNamespace": "default", "PodUID": "x", "Node": "n1"}),
        )
        .await;
    assert!(b.error.contains("not found"), "{}", b.error);
    let b: hami_scheduler::wire::ExtenderBindingResult =
        c.post("/bind", json!({"PodName": "q"})).await;
    assert!(b.error.contains("PodNamespace"), "{}", b.error);
}

#[tokio::test]
async fn bind_waits_for_a_locked_node_then_proceeds() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 2, 10_000))], Knobs::default()).await;
    for name in ["a", "b"] {
        c.create(&gpu_pod(name, &[limits(1000)], json!({}))).await;
    }
    assert_eq!(c.schedule("a").await, "n1");
    assert_eq!(chosen(&c.filter("b").await).as_deref(), Some("n1"));
    // `a` is being allocated: `b`'s bind waits until the device plugin releases.
    let release = {
        let client = c.client.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            hami_k8s::lock::release(&client, "n1", "default", "a")
                .await
                .unwrap();
        })
    };
    let started = Instant::now();
    let b = c.bind("b", "n1").await;
    assert_eq!(b.error, "");
    assert!(
        started.elapsed() >= Duration::from_millis(350),
        "did not wait"
    );
    release.await.unwrap();
    assert!(c.node_lock("n1").await.unwrap().ends_with(",default,b"));
    assert!(
        c.metrics()
            .await
            .contains("hami_scheduler_node_lock_wait_seconds_count 1")
    );
}

/// One node locked by a live pod `holder`, and pod `p` filtered onto it.
async fn locked_by_holder(knobs: Knobs) -> Cluster {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 1, 10_000))], knobs).await;
    // A live lock: its pod is bound to the node and being allocated there.
    let mut holder = gpu_pod(
        "holder",
        &[json!({"cpu": "1"})],
        json!({"hami.io/bind-phase": "allocating"}),
    );
    holder.spec.as_mut().unwrap().node_name = Some("n1".into());
    c.create(&holder).await;
    let now = chrono::Utc::now().fixed_offset();
    patch_node(
        &c.client,
        "n1",
        &MetadataPatch::new().annotate(
            "hami.io/mutex.lock",
            encode_node_lock(&NodeLock::owned(now, "default", "holder")),
        ),
    )
    .await
    .unwrap();
    c.create(&gpu_pod("p", &[limits(9000)], json!({}))).await;
    assert_eq!(chosen(&c.filter("p").await).as_deref(), Some("n1"));
    c
}

#[tokio::test]
async fn bind_gives_up_on_a_node_locked_too_long_and_releases_the_reservation() {
    let c = locked_by_holder(Knobs {
        node_lock_wait: Duration::from_millis(300),
        ..Knobs::default()
    })
    .await;
    let b = c.bind("p", "n1").await;
    assert!(
        b.error.contains("locked by pod default/holder"),
        "{}",
        b.error
    );
    assert!(b.error.contains("--node-lock-wait"), "{}", b.error);
    // The other pod's lock is untouched, and p's GPUs are free again.
    assert!(
        c.node_lock("n1")
            .await
            .unwrap()
            .ends_with(",default,holder")
    );
    assert_eq!(c.allocated_mem().await["n1-gpu0"], 0);
    c.wait_event("p", "BindingFailed").await;
}

/// `--node-lock-wait 0` fails at once, as HAMi does, with HAMi's words for a locked node
/// (`node <n> has been locked within <timeout>`, the timeout as Go prints it). The case
/// of HAMi's `TestLockNodeWithTimeout` (pkg/util/nodelock): a fresh lock of a live pod,
/// a 2-minute lock timeout, `has been locked within 2m0s`.
#[tokio::test]
async fn bind_without_waiting_fails_at_once_in_hamis_words() {
    let c = locked_by_holder(Knobs {
        node_lock_wait: Duration::ZERO,
        node_lock_timeout: Duration::from_secs(120),
        ..Knobs::default()
    })
    .await;
    let started = Instant::now();
    let b = c.bind("p", "n1").await;
    assert!(
        b.error.starts_with("node n1 has been locked within 2m0s ("),
        "{}",
        b.error
    );
    assert!(
        b.error.contains("locked by pod default/holder"),
        "{}",
        b.error
    );
    assert!(started.elapsed() < Duration::from_secs(2), "it waited");
    assert_eq!(c.allocated_mem().await["n1-gpu0"], 0);
}

#[tokio::test]
async fn a_failed_binding_releases_lock_and_reservation() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 1, 10_000))], Knobs::default()).await;
    c.create(&gpu_pod("p", &[limits(5000)], json!({}))).await;
    assert!(chosen(&c.filter("p").await).is_some());
    c.wait_annotations("p", |a| a.contains_key("hami.io/vgpu-node"))
        .await;
    // The API server refuses every create (the Binding is a create).
    c.server
        .faults()
        .set_error_rate("create", 1.0, Fault::InternalError);
    let b = c.bind("p", "n1").await;
    c.server.faults().clear();
    assert!(
        b.error.contains("could not bind pod default/p to n1"),
        "{}",
        b.error
    );
    assert_eq!(c.node_lock("n1").await, None);
    assert_eq!(c.allocated_mem().await["n1-gpu0"], 0);
    // kube-scheduler retries: filter + bind work again.
    assert_eq!(c.schedule("p").await, "n1");
}

/// `hami_scheduler_reservations` as /metrics shows it, once it reads `want`.
async fn reservations_reach(c: &Cluster, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = c.metrics().await;
        let got = text
            .lines()
            .find_map(|l| l.strip_prefix("hami_scheduler_reservations "))
            .and_then(|v| v.trim().parse::<u64>().ok());
        if got == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "hami_scheduler_reservations stayed {got:?}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The reservations gauge counts pods holding GPUs while unbound: one per filtered pod
/// until it is bound, its bind fails or it is deleted.
#[tokio::test]
async fn the_reservations_gauge_counts_pods_holding_gpus_unbound() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 2, 10_000))], Knobs::default()).await;
    reservations_reach(&c, 0).await;
    for name in ["a", "b", "gone"] {
        c.create(&gpu_pod(name, &[limits(1000)], json!({}))).await;
        assert!(chosen(&c.filter(name).await).is_some());
    }
    reservations_reach(&c, 3).await;
    assert_eq!(c.bind("a", "n1").await.error, "");
    reservations_reach(&c, 2).await;
    c.pods()
        .delete("gone", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    reservations_reach(&c, 1).await;
    // a's device plugin is done with the node; b's Binding is refused: its reservation
    // ends too.
    hami_k8s::lock::release(&c.client, "n1", "default", "a")
        .await
        .unwrap();
    c.server
        .faults()
        .set_error_rate("create", 1.0, Fault::InternalError);
    assert_ne!(c.bind("b", "n1").await.error, "");
    c.server.faults().clear();
    reservations_reach(&c, 0).await;
}

#[tokio::test]
async fn a_failed_annotation_write_fails_the_bind_and_frees_the_gpus() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 1, 10_000))], Knobs::default()).await;
    c.create(&gpu_pod("p", &[limits(5000)], json!({}))).await;
    c.server
        .faults()
        .set_error_rate("patch", 1.0, Fault::InternalError);
    assert!(chosen(&c.filter("p").await).is_some());
    let b = c.bind("p", "n1").await;
    c.server.faults().clear();
    assert!(b.error.contains("could not be annotated"), "{}", b.error);
    assert_eq!(c.allocated_mem().await["n1-gpu0"], 0);
    assert_eq!(c.node_lock("n1").await, None);
}

/// Annotation writes the extender sends at once (`WRITES_IN_FLIGHT` in `filter.rs`).
const WRITES_IN_FLIGHT: usize = 16;

/// Pods of `names` the emulator's store shows annotated with their node.
fn annotated(c: &Cluster, names: &[String]) -> usize {
    let store = c.server.store();
    names
        .iter()
        .filter(|n| {
            store
                .get(&hami_testkit::resources::PODS, Some("default"), n)
                .is_ok_and(|p| !p["metadata"]["labels"]["hami.io/vgpu-node"].is_null())
        })
        .count()
}

/// Polls (bounded) until `annotated` reaches `want`.
async fn wait_annotated(c: &Cluster, names: &[String], want: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while annotated(c, names) < want {
        assert!(
            Instant::now() < deadline,
            "{} of {want} pods annotated",
            annotated(c, names)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_burst_of_annotation_writes_to_a_slow_api_server_waits_its_turn_and_all_land() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 4, 10_000))], Knobs::default()).await;
    let burst = WRITES_IN_FLIGHT + 8;
    let mut bodies = vec![];
    let mut names = vec![];
    for i in 0..burst {
        let pod = c
            .create(&gpu_pod(&format!("w{i:02}"), &[limits(100)], json!({})))
            .await;
        names.push(pod.metadata.name.clone().unwrap());
        bodies.push(json!({"Pod": pod, "Nodes": null, "NodeNames": ["n1"]}));
    }
    // Every write now takes 2 s at the API server; /filter itself asks it nothing.
    let latency = Duration::from_secs(2);
    c.server.faults().set_latency(latency);
    for body in bodies {
        let r: hami_scheduler::wire::ExtenderFilterResult = c.post("/filter", body).await;
        assert_eq!(chosen(&r).as_deref(), Some("n1"), "{r:?}");
    }
    // The first writes land together; the others were sent only as slots came free, a
    // whole latency later: a quarter of it after the first landed, none of them has.
    wait_annotated(&c, &names, 1).await;
    tokio::time::sleep(latency / 4).await;
    let first = annotated(&c, &names);
    assert!(
        first <= WRITES_IN_FLIGHT,
        "{first} writes of {burst} landed at once; at most {WRITES_IN_FLIGHT} may be in flight"
    );
    // None is dropped: every pod is annotated in the end.
    wait_annotated(&c, &names, burst).await;
    c.server.faults().clear();
}

#[tokio::test]
async fn garbage_bodies_and_hostile_objects_never_panic() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 1, 10_000))], Knobs::default()).await;
    for (path, body) in [
        ("/filter", "not json".to_string()),
        ("/filter", "{}".to_string()),
        ("/filter", "[1,2,3]".to_string()),
        (
            "/filter",
            json!({"Pod": {"spec": {"containers": "nope"}}}).to_string(),
        ),
        ("/bind", "\u{0}\u{1}".to_string()),
        ("/bind", json!({"PodName": 7}).to_string()),
    ] {
        let resp = http_request(c.ext.addr, request("POST", path, body).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status, 200, "{path}");
        let v: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
        assert_ne!(v["Error"], "", "{path}: {v}");
    }
    // A body over the limit is answered (with an in-band error) without being read:
    // the client may see the answer, or a connection closed under its upload.
    // Refused while uploading is fine too, as long as the server keeps serving (below).
    if let Ok(resp) = http_request(
        c.ext.addr,
        request("POST", "/filter", "x".repeat(2 * 1024 * 1024)).unwrap(),
    )
    .await
    {
        let v: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
        assert!(
            v["Error"]
                .as_str()
                .unwrap()
                .contains("larger than the limit"),
            "{v}"
        );
    }
    // And the server is still there.
    let resp = http_request(c.ext.addr, request("GET", "/filter", "").unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status, 405);
    let resp = http_request(c.ext.addr, request("POST", "/preempt", "{}").unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status, 404);

    // A pod with an invalid quantity: an in-band error naming the container.
    c.create(&gpu_pod(
        "bad",
        &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16Gi"})],
        json!({}),
    ))
    .await;
    let f = c.filter("bad").await;
    assert!(
        f.error.contains("c0") && f.error.contains("nvidia.com/gpumem"),
        "{}",
        f.error
    );
    // Invalid scoring weights.
    c.create(&gpu_pod(
        "w",
        &[limits(10)],
        json!({"hami.io/device-scoring-weights": "slot=1"}),
    ))
    .await;
    assert!(
        c.filter("w")
            .await
            .error
            .contains("hami.io/device-scoring-weights")
    );

    // Hostile node and pod annotations are skipped, the rest keeps working.
    let nodes: Api<Node> = Api::all(c.client.clone());
    let mut broken = node_object("broken", &gpus("broken", 1, 10_000), true);
    broken.metadata.annotations.as_mut().unwrap().insert(
        "hami.io/node-nvidia-register".into(),
        "GPU-0,10,oops".into(),
    );
    nodes.create(&PostParams::default(), &broken).await.unwrap();
    c.create(&gpu_pod("forged", &[json!({"cpu": "1"})], json!({})))
        .await;
    let forged = c.pods().get("forged").await.unwrap();
    patch_pod(
        &c.client,
        PodRef::of(&forged),
        &MetadataPatch::new()
            .annotate("hami.io/vgpu-node", "n1")
            .annotate("hami.io/vgpu-devices-allocated", "n1-gpu0,NVIDIA,-5,x:;"),
    )
    .await
    .unwrap();
    c.create(&gpu_pod("ok", &[limits(100)], json!({}))).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let why = loop {
        let f = c.filter_on("ok", Some(vec!["broken".into()])).await;
        let why = f
            .failed_nodes
            .and_then(|m| m.get("broken").cloned())
            .unwrap_or_default();
        if why.contains("is invalid") || Instant::now() > deadline {
            break why;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        why.contains("hami.io/node-nvidia-register is invalid"),
        "{why}"
    );
    let f = c
        .filter_on("ok", Some(vec!["broken".into(), "n1".into()]))
        .await;
    assert_eq!(chosen(&f).as_deref(), Some("n1"));
}

#[tokio::test]
async fn nodes_whose_plugin_stops_answering_leave_and_come_back() {
    install_crypto();
    let knobs = Knobs {
        registry_interval: Duration::from_millis(100),
        // Long enough that the filter right after the request is seen still finds the
        // node in on a loaded 2-core CI machine (1 s flaked there).
        handshake_timeout: Duration::from_secs(3),
        ..Knobs::default()
    };
    let c = Cluster::start(&[], knobs).await;
    // No allocatable GPUs reported by kubelet: the handshake decides.
    let nodes: Api<Node> = Api::all(c.client.clone());
    nodes
        .create(
            &PostParams::default(),
            &node_object("n1", &gpus("n1", 1, 10_000), false),
        )
        .await
        .unwrap();
    c.create(&gpu_pod("p", &[limits(100)], json!({}))).await;
    let handshake = || async {
        nodes
            .get("n1")
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap()
            .get("hami.io/node-handshake")
            .cloned()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !handshake()
        .await
        .is_some_and(|h| h.starts_with("Requesting_"))
    {
        assert!(Instant::now() < deadline, "no handshake request written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(chosen(&c.filter("p").await).as_deref(), Some("n1"));

    // Nobody answers: after the timeout the node is out, with a reason.
    let deadline = Instant::now() + Duration::from_secs(15);
    let why = loop {
        let f = c.filter("p").await;
        if let Some(why) = f.failed_nodes.and_then(|m| m.get("n1").cloned()) {
            break why;
        }
        assert!(Instant::now() < deadline, "node never taken out");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(why.contains("device plugin not reporting"), "{why}");
    // It stays out (HAMi would let it back in on the next round).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(chosen(&c.filter("p").await).is_none());

    // The plugin answers: back in, without anyone editing annotations by hand.
    patch_node(
        &c.client,
        "n1",
        &MetadataPatch::new().annotate("hami.io/node-handshake", "Reported 2026-11-23 10:00:00"),
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while chosen(&c.filter("p").await).is_none() {
        assert!(Instant::now() < deadline, "node never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // kubelet's allocatable devices count as proof of life too, whatever the handshake.
    let with_alloc = node_object("n1", &gpus("n1", 1, 10_000), true);
    let status = serde_json::to_value(&with_alloc.status).unwrap();
    nodes
        .patch_status(
            "n1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap();
    patch_node(
        &c.client,
        "n1",
        &MetadataPatch::new().annotate("hami.io/node-handshake", "Requesting_2020-01-01 00:00:00"),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(chosen(&c.filter("p").await).as_deref(), Some("n1"));
}

/// Pod `p` (one GPU, 2500 MiB, 40 % cores), placed and bound.
async fn schedule_one_gpu_pod(c: &Cluster) {
    c.create(&gpu_pod(
        "p",
        &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2500", "nvidia.com/gpucores": "40"})],
        json!({}),
    ))
    .await;
    c.schedule("p").await;
}

/// `--legacy-metrics` adds HAMi's pre-2.8 names with their labels (`docs/protocol.md#metrics`).
#[tokio::test]
async fn legacy_metric_names_on_request() {
    install_crypto();
    let knobs = Knobs {
        legacy_metrics: true,
        ..Knobs::default()
    };
    let c = Cluster::start(&[("n1", gpus("n1", 1, 10_000))], knobs).await;
    schedule_one_gpu_pod(&c).await;
    let m = c.metrics().await;
    for line in [
        "GPUDeviceMemoryLimit{zone=\"vGPU\",nodeid=\"n1\",deviceuuid=\"n1-gpu0\",deviceidx=\"0\",devicetype=\"NVIDIA-Tesla T4\"} 10485760000",
        "GPUDeviceCoreLimit{zone=\"vGPU\",nodeid=\"n1\",deviceuuid=\"n1-gpu0\",deviceidx=\"0\",devicetype=\"NVIDIA-Tesla T4\"} 100",
        "GPUDeviceMemoryAllocated{zone=\"vGPU\",nodeid=\"n1\",deviceuuid=\"n1-gpu0\",deviceidx=\"0\",devicetype=\"NVIDIA-Tesla T4\",devicecores=\"40\"} 2621440000",
        "GPUDeviceSharedNum{zone=\"vGPU\",nodeid=\"n1\",deviceuuid=\"n1-gpu0\",deviceidx=\"0\",devicetype=\"NVIDIA-Tesla T4\"} 1",
        "GPUDeviceCoreAllocated{zone=\"vGPU\",nodeid=\"n1\",deviceuuid=\"n1-gpu0\",deviceidx=\"0\",devicetype=\"NVIDIA-Tesla T4\"} 40",
        "nodeGPUOverview{zone=\"vGPU\",nodeid=\"n1\",deviceuuid=\"n1-gpu0\",deviceidx=\"0\",devicetype=\"NVIDIA-Tesla T4\",devicecores=\"40\",devicememorylimit=\"10000\"} 2621440000",
        "nodeGPUMemoryPercentage{zone=\"vGPU\",nodeid=\"n1\",deviceuuid=\"n1-gpu0\",deviceidx=\"0\"} 0.25",
        "vGPUMemoryAllocated{zone=\"vGPU\",podnamespace=\"default\",nodename=\"n1\",podname=\"p\",containeridx=\"0\",deviceuuid=\"n1-gpu0\"} 2621440000",
        "vGPUCoreAllocated{zone=\"vGPU\",podnamespace=\"default\",nodename=\"n1\",podname=\"p\",containeridx=\"0\",deviceuuid=\"n1-gpu0\"} 40",
        "QuotaUsed{zone=\"vGPU\",quotanamespace=\"default\",quotaName=\"nvidia.com/gpumem\",limit=\"0\"} 2500",
    ] {
        assert!(m.contains(line), "{line} missing in\n{m}");
    }
    // The current names stay.
    assert!(m.contains("hami_gpu_memory_limit_bytes{"), "{m}");
}

#[tokio::test]
async fn metrics_and_readiness() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 2, 10_000))], Knobs::default()).await;
    let ready = http_request(c.ext.admin, request("GET", "/readyz", "").unwrap())
        .await
        .unwrap();
    assert_eq!(ready.status, 200);
    schedule_one_gpu_pod(&c).await;
    let m = c.metrics().await;
    // Two equal GPUs: the pod took the last registered one, as HAMi does.
    assert!(m.contains("hami_gpu_memory_limit_bytes{zone=\"vGPU\",node=\"n1\",device_uuid=\"n1-gpu0\",device_index=\"0\",device_type=\"NVIDIA-Tesla T4\"} 10485760000"), "{m}");
    assert!(m.contains("hami_gpu_memory_allocated_bytes{zone=\"vGPU\",node=\"n1\",device_uuid=\"n1-gpu1\",device_index=\"1\",device_type=\"NVIDIA-Tesla T4\",device_cores=\"40\"} 2621440000"), "{m}");
    assert!(m.contains("hami_gpu_shared_count{zone=\"vGPU\",node=\"n1\",device_uuid=\"n1-gpu1\",device_index=\"1\",device_type=\"NVIDIA-Tesla T4\"} 1"));
    assert!(m.contains("hami_gpu_core_allocated_ratio{zone=\"vGPU\",node=\"n1\",device_uuid=\"n1-gpu1\",device_index=\"1\",device_type=\"NVIDIA-Tesla T4\"} 40"));
    // HAMi's overview, per-container (collapsed: container_index 0) and build series.
    assert!(m.contains("hami_node_gpu_overview{zone=\"vGPU\",node=\"n1\",device_uuid=\"n1-gpu1\",device_index=\"1\",device_type=\"NVIDIA-Tesla T4\",device_cores=\"40\",device_memory_limit=\"10000\"} 2621440000"), "{m}");
    assert!(m.contains("hami_vgpu_memory_allocated_bytes{zone=\"vGPU\",namespace=\"default\",node=\"n1\",pod=\"p\",container_index=\"0\",device_uuid=\"n1-gpu1\"} 2621440000"), "{m}");
    assert!(m.contains("hami_vgpu_core_allocated_ratio{zone=\"vGPU\",namespace=\"default\",node=\"n1\",pod=\"p\",container_index=\"0\",device_uuid=\"n1-gpu1\"} 40"), "{m}");
    assert!(
        m.lines()
            .any(|l| l.starts_with("hami_build_info{version=\"")
                && l.contains("compiler=\"rustc\"")
                && l.ends_with(" 1")),
        "{m}"
    );
    // HAMi's legacy names only with --legacy-metrics.
    assert!(!m.contains("GPUDeviceMemoryLimit"), "{m}");
    assert!(m.contains("hami_scheduler_node_gpus{node=\"n1\"} 2"));
    assert!(
        m.contains("hami_scheduler_filter_requests_total{result=\"placed\"} 1"),
        "{m}"
    );
    assert!(m.contains("hami_scheduler_bind_requests_total{result=\"bound\"} 1"));
    assert!(m.contains("hami_scheduler_filter_duration_seconds_count 1"));
    assert!(m.contains("hami_scheduler_leader 1"));
    assert!(m.contains("hami_scheduler_events_dropped_total 0"), "{m}");
}

/// How many times the pod `name` was read (GET) since request number `since` of the log.
fn pod_reads(c: &Cluster, name: &str, since: usize) -> usize {
    let suffix = format!("/pods/{name}");
    c.server.faults().requests()[since..]
        .iter()
        .filter(|r| r.verb == "get" && r.path.ends_with(&suffix))
        .count()
}

/// Binds pod `name` to n1 as kube-scheduler does, with its UID read before; returns the
/// error and how often the pod was read while the bind ran.
async fn bind_counting_reads(c: &Cluster, name: &str) -> (String, usize) {
    let uid = c.pods().get(name).await.unwrap().metadata.uid.unwrap();
    let since = c.server.faults().requests().len();
    let b: hami_scheduler::wire::ExtenderBindingResult = c
        .post(
            "/bind",
            json!({"PodName": name, "PodNamespace": "default", "PodUID": uid, "Node": "n1"}),
        )
        .await;
    (b.error, pod_reads(c, name, since))
}

/// A failed bind reads its pod (to find it bound after all) only when it can be bound: its
/// Binding was sent and may have been made. A failure before the Binding, or a Binding
/// refused for a gone pod, gives back the node lock and the reservation at once, without
/// a read (`docs/extender.md#node-lock-takeover`).
#[tokio::test]
async fn a_bind_failing_where_it_cannot_have_bound_its_pod_gives_back_without_reading_it() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 2, 10_000))], Knobs::default()).await;
    let faults = c.server.faults().clone();

    // The control: a Binding answered 500 may have been made; the pod is read.
    c.create(&gpu_pod("f", &[limits(1000)], json!({}))).await;
    assert_eq!(chosen(&c.filter("f").await).as_deref(), Some("n1"));
    c.wait_annotations("f", |a| a.contains_key("hami.io/vgpu-node"))
        .await;
    faults.set_error_rate("create", 1.0, Fault::InternalError);
    let (error, reads) = bind_counting_reads(&c, "f").await;
    faults.clear();
    assert!(error.contains("could not bind pod default/f"), "{error}");
    assert_eq!(reads, 1, "a Binding that may have been made is looked for");
    assert_eq!(c.node_lock("n1").await, None);
    reservations_reach(&c, 0).await;

    // The bind-phase write refused (500): no Binding was sent. The pod's decision is
    // annotated without the mark (as HAMi's /filter leaves it), so /bind writes it; the
    // write after the node lock's fails, every other one passes.
    let decided = decided_by_hami("n1", "n1-gpu0,NVIDIA,6000,0:;");
    c.create(&gpu_pod("m", &[limits(6000)], decided)).await;
    c.wait_allocated("n1-gpu0", 6000).await;
    let arm = faults.clone();
    faults.before_next("patch", "/nodes/n1", move || {
        arm.set_error_rate("patch", 1.0, Fault::InternalError);
    });
    let disarm = faults.clone();
    faults.before_next("patch", "/pods/m", move || {
        disarm.set_error_rate("patch", 0.0, Fault::InternalError);
    });
    let (error, reads) = bind_counting_reads(&c, "m").await;
    faults.clear();
    assert!(
        error.contains("could not mark pod default/m allocating"),
        "{error}"
    );
    assert_eq!(reads, 0, "a pod no Binding was sent for was read");
    assert_eq!(c.node_lock("n1").await, None, "lock left behind");
    reservations_reach(&c, 0).await;

    // The Binding refused with 404: the pod was deleted just before it.
    c.create(&gpu_pod("g", &[limits(1000)], json!({}))).await;
    assert_eq!(chosen(&c.filter("g").await).as_deref(), Some("n1"));
    c.wait_annotations("g", |a| a.contains_key("hami.io/vgpu-node"))
        .await;
    let store = c.server.store().clone();
    faults.before_next("create", "/pods/g/binding", move || {
        let gone = DeleteOptions {
            preconditions: Preconditions::default(),
            grace_period_seconds: Some(0),
        };
        store
            .delete_with(&resources::PODS, Some("default"), "g", &gone)
            .unwrap();
    });
    let (error, reads) = bind_counting_reads(&c, "g").await;
    assert!(error.contains("could not bind pod default/g"), "{error}");
    assert_eq!(reads, 0, "a pod the Binding found gone was read");
    assert_eq!(c.node_lock("n1").await, None, "lock left behind");
    reservations_reach(&c, 0).await;
}
