//! HAMi's Biren tests (Project-HAMi/HAMi `pkg/device/biren/device_test.go`,
//! `device_cordon_test.go`), case by case, run against hami-rs. HAMi calls its vendor's
//! `Fit` on a device list; here the whole node fit runs on a node holding that list, so a
//! request for more cards than the node has gets the node check's answer
//! (`NodeInsufficientDevice`), as HAMi's whole scheduler gives it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::hami::{Row, table_fit, table_node, table_reason, table_uuids};
use common::{container, pod, registry, with_annotations};
use hami_core::codec::encode_pod_single_device;
use hami_core::model::{ContainerDevice, ContainerDeviceRequest};
use hami_core::vendor::{Annotations, DeviceConstraints, NodeView, Vendor};
use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

const BIREN: &str = "Biren";

fn biren() -> std::sync::Arc<dyn Vendor> {
    registry().get(BIREN).unwrap().clone()
}

fn ctr(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> Container {
    let q = |pairs: &[(&str, &str)]| {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect::<BTreeMap<_, _>>(),
        )
    };
    Container {
        resources: Some(ResourceRequirements {
            limits: q(limits),
            requests: q(requests),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn cards(n: u32) -> Pod {
    pod(
        "p",
        vec![container("main", &[("birentech.com/gpu", &n.to_string())])],
    )
}

fn row(id: &'static str, index: u32) -> Row {
    Row::new(id, index, 1, 0, 0, BIREN)
}

// ---- Test_MutateAdmission ----

#[test]
fn mutate_admission() {
    // "set to resource limits"
    let mut c = ctr(&[("birentech.com/gpu", "1")], &[]);
    assert!(
        biren()
            .mutate_admission(&mut c, &Annotations::new())
            .unwrap()
            .uses
    );
}

// ---- Test_GetNodeDevices ----

#[test]
fn get_node_devices() {
    let v = biren();
    let decode = |annotations: &[(&str, &str)]| {
        let a: Annotations = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        v.decode_inventory(&NodeView::annotations_only("n", &a))
    };
    // "no annotation": no devices.
    assert!(decode(&[]).is_none());
    // "exist biren device": compute counted as 100.
    let got = decode(&[(
        "hami.io/node-biren-register",
        r#"[{"id":"7-0","count":1,"devmem":32768,"type":"Biren","health":true,"devicepairscore":{}}]"#,
    )])
    .unwrap()
    .unwrap();
    assert_eq!(got.len(), 1);
    let d = &got[0];
    assert_eq!(
        (
            d.id.as_str(),
            d.count,
            d.mem_mib,
            d.cores,
            d.dev_type.as_str(),
            d.numa,
            d.health,
            d.index
        ),
        ("7-0", 1, 32768, 100, "Biren", 0, true, 0)
    );
    // "no biren device" (":") and "node annotations not decode successfully" (""):
    // errors, the node's Biren cards out.
    assert!(
        decode(&[("hami.io/node-biren-register", ":")])
            .unwrap()
            .is_err()
    );
    assert!(
        decode(&[("hami.io/node-biren-register", "")])
            .unwrap()
            .is_err()
    );
}

// ---- Test_checkType ----

#[test]
fn check_type() {
    let v = biren();
    let d = row("dev-0", 0).info();
    let r = |t: &str| ContainerDeviceRequest {
        count: 1,
        dev_type: t.into(),
        mem_mib: 0,
        mem_percent: None,
        cores: 0,
    };
    let c = DeviceConstraints::default();
    // "the same type", "the different type"
    assert!(v.type_matches(&d, &r("Biren"), &c));
    assert!(!v.type_matches(&d, &r("test"), &c));
}

// ---- Test_PatchAnnotations ----

#[test]
fn patch_annotations() {
    let v = biren();
    // "exist device": both keys carry the device string.
    let pd = vec![vec![ContainerDevice {
        idx: 1,
        uuid: "test1".into(),
        dev_type: BIREN.into(),
        mem_mib: 2048,
        cores: 1,
        slots: 0,
    }]];
    assert_eq!(encode_pod_single_device(&pd), "test1,Biren,2048,1:;");
    assert_eq!(
        v.to_allocate_annotation(),
        Some("hami.io/Biren-devices-to-allocate")
    );
    assert_eq!(v.allocated_annotation(), "hami.io/Biren-devices-allocated");
}

// ---- Test_GenerateResourceRequests ----

#[test]
fn generate_resource_requests() {
    let v = biren();
    let read = |c: &Container| v.container_request(c, &Annotations::new()).unwrap();
    // "don't set to limits and request"
    assert!(read(&ctr(&[], &[])).is_none());
    // "set to limits and request", "only set to limits", "only set to request"
    for c in [
        ctr(&[("birentech.com/gpu", "1")], &[("birentech.com/gpu", "1")]),
        ctr(&[("birentech.com/gpu", "1")], &[]),
        ctr(&[], &[("birentech.com/gpu", "1")]),
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
            (1, "Biren", 0, Some(100), 0)
        );
    }
}

// ---- TestDevices_LockNode ----

#[test]
fn lock_node() {
    // "Test with non-zero resource requests": the shared node lock.
    assert_eq!(biren().node_lock(), hami_core::vendor::NodeLockRule::Shared);
}

// ---- TestDevices_Fit ----

#[test]
fn devices_fit() {
    let r = registry();
    // "fit success": the last card.
    let n = table_node(BIREN, &[row("dev-0", 0), row("dev-1", 1)], "");
    assert_eq!(
        table_uuids(&table_fit(&r, &n, &cards(1)).unwrap(), BIREN),
        ["dev-1"]
    );
    // "fit fail: type mismatch": see check_type.
    // "fit fail: user assign use uuid mismatch"
    let n = table_node(BIREN, &[row("dev-1", 0)], "");
    let p = with_annotations(cards(1), &[("birentech.com/use-gpuuuid", "dev-0")]);
    assert_eq!(table_reason(table_fit(&r, &n, &p)), "1/1 CardUuidMismatch");
    // "fit fail: user assign no use uuid match"
    let n = table_node(BIREN, &[row("dev-0", 0)], "");
    let p = with_annotations(cards(1), &[("birentech.com/nouse-gpuuuid", "dev-0")]);
    assert_eq!(table_reason(table_fit(&r, &n, &p)), "1/1 CardUuidMismatch");
    // "fit fail: card overused"
    let n = table_node(BIREN, &[row("dev-0", 0).used(1, 0, 0)], "");
    assert_eq!(
        table_reason(table_fit(&r, &n, &cards(1))),
        "1/1 CardTimeSlicingExhausted"
    );
    // "fit fail:  AllocatedCardsInsufficientRequest" (2 cards of 1): the node check.
    let n = table_node(BIREN, &[row("dev-0", 0)], "");
    assert_eq!(
        table_reason(table_fit(&r, &n, &cards(2))),
        "NodeInsufficientDevice"
    );
    // "mutex policy rejects used device"
    let mut shared = row("dev-0", 0).used(1, 0, 0);
    shared.count = 2;
    let n = table_node(BIREN, &[shared], "");
    let p = with_annotations(cards(1), &[("hami.io/gpu-scheduler-policy", "mutex")]);
    assert_eq!(
        table_reason(table_fit(&r, &n, &p)),
        "1/1 ExclusiveDeviceAllocateConflict"
    );
    // "fit fail: partial allocation AllocatedCardsInsufficientRequest for multiple
    // cards" (3 of 2): the node check.
    let big = |id, i| Row::new(id, i, 100, 1280, 100, BIREN);
    let n = table_node(BIREN, &[big("dev-0", 0), big("dev-1", 1)], "");
    assert_eq!(
        table_reason(table_fit(&r, &n, &cards(3))),
        "NodeInsufficientDevice"
    );
}

// ---- TestDevices_AddResourceUsage ----

#[test]
fn add_resource_usage() {
    // "test add resource usage": one more slot, nothing else.
    let mut ledger = table_node(
        BIREN,
        &[Row::new("dev-0", 0, 4, 0, 0, BIREN).used(1, 0, 0)],
        "",
    );
    let devices = BTreeMap::from([(
        BIREN.to_string(),
        vec![vec![ContainerDevice {
            idx: 0,
            uuid: "dev-0".into(),
            dev_type: BIREN.into(),
            mem_mib: 0,
            cores: 0,
            slots: 0,
        }]],
    )]);
    ledger.apply_pod(hami_core::ledger::PodRecord::from_devices(
        "u",
        "default",
        "p",
        "n",
        &devices,
        &[],
    ));
    let u = &ledger.node("n").unwrap().device_usage()[0];
    assert_eq!((u.used, u.cores_used, u.mem_used), (2, 0, 0));
}

// ---- device_cordon_test.go: TestFit_DeviceCordon ----

#[test]
fn fit_device_cordon() {
    let r = registry();
    let rows = [row("dev-0", 0), row("dev-1", 1)];
    let f = table_fit(&r, &table_node(BIREN, &rows, "dev-1, "), &cards(1)).unwrap();
    assert_eq!(table_uuids(&f, BIREN), ["dev-0"]);
    assert_eq!(
        table_reason(table_fit(
            &r,
            &table_node(BIREN, &rows, "dev-0,dev-1"),
            &cards(1)
        )),
        "2/2 CardCordoned"
    );
    // "running pods on a cordoned device are unaffected"
    let busy = [row("dev-0", 0), row("dev-1", 1).used(1, 0, 0)];
    let n = table_node(BIREN, &busy, "dev-1");
    let f = table_fit(&r, &n, &cards(1)).unwrap();
    assert_eq!(table_uuids(&f, BIREN), ["dev-0"]);
    assert_eq!(n.node("n").unwrap().device_usage()[1].used, 1);
    // "no annotation or no node info means nothing cordoned"
    for cordon in ["", "   "] {
        let f = table_fit(&r, &table_node(BIREN, &rows, cordon), &cards(1)).unwrap();
        assert_eq!(table_uuids(&f, BIREN), ["dev-1"]);
    }
}
