//! HAMi's Biren and Vastai tests (Project-HAMi/HAMi `pkg/device/biren/device_test.go`,
//! `pkg/device/vastai/device_test.go`, and each one's `device_cordon_test.go`), case by
//! case, run against hami-rs. The two files hold the same cases for the two families
//! (whole cards, JSON register, handshake), so each case runs for both; Vastai's die-mode
//! cases follow. HAMi calls its vendor's
//! `Fit` on a device list; here the whole node fit runs on a node holding that list, so a
//! request for more cards than the node has gets the node check's answer
//! (`NodeInsufficientDevice`), as HAMi's whole scheduler gives it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::hami::{
    Row, book_one, facts, table_fit, table_node, table_reason, table_uuids, type_check, usage_of,
};
use common::{container, container_with, pod, registry, with_annotations};
use hami_core::codec::encode_pod_single_device;
use hami_core::model::ContainerDevice;
use hami_core::vendor::{Annotations, NodeView, Vendor};
use k8s_openapi::api::core::v1::{Container, Pod};

/// What differs between the two families' tables.
struct Family {
    key: &'static str,
    resource: &'static str,
    register: &'static str,
    use_uuid: &'static str,
    nouse_uuid: &'static str,
}

const BIREN: Family = Family {
    key: "Biren",
    resource: "birentech.com/gpu",
    register: "hami.io/node-biren-register",
    use_uuid: "birentech.com/use-gpuuuid",
    nouse_uuid: "birentech.com/nouse-gpuuuid",
};

const VASTAI: Family = Family {
    key: "Vastai",
    resource: "vastaitech.com/va",
    register: "hami.io/node-va-register",
    use_uuid: "vastaitech.com/use-gpuuuid",
    nouse_uuid: "vastaitech.com/nouse-gpuuuid",
};

const BOTH: [Family; 2] = [BIREN, VASTAI];

impl Family {
    fn vendor(&self) -> std::sync::Arc<dyn Vendor> {
        registry().get(self.key).unwrap().clone()
    }

    fn cards(&self, n: u32) -> Pod {
        pod(
            "p",
            vec![container("main", &[(self.resource, &n.to_string())])],
        )
    }

    fn row(&self, id: &'static str, index: u32) -> Row {
        Row::new(id, index, 1, 0, 0, self.key)
    }
}

// ---- Test_MutateAdmission ----

#[test]
fn mutate_admission() {
    for f in BOTH {
        // "set to resource limits"
        let mut c = container_with("c", &[(f.resource, "1")], &[]);
        assert!(
            f.vendor()
                .mutate_admission(&mut c, &Annotations::new())
                .unwrap()
                .uses
        );
    }
}

// ---- Test_GetNodeDevices ----

#[test]
fn get_node_devices() {
    for f in BOTH {
        let v = f.vendor();
        let decode = |annotations: &[(&str, &str)]| {
            let a: Annotations = annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            v.decode_inventory(&NodeView::annotations_only("n", &a))
        };
        // "no annotation": no devices.
        assert!(decode(&[]).is_none());
        // "exist <family> device": compute counted as 100.
        let value = format!(
            r#"[{{"id":"7-0","count":1,"devmem":32768,"type":"{}","health":true,"devicepairscore":{{}}}}]"#,
            f.key
        );
        let got = decode(&[(f.register, &value)]).unwrap().unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(facts(&got[0]), (0, "7-0", 1, 32768, 100, f.key, 0, true));
        // "no <family> device" (":") and "node annotations not decode successfully"
        // (""): errors, the node's cards of the family out.
        assert!(decode(&[(f.register, ":")]).unwrap().is_err());
        assert!(decode(&[(f.register, "")]).unwrap().is_err());
    }
}

// ---- Test_checkType ----

#[test]
fn check_type() {
    for f in BOTH {
        // "the same type", "the different type"
        type_check(f.vendor().as_ref(), f.key, "test");
    }
}

// ---- Test_PatchAnnotations ----

#[test]
fn patch_annotations() {
    for f in BOTH {
        let v = f.vendor();
        // "exist device": both keys carry the device string.
        let pd = vec![vec![ContainerDevice {
            idx: 1,
            uuid: "test1".into(),
            dev_type: f.key.into(),
            mem_mib: 2048,
            cores: 1,
            slots: 0,
        }]];
        assert_eq!(
            encode_pod_single_device(&pd),
            format!("test1,{},2048,1:;", f.key)
        );
        let to_allocate = format!("hami.io/{}-devices-to-allocate", f.key);
        assert_eq!(v.to_allocate_annotation(), Some(to_allocate.as_str()));
        assert_eq!(
            v.allocated_annotation(),
            format!("hami.io/{}-devices-allocated", f.key)
        );
    }
}

