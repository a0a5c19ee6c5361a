//! The extender's holding rules, driven without an API server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet, HashSet};

use hami_core::codec::encode_node_register_json;
use hami_core::config::DeviceConfig;
use hami_core::holding::Expiry;
use hami_core::ledger::Ledger;
use hami_core::model::{ContainerDevice, DeviceInfo};
use hami_core::request::ContainerKind;
use hami_core::resources::Resources;
use hami_core::vendor::VendorRegistry;
use hami_scheduler::state::{Reservation, SchedState};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

const TTL: i64 = 120;
const T0: i64 = 1_800_000_000;

fn state() -> SchedState {
    SchedState::new(VendorRegistry::from_config(&DeviceConfig::default()), TTL)
}

fn gpu(id: &str, index: u32) -> DeviceInfo {
    DeviceInfo {
        id: id.into(),
        index,
        count: 10,
        mem_mib: 16_000,
        cores: 100,
        dev_type: "NVIDIA-A100".into(),
        numa: 0,
        mode: "hami-core".into(),
        health: true,
        mig_profiles: vec![],
        custom_info: Default::default(),
    }
}

fn node(name: &str, register: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "uid": format!("uid-{name}"),
                     "annotations": {"hami.io/node-nvidia-register": register}},
        "status": {"allocatable": {"nvidia.com/gpu": "20"}}
    }))
    .unwrap()
}

fn two_gpu_node(name: &str) -> Node {
    node(
        name,
        &encode_node_register_json(&[gpu(&format!("{name}-g0"), 0), gpu(&format!("{name}-g1"), 1)]),
    )
}

/// A pod with a one-container GPU assignment on `node`'s first GPU.
fn pod(uid: &str, node: &str, mem: u32, bound: Option<&str>, time: i64) -> Pod {
    let devices = format!("{node}-g0,NVIDIA,{mem},10:;");
    let mut spec = json!({"containers": [{"name": "c", "image": "x"}]});
    if let Some(b) = bound {
        spec["nodeName"] = json!(b);
    }
    serde_json::from_value(json!({
        "metadata": {"name": format!("p-{uid}"), "namespace": "default", "uid": uid,
            "annotations": {
                "hami.io/vgpu-node": node,
                "hami.io/vgpu-time": time.to_string(),
                "hami.io/vgpu-devices-allocated": devices,
                "hami.io/vgpu-devices-to-allocate": devices,
            }},
        "spec": spec,
        "status": {"phase": "Pending"}
    }))
    .unwrap()
}

fn plain_pod(uid: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("p-{uid}"), "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Pending"}
    }))
    .unwrap()
}

fn used_mem(st: &SchedState, node: &str) -> u64 {
    st.ledger()
        .usage(node)
        .map_or(0, |u| u.iter().flatten().map(|d| d.mem_used).sum())
}

/// Reserves `mem` MiB of `node`'s first GPU for `uid` the way /filter does.
fn reserve(
    st: &mut SchedState,
    uid: &str,
    node: &str,
    mem: u32,
    now: i64,
) -> BTreeMap<String, String> {
    let devices = BTreeMap::from([(
        "NVIDIA".to_string(),
        vec![vec![ContainerDevice {
            idx: 0,
            uuid: format!("{node}-g0"),
            dev_type: "NVIDIA".into(),
            mem_mib: mem,
            cores: 10,
            slots: 0,
        }]],
    )]);
    let annotations = pod(uid, node, mem, None, now).metadata.annotations.unwrap();
    st.reserve(&Reservation {
        uid,
        namespace: "default",
        name: &format!("p-{uid}"),
        node,
        devices: &devices,
        kinds: &[ContainerKind::App],
        annotations: &annotations,
        at: now,
    });
    annotations
}

#[test]
fn bound_pods_hold_until_terminated_or_deleted() {
    let mut st = state();
    st.apply_node(&two_gpu_node("n1"));
    st.apply_pod(&pod("a", "n1", 1000, Some("n1"), T0), T0);
    assert_eq!(used_mem(&st, "n1"), 1000);
    // Much later: bound pods never expire.
    assert!(st.expire(T0 + 10 * TTL).is_empty());
    assert_eq!(used_mem(&st, "n1"), 1000);
    // Terminating (deletionTimestamp) still holds; Succeeded releases.
    let mut done = pod("a", "n1", 1000, Some("n1"), T0);
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    st.apply_pod(&done, T0);
    assert_eq!(used_mem(&st, "n1"), 0);
    st.apply_pod(&pod("b", "n1", 500, Some("n1"), T0), T0);
    st.delete_pod("b");
    assert_eq!(used_mem(&st, "n1"), 0);
    assert_eq!(st.ledger().pod_count(), 0);
}

