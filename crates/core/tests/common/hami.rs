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
