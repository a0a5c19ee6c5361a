//! Policies that drive hami-core's real placement engine (`hami_core::engine::place`)
//! instead of the simulator's own scoring: `engine-binpack`, `engine-spread` and
//! `engine-frag`.
//!
//! The policy keeps a [`Ledger`] that mirrors the simulated cluster: one
//! `NodeInventory` per trace node with `--slots` slots per GPU, devmem 1000 and
//! devcore 100, so a share of d milli is `gpucores = d/10` and
//! `gpumem-percentage = d/10` (whole GPUs: 100/100, exclusive). GPU models and
//! CPU/memory are not in the engine's view: the simulator's feasibility filter
//! (kube-scheduler's part) has already removed nodes of the wrong model or without
//! CPU/memory. Nodes are named by their per-seed rank, so the engine's tie-break
//! (smallest name) is the paper's (lowest rank). CPU-only tasks are not the
//! engine's business (HAMi passes them through) and go to the sim-native HAMi
//! node score.

use std::collections::BTreeMap;
use std::sync::Arc;

use hami_core::config::DeviceConfig;
use hami_core::engine::{PodPlan, SchedulerDefaults, place_best};
use hami_core::frag::live::FragModel;
use hami_core::ledger::{Ledger, NodeInventory, PodRecord, VendorDevices};
use hami_core::model::DeviceInfo;
use hami_core::policy::{GpuPolicy, NodePolicy};
use hami_core::vendor::VendorRegistry;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rustc_hash::FxHashMap;

use super::{Hami, HamiMode, Placement, Policy, PolicyInit};
use crate::Task;
use crate::cluster::Cluster;
use crate::frag::{ModelSet, TaskClass, TypicalWorkload};

/// Which engine policies to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineMode {
    Binpack,
    Spread,
    Frag,
}

/// Device memory of every simulated GPU (MiB); shares map to it 1:1.
const DEVMEM: u32 = 1000;

#[derive(Debug)]
pub struct EnginePolicy {
    mode: EngineMode,
    registry: VendorRegistry,
    defaults: SchedulerDefaults,
    frag: Option<Arc<FragModel>>,
    /// Built on the first task (node names come from the per-seed ranks).
    ledger: Option<Ledger>,
    names: Vec<String>,
    index: FxHashMap<String, usize>,
    /// Per task type: the plan (None = CPU-only).
    plans: Vec<Option<Option<PodPlan>>>,
    /// Sim-native fallback for CPU-only tasks.
    cpu_only: Hami,
    next_uid: u64,
}

/// The GPU part of the typical workload, for the engine's CPU-unaware measure.
pub fn gpu_only_workload(w: &TypicalWorkload) -> TypicalWorkload {
    let classes = w
        .classes
        .iter()
        .filter(|c| c.num_gpu > 0 && c.gpu_milli > 0)
        .map(|c| TaskClass {
            cpu_milli: 0,
            mem_mib: 0,
            models: ModelSet::ANY,
            ..c.clone()
        })
        .collect::<Vec<_>>();
    let total: f64 = classes.iter().map(|c| c.weight).sum();
    TypicalWorkload {
        classes: classes
            .into_iter()
            .map(|c| TaskClass {
                weight: if total > 0.0 { c.weight / total } else { 0.0 },
                ..c
            })
            .collect(),
    }
}

impl EnginePolicy {
    pub fn new(init: &PolicyInit<'_>, mode: EngineMode) -> Self {
        let (node_policy, gpu_policy, hami) = match mode {
            EngineMode::Binpack => (NodePolicy::Binpack, "binpack", HamiMode::Binpack),
            EngineMode::Spread => (NodePolicy::Spread, "spread", HamiMode::Spread),
            EngineMode::Frag => (NodePolicy::Frag, "frag", HamiMode::Binpack),
        };
        let frag = (mode == EngineMode::Frag)
            .then(|| Arc::new(FragModel::new(gpu_only_workload(init.workload))));
        Self {
            mode,
            registry: VendorRegistry::from_config(&DeviceConfig::default()),
            defaults: SchedulerDefaults {
                node_policy,
                gpu_policy: GpuPolicy::parse_lenient(gpu_policy),
            },
            frag,
            ledger: None,
            names: Vec::new(),
            index: FxHashMap::default(),
            plans: vec![None; init.n_types],
            cpu_only: Hami::new(hami),
            next_uid: 0,
        }
    }