#[test]
fn unbound_annotated_pods_hold_only_until_the_reservation_timeout() {
    let mut st = state();
    st.apply_node(&two_gpu_node("n1"));
    st.apply_pod(&pod("a", "n1", 1000, None, T0), T0 + 1);
    assert_eq!(used_mem(&st, "n1"), 1000);
    assert!(st.expire(T0 + TTL - 1).is_empty());
    let expired = st.expire(T0 + TTL);
    assert_eq!(expired.len(), 1);
    assert!(!expired[0].reservation);
    assert_eq!(expired[0].node, "n1");
    assert_eq!(used_mem(&st, "n1"), 0);
    // A pod seen for the first time already past its timeout holds nothing.
    st.apply_pod(&pod("b", "n1", 700, None, T0), T0 + TTL + 5);
    assert_eq!(used_mem(&st, "n1"), 0);
    // Bound after all: it holds again.
    st.apply_pod(&pod("a", "n1", 1000, Some("n1"), T0), T0 + TTL + 10);
    assert_eq!(used_mem(&st, "n1"), 1000);
}

#[test]
fn reservations_hold_before_the_annotations_arrive() {
    let mut st = state();
    st.apply_node(&two_gpu_node("n1"));
    st.apply_pod(&plain_pod("a"), T0);
    reserve(&mut st, "a", "n1", 3000, T0);
    assert_eq!(used_mem(&st, "n1"), 3000);
    assert_eq!(st.holding_node("a"), Some("n1"));
    // A stale event (from before the annotation patch) does not undo the reservation.
    st.apply_pod(&plain_pod("a"), T0);
    assert_eq!(used_mem(&st, "n1"), 3000);
    // The annotations arrive; then the binding.
    st.apply_pod(&pod("a", "n1", 3000, None, T0), T0);
    assert_eq!(used_mem(&st, "n1"), 3000);
    st.apply_pod(&pod("a", "n1", 3000, Some("n1"), T0), T0 + 1);
    assert!(st.expire(T0 + 10 * TTL).is_empty());
    assert_eq!(used_mem(&st, "n1"), 3000);
}

#[test]
fn unconfirmed_reservations_expire() {
    let mut st = state();
    st.apply_node(&two_gpu_node("n1"));
    reserve(&mut st, "a", "n1", 3000, T0);
    let expired = st.expire(T0 + TTL);
    assert_eq!(expired.len(), 1);
    assert!(expired[0].reservation);
    assert_eq!(used_mem(&st, "n1"), 0);
    // Its annotations showing up late do not bring it back while unbound.
    st.apply_pod(&pod("a", "n1", 3000, None, T0), T0 + TTL + 1);
    assert_eq!(used_mem(&st, "n1"), 0);
}

#[test]
fn abandoned_and_superseded_decisions_never_come_back_unbound() {
    let mut st = state();
    st.apply_node(&two_gpu_node("n1"));
    st.apply_node(&two_gpu_node("n2"));
    reserve(&mut st, "a", "n1", 3000, T0);
    st.apply_pod(&pod("a", "n1", 3000, None, T0), T0);
    // Bind failed.
    assert_eq!(st.abandon("a", T0 + 1), Some("n1".into()));
    assert_eq!(used_mem(&st, "n1"), 0);
    assert_eq!(st.holding_node("a"), None);
    st.apply_pod(&pod("a", "n1", 3000, None, T0), T0 + 2);
    assert_eq!(used_mem(&st, "n1"), 0, "abandoned annotations resurrected");

    // Re-filtered onto n2: the new decision holds, the old annotations (still on the
    // pod until the new write lands) do not.
    st.begin_filter("a", T0 + 3);
    reserve(&mut st, "a", "n2", 2000, T0 + 3);
    st.apply_pod(&pod("a", "n1", 3000, None, T0), T0 + 4);
    assert_eq!((used_mem(&st, "n1"), used_mem(&st, "n2")), (0, 2000));
    // Superseded again (filter of a third decision) — the n2 one is abandoned too.
    st.begin_filter("a", T0 + 5);
    assert_eq!(used_mem(&st, "n2"), 0);
    st.apply_pod(&pod("a", "n2", 2000, None, T0 + 3), T0 + 6);
    assert_eq!(used_mem(&st, "n2"), 0);
    // But a pod really bound with those annotations counts, whatever this process
    // gave up on (a Binding that succeeded although its call failed).
    st.apply_pod(&pod("a", "n2", 2000, Some("n2"), T0 + 3), T0 + 7);
    assert_eq!(used_mem(&st, "n2"), 2000);
}

