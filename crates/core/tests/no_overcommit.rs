//! Property: no sequence of placements and deletions ever over-commits a device or a
//! namespace's ResourceQuota, and the incremental ledger (device usage, namespace use)
//! always equals a recomputation from its records.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use hami_core::engine::{PodPlan, SchedulerDefaults, place};
use hami_core::ledger::{Ledger, PodRecord};
use hami_core::model::DeviceInfo;
use hami_core::quota::QuotaBook;
use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Place {
        nums: u32,
        mem: u32,
        pct: Option<u32>,
        cores: u32,
        containers: usize,
        with_init: bool,
        gpu_policy: &'static str,
        node_policy: &'static str,
    },
    Delete(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (
            1u32..4,
            0u32..1500,
            proptest::option::of(1u32..101),
            prop_oneof![Just(0u32), 1u32..100, Just(100u32)],
            1usize..3,
            any::<bool>(),
            prop::sample::select(vec!["binpack", "spread", "mutex", "numa,binpack", "topology-aware"]),
            prop::sample::select(vec!["binpack", "spread"]),
        )
            .prop_map(|(nums, mem, pct, cores, containers, with_init, gpu_policy, node_policy)| Op::Place {
                nums,
                mem,
                pct,
                cores,
                containers,
                with_init,
                gpu_policy,
                node_policy,
            }),
        1 => (0usize..64).prop_map(Op::Delete),
    ]
}

fn device() -> impl Strategy<Value = (u32, u32, i32, bool)> {
    (1u32..5, 100u32..2000, 0i32..2, prop::bool::weighted(0.9))
}

fn make_pod(i: usize, op: &Op) -> Pod {
    let Op::Place {
        nums,
        mem,
        pct,
        cores,
        containers,
        with_init,
        gpu_policy,
        node_policy,
    } = op
    else {
        unreachable!()
    };
    let mut limits = vec![
        ("nvidia.com/gpu", nums.to_string()),
        ("nvidia.com/gpucores", cores.to_string()),
    ];
    match pct {
        Some(p) => limits.push(("nvidia.com/gpumem-percentage", p.to_string())),
        None if *mem > 0 => limits.push(("nvidia.com/gpumem", mem.to_string())),
        None => {}
    }
    let lim: Vec<(&str, &str)> = limits.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cs = (0..*containers)
        .map(|c| container(&format!("c{c}"), &lim))
        .collect();
    let mut p = pod(&format!("p{i}"), cs);
    if *with_init {
        p.spec.as_mut().unwrap().init_containers = Some(vec![container("init", &lim)]);
    }
    with_annotations(
        p,
        &[
            ("hami.io/gpu-scheduler-policy", gpu_policy),
            ("hami.io/node-scheduler-policy", node_policy),
        ],
    )
}

/// `exclusive`: pods whose every container asked for a whole card's compute (cores = 100).
fn assert_invariants(ledger: &Ledger, exclusive: &std::collections::BTreeSet<String>) {
    for node in ledger.nodes() {
        let usage = ledger.usage(node.name()).unwrap();
        assert_eq!(
            ledger.recomputed_usage(node.name()).unwrap(),
            usage,
            "incremental usage drifted on {}",
            node.name()
        );
        for (vd, us) in node.groups() {
            for (d, u) in vd.devices.iter().zip(us) {
                assert!(u.used <= d.count, "slots over-committed on {}: {u:?}", d.id);
                assert!(
                    u.mem_used <= u64::from(d.mem_mib),
                    "memory over-committed on {}: {u:?}",
                    d.id
                );
                assert!(
                    u.cores_used <= u64::from(d.cores),
                    "cores over-committed on {}: {u:?}",
                    d.id
                );
            }
        }
    }
    for rec in ledger.pods().filter(|r| exclusive.contains(&*r.uid)) {
        for c in &rec.charges {
            let node = ledger.node(&rec.node).unwrap();
            let (vd, us) = node.groups().next().unwrap();
            let i = vd.devices.iter().position(|d| *d.id == *c.uuid).unwrap();
            assert_eq!(us[i].used, c.slots, "exclusive device {} is shared", c.uuid);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn placements_never_overcommit(
        nodes in prop::collection::vec(prop::collection::vec(device(), 1..5), 1..4),
        ops in prop::collection::vec(op(), 1..40),
        mem_quota in proptest::option::of(0u64..30_000),
        core_quota in proptest::option::of(0u64..400),
    ) {
        let reg = registry();
        let mut quotas = QuotaBook::new(&reg);
        let mut hard = serde_json::Map::new();
        if let Some(m) = mem_quota {
            hard.insert("limits.nvidia.com/gpumem".into(), m.to_string().into());
        }
        if let Some(c) = core_quota {
            hard.insert("limits.nvidia.com/gpucores".into(), c.to_string().into());
        }
        let rq: ResourceQuota = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "q", "namespace": "default"},
            "spec": {"hard": hard},
        })).unwrap();
        prop_assert!(quotas.apply(&rq).is_empty());
        let nvidia = reg.get("NVIDIA").unwrap().clone();
        let mut ledger = Ledger::new();
        for (n, devs) in nodes.iter().enumerate() {
            let infos: Vec<DeviceInfo> = devs
                .iter()
                .enumerate()
                .map(|(i, (count, mem, numa, health))| DeviceInfo {
                    count: *count,
                    numa: *numa,
                    health: *health,
                    ..gpu(&format!("n{n}-g{i}"), i as u32, *mem)
                })
                .collect();
            ledger.set_node(&format!("n{n}"), inventory(infos));
        }
        let candidates = names(&ledger);
        let mut live: Vec<String> = Vec::new();
        let mut exclusive = std::collections::BTreeSet::new();
        for (i, op) in ops.iter().enumerate() {
            match op {
                Op::Delete(k) => {
                    if !live.is_empty() {
                        let uid = live.remove(k % live.len());
                        prop_assert!(ledger.remove_pod(&uid).is_some());
                    }
                }
                Op::Place { .. } => {
                    let p = make_pod(i, op);
                    let mut plan = PodPlan::new(&p, &reg, &SchedulerDefaults::default()).unwrap();
                    let used = ledger.namespace_use("default", "NVIDIA");
                    if let Some(budget) = quotas.budget("default", nvidia.as_ref(), used) {
                        plan.quota.insert("NVIDIA".into(), budget);
                    }
                    let out = place(&plan, &reg, &ledger, &candidates);
                    prop_assert_eq!(out.failed.len() + out.scores.len(), candidates.len());
                    if let Some((node, fit)) = out.chosen {
                        let uid = p.metadata.uid.clone().unwrap();
                        let rec = PodRecord::from_devices(&uid, "default", &uid, &node, &fit.devices, &plan.kinds);
                        ledger.apply_pod(rec);
                        if matches!(op, Op::Place { cores: 100, .. }) {
                            exclusive.insert(uid.clone());
                        }
                        live.push(uid);
                    }
                }
            }
            assert_invariants(&ledger, &exclusive);
            let used = ledger.namespace_use("default", "NVIDIA");
            prop_assert_eq!(used, ledger.recomputed_namespace_use("default", "NVIDIA"));
            prop_assert!(mem_quota.is_none_or(|m| used.memory <= m), "{used:?} over {mem_quota:?}");
            prop_assert!(core_quota.is_none_or(|c| used.cores <= c), "{used:?} over {core_quota:?}");
        }
    }
}
