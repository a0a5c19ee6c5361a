//! HAMi's Enflame tests (Project-HAMi/HAMi `pkg/device/enflame/`: `device_test.go`,
//! `drs_reconstruction_test.go`, `device_corebudget_test.go`, `device_cordon_test.go`,
//! `gcu_test.go`), case by case, run against hami-rs: the DRS family (`Enflame`) and
//! whole GCUs (`GCU`). Each test names the HAMi test it comes from. HAMi calls its
//! vendor's `Fit` on a device list; here the whole node fit runs on a node holding that
//! list, so a request for more devices than the node has gets the node check's answer
//! (`NodeInsufficientDevice`). Where hami-rs answers differently on purpose, the test
//! says so and `docs/vendors.md#deliberate-differences-from-hami` lists it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::hami::{
    Row, book_one, facts, table_fit, table_node, table_reason, type_check, usage_of,
};
use common::{container, container_with, plan, pod, registry, with_annotations};
use hami_core::accounting::DeviceCharge;
use hami_core::codec::{decode_pod_single_device, encode_pod_single_device};
use hami_core::engine::{NodeFit, allocation_annotations};
use hami_core::fit::FitFailure;
use hami_core::ledger::{Ledger, NodeInventory, PodRecord};
use hami_core::model::{ContainerDevice, ContainerDeviceRequest, DeviceInfo};
use hami_core::vendor::enflame_drs::{self, ENFLAME, decode_drs_capacity};
use hami_core::vendor::{Annotations, DeviceConstraints, HealthRule, NodeView, Vendor};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};

const MENU: &str = r#"{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}"#;

fn vendor(word: &str) -> std::sync::Arc<dyn Vendor> {
    registry().get(word).unwrap().clone()
}

/// One row of HAMi's DRS `DeviceUsage` tables: a GCU with `count` slices and the
/// profile menu `menu` (JSON object), `used` slices taken.
#[derive(Clone)]
struct Drs {
    id: &'static str,
    index: u32,
    count: u32,
    used: u32,
    totalmem: u32,
    totalcore: u32,
    health: bool,
    menu: &'static str,
}

impl Drs {
    /// HAMi's common row: 6 slices, 40960 MiB, the three-profile menu.
    fn new(id: &'static str, index: u32) -> Self {
        Drs {
            id,
            index,
            count: 6,
            used: 0,
            totalmem: 40960,
            totalcore: 100,
            health: true,
            menu: MENU,
        }
    }

    fn row(&self) -> Row {
        let mut r = Row::new(
            self.id,
            self.index,
            self.count,
            self.totalmem,
            self.totalcore,
            ENFLAME,
        )
        .used(self.used, 0, 0);
        r.health = self.health;
        r.custom_info = BTreeMap::from([
            ("minor".to_string(), json!(self.index.to_string())),
            ("index".to_string(), json!(self.index.to_string())),
            (
                "profiles".to_string(),
                serde_json::from_str(self.menu).unwrap(),
            ),
        ]);
        r
    }
}

fn drs_node(devs: &[Drs], cordon: &str) -> Ledger {
    let rows: Vec<Row> = devs.iter().map(Drs::row).collect();
    table_node(ENFLAME, &rows, cordon)
}

/// A pod of one container `main` with these limits.
fn pod_asking(limits: &[(&str, &str)]) -> Pod {
    pod("p", vec![container("main", limits)])
}

/// HAMi's direct request `Memreq: n` (`MemPercentagereq` 0): `n` slices.
fn slices(n: u32) -> Pod {
    pod_asking(&[("enflame.com/drs-gcu", &n.to_string())])
}

fn fit(ledger: &Ledger, p: &Pod) -> Result<NodeFit, FitFailure> {
    table_fit(&registry(), ledger, p)
}

fn reason(out: Result<NodeFit, FitFailure>) -> String {
    table_reason(out)
}

/// The one device the pod's only container got.
fn given(fit: &NodeFit, vendor: &str) -> ContainerDevice {
    let devs = &fit.devices[vendor][0];
    assert_eq!(devs.len(), 1, "{devs:?}");
    devs[0].clone()
}

/// Fits `p` on the node and books it, as a placement followed by the pod's record.
fn fit_and_book(ledger: &mut Ledger, p: &Pod, uid: &str) -> Result<ContainerDevice, String> {
    let f = fit(ledger, p).map_err(|e| e.render())?;
    let d = given(&f, ENFLAME);
    let pl = plan(p);
    ledger.apply_pod(PodRecord::from_devices(
        uid, "default", uid, "n", &f.devices, &pl.kinds,
    ));
    Ok(d)
}

fn request(v: &dyn Vendor, c: &Container) -> Option<ContainerDeviceRequest> {
    v.container_request(c, &Annotations::new()).unwrap()
}

// ---- device_test.go: TestGetNodeDevices_DRSAnnotation ----