// ---- Test_GenerateResourceRequests ----

#[test]
fn generate_resource_requests() {
    for f in BOTH {
        let v = f.vendor();
        let read = |c: &Container| v.container_request(c, &Annotations::new()).unwrap();
        // "don't set to limits and request"
        assert!(read(&container_with("c", &[], &[])).is_none());
        // "set to limits and request", "only set to limits", "only set to request"
        for c in [
            container_with("c", &[(f.resource, "1")], &[(f.resource, "1")]),
            container_with("c", &[(f.resource, "1")], &[]),
            container_with("c", &[], &[(f.resource, "1")]),
        ] {
            let r = read(&c).unwrap();
            assert_eq!(
                (
                    r.count,
                    r.dev_type.as_str(),
                    r.mem_mib,
                    r.mem_percent,
                    r.cores
                ),
                (1, f.key, 0, Some(100), 0)
            );
        }
    }
}

// ---- TestDevices_LockNode ----

#[test]
fn lock_node() {
    for f in BOTH {
        // "Test with non-zero resource requests": the shared node lock.
        assert_eq!(
            f.vendor().node_lock(),
            hami_core::vendor::NodeLockRule::Shared
        );
    }
}

// ---- TestDevices_Fit ----

#[test]
fn devices_fit() {
    let r = registry();
    for f in BOTH {
        let key = f.key;
        // "fit success": the last card.
        let n = table_node(key, &[f.row("dev-0", 0), f.row("dev-1", 1)], "");
        assert_eq!(
            table_uuids(&table_fit(&r, &n, &f.cards(1)).unwrap(), key),
            ["dev-1"]
        );
        // "fit fail: type mismatch": see check_type.
        // "fit fail: user assign use uuid mismatch"
        let n = table_node(key, &[f.row("dev-1", 0)], "");
        let p = with_annotations(f.cards(1), &[(f.use_uuid, "dev-0")]);
        assert_eq!(table_reason(table_fit(&r, &n, &p)), "1/1 CardUuidMismatch");
        // "fit fail: user assign no use uuid match"
        let n = table_node(key, &[f.row("dev-0", 0)], "");
        let p = with_annotations(f.cards(1), &[(f.nouse_uuid, "dev-0")]);
        assert_eq!(table_reason(table_fit(&r, &n, &p)), "1/1 CardUuidMismatch");
        // "fit fail: card overused"
        let n = table_node(key, &[f.row("dev-0", 0).used(1, 0, 0)], "");
        assert_eq!(
            table_reason(table_fit(&r, &n, &f.cards(1))),
            "1/1 CardTimeSlicingExhausted"
        );
        // "fit fail:  AllocatedCardsInsufficientRequest" (2 cards of 1): HAMi's vendor
        // Fit says "1/1 AllocatedCardsInsufficientRequest"; the node check refuses first.
        let n = table_node(key, &[f.row("dev-0", 0)], "");
        assert_eq!(
            table_reason(table_fit(&r, &n, &f.cards(2))),
            "NodeInsufficientDevice"
        );
        // "mutex policy rejects used device"
        let mut shared = f.row("dev-0", 0).used(1, 0, 0);
        shared.count = 2;
        let n = table_node(key, &[shared], "");
        let p = with_annotations(f.cards(1), &[("hami.io/gpu-scheduler-policy", "mutex")]);
        assert_eq!(
            table_reason(table_fit(&r, &n, &p)),
            "1/1 ExclusiveDeviceAllocateConflict"
        );
    }
    // Biren's "fit fail: partial allocation AllocatedCardsInsufficientRequest for
    // multiple cards" (3 of 2): the node check.
    let big = |id, i| Row::new(id, i, 100, 1280, 100, "Biren");
    let n = table_node("Biren", &[big("dev-0", 0), big("dev-1", 1)], "");
    assert_eq!(
        table_reason(table_fit(&r, &n, &BIREN.cards(3))),
        "NodeInsufficientDevice"
    );
}

// ---- TestDevices_AddResourceUsage ----

#[test]
fn add_resource_usage() {
    for f in BOTH {
        // "test add resource usage": one more slot, nothing else.
        let row = Row::new("dev-0", 0, 4, 0, 0, f.key).used(1, 0, 0);
        let mut ledger = table_node(f.key, &[row], "");
        book_one(&mut ledger, f.key, "dev-0", 0, 0);
        assert_eq!(usage_of(&ledger, 0), (2, 0, 0));
    }
}

// ---- device_cordon_test.go: TestFit_DeviceCordon ----

