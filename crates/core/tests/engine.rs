//! Placement engine behaviour: fit checks and reasons, policies, multi-container pods,
//! annotations.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use hami_core::engine::{PodPlan, SchedulerDefaults, allocation_annotations, fit_node, place};
use hami_core::fit::FitFailure;
use hami_core::ledger::{Ledger, PodRecord};
use hami_core::policy::{GpuPolicy, NodePolicy};

fn place_one(ledger: &Ledger, p: &hami_core::engine::PodPlan) -> hami_core::engine::Placement {
    place(p, &registry(), ledger, &names(ledger))
}

/// Places and records the pod like the extender's filter does (a reservation).
fn place_and_reserve(ledger: &mut Ledger, pod: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    let p = plan(pod);
    let placement = place_one(ledger, &p);
    let (node, fit) = placement.chosen?;
    let rec = PodRecord::from_devices(
        pod.metadata.uid.as_deref().unwrap(),
        "default",
        pod.metadata.name.as_deref().unwrap(),
        &node,
        &fit.devices,
        &p.kinds,
    );
    ledger.apply_pod(rec);
    Some(node)
}

#[test]
fn insufficient_memory_reason_is_hami_formatted() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n1", 2, 1000);
    let p = plan(&gpu_pod("big", 1, 2000, 10));
    let out = place_one(&ledger, &p);
    assert!(out.chosen.is_none());
    assert_eq!(out.failed["n1"], "2/2 CardInsufficientMemory");
}

#[test]
fn too_many_gpus_is_node_insufficient_device() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n1", 2, 1000);
    let out = place_one(&ledger, &plan(&gpu_pod("p", 3, 10, 0)));
    assert_eq!(out.failed["n1"], "NodeInsufficientDevice");
}

#[test]
fn unknown_candidate_is_unregistered() {
    let ledger = Ledger::new();
    let out = place(
        &plan(&gpu_pod("p", 1, 10, 0)),
        &registry(),
        &ledger,
        &["ghost".into()],
    );
    assert_eq!(out.failed["ghost"], "node unregistered");
}

#[test]
fn unhealthy_cordoned_and_partial_picks_are_counted() {
    let mut ledger = Ledger::new();
    let mut devs = vec![gpu("A", 0, 1000), gpu("B", 1, 1000), gpu("C", 2, 1000)];
    devs[0].health = false;
    let mut inv = inventory(devs);
    inv.cordon.insert("B".into());
    ledger.set_node("n1", inv);
    let out = place_one(&ledger, &plan(&gpu_pod("p", 2, 10, 0)));
    assert_eq!(
        out.failed["n1"],
        "1/3 AllocatedCardsInsufficientRequest, 1/3 CardCordoned, 1/3 CardNotHealth"
    );
}

#[test]
fn type_and_uuid_selectors() {
    let mut ledger = Ledger::new();
    let mut a100 = gpu("A", 0, 1000);
    a100.dev_type = "NVIDIA A100-SXM4-40GB".into();
    ledger.set_node("n1", inventory(vec![a100, gpu("V", 1, 1000)]));
    let base = gpu_pod("p", 1, 10, 0);

    let only_a100 = with_annotations(base.clone(), &[("nvidia.com/use-gputype", "a100")]);
    let out = place_one(&ledger, &plan(&only_a100));
    let (_, fit) = out.chosen.unwrap();
    assert_eq!(fit.devices["NVIDIA"][0][0].uuid, "A");

    let no_gpus = with_annotations(
        base.clone(),
        &[
            ("nvidia.com/use-gputype", "H100"),
            ("nvidia.com/nouse-gpuuuid", ""),
        ],
    );
    let out = place_one(&ledger, &plan(&no_gpus));
    assert_eq!(out.failed["n1"], "2/2 CardTypeMismatch");

    let not_v = with_annotations(base, &[("nvidia.com/nouse-gpuuuid", "V, A")]);
    let out = place_one(&ledger, &plan(&not_v));
    assert_eq!(out.failed["n1"], "2/2 CardUuidMismatch");
}

#[test]
fn exclusive_card_needs_an_idle_device() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n1", 1, 1000);
    // A zero-core sharer leaves all compute free, yet the card is no longer idle.
    assert!(place_and_reserve(&mut ledger, &gpu_pod("small", 1, 100, 0)).is_some());
    let out = place_one(&ledger, &plan(&gpu_pod("whole", 1, 100, 100)));
    assert_eq!(out.failed["n1"], "1/1 ExclusiveDeviceAllocateConflict");
}

