//! The allocation ledger: rebuilt from annotations, idempotent, incremental.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::*;
use hami_core::ledger::{Ledger, NodeInventory, PodRecord};
use k8s_openapi::api::core::v1::PodStatus;

fn placed_pod(name: &str, node: &str, allocated: &str) -> k8s_openapi::api::core::v1::Pod {
    with_annotations(
        gpu_pod(name, 1, 1, 0),
        &[
            ("hami.io/vgpu-node", node),
            ("hami.io/vgpu-devices-allocated", allocated),
        ],
    )
}

/// The record of a pod that holds devices.
fn record(pod: &k8s_openapi::api::core::v1::Pod) -> PodRecord {
    PodRecord::from_pod(pod, &registry()).unwrap().unwrap()
}

#[test]
fn records_come_from_allocated_annotations() {
    let p = placed_pod("a", "n", "n-gpu-0,NVIDIA,300,20:;");
    let rec = PodRecord::from_pod(&p, &registry()).unwrap().unwrap();
    assert_eq!(&*rec.node, "n");
    assert_eq!(&*rec.uid, "uid-a");
    assert_eq!(rec.charges.len(), 1);
    assert_eq!(
        (
            rec.charges[0].mem,
            rec.charges[0].cores,
            rec.charges[0].slots
        ),
        (300, 20, 1)
    );
}

#[test]
fn terminated_and_unplaced_pods_hold_nothing() {
    let mut done = placed_pod("a", "n", "n-gpu-0,NVIDIA,300,20:;");
    done.status = Some(PodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    });
    assert_eq!(PodRecord::from_pod(&done, &registry()).unwrap(), None);
    assert_eq!(
        PodRecord::from_pod(&gpu_pod("b", 1, 1, 0), &registry()).unwrap(),
        None
    );
}

#[test]
fn malformed_annotation_is_a_clear_error() {
    let p = placed_pod("a", "n", "n-gpu-0,NVIDIA,notanumber,20:;");
    let err = PodRecord::from_pod(&p, &registry()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("default/a") && msg.contains("hami.io/vgpu-devices-allocated"),
        "{msg}"
    );
}

#[test]
fn apply_is_idempotent_and_delete_releases() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n", 2, 1000);
    let rec = record(&placed_pod("a", "n", "n-gpu-1,NVIDIA,300,20:;"));
    ledger.apply_pod(rec.clone());
    ledger.apply_pod(rec.clone());
    let u = ledger.usage("n").unwrap()[0][1];
    assert_eq!((u.used, u.mem_used, u.cores_used), (1, 300, 20));
    // A changed record for the same UID replaces, not adds.
    let moved = PodRecord::from_pod(&placed_pod("a", "n", "n-gpu-0,NVIDIA,100,5:;"), &registry())
        .unwrap()
        .unwrap();
    ledger.apply_pod(moved);
    assert_eq!(ledger.usage("n").unwrap()[0][1].mem_used, 0);
    assert_eq!(ledger.usage("n").unwrap()[0][0].mem_used, 100);
    assert!(ledger.remove_pod(&rec.uid).is_some());
    assert!(ledger.remove_pod(&rec.uid).is_none());
    assert_eq!(ledger.usage("n").unwrap()[0][0], Default::default());
}

#[test]
fn pods_seen_before_their_node_count_once_it_registers() {
    let mut ledger = Ledger::new();
    let rec = PodRecord::from_pod(
        &placed_pod("a", "late", "late-gpu-0,NVIDIA,300,20:;"),
        &registry(),
    )
    .unwrap()
    .unwrap();
    let report = ledger.apply_pod(rec);
    assert!(report.unknown_node);
    add_node(&mut ledger, "late", 1, 1000);
    assert_eq!(ledger.usage("late").unwrap()[0][0].mem_used, 300);
    // Re-registering with a different inventory keeps the pod's usage.
    add_node(&mut ledger, "late", 2, 2000);
    assert_eq!(ledger.usage("late").unwrap()[0][0].mem_used, 300);
    assert_eq!(
        ledger.recomputed_usage("late").unwrap(),
        ledger.usage("late").unwrap()
    );
}