#[test]
fn get_node_devices_drs_annotation() {
    let value =
        format!(r#"{{"devices":[{{"index":"0","minor":"0","capacity":6}}],"profiles":{MENU}}}"#);
    let got = decode_drs_capacity("node-a", &value).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(&*got[0].dev_type, "Enflame");
    assert_eq!(got[0].mem_mib, 40960);
    assert_eq!(got[0].count, 6);
    assert_eq!(got[0].custom_str("minor"), Some("0"));
    assert_eq!(&*got[0].id, "node-a-enflame-drs-0");
}

// ---- device_test.go: Test_checkType ----

#[test]
fn check_type() {
    // "the same type", "the different type"
    type_check(vendor(ENFLAME).as_ref(), "Enflame", "test123");
}

// ---- device_test.go: TestGenerateResourceRequests, _ByMemoryCore,
//      Test_GenerateResourceRequests_CoresValidation ----

#[test]
fn generate_resource_requests() {
    let v = vendor(ENFLAME);
    let r = request(
        v.as_ref(),
        &container_with("testctr", &[("enflame.com/drs-gcu", "3")], &[]),
    )
    .unwrap();
    assert_eq!((r.count, r.mem_mib, r.dev_type.as_str()), (1, 3, "Enflame"));
    // HAMi's enflameRequestModeDirect.
    assert_eq!(r.mem_percent, Some(0));

    let r = request(
        v.as_ref(),
        &container_with(
            "testctr",
            &[
                ("enflame.com/gcu-memory", "20480"),
                ("enflame.com/gcu-core", "40"),
            ],
            &[],
        ),
    )
    .unwrap();
    assert_eq!((r.count, r.mem_mib, r.cores), (1, 20480, 40));
    // HAMi's enflameRequestModeBySpec.
    assert_eq!(r.mem_percent, None);
}

#[test]
fn generate_resource_requests_cores_validation() {
    let v = vendor(ENFLAME);
    for cores in ["0", "50", "100"] {
        let c = container_with(
            "testctr",
            &[
                ("enflame.com/gcu-memory", "20480"),
                ("enflame.com/gcu-core", cores),
            ],
            &[],
        );
        let r = request(v.as_ref(), &c).unwrap();
        assert_eq!(r.cores.to_string(), cores);
    }
    // HAMi drops these requests (no device asked); hami-rs refuses them naming the
    // container, as it does every out-of-range request (docs/vendors.md#fit).
    for cores in ["101", "150", "200", "-1"] {
        let c = container_with(
            "testctr",
            &[
                ("enflame.com/gcu-memory", "20480"),
                ("enflame.com/gcu-core", cores),
            ],
            &[],
        );
        let err = v.container_request(&c, &Annotations::new()).unwrap_err();
        assert!(err.to_string().contains("testctr"), "{err}");
    }
}

// ---- device_test.go: TestFit_SelectProfileByRequest, TestFit_SelectProfileByMemoryCoreRequest ----

#[test]
fn fit_select_profile_by_request() {
    let ledger = drs_node(&[Drs::new("node-a-enflame-drs-0", 0)], "");
    for p in [
        slices(3),
        pod_asking(&[
            ("enflame.com/gcu-memory", "20480"),
            ("enflame.com/gcu-core", "40"),
        ]),
    ] {
        let f = fit(&ledger, &p).unwrap();
        let d = given(&f, ENFLAME);
        assert_eq!((d.mem_mib, d.cores), (20480, 50));
        let a = allocation_annotations(&registry(), &plan(&p), "n", &f, 1);
        let assigned: Value = serde_json::from_str(&a["assigned-containers"]).unwrap();
        assert_eq!(assigned["main"]["profileName"], "3g.20gb");
        assert_eq!(assigned["main"]["profileID"], "1");
    }
}

// ---- device_test.go: TestMutateAdmission_ByMemoryCoreAPI ----

#[test]
fn mutate_admission_by_memory_core_api() {
    let v = vendor(ENFLAME);
    let mut c = container_with(
        "testctr",
        &[
            ("enflame.com/gcu-memory", "20480"),
            ("enflame.com/gcu-core", "50"),
        ],
        &[],
    );
    assert!(
        v.mutate_admission(&mut c, &Annotations::new())
            .unwrap()
            .uses
    );
}

// ---- device_test.go: TestFit_ProfileNotFound ----

#[test]
fn fit_profile_not_found() {
    let mut d = Drs::new("node-a-enflame-drs-0", 0);
    d.menu = r#"{"1g.6gb":"0"}"#;
    let ledger = drs_node(&[d], "");
    assert_eq!(reason(fit(&ledger, &slices(3))), "1/1 ModeNotFit");
}

// ---- device_test.go: TestFit_MutexRejectsUsedDevice ----

#[test]
fn fit_mutex_rejects_used_device() {
    let mut d = Drs::new("node-a-enflame-drs-0", 0);
    (d.count, d.used) = (2, 1);
    let ledger = drs_node(&[d], "");
    let p = with_annotations(slices(3), &[("hami.io/gpu-scheduler-policy", "mutex")]);
    assert_eq!(
        reason(fit(&ledger, &p)),
        "1/1 ExclusiveDeviceAllocateConflict"
    );
}

// ---- device_test.go: TestFit_UnhealthyDeviceRejected ----

#[test]
fn fit_unhealthy_device_rejected() {
    let mut d = Drs::new("node-a-enflame-drs-0", 0);
    d.health = false;
    let ledger = drs_node(&[d], "");
    assert!(reason(fit(&ledger, &slices(3))).contains("CardNotHealth"));
}

// ---- device_test.go: TestPatchAnnotations_DRSFields ----

#[test]
fn patch_annotations_drs_fields() {
    let ledger = drs_node(&[Drs::new("node-a-enflame-drs-0", 0)], "");
    let p = pod(
        "p",
        vec![container(
            "pod-gcu-example1",
            &[("enflame.com/drs-gcu", "3")],
        )],
    );
    let f = fit(&ledger, &p).unwrap();
    let got = allocation_annotations(&registry(), &plan(&p), "n", &f, 1_700_000_000);
    assert!(got["hami.io/enflame-vgpu-devices-allocated"].contains(",20480,50"));
    assert_eq!(got["enflame.com/gcu-assigned"], "false");
    assert_eq!(got["enflame.com/gcu-assigned-index"], "0");
    assert_eq!(got["enflame.com/gcu-assigned-minor"], "0");
    assert_eq!(got["enflame.com/gcu-request-size"], "3");
    assert_eq!(got["enflame.com/gcu-assigned-time"], "1700000000000000000");
    let assigned: Value = serde_json::from_str(&got["assigned-containers"]).unwrap();
    let e = &assigned["pod-gcu-example1"];
    assert_eq!(e["allocated"], false);
    assert_eq!(e["request"], 3);
    assert_eq!(e["profileName"], "3g.20gb");
    assert_eq!(e["profileID"], "1");
}

// ---- device_test.go: TestParseDRSCapacity_RejectsNaNAndInf ----

#[test]
fn parse_drs_capacity_rejects_out_of_range() {
    let node = |cap: &str| {
        decode_drs_capacity(
            "n",
            &format!(r#"{{"devices":[{{"index":"0","capacity":{cap}}}],"profiles":{MENU}}}"#),
        )
    };
    // NaN and Inf are not JSON; 1e300 is.
    assert!(node("1e300").is_err());
    assert_eq!(node("42").unwrap()[0].count, 42);
    // HAMi clamps "2147483648" to MaxInt32 slices; hami-rs refuses a capacity beyond
    // int32 as malformed (docs/vendors.md#deliberate-differences-from-hami).
    assert!(node(r#""2147483648""#).is_err());
}

// ---- device_test.go: TestFit_OversizedProfileRejected ----

#[test]
fn fit_oversized_profile_rejected() {
    for menu in [
        r#"{"4294967299g.4294967299gb":"0"}"#,
        r#"{"4294967299g.20gb":"0"}"#,
        r#"{"2g.4294967299gb":"0"}"#,
        r#"{"2147483647g.20gb":"0"}"#,
    ] {
        let mut d = Drs::new("node-a-enflame-drs-0", 0);
        d.menu = menu;
        let ledger = drs_node(&[d], "");
        // HAMi's request has MemPercentagereq 101 (neither mode): read by memory.
        let out = fit(&ledger, &pod_asking(&[("enflame.com/gcu-memory", "3")]));
        assert!(out.is_err(), "{menu}");
    }
}

// ---- drs_reconstruction_test.go ----

#[test]
fn drs_slice_slot_count_survives_reconstruction() {
    let ledger = drs_node(&[Drs::new("GPU-enflame-drs-0", 0)], "");
    let p = slices(3);
    let f = fit(&ledger, &p).unwrap();
    let d = given(&f, ENFLAME);
    assert_eq!(d.slots, 3);
    // Persisted and read back, the count stays.
    let encoded = encode_pod_single_device(&f.devices[ENFLAME]);
    assert_eq!(encoded, "GPU-enflame-drs-0,Enflame,20480,50,3:;");
    let decoded = decode_pod_single_device(&encoded).unwrap();
    assert_eq!(decoded[0][0].slots_taken(), 3);
}

#[test]
fn drs_slice_partial_capacity_rejects_full_profile() {
    let mut d = Drs::new("GPU-enflame-drs-0", 0);
    (d.totalmem, d.totalcore, d.used) = (400000, 0, 4);
    let ledger = drs_node(&[d], "");
    // 2 of 6 slices are free: the 3-slice profile does not fit, the 1-slice one does.
    assert!(reason(fit(&ledger, &slices(3))).contains("CardTimeSlicingExhausted"));
    let one = given(&fit(&ledger, &slices(1)).unwrap(), ENFLAME);
    assert_eq!(one.slots_taken(), 1);
}

#[test]
fn drs_slice_count_prefers_slots() {
    // "annotation round trip keeps the count" and "neither set counts as one slice".
    for (value, want) in [("d,Enflame,20480,50,3:;", 3), ("d,Enflame,6144,16:;", 1)] {
        let decoded = decode_pod_single_device(value).unwrap();
        assert_eq!(decoded[0][0].slots_taken(), want, "{value}");
    }
    // The request size written matches what the ledger books.
    let ledger = drs_node(&[Drs::new("GPU-enflame-drs-0", 0)], "");
    let p = slices(3);
    let f = fit(&ledger, &p).unwrap();
    let a = allocation_annotations(&registry(), &plan(&p), "n", &f, 1);
    assert_eq!(a["enflame.com/gcu-request-size"], "3");
}

#[test]
fn drs_slice_reconstruction_rejects_slice_oversubscription() {
    let mut d = Drs::new("GPU-enflame-drs-0", 0);
    (d.totalmem, d.totalcore) = (400000, 0);
    let mut ledger = drs_node(&[d.clone()], "");
    let p = slices(3);
    let mut persisted = Vec::new();
    for uid in ["a", "b"] {
        let f = fit(&ledger, &p).unwrap();
        let a = allocation_annotations(&registry(), &plan(&p), "n", &f, 1);
        persisted.push(a["hami.io/enflame-vgpu-devices-allocated"].clone());
        fit_and_book(&mut ledger, &p, uid).unwrap();
    }
    assert_eq!(ledger.node("n").unwrap().device_usage()[0].used, 6);
    assert!(fit(&ledger, &p).is_err());

    // Restart: the ledger rebuilt from the pods' annotations.
    let mut rebuilt = drs_node(&[d], "");
    for (i, value) in persisted.iter().enumerate() {
        let mut pod = with_annotations(
            slices(3),
            &[
                ("hami.io/vgpu-node", "n"),
                ("hami.io/enflame-vgpu-devices-allocated", value),
            ],
        );
        pod.metadata.uid = Some(format!("uid-{i}"));
        rebuilt.apply_pod(PodRecord::from_pod(&pod, &registry()).unwrap().unwrap());
    }
    assert_eq!(rebuilt.node("n").unwrap().device_usage()[0].used, 6);
    assert!(fit(&rebuilt, &p).is_err());
}

// ---- device_corebudget_test.go ----

#[test]
fn fit_all_advertised_slices_schedulable() {
    let mut ledger = drs_node(&[Drs::new("node-a-enflame-drs-0", 0)], "");
    for i in 0..6 {
        fit_and_book(&mut ledger, &slices(1), &format!("p{i}"))
            .unwrap_or_else(|r| panic!("slice {} of 6 rejected: {r}", i + 1));
    }
    assert_eq!(ledger.node("n").unwrap().device_usage()[0].used, 6);
    // The device is now full: a seventh slice is refused.
    assert!(fit(&ledger, &slices(1)).is_err());
}

#[test]
fn fit_mixed_profiles_fill_device() {
    let mut ledger = drs_node(&[Drs::new("node-a-enflame-drs-0", 0)], "");
    for (i, n) in [3, 1, 1, 1].into_iter().enumerate() {
        fit_and_book(&mut ledger, &slices(n), &format!("p{i}"))
            .unwrap_or_else(|r| panic!("request {i} rejected: {r}"));
    }
    assert_eq!(ledger.node("n").unwrap().device_usage()[0].used, 6);
}

// ---- device_cordon_test.go: TestFit_DeviceCordon, TestGCUFit_DeviceCordon ----

#[test]
fn fit_device_cordon() {
    let devs = [Drs::new("drs-0", 0), Drs::new("drs-1", 1)];
    // "cordoned device is skipped, healthy sibling still fits"
    let f = fit(&drs_node(&devs, "drs-1, "), &slices(3)).unwrap();
    assert_eq!(given(&f, ENFLAME).uuid, "drs-0");
    // "all devices cordoned fails with CardCordoned reason"
    assert_eq!(
        reason(fit(&drs_node(&devs, "drs-0,drs-1"), &slices(3))),
        "2/2 CardCordoned"
    );
    // "no annotation or no node info means nothing cordoned"
    for cordon in ["", "   "] {
        let f = fit(&drs_node(&devs, cordon), &slices(3)).unwrap();
        assert_eq!(given(&f, ENFLAME).uuid, "drs-1");
    }
}

fn gcu(id: &'static str, index: u32) -> Row {
    Row::new(id, index, 1, 100, 100, "GCU")
}

fn gcu_pod(n: u32) -> Pod {
    pod_asking(&[("enflame.com/gcu", &n.to_string())])
}

#[test]
fn gcu_fit_device_cordon() {
    let devs = || vec![gcu("dev-0", 0), gcu("dev-1", 1)];
    let f = fit(&table_node("GCU", &devs(), "dev-1, "), &gcu_pod(1)).unwrap();
    assert_eq!(given(&f, "GCU").uuid, "dev-0");
    assert_eq!(
        reason(fit(&table_node("GCU", &devs(), "dev-0,dev-1"), &gcu_pod(1))),
        "2/2 CardCordoned"
    );
    for cordon in ["", "   "] {
        let f = fit(&table_node("GCU", &devs(), cordon), &gcu_pod(1)).unwrap();
        assert_eq!(given(&f, "GCU").uuid, "dev-1");
    }
}

// ---- gcu_test.go ----

#[test]
fn gcu_devices_get_node_devices() {
    let v = vendor("GCU");
    let a = Annotations::new();
    let cap = BTreeMap::from([("enflame.com/gcu".to_string(), Quantity("2".into()))]);
    let view = NodeView {
        name: "testnode",
        annotations: &a,
        capacity: Some(&cap),
        labels: None,
    };
    let got = v.decode_inventory(&view).unwrap().unwrap();
    let rows: Vec<_> = got.iter().map(facts).collect();
    assert_eq!(
        rows,
        [
            (0, "testnode-GCU-0", 1, 100, 100, "GCU", 0, true),
            (1, "testnode-GCU-1", 1, 100, 100, "GCU", 0, true)
        ]
    );
    // "Test with missing resource": no devices (HAMi also returns an error, which its
    // scheduler logs and treats as no devices).
    let empty = BTreeMap::new();
    let view = NodeView {
        capacity: Some(&empty),
        ..view
    };
    assert!(v.decode_inventory(&view).is_none());
}

#[test]
fn gcu_devices_check_health() {
    let v = vendor("GCU");
    assert_eq!(v.health_rule(), HealthRule::Capacity);
    let a = Annotations::new();
    let with = BTreeMap::from([("enflame.com/gcu".to_string(), Quantity("2".into()))]);
    let without = BTreeMap::new();
    let alive = |cap| {
        NodeView {
            name: "n",
            annotations: &a,
            capacity: Some(cap),
            labels: None,
        }
        .capacity_of(v.count_resource())
        .is_some_and(|n| n > 0)
    };
    // "Node with GCU resources" healthy; "Node without GCU resources" not.
    assert!(alive(&with));
    assert!(!alive(&without));
}

#[test]
fn gcu_devices_mutate_admission() {
    let v = vendor("GCU");
    let mut c = container_with("testctr", &[("enflame.com/gcu", "2")], &[]);
    assert!(
        v.mutate_admission(&mut c, &Annotations::new())
            .unwrap()
            .uses
    );
    let mut c = container_with("testctr", &[], &[]);
    assert!(
        !v.mutate_admission(&mut c, &Annotations::new())
            .unwrap()
            .uses
    );
}

#[test]
fn gcu_devices_generate_resource_requests() {
    let v = vendor("GCU");
    let r = request(
        v.as_ref(),
        &container_with("testctr", &[("enflame.com/gcu", "3")], &[]),
    )
    .unwrap();
    assert_eq!(
        (r.count, r.mem_mib, r.cores, r.dev_type.as_str()),
        (3, 100, 100, "GCU")
    );
    let r = request(
        v.as_ref(),
        &container_with("testctr", &[], &[("enflame.com/gcu", "2")]),
    )
    .unwrap();
    assert_eq!((r.count, r.mem_mib, r.cores), (2, 100, 100));
    assert!(request(v.as_ref(), &container_with("testctr", &[], &[])).is_none());
}

#[test]
fn gcu_devices_patch_annotations() {
    let v = vendor("GCU");
    let devices = vec![vec![ContainerDevice {
        idx: 0,
        uuid: "testnode-GCU-0".into(),
        dev_type: "GCU".into(),
        mem_mib: 0,
        cores: 0,
        slots: 0,
    }]];
    assert_eq!(
        encode_pod_single_device(&devices),
        "testnode-GCU-0,GCU,0,0:;"
    );
    assert_eq!(
        v.to_allocate_annotation(),
        Some("hami.io/enflame-gcu-devices-to-allocate")
    );
    assert_eq!(
        v.allocated_annotation(),
        "hami.io/enflame-gcu-devices-allocated"
    );
}

#[test]
fn gcu_devices_fit() {
    let devs = || vec![gcu("dev-0", 0), gcu("dev-1", 1)];
    // "fit success": the last device.
    let f = fit(&table_node("GCU", &devs(), ""), &gcu_pod(1)).unwrap();
    assert_eq!(given(&f, "GCU").uuid, "dev-1");
    // "fit fail: type mismatch"
    let v = vendor("GCU");
    let other = ContainerDeviceRequest {
        count: 1,
        dev_type: "OtherType".into(),
        mem_mib: 100,
        mem_percent: Some(100),
        cores: 100,
    };
    assert!(!v.type_matches(
        &gcu("dev-0", 0).info(),
        &other,
        &DeviceConstraints::default()
    ));
    // "fit fail: device already used"
    let used = table_node("GCU", &[gcu("dev-0", 0).used(1, 0, 0)], "");
    assert_eq!(
        reason(fit(&used, &gcu_pod(1))),
        "1/1 ExclusiveDeviceAllocateConflict"
    );
    // "fit fail: insufficient devices": HAMi's vendor Fit says
    // "1/1 AllocatedCardsInsufficientRequest"; the whole scheduler refuses the node
    // before, as hami-rs does.
    let one = table_node("GCU", &[gcu("dev-0", 0)], "");
    assert_eq!(reason(fit(&one, &gcu_pod(2))), "NodeInsufficientDevice");
}

#[test]
fn gcu_devices_add_resource_usage() {
    // "test add resource usage": one slot, the container's cores and memory.
    let mut ledger = table_node("GCU", &[gcu("dev-0", 0)], "");
    book_one(&mut ledger, "GCU", "dev-0", 100, 50);
    assert_eq!(usage_of(&ledger, 0), (1, 50, 100));
}

/// The module's own helpers agree with HAMi's profile parsing (`parseProfile`).
#[test]
fn profile_names_parse_as_hami_reads_them() {
    assert_eq!(enflame_drs::parse_profile("3g.20gb"), Some((3, 20)));
    assert_eq!(enflame_drs::parse_profile(" 6G.40GB "), Some((6, 40)));
    assert_eq!(enflame_drs::parse_profile("2g.x"), Some((2, 0)));
    assert_eq!(enflame_drs::parse_profile("6g"), None);
    assert_eq!(enflame_drs::parse_profile("xg.6gb"), None);
}

// ---------------------------------------------------------------------------------------
// hami-rs's own DRS cases (docs/vendors.md#enflame-drs): decoding, requests, every
// reason, annotations byte for byte, admission texts.
// ---------------------------------------------------------------------------------------

const CAPACITY: &str = r#"{"devices":[{"index":"0","minor":"3","capacity":6},{"index":"1","minor":"4","capacity":"6"}],"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}"#;

/// Decodes a node of these annotations through every vendor: the inventory and the
/// issues as `vendor annotation: error`.
fn decode_node(annotations: &[(&str, &str)]) -> (NodeInventory, Vec<String>) {
    let a: Annotations = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let cap = BTreeMap::from([("enflame.com/gcu".to_string(), Quantity("2".into()))]);
    let view = NodeView {
        name: "n",
        annotations: &a,
        capacity: Some(&cap),
        labels: None,
    };
    let (inv, issues) = NodeInventory::from_node(&view, &registry());
    let issues = issues
        .into_iter()
        .map(|i| format!("{} {}: {}", i.vendor, i.annotation, i.error))
        .collect();
    (inv, issues)
}

fn devices_of<'a>(inv: &'a NodeInventory, vendor: &str) -> &'a [DeviceInfo] {
    inv.vendors
        .iter()
        .find(|v| v.vendor == vendor)
        .map_or(&[][..], |v| v.devices.as_slice())
}

#[test]
fn drs_capacity_decodes_beside_whole_gcus() {
    let (inv, issues) = decode_node(&[("enflame.com/gcu-drs-capacity", CAPACITY)]);
    assert!(issues.is_empty(), "{issues:?}");
    let drs = devices_of(&inv, "Enflame");
    let ids: Vec<&str> = drs.iter().map(|d| &*d.id).collect();
    assert_eq!(ids, ["n-enflame-drs-0", "n-enflame-drs-1"]);
    assert_eq!(
        (drs[1].count, drs[1].mem_mib, drs[1].cores),
        (6, 40960, 100)
    );
    assert_eq!(drs[0].custom_str("minor"), Some("3"));
    assert_eq!(drs[0].custom_int("maxSlice"), Some(6));
    // The node's whole GCUs are another family, untouched.
    assert_eq!(devices_of(&inv, "GCU").len(), 2);
}

#[test]
fn drs_minor_and_index_default_as_hami_reads_them() {
    let got = decode_drs_capacity(
        "n",
        r#"{"devices":[{"index":"x","capacity":2},{"index":" 5 ","minor":" ","capacity":1}],"profiles":{"1g.6gb":"0","2g.12":"1"}}"#,
    )
    .unwrap();
    // A non-numeric index is the device's position; a missing minor is the index.
    assert_eq!((got[0].index, got[0].custom_str("minor")), (0, Some("0")));
    assert_eq!((got[1].index, got[1].custom_str("minor")), (5, Some("5")));
    // Memory is the largest readable profile memory (6 GiB; "2g.12" reads as 12 GiB).
    assert_eq!(got[0].mem_mib, 12 * 1024);
}

#[test]
fn malformed_drs_capacity_takes_only_the_drs_devices_out() {
    for (value, want) in [
        ("not json", "invalid Enflame DRS capacity JSON"),
        (
            r#"{"devices":[{"index":"0","capacity":6}],"profiles":{"big":"0"}}"#,
            "no valid drs profiles",
        ),
        (
            r#"{"devices":[{"index":"0","capacity":0}],"profiles":{"1g.6gb":"0"}}"#,
            "device 0: invalid capacity 0",
        ),
        (
            r#"{"devices":[{"index":"0"}],"profiles":{"1g.6gb":"0"}}"#,
            "invalid capacity null",
        ),
        (
            r#"{"devices":[],"profiles":{"1g.6gb":"0"}}"#,
            "no drs devices",
        ),
        (
            r#"{"devices":[{"index":"1","capacity":1},{"index":"1","capacity":1}],"profiles":{"1g.6gb":"0"}}"#,
            "device index 1 appears twice",
        ),
        (
            r#"{"devices":[{"index":"0","capacity":1}],"profiles":{"1g.6gb":0}}"#,
            "invalid Enflame DRS capacity JSON",
        ),
    ] {
        let (inv, issues) = decode_node(&[("enflame.com/gcu-drs-capacity", value)]);
        assert_eq!(issues.len(), 1, "{value}: {issues:?}");
        assert!(
            issues[0].starts_with("Enflame enflame.com/gcu-drs-capacity: ")
                && issues[0].contains(want),
            "{value}: {issues:?}"
        );
        assert!(devices_of(&inv, "Enflame").is_empty());
        assert_eq!(devices_of(&inv, "GCU").len(), 2, "{value}");
    }
}

#[test]
fn drs_rules_health_lock_keys_and_quota() {
    let v = vendor(ENFLAME);
    assert_eq!(v.health_rule(), HealthRule::Always);
    assert_eq!(v.node_lock(), hami_core::vendor::NodeLockRule::None);
    assert_eq!(v.to_allocate_annotation(), None);
    assert_eq!(
        v.allocated_annotation(),
        "hami.io/enflame-vgpu-devices-allocated"
    );
    assert_eq!(
        v.resource_names(),
        [
            "enflame.com/drs-gcu",
            "enflame.com/gcu-memory",
            "enflame.com/gcu-core"
        ]
    );
    let q = v.quota_resources();
    assert_eq!(q.memory.as_deref(), Some("enflame.com/gcu-memory"));
    assert_eq!(q.cores.as_deref(), Some("enflame.com/gcu-core"));
}

#[test]
fn drs_legacy_vgcu_name_stands_for_an_empty_drs_name() {
    // device-config.yaml read as JSON (a YAML subset).
    let cfg: hami_core::config::DeviceConfig = serde_json::from_str(
        r#"{"enflame": {"resourceNameDRSGCU": "", "resourceNameVGCU": "enflame.com/vgcu", "resourceNameGCUMemory": ""}}"#,
    )
    .unwrap();
    let reg = hami_core::vendor::VendorRegistry::from_config(&cfg);
    let v = reg.get(ENFLAME).unwrap();
    assert_eq!(v.count_resource(), "enflame.com/vgcu");
    assert!(
        v.resource_names()
            .contains(&"enflame.com/gcu-memory".to_string())
    );
}

#[test]
fn drs_requests_read_limits_then_requests() {
    let v = vendor(ENFLAME);
    // The count in requests only.
    let r = request(
        v.as_ref(),
        &container_with("testctr", &[], &[("enflame.com/drs-gcu", "6")]),
    )
    .unwrap();
    assert_eq!((r.mem_mib, r.mem_percent), (6, Some(0)));
    // A zero count falls back to memory and compute, as in HAMi.
    let r = request(
        v.as_ref(),
        &container_with(
            "testctr",
            &[("enflame.com/drs-gcu", "0"), ("enflame.com/gcu-core", "30")],
            &[],
        ),
    )
    .unwrap();
    assert_eq!((r.mem_mib, r.mem_percent, r.cores), (0, None, 30));
    assert!(
        request(
            v.as_ref(),
            &container_with("testctr", &[("enflame.com/drs-gcu", "0")], &[])
        )
        .is_none()
    );
    assert!(request(v.as_ref(), &container_with("testctr", &[("cpu", "1")], &[])).is_none());
    // Malformed values are refused naming the container.
    for bad in [
        ("enflame.com/gcu-memory", "-1"),
        ("enflame.com/gcu-memory", "20Gi"),
    ] {
        let err = v
            .container_request(&container_with("testctr", &[bad], &[]), &Annotations::new())
            .unwrap_err();
        assert!(err.to_string().contains("testctr"), "{err}");
    }
}

#[test]
fn drs_memory_is_gib_or_mib_above_twice_the_largest_profile() {
    let ledger = drs_node(&[Drs::new("d0", 0)], "");
    for (mem, core, want) in [
        ("6", "", "1g.6gb"),
        ("7", "", "3g.20gb"),
        // 80 GiB is twice the largest profile: still GiB, and nothing holds it.
        ("80", "", ""),
        // Above that, MiB: 7000 MiB → 7 GiB.
        ("7000", "", "3g.20gb"),
        ("", "16", "1g.6gb"),
        ("", "17", "3g.20gb"),
        ("", "51", "6g.40gb"),
        ("6", "50", "3g.20gb"),
    ] {
        let mut limits = Vec::new();
        if !mem.is_empty() {
            limits.push(("enflame.com/gcu-memory", mem));
        }
        if !core.is_empty() {
            limits.push(("enflame.com/gcu-core", core));
        }
        let p = pod_asking(&limits);
        match fit(&ledger, &p) {
            Ok(f) => {
                let a = allocation_annotations(&registry(), &plan(&p), "n", &f, 1);
                let assigned: Value = serde_json::from_str(&a["assigned-containers"]).unwrap();
                assert_eq!(assigned["main"]["profileName"], want, "{mem} {core}");
            }
            Err(e) => {
                assert_eq!(want, "", "{mem} {core}");
                assert_eq!(e.render(), "1/1 ModeNotFit");
            }
        }
    }
}

#[test]
fn drs_fit_reasons() {
    // Too little memory left for the profile.
    let mut small = Drs::new("d0", 0);
    small.totalmem = 10240;
    assert_eq!(
        reason(fit(&drs_node(&[small], ""), &slices(3))),
        "1/1 CardInsufficientMemory"
    );
    // Compute taken by another pod.
    let mut ledger = drs_node(&[Drs::new("d0", 0)], "");
    ledger.apply_pod(PodRecord {
        uid: "busy".into(),
        namespace: "default".into(),
        name: "busy".into(),
        node: "n".into(),
        charges: vec![DeviceCharge {
            uuid: "d0".into(),
            vendor: ENFLAME.into(),
            slots: 1,
            mem: 0,
            cores: 60,
        }],
    });
    assert_eq!(reason(fit(&ledger, &slices(3))), "1/1 CardInsufficientCore");
    // Every slice taken.
    let mut full = Drs::new("d0", 0);
    full.used = 6;
    assert_eq!(
        reason(fit(&drs_node(&[full], ""), &slices(1))),
        "1/1 CardTimeSlicingExhausted"
    );
    // UUID selection.
    let devs = [Drs::new("d0", 0), Drs::new("d1", 1)];
    let p = with_annotations(slices(1), &[("enflame.com/use-gpuuuid", "d0")]);
    let f = fit(&drs_node(&devs, ""), &p).unwrap();
    assert_eq!(given(&f, ENFLAME).uuid, "d0");
    let p = with_annotations(slices(1), &[("enflame.com/nouse-gpuuuid", "d0,d1")]);
    assert_eq!(
        reason(fit(&drs_node(&devs, ""), &p)),
        "2/2 CardUuidMismatch"
    );
}

#[test]
fn drs_annotations_byte_for_byte() {
    // An init container and two app containers on a two-GCU node (policy spread: the
    // last container goes to the emptier GCU).
    let (inv, issues) = decode_node(&[("enflame.com/gcu-drs-capacity", CAPACITY)]);
    assert!(issues.is_empty(), "{issues:?}");
    let mut ledger = Ledger::new();
    ledger.set_node("n", inv);
    let mut p = pod(
        "p",
        vec![
            container("app", &[("enflame.com/drs-gcu", "3")]),
            container("plain", &[("cpu", "1")]),
            container(
                "side",
                &[
                    ("enflame.com/gcu-memory", "6"),
                    ("enflame.com/gcu-core", "10"),
                ],
            ),
        ],
    );
    p.spec.as_mut().unwrap().init_containers =
        Some(vec![container("init", &[("enflame.com/drs-gcu", "6")])]);
    let f = fit(&ledger, &p).unwrap();
    let a = allocation_annotations(&registry(), &plan(&p), "n", &f, 1_700_000_000);
    let ours: BTreeMap<&str, &str> = a
        .iter()
        .filter(|(k, _)| {
            k.starts_with("enflame.com/")
                || k.as_str() == "assigned-containers"
                || k.contains("enflame")
        })
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        ours,
        BTreeMap::from([
            (
                "assigned-containers",
                r#"{"app":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"},"init":{"allocated":false,"request":6,"profileID":"2","profileName":"6g.40gb"},"side":{"allocated":false,"request":1,"profileID":"0","profileName":"1g.6gb"}}"#
            ),
            ("enflame.com/gcu-assigned", "false"),
            ("enflame.com/gcu-assigned-id", "1"),
            ("enflame.com/gcu-assigned-index", "1"),
            ("enflame.com/gcu-assigned-minor", "4"),
            ("enflame.com/gcu-assigned-time", "1700000000000000000"),
            ("enflame.com/gcu-request-size", "6"),
            (
                "hami.io/enflame-vgpu-devices-allocated",
                "n-enflame-drs-1,Enflame,40960,100,6:;n-enflame-drs-1,Enflame,20480,50,3:;;n-enflame-drs-0,Enflame,6144,16:;"
            ),
        ])
    );
    assert!(!a.contains_key("hami.io/enflame-vgpu-devices-to-allocate"));
}

#[test]
fn drs_admission_follows_hamis_rules_and_texts() {
    let v = vendor(ENFLAME);
    let admit = |limits: &[(&str, &str)], requests: &[(&str, &str)]| {
        let mut c = container_with("testctr", limits, requests);
        v.mutate_admission(&mut c, &Annotations::new())
            .map(|a| (a.uses, c))
    };
    // The count in requests only is copied into limits.
    let (uses, c) = admit(&[], &[("enflame.com/drs-gcu", "3")]).unwrap();
    assert!(uses);
    let r = c.resources.unwrap();
    assert_eq!(r.limits.unwrap()["enflame.com/drs-gcu"].0, "3");
    // Memory and compute alike.
    let (uses, c) = admit(
        &[("enflame.com/gcu-memory", "20")],
        &[("enflame.com/gcu-core", "40")],
    )
    .unwrap();
    assert!(uses);
    let r = c.resources.unwrap();
    assert_eq!(r.requests.unwrap()["enflame.com/gcu-memory"].0, "20");
    assert_eq!(r.limits.unwrap()["enflame.com/gcu-core"].0, "40");
    // HAMi's refusals.
    assert_eq!(
        admit(&[("enflame.com/drs-gcu", "0")], &[]).unwrap_err(),
        "enflame.com/drs-gcu must be greater than 0"
    );
    assert_eq!(
        admit(&[("enflame.com/gcu-memory", "0")], &[]).unwrap_err(),
        "enflame.com/gcu-memory must be greater than 0"
    );
    for core in ["0", "101"] {
        assert_eq!(
            admit(&[("enflame.com/gcu-core", core)], &[]).unwrap_err(),
            "enflame.com/gcu-core must be in range (0,100]"
        );
    }
    // Nothing of Enflame's: not used.
    assert!(!admit(&[("cpu", "1")], &[]).unwrap().0);
}
