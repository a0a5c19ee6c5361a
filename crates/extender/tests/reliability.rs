//! What a chaos run provokes, one fault at a time: pods re-created under the same name
//! in the middle of a scheduling cycle, node locks left by an extender that was killed
//! mid-bind, watches the API server refuses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Cluster, Knobs, chosen, decided_by_hami, gpu_pod, gpus};
use hami_core::codec::{NodeLock, encode_node_lock};
use hami_k8s::patch::{MetadataPatch, patch_node};
use hami_scheduler::run::RunError;
use hami_server::supervise::RestartPolicy;
use hami_testkit::store::{DeleteOptions, Preconditions};
use hami_testkit::{Fault, resources};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn limits(mem: u32) -> Value {
    json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": mem.to_string()})
}

/// Restarts fast and never gives up: the tests watch restarts happen.
fn patient() -> RestartPolicy {
    RestartPolicy {
        initial_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(100),
        max_failures: 1_000,
        window: Duration::from_secs(60),
    }
}

/// Deletes pod `name` and creates another of the same name (a StatefulSet's
/// successor), straight in the store: no request, so it happens exactly where the
/// hook runs.
fn replace_pod(c: &Cluster, name: &str) -> impl FnOnce() + Send + 'static {
    let store = c.server.store().clone();
    let name = name.to_string();
    move || {
        let gone = DeleteOptions {
            preconditions: Preconditions::default(),
            grace_period_seconds: Some(0),
        };
        store
            .delete_with(&resources::PODS, Some("default"), &name, &gone)
            .unwrap();
        let successor = serde_json::to_value(gpu_pod(&name, &[limits(6000)], json!({}))).unwrap();
        store
            .create(&resources::PODS, Some("default"), successor)
            .unwrap();
    }
}

fn hami_keys(a: &BTreeMap<String, String>) -> Vec<&String> {
    a.keys().filter(|k| k.starts_with("hami.io/")).collect()
}

/// Waits (bounded) until no device is counted as allocated.
async fn wait_nothing_allocated(c: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mem = c.allocated_mem().await;
        if mem.values().all(|m| *m == 0) {
            return;
        }
        assert!(Instant::now() < deadline, "still allocated: {mem:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_pod_recreated_before_the_annotation_write_is_never_annotated() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 1, 10_000))], Knobs::default()).await;
    c.create(&gpu_pod("web-0", &[limits(6000)], json!({})))
        .await;
    let old_uid = c.pods().get("web-0").await.unwrap().metadata.uid.unwrap();
    // Replaced after /filter decided and before its annotation write arrives.
    c.server
        .faults()
        .before_next("patch", "/pods/web-0", replace_pod(&c, "web-0"));
    assert_eq!(chosen(&c.filter("web-0").await).as_deref(), Some("n1"));
    let b: hami_scheduler::wire::ExtenderBindingResult = c
        .post(
            "/bind",
            json!({"PodName": "web-0", "PodNamespace": "default", "PodUID": old_uid, "Node": "n1"}),
        )
        .await;
    assert!(
        b.error.contains("could not be annotated") || b.error.contains("holds no GPU reservation"),
        "{}",
        b.error
    );
    let successor = c.pods().get("web-0").await.unwrap();
    assert_ne!(successor.metadata.uid.as_deref(), Some(old_uid.as_str()));
    let annotations = successor.metadata.annotations.clone().unwrap_or_default();
    assert!(hami_keys(&annotations).is_empty(), "{annotations:?}");
    assert!(
        successor.metadata.labels.unwrap_or_default().is_empty(),
        "labelled with the dead pod's node"
    );
    assert_eq!(c.node_lock("n1").await, None);
    // Nothing counts against the successor: its whole card is free for it.
    wait_nothing_allocated(&c).await;
    assert_eq!(c.schedule("web-0").await, "n1");
    let a = c.annotations("web-0").await;
    assert_eq!(a["hami.io/vgpu-node"], "n1");
}

#[tokio::test]
async fn a_bind_for_a_pod_recreated_meanwhile_leaves_the_successor_alone() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 2, 10_000))], Knobs::default()).await;
    // Replaced just before the bind-phase write, then just before the Binding. /filter's
    // annotation write carries the bind-phase mark, so /bind writes it only for a decision
    // annotated without it: db-0's, annotated as HAMi's /filter leaves a pod.
    for (pod, verb, path) in [
        ("db-0", "patch", "/pods/db-0"),
        ("db-1", "create", "/pods/db-1/binding"),
    ] {
        if pod == "db-0" {
            let decided = decided_by_hami("n1", "n1-gpu0,NVIDIA,6000,0:;");
            c.create(&gpu_pod(pod, &[limits(6000)], decided)).await;
            c.wait_allocated("n1-gpu0", 6000).await;
        } else {
            c.create(&gpu_pod(pod, &[limits(6000)], json!({}))).await;
            assert_eq!(chosen(&c.filter(pod).await).as_deref(), Some("n1"));
            c.wait_annotations(pod, |a| a.contains_key("hami.io/vgpu-devices-allocated"))
                .await;
        }
        let old_uid = c.pods().get(pod).await.unwrap().metadata.uid.unwrap();
        c.server
            .faults()
            .before_next(verb, path, replace_pod(&c, pod));
        let b: hami_scheduler::wire::ExtenderBindingResult = c
            .post(
                "/bind",
                json!({"PodName": pod, "PodNamespace": "default", "PodUID": old_uid, "Node": "n1"}),
            )
            .await;
        assert_ne!(b.error, "", "{pod}: the bind of a replaced pod succeeded");
        let successor: Pod = c.pods().get(pod).await.unwrap();
        assert_ne!(successor.metadata.uid.as_deref(), Some(old_uid.as_str()));
        assert_eq!(
            successor.spec.as_ref().unwrap().node_name,
            None,
            "{pod}: successor bound"
        );
        let annotations = successor.metadata.annotations.clone().unwrap_or_default();
        assert!(hami_keys(&annotations).is_empty(), "{pod}: {annotations:?}");
        assert_eq!(c.node_lock("n1").await, None, "{pod}: lock left behind");
        wait_nothing_allocated(&c).await;
    }
    assert!(
        c.metrics()
            .await
            .contains("hami_scheduler_errors_total{operation=\"bind\",reason=\"pod_gone\"} 2"),
        "{}",
        c.metrics().await
    );
}

