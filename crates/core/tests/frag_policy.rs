//! The `frag` node and GPU policies of the placement engine.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers

mod common;

use std::sync::Arc;

use common::*;
use hami_core::engine::{Placement, PodPlan, place};
use hami_core::frag::live::{FragModel, GpuTaskShape, workload_from_shapes};
use hami_core::ledger::{Ledger, PodRecord};
use hami_core::policy::{GpuPolicy, NodePolicy};
use hami_core::resources::Resources;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Typical workload: half 500-milli tasks, half whole cards.
fn model() -> Arc<FragModel> {
    Arc::new(FragModel::new(workload_from_shapes(&[
        GpuTaskShape::new(1, 500, 1),
        GpuTaskShape::new(1, 1000, 1),
    ])))
}

fn frag_pod(name: &str, mem: u32, cores: u32, node_policy: &str, gpu_policy: &str) -> Pod {
    with_annotations(
        gpu_pod(name, 1, mem, cores),
        &[
            ("hami.io/node-scheduler-policy", node_policy),
            ("hami.io/gpu-scheduler-policy", gpu_policy),
        ],
    )
}

fn frag_plan(pod: &Pod) -> PodPlan {
    plan(pod).with_frag_model(model())
}

/// Places `pod` on exactly `node` and records it.
fn reserve_on(ledger: &mut Ledger, pod: &Pod, node: &str) {
    let p = plan(pod);
    let out = place(&p, &registry(), ledger, &[node.to_string()]);
    let Some((n, fit)) = out.chosen else {
        panic!("{node} must fit the setup pod");
    };
    let name = pod.metadata.name.clone().unwrap_or_default();
    let rec = PodRecord::from_devices(
        &format!("uid-{name}"),
        "default",
        &name,
        &n,
        &fit.devices,
        &p.kinds,
    );
    ledger.apply_pod(rec);
}

fn chosen_devices(out: &Placement) -> (String, Vec<String>) {
    let Some((node, fit)) = &out.chosen else {
        return (String::new(), Vec::new());
    };
    let uuids = fit
        .devices
        .values()
        .flatten()
        .flatten()
        .map(|d| d.uuid.clone())
        .collect();
    (node.clone(), uuids)
}

#[test]
fn policies_parse() {
    assert_eq!("frag".parse::<NodePolicy>().ok(), Some(NodePolicy::Frag));
    assert_eq!(NodePolicy::from_annotation(" frag "), NodePolicy::Frag);
    assert_eq!(NodePolicy::Frag.to_string(), "frag");
    let g = GpuPolicy::parse_strict("frag").unwrap_or_default();
    assert!(g.frag);
    assert!(!GpuPolicy::parse_lenient("binpack").frag);
    let p = plan(&frag_pod("p", 500, 50, "frag", "frag"));
    assert_eq!(p.node_policy, NodePolicy::Frag);
    assert!(p.frag.is_some());
    assert!(plan(&gpu_pod("q", 1, 500, 50)).frag.is_none());
}

/// Node `a` is fuller (binpack's choice) but the 500-milli pod would strand its free
/// card; node `b` has an exact 500 hole.
#[test]
fn frag_node_policy_prefers_the_node_left_less_fragmented() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "a", 2, 1000);
    add_node(&mut ledger, "b", 2, 1000);
    reserve_on(&mut ledger, &gpu_pod("fill-a", 1, 800, 80), "a");
    reserve_on(&mut ledger, &gpu_pod("fill-b", 1, 500, 50), "b");
    let nodes = names(&ledger);

    let binpack = plan(&frag_pod("p", 500, 50, "binpack", "binpack"));
    let out = place(&binpack, &registry(), &ledger, &nodes);
    assert_eq!(chosen_devices(&out).0, "a");

    let frag = frag_plan(&frag_pod("p", 500, 50, "frag", "frag"));
    let out = place(&frag, &registry(), &ledger, &nodes);
    assert_eq!(
        chosen_devices(&out),
        // fill-b took the last of b's two equal cards (`docs/protocol.md#gpu-policies`).
        ("b".to_string(), vec!["b-gpu-1".to_string()])
    );
    // Scores are F(before) − F(after) in milli-GPU: b goes 250 → 0, a goes 200 → 450.
    assert!((out.scores["b"] - 250.0).abs() < 1e-3, "{:?}", out.scores);
    assert!((out.scores["a"] + 250.0).abs() < 1e-3, "{:?}", out.scores);
}

