//! The typical workload M of a live cluster (`docs/extender.md#the-typical-workload`): a
//! decayed histogram of the request shapes of the pods the scheduler has seen, with the
//! openb default trace's M as the prior until enough pods are seen.
//!
//! A shape is what FGD keys M by (`docs/simulator.md#typical-workload`): CPU, GPUs per pod
//! and the share of each, and the GPU types the pod is restricted to; memory is carried as
//! the shape's mean. Every pod counts once, when it is first seen; older pods weigh less
//! (half the weight every `half_life` pods), and when the histogram is full the lightest
//! shape makes room, so memory stays bounded whatever the cluster runs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use rustc_hash::FxHashMap;
use serde::Serialize;

use super::score::{FragScoreConfig, FragScoring, MODEL_IDS};
use super::{ModelSet, TaskClass, TypicalWorkload};
use crate::codec::selectors::DeviceSelector;
use crate::engine::{PlanError, PodPlan, SchedulerDefaults};
use crate::frag::live::{FragModel, UNKNOWN_MODEL};
use crate::frag::pairing::HoleSupply;
use crate::request::ContainerKind;
use crate::resources::pod_requests;
use crate::vendor::VendorRegistry;

/// One class of the prior: openb's default trace M (`docs/simulator.md#typical-workload`):
/// CPU milli, mean memory MiB, per-GPU milli, GPUs, pods of the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorClass {
    pub cpu_milli: i64,
    pub mem_mib: i64,
    pub gpu_milli: i32,
    pub num_gpu: u32,
    pub count: u32,
}

const fn prior(
    cpu_milli: i64,
    gpu_milli: i32,
    num_gpu: u32,
    count: u32,
    mem_mib: i64,
) -> PriorClass {
    PriorClass {
        cpu_milli,
        mem_mib,
        gpu_milli,
        num_gpu,
        count,
    }
}

/// The typical workload of openb's default trace (35 classes, 95.26 % of its 8,152 pods),
/// in the trace's order: the prior of a cluster not yet seen.
pub const OPENB_DEFAULT_WORKLOAD: &[PriorClass] = &[
    prior(3152, 810, 1, 1047, 5600),
    prior(11300, 1000, 1, 874, 48916),
    prior(11400, 1000, 1, 599, 51350),
    prior(3152, 1000, 1, 470, 5600),
    prior(11908, 470, 1, 388, 47104),
    prior(12500, 0, 0, 366, 57388),
    prior(8000, 470, 1, 360, 30517),
    prior(12000, 1000, 1, 326, 21803),
    prior(32000, 0, 0, 290, 49233),
    prior(18708, 1000, 1, 255, 64512),
    prior(11908, 650, 1, 237, 47104),
    prior(4000, 320, 1, 232, 21736),
    prior(9810, 1000, 1, 195, 41560),
    prior(8000, 0, 0, 185, 29595),
    prior(8000, 1000, 1, 164, 22473),
    prior(4000, 1000, 1, 159, 25868),
    prior(15700, 1000, 1, 158, 58368),
    prior(11908, 1000, 1, 153, 47104),
    prior(16000, 1000, 1, 150, 40001),
    prior(4000, 230, 1, 122, 27390),
    prior(15400, 0, 0, 120, 51200),
    prior(6000, 460, 1, 120, 11093),
    prior(16500, 0, 0, 95, 51200),
    prior(14200, 1000, 1, 93, 58368),
    prior(24200, 1000, 1, 84, 93184),
    prior(3152, 590, 1, 75, 5600),
    prior(8000, 320, 1, 72, 30517),
    prior(4152, 550, 1, 72, 10600),
    prior(11900, 1000, 1, 55, 75291),
    prior(4000, 160, 1, 54, 15399),
    prior(4152, 370, 1, 45, 10600),
    prior(4000, 220, 1, 43, 20048),
    prior(8200, 1000, 1, 41, 33792),
    prior(15200, 1000, 1, 36, 80896),
    prior(4152, 810, 1, 31, 10600),
];

/// GPU types a pod is restricted to, as its annotations write them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct TypeFilter {
    pub use_types: Vec<String>,
    pub nouse_types: Vec<String>,
}

impl TypeFilter {
    /// Whether a device of `device_type` may run the pod (the fit's rule).
    pub fn allows(&self, device_type: &str) -> bool {
        DeviceSelector {
            use_types: self.use_types.clone(),
            nouse_types: self.nouse_types.clone(),
            ..DeviceSelector::default()
        }
        .type_allowed(device_type)
    }
}