/// What a killed extender leaves: a fresh lock for a pod it was binding, the pod still
/// unbound (marked allocating, the Binding never made).
async fn leave_orphan_lock(c: &Cluster, node: &str, taken: chrono::DateTime<chrono::FixedOffset>) {
    c.create(&gpu_pod(
        "orphan",
        &[limits(1000)],
        json!({"hami.io/bind-phase": "allocating"}),
    ))
    .await;
    patch_node(
        &c.client,
        node,
        &MetadataPatch::new().annotate(
            "hami.io/mutex.lock",
            encode_node_lock(&NodeLock::owned(taken, "default", "orphan")),
        ),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_lock_left_by_a_killed_extender_is_taken_over_at_once() {
    install_crypto();
    let knobs = Knobs {
        node_lock_wait: Duration::from_secs(20),
        ..Knobs::default()
    };
    let mut c = Cluster::start(&[("n1", gpus("n1", 1, 10_000))], knobs).await;
    leave_orphan_lock(&c, "n1", chrono::Utc::now().fixed_offset()).await;
    // The extender that took it is gone; a fresh one (empty memory) takes its place.
    c.restart_extender().await;
    let started = Instant::now();
    for name in ["q0", "q1", "q2"] {
        c.create(&gpu_pod(name, &[limits(1000)], json!({}))).await;
        let one = Instant::now();
        assert_eq!(c.schedule(name).await, "n1");
        assert!(
            one.elapsed() < Duration::from_secs(2),
            "{name} took {:?}",
            one.elapsed()
        );
        assert!(
            c.node_lock("n1")
                .await
                .unwrap()
                .ends_with(&format!(",default,{name}"))
        );
        c.finish_allocation(name, "n1").await;
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    let orphan = c.pods().get("orphan").await.unwrap();
    assert_eq!(
        orphan.spec.unwrap().node_name,
        None,
        "the orphan is untouched"
    );
}

#[tokio::test]
async fn with_other_replicas_a_fresh_lock_is_respected_and_its_owner_does_not_queue() {
    install_crypto();
    let knobs = Knobs {
        node_lock_wait: Duration::from_secs(3),
        leader_elect: true,
        ..Knobs::default()
    };
    let c = Cluster::start(&[("n1", gpus("n1", 1, 10_000))], knobs).await;
    // Taken a moment ago, maybe by a replica that is still binding: respected.
    leave_orphan_lock(&c, "n1", chrono::Utc::now().fixed_offset()).await;
    c.create(&gpu_pod("q", &[limits(1000)], json!({}))).await;
    assert_eq!(chosen(&c.filter("q").await).as_deref(), Some("n1"));
    let q = {
        let addr = c.ext.addr;
        let uid = c.pods().get("q").await.unwrap().metadata.uid.unwrap();
        tokio::spawn(async move {
            let body =
                json!({"PodName": "q", "PodNamespace": "default", "PodUID": uid, "Node": "n1"});
            let r = hami_server::test_support::http_request(
                addr,
                hami_server::test_support::request("POST", "/bind", body.to_string()).unwrap(),
            )
            .await
            .unwrap();
            serde_json::from_slice::<hami_scheduler::wire::ExtenderBindingResult>(&r.body).unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The owner's own retry takes its lock back at once, not after `q` gives up.
    assert_eq!(chosen(&c.filter("orphan").await).as_deref(), Some("n1"));
    let retry = Instant::now();
    let b = c.bind("orphan", "n1").await;
    assert_eq!(b.error, "");
    // Queued behind `q`, it would wait until `q` gives up (`--node-lock-wait`, 3 s).
    assert!(
        retry.elapsed() < Duration::from_secs(2),
        "{:?}",
        retry.elapsed()
    );
    assert!(!q.is_finished(), "q is still waiting");
    let q = q.await.unwrap();
    assert!(
        q.error.contains("locked by pod default/orphan"),
        "{}",
        q.error
    );

    // A lock older than the grace another replica's live bind can take: taken over.
    c.create(&gpu_pod("stale", &[limits(1000)], json!({})))
        .await;
    let node = c
        .pods()
        .get("orphan")
        .await
        .unwrap()
        .spec
        .unwrap()
        .node_name;
    assert_eq!(node.as_deref(), Some("n1"));
    c.finish_allocation("orphan", "n1").await;
    patch_node(
        &c.client,
        "n1",
        &MetadataPatch::new().annotate(
            "hami.io/mutex.lock",
            encode_node_lock(&NodeLock::owned(
                (chrono::Utc::now() - chrono::TimeDelta::seconds(40)).fixed_offset(),
                "default",
                "stale",
            )),
        ),
    )
    .await
    .unwrap();
    let started = Instant::now();
    assert_eq!(c.schedule("q").await, "n1");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_refused_watch_turns_readyz_not_ready_with_the_reason_and_recovers() {
    install_crypto();
    let knobs = Knobs {
        restart: patient(),
        ..Knobs::default()
    };
    let c = Cluster::start(&[("n1", gpus("n1", 1, 10_000))], knobs).await;
    c.ext.wait_readyz(200, "ready").await;
    c.server
        .faults()
        .set_error_rate("watch", 1.0, Fault::Forbidden);
    // The open streams end (a dropped connection); the watches come back refused.
    c.server.store().drop_watches();
    let why = c
        .ext
        .wait_readyz(
            503,
            "pod watch: failed: the API server refused the pod watch",
        )
        .await;
    assert!(why.contains("403") || why.contains("forbidden"), "{why}");
    assert!(why.contains("restarting in"), "{why}");
    c.server.faults().clear();
    c.ext.wait_readyz(200, "ready").await;
    // Restarted watches feed the cache again.
    c.create(&gpu_pod("after", &[limits(1000)], json!({})))
        .await;
    assert_eq!(c.schedule("after").await, "n1");
}

#[tokio::test]
async fn a_watch_that_keeps_failing_stops_the_extender_with_an_error() {
    install_crypto();
    let knobs = Knobs {
        restart: RestartPolicy {
            initial_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(20),
            max_failures: 3,
            window: Duration::from_secs(60),
        },
        ..Knobs::default()
    };
    let c = Cluster::start(&[("n1", gpus("n1", 1, 10_000))], knobs).await;
    c.server
        .faults()
        .set_error_rate("watch", 1.0, Fault::Forbidden);
    c.server.store().drop_watches();
    let err = c.ext.ended().await.unwrap_err();
    let RunError::GaveUp(gave_up) = &err else {
        panic!("{err}");
    };
    assert!(gave_up.task.ends_with("watch"), "{err}");
    assert_eq!(gave_up.failures, 3, "{err}");
    assert!(err.to_string().contains("refused"), "{err}");
}

/// Binds pod `name` to `node` straight in the store, as a second /bind of the same pod
/// does while the first still runs (kube-scheduler sends it again once its call timed
/// out): the first's Binding is then refused, the pod already assigned.
fn bind_in_store(c: &Cluster, name: &str, node: &str) -> impl FnOnce() + Send + 'static {
    let store = c.server.store().clone();
    let (name, node) = (name.to_string(), node.to_string());
    move || {
        store
            .update_with(&resources::PODS, Some("default"), &name, |cur| {
                let mut pod = cur.clone();
                pod["spec"]["nodeName"] = json!(node);
                Ok(pod)
            })
            .unwrap();
    }
}

/// A bind that fails with its pod bound to the node all the same (by another bind of
/// it, or its own Binding made though the answer failed) must not release the node
/// lock: the pod waits for kubelet's Allocate, which the device plugin matches to the
/// lock's owner. Released, the lock went to the next pod bound there, and each Allocate
/// on the node was answered for the pod after the one kubelet admitted (chaos seed 3,
/// `docs/architecture.md#chaos-run`).
#[tokio::test]
async fn a_bind_failing_for_a_pod_bound_meanwhile_keeps_its_node_lock() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 2, 10_000))], Knobs::default()).await;
    c.create(&gpu_pod("a", &[limits(6000)], json!({}))).await;
    assert_eq!(chosen(&c.filter("a").await).as_deref(), Some("n1"));
    c.server
        .faults()
        .before_next("create", "/pods/a/binding", bind_in_store(&c, "a", "n1"));
    let b = c.bind("a", "n1").await;
    let lock = c
        .node_lock("n1")
        .await
        .expect("the lock of a bound pod awaiting its Allocate was released");
    assert!(lock.ends_with(",default,a"), "{lock}");
    assert_eq!(b.error, "", "the pod is bound to n1: its bind stands");
    let a = c.pods().get("a").await.unwrap();
    assert_eq!(a.spec.unwrap().node_name.as_deref(), Some("n1"));
    assert_eq!(
        c.allocated_mem().await.values().sum::<u64>(),
        6000,
        "the bound pod's GPU is still counted"
    );

    // The next pod bound to n1 waits for the device plugin's release of a's lock.
    c.create(&gpu_pod("b", &[limits(1000)], json!({}))).await;
    assert_eq!(chosen(&c.filter("b").await).as_deref(), Some("n1"));
    let (bound, ()) = tokio::join!(c.bind("b", "n1"), async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let lock = c.node_lock("n1").await.unwrap();
        assert!(lock.ends_with(",default,a"), "taken from a: {lock}");
        c.finish_allocation("a", "n1").await;
    });
    assert_eq!(bound.error, "");
    assert!(c.node_lock("n1").await.unwrap().ends_with(",default,b"));
}