#[test]
fn refiltering_the_same_decision_keeps_it() {
    let mut st = state();
    st.apply_node(&two_gpu_node("n1"));
    reserve(&mut st, "a", "n1", 3000, T0);
    st.begin_filter("a", T0);
    // Same node, same devices, same second: the same signature is reserved again.
    reserve(&mut st, "a", "n1", 3000, T0);
    st.apply_pod(&pod("a", "n1", 3000, None, T0), T0);
    st.apply_pod(&pod("a", "n1", 3000, None, T0), T0 + 1);
    assert_eq!(used_mem(&st, "n1"), 3000);
}

#[test]
fn a_bound_pod_keeps_its_devices_when_filtered_again() {
    let mut st = state();
    st.apply_node(&two_gpu_node("n1"));
    st.apply_pod(&pod("a", "n1", 1000, Some("n1"), T0), T0);
    st.begin_filter("a", T0 + 1);
    assert_eq!(used_mem(&st, "n1"), 1000);
    assert_eq!(st.abandon("a", T0 + 1), None);
    assert_eq!(used_mem(&st, "n1"), 1000);
}

#[test]
fn pods_bound_elsewhere_hold_nothing() {
    let mut st = state();
    st.apply_node(&two_gpu_node("n1"));
    let applied = st.apply_pod(&pod("a", "n1", 1000, Some("n9"), T0), T0);
    assert_eq!(applied.bound_elsewhere, Some(("n9".into(), "n1".into())));
    assert_eq!(used_mem(&st, "n1"), 0);
}

#[test]
fn malformed_annotations_are_reported_and_not_counted() {
    let mut st = state();
    st.apply_node(&two_gpu_node("n1"));
    let mut p = pod("a", "n1", 1000, Some("n1"), T0);
    p.metadata.annotations.as_mut().unwrap().insert(
        "hami.io/vgpu-devices-allocated".into(),
        "g0,NVIDIA,lots,10:;".into(),
    );
    let applied = st.apply_pod(&p, T0);
    assert!(
        applied
            .error
            .unwrap()
            .to_string()
            .contains("hami.io/vgpu-devices-allocated")
    );
    assert_eq!(used_mem(&st, "n1"), 0);
    // No uid: ignored.
    let mut q = pod("b", "n1", 1000, Some("n1"), T0);
    q.metadata.uid = None;
    st.apply_pod(&q, T0);
    assert_eq!(st.ledger().pod_count(), 0);
}

#[test]
fn nodes_register_reregister_and_report_why_they_are_unusable() {
    let mut st = state();
    let issues = st.apply_node(&node("bad", "[{\"id\":")).unwrap();
    assert_eq!(issues.len(), 1);
    assert!(st.ledger().node("bad").is_none());
    let why = st.unusable_reason("bad");
    assert!(why.contains("hami.io/node-nvidia-register"), "{why}");
    // Same value again: nothing new to log.
    assert!(st.apply_node(&node("bad", "[{\"id\":")).is_none());
    assert!(st.unusable_reason("ghost").contains("unknown"));

    st.apply_node(&two_gpu_node("n1"));
    st.apply_pod(&pod("a", "n1", 1000, Some("n1"), T0), T0);
    // Taken out (plugin not reporting) and back: usage survives.
    assert!(st.set_vendor_health("n1", "NVIDIA", Some("plugin gone".into())));
    assert!(st.ledger().node("n1").is_none());
    assert!(st.unusable_reason("n1").contains("plugin gone"));
    assert!(!st.set_vendor_health("n1", "NVIDIA", Some("plugin gone".into())));
    assert!(st.set_vendor_health("n1", "NVIDIA", None));
    assert_eq!(used_mem(&st, "n1"), 1000);
    // Health survives a node update; a new registration keeps usage.
    st.set_vendor_health("n1", "NVIDIA", Some("x".into()));
    st.apply_node(&two_gpu_node("n1"));
    assert!(st.ledger().node("n1").is_none());
    st.set_vendor_health("n1", "NVIDIA", None);
    let bigger = node(
        "n1",
        &encode_node_register_json(&[gpu("n1-g0", 0), gpu("n1-g1", 1), gpu("n1-g2", 2)]),
    );
    assert_eq!(st.apply_node(&bigger), Some(vec![]));
    assert_eq!(used_mem(&st, "n1"), 1000);
    let nvidia = st
        .registry()
        .vendors()
        .iter()
        .position(|v| v.common_word() == "NVIDIA")
        .unwrap();
    assert_eq!(st.node("n1").unwrap().vendor(nvidia).allocatable, Some(20));
    st.delete_node("n1");
    assert!(st.ledger().node("n1").is_none());
}

