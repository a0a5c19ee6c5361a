//! HAMi's Cambricon tests (Project-HAMi/HAMi `pkg/device/cambricon/device_test.go`,
//! `device_cordon_test.go`), case by case, run against hami-rs with HAMi's test config
//! (count resource `cambricon.com/mlu`). HAMi's `Fit` takes MiB; a container asks for
//! memory in units of 256 MiB, so `TestDevices_Fit`'s MiB values (64, 128, 512, …) are all
//! multiplied by 4 to be expressible (every check compares or divides them, so the
//! answers are the same). A request for more cards than the node has gets the node
//! check's answer (`NodeInsufficientDevice`), as HAMi's whole scheduler gives it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::hami::{
    Row, SharedTable, ask_in_units, facts, shared_add_resource_usage, shared_fit_table, table_fit,
    table_node, table_reason, table_uuids, type_check,
};
use common::{container_with, with_annotations};
use hami_core::config::DeviceConfig;
use hami_core::model::{ContainerDevice, ContainerDeviceRequest};
use hami_core::vendor::{
    AllocationContext, Annotations, DeviceConstraints, NodeLockRule, NodeView, Vendor,
    VendorRegistry,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

const MLU: &str = "MLU";
const COUNT: &str = "cambricon.com/mlu";
const MEMORY: &str = "cambricon.com/mlu.smlu.vmemory";
const CORE: &str = "cambricon.com/mlu.smlu.vcore";

/// HAMi's test config.
fn registry() -> VendorRegistry {
    let cfg: DeviceConfig =
        serde_json::from_str(r#"{"cambricon": {"resourceCountName": "cambricon.com/mlu"}}"#)
            .unwrap();
    VendorRegistry::from_config(&cfg)
}

fn mlu() -> std::sync::Arc<dyn Vendor> {
    registry().get(MLU).unwrap().clone()
}

/// One container asking `n` MLUs, `mem_mib` MiB (0: none given), `cores` (`None`: none
/// given).
fn ask(n: u32, mem_mib: u32, cores: Option<u32>) -> Pod {
    ask_in_units([COUNT, MEMORY, CORE], 256, n, mem_mib, cores)
}

fn row(id: &'static str, index: u32, totalmem: u32) -> Row {
    Row::new(id, index, 100, totalmem, 100, MLU)
}

// ---- Test_GetNodeDevices ----

#[test]
fn get_node_devices() {
    // "test with valid configuration"
    let a = Annotations::new();
    let cap = BTreeMap::from([
        (CORE.to_string(), Quantity("1".into())),
        (MEMORY.to_string(), Quantity("1".into())),
    ]);
    let view = NodeView {
        name: "test",
        annotations: &a,
        capacity: Some(&cap),
        labels: None,
    };
    let got = mlu().decode_inventory(&view).unwrap().unwrap();
    assert_eq!(
        facts(&got[0]),
        (0, "test-cambricon-mlu-0", 100, 25600, 100, "MLU", 0, true)
    );
}

// ---- Test_MutateAdmission ----

#[test]
fn mutate_admission() {
    // "set to resources limits"
    let mut c = container_with("c", &[(COUNT, "1")], &[]);
    assert!(
        mlu()
            .mutate_admission(&mut c, &Annotations::new())
            .unwrap()
            .uses
    );
}

// ---- Test_checkType ----

#[test]
fn check_type() {
    // "the same type", "the different type"
    type_check(mlu().as_ref(), MLU, "TEST");
}

// ---- Test_GenerateResourceRequests ----

#[test]
fn generate_resource_requests() {
    let v = mlu();
    let read = |limits: &[(&str, &str)]| {
        v.container_request(&container_with("c", limits, &[]), &Annotations::new())
    };
    let shape =
        |r: ContainerDeviceRequest| (r.count, r.dev_type, r.mem_mib, r.mem_percent, r.cores);
    // "don't set to limits and request"
    assert!(read(&[]).unwrap().is_none());
    // "resourcecoresname,resourcecountname and resourcememoryname set to limits and request"
    assert_eq!(
        shape(
            read(&[(COUNT, "1"), (MEMORY, "1000"), (CORE, "2")])
                .unwrap()
                .unwrap()
        ),
        (1, MLU.into(), 256000, None, 2)
    );
    // "resourcememoryname don't set to limits and requests": cores default to 100.
    assert_eq!(
        shape(read(&[(COUNT, "1"), (MEMORY, "1000")]).unwrap().unwrap()),
        (1, MLU.into(), 256000, None, 100)
    );
    // "resourcecoresname don't set to limits and requests": the whole memory.
    assert_eq!(
        shape(read(&[(COUNT, "1"), (CORE, "2")]).unwrap().unwrap()),
        (1, MLU.into(), 0, Some(100), 2)
    );
    // "zero count must not silently bypass quota", "negative count must be rejected":
    // no request.
    assert!(read(&[(COUNT, "0")]).unwrap().is_none());
    assert!(read(&[(COUNT, "-1")]).unwrap().is_none());
    // "max int32 count is accepted"
    assert_eq!(
        shape(read(&[(COUNT, "2147483647")]).unwrap().unwrap()),
        (2147483647, MLU.into(), 0, Some(100), 100)
    );
    // "count above max int32 is rejected", "memory overflowing int32 is rejected, not
    // truncated to zero", "decimal-form memory request is rejected, not treated as
    // zero": HAMi drops the request, hami-rs refuses it naming the container.
    for bad in [
        vec![(COUNT, "2147483648")],
        vec![(COUNT, "1"), (MEMORY, "16Gi")],
        vec![(COUNT, "1"), (MEMORY, "16.0Gi")],
    ] {
        assert!(read(&bad).is_err(), "{bad:?}");
    }
}

// ---- Test_PatchAnnotations ----

#[test]
fn patch_annotations() {
    let v = mlu();
    let node_devices = [Row::new("device-0", 0, 100, 256000, 100, MLU).info()];
    let dev = ContainerDevice {
        idx: 0,
        uuid: "device-0".into(),
        dev_type: MLU.into(),
        mem_mib: 256000,
        cores: 1,
        slots: 0,
    };
    let extra = |devices: &Vec<Vec<ContainerDevice>>| {
        let requests = vec![None; devices.len()];
        let names = vec!["c"; devices.len()];
        v.extra_annotations(&AllocationContext {
            node: "n",
            devices,
            requests: &requests,
            node_devices: &node_devices,
            container_names: &names,
            constraints: &DeviceConstraints::default(),
            now_unix: 0,
        })
    };
    let want = vec![
        ("CAMBRICON_DSMLU_ASSIGNED".to_string(), "false".to_string()),
        (
            "CAMBRICON_DSMLU_PROFILE".to_string(),
            "0_1_1000".to_string(),
        ),
    ];
    // "exist device"
    let one = vec![vec![dev.clone()]];
    assert_eq!(extra(&one), want);
    assert_eq!(
        hami_core::codec::encode_pod_single_device(&one),
        "device-0,MLU,256000,1:;"
    );
    // "leading container without device"
    let two = vec![vec![], vec![dev]];
    assert_eq!(extra(&two), want);
    assert_eq!(
        hami_core::codec::encode_pod_single_device(&two),
        ";device-0,MLU,256000,1:;"
    );
    // "no device"
    assert!(extra(&vec![vec![]]).is_empty());
    assert_eq!(
        v.to_allocate_annotation(),
        Some("hami.io/cambricon-mlu-devices-to-allocate")
    );
    assert_eq!(
        v.allocated_annotation(),
        "hami.io/cambricon-mlu-devices-allocated"
    );
}

// ---- Test_LockNode ----

#[test]
fn lock_node() {
    // Its own time-stamp lock, free again after 2 minutes ("node is already locked
    // within 2 minutes", "lock time expired (more than 2 minutes)"). "invalid lock time
    // format" blocks the node in HAMi; hami-rs takes a malformed lock over
    // (docs/vendors.md#deliberate-differences-from-hami).
    assert_eq!(
        mlu().node_lock(),
        NodeLockRule::Timestamp {
            key: "cambricon.com/dsmlu.lock",
            expiry: std::time::Duration::from_secs(120)
        }
    );
}

// ---- TestDevices_Fit (MiB × 4): the cases Mthreads' table shares, then its own ----

#[test]
fn devices_fit() {
    let r = registry();
    let fit = |rows: &[Row], p: &Pod| table_fit(&r, &table_node(MLU, rows, ""), p);
    shared_fit_table(&SharedTable {
        registry: &r,
        vendor: MLU,
        scale: 4,
        ask: &ask,
        use_uuid: "cambricon.com/use-gpuuuid",
        nouse_uuid: "cambricon.com/nouse-gpuuuid",
    });
    // "fit success:  memory percentage": Cambricon has no percentage resource; a
    // container naming no memory asks for the whole card, which a used card refuses.
    // "mutex policy rejects used device"
    let p = with_annotations(
        ask(1, 256, Some(50)),
        &[("hami.io/gpu-scheduler-policy", "mutex")],
    );
    assert_eq!(
        table_reason(fit(&[row("dev-0", 0, 512).used(1, 0, 0)], &p)),
        "1/1 ExclusiveDeviceAllocateConflict"
    );
    // "fit fail: partial allocation AllocatedCardsInsufficientRequest for multiple
    // cards" (3 of 2): the node check.
    assert_eq!(
        table_reason(fit(
            &[row("dev-0", 0, 5120), row("dev-1", 1, 5120)],
            &ask(3, 2048, Some(20))
        )),
        "NodeInsufficientDevice"
    );
    // "fit fail: CardNotHealth"
    let mut sick = row("dev-0", 0, 512);
    sick.health = false;
    assert_eq!(
        table_reason(fit(&[sick], &ask(1, 256, Some(50)))),
        "1/1 CardNotHealth"
    );
}

// ---- TestDevices_AddResourceUsage ----

#[test]
fn add_resource_usage() {
    shared_add_resource_usage(MLU);
}

// ---- device_cordon_test.go: TestFit_DeviceCordon ----

#[test]
fn fit_device_cordon() {
    let r = registry();
    // Totalmem 128 and Memreq 64, × 4.
    let rows = [row("dev-0", 0, 512), row("dev-1", 1, 512)];
    let p = ask(1, 256, Some(50));
    let f = table_fit(&r, &table_node(MLU, &rows, "dev-1, "), &p).unwrap();
    assert_eq!(table_uuids(&f, MLU), ["dev-0"]);
    assert_eq!(
        table_reason(table_fit(&r, &table_node(MLU, &rows, "dev-0,dev-1"), &p)),
        "2/2 CardCordoned"
    );
    // "running pods on a cordoned device are unaffected"
    let busy = [row("dev-0", 0, 512), row("dev-1", 1, 512).used(1, 256, 50)];
    let n = table_node(MLU, &busy, "dev-1");
    let f = table_fit(&r, &n, &p).unwrap();
    assert_eq!(table_uuids(&f, MLU), ["dev-0"]);
    assert_eq!(n.node("n").unwrap().device_usage()[1].used, 1);
    for cordon in ["", "   "] {
        let f = table_fit(&r, &table_node(MLU, &rows, cordon), &p).unwrap();
        assert_eq!(table_uuids(&f, MLU), ["dev-1"]);
    }
}