#[test]
fn fit_device_cordon() {
    let r = registry();
    for f in BOTH {
        let key = f.key;
        let rows = [f.row("dev-0", 0), f.row("dev-1", 1)];
        // "cordoned device is skipped, healthy sibling still fits"
        let fit = table_fit(&r, &table_node(key, &rows, "dev-1, "), &f.cards(1)).unwrap();
        assert_eq!(table_uuids(&fit, key), ["dev-0"]);
        // "all devices cordoned fails with CardCordoned reason"
        assert_eq!(
            table_reason(table_fit(
                &r,
                &table_node(key, &rows, "dev-0,dev-1"),
                &f.cards(1)
            )),
            "2/2 CardCordoned"
        );
        // "running pods on a cordoned device are unaffected"
        let busy = [f.row("dev-0", 0), f.row("dev-1", 1).used(1, 0, 0)];
        let n = table_node(key, &busy, "dev-1");
        let fit = table_fit(&r, &n, &f.cards(1)).unwrap();
        assert_eq!(table_uuids(&fit, key), ["dev-0"]);
        assert_eq!(n.node("n").unwrap().device_usage()[1].used, 1);
        // "no annotation or no node info means nothing cordoned"
        for cordon in ["", "   "] {
            let fit = table_fit(&r, &table_node(key, &rows, cordon), &f.cards(1)).unwrap();
            assert_eq!(table_uuids(&fit, key), ["dev-1"]);
        }
    }
}

// ---- Vastai: TestDevices_Fit die-mode cases, TestComputeBestCombination ----

fn die(id: &'static str, index: u32, count: u32, aic: &str) -> Row {
    let mut r = Row::new(id, index, count, 0, 0, "Vastai");
    r.custom_info = BTreeMap::from([
        ("DeviceStrategy".to_string(), serde_json::json!("die")),
        ("AIC".to_string(), serde_json::json!(aic)),
    ]);
    r
}

#[test]
fn vastai_mutex_die_mode() {
    let r = registry();
    let p = with_annotations(
        VASTAI.cards(1),
        &[("hami.io/gpu-scheduler-policy", "mutex")],
    );
    // "mutex die mode rejects idle die on occupied card, picks die on free card" (hami-rs
    // takes dev-2 as the last idle die in walk order, not for dev-1's busy card).
    let rows = [
        die("dev-0", 0, 2, "1").used(1, 0, 0),
        die("dev-1", 1, 1, "1"),
        die("dev-2", 2, 1, "2"),
    ];
    let fit = table_fit(&r, &table_node("Vastai", &rows, ""), &p).unwrap();
    assert_eq!(table_uuids(&fit, "Vastai"), ["dev-2"]);
    // "mutex die mode rejects all idle dies on an occupied card" is not ported: hami-rs
    // judges each die alone and places the pod on the idle die of the occupied card
    // (docs/vendors.md#deliberate-differences-from-hami).
}

#[test]
fn vastai_compute_best_combination() {
    let r = registry();
    let aics = |groups: &[&'static str]| -> Vec<Row> {
        const IDS: [&str; 6] = ["dev1", "dev2", "dev3", "dev4", "dev5", "dev6"];
        groups
            .iter()
            .enumerate()
            .map(|(i, aic)| die(IDS[i], i as u32 + 1, 1, aic))
            .collect()
    };
    let picked = |rows: &[Row], n: u32| {
        let fit = table_fit(&r, &table_node("Vastai", rows, ""), &VASTAI.cards(n));
        let mut ids = fit.map(|f| table_uuids(&f, "Vastai")).unwrap_or_default();
        ids.sort();
        ids
    };
    // "single AIC group, sufficient to meet demand"
    assert_eq!(picked(&aics(&["1", "1", "1"]), 2).len(), 2);
    let groups = ["1", "1", "1", "2", "2", "3"];
    // "multiple AIC groups, select by count after sorting": the largest group.
    assert_eq!(picked(&aics(&groups), 3), ["dev1", "dev2", "dev3"]);
    // "multiple AIC groups, need to take across groups": then the next largest.
    let four = picked(&aics(&groups), 4);
    assert_eq!(&four[..3], ["dev1", "dev2", "dev3"]);
    assert!(four[3] == "dev4" || four[3] == "dev5", "{four:?}");
    // "request number exceeds available devices": HAMi's helper returns all three;
    // the node check refuses the pod.
    let out = table_fit(
        &r,
        &table_node("Vastai", &aics(&["1", "1", "2"]), ""),
        &VASTAI.cards(5),
    );
    assert_eq!(table_reason(out), "NodeInsufficientDevice");
}
