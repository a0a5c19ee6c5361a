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
    assert_eq!(
        ledger.free_shares(),
        &ledger.recomputed_free_shares(),
        "incremental free-share histogram drifted"
    );
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

/// A request for one family: `(resource limits)` per family, sized by the strategy.
#[derive(Debug, Clone)]
struct FamilyAsk {
    family: usize,
    count: u32,
    mem: u32,
    cores: u32,
}

fn family_ask() -> impl Strategy<Value = FamilyAsk> {
    (
        0usize..6,
        1u32..3,
        0u32..40_000,
        prop_oneof![Just(0u32), 1u32..100, Just(100u32)],
    )
        .prop_map(|(family, count, mem, cores)| FamilyAsk {
            family,
            count,
            mem,
            cores,
        })
}

/// The limits of one family's ask (NVIDIA, DCU, Cambricon, Ascend 910B3, AMD, Enflame
/// DRS by slice count or by memory and compute).
fn family_limits(a: &FamilyAsk) -> Vec<(String, String)> {
    let n = a.count.to_string();
    let cores = a.cores.clamp(1, 100).to_string();
    match a.family {
        0 => vec![
            ("nvidia.com/gpu".into(), n),
            ("nvidia.com/gpumem".into(), (a.mem / 4).to_string()),
            ("nvidia.com/gpucores".into(), a.cores.to_string()),
        ],
        1 => vec![
            ("hygon.com/dcunum".into(), n),
            ("hygon.com/dcumem".into(), a.mem.to_string()),
            ("hygon.com/dcucores".into(), a.cores.to_string()),
        ],
        2 => vec![
            ("cambricon.com/vmlu".into(), n),
            (
                "cambricon.com/mlu.smlu.vmemory".into(),
                (a.mem / 256).to_string(),
            ),
            ("cambricon.com/mlu.smlu.vcore".into(), a.cores.to_string()),
        ],
        3 => vec![
            ("huawei.com/Ascend910B3".into(), n),
            (
                "huawei.com/Ascend910B3-memory".into(),
                a.mem.max(1).to_string(),
            ),
        ],
        5 if a.mem.is_multiple_of(2) => vec![(
            "enflame.com/drs-gcu".into(),
            [1, 3, 6][(a.mem as usize / 2) % 3].to_string(),
        )],
        5 => vec![
            (
                "enflame.com/gcu-memory".into(),
                (a.mem / 1000).max(1).to_string(),
            ),
            ("enflame.com/gcu-core".into(), cores),
        ],
        _ => vec![
            ("amd.com/gpu".into(), n),
            ("amd.com/gpumem".into(), a.mem.to_string()),
            ("amd.com/gpucores".into(), cores),
        ],
    }
}

