//! HAMi's vendor test tables as hami-rs nodes: a row of HAMi's `DeviceUsage` becomes a
//! registered device plus what running pods hold of it, on node `n`.

use std::collections::BTreeMap;

use hami_core::accounting::DeviceCharge;
use hami_core::codec::parse_device_cordon;
use hami_core::engine::{NodeFit, PodPlan, SchedulerDefaults, fit_node};
use hami_core::fit::FitFailure;
use hami_core::ledger::{Ledger, NodeInventory, PodRecord, VendorDevices};
use hami_core::model::DeviceInfo;
use hami_core::vendor::VendorRegistry;
use k8s_openapi::api::core::v1::Pod;

use super::with_annotations;

/// One row of a HAMi `DeviceUsage` table.
#[derive(Debug, Clone)]
pub struct Row {
    pub id: &'static str,
    pub index: u32,
    pub used: u32,
    pub count: u32,
    pub usedmem: u64,
    pub totalmem: u32,
    pub totalcore: u32,
    pub usedcores: u64,
    pub numa: i32,
    pub dev_type: &'static str,
    pub health: bool,
    pub custom_info: BTreeMap<String, serde_json::Value>,
}

impl Row {
    /// An idle, healthy row on NUMA node 0.
    pub fn new(
        id: &'static str,
        index: u32,
        count: u32,
        totalmem: u32,
        totalcore: u32,
        dev_type: &'static str,
    ) -> Self {
        Row {
            id,
            index,
            used: 0,
            count,
            usedmem: 0,
            totalmem,
            totalcore,
            usedcores: 0,
            numa: 0,
            dev_type,
            health: true,
            custom_info: BTreeMap::new(),
        }
    }

    pub fn used(mut self, used: u32, usedmem: u64, usedcores: u64) -> Self {
        (self.used, self.usedmem, self.usedcores) = (used, usedmem, usedcores);
        self
    }

    pub fn info(&self) -> DeviceInfo {
        DeviceInfo {
            id: self.id.into(),
            index: self.index,
            count: self.count,
            mem_mib: self.totalmem,
            cores: self.totalcore,
            dev_type: self.dev_type.into(),
            numa: self.numa,
            health: self.health,
            custom_info: self.custom_info.clone(),
            ..DeviceInfo::default()
        }
    }
}

/// Node `n` with `rows` of vendor `vendor` registered (in this order), what they hold
/// booked by one running pod, and `cordon` (`hami.io/device-cordon`) applied.
pub fn table_node(vendor: &str, rows: &[Row], cordon: &str) -> Ledger {
    let mut ledger = Ledger::new();
    ledger.set_node(
        "n",
        NodeInventory {
            vendors: vec![VendorDevices {
                vendor: vendor.into(),
                devices: rows.iter().map(Row::info).collect(),
            }],
            cordon: parse_device_cordon(cordon),
            ..Default::default()
        },
    );
    let charges: Vec<DeviceCharge> = rows
        .iter()
        .filter(|r| r.used > 0 || r.usedmem > 0 || r.usedcores > 0)
        .map(|r| DeviceCharge {
            uuid: r.id.into(),
            vendor: vendor.into(),
            slots: r.used,
            mem: r.usedmem,
            cores: r.usedcores,
        })
        .collect();
    book_running(&mut ledger, charges);
    ledger
}

/// Books `charges` on node `n` as one running pod (nothing when there are none).
pub fn book_running(ledger: &mut Ledger, charges: Vec<DeviceCharge>) {
    if !charges.is_empty() {
        ledger.apply_pod(PodRecord {
            uid: "running".into(),
            namespace: "default".into(),
            name: "running".into(),
            node: "n".into(),
            charges,
        });
    }
}