#[test]
fn slots_and_compute_units_run_out() {
    let mut ledger = Ledger::new();
    let mut d = gpu("A", 0, 100_000);
    d.count = 2;
    ledger.set_node("n1", inventory(vec![d]));
    assert!(place_and_reserve(&mut ledger, &gpu_pod("a", 1, 10, 60)).is_some());
    let out = place_one(&ledger, &plan(&gpu_pod("b", 1, 10, 50)));
    assert_eq!(out.failed["n1"], "1/1 CardInsufficientCore");
    assert!(place_and_reserve(&mut ledger, &gpu_pod("c", 1, 10, 40)).is_some());
    let out = place_one(&ledger, &plan(&gpu_pod("d", 1, 10, 0)));
    assert_eq!(out.failed["n1"], "1/1 CardTimeSlicingExhausted");

    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n2", 1, 100_000);
    assert!(place_and_reserve(&mut ledger, &gpu_pod("full", 1, 10, 100)).is_some());
    // Exclusive holder: a zero-core pod still sees the device as busy.
    let out = place_one(&ledger, &plan(&gpu_pod("zero", 1, 10, 0)));
    assert_eq!(out.failed["n2"], "1/1 CardComputeUnitsExhausted");
}

#[test]
fn node_binpack_fills_used_nodes_and_spread_avoids_them() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "a", 2, 1000);
    add_node(&mut ledger, "b", 2, 1000);
    // Equal scores: the first name wins (deterministic).
    assert_eq!(
        place_and_reserve(&mut ledger, &gpu_pod("p1", 1, 100, 10)).as_deref(),
        Some("a")
    );
    // Binpack: the used node again.
    assert_eq!(
        place_and_reserve(&mut ledger, &gpu_pod("p2", 1, 100, 10)).as_deref(),
        Some("a")
    );
    // Spread via the pod annotation: the idle node.
    let spread = with_annotations(
        gpu_pod("p3", 1, 100, 10),
        &[("hami.io/node-scheduler-policy", "spread")],
    );
    assert_eq!(
        place_and_reserve(&mut ledger, &spread).as_deref(),
        Some("b")
    );
}

#[test]
fn gpu_binpack_and_spread_choose_devices() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n", 3, 1000);
    let first = place_and_reserve(&mut ledger, &gpu_pod("p1", 1, 500, 10));
    assert_eq!(first.as_deref(), Some("n"));
    let binpack = with_annotations(
        gpu_pod("p2", 1, 100, 10),
        &[("hami.io/gpu-scheduler-policy", "binpack")],
    );
    // p1 took the last of three equal GPUs, as HAMi does (`docs/protocol.md#gpu-policies`).
    let (_, fit) = place_one(&ledger, &plan(&binpack)).chosen.unwrap();
    assert_eq!(fit.devices["NVIDIA"][0][0].uuid, "n-gpu-2");
    let spread = gpu_pod("p3", 1, 100, 10); // default gpu policy is spread
    let (_, fit) = place_one(&ledger, &plan(&spread)).chosen.unwrap();
    assert_eq!(fit.devices["NVIDIA"][0][0].uuid, "n-gpu-1");
}

#[test]
fn later_containers_see_earlier_ones() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n", 1, 1000);
    let p = pod(
        "two",
        vec![
            container(
                "a",
                &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "600")],
            ),
            container(
                "b",
                &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "600")],
            ),
        ],
    );
    let out = place_one(&ledger, &plan(&p));
    assert_eq!(out.failed["n"], "1/1 CardInsufficientMemory");
}

#[test]
fn init_containers_are_fitted_apart_and_counted_at_peak() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n", 1, 1000);
    let mut p = pod(
        "init",
        vec![container(
            "app",
            &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "600")],
        )],
    );
    p.spec.as_mut().unwrap().init_containers = Some(vec![container(
        "warmup",
        &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "800")],
    )]);
    // 800 + 600 would not fit, but they never run together.
    let pl = plan(&p);
    let (node, fit) = place_one(&ledger, &pl).chosen.unwrap();
    let ann = allocation_annotations(&registry(), &pl, &node, &fit, 1_700_000_000);
    assert_eq!(
        ann["hami.io/vgpu-devices-allocated"],
        "n-gpu-0,NVIDIA,800,0:;n-gpu-0,NVIDIA,600,0:;"
    );
    let rec = PodRecord::from_devices("u", "default", "init", &node, &fit.devices, &pl.kinds);
    ledger.apply_pod(rec);
    let usage = ledger.usage("n").unwrap();
    assert_eq!(usage[0][0].mem_used, 800);
    assert_eq!(usage[0][0].used, 1);
}