#[test]
fn relists_drop_vanished_pods_but_keep_fresh_reservations() {
    let mut st = state();
    st.apply_node(&two_gpu_node("n1"));
    st.apply_pod(&pod("old", "n1", 1000, Some("n1"), T0), T0);
    st.apply_pod(&pod("kept", "n1", 100, Some("n1"), T0), T0);
    st.begin_pod_relist();
    // The relist shows `kept` again, not `old`.
    st.apply_pod(&pod("kept", "n1", 100, Some("n1"), T0), T0);
    reserve(&mut st, "new", "n1", 10, T0);
    st.retain_pods();
    assert_eq!(used_mem(&st, "n1"), 110);
    assert!(st.holding_node("old").is_none());
    st.retain_nodes(&HashSet::new());
    assert!(st.node("n1").is_none());
}

#[test]
fn a_pod_being_bound_never_expires_under_its_bind() {
    let mut st = state();
    st.apply_node(&two_gpu_node("n1"));
    reserve(&mut st, "a", "n1", 3000, T0);
    st.apply_pod(&pod("a", "n1", 3000, None, T0), T0);
    st.set_binding("a", true, T0 + 1);
    // Lock wait longer than the reservation timeout: neither the sweep nor a new event
    // (the bind-phase patch) may drop the hold.
    assert!(st.expire(T0 + 3 * TTL).is_empty());
    st.apply_pod(&pod("a", "n1", 3000, None, T0), T0 + 3 * TTL);
    assert_eq!(used_mem(&st, "n1"), 3000);
    st.note_bound("a", "n1", T0 + 3 * TTL);
    st.set_binding("a", false, T0 + 3 * TTL);
    assert_eq!(used_mem(&st, "n1"), 3000);
}

#[test]
fn events_older_than_our_own_writes_change_nothing() {
    let mut st = state();
    st.apply_node(&two_gpu_node("n1"));
    st.apply_node(&two_gpu_node("n2"));
    reserve(&mut st, "a", "n1", 3000, T0);
    st.note_bound("a", "n1", T0 + 1);
    // The watch is behind: an event from before the Binding (unbound) must not unbind
    // the pod, even long after the reservation timeout.
    st.apply_pod(&pod("a", "n1", 3000, None, T0), T0 + 10 * TTL);
    assert!(st.expire(T0 + 10 * TTL).is_empty());
    assert_eq!(used_mem(&st, "n1"), 3000);

    // A reservation is replaced only by annotations showing that very decision, even
    // on an event that shows the pod bound.
    reserve(&mut st, "b", "n2", 1000, T0);
    st.apply_pod(&pod("b", "n1", 7000, Some("n1"), T0 - 50), T0 + 1);
    assert_eq!((used_mem(&st, "n1"), used_mem(&st, "n2")), (3000, 1000));
}

#[test]
fn pods_without_gpus_leave_nothing_behind() {
    let mut st = state();
    st.apply_node(&two_gpu_node("n1"));
    for i in 0..100 {
        st.apply_pod(&plain_pod(&format!("cpu-{i}")), T0);
    }
    assert_eq!(st.pod_count(), 0);
    // A bound pod lives in the ledger alone; once it finishes, it leaves nothing.
    st.apply_pod(&pod("a", "n1", 1000, Some("n1"), T0), T0);
    assert_eq!(st.pod_count(), 0);
    assert_eq!(st.holding_node("a"), Some("n1"));
    let mut done = pod("a", "n1", 1000, Some("n1"), T0);
    done.status.as_mut().unwrap().phase = Some("Failed".into());
    st.apply_pod(&done, T0);
    assert_eq!(st.pod_count(), 0);
    assert_eq!(st.holding_node("a"), None);
    // An abandoned decision is remembered (its annotations must not count again).
    reserve(&mut st, "b", "n1", 10, T0);
    st.abandon("b", T0);
    assert_eq!(st.pod_count(), 1);
}