/// HAMi's `AddResourceUsage`: one container given `mem` MiB and `cores` of device
/// `uuid` on node `n`, booked as a pod.
pub fn book_one(ledger: &mut Ledger, vendor: &str, uuid: &str, mem: u32, cores: u32) {
    let devices = std::collections::BTreeMap::from([(
        vendor.to_string(),
        vec![vec![hami_core::model::ContainerDevice {
            idx: 0,
            uuid: uuid.into(),
            dev_type: vendor.into(),
            mem_mib: mem,
            cores,
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
}

/// Slots, cores and MiB used of device `i` of node `n`.
pub fn usage_of(ledger: &Ledger, i: usize) -> (u32, u64, u64) {
    let u = &ledger.node("n").unwrap().device_usage()[i];
    (u.used, u.cores_used, u.mem_used)
}

/// HAMi's `Test_checkType`: the family's own type matches, `other` does not.
pub fn type_check(v: &dyn hami_core::vendor::Vendor, own: &str, other: &str) {
    let r = |t: &str| hami_core::model::ContainerDeviceRequest {
        count: 1,
        dev_type: t.into(),
        mem_mib: 0,
        mem_percent: None,
        cores: 0,
    };
    let (d, c) = (
        DeviceInfo::default(),
        hami_core::vendor::DeviceConstraints::default(),
    );
    assert!(v.type_matches(&d, &r(own), &c), "{own}");
    assert!(!v.type_matches(&d, &r(other), &c), "{other}");
}

/// The whole node fit of `pod` on node `n`.
pub fn table_fit(
    registry: &VendorRegistry,
    ledger: &Ledger,
    pod: &Pod,
) -> Result<NodeFit, FitFailure> {
    let plan = PodPlan::new(pod, registry, &SchedulerDefaults::default()).unwrap();
    fit_node(&plan, registry, ledger.node("n").unwrap())
}

/// The UUIDs every container of the pod got from `vendor`, in order.
pub fn table_uuids(fit: &NodeFit, vendor: &str) -> Vec<String> {
    fit.devices[vendor]
        .iter()
        .flatten()
        .map(|d| d.uuid.clone())
        .collect()
}

/// HAMi's reason text of a failed fit.
pub fn table_reason(out: Result<NodeFit, FitFailure>) -> String {
    out.expect_err("expected no fit").render()
}

/// `TestDevices_Fit` of HAMi's Cambricon and Mthreads tables (the same cases in both).
/// The table's MiB are multiplied by `scale` so that its 64 MiB are one unit of the
/// family's memory resource.
pub struct SharedTable<'a> {
    pub registry: &'a VendorRegistry,
    pub vendor: &'static str,
    pub scale: u32,
    /// A pod of one container asking `n` devices, MiB, cores (`None`: not given).
    pub ask: &'a dyn Fn(u32, u32, Option<u32>) -> Pod,
    pub use_uuid: &'static str,
    pub nouse_uuid: &'static str,
}

fn row(t: &SharedTable<'_>, id: &'static str, index: u32, totalmem: u32) -> Row {
    Row::new(id, index, 100, totalmem * t.scale, 100, t.vendor)
}

/// Runs the shared cases; a request for more cards than the node has gets the node
/// check's answer (`NodeInsufficientDevice`).
pub fn shared_fit_table(t: &SharedTable<'_>) {
    let fit = |rows: &[Row], p: &Pod| table_fit(t.registry, &table_node(t.vendor, rows, ""), p);
    // "fit success"
    let f = fit(
        &[row(t, "dev-0", 0, 128), row(t, "dev-1", 0, 128)],
        &(t.ask)(1, 64 * t.scale, Some(50)),
    )
    .unwrap();
    assert_eq!(table_uuids(&f, t.vendor), ["dev-1"]);
    // "fit fail: memory not enough"
    assert_eq!(
        table_reason(fit(
            &[row(t, "dev-0", 0, 128)],
            &(t.ask)(1, 512 * t.scale, Some(50))
        )),
        "1/1 CardInsufficientMemory"
    );
    // "fit fail: core not enough"
    assert_eq!(
        table_reason(fit(
            &[row(t, "dev-0", 0, 1024).used(0, 0, 100)],
            &(t.ask)(1, 512 * t.scale, Some(50))
        )),
        "1/1 CardInsufficientCore"
    );
    // "fit fail: type mismatch": see check_type.
    // "fit fail: user assign use uuid mismatch" / "no use uuid match" ask 2 cards of 1:
    // the node check answers; with one card asked the UUID lists refuse it.
    let one = [row(t, "dev-1", 0, 1280)];
    assert_eq!(
        table_reason(fit(&one, &(t.ask)(2, 512 * t.scale, Some(50)))),
        "NodeInsufficientDevice"
    );
    let p = with_annotations(
        (t.ask)(1, 512 * t.scale, Some(50)),
        &[(t.use_uuid, "dev-0")],
    );
    assert_eq!(table_reason(fit(&one, &p)), "1/1 CardUuidMismatch");
    let p = with_annotations(
        (t.ask)(1, 512 * t.scale, Some(50)),
        &[(t.nouse_uuid, "dev-0")],
    );
    assert_eq!(
        table_reason(fit(&[row(t, "dev-0", 0, 1280)], &p)),
        "1/1 CardUuidMismatch"
    );
    // "fit fail: card overused"
    assert_eq!(
        table_reason(fit(
            &[row(t, "dev-0", 0, 1280).used(100, 0, 0)],
            &(t.ask)(1, 512 * t.scale, Some(50))
        )),
        "1/1 CardTimeSlicingExhausted"
    );
    // "fit success: but core limit can't exceed 100"
    let f = fit(
        &[row(t, "dev-0", 0, 1280)],
        &(t.ask)(1, 512 * t.scale, Some(120)),
    )
    .unwrap();
    assert_eq!(table_uuids(&f, t.vendor), ["dev-0"]);
    // "fit fail:  card exclusively"
    assert_eq!(
        table_reason(fit(
            &[row(t, "dev-0", 0, 1280).used(20, 0, 0)],
            &(t.ask)(1, 512 * t.scale, Some(100))
        )),
        "1/1 ExclusiveDeviceAllocateConflict"
    );
    // "fit fail:  CardComputeUnitsExhausted"
    assert_eq!(
        table_reason(fit(
            &[row(t, "dev-0", 0, 1280).used(20, 0, 100)],
            &(t.ask)(1, 512 * t.scale, Some(0))
        )),
        "1/1 CardComputeUnitsExhausted"
    );
    // "fit fail:  AllocatedCardsInsufficientRequest" (2 of 1): the node check.
    assert_eq!(
        table_reason(fit(
            &[row(t, "dev-0", 0, 1280).used(20, 0, 10)],
            &(t.ask)(2, 512 * t.scale, Some(20))
        )),
        "NodeInsufficientDevice"
    );
}

/// `TestDevices_AddResourceUsage` of the same tables: a container of 1024 MiB and 50
/// cores on a device holding 2000 MiB and 15 cores takes one more slot and adds both.
pub fn shared_add_resource_usage(vendor: &'static str) {
    let row = Row::new("dev-0", 0, 100, 40960, 100, vendor).used(0, 2000, 15);
    let mut ledger = table_node(vendor, &[row], "");
    book_one(&mut ledger, vendor, "dev-0", 1024, 50);
    assert_eq!(usage_of(&ledger, 0), (1, 65, 3024), "{vendor}");
}

/// What HAMi's `GetNodeDevices` tables compare of a device: index, id, count, memory,
/// cores, type, NUMA node, health.
pub type Facts<'a> = (u32, &'a str, u32, u32, u32, &'a str, i32, bool);

pub fn facts(d: &DeviceInfo) -> Facts<'_> {
    (
        d.index,
        &d.id,
        d.count,
        d.mem_mib,
        d.cores,
        &d.dev_type,
        d.numa,
        d.health,
    )
}

/// One container `main` asking `n` devices of the count resource `names[0]`, `mem_mib`
/// MiB in units of `unit` MiB of `names[1]` (0: none given) and `cores` of `names[2]`
/// (`None`: none given).
pub fn ask_in_units(names: [&str; 3], unit: u32, n: u32, mem_mib: u32, cores: Option<u32>) -> Pod {
    let (n, units) = (n.to_string(), (mem_mib / unit).to_string());
    let cores = cores.map(|c| c.to_string());
    let mut limits = vec![(names[0], n.as_str())];
    if mem_mib > 0 {
        limits.push((names[1], &units));
    }
    if let Some(c) = &cores {
        limits.push((names[2], c));
    }
    super::pod("p", vec![super::container("main", &limits)])
}