#[test]
fn records_share_the_registered_uuid_strings_and_forget_pods_per_node() {
    use std::sync::Arc;
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n", 2, 1000);
    let registered = ledger.node("n").unwrap().inventory().vendors[0].devices[1]
        .id
        .clone();
    for name in ["a", "b", "c"] {
        ledger.apply_pod(record(&placed_pod(name, "n", "n-gpu-1,NVIDIA,100,5:;")));
    }
    // Every record points at the node's own UUID string: one allocation per device.
    for uid in ["uid-a", "uid-b", "uid-c"] {
        assert!(Arc::ptr_eq(
            &ledger.pod(uid).unwrap().charges[0].uuid,
            &registered
        ));
    }
    // A pod on a node not registered yet still gets a shared (interned) string.
    ledger.apply_pod(record(&placed_pod(
        "d",
        "late",
        "late-gpu-0,NVIDIA,100,5:;",
    )));
    ledger.apply_pod(record(&placed_pod(
        "e",
        "late",
        "late-gpu-0,NVIDIA,100,5:;",
    )));
    assert!(Arc::ptr_eq(
        &ledger.pod("uid-d").unwrap().charges[0].uuid,
        &ledger.pod("uid-e").unwrap().charges[0].uuid
    ));
    // The per-node lists follow removals in any order.
    assert_eq!(ledger.pod_count_on("n"), 3);
    ledger.remove_pod("uid-b");
    let names: Vec<&str> = ledger.pods_on("n").iter().map(|r| &*r.name).collect();
    assert_eq!(names, ["a", "c"]);
    ledger.remove_pod("uid-a");
    ledger.remove_pod("uid-c");
    assert_eq!(ledger.pod_count_on("n"), 0);
    assert_eq!(ledger.usage("n").unwrap()[0][1].mem_used, 0);
    assert_eq!(ledger.pod_count_on("late"), 2);
}

#[test]
fn a_nodes_devices_share_their_model_and_mode_strings() {
    use std::sync::Arc;
    let reg = registry();
    let mut a = BTreeMap::new();
    a.insert(
        "hami.io/node-nvidia-register".to_string(),
        r#"[{"id":"GPU-0","count":10,"devmem":1000,"devcore":100,"type":"NVIDIA-T4","mode":"hami-core","health":true},{"id":"GPU-1","count":10,"devmem":1000,"devcore":100,"type":"NVIDIA-T4","mode":"hami-core","health":true},{"id":"GPU-2","count":10,"devmem":1000,"devcore":100,"type":"NVIDIA-A10","mode":"mig","health":true}]"#.to_string(),
    );
    let (inv, issues) = NodeInventory::from_annotations(&a, &reg);
    assert!(issues.is_empty(), "{issues:?}");
    let d = &inv.vendors[0].devices;
    assert!(Arc::ptr_eq(&d[0].dev_type, &d[1].dev_type));
    assert!(Arc::ptr_eq(&d[0].mode, &d[1].mode));
    assert_eq!(
        (&*d[2].dev_type, &*d[2].mode),
        ("NVIDIA-A10", "mig"),
        "different values stay different"
    );
}

#[test]
fn node_inventory_from_annotations_reports_bad_values() {
    let reg = registry();
    let mut a = BTreeMap::new();
    a.insert(
        "hami.io/node-nvidia-register".to_string(),
        r#"[{"id":"GPU-0","count":10,"devmem":1000,"devcore":100,"type":"NVIDIA-T4","health":true},{"id":"GPU-0","count":10,"devmem":1000,"devcore":100,"type":"NVIDIA-T4","health":true}]"#.to_string(),
    );
    a.insert("hami.io/device-cordon".to_string(), " GPU-9 ,,".to_string());
    let (inv, issues) = NodeInventory::from_annotations(&a, &reg);
    assert_eq!(inv.vendors[0].devices.len(), 1);
    assert_eq!(issues.len(), 1);
    assert!(issues[0].error.contains("registered twice"));
    assert!(inv.cordon.contains("GPU-9"));

    a.insert(
        "hami.io/node-nvidia-register".to_string(),
        "{not json".to_string(),
    );
    let (inv, issues) = NodeInventory::from_annotations(&a, &reg);
    assert!(inv.vendors.is_empty());
    assert_eq!(issues[0].annotation, "hami.io/node-nvidia-register");
}

#[test]
fn cached_node_scores_follow_every_change() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n", 2, 1000);
    let fresh = |l: &Ledger| {
        let n = l.node("n").unwrap();
        hami_core::score::node_score(
            n.groups()
                .flat_map(|(vd, us)| vd.devices.iter().zip(us.iter())),
        )
    };
    assert_eq!(ledger.node("n").unwrap().score(), 0.0);
    for (i, alloc) in [
        "n-gpu-0,NVIDIA,300,20:;",
        "n-gpu-1,NVIDIA,500,50:;",
        "n-gpu-0,NVIDIA,100,0:;",
    ]
    .iter()
    .enumerate()
    {
        let p = placed_pod(&format!("p{i}"), "n", alloc);
        ledger.apply_pod(PodRecord::from_pod(&p, &registry()).unwrap().unwrap());
        assert_eq!(ledger.node("n").unwrap().score(), fresh(&ledger));
        assert!(ledger.node("n").unwrap().score() > 0.0);
    }
    ledger.remove_pod("uid-p1");
    assert_eq!(ledger.node("n").unwrap().score(), fresh(&ledger));
    // A new registration rebuilds the score with the pods that remain.
    add_node(&mut ledger, "n", 3, 1000);
    assert_eq!(ledger.node("n").unwrap().score(), fresh(&ledger));
}