    pub fn mode(&self) -> EngineMode {
        self.mode
    }

    fn build_ledger(&mut self, cluster: &Cluster, ranks: &[u32], slots: u16) {
        let mut ledger = Ledger::new();
        self.names = (0..cluster.nodes.len())
            .map(|n| format!("{:06}", ranks.get(n).copied().unwrap_or(n as u32)))
            .collect();
        self.index = self
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        for (n, node) in cluster.nodes.iter().enumerate() {
            let devices = (0..u32::from(node.gpu_count))
                .map(|g| DeviceInfo {
                    id: format!("{}-{g}", self.names[n]),
                    index: g,
                    count: u32::from(slots),
                    mem_mib: DEVMEM,
                    cores: 100,
                    dev_type: format!("NVIDIA-M{}", node.model),
                    health: true,
                    mode: "hami-core".into(),
                    ..Default::default()
                })
                .collect();
            let inventory = NodeInventory {
                vendors: vec![VendorDevices {
                    vendor: "NVIDIA".into(),
                    devices,
                }],
                ..Default::default()
            };
            ledger.set_node(&self.names[n], inventory);
        }
        self.ledger = Some(ledger);
    }

    fn plan_for(&mut self, task: &Task) -> Option<PodPlan> {
        let slot = self.plans.get_mut(task.type_id as usize)?;
        if let Some(p) = slot {
            return p.clone();
        }
        let plan = if task.num == 0 || task.milli <= 0 {
            None
        } else {
            let pct = if task.is_sharing() {
                (task.milli + 9) / 10
            } else {
                100
            };
            let pod = task_pod(task.num, pct);
            PodPlan::new(&pod, &self.registry, &self.defaults)
                .ok()
                .map(|p| match &self.frag {
                    Some(m) => p.with_frag_model(m.clone()),
                    None => p,
                })
        };
        *slot = Some(plan.clone());
        plan
    }
}

/// A pod with one container asking for `num` GPUs of `pct` % cores and memory.
fn task_pod(num: u32, pct: i32) -> Pod {
    let limits: BTreeMap<String, Quantity> = [
        ("nvidia.com/gpu", num.to_string()),
        ("nvidia.com/gpucores", pct.to_string()),
        ("nvidia.com/gpumem-percentage", pct.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Quantity(v)))
    .collect();
    Pod {
        metadata: ObjectMeta {
            name: Some("task".into()),
            namespace: Some("sim".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                resources: Some(ResourceRequirements {
                    limits: Some(limits),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

impl Policy for EnginePolicy {
    fn place(
        &mut self,
        cluster: &Cluster,
        ranks: &[u32],
        task: &Task,
        feasible: &[u32],
    ) -> Option<Placement> {
        if self.ledger.is_none() {
            self.build_ledger(cluster, ranks, cluster.slots);
        }
        let Some(plan) = self.plan_for(task) else {
            return self.cpu_only.place(cluster, ranks, task, feasible);
        };
        let names = &self.names;
        let candidates = feasible
            .iter()
            .filter_map(|&n| names.get(n as usize).map(String::as_str));
        let (name, fit) = place_best(&plan, &self.registry, self.ledger.as_ref()?, candidates)?;
        let ledger = self.ledger.as_mut()?;
        let node = *self.index.get(&name)?;
        let mut gpus = 0u16;
        for dev in fit.devices.values().flatten().flatten() {
            gpus |= 1u16.checked_shl(dev.idx)?;
        }
        self.next_uid += 1;
        let uid = format!("t{}", self.next_uid);
        ledger.apply_pod(PodRecord::from_devices(
            &uid,
            "sim",
            &uid,
            &name,
            &fit.devices,
            &plan.kinds,
        ));
        Some(Placement { node, gpus })
    }
}