/// A node with allocatable CPU and memory besides its two GPUs.
fn node_with_cpu(name: &str, cpu: &str, memory: &str) -> Node {
    let mut n = two_gpu_node(name);
    if let Some(a) = n.status.as_mut().and_then(|s| s.allocatable.as_mut()) {
        a.insert(
            "cpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.into()),
        );
        a.insert(
            "memory".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(memory.into()),
        );
    }
    n
}

/// A pod without devices requesting `cpu`, bound to `node` when given, in `phase`.
fn cpu_pod(uid: &str, cpu: &str, node: Option<&str>, phase: &str) -> Pod {
    let mut spec = json!({"containers": [
        {"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}
    ]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(json!({
        "metadata": {"name": format!("p-{uid}"), "namespace": "default", "uid": uid},
        "spec": spec,
        "status": {"phase": phase}
    }))
    .unwrap()
}

/// Every pod's CPU and memory count on the node it is bound to, GPU or not, as the watch
/// shows them (kube-scheduler's accounting): binding adds, finishing and deletion take back,
/// and an unreadable allocatable leaves the node's amounts unknown.
#[test]
fn node_cpu_and_memory_follow_the_watch() {
    let mut st = state();
    st.apply_node(&node_with_cpu("n1", "16", "64Gi"));
    let free = |st: &SchedState| st.ledger().node("n1").and_then(|n| n.resources().free());
    assert_eq!(free(&st), Some(Resources::new(16_000, 64 << 30)));
    st.apply_pod(&cpu_pod("a", "4", None, "Pending"), T0);
    assert_eq!(free(&st), Some(Resources::new(16_000, 64 << 30)));
    st.apply_pod(&cpu_pod("a", "4", Some("n1"), "Running"), T0);
    st.apply_pod(&cpu_pod("b", "500m", Some("n1"), "Running"), T0);
    assert_eq!(free(&st), Some(Resources::new(11_500, 62 << 30)));
    st.apply_pod(&cpu_pod("a", "4", Some("n1"), "Succeeded"), T0);
    assert_eq!(free(&st), Some(Resources::new(15_500, 63 << 30)));
    st.delete_pod("b");
    assert_eq!(free(&st), Some(Resources::new(16_000, 64 << 30)));
    assert_eq!(st.counted_pods(), 0);
    // A relist that no longer lists a pod forgets its requests.
    st.apply_pod(&cpu_pod("c", "2", Some("n1"), "Running"), T0);
    st.begin_pod_relist();
    st.retain_pods();
    assert_eq!(free(&st), Some(Resources::new(16_000, 64 << 30)));
    // Garbage in the node's status: unknown, not a panic.
    st.apply_node(&node_with_cpu("n1", "many", "64Gi"));
    assert_eq!(free(&st), None);
}

/// A /filter reservation counts the pod's CPU on its node until the pod shows up bound,
/// and stops counting when the reservation is abandoned.
#[test]
fn reserved_pods_count_their_cpu_until_abandoned() {
    let mut st = state();
    st.apply_node(&node_with_cpu("n1", "16", "64Gi"));
    st.apply_pod(&cpu_pod("r", "6", None, "Pending"), T0);
    reserve(&mut st, "r", "n1", 1000, T0);
    st.reserve_resources("r", "n1", Resources::new(6_000, 1 << 30));
    let free = |st: &SchedState| st.ledger().node("n1").and_then(|n| n.resources().free());
    assert_eq!(free(&st), Some(Resources::new(10_000, 63 << 30)));
    st.apply_pod(&cpu_pod("r", "6", None, "Pending"), T0);
    assert_eq!(free(&st), Some(Resources::new(10_000, 63 << 30)));
    st.abandon("r", T0);
    assert_eq!(free(&st), Some(Resources::new(16_000, 64 << 30)));
}

/// The typical workload is the prior until enough pods are seen, then the pods' shapes;
/// each pod counts once however many events it has.
#[test]
fn the_frag_workload_is_learnt_from_the_pods_seen() {
    let mut st = state();
    st.apply_node(&node_with_cpu("n1", "16", "64Gi"));
    assert_eq!(st.frag_view()["source"], "prior");
    for i in 0..300 {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("g{i}"), "namespace": "default", "uid": format!("g{i}"),
                "annotations": {"nvidia.com/use-gputype": "A100"}},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {
                "requests": {"cpu": "3"},
                "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "40",
                           "nvidia.com/gpumem-percentage": "25"}}}]},
            "status": {"phase": "Pending"}
        }))
        .unwrap();
        st.apply_pod(&p, T0);
        st.apply_pod(&p, T0);
    }
    let view = st.frag_view();
    assert_eq!(view["source"], "observed");
    assert_eq!(view["pods_seen"], 300);
    let class = &view["classes"][0];
    assert_eq!(class["cpu_milli"], 3000);
    assert_eq!(class["gpu_milli"], 400);
    assert_eq!(class["models"], json!(["NVIDIA-A100"]));
    let model = st.frag_model(T0);
    assert_eq!(model.workload().classes.len(), 1);
    assert_eq!(model.model_of("NVIDIA-A100"), 0);
}

