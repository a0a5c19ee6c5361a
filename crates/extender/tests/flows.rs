//! Filter and Bind end to end: the real extender over loopback HTTP, the API server
//! emulator behind it, calls shaped as kube-scheduler sends them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{Cluster, Knobs, chosen, gpu_pod, gpus};
use hami_core::engine::SchedulerDefaults;
use hami_core::policy::{GpuPolicy, NodePolicy};
use serde_json::json;

fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[tokio::test]
async fn one_container_pod_is_placed_annotated_locked_and_bound() {
    install_crypto();
    let c = Cluster::start(
        &[("n1", gpus("n1", 2, 15_000)), ("n2", gpus("n2", 2, 15_000))],
        Knobs::default(),
    )
    .await;
    c.create(&gpu_pod(
        "p",
        &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"})],
        json!({}),
    ))
    .await;
    let f = c.filter("p").await;
    assert_eq!(f.error, "");
    assert!(f.failed_nodes.is_none());
    let node = chosen(&f).unwrap();
    // Ties go to the node name that sorts first.
    assert_eq!(node, "n1");

    let a = c
        .wait_annotations("p", |a| a.contains_key("hami.io/vgpu-devices-allocated"))
        .await;
    assert_eq!(a["hami.io/vgpu-node"], "n1");
    // Two equal GPUs: the last registered one, as HAMi takes it.
    assert_eq!(
        a["hami.io/vgpu-devices-allocated"],
        "n1-gpu1,NVIDIA,4000,30:;"
    );
    assert_eq!(
        a["hami.io/vgpu-devices-to-allocate"],
        a["hami.io/vgpu-devices-allocated"]
    );
    assert!(a["hami.io/vgpu-time"].parse::<i64>().is_ok());
    let pod = c.pods().get("p").await.unwrap();
    assert_eq!(
        pod.metadata
            .labels
            .unwrap()
            .get("hami.io/vgpu-node")
            .map(String::as_str),
        Some("n1")
    );
    c.wait_event("p", "FilteringSucceed").await;

    let b = c.bind("p", "n1").await;
    assert_eq!(b.error, "");
    let pod = c.pods().get("p").await.unwrap();
    assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some("n1"));
    let a = pod.metadata.annotations.unwrap();
    assert_eq!(a["hami.io/bind-phase"], "allocating");
    assert!(a.contains_key("hami.io/bind-time"));
    let lock = c.node_lock("n1").await.unwrap();
    assert!(lock.ends_with(",default,p"), "{lock}");
    let ev = c.wait_event("p", "BindingSucceed").await;
    assert_eq!(
        ev.message.as_deref(),
        Some("Successfully binding node [n1] to default/p")
    );
    assert_eq!(
        ev.source.unwrap().component.as_deref(),
        Some("hami-scheduler")
    );

    // The device plugin finishes; the lock is gone and the usage stays.
    c.finish_allocation("p", "n1").await;
    assert_eq!(c.node_lock("n1").await, None);
    let used = c.allocated_mem().await;
    assert_eq!(used["n1-gpu1"], 4000);
    assert_eq!(used["n1-gpu0"], 0);
}

#[tokio::test]
async fn node_and_gpu_policies_binpack_and_spread() {
    install_crypto();
    let c = Cluster::start(
        &[("n1", gpus("n1", 2, 16_000)), ("n2", gpus("n2", 2, 16_000))],
        Knobs::default(),
    )
    .await;
    let limits =
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "10"});
    c.create(&gpu_pod("first", std::slice::from_ref(&limits), json!({})))
        .await;
    assert_eq!(c.schedule("first").await, "n1");
    c.finish_allocation("first", "n1").await;

    // Node binpack (default): the busier node; GPU spread (default): its idle GPU
    // (`first` took n1-gpu1, the last of two equal GPUs).
    c.create(&gpu_pod("bp", std::slice::from_ref(&limits), json!({})))
        .await;
    assert_eq!(c.schedule("bp").await, "n1");
    let a = c
        .wait_annotations("bp", |a| a.contains_key("hami.io/vgpu-devices-allocated"))
        .await;
    assert!(
        a["hami.io/vgpu-devices-allocated"].starts_with("n1-gpu0,"),
        "{a:?}"
    );
    c.finish_allocation("bp", "n1").await;

    // Node spread by annotation: the idle node.
    c.create(&gpu_pod(
        "sp",
        std::slice::from_ref(&limits),
        json!({"hami.io/node-scheduler-policy": "spread"}),
    ))
    .await;
    assert_eq!(c.schedule("sp").await, "n2");
    c.finish_allocation("sp", "n2").await;

    // GPU binpack by annotation: the GPU that already has the most.
    c.create(&gpu_pod(
        "gb",
        std::slice::from_ref(&limits),
        json!({"hami.io/gpu-scheduler-policy": "binpack", "hami.io/node-scheduler-policy": "spread"}),
    ))
    .await;
    let node = c.schedule("gb").await;
    assert_eq!(node, "n2");
    let a = c
        .wait_annotations("gb", |a| a.contains_key("hami.io/vgpu-devices-allocated"))
        .await;
    let sp = c.annotations("sp").await;
    let sp_gpu = sp["hami.io/vgpu-devices-allocated"]
        .split(',')
        .next()
        .unwrap()
        .to_string();
    assert!(
        a["hami.io/vgpu-devices-allocated"].starts_with(&format!("{sp_gpu},")),
        "{a:?}"
    );
}