/// A node's CPU and memory are kept whether or not the node is registered, survive a new
/// registration, and are forgotten once nothing is known of them.
#[test]
fn node_resources_outlive_registrations() {
    use hami_core::ledger::NodeResources;
    use hami_core::resources::Resources;
    let mut ledger = Ledger::new();
    // A pod bound before the node registers its devices.
    ledger.add_node_requests("n", Resources::new(1_000, 1 << 30), true);
    ledger.set_node_allocatable("n", Some(Resources::new(8_000, 16 << 30)));
    add_node(&mut ledger, "n", 2, 1000);
    let free = |l: &Ledger| l.node("n").and_then(|n| n.resources().free());
    assert_eq!(free(&ledger), Some(Resources::new(7_000, 15 << 30)));
    add_node(&mut ledger, "n", 4, 1000);
    assert_eq!(free(&ledger), Some(Resources::new(7_000, 15 << 30)));
    ledger.remove_node("n");
    add_node(&mut ledger, "n", 2, 1000);
    ledger.add_node_requests("n", Resources::new(3_000, 0), true);
    assert_eq!(free(&ledger), Some(Resources::new(4_000, 15 << 30)));
    ledger.add_node_requests("n", Resources::new(4_000, 1 << 30), false);
    ledger.set_node_allocatable("n", None);
    assert_eq!(ledger.node_resources("n"), NodeResources::default());
    assert_eq!(free(&ledger), None);
}

/// The change journal names every node and pod whose entry changed, so a reader in step
/// (the scheduler's metrics) copies only those; after a clear it must copy everything.
#[test]
fn changes_name_what_changed_and_a_clear_asks_for_a_full_copy() {
    use hami_core::ledger::changes::Change;
    let mut ledger = Ledger::new();
    let seq = ledger.next_change();
    add_node(&mut ledger, "n", 2, 1000);
    assert_eq!(
        ledger.changes_since(seq),
        Some(&[Change::Node("n".into())][..])
    );
    let seq = ledger.next_change();
    let rec = record(&placed_pod("a", "n", "n-gpu-1,NVIDIA,300,20:;"));
    ledger.apply_pod(rec.clone());
    let applied = ledger.changes_since(seq).unwrap().to_vec();
    assert_eq!(
        applied,
        [Change::Node("n".into()), Change::Pod("uid-a".into())]
    );
    // The same record again changes nothing.
    let seq = ledger.next_change();
    ledger.apply_pod(rec);
    assert_eq!(ledger.changes_since(seq), Some(&[][..]));
    ledger.remove_pod("uid-a");
    assert_eq!(ledger.changes_since(seq).unwrap(), &applied[..]);
    let seq = ledger.next_change();
    assert!(ledger.remove_node("n"));
    assert!(!ledger.remove_node("n"));
    assert_eq!(
        ledger.changes_since(seq),
        Some(&[Change::Node("n".into())][..])
    );
    let seq = ledger.next_change();
    ledger.clear();
    assert_eq!(ledger.changes_since(seq), None);
    assert_eq!(ledger.changes_since(ledger.next_change()), Some(&[][..]));
}

/// The histogram of free shares the `frag` pairing term reads follows every pod and node
/// change, and equals a recomputation from the nodes.
#[test]
fn free_shares_follow_pods_and_node_registrations() {
    let mut ledger = Ledger::new();
    add_node(&mut ledger, "n", 2, 1000);
    assert_eq!(ledger.free_shares().count(1000), 2);
    // 300 MiB and 20 % of a 1000-MiB GPU: min(80 % cores, 70 % memory) free = 700 milli.
    ledger.apply_pod(record(&placed_pod("a", "n", "n-gpu-0,NVIDIA,300,20:;")));
    let shares = ledger.free_shares();
    assert_eq!(
        (shares.count(1000), shares.count(700), shares.total()),
        (1, 1, 2)
    );
    // Re-registered with a third GPU: the pod still holds its share of GPU 0.
    add_node(&mut ledger, "n", 3, 1000);
    let shares = ledger.free_shares();
    assert_eq!(
        (shares.count(1000), shares.count(700), shares.total()),
        (2, 1, 3)
    );
    assert_eq!(ledger.free_shares(), &ledger.recomputed_free_shares());
    ledger.remove_pod("uid-a");
    assert_eq!(ledger.free_shares().count(1000), 3);
    ledger.apply_pod(record(&placed_pod("b", "n", "n-gpu-1,NVIDIA,300,20:;")));
    assert!(ledger.remove_node("n"));
    assert_eq!(ledger.free_shares().total(), 0);
    // Its pod counts again when the node comes back.
    add_node(&mut ledger, "n", 2, 1000);
    assert_eq!(ledger.free_shares().count(700), 1);
    assert_eq!(ledger.free_shares(), &ledger.recomputed_free_shares());
    ledger.clear();
    assert_eq!(ledger.free_shares().total(), 0);
}