/// The Binding made though its answer was lost: the API server bound the pod and answered
/// 500, or its answer timed out (504; the client sends the Binding again and is told the
/// pod is assigned already). The pod is bound under the bind's UID, so the bind is
/// answered as done, its reservation stays counted and its node lock waits for the device
/// plugin's Allocate (`docs/extender.md#node-lock-takeover`).
#[tokio::test]
async fn a_binding_made_though_its_answer_was_lost_stands_and_keeps_its_node_lock() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 2, 10_000))], Knobs::default()).await;
    let faults = c.server.faults().clone();
    for (n, (pod, fault)) in [
        ("a", Fault::InternalError),
        ("t", Fault::Timeout(Duration::from_millis(100))),
    ]
    .into_iter()
    .enumerate()
    {
        c.create(&gpu_pod(pod, &[limits(4000)], json!({}))).await;
        assert_eq!(chosen(&c.filter(pod).await).as_deref(), Some("n1"));
        c.wait_annotations(pod, |a| a.contains_key("hami.io/vgpu-devices-allocated"))
            .await;
        // The Binding is made (in the store, as the API server does) and its answer is
        // the fault; only the first Binding fails (a retry is answered by the store).
        let bind = bind_in_store(&c, pod, "n1");
        let disarm = faults.clone();
        faults.before_next("create", &format!("/pods/{pod}/binding"), move || {
            bind();
            disarm.set_error_rate("create", 0.0, Fault::InternalError);
        });
        faults.set_error_rate("create", 1.0, fault);
        let b = c.bind(pod, "n1").await;
        faults.clear();
        assert_eq!(b.error, "", "{pod} is bound to n1: its bind stands");
        let p = c.pods().get(pod).await.unwrap();
        assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("n1"));
        let lock = c
            .node_lock("n1")
            .await
            .expect("the lock of a bound pod awaiting its Allocate was released");
        assert!(lock.ends_with(&format!(",default,{pod}")), "{lock}");
        assert_eq!(
            c.allocated_mem().await.values().sum::<u64>(),
            4000 * (n as u64 + 1),
            "{pod}: the bound pod's GPU is still counted"
        );
        let metrics = c.metrics().await;
        let bound = format!(
            "hami_scheduler_bind_requests_total{{result=\"bound\"}} {}",
            n + 1
        );
        assert!(metrics.contains(&bound), "{pod}: {metrics}");
        c.finish_allocation(pod, "n1").await;
    }
}