/// On one node, the GPU policy takes the card the pod fills exactly; spread would
/// take the empty card and leave two half-used ones.
#[test]
fn frag_gpu_policy_prefers_the_device_left_less_fragmented() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n", 3, 1000);
    reserve_on(&mut ledger, &gpu_pod("f0", 1, 300, 30), "n");
    reserve_on(&mut ledger, &gpu_pod("f1", 1, 500, 50), "n");
    let nodes = names(&ledger);
    // The setup pods went to GPU 2 and GPU 1 (spread takes an empty card first, the
    // last of equal ones as HAMi does).
    let spread = plan(&frag_pod("p", 500, 50, "binpack", "spread"));
    let (_, spread_pick) = chosen_devices(&place(&spread, &registry(), &ledger, &nodes));
    assert_eq!(spread_pick, vec!["n-gpu-0".to_string()]);
    let frag = frag_plan(&frag_pod("p", 500, 50, "binpack", "frag"));
    let (_, frag_pick) = chosen_devices(&place(&frag, &registry(), &ledger, &nodes));
    assert_eq!(frag_pick, vec!["n-gpu-1".to_string()]);
}

/// Same inputs, same answer; equal nodes go to the smallest name.
#[test]
fn frag_placement_is_deterministic() {
    let mut ledger = Ledger::new();
    for name in ["c", "a", "b"] {
        add_node(&mut ledger, name, 4, 1000);
    }
    let nodes = names(&ledger);
    let mut placed = Vec::new();
    for i in 0..12 {
        let pod = frag_pod(
            &format!("p{i}"),
            100 * (1 + i % 7),
            10 * (1 + i % 7),
            "frag",
            "frag",
        );
        let p = frag_plan(&pod);
        let first = place(&p, &registry(), &ledger, &nodes);
        let again = place(&p, &registry(), &ledger, &nodes);
        assert_eq!(first, again);
        let (node, fit) = first.chosen.clone().expect("a node fits");
        if i == 0 {
            assert_eq!(node, "a");
        }
        ledger.apply_pod(PodRecord::from_devices(
            &format!("uid-p{i}"),
            "default",
            &format!("p{i}"),
            &node,
            &fit.devices,
            &p.kinds,
        ));
        placed.push(chosen_devices(&first));
    }
    // Replaying on a fresh ledger gives the same sequence.
    let mut fresh = Ledger::new();
    for name in ["a", "b", "c"] {
        add_node(&mut fresh, name, 4, 1000);
    }
    for (i, want) in placed.iter().enumerate() {
        let pod = frag_pod(
            &format!("p{i}"),
            100 * (1 + i as u32 % 7),
            10 * (1 + i as u32 % 7),
            "frag",
            "frag",
        );
        let p = frag_plan(&pod);
        let out = place(&p, &registry(), &fresh, &names(&fresh));
        assert_eq!(&chosen_devices(&out), want);
        let (node, fit) = out.chosen.expect("a node fits");
        fresh.apply_pod(PodRecord::from_devices(
            &format!("uid-p{i}"),
            "default",
            &format!("p{i}"),
            &node,
            &fit.devices,
            &p.kinds,
        ));
    }
}

/// Typical workload with CPU: half 500-milli tasks, half whole cards, each with 8 cores.
fn cpu_model() -> Arc<FragModel> {
    use hami_core::frag::{ModelSet, TaskClass, TypicalWorkload};
    let class = |gpu_milli| TaskClass {
        cpu_milli: 8_000,
        mem_mib: 0,
        gpu_milli,
        num_gpu: 1,
        models: ModelSet::ANY,
        weight: 0.5,
    };
    Arc::new(FragModel::new(TypicalWorkload {
        classes: vec![class(500), class(1000)],
    }))
}

/// `frag_pod` asking for `cpu` of CPU besides its GPU share.
fn frag_pod_with_cpu(name: &str, mem: u32, cores: u32, cpu: &str) -> Pod {
    let mut p = frag_pod(name, mem, cores, "frag", "frag");
    if let Some(c) = p.spec.as_mut().and_then(|s| s.containers.first_mut())
        && let Some(r) = c.resources.as_mut()
    {
        r.requests = Some([("cpu".to_string(), Quantity(cpu.to_string()))].into());
    }
    p
}