#[tokio::test]
async fn cluster_default_policies_come_from_the_flags() {
    install_crypto();
    let knobs = Knobs {
        defaults: SchedulerDefaults {
            node_policy: NodePolicy::Spread,
            gpu_policy: GpuPolicy::parse_strict("binpack").unwrap(),
        },
        ..Knobs::default()
    };
    let c = Cluster::start(
        &[("n1", gpus("n1", 2, 16_000)), ("n2", gpus("n2", 2, 16_000))],
        knobs,
    )
    .await;
    let limits = json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"});
    for name in ["a", "b", "c"] {
        c.create(&gpu_pod(name, std::slice::from_ref(&limits), json!({})))
            .await;
    }
    assert_eq!(c.schedule("a").await, "n1");
    c.finish_allocation("a", "n1").await;
    assert_eq!(c.schedule("b").await, "n2");
    c.finish_allocation("b", "n2").await;
    // Spread across nodes, binpack within: c lands beside a or b on the same GPU.
    let n = c.schedule("c").await;
    let gpu_of = |a: &std::collections::BTreeMap<String, String>| {
        a["hami.io/vgpu-devices-allocated"]
            .split(',')
            .next()
            .unwrap()
            .to_string()
    };
    let ac = c
        .wait_annotations("c", |a| a.contains_key("hami.io/vgpu-devices-allocated"))
        .await;
    let peer = if n == "n1" { "a" } else { "b" };
    assert_eq!(gpu_of(&ac), gpu_of(&c.annotations(peer).await));
}

#[tokio::test]
async fn multi_container_and_multi_gpu_pods() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 4, 16_000))], Knobs::default()).await;
    c.create(&gpu_pod(
        "mc",
        &[
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
            json!({"cpu": "1"}),
            json!({"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "20"}),
        ],
        json!({}),
    ))
    .await;
    assert_eq!(c.schedule("mc").await, "n1");
    let a = c
        .wait_annotations("mc", |a| a.contains_key("hami.io/vgpu-devices-allocated"))
        .await;
    let entries: Vec<&str> = a["hami.io/vgpu-devices-allocated"].split(';').collect();
    // Three containers (the middle one empty), then the trailing empty entry.
    assert_eq!(entries.len(), 4, "{a:?}");
    assert_eq!(entries[1], "");
    assert_eq!(entries[0].matches("NVIDIA").count(), 1);
    assert_eq!(entries[2].matches("NVIDIA").count(), 2);
    assert!(entries[2].contains(",NVIDIA,8000,20:"), "{}", entries[2]);
}

#[tokio::test]
async fn misfits_get_per_node_reasons_and_an_event() {
    install_crypto();
    let c = Cluster::start(
        &[("n1", gpus("n1", 1, 8_000)), ("n2", gpus("n2", 2, 8_000))],
        Knobs::default(),
    )
    .await;
    c.create(&gpu_pod(
        "big",
        &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "9000"})],
        json!({}),
    ))
    .await;
    let f = c
        .filter_on("big", Some(vec!["n1".into(), "n2".into(), "ghost".into()]))
        .await;
    assert_eq!(f.error, "");
    assert!(f.node_names.is_none());
    let failed = f.failed_nodes.unwrap();
    assert_eq!(failed["n1"], "1/1 CardInsufficientMemory");
    assert_eq!(failed["n2"], "2/2 CardInsufficientMemory");
    assert!(
        failed["ghost"].contains("unknown to hami-scheduler"),
        "{}",
        failed["ghost"]
    );
    let ev = c.wait_event("big", "FilteringFailed").await;
    let msg = ev.message.unwrap();
    assert!(
        msg.starts_with(
            "no available node, 3 nodes do not meet: 2 nodes CardInsufficientMemory(n1,n2)"
        ),
        "{msg}"
    );
    assert_eq!(ev.type_.as_deref(), Some("Warning"));

    // Two GPUs on a one-GPU node.
    c.create(&gpu_pod(
        "two",
        &[json!({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "100"})],
        json!({}),
    ))
    .await;
    let f = c.filter_on("two", Some(vec!["n1".into()])).await;
    assert_eq!(f.failed_nodes.unwrap()["n1"], "NodeInsufficientDevice");
}

