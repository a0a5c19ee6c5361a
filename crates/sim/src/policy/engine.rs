//! Policies that drive hami-core's real placement engine (`hami_core::engine::place`)
//! instead of the simulator's own scoring: `engine-binpack`, `engine-spread` and
//! `engine-frag`.
//!
//! The policy keeps a [`Ledger`] that mirrors the simulated cluster: one
//! `NodeInventory` per trace node with `--slots` slots per GPU, devmem 1000 and
//! devcore 100, so a share of d milli is `gpucores = d/10` and
//! `gpumem-percentage = d/10` (whole GPUs: 100/100, exclusive), devices of type
//! `NVIDIA-<model>`; each node's allocatable CPU and memory, and the requests of the
//! tasks placed on it, as the extender keeps them from its watches. The simulator's
//! feasibility filter (kube-scheduler's part) has already removed nodes of the wrong
//! model or without CPU/memory. Nodes are named by their per-seed rank, so the engine's
//! tie-break (smallest name) is the paper's (lowest rank).
//!
//! CPU-only tasks are not the extender's business (HAMi passes them through: in a
//! cluster kube-scheduler places them). `engine-binpack`/`engine-spread` give them to the
//! sim-native HAMi node score; `engine-frag` scores them with the engine's `frag` node
//! score (a pod without devices fits every node), as if kube-scheduler ranked nodes by it,
//! which is what `hami-frag` does.

use std::collections::BTreeMap;
use std::sync::Arc;

use hami_core::config::DeviceConfig;
use hami_core::engine::{PodPlan, SchedulerDefaults, place_best_serial};
use hami_core::frag::live::FragModel;
use hami_core::frag::pairing::{Blend, HoleSupply, Matching, Pairing};
use hami_core::ledger::{Ledger, NodeInventory, PodRecord, VendorDevices};
use hami_core::model::DeviceInfo;
use hami_core::policy::{GpuPolicy, NodePolicy};
use hami_core::resources::Resources;
use hami_core::vendor::VendorRegistry;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rustc_hash::FxHashMap;

use super::{Hami, HamiMode, Placement, Policy, PolicyInit};
use crate::Task;
use crate::cluster::Cluster;
use crate::frag::{FragScoreConfig, FragScoring};

/// Which engine policies to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineMode {
    Binpack,
    Spread,
    Frag,
}

/// Device memory of every simulated GPU (MiB); shares map to it 1:1.
const DEVMEM: u32 = 1000;

/// Pod shapes whose `frag` scores each node remembers: the trace's task types (a few
/// hundred) all stay cached between changes of a node.
const SCORE_CACHE_CAPACITY: usize = 4096;

/// The device type of model id `model`.
fn device_type(model: u8) -> String {
    format!("NVIDIA-M{model}")
}

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
    /// The pairing term's weight and horizon (`FragScoreConfig::pair`), and the sharing
    /// tasks seen so far: what the extender learns from the pods it sees.
    pair: (f64, f64, Matching, Blend),
    supply: Arc<HoleSupply>,
}

impl EnginePolicy {
    pub fn new(init: &PolicyInit<'_>, mode: EngineMode) -> Self {
        Self::with_config(init, mode, FragScoreConfig::default())
    }

    /// [`EnginePolicy::new`] with the `frag` score tuned by `cfg` (`engine-frag:key=value`,
    /// as `hami-frag:key=value`; M is the variant's at the default coverage).
    pub fn with_config(init: &PolicyInit<'_>, mode: EngineMode, cfg: FragScoreConfig) -> Self {
        let (node_policy, gpu_policy, hami) = match mode {
            EngineMode::Binpack => (NodePolicy::Binpack, "binpack", HamiMode::Binpack),
            EngineMode::Spread => (NodePolicy::Spread, "spread", HamiMode::Spread),
            EngineMode::Frag => (NodePolicy::Frag, "frag", HamiMode::Binpack),
        };
        let frag = (mode == EngineMode::Frag).then(|| {
            let scoring = FragScoring::new(init.workload.clone(), cfg, init.gpus_per_model);
            let types = (0..init.gpus_per_model.len()).map(|m| (device_type(m as u8), m as u8));
            Arc::new(FragModel::with_scoring(scoring, types))
        });
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
            pair: (
                cfg.pair,
                cfg.pair_horizon,
                cfg.pair_matching,
                cfg.pair_blend,
            ),
            supply: Arc::default(),
        }
    }

    /// The pairing term for `task`, counting it as seen (as `hami-frag` does).
    fn pairing_for(&mut self, task: &Task) -> Option<Arc<Pairing>> {
        let (weight, horizon, matching, blend) = self.pair;
        if self.mode != EngineMode::Frag || weight == 0.0 || !task.is_sharing() {
            return None;
        }
        Arc::make_mut(&mut self.supply).observe(task.milli);
        Some(Arc::new(Pairing {
            weight,
            horizon,
            matching,
            blend,
            supply: self.supply.clone(),
        }))
    }

    pub fn mode(&self) -> EngineMode {
        self.mode
    }

    fn build_ledger(&mut self, cluster: &Cluster, ranks: &[u32], slots: u16) {
        let mut ledger = Ledger::new();
        ledger.set_score_cache_capacity(SCORE_CACHE_CAPACITY);
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
                    id: format!("{}-{g}", self.names[n]).into(),
                    index: g,
                    count: u32::from(slots),
                    mem_mib: DEVMEM,
                    cores: 100,
                    dev_type: device_type(node.model).into(),
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
            ledger.set_node_allocatable(
                &self.names[n],
                Some(Resources::new(node.cpu_free, node.mem_free << 20)),
            );
        }
        self.ledger = Some(ledger);
    }

    fn plan_for(&mut self, task: &Task) -> Option<PodPlan> {
        let slot = self.plans.get_mut(task.type_id as usize)?;
        if let Some(p) = slot {
            return p.clone();
        }
        let gpus = task.num > 0 && task.milli > 0;
        let plan = if !gpus && self.mode != EngineMode::Frag {
            None
        } else {
            let pct = if task.is_sharing() {
                (task.milli + 9) / 10
            } else {
                100
            };
            let pod = task_pod(task.num * u32::from(gpus), pct, task.cpu, task.mem);
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

/// A pod with one container requesting `cpu` milli-CPU and `mem` MiB and asking for
/// `num` GPUs (none when 0) of `pct` % cores and memory.
fn task_pod(num: u32, pct: i32, cpu: i64, mem: i64) -> Pod {
    let list = |items: Vec<(&str, String)>| -> BTreeMap<String, Quantity> {
        items
            .into_iter()
            .map(|(k, v)| (k.to_string(), Quantity(v)))
            .collect()
    };
    let limits = (num > 0).then(|| {
        list(vec![
            ("nvidia.com/gpu", num.to_string()),
            ("nvidia.com/gpucores", pct.to_string()),
            ("nvidia.com/gpumem-percentage", pct.to_string()),
        ])
    });
    let requests = list(vec![
        ("cpu", format!("{cpu}m")),
        ("memory", format!("{mem}Mi")),
    ]);
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
                    limits,
                    requests: Some(requests),
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
        let plan = plan.with_pairing(self.pairing_for(task));
        let names = &self.names;
        let candidates = feasible
            .iter()
            .filter_map(|&n| names.get(n as usize).map(String::as_str));
        let (name, fit) =
            place_best_serial(&plan, &self.registry, self.ledger.as_ref()?, candidates)?;
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
        ledger.add_node_requests(&name, Resources::new(task.cpu, task.mem << 20), true);
        Some(Placement { node, gpus })
    }
}
