//! The cluster's devices as people read them: per GPU its capacity, what is allocated
//! and to which pods; per node and per cluster the sums, and how fragmented the free
//! capacity is. `hamictl top gpus` and hami-scheduler's dashboard both build their
//! answers here, from a [`Ledger`]'s nodes, so they show the same numbers
//! (`docs/dashboard.md`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::frag::live::{FragModel, free_share};
use crate::ledger::{NodeState, PodRecord};

/// How much of one quantity is allocated, of how much.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Amount {
    pub used: u64,
    pub total: u64,
}

impl Amount {
    pub fn new(used: u64, total: u64) -> Self {
        Amount { used, total }
    }

    /// What is left (never below zero: an over-committed device has none).
    pub fn free(&self) -> u64 {
        self.total.saturating_sub(self.used)
    }

    fn add(&mut self, other: Amount) {
        self.used = self.used.saturating_add(other.used);
        self.total = self.total.saturating_add(other.total);
    }
}

/// What one pod holds of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodShare {
    pub namespace: String,
    pub name: String,
    pub memory_mib: u64,
    /// Percent of the GPU's compute.
    pub cores: u64,
    /// Containers of the pod on the GPU.
    pub slots: u32,
}

/// One GPU: what it is, what is allocated on it, and to whom.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuView {
    pub node: String,
    /// Vendor key (`NVIDIA`).
    pub vendor: String,
    pub index: u32,
    pub uuid: String,
    /// The model as registered (`NVIDIA-NVIDIA A100 80GB PCIe`).
    pub model: String,
    pub numa: i32,
    /// `hami-core`, `mig` or `mps` (empty: `hami-core`).
    pub mode: String,
    pub healthy: bool,
    /// Listed in the node's `hami.io/device-cordon`.
    pub cordoned: bool,
    pub memory_mib: Amount,
    /// Percent of one card (100 = the whole card).
    pub cores: Amount,
    /// Containers sharing it, of how many may.
    pub slots: Amount,
    /// By namespace and name; empty when not asked for.
    pub pods: Vec<PodShare>,
}

/// FGD's fragmentation (`docs/simulator.md`) of free GPU capacity, against the typical
/// workload the `frag` policies use: the free share no typical task could use.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Fragmentation {
    /// Free GPU capacity, in GPUs (each GPU counts its free share, 0..1).
    pub free_gpus: f64,
    /// The part of it that is fragmented, in GPUs.
    pub fragmented_gpus: f64,
}

impl Fragmentation {
    /// Fragmented share of the free capacity (0..1); 0 when nothing is free.
    pub fn ratio(&self) -> f64 {
        if self.free_gpus > 0.0 {
            (self.fragmented_gpus / self.free_gpus).clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    fn add(&mut self, other: Fragmentation) {
        self.free_gpus += other.free_gpus;
        self.fragmented_gpus += other.fragmented_gpus;
    }
}

/// One node's sums over its GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSummary {
    pub name: String,
    pub gpus: usize,
    /// Distinct GPU models, sorted.
    pub models: Vec<String>,
    pub memory_mib: Amount,
    pub cores: Amount,
    pub slots: Amount,
    /// Pods holding devices on the node.
    pub pods: usize,
    pub fragmentation: Fragmentation,
}

/// The GPUs of one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSummary {
    pub vendor: String,
    pub model: String,
    pub gpus: usize,
    pub memory_mib: Amount,
    pub cores: Amount,
    pub slots: Amount,
}

/// The whole cluster's sums.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ClusterSummary {
    /// Nodes with registered devices.
    pub nodes: usize,
    pub gpus: usize,
    pub memory_mib: Amount,
    pub cores: Amount,
    pub slots: Amount,
    /// By vendor, then model.
    pub by_model: Vec<ModelSummary>,
    pub fragmentation: Fragmentation,
}

/// Every GPU of `node` with its usage; `pods` (the records on the node, as
/// [`crate::ledger::Ledger::pods_on`] gives them) are listed on the GPUs they hold.
pub fn node_gpus(node: &NodeState, pods: &[&PodRecord]) -> Vec<GpuView> {
    let cordon = &node.inventory().cordon;
    let mut gpus: Vec<GpuView> = node
        .groups()
        .flat_map(|(vd, usage)| {
            vd.devices.iter().zip(usage).map(|(d, u)| GpuView {
                node: node.name().to_string(),
                vendor: vd.vendor.clone(),
                index: d.index,
                uuid: d.id.to_string(),
                model: d.dev_type.to_string(),
                numa: d.numa,
                mode: d.mode.to_string(),
                healthy: d.health,
                cordoned: cordon.contains(&*d.id),
                memory_mib: Amount::new(u.mem_used, u64::from(d.mem_mib)),
                cores: Amount::new(u.cores_used, u64::from(d.cores)),
                slots: Amount::new(u64::from(u.used), u64::from(d.count)),
                pods: Vec::new(),
            })
        })
        .collect();
    for pod in pods {
        for charge in &pod.charges {
            if let Some(gpu) = gpus.iter_mut().find(|g| *g.uuid == *charge.uuid) {
                gpu.pods.push(PodShare {
                    namespace: pod.namespace.to_string(),
                    name: pod.name.to_string(),
                    memory_mib: charge.mem,
                    cores: charge.cores,
                    slots: charge.slots,
                });
            }
        }
    }
    gpus
}