/// What the typical workload keys a pod by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ShapeKey {
    pub cpu_milli: i64,
    /// Devices per pod (0: none).
    pub num_gpu: u32,
    /// Per device: compute in percent.
    pub cores: u32,
    /// Per device: memory in percent, when asked for so.
    pub mem_percent: Option<u32>,
    /// Per device: memory in MiB, when asked for so.
    pub mem_mib: u32,
    /// GPU types the pod is restricted to.
    pub types: Option<TypeFilter>,
}

/// A pod as the typical workload sees it: its key and its memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodShape {
    pub key: ShapeKey,
    pub mem_mib: i64,
}

impl PodShape {
    /// The shape of `pod`: its CPU and memory requests, the devices of its containers
    /// that stay (app containers and sidecars: their count summed, the largest share per
    /// device) and its GPU-type restriction.
    pub fn of(pod: &Pod, registry: &VendorRegistry) -> Result<Self, PlanError> {
        let resources = pod_requests(pod)?;
        let plan = PodPlan::new(pod, registry, &SchedulerDefaults::default())?;
        let (mut num_gpu, mut cores, mut mem_percent, mut mem_mib) = (0u32, 0u32, None, 0u32);
        for c in plan
            .requests
            .containers
            .iter()
            .filter(|c| c.kind != ContainerKind::Init)
        {
            for req in c.by_vendor.values() {
                num_gpu = num_gpu.saturating_add(req.count);
                cores = cores.max(req.cores_clamped());
                mem_mib = mem_mib.max(req.mem_mib);
                mem_percent = mem_percent.max(req.mem_percent);
            }
        }
        let types = plan
            .constraints
            .values()
            .map(|c| &c.selector)
            .find(|s| !s.types_unconstrained())
            .map(|s| TypeFilter {
                use_types: s.use_types.clone(),
                nouse_types: s.nouse_types.clone(),
            });
        Ok(PodShape {
            key: ShapeKey {
                cpu_milli: resources.cpu_milli,
                num_gpu,
                cores,
                mem_percent,
                mem_mib,
                types,
            },
            mem_mib: resources.memory_mib(),
        })
    }
}

/// One shape of the histogram.
#[derive(Debug, Clone)]
struct Bucket {
    key: ShapeKey,
    /// Decayed count, in units of the histogram's current scale.
    weight: f64,
    /// Σ weight · memory MiB.
    mem_weighted: f64,
}

/// The GPU types of a cluster: each registered device type with its GPU count and memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterGpus {
    /// Device type → (GPUs, MiB per GPU).
    pub types: BTreeMap<String, (i64, u32)>,
}

impl ClusterGpus {
    /// Memory of the most common GPU (the unit a request in MiB is a share of), if any.
    pub fn reference_mem_mib(&self) -> Option<u32> {
        self.types
            .values()
            .filter(|(gpus, mem)| *gpus > 0 && *mem > 0)
            .max_by_key(|(gpus, _)| *gpus)
            .map(|&(_, mem)| mem)
    }
}

/// Settings of [`ObservedWorkload`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ObservedSettings {
    /// Pods after which an observation weighs half.
    pub half_life: f64,
    /// Shapes kept at most.
    pub max_shapes: usize,
    /// Pods seen before the histogram replaces the prior.
    pub min_pods: u64,
    /// Coverage of M, as FGD's (`docs/simulator.md#typical-workload`).
    pub coverage_pct: u32,
}

impl Default for ObservedSettings {
    fn default() -> Self {
        ObservedSettings {
            half_life: 5000.0,
            max_shapes: 256,
            min_pods: 200,
            coverage_pct: 95,
        }
    }
}

/// A decayed, bounded histogram of pod shapes.
#[derive(Debug, Clone)]
pub struct ObservedWorkload {
    settings: ObservedSettings,
    buckets: Vec<Bucket>,
    index: FxHashMap<ShapeKey, usize>,
    /// Weight an observation adds now (grows by 2^(1/half_life) per pod instead of every
    /// weight decaying; all are divided back down before it overflows).
    increment: f64,
    seen: u64,
}

/// Above this the weights are rescaled.
const RESCALE_AT: f64 = 1e150;

impl ObservedWorkload {
    pub fn new(settings: ObservedSettings) -> Self {
        ObservedWorkload {
            settings,
            buckets: Vec::new(),
            index: FxHashMap::default(),
            increment: 1.0,
            seen: 0,
        }
    }

    pub fn settings(&self) -> &ObservedSettings {
        &self.settings
    }

    /// Pods observed so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Whether the histogram (rather than the prior) is M.
    pub fn is_observed(&self) -> bool {
        self.seen >= self.settings.min_pods
    }