#[tokio::test]
async fn pods_without_managed_resources_pass_through_and_bind_plainly() {
    install_crypto();
    let c = Cluster::start(
        &[("n1", gpus("n1", 1, 8_000)), ("n2", gpus("n2", 1, 8_000))],
        Knobs::default(),
    )
    .await;
    c.create(&gpu_pod("cpu", &[json!({"cpu": "1"})], json!({})))
        .await;
    let f = c.filter("cpu").await;
    assert_eq!(f.node_names.unwrap(), ["n1", "n2"]);
    assert_eq!(c.annotations("cpu").await.get("hami.io/vgpu-node"), None);
    assert_eq!(c.bind("cpu", "n2").await.error, "");
    let pod = c.pods().get("cpu").await.unwrap();
    assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some("n2"));
    assert_eq!(c.node_lock("n2").await, None);
}

#[tokio::test]
async fn whole_node_objects_when_not_node_cache_capable() {
    install_crypto();
    let c = Cluster::start(
        &[("n1", gpus("n1", 1, 8_000)), ("n2", gpus("n2", 1, 8_000))],
        Knobs::default(),
    )
    .await;
    c.create(&gpu_pod(
        "p",
        &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"})],
        json!({"hami.io/node-scheduler-policy": "spread"}),
    ))
    .await;
    let pod = c.pods().get("p").await.unwrap();
    let nodes: Vec<serde_json::Value> = ["n1", "n2"]
        .iter()
        .map(|n| json!({"metadata": {"name": n, "labels": {"x": "y"}}, "status": {}}))
        .collect();
    let f: hami_scheduler::wire::ExtenderFilterResult = c
        .post(
            "/filter",
            json!({"Pod": pod, "Nodes": {"items": nodes}, "NodeNames": null}),
        )
        .await;
    assert_eq!(f.error, "");
    assert!(f.node_names.is_none());
    let items = f.nodes.unwrap()["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["metadata"]["name"], "n1");
    assert_eq!(items[0]["metadata"]["labels"]["x"], "y");
}

#[tokio::test]
async fn a_restarted_extender_rebuilds_the_same_usage_from_annotations() {
    install_crypto();
    let mut c = Cluster::start(
        &[("n1", gpus("n1", 2, 16_000)), ("n2", gpus("n2", 2, 16_000))],
        Knobs::default(),
    )
    .await;
    let shapes = [
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "20"}),
        json!({"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "25"}),
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "7000"}),
    ];
    for i in 0..6 {
        let name = format!("p{i}");
        c.create(&gpu_pod(&name, &[shapes[i % 3].clone()], json!({})))
            .await;
        let node = c.schedule(&name).await;
        c.finish_allocation(&name, &node).await;
    }
    // One filtered but not bound yet: it holds too, within the reservation timeout.
    c.create(&gpu_pod("pending", &[shapes[0].clone()], json!({})))
        .await;
    let f = c.filter("pending").await;
    assert!(chosen(&f).is_some());
    c.wait_annotations("pending", |a| {
        a.contains_key("hami.io/vgpu-devices-allocated")
    })
    .await;
    let before = c.allocated_mem().await;
    assert!(before.values().sum::<u64>() > 0);
    c.restart_extender().await;
    let after = c.allocated_mem().await;
    assert_eq!(before, after);
    // And the pending pod can still be bound by the new process.
    let node = chosen(&f).unwrap();
    assert_eq!(c.bind("pending", &node).await.error, "");
}