/// The fragmentation of one node's free GPU capacity. Unhealthy and cordoned GPUs have
/// none: no task can be placed on them.
pub fn node_fragmentation(node: &NodeState) -> Fragmentation {
    let cordon = &node.inventory().cordon;
    let shares: Vec<i32> = node
        .groups()
        .flat_map(|(vd, usage)| {
            vd.devices.iter().zip(usage).map(|(d, u)| {
                if d.health && !cordon.contains(&*d.id) {
                    free_share(d, u)
                } else {
                    0
                }
            })
        })
        .collect();
    let free: i64 = shares.iter().map(|s| i64::from(*s)).sum();
    Fragmentation {
        free_gpus: free as f64 / 1000.0,
        fragmented_gpus: FragModel::builtin().frag_of(&shares) / 1000.0,
    }
}

impl NodeSummary {
    /// `node`'s sums; `pods`: how many pods hold devices on it.
    pub fn of(node: &NodeState, pods: usize) -> Self {
        let mut summary = NodeSummary {
            name: node.name().to_string(),
            gpus: 0,
            models: Vec::new(),
            memory_mib: Amount::default(),
            cores: Amount::default(),
            slots: Amount::default(),
            pods,
            fragmentation: node_fragmentation(node),
        };
        for gpu in node_gpus(node, &[]) {
            summary.gpus += 1;
            summary.memory_mib.add(gpu.memory_mib);
            summary.cores.add(gpu.cores);
            summary.slots.add(gpu.slots);
            if !summary.models.contains(&gpu.model) {
                summary.models.push(gpu.model);
            }
        }
        summary.models.sort();
        summary
    }
}