#[test]
fn annotations_keep_empty_containers_aligned() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n", 1, 1000);
    let p = pod(
        "mixed",
        vec![
            container("sidecar", &[]),
            container(
                "main",
                &[
                    ("nvidia.com/gpu", "1"),
                    ("nvidia.com/gpumem", "100"),
                    ("nvidia.com/gpucores", "20"),
                ],
            ),
        ],
    );
    let pl = plan(&p);
    let (node, fit) = place_one(&ledger, &pl).chosen.unwrap();
    let ann = allocation_annotations(&registry(), &pl, &node, &fit, 42);
    assert_eq!(ann["hami.io/vgpu-node"], "n");
    assert_eq!(ann["hami.io/vgpu-time"], "42");
    assert_eq!(
        ann["hami.io/vgpu-devices-to-allocate"],
        ";n-gpu-0,NVIDIA,100,20:;"
    );
    assert_eq!(
        ann["hami.io/vgpu-devices-allocated"],
        ";n-gpu-0,NVIDIA,100,20:;"
    );
}

#[test]
fn memory_percentage_resolves_per_device() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n", 1, 16_000);
    let p = pod(
        "pct",
        vec![container(
            "c",
            &[
                ("nvidia.com/gpu", "1"),
                ("nvidia.com/gpumem-percentage", "25"),
            ],
        )],
    );
    let (_, fit) = place_one(&ledger, &plan(&p)).chosen.unwrap();
    assert_eq!(fit.devices["NVIDIA"][0][0].mem_mib, 4000);
    // A plain `nvidia.com/gpu: 1` takes the whole memory.
    let (_, fit) = place_one(
        &ledger,
        &plan(&pod(
            "whole",
            vec![container("c", &[("nvidia.com/gpu", "1")])],
        )),
    )
    .chosen
    .unwrap();
    assert_eq!(fit.devices["NVIDIA"][0][0].mem_mib, 16_000);
}

#[test]
fn numa_bind_keeps_a_container_on_one_numa_node() {
    let mut ledger = Ledger::new();
    let mut devs: Vec<_> = (0..4).map(|i| gpu(&format!("G{i}"), i, 1000)).collect();
    devs[2].numa = 1;
    devs[3].numa = 1;
    devs[3].health = false;
    devs[0].health = false;
    ledger.set_node("n", inventory(devs));
    let p = with_annotations(gpu_pod("p", 2, 10, 0), &[("nvidia.com/numa-bind", "true")]);
    let out = place_one(&ledger, &plan(&p));
    let reason = &out.failed["n"];
    assert!(reason.contains("NumaNotFit"), "{reason}");
    // Without the binding the two healthy GPUs on different NUMA nodes are fine.
    assert!(
        place_one(&ledger, &plan(&gpu_pod("q", 2, 10, 0)))
            .chosen
            .is_some()
    );
}

#[test]
fn mutex_policy_skips_used_devices() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n", 2, 1000);
    place_and_reserve(&mut ledger, &gpu_pod("a", 1, 10, 10)).unwrap();
    let p = with_annotations(
        gpu_pod("b", 2, 10, 10),
        &[("hami.io/gpu-scheduler-policy", "mutex")],
    );
    let out = place_one(&ledger, &plan(&p));
    assert_eq!(
        out.failed["n"],
        "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict"
    );
}

#[test]
fn topology_aware_prefers_linked_pairs() {
    let mut ledger = Ledger::new();
    let devs: Vec<_> = (0..4).map(|i| gpu(&format!("G{i}"), i, 1000)).collect();
    let mut inv = inventory(devs);
    inv.pair_scores = hami_core::codec::PairScores::new(&hami_core::codec::decode_topology_scores(
        r#"[{"uuid":"G0","score":{"G1":10,"G2":10,"G3":10}},{"uuid":"G1","score":{"G0":10,"G2":10,"G3":200}},{"uuid":"G2","score":{"G0":10,"G1":10,"G3":10}},{"uuid":"G3","score":{"G0":10,"G1":200,"G2":10}}]"#,
    )
    .unwrap());
    ledger.set_node("n", inv);
    let p = with_annotations(
        gpu_pod("p", 2, 10, 0),
        &[("hami.io/gpu-scheduler-policy", "topology-aware")],
    );
    let (_, fit) = place_one(&ledger, &plan(&p)).chosen.unwrap();
    let mut got: Vec<_> = fit.devices["NVIDIA"][0]
        .iter()
        .map(|d| d.uuid.clone())
        .collect();
    got.sort();
    assert_eq!(got, vec!["G1", "G3"]);
    // One GPU: take the least connected one, keeping the linked pair free.
    let p1 = with_annotations(
        gpu_pod("q", 1, 10, 0),
        &[("hami.io/gpu-scheduler-policy", "topology-aware")],
    );
    let (_, fit) = place_one(&ledger, &plan(&p1)).chosen.unwrap();
    assert!(["G0", "G2"].contains(&fit.devices["NVIDIA"][0][0].uuid.as_str()));
}