#[tokio::test]
async fn unbound_reservations_expire_and_free_their_gpus() {
    install_crypto();
    let knobs = Knobs {
        reservation_timeout: Duration::from_secs(1),
        ..Knobs::default()
    };
    let c = Cluster::start(&[("n1", gpus("n1", 1, 10_000))], knobs).await;
    let limits = json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"});
    c.create(&gpu_pod("ghost", std::slice::from_ref(&limits), json!({})))
        .await;
    assert_eq!(chosen(&c.filter("ghost").await).as_deref(), Some("n1"));
    c.create(&gpu_pod("next", std::slice::from_ref(&limits), json!({})))
        .await;
    assert!(
        chosen(&c.filter("next").await).is_none(),
        "the reservation must hold at first"
    );
    // kube-scheduler never binds `ghost`: after the timeout its GPU is free again.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if chosen(&c.filter("next").await).is_some() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "reservation never expired"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The late bind of the expired pod is refused (it must be filtered again).
    let b = c.bind("ghost", "n1").await;
    assert!(b.error.contains("must be filtered again"), "{}", b.error);
}

/// Node policy `frag` reads the nodes' CPU from the watches: `n2`'s CPU is mostly taken
/// by a pod without GPUs, so its idle GPUs are stranded for most of the typical workload;
/// a GPU pod small enough in CPU to run there uses them up, which is what `frag` does
/// (blind to CPU, the two nodes are equal and the name tie-break would pick `n1`).
/// `/debug/frag-workload` on the admin port shows the workload the policy optimises for.
#[tokio::test]
async fn frag_places_by_node_cpu_and_shows_its_workload() {
    use hami_server::test_support::{http_request, request};
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, PostParams};
    install_crypto();
    let knobs = Knobs {
        defaults: SchedulerDefaults {
            node_policy: NodePolicy::Frag,
            gpu_policy: GpuPolicy::parse_strict("frag").unwrap(),
        },
        ..Knobs::default()
    };
    let mut c = Cluster::start(&[], knobs).await;
    let nodes: Api<Node> = Api::all(c.client.clone());
    for name in ["n1", "n2"] {
        let mut node = common::node_object(name, &gpus(name, 2, 16_000), true);
        if let Some(a) = node.status.as_mut().and_then(|s| s.allocatable.as_mut()) {
            for (k, v) in [("cpu", "16"), ("memory", "64Gi")] {
                a.insert(
                    k.into(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.into()),
                );
            }
        }
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let busy: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "busy", "namespace": "default"},
        "spec": {"nodeName": "n2", "containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "12", "memory": "8Gi"}}}]},
        "status": {"phase": "Running"}
    }))
    .unwrap();
    c.create(&busy).await;
    let mut pod = gpu_pod(
        "p",
        &[
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "50"}),
        ],
        json!({}),
    );
    if let Some(r) = pod
        .spec
        .as_mut()
        .and_then(|s| s.containers.first_mut())
        .and_then(|c| c.resources.as_mut())
    {
        r.requests = Some(
            [(
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("3".into()),
            )]
            .into(),
        );
    }
    c.create(&pod).await;
    // A fresh extender lists all of it before it answers.
    c.restart_extender().await;
    let f = c.filter("p").await;
    assert_eq!(f.error, "");
    assert_eq!(chosen(&f).as_deref(), Some("n2"));

    let r = http_request(
        c.ext.admin,
        request("GET", "/debug/frag-workload", "").unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    let view: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(view["source"], "prior");
    assert_eq!(view["pods_seen"], 2);
    assert_eq!(view["gpu_types"][0]["type"], "NVIDIA-Tesla T4");
    assert_eq!(view["gpu_types"][0]["gpus"], 4);
    assert!(view["classes"].as_array().is_some_and(|c| c.len() == 35));
}