/// A node carrying every family of [`family_limits`], registered as their plugins do.
fn mixed_node(n: usize, devices: u32) -> hami_core::ledger::NodeInventory {
    use hami_core::codec::{encode_node_register_json, encode_node_register_legacy};
    use hami_core::vendor::NodeView;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let dev = |id: String, i: u32, count: u32, mem: u32, cores: u32, t: &str| DeviceInfo {
        id: id.into(),
        index: i,
        count,
        mem_mib: mem,
        cores,
        dev_type: t.into(),
        health: true,
        ..DeviceInfo::default()
    };
    let nv: Vec<DeviceInfo> = (0..devices)
        .map(|i| dev(format!("n{n}-gpu{i}"), i, 4, 10_000, 100, "NVIDIA-A40"))
        .collect();
    let dcu: Vec<DeviceInfo> = (0..devices)
        .map(|i| dev(format!("n{n}-dcu{i}"), i, 4, 30_000, 100, "DCU-K100"))
        .collect();
    let npu: Vec<DeviceInfo> = (0..devices)
        .map(|i| dev(format!("n{n}-npu{i}"), i, 4, 65536, 20, "Ascend910B3"))
        .collect();
    let amd: Vec<DeviceInfo> = (0..devices)
        .map(|i| {
            dev(
                format!("n{n}-amd{i}"),
                i,
                3,
                40_000,
                120,
                "AMD Instinct MI210",
            )
        })
        .collect();
    let annotations: std::collections::BTreeMap<String, String> = [
        (
            "hami.io/node-nvidia-register",
            encode_node_register_json(&nv),
        ),
        (
            "hami.io/node-dcu-register",
            encode_node_register_legacy(&dcu),
        ),
        (
            "hami.io/node-register-Ascend910B3",
            encode_node_register_json(&npu),
        ),
        ("hami.io/node-amd-register", encode_node_register_json(&amd)),
        (
            "enflame.com/gcu-drs-capacity",
            format!(
                r#"{{"devices":[{}],"profiles":{{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}}}"#,
                (0..devices)
                    .map(|i| format!(r#"{{"index":"{i}","minor":"{i}","capacity":6}}"#))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let capacity: std::collections::BTreeMap<String, Quantity> = [
        ("cambricon.com/mlu.smlu.vcore", (devices * 100).to_string()),
        ("cambricon.com/mlu.smlu.vmemory", (devices * 64).to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Quantity(v)))
    .collect();
    let name = format!("n{n}");
    let view = NodeView {
        name: &name,
        annotations: &annotations,
        capacity: Some(&capacity),
        labels: None,
    };
    let (inv, issues) = hami_core::ledger::NodeInventory::from_node(&view, &mixed_registry());
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(inv.vendors.len(), 6);
    inv
}

fn as_refs(l: &[(String, String)]) -> Vec<(&str, &str)> {
    l.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn mixed_registry() -> hami_core::vendor::VendorRegistry {
    let cfg = hami_core::config::DeviceConfig::default().with_switches(
        hami_core::config::VendorSwitches {
            ascend: true,
            iluvatar: false,
        },
    );
    hami_core::vendor::VendorRegistry::from_config(&cfg)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// The same invariants with six families on every node and pods asking one or two
    /// families, in one container or two.
    #[test]
    fn mixed_vendor_placements_never_overcommit(
        sizes in prop::collection::vec(1u32..4, 1..4),
        asks in prop::collection::vec((family_ask(), proptest::option::of(family_ask()), any::<bool>()), 1..30),
        deletes in prop::collection::vec(0usize..64, 0..10),
    ) {
        let reg = mixed_registry();
        let mut ledger = Ledger::new();
        for (n, devices) in sizes.iter().enumerate() {
            ledger.set_node(&format!("n{n}"), mixed_node(n, *devices));
        }
        let candidates = names(&ledger);
        let mut live: Vec<String> = Vec::new();
        let none = std::collections::BTreeSet::new();
        for (i, (first, second, two_containers)) in asks.iter().enumerate() {
            let mut limits = family_limits(first);
            let mut other = second.as_ref().map(family_limits).unwrap_or_default();
            if !*two_containers {
                limits.append(&mut other);
            }
            let mut cs = vec![container("c0", &as_refs(&limits))];
            if *two_containers && !other.is_empty() {
                cs.push(container("c1", &as_refs(&other)));
            }
            let p = pod(&format!("p{i}"), cs);
            let Ok(plan) = PodPlan::new(&p, &reg, &SchedulerDefaults::default()) else {
                continue; // a request the vendor refuses (a memory no template holds)
            };
            let out = place(&plan, &reg, &ledger, &candidates);
            prop_assert_eq!(out.failed.len() + out.scores.len(), candidates.len());
            if let Some((node, fit)) = out.chosen {
                // Every family asked got its devices on the one node.
                for key in &plan.vendor_keys {
                    prop_assert!(fit.devices.contains_key(key), "{key} missing on {node}");
                }
                let uid = p.metadata.uid.clone().unwrap();
                let rec = PodRecord::from_devices(&uid, "default", &uid, &node, &fit.devices, &plan.kinds);
                ledger.apply_pod(rec);
                live.push(uid);
            }
            if let Some(k) = deletes.get(i)
                && !live.is_empty()
            {
                let uid = live.remove(k % live.len());
                prop_assert!(ledger.remove_pod(&uid).is_some());
            }
            assert_invariants(&ledger, &none);
        }
    }
}