/// The bind-phase write failed (no Binding sent), but another bind of the pod ran while
/// this one waited and the pod is bound to the node under this bind's UID: the failed
/// bind reads the pod, is answered as done and keeps its node lock for the device
/// plugin (`docs/extender.md#node-lock-takeover`). The other bind here is one for another
/// node, which needs no API call and so runs at a known point; the Binding such a bind
/// makes is written straight in the store.
#[tokio::test]
async fn a_bind_whose_mark_failed_while_another_bind_of_the_pod_bound_it_stands() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 2, 10_000))], Knobs::default()).await;
    // Annotated as HAMi's /filter leaves a pod: without the mark, which /bind writes.
    let decided = decided_by_hami("n1", "n1-gpu0,NVIDIA,6000,0:;");
    c.create(&gpu_pod("a", &[limits(6000)], decided)).await;
    c.wait_allocated("n1-gpu0", 6000).await;
    let uid = c.pods().get("a").await.unwrap().metadata.uid.unwrap();

    // Once the node lock is written, every request waits 2 s and the bind-phase write
    // fails (500); the pod is bound to n1 just before that failure is answered.
    let faults = c.server.faults().clone();
    let (locked_tx, locked) = tokio::sync::oneshot::channel();
    let arm = faults.clone();
    faults.before_next("patch", "/nodes/n1", move || {
        arm.set_latency(Duration::from_secs(2));
        arm.set_error_rate("patch", 1.0, Fault::InternalError);
        let _ = locked_tx.send(());
    });
    let bind = bind_in_store(&c, "a", "n1");
    let disarm = faults.clone();
    faults.before_next("patch", "/pods/a", move || {
        bind();
        disarm.set_latency(Duration::ZERO);
        disarm.set_error_rate("patch", 0.0, Fault::InternalError);
    });
    let body = |node: &str| json!({"PodName": "a", "PodNamespace": "default", "PodUID": uid, "Node": node});
    let first = c.post::<hami_scheduler::wire::ExtenderBindingResult>("/bind", body("n1"));
    let (first, ()) = tokio::join!(first, async {
        locked.await.unwrap();
        let other: hami_scheduler::wire::ExtenderBindingResult = c.post("/bind", body("n2")).await;
        assert!(other.error.contains("not on n2"), "{}", other.error);
    });
    faults.clear();
    assert_eq!(first.error, "", "a is bound to n1: its bind stands");
    let lock = c
        .node_lock("n1")
        .await
        .expect("the lock of a bound pod awaiting its Allocate was released");
    assert!(lock.ends_with(",default,a"), "{lock}");
    assert_eq!(c.allocated_mem().await["n1-gpu0"], 6000);
}