/// The quota refusal counts like HAMi's (`ResourceQuotaNotFit` per device) and says which
/// namespace, resource and numbers (`docs/protocol.md#resourcequota`).
#[test]
fn quota_refusal_names_namespace_resource_and_numbers() {
    use hami_core::quota::{QuotaBudget, QuotaLimit};
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n", 2, 10_000);
    let mut p = plan(&gpu_pod("p", 1, 2000, 10));
    let budget = |used: u64| QuotaBudget {
        namespace: "team-a".into(),
        memory: Some(QuotaLimit {
            resource: "nvidia.com/gpumem".into(),
            used,
            hard: 4000,
        }),
        cores: None,
    };
    p.quota.insert("NVIDIA".into(), budget(3000));
    let out = place_one(&ledger, &p);
    assert!(out.chosen.is_none());
    assert_eq!(
        out.failed["n"],
        "2/2 ResourceQuotaNotFit (namespace team-a: limits.nvidia.com/gpumem used 3000 + requested 2000 > hard limit 4000)"
    );
    // Exactly at the limit fits.
    p.quota.insert("NVIDIA".into(), budget(2000));
    assert!(place_one(&ledger, &p).chosen.is_some());
    // Two GPUs of 1000: the second device takes the pod past the limit.
    let mut two = plan(&gpu_pod("q", 2, 1000, 10));
    two.quota.insert("NVIDIA".into(), budget(2500));
    assert_eq!(
        place_one(&ledger, &two).failed["n"],
        "1/2 AllocatedCardsInsufficientRequest, 1/2 ResourceQuotaNotFit (namespace team-a: limits.nvidia.com/gpumem used 2500 + requested 2000 > hard limit 4000)"
    );
}

#[test]
fn invalid_scoring_weights_fail_the_plan() {
    let p = with_annotations(
        gpu_pod("p", 1, 10, 0),
        &[("hami.io/device-scoring-weights", "slot=1,core=1")],
    );
    let err = PodPlan::new(&p, &registry(), &SchedulerDefaults::default()).unwrap_err();
    assert!(
        err.to_string().contains("hami.io/device-scoring-weights"),
        "{err}"
    );
}

#[test]
fn defaults_apply_when_pod_has_no_policy() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "a", 1, 1000);
    add_node(&mut ledger, "b", 1, 1000);
    place_and_reserve(&mut ledger, &gpu_pod("p1", 1, 100, 10)).unwrap();
    let defaults = SchedulerDefaults {
        node_policy: NodePolicy::Spread,
        gpu_policy: GpuPolicy::default(),
    };
    let p = PodPlan::new(&gpu_pod("p2", 1, 100, 10), &registry(), &defaults).unwrap();
    let out = place_one(&ledger, &p);
    assert_eq!(out.chosen.unwrap().0, "b");
    assert_eq!(out.scores.len(), 2);
}

#[test]
fn fit_node_reports_insufficient_devices_for_nodes_without_vendor() {
    let mut ledger = Ledger::new();
    ledger.set_node("empty", hami_core::ledger::NodeInventory::default());
    let node = ledger.node("empty").unwrap();
    let err = fit_node(&plan(&gpu_pod("p", 1, 1, 0)), &registry(), node).unwrap_err();
    assert_eq!(err, FitFailure::InsufficientDevices);
}

#[test]
fn place_best_chooses_what_place_chooses() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "a", 2, 1000);
    add_node(&mut ledger, "b", 4, 2000);
    add_node(&mut ledger, "c", 1, 100);
    place_and_reserve(&mut ledger, &gpu_pod("p1", 1, 300, 20)).unwrap();
    for (i, pod) in [
        gpu_pod("x", 1, 500, 10),
        gpu_pod("y", 2, 900, 50),
        gpu_pod("z", 5, 1, 0),
    ]
    .iter()
    .enumerate()
    {
        let p = plan(pod);
        let all = place_one(&ledger, &p);
        let names = names(&ledger);
        let best = hami_core::engine::place_best(
            &p,
            &registry(),
            &ledger,
            names.iter().map(String::as_str),
        );
        assert_eq!(best, all.chosen, "pod {i}");
    }
}