impl ClusterSummary {
    /// The sums over `nodes`.
    pub fn of<'a>(nodes: impl IntoIterator<Item = &'a NodeState>) -> Self {
        let mut summary = ClusterSummary::default();
        let mut by_model: BTreeMap<(String, String), ModelSummary> = BTreeMap::new();
        for node in nodes {
            summary.nodes += 1;
            summary.fragmentation.add(node_fragmentation(node));
            for gpu in node_gpus(node, &[]) {
                summary.gpus += 1;
                summary.memory_mib.add(gpu.memory_mib);
                summary.cores.add(gpu.cores);
                summary.slots.add(gpu.slots);
                let m = by_model
                    .entry((gpu.vendor.clone(), gpu.model.clone()))
                    .or_insert_with(|| ModelSummary {
                        vendor: gpu.vendor.clone(),
                        model: gpu.model.clone(),
                        gpus: 0,
                        memory_mib: Amount::default(),
                        cores: Amount::default(),
                        slots: Amount::default(),
                    });
                m.gpus += 1;
                m.memory_mib.add(gpu.memory_mib);
                m.cores.add(gpu.cores);
                m.slots.add(gpu.slots);
            }
        }
        summary.by_model = by_model.into_values().collect();
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::DeviceCharge;
    use crate::ledger::{Ledger, NodeInventory, VendorDevices};
    use crate::model::DeviceInfo;

    fn gpu(id: &str, index: u32, mem: u32, model: &str) -> DeviceInfo {
        DeviceInfo {
            id: id.into(),
            index,
            count: 4,
            mem_mib: mem,
            cores: 100,
            dev_type: model.into(),
            numa: 0,
            mode: "hami-core".into(),
            health: true,
            mig_profiles: vec![],
            custom_info: Default::default(),
        }
    }

    fn record(uid: &str, node: &str, charges: &[(&str, u64, u64)]) -> PodRecord {
        PodRecord {
            uid: uid.into(),
            namespace: "ml".into(),
            name: format!("pod-{uid}").into(),
            node: node.into(),
            charges: charges
                .iter()
                .map(|(uuid, mem, cores)| DeviceCharge {
                    uuid: (*uuid).into(),
                    vendor: "NVIDIA".into(),
                    slots: 1,
                    mem: *mem,
                    cores: *cores,
                })
                .collect(),
        }
    }

    fn ledger() -> Ledger {
        let mut l = Ledger::new();
        let inventory = |devices| NodeInventory {
            vendors: vec![VendorDevices {
                vendor: "NVIDIA".into(),
                devices,
            }],
            cordon: ["B1".to_string()].into(),
            ..NodeInventory::default()
        };
        l.set_node(
            "a",
            inventory(vec![
                gpu("A0", 0, 80_000, "A100"),
                gpu("A1", 1, 80_000, "A100"),
            ]),
        );
        l.set_node(
            "b",
            inventory(vec![gpu("B0", 0, 16_000, "T4"), gpu("B1", 1, 16_000, "T4")]),
        );
        l.apply_pod(record("1", "a", &[("A0", 20_000, 50)]));
        l.apply_pod(record("2", "a", &[("A0", 40_000, 50), ("A1", 1_000, 0)]));
        l.apply_pod(record("3", "b", &[("B0", 16_000, 100)]));
        l
    }

    #[test]
    fn gpus_show_usage_and_their_pods() {
        let l = ledger();
        let node = l.node("a").unwrap();
        let gpus = node_gpus(node, &l.pods_on("a"));
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].uuid, "A0");
        assert_eq!(gpus[0].memory_mib, Amount::new(60_000, 80_000));
        assert_eq!(gpus[0].cores, Amount::new(100, 100));
        assert_eq!(gpus[0].slots, Amount::new(2, 4));
        let names: Vec<&str> = gpus[0].pods.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["pod-1", "pod-2"]);
        assert_eq!(gpus[1].pods[0].memory_mib, 1_000);
        assert!(!gpus[1].cordoned);
        let b = node_gpus(l.node("b").unwrap(), &[]);
        assert!(b[1].cordoned && b[0].pods.is_empty());
    }

    #[test]
    fn summaries_add_up_per_node_model_and_cluster() {
        let l = ledger();
        let a = NodeSummary::of(l.node("a").unwrap(), l.pods_on("a").len());
        assert_eq!(a.gpus, 2);
        assert_eq!(a.pods, 2);
        assert_eq!(a.models, ["A100"]);
        assert_eq!(a.memory_mib, Amount::new(61_000, 160_000));
        let c = ClusterSummary::of(l.nodes());
        assert_eq!((c.nodes, c.gpus), (2, 4));
        assert_eq!(c.memory_mib, Amount::new(77_000, 192_000));
        assert_eq!(c.cores, Amount::new(200, 400));
        assert_eq!(c.slots, Amount::new(4, 16));
        let models: Vec<(&str, usize, u64)> = c
            .by_model
            .iter()
            .map(|m| (m.model.as_str(), m.gpus, m.memory_mib.used))
            .collect();
        assert_eq!(models, [("A100", 2, 61_000), ("T4", 2, 16_000)]);
    }

    #[test]
    fn fragmentation_counts_free_capacity_typical_tasks_cannot_use() {
        let l = ledger();
        // A0 has no compute left, A1 is nearly idle, B0 is full, B1 cordoned.
        let a = node_fragmentation(l.node("a").unwrap());
        assert!((a.free_gpus - 0.987).abs() < 1e-9, "{a:?}");
        let c = ClusterSummary::of(l.nodes()).fragmentation;
        assert!((c.free_gpus - 0.987).abs() < 1e-9, "{c:?}");
        assert!(c.fragmented_gpus >= 0.0 && c.fragmented_gpus <= c.free_gpus);
        assert!((0.0..=1.0).contains(&c.ratio()));
        // Whole free cards serve every typical task: nothing is fragmented.
        let mut idle = Ledger::new();
        idle.set_node(
            "x",
            NodeInventory {
                vendors: vec![VendorDevices {
                    vendor: "NVIDIA".into(),
                    devices: (0..8)
                        .map(|i| gpu(&format!("X{i}"), i, 80_000, "A100"))
                        .collect(),
                }],
                ..NodeInventory::default()
            },
        );
        let f = node_fragmentation(idle.node("x").unwrap());
        assert_eq!(f.free_gpus, 8.0);
        assert_eq!(f.fragmented_gpus, 0.0);
        // A sliver left on a card is fragmented: no typical task is that small.
        let mut sliver = idle.clone();
        sliver.apply_pod(record("s", "x", &[("X0", 79_000, 0)]));
        let f = node_fragmentation(sliver.node("x").unwrap());
        assert!(f.fragmented_gpus > 0.0, "{f:?}");
    }
}
