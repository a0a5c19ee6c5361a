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

use common::{container, plan, pod, registry, with_annotations};
use hami_core::accounting::DeviceCharge;
use hami_core::codec::{decode_pod_single_device, encode_pod_single_device, parse_device_cordon};
use hami_core::engine::{NodeFit, allocation_annotations, fit_node};
use hami_core::fit::FitFailure;
use hami_core::ledger::{Ledger, NodeInventory, PodRecord, VendorDevices};
use hami_core::model::{ContainerDevice, ContainerDeviceRequest, DeviceInfo};
use hami_core::vendor::enflame_drs::{self, ENFLAME, decode_drs_capacity};
use hami_core::vendor::{Annotations, DeviceConstraints, HealthRule, NodeView, Vendor};
use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
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

    fn info(&self) -> DeviceInfo {
        let menu: Value = serde_json::from_str(self.menu).unwrap();
        DeviceInfo {
            id: self.id.into(),
            index: self.index,
            count: self.count,
            mem_mib: self.totalmem,
            cores: self.totalcore,
            dev_type: ENFLAME.into(),
            health: self.health,
            custom_info: BTreeMap::from([
                ("minor".to_string(), json!(self.index.to_string())),
                ("index".to_string(), json!(self.index.to_string())),
                ("profiles".to_string(), menu),
            ]),
            ..DeviceInfo::default()
        }
    }
}

/// A node `n` holding `infos` of `vendor`, `cordon` cordoned, and `used` slots already
/// taken per device.
fn node_of(vendor: &str, infos: Vec<DeviceInfo>, used: &[(&str, u32)], cordon: &str) -> Ledger {
    let mut ledger = Ledger::new();
    ledger.set_node(
        "n",
        NodeInventory {
            vendors: vec![VendorDevices {
                vendor: vendor.into(),
                devices: infos,
            }],
            cordon: parse_device_cordon(cordon),
            ..Default::default()
        },
    );
    let charges: Vec<DeviceCharge> = used
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(id, n)| DeviceCharge {
            uuid: (*id).into(),
            vendor: vendor.into(),
            slots: *n,
            mem: 0,
            cores: 0,
        })
        .collect();
    if !charges.is_empty() {
        ledger.apply_pod(PodRecord {
            uid: "running".into(),
            namespace: "default".into(),
            name: "running".into(),
            node: "n".into(),
            charges,
        });
    }
    ledger
}

fn drs_node(devs: &[Drs], cordon: &str) -> Ledger {
    let used: Vec<(&str, u32)> = devs.iter().map(|d| (d.id, d.used)).collect();
    node_of(ENFLAME, devs.iter().map(Drs::info).collect(), &used, cordon)
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
    fit_node(&plan(p), &registry(), ledger.node("n").unwrap())
}