    /// Counts one pod.
    pub fn observe(&mut self, shape: &PodShape) {
        self.seen += 1;
        let w = self.increment;
        match self.index.get(&shape.key) {
            Some(&i) => {
                let b = &mut self.buckets[i];
                b.weight += w;
                b.mem_weighted += w * shape.mem_mib as f64;
            }
            None => {
                if self.buckets.len() >= self.settings.max_shapes.max(1) {
                    self.evict_lightest();
                }
                self.index.insert(shape.key.clone(), self.buckets.len());
                self.buckets.push(Bucket {
                    key: shape.key.clone(),
                    weight: w,
                    mem_weighted: w * shape.mem_mib as f64,
                });
            }
        }
        self.increment *= (std::f64::consts::LN_2 / self.settings.half_life.max(1.0)).exp();
        if self.increment > RESCALE_AT {
            for b in &mut self.buckets {
                b.weight /= self.increment;
                b.mem_weighted /= self.increment;
            }
            self.increment = 1.0;
        }
    }

    fn evict_lightest(&mut self) {
        let Some(i) = (0..self.buckets.len())
            .min_by(|&a, &b| self.buckets[a].weight.total_cmp(&self.buckets[b].weight))
        else {
            return;
        };
        let gone = self.buckets.swap_remove(i);
        self.index.remove(&gone.key);
        if let Some(moved) = self.buckets.get(i) {
            self.index.insert(moved.key.clone(), i);
        }
    }

    /// The shapes by weight, heaviest first, with their share of the total weight and mean
    /// memory.
    pub fn shapes(&self) -> Vec<ObservedClass> {
        let total: f64 = self.buckets.iter().map(|b| b.weight).sum();
        let mut out: Vec<ObservedClass> = self
            .buckets
            .iter()
            .map(|b| ObservedClass {
                key: b.key.clone(),
                share: if total > 0.0 { b.weight / total } else { 0.0 },
                mem_mib: if b.weight > 0.0 {
                    (b.mem_weighted / b.weight).round() as i64
                } else {
                    0
                },
            })
            .collect();
        out.sort_by(|a, b| b.share.total_cmp(&a.share).then_with(|| b.key.cmp(&a.key)));
        out
    }

    /// M for a cluster with `gpus`: the heaviest shapes covering `coverage_pct` of the
    /// weight (the prior until enough pods are seen), with GPU shares in milli-GPU (memory
    /// in MiB as a share of the most common GPU) and type restrictions as model ids of
    /// `table`.
    pub fn typical(&self, gpus: &ClusterGpus, table: &ModelTable) -> TypicalWorkload {
        if !self.is_observed() {
            return prior_workload();
        }
        let shapes = self.shapes();
        let reference = gpus.reference_mem_mib();
        let mut cum = 0.0;
        let mut classes = Vec::new();
        for s in &shapes {
            if cum * 100.0 >= f64::from(self.settings.coverage_pct) {
                break;
            }
            cum += s.share;
            let milli = s.key.milli(reference);
            let num_gpu = if milli > 0 { s.key.num_gpu } else { 0 };
            classes.push(TaskClass {
                cpu_milli: s.key.cpu_milli,
                mem_mib: s.mem_mib,
                gpu_milli: milli,
                num_gpu,
                models: s
                    .key
                    .types
                    .as_ref()
                    .map_or(ModelSet::ANY, |f| table.allowed(f)),
                weight: s.share,
            });
        }
        for c in &mut classes {
            c.weight /= cum.max(f64::MIN_POSITIVE);
        }
        TypicalWorkload { classes }
    }

    /// The sharing pods seen (one device, less than a whole one), by share in milli-GPU,
    /// as decayed counts (a pod seen now would count 1): the demand of the `frag` pairing term
    /// (`docs/simulator.md#supply-aware-pairing`).
    pub fn hole_supply(&self, gpus: &ClusterGpus) -> HoleSupply {
        let reference = gpus.reference_mem_mib();
        let mut supply = HoleSupply::default();
        for b in self.buckets.iter().filter(|b| b.key.num_gpu == 1) {
            supply.observe_weighted(b.key.milli(reference), b.weight / self.increment);
        }
        supply
    }

    /// A fragmentation model of [`ObservedWorkload::typical`] for a cluster with `gpus`.
    pub fn model(&self, gpus: &ClusterGpus, cfg: FragScoreConfig) -> FragModel {
        let table = ModelTable::of(gpus);
        let workload = self.typical(gpus, &table);
        let scoring = FragScoring::new(workload, cfg, &table.gpus_per_model(gpus));
        FragModel::with_scoring(scoring, table.types())
    }
}