/// Two nodes equal in GPUs; `a` has little CPU left, so the pod's CPU would strand its
/// free card there: the CPU-aware `frag` places it on `b`, the CPU-blind measure (unknown
/// allocatable) cannot tell the nodes apart and takes the first name.
#[test]
fn frag_node_policy_reads_node_cpu() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "a", 2, 1000);
    add_node(&mut ledger, "b", 2, 1000);
    let nodes = names(&ledger);
    let pod = frag_pod_with_cpu("p", 500, 50, "4");
    let p = plan(&pod).with_frag_model(cpu_model());
    assert_eq!(p.resources, Resources::new(4000, 0));
    assert_eq!(
        chosen_devices(&place(&p, &registry(), &ledger, &nodes)).0,
        "a"
    );

    ledger.set_node_allocatable("a", Some(Resources::new(16_000, 64 << 30)));
    ledger.set_node_allocatable("b", Some(Resources::new(64_000, 64 << 30)));
    ledger.add_node_requests("a", Resources::new(6_000, 0), true);
    let out = place(&p, &registry(), &ledger, &nodes);
    assert_eq!(chosen_devices(&out).0, "b", "{:?}", out.scores);
    assert!(out.scores["b"] > out.scores["a"], "{:?}", out.scores);
    // Requests leaving again restore the tie (cached scores were dropped with the change).
    ledger.add_node_requests("a", Resources::new(6_000, 0), false);
    ledger.set_node_allocatable("a", Some(Resources::new(64_000, 64 << 30)));
    let out = place(&p, &registry(), &ledger, &nodes);
    assert_eq!(chosen_devices(&out).0, "a", "{:?}", out.scores);
}

/// A pod without devices still gets a `frag` node score (its CPU changes Φ), so a
/// simulation can rank nodes for it the way kube-scheduler would with this score.
#[test]
fn cpu_only_pods_rank_by_the_cpu_they_strand() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "a", 2, 1000);
    add_node(&mut ledger, "b", 2, 1000);
    ledger.set_node_allocatable("a", Some(Resources::new(16_000, 64 << 30)));
    ledger.set_node_allocatable("b", Some(Resources::new(64_000, 64 << 30)));
    let mut pod = frag_pod_with_cpu("cpu-only", 500, 50, "10");
    if let Some(r) = pod
        .spec
        .as_mut()
        .and_then(|s| s.containers.first_mut())
        .and_then(|c| c.resources.as_mut())
    {
        r.limits = None;
    }
    let p = plan(&pod).with_frag_model(cpu_model());
    assert!(p.is_empty());
    let out = place(&p, &registry(), &ledger, &names(&ledger));
    assert_eq!(chosen_devices(&out).0, "b", "{:?}", out.scores);
}

/// Cached node scores change nothing: every placement of a sequence is the same with the
/// cache on and off.
#[test]
fn cached_frag_scores_place_as_fresh_ones() {
    let build = |capacity: usize| {
        let mut ledger = Ledger::new();
        ledger.set_score_cache_capacity(capacity);
        for (i, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
            add_node(&mut ledger, name, 4, 1000);
            ledger
                .set_node_allocatable(name, Some(Resources::new(8_000 * (i as i64 + 2), 1 << 40)));
        }
        ledger
    };
    let (mut cached, mut fresh) = (build(64), build(0));
    for i in 0..40u32 {
        let share = 100 * (1 + i % 5);
        let pod = frag_pod_with_cpu(
            &format!("p{i}"),
            share,
            share / 10,
            &format!("{}", 1 + i % 3),
        );
        let p = frag_plan_with(&pod, cpu_model_shared());
        let a = place(&p, &registry(), &cached, &names(&cached));
        let b = place(&p, &registry(), &fresh, &names(&fresh));
        assert_eq!(a, b, "pod {i}");
        let Some((node, fit)) = a.chosen else {
            break;
        };
        for ledger in [&mut cached, &mut fresh] {
            ledger.apply_pod(PodRecord::from_devices(
                &format!("uid-p{i}"),
                "default",
                &format!("p{i}"),
                &node,
                &fit.devices,
                &p.kinds,
            ));
            ledger.add_node_requests(&node, p.resources, true);
        }
    }
    assert!(
        cached.nodes().any(|n| !n.frag_cache().is_empty()),
        "the cache was used"
    );
}

fn cpu_model_shared() -> Arc<FragModel> {
    use std::sync::OnceLock;
    static MODEL: OnceLock<Arc<FragModel>> = OnceLock::new();
    MODEL.get_or_init(cpu_model).clone()
}

fn frag_plan_with(pod: &Pod, model: Arc<FragModel>) -> PodPlan {
    plan(pod).with_frag_model(model)
}

/// Equal device scores go to the lowest index (FGD's rule), whatever the node's NUMA
/// layout says.
#[test]
fn frag_gpu_policy_breaks_ties_by_lowest_index() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n", 4, 1000);
    let p = frag_plan(&frag_pod("p", 500, 50, "binpack", "frag"));
    let (_, picked) = chosen_devices(&place(&p, &registry(), &ledger, &names(&ledger)));
    assert_eq!(picked, vec!["n-gpu-0".to_string()]);
}