fn reason(out: Result<NodeFit, FitFailure>) -> String {
    out.expect_err("expected no fit").render()
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

fn ctr(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> Container {
    let q = |pairs: &[(&str, &str)]| {
        (!pairs.is_empty()).then(|| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect::<BTreeMap<_, _>>()
        })
    };
    Container {
        name: "testctr".into(),
        resources: Some(ResourceRequirements {
            limits: q(limits),
            requests: q(requests),
            ..Default::default()
        }),
        ..Default::default()
    }
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
    assert_eq!(got[0].dev_type, "Enflame");
    assert_eq!(got[0].mem_mib, 40960);
    assert_eq!(got[0].count, 6);
    assert_eq!(got[0].custom_str("minor"), Some("0"));
    assert_eq!(got[0].id, "node-a-enflame-drs-0");
}

// ---- device_test.go: Test_checkType ----

#[test]
fn check_type() {
    let v = vendor(ENFLAME);
    let d = DeviceInfo::default();
    let c = DeviceConstraints::default();
    let r = |t: &str| ContainerDeviceRequest {
        count: 1,
        dev_type: t.into(),
        mem_mib: 0,
        mem_percent: None,
        cores: 0,
    };
    // "the same type"
    assert!(v.type_matches(&d, &r("Enflame"), &c));
    // "the different type"
    assert!(!v.type_matches(&d, &r("test123"), &c));
}

// ---- device_test.go: TestGenerateResourceRequests, _ByMemoryCore,
//      Test_GenerateResourceRequests_CoresValidation ----

#[test]
fn generate_resource_requests() {
    let v = vendor(ENFLAME);
    let r = request(v.as_ref(), &ctr(&[("enflame.com/drs-gcu", "3")], &[])).unwrap();
    assert_eq!((r.count, r.mem_mib, r.dev_type.as_str()), (1, 3, "Enflame"));
    // HAMi's enflameRequestModeDirect.
    assert_eq!(r.mem_percent, Some(0));

    let r = request(
        v.as_ref(),
        &ctr(
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
        let c = ctr(
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
        let c = ctr(
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
    let mut c = ctr(
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

fn gcu(id: &str, index: u32) -> DeviceInfo {
    DeviceInfo {
        id: id.into(),
        index,
        count: 1,
        mem_mib: 100,
        cores: 100,
        dev_type: "GCU".into(),
        health: true,
        ..DeviceInfo::default()
    }
}

fn gcu_pod(n: u32) -> Pod {
    pod_asking(&[("enflame.com/gcu", &n.to_string())])
}

#[test]
fn gcu_fit_device_cordon() {
    let devs = || vec![gcu("dev-0", 0), gcu("dev-1", 1)];
    let f = fit(&node_of("GCU", devs(), &[], "dev-1, "), &gcu_pod(1)).unwrap();
    assert_eq!(given(&f, "GCU").uuid, "dev-0");
    assert_eq!(
        reason(fit(
            &node_of("GCU", devs(), &[], "dev-0,dev-1"),
            &gcu_pod(1)
        )),
        "2/2 CardCordoned"
    );
    for cordon in ["", "   "] {
        let f = fit(&node_of("GCU", devs(), &[], cordon), &gcu_pod(1)).unwrap();
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
    let rows: Vec<(u32, &str, u32, u32, u32, &str)> = got
        .iter()
        .map(|d| {
            (
                d.index,
                d.id.as_str(),
                d.count,
                d.mem_mib,
                d.cores,
                d.dev_type.as_str(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (0, "testnode-GCU-0", 1, 100, 100, "GCU"),
            (1, "testnode-GCU-1", 1, 100, 100, "GCU")
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
    let mut c = ctr(&[("enflame.com/gcu", "2")], &[]);
    assert!(
        v.mutate_admission(&mut c, &Annotations::new())
            .unwrap()
            .uses
    );
    let mut c = ctr(&[], &[]);
    assert!(
        !v.mutate_admission(&mut c, &Annotations::new())
            .unwrap()
            .uses
    );
}

#[test]
fn gcu_devices_generate_resource_requests() {
    let v = vendor("GCU");
    let r = request(v.as_ref(), &ctr(&[("enflame.com/gcu", "3")], &[])).unwrap();
    assert_eq!(
        (r.count, r.mem_mib, r.cores, r.dev_type.as_str()),
        (3, 100, 100, "GCU")
    );
    let r = request(v.as_ref(), &ctr(&[], &[("enflame.com/gcu", "2")])).unwrap();
    assert_eq!((r.count, r.mem_mib, r.cores), (2, 100, 100));
    assert!(request(v.as_ref(), &ctr(&[], &[])).is_none());
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
    let f = fit(&node_of("GCU", devs(), &[], ""), &gcu_pod(1)).unwrap();
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
    assert!(!v.type_matches(&gcu("dev-0", 0), &other, &DeviceConstraints::default()));
    // "fit fail: device already used"
    let used = node_of("GCU", vec![gcu("dev-0", 0)], &[("dev-0", 1)], "");
    assert_eq!(
        reason(fit(&used, &gcu_pod(1))),
        "1/1 ExclusiveDeviceAllocateConflict"
    );
    // "fit fail: insufficient devices": HAMi's vendor Fit says
    // "1/1 AllocatedCardsInsufficientRequest"; the whole scheduler refuses the node
    // before, as hami-rs does.
    let one = node_of("GCU", vec![gcu("dev-0", 0)], &[], "");
    assert_eq!(reason(fit(&one, &gcu_pod(2))), "NodeInsufficientDevice");
}

#[test]
fn gcu_devices_add_resource_usage() {
    // "test add resource usage": one slot, the container's cores and memory.
    let mut ledger = node_of("GCU", vec![gcu("dev-0", 0)], &[], "");
    let devices = BTreeMap::from([(
        "GCU".to_string(),
        vec![vec![ContainerDevice {
            idx: 0,
            uuid: "dev-0".into(),
            dev_type: "GCU".into(),
            mem_mib: 100,
            cores: 50,
            slots: 0,
        }]],
    )]);
    ledger.apply_pod(PodRecord::from_devices(
        "u",
        "default",
        "p",
        "n",
        &devices,
        &[],
    ));
    let u = &ledger.node("n").unwrap().device_usage()[0];
    assert_eq!((u.used, u.cores_used, u.mem_used), (1, 50, 100));
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