impl ShapeKey {
    /// Per-device share in milli-GPU: the larger of compute and memory, memory in MiB taken
    /// as a share of `reference` MiB (a GPU of unknown memory: compute alone).
    fn milli(&self, reference: Option<u32>) -> i32 {
        if self.num_gpu == 0 {
            return 0;
        }
        let cores = u64::from(self.cores.min(100)) * 10;
        let mem = match (self.mem_percent, reference) {
            (Some(p), _) => u64::from(p.min(100)) * 10,
            (None, Some(r)) if r > 0 => (u64::from(self.mem_mib) * 1000 / u64::from(r)).min(1000),
            _ => 0,
        };
        // A device asked for with neither still takes a slot: count it as the smallest share.
        cores.max(mem).max(1) as i32
    }
}

/// One shape of the histogram, for display.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObservedClass {
    pub key: ShapeKey,
    /// Share of the decayed weight.
    pub share: f64,
    /// Mean memory MiB.
    pub mem_mib: i64,
}

/// The prior: [`OPENB_DEFAULT_WORKLOAD`] as M.
pub fn prior_workload() -> TypicalWorkload {
    let total: f64 = OPENB_DEFAULT_WORKLOAD
        .iter()
        .map(|c| f64::from(c.count))
        .sum();
    TypicalWorkload {
        classes: OPENB_DEFAULT_WORKLOAD
            .iter()
            .map(|c| TaskClass {
                cpu_milli: c.cpu_milli,
                mem_mib: c.mem_mib,
                gpu_milli: c.gpu_milli,
                num_gpu: c.num_gpu,
                models: ModelSet::ANY,
                weight: f64::from(c.count) / total,
            })
            .collect(),
    }
}

/// Model ids of a cluster's device types, in name order (the first 63; later types share
/// [`UNKNOWN_MODEL`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelTable {
    names: Vec<String>,
}

impl ModelTable {
    pub fn of(gpus: &ClusterGpus) -> Self {
        ModelTable {
            names: gpus
                .types
                .keys()
                .take(usize::from(UNKNOWN_MODEL))
                .cloned()
                .collect(),
        }
    }