/// The extender's state and `hamictl explain`'s snapshot usage count the same pods, on
/// the same nodes, with the same devices (one accounting rule, `hami_core::holding`).
#[test]
fn the_extender_and_hamictl_count_the_same_pods() {
    let now = T0 + 1_000;
    let set_phase = |mut p: Pod, phase: &str| {
        p.status.as_mut().unwrap().phase = Some(phase.into());
        p
    };
    let terminating = {
        let mut p = set_phase(pod("leaving", "n2", 600, Some("n2"), T0), "Running");
        p.metadata.deletion_timestamp =
            serde_json::from_value(json!("2027-01-15T08:00:00Z")).unwrap();
        p
    };
    let bind_failed = {
        let mut p = pod("unlucky", "n2", 700, Some("n2"), T0);
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("hami.io/bind-phase".into(), "failed".into());
        p
    };
    let nodes = vec![two_gpu_node("n1"), two_gpu_node("n2")];
    let pods = vec![
        set_phase(pod("running", "n1", 1000, Some("n1"), T0), "Running"),
        // Reserved by /filter, not bound yet: fresh, and past the reservation timeout.
        pod("fresh", "n1", 2000, None, now - 10),
        pod("stale", "n2", 4000, None, now - TTL - 1),
        // Assigned to n1, bound to n2.
        pod("moved", "n1", 8000, Some("n2"), now - 10),
        set_phase(pod("done", "n2", 300, Some("n2"), T0), "Succeeded"),
        set_phase(pod("crashed", "n1", 500, Some("n1"), T0), "Failed"),
        terminating,
        bind_failed,
        plain_pod("cpu-only"),
    ];

    let mut st = state();
    for n in &nodes {
        st.apply_node(n);
    }
    // This process made the decisions of two of them, before their annotations arrived.
    reserve(&mut st, "fresh", "n1", 2000, now - 10);
    reserve(&mut st, "stale", "n2", 4000, now - TTL - 1);
    for p in &pods {
        st.apply_pod(p, now);
    }
    st.expire(now);

    let registry = VendorRegistry::from_config(&DeviceConfig::default());
    let snapshot =
        hamictl::usage::snapshot_usage(&nodes, &pods, &registry, Expiry::new(now, TTL), None);
    assert_eq!(
        snapshot.warnings,
        ["pod default/p-moved: bound to node n2 but assigned GPUs on n1; not counted"]
    );

    let counted =
        |l: &Ledger| -> BTreeSet<String> { l.pods().map(|r| r.uid.to_string()).collect() };
    let expected: BTreeSet<String> = ["running", "fresh", "leaving", "unlucky"]
        .map(String::from)
        .into();
    assert_eq!(counted(st.ledger()), expected);
    assert_eq!(counted(&snapshot.ledger), expected);
    for node in ["n1", "n2"] {
        assert_eq!(
            st.ledger().usage(node),
            snapshot.ledger.usage(node),
            "{node}"
        );
    }
    assert_eq!((used_mem(&st, "n1"), used_mem(&st, "n2")), (3000, 1300));
}