/// A malformed `hami.io/node-nvidia-score` keeps the node (HAMi would treat it as
/// unregistered): pods still land there, topology-aware ones without pair scores, and a
/// Node event names the node and the bad value (`docs/protocol.md#node-annotations`).
#[tokio::test]
async fn a_malformed_node_score_keeps_the_node_without_topology() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 2, 10_000))], Knobs::default()).await;
    hami_k8s::patch::patch_node(
        &c.client,
        "n1",
        &hami_k8s::patch::MetadataPatch::new().annotate("hami.io/node-nvidia-score", "not-json{"),
    )
    .await
    .unwrap();
    let event = c.wait_event("n1", "NodeScoreInvalid").await;
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains("hami.io/node-nvidia-score on node n1 is invalid")
            && message.contains("value \"not-json{\"")
            && message.contains("stays schedulable"),
        "{message}"
    );
    assert_eq!(event.involved_object.kind.as_deref(), Some("Node"));
    c.create(&gpu_pod(
        "topo",
        &[json!({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"})],
        json!({"hami.io/gpu-scheduler-policy": "topology-aware"}),
    ))
    .await;
    assert_eq!(c.schedule("topo").await, "n1");
    let a = c
        .wait_annotations("topo", |a| a.contains_key("hami.io/vgpu-devices-allocated"))
        .await;
    // Without pair scores every pair ties: the first pair in walk order.
    assert_eq!(
        a["hami.io/vgpu-devices-allocated"],
        "n1-gpu1,NVIDIA,1000,0:n1-gpu0,NVIDIA,1000,0:;"
    );
}

/// The requests the API server served since `from` (an index into its log).
fn served_since(c: &Cluster, from: usize) -> Vec<hami_testkit::RequestRecord> {
    c.server.faults().requests().split_off(from)
}

#[tokio::test]
async fn the_filter_write_carries_the_bind_mark_so_bind_writes_no_pod() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 1, 15_000))], Knobs::default()).await;
    c.create(&gpu_pod(
        "p",
        &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"})],
        json!({}),
    ))
    .await;
    assert_eq!(chosen(&c.filter("p").await).as_deref(), Some("n1"));
    // One patch: the decision and the mark arrive together, never one without the other.
    let a = c
        .wait_annotations("p", |a| a.contains_key("hami.io/vgpu-devices-allocated"))
        .await;
    assert_eq!(a["hami.io/bind-phase"], "allocating");
    assert!(a["hami.io/bind-time"].parse::<i64>().is_ok(), "{a:?}");
    // The log records a request just after its answer is made: wait for it there.
    let pod_patches = || {
        c.server
            .faults()
            .requests()
            .iter()
            .filter(|r| r.verb == "patch" && r.path.ends_with("/pods/p"))
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pod_patches() == 0 {
        assert!(std::time::Instant::now() < deadline, "patch never logged");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(pod_patches(), 1);

    let before = c.server.faults().requests().len();
    assert_eq!(c.bind("p", "n1").await.error, "");
    let served = served_since(&c, before);
    assert!(
        !served
            .iter()
            .any(|r| r.verb == "patch" && r.path.ends_with("/pods/p")),
        "bind wrote the pod: {served:?}"
    );
    assert!(
        served
            .iter()
            .any(|r| r.verb == "create" && r.path.ends_with("/pods/p/binding") && r.code < 300),
        "{served:?}"
    );
    let pod = c.pods().get("p").await.unwrap();
    assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some("n1"));
    assert!(c.node_lock("n1").await.unwrap().ends_with(",default,p"));
}

#[tokio::test]
async fn a_decision_annotated_without_the_bind_mark_is_marked_at_bind() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 1, 15_000))], Knobs::default()).await;
    // Annotated as HAMi's /filter (or an older hami-scheduler) leaves a pod: the decision
    // without the mark, which HAMi writes at Bind.
    let now = chrono::Utc::now().timestamp().to_string();
    let devices = "n1-gpu0,NVIDIA,4000,0:;";
    c.create(&gpu_pod(
        "p",
        &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"})],
        json!({
            "hami.io/vgpu-node": "n1",
            "hami.io/vgpu-time": now,
            "hami.io/vgpu-devices-to-allocate": devices,
            "hami.io/vgpu-devices-allocated": devices,
        }),
    ))
    .await;
    // Held on n1 once the pod watch has shown it.
    c.wait_allocated("n1-gpu0", 4000).await;
    assert_eq!(c.bind("p", "n1").await.error, "");
    let pod = c.pods().get("p").await.unwrap();
    assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some("n1"));
    let a = pod.metadata.annotations.unwrap();
    assert_eq!(a["hami.io/bind-phase"], "allocating");
    assert!(a["hami.io/bind-time"].parse::<i64>().is_ok(), "{a:?}");
}