/// Large candidate lists are scanned in parallel: the placement, every reason and every
/// score must be exactly what one thread computes, however many threads run.
#[test]
fn parallel_scan_matches_the_sequential_one() {
    let mut ledger = Ledger::new();
    for i in 0..1200u32 {
        // Mixed sizes, some nodes full, a few with usage, so every outcome kind occurs.
        add_node(
            &mut ledger,
            &format!("node-{i:04}"),
            1 + i % 4,
            8_000 + (i % 7) * 2_000,
        );
    }
    for i in (0..1200u32).step_by(5) {
        let p = gpu_pod(&format!("busy-{i}"), 1, 7_000, 50);
        let pl = plan(&p);
        let fit = fit_node(
            &pl,
            &registry(),
            ledger.node(&format!("node-{i:04}")).unwrap(),
        );
        if let Ok(fit) = fit {
            let rec = PodRecord::from_devices(
                &format!("uid-{i}"),
                "ns",
                "busy",
                &format!("node-{i:04}"),
                &fit.devices,
                &pl.kinds,
            );
            ledger.apply_pod(rec);
        }
    }
    let mut candidates = names(&ledger);
    candidates.push("ghost".into());
    for (pod, policy) in [
        (gpu_pod("small", 1, 1_000, 10), "binpack"),
        (gpu_pod("small", 1, 1_000, 10), "spread"),
        (gpu_pod("big", 2, 9_000, 60), "binpack"),
        (gpu_pod("huge", 4, 20_000, 100), "spread"),
    ] {
        let pod = with_annotations(pod, &[("hami.io/node-scheduler-policy", policy)]);
        let pl = plan(&pod);
        let run = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| place(&pl, &registry(), &ledger, &candidates))
        };
        let one = run(1);
        for threads in [2, 3, 8] {
            assert_eq!(run(threads), one, "{policy}: {threads} threads differ");
        }
    }
}

mod quick_path {
    //! Nodes are ranked without choosing devices when the outcome cannot depend on the
    //! picks; this must never change a placement. The reference is the same plan with a
    //! quota that never binds (a quota takes the full, ordered path).
    use super::*;
    use hami_core::quota::{QuotaBudget, QuotaLimit};
    use proptest::prelude::*;

    fn reference(p: &PodPlan) -> PodPlan {
        let mut full = p.clone();
        let limit = |resource: &str| {
            Some(QuotaLimit {
                resource: resource.into(),
                used: 0,
                hard: u64::MAX / 4,
            })
        };
        full.quota.insert(
            "NVIDIA".into(),
            QuotaBudget {
                namespace: "default".into(),
                memory: limit("nvidia.com/gpumem"),
                cores: limit("nvidia.com/gpucores"),
            },
        );
        full
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        #[test]
        fn ranking_without_picks_places_like_the_full_fit(
            sizes in proptest::collection::vec((1u32..5, 1u32..4), 2..40),
            usage in proptest::collection::vec((0usize..40, 0u32..4, 100u32..9000, 0u32..101), 0..60),
            nums in 1u32..4,
            mem in 100u32..12_000,
            cores in 0u32..101,
            node_policy in prop_oneof![Just("binpack"), Just("spread")],
            gpu_policy in prop_oneof![Just("binpack"), Just("spread"), Just("mutex")],
        ) {
            let mut ledger = Ledger::new();
            for (i, (n, m)) in sizes.iter().enumerate() {
                add_node(&mut ledger, &format!("n{i:02}"), *n, m * 4_000);
            }
            for (k, (node, gpu, m, c)) in usage.iter().enumerate() {
                let name = format!("n{:02}", node % sizes.len());
                let alloc = format!("{name}-gpu-{gpu},NVIDIA,{m},{c}:;");
                let p = with_annotations(gpu_pod(&format!("u{k}"), 1, 1, 0), &[
                    ("hami.io/vgpu-node", name.as_str()),
                    ("hami.io/vgpu-devices-allocated", alloc.as_str()),
                ]);
                if let Ok(Some(rec)) = PodRecord::from_pod(&p, &registry()) {
                    ledger.apply_pod(rec);
                }
            }
            let pod = with_annotations(gpu_pod("p", nums, mem, cores), &[
                ("hami.io/node-scheduler-policy", node_policy),
                ("hami.io/gpu-scheduler-policy", gpu_policy),
            ]);
            let quick = plan(&pod);
            let candidates = names(&ledger);
            let a = place(&quick, &registry(), &ledger, &candidates);
            let b = place(&reference(&quick), &registry(), &ledger, &candidates);
            prop_assert_eq!(a, b);
        }
    }
}