    /// Device type → model id.
    pub fn types(&self) -> Vec<(String, u8)> {
        self.names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i as u8))
            .collect()
    }

    /// The models a restriction allows.
    pub fn allowed(&self, filter: &TypeFilter) -> ModelSet {
        let bits = self
            .names
            .iter()
            .enumerate()
            .filter(|(_, n)| filter.allows(n))
            .fold(0u64, |acc, (i, _)| acc | (1u64 << i));
        // No known model allowed: the class runs nowhere we know, only on unknown types.
        ModelSet(if bits == 0 {
            1u64 << UNKNOWN_MODEL
        } else {
            bits
        })
    }

    /// GPUs per model id.
    pub fn gpus_per_model(&self, gpus: &ClusterGpus) -> Vec<i64> {
        let mut out = vec![0i64; MODEL_IDS];
        for (i, n) in self.names.iter().enumerate() {
            out[i] = gpus.types.get(n).map_or(0, |&(g, _)| g);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(cpu: i64, num: u32, cores: u32, types: Option<&str>) -> PodShape {
        PodShape {
            key: ShapeKey {
                cpu_milli: cpu,
                num_gpu: num,
                cores,
                mem_percent: Some(cores),
                mem_mib: 0,
                types: types.map(|t| TypeFilter {
                    use_types: vec![t.to_string()],
                    nouse_types: vec![],
                }),
            },
            mem_mib: 1024,
        }
    }

    /// The pairing term's demand: sharing pods only (one device, less than whole), each
    /// weighing as the histogram's decay says.
    #[test]
    fn the_hole_supply_counts_decayed_sharing_pods() {
        use crate::frag::pairing::FreeShares;
        let mut w = ObservedWorkload::new(settings());
        for _ in 0..3 {
            w.observe(&shape(1000, 1, 30, None));
        }
        w.observe(&shape(1000, 2, 30, None));
        w.observe(&shape(1000, 1, 100, None));
        let supply = w.hole_supply(&ClusterGpus::default());
        // Pod k of 5 weighs 2^(-(6-k)/100) against the next pod.
        let seen: f64 = (3..=5).map(|age| 2f64.powf(-f64::from(age) / 100.0)).sum();
        let waste = supply.waste(&FreeShares::of([300; 4]), 1.0);
        // A 300 hole filled removes 300·(1 − seen/4) of expected idle share.
        let expected = 0.3 * (1.0 - seen / 4.0);
        assert!(
            (waste.gain(300, 0) - expected).abs() < 1e-9,
            "{}",
            waste.gain(300, 0)
        );
        // Nothing of 200 or less was seen.
        assert!((waste.gain(200, 0) - 0.2).abs() < 1e-12);
    }

    fn settings() -> ObservedSettings {
        ObservedSettings {
            half_life: 100.0,
            max_shapes: 4,
            min_pods: 10,
            coverage_pct: 95,
        }
    }

    #[test]
    fn prior_until_enough_pods() {
        let mut w = ObservedWorkload::new(settings());
        let gpus = ClusterGpus::default();
        let table = ModelTable::default();
        assert_eq!(w.typical(&gpus, &table), prior_workload());
        let s: f64 = prior_workload().classes.iter().map(|c| c.weight).sum();
        assert!((s - 1.0).abs() < 1e-12);
        for _ in 0..10 {
            w.observe(&shape(4000, 1, 50, None));
        }
        let m = w.typical(&gpus, &table);
        assert_eq!(m.classes.len(), 1);
        assert_eq!(
            (
                m.classes[0].cpu_milli,
                m.classes[0].gpu_milli,
                m.classes[0].num_gpu
            ),
            (4000, 500, 1)
        );
        assert_eq!(m.classes[0].mem_mib, 1024);
    }

    #[test]
    fn old_pods_fade_and_the_histogram_stays_bounded() {
        let mut w = ObservedWorkload::new(settings());
        for _ in 0..100 {
            w.observe(&shape(1000, 1, 100, None));
        }
        for _ in 0..100 {
            w.observe(&shape(2000, 1, 30, None));
        }
        // One half-life later, the older shape weighs half as much as the newer one
        // (within the discreteness of 100 observations each).
        let shapes = w.shapes();
        assert_eq!(shapes[0].key.cpu_milli, 2000);
        let ratio = shapes[1].share / shapes[0].share;
        assert!((0.45..0.55).contains(&ratio), "{ratio}");
        // Many distinct shapes: at most `max_shapes` kept, the newest among them.
        for cpu in 0..50 {
            w.observe(&shape(10_000 + cpu, 1, 10, None));
        }
        assert_eq!(w.shapes().len(), 4);
        assert!(w.shapes().iter().any(|s| s.key.cpu_milli == 10_049));
        // Weights survive rescaling.
        let mut long = ObservedWorkload::new(ObservedSettings {
            half_life: 1.0,
            ..settings()
        });
        for _ in 0..2000 {
            long.observe(&shape(1000, 1, 100, None));
        }
        assert!(long.shapes()[0].share.is_finite());
    }

    #[test]
    fn restrictions_become_model_sets() {
        let gpus = ClusterGpus {
            types: [
                ("NVIDIA-A100-SXM4-80GB".to_string(), (80, 81920)),
                ("NVIDIA-Tesla T4".to_string(), (20, 15360)),
            ]
            .into(),
        };
        let table = ModelTable::of(&gpus);
        let t4 = TypeFilter {
            use_types: vec!["t4".into()],
            nouse_types: vec![],
        };
        assert_eq!(table.allowed(&t4), ModelSet(1 << 1));
        let h100 = TypeFilter {
            use_types: vec!["H100".into()],
            nouse_types: vec![],
        };
        assert_eq!(table.allowed(&h100), ModelSet(1 << UNKNOWN_MODEL));
        assert_eq!(gpus.reference_mem_mib(), Some(81920));
        let mut w = ObservedWorkload::new(settings());
        for _ in 0..10 {
            w.observe(&shape(1000, 1, 20, Some("T4")));
        }
        let model = w.model(&gpus, FragScoreConfig::default());
        assert_eq!(model.model_of("NVIDIA-Tesla T4"), 1);
        assert_eq!(model.model_of("NVIDIA-H100"), UNKNOWN_MODEL);
        assert_eq!(model.workload().classes[0].models, ModelSet(1 << 1));
    }

    #[test]
    fn memory_in_mib_is_a_share_of_the_common_gpu() {
        let key = ShapeKey {
            cpu_milli: 0,
            num_gpu: 1,
            cores: 10,
            mem_percent: None,
            mem_mib: 20480,
            types: None,
        };
        assert_eq!(key.milli(Some(81920)), 250);
        assert_eq!(key.milli(None), 100);
        assert_eq!(ShapeKey { num_gpu: 0, ..key }.milli(Some(81920)), 0);
    }
}
