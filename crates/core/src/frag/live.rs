//! The fragmentation-aware score applied to HAMi's device model, for the live
//! placement engine (node policy `frag`, GPU policy `frag`).
//!
//! Mapping (documented in `docs/simulator.md`):
//! - a device's free share, in milli-GPU, is `min(free cores %, free memory %) × 10`,
//!   and 0 when its slots (`count`) are all taken;
//! - what a container takes of a device is `max(cores %, memory %) × 10`; a whole
//!   card (cores 100) is 1000;
//! - a node's free CPU and memory are its allocatable amounts less what the pods bound or
//!   reserved there request (kept by the ledger, [`crate::ledger::NodeResources`]); a
//!   node whose amounts are unknown counts as having CPU and memory for every class;
//! - a node's GPU model is its first device's type, mapped to the model ids of the
//!   typical workload's class constraints by the model's type table.
//!
//! The score is the one of [`super::score`] (our `hami-frag`): node policy `frag` ranks
//! nodes by the quantised change of Φ that the pod's placement causes (higher is better,
//! equal ranks by node name) and reports that change Φ(before) − Φ(after) in milli-GPU;
//! GPU policy `frag` prefers the device whose placement scores highest, the lowest index
//! among equal scores.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rustc_hash::FxHashMap;
use thread_local::ThreadLocal;

use super::score::{FragScoreConfig, FragScoring};
use super::{FragMemo, ModelSet, NodeView, TaskClass, TypicalWorkload};
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::score::Usage;
use crate::sync::MutexExt;

/// CPU the live engine assumes free on a node whose CPU is unknown (fits any realistic
/// class; the largest value the memo key packs).
const LIVE_CPU_FREE: i64 = (1 << 21) - 1;

/// Memory (MiB) assumed free on a node whose memory is unknown.
const LIVE_MEM_FREE_MIB: i64 = 1 << 40;

/// Model id of a device type the model's type table does not know: classes restricted to
/// known models do not run there.
pub const UNKNOWN_MODEL: u8 = 63;

/// Memoised node states a thread keeps before its memo is cleared (a few MiB each).
const MEMO_CAP: usize = 1 << 16;

/// A GPU task shape of a typical workload and how common it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuTaskShape {
    /// GPUs per task.
    pub num_gpu: u32,
    /// Share of each GPU, in milli-GPU.
    pub gpu_milli: i32,
    /// Relative frequency (any unit: weights are normalised).
    pub weight: u32,
}

impl GpuTaskShape {
    pub const fn new(num_gpu: u32, gpu_milli: i32, weight: u32) -> Self {
        GpuTaskShape {
            num_gpu,
            gpu_milli,
            weight,
        }
    }
}

/// Built-in typical workload: the GPU task shapes of Alibaba's openb default trace
/// (`openb_pod_list_default.csv`), weights in 1/10000 of its tasks, covering 99.6 % of
/// its GPU tasks.
pub const OPENB_DEFAULT_CLASSES: &[GpuTaskShape] = &[
    GpuTaskShape::new(1, 1000, 4798),
    GpuTaskShape::new(1, 810, 1322),
    GpuTaskShape::new(1, 470, 920),
    GpuTaskShape::new(1, 320, 402),
    GpuTaskShape::new(1, 650, 310),
    GpuTaskShape::new(1, 230, 172),
    GpuTaskShape::new(1, 460, 157),
    GpuTaskShape::new(1, 590, 92),
    GpuTaskShape::new(1, 160, 91),
    GpuTaskShape::new(1, 550, 88),
    GpuTaskShape::new(1, 220, 76),
    GpuTaskShape::new(1, 370, 58),
    GpuTaskShape::new(8, 1000, 54),
    GpuTaskShape::new(1, 110, 29),
    GpuTaskShape::new(1, 480, 23),
    GpuTaskShape::new(2, 1000, 20),
    GpuTaskShape::new(4, 1000, 18),
];

/// A typical workload built from task shapes; weights are normalised. CPU and memory
/// are 0 and every model is allowed.
pub fn workload_from_shapes(shapes: &[GpuTaskShape]) -> TypicalWorkload {
    let total: f64 = shapes.iter().map(|s| f64::from(s.weight)).sum();
    let classes = shapes
        .iter()
        .filter(|s| total > 0.0 && s.weight > 0)
        .map(|s| TaskClass {
            cpu_milli: 0,
            mem_mib: 0,
            gpu_milli: s.gpu_milli,
            num_gpu: s.num_gpu,
            models: ModelSet::ANY,
            weight: f64::from(s.weight) / total,
        })
        .collect();
    TypicalWorkload { classes }
}

/// The fragmentation model of the live engine: the score (typical workload M, tuning,
/// per-model constants), a table from device types to the model ids of M's class
/// constraints, and a memo of F by node state (safe to use from several threads).
///
/// Every device score of a `frag` placement reads F, from every thread that scans nodes,
/// so the memo takes no lock: each thread has a memo of its own for this model (F of a
/// state is the same whichever thread computes it; a thread only repeats the few states
/// another one already knows).
pub struct FragModel {
    /// Unique per model built in this process (score caches are keyed by it).
    id: u64,
    scoring: FragScoring,
    /// Device type → model id; empty: every node is model 0.
    types: FxHashMap<Box<str>, u8>,
    memo: ThreadLocal<RefCell<FragMemo>>,
}

impl std::fmt::Debug for FragModel {
    /// The id and the size of M only: a plan's debug form names its model without
    /// printing the workload or the memo.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FragModel")
            .field("id", &self.id)
            .field("classes", &self.scoring.workload().classes.len())
            .field("types", &self.types.len())
            .finish()
    }
}

impl FragModel {
    /// A model of `workload` with the default tuning and no GPU-model table.
    pub fn new(workload: TypicalWorkload) -> Self {
        Self::with_scoring(
            FragScoring::new(workload, FragScoreConfig::default(), &[]),
            std::iter::empty(),
        )
    }

    /// A model scoring with `scoring`, reading node models through `types` (device type,
    /// model id of M's class constraints).
    pub fn with_scoring(
        scoring: FragScoring,
        types: impl IntoIterator<Item = (String, u8)>,
    ) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            scoring,
            types: types
                .into_iter()
                .map(|(t, id)| (t.into_boxed_str(), id))
                .collect(),
            memo: ThreadLocal::new(),
        }
    }

    /// The model built from [`OPENB_DEFAULT_CLASSES`], shared process-wide.
    pub fn builtin() -> Arc<FragModel> {
        static BUILTIN: OnceLock<Arc<FragModel>> = OnceLock::new();
        BUILTIN
            .get_or_init(|| Arc::new(FragModel::new(workload_from_shapes(OPENB_DEFAULT_CLASSES))))
            .clone()
    }

    /// Unique among the models of this process.
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn workload(&self) -> &TypicalWorkload {
        self.scoring.workload()
    }

    pub fn scoring(&self) -> &FragScoring {
        &self.scoring
    }

    /// Device types the model knows, with their model ids.
    pub fn types(&self) -> impl Iterator<Item = (&str, u8)> {
        self.types.iter().map(|(t, &id)| (&**t, id))
    }

    /// The model id of a node whose devices are of `dev_type`.
    pub fn model_of(&self, dev_type: &str) -> u8 {
        if self.types.is_empty() {
            return 0;
        }
        self.types.get(dev_type).copied().unwrap_or(UNKNOWN_MODEL)
    }

    /// Runs `f` with this thread's memo.
    fn with_memo<R>(&self, f: impl FnOnce(&mut FragMemo) -> R) -> R {
        let memo = self.memo.get_or(|| RefCell::new(self.scoring.memo()));
        // The memo is only borrowed inside these calls, which never nest; were it
        // borrowed already, a fresh memo gives the same values.
        match memo.try_borrow_mut() {
            Ok(mut memo) => {
                if memo.len() >= MEMO_CAP {
                    memo.clear();
                }
                f(&mut memo)
            }
            Err(_) => f(&mut self.scoring.memo()),
        }
    }

    /// F (the fragmentation measure alone) of a node whose devices have these free
    /// shares (milli-GPU), with CPU and memory for every class.
    pub fn frag_of(&self, shares: &[i32]) -> f64 {
        let view = NodeView {
            model: 0,
            cpu_free: LIVE_CPU_FREE,
            mem_free: LIVE_MEM_FREE_MIB,
            gpu_free: shares,
        };
        self.with_memo(|memo| memo.frag(&view, self.scoring.workload()))
    }

    /// Φ of a node view (F plus the stranding and scarcity terms).
    pub fn phi(&self, view: &NodeView<'_>) -> f64 {
        self.with_memo(|memo| self.scoring.phi(view, memo))
    }

    /// The frag view of `node` for a pod requesting `pod`, with Φ of the node as it is
    /// (`shares`: its devices' free shares) or `phi_before` when the caller knows it.
    pub fn node<'a>(
        &'a self,
        node: NodeFrag,
        pod: PodFrag,
        shares: &[i32],
        phi_before: Option<f64>,
    ) -> FragNode<'a> {
        let before = phi_before.unwrap_or_else(|| self.phi(&node.view(shares)));
        FragNode {
            model: self,
            node,
            pod,
            before,
        }
    }

    /// Device score of GPU policy `frag` on a node whose CPU and memory are unknown, for a
    /// pod without CPU or memory requests; see [`FragNode::device_score`].
    pub fn device_score(
        &self,
        infos: &[DeviceInfo],
        usage: &[Usage],
        pos: usize,
        req: &ContainerDeviceRequest,
    ) -> f32 {
        let shares: Vec<i32> = infos
            .iter()
            .zip(usage)
            .map(|(d, u)| free_share(d, u))
            .collect();
        self.node(
            NodeFrag::unconstrained(0),
            PodFrag::default(),
            &shares,
            None,
        )
        .device_score(infos, usage, pos, req)
    }
}

/// What the frag score reads of a node besides its devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeFrag {
    pub model: u8,
    /// Free CPU in milli-CPU.
    pub cpu_free: i64,
    /// Free memory in MiB.
    pub mem_free_mib: i64,
}

impl NodeFrag {
    /// A node of `model` whose CPU and memory are unknown: every class fits them.
    pub fn unconstrained(model: u8) -> Self {
        NodeFrag {
            model,
            cpu_free: LIVE_CPU_FREE,
            mem_free_mib: LIVE_MEM_FREE_MIB,
        }
    }

    fn view<'s>(&self, shares: &'s [i32]) -> NodeView<'s> {
        NodeView {
            model: self.model,
            cpu_free: self.cpu_free,
            mem_free: self.mem_free_mib,
            gpu_free: shares,
        }
    }
}

/// A pod's CPU and memory requests, as the frag score reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PodFrag {
    pub cpu_milli: i64,
    pub mem_mib: i64,
}

/// One node under one pod: the scores of the `frag` policies there.
#[derive(Debug, Clone, Copy)]
pub struct FragNode<'a> {
    model: &'a FragModel,
    node: NodeFrag,
    pod: PodFrag,
    /// Φ of the node before the pod.
    before: f64,
}

impl FragNode<'_> {
    /// Φ of the node before the pod.
    pub fn before(&self) -> f64 {
        self.before
    }

    /// Φ(before) − Φ(after), in milli-GPU: what placing the pod, leaving its devices with
    /// `after` free shares, removes (negative: adds).
    pub fn gain(&self, after: &[i32]) -> f64 {
        let view = NodeView {
            model: self.node.model,
            cpu_free: self.node.cpu_free - self.pod.cpu_milli,
            mem_free: self.node.mem_free_mib - self.pod.mem_mib,
            gpu_free: after,
        };
        self.before - self.model.phi(&view)
    }

    /// Device score of GPU policy `frag`: the ranked ([`FragNode::rank`]) [`FragNode::gain`] of the pod
    /// placed with `req` on device `pos` (devices `infos` with `usage`), plus a fraction
    /// that ranks equal scores by device index, lowest first (FGD's GPU rule). Higher is
    /// better.
    pub fn device_score(
        &self,
        infos: &[DeviceInfo],
        usage: &[Usage],
        pos: usize,
        req: &ContainerDeviceRequest,
    ) -> f32 {
        let mut shares = [0i32; super::MEMO_MAX_GPUS];
        let mut heap = Vec::new();
        let shares: &mut [i32] = if infos.len() <= shares.len() {
            &mut shares[..infos.len()]
        } else {
            heap.resize(infos.len(), 0);
            &mut heap
        };
        for ((s, d), u) in shares.iter_mut().zip(infos).zip(usage) {
            *s = free_share(d, u);
        }
        if let (Some(info), Some(u), Some(s)) =
            (infos.get(pos), usage.get(pos), shares.get_mut(pos))
        {
            let mut after = *u;
            after.add(
                1,
                u64::from(req.memory_on(info.mem_mib)),
                u64::from(req.cores_clamped()),
            );
            *s = free_share(info, &after);
        }
        let n = infos.len() as f32;
        self.rank(self.gain(shares)) as f32 + (n - pos as f32) / (n + 1.0)
    }

    /// What a [`FragNode::gain`] ranks as: the score's primary term (FGD's quantised
    /// score unless the model's tuning says otherwise, [`FragScoring::primary`]).
    pub fn rank(&self, gain: f64) -> f64 {
        self.model.scoring.primary(gain)
    }
}

/// What the engine remembers of a score of node policy `frag`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CachedScore {
    /// The node score as reported (Φ(before) − Φ(after), milli-GPU).
    pub score: f32,
    /// What nodes are ranked by (before the cluster-wide pairing term).
    pub rank: f64,
    /// The change Φ(before) − Φ(after) unrounded (milli-GPU): what the pairing term's
    /// [`crate::frag::pairing::Blend::Delta`] adds to before `rank`'s primary term.
    pub gain: f64,
    /// The free share (milli-GPU) of the one device a sharing pod takes, before and after
    /// the pod: what the pairing term prices (`super::pairing`); `None` for other pods.
    pub hole: Option<(i32, i32)>,
}

/// The frag scores of one node as it is now: Φ per model and node scores per pod shape.
/// The ledger clears it whenever the node changes (devices, usage, CPU or memory), so an
/// entry never outlives the state it was computed for.
#[derive(Debug, Default)]
pub struct NodeFragCache {
    inner: Mutex<CacheEntries>,
}

#[derive(Debug, Default)]
struct CacheEntries {
    /// Φ of the node under the model with this id.
    phi: Option<(u64, f64)>,
    /// By pod shape key.
    scores: FxHashMap<u64, CachedScore>,
}

impl Clone for NodeFragCache {
    /// A copy starts empty (it is a cache).
    fn clone(&self) -> Self {
        NodeFragCache::default()
    }
}

impl NodeFragCache {
    /// Forgets everything (the node changed).
    pub fn clear(&mut self) {
        let inner = self
            .inner
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        inner.phi = None;
        inner.scores = FxHashMap::default();
    }

    /// Φ of the node under model `model`, computed by `compute` when not known.
    pub fn phi(&self, model: u64, compute: impl FnOnce() -> f64) -> f64 {
        if let Some((m, phi)) = self.inner.lock_unpoisoned().phi
            && m == model
        {
            return phi;
        }
        let phi = compute();
        self.inner.lock_unpoisoned().phi = Some((model, phi));
        phi
    }

    /// The node score for the pod shape `key`, if known.
    pub fn score(&self, key: u64) -> Option<CachedScore> {
        self.inner.lock_unpoisoned().scores.get(&key).copied()
    }

    /// Remembers a node score; at `capacity` entries the old ones are dropped first.
    pub fn put(&self, key: u64, score: CachedScore, capacity: usize) {
        let mut inner = self.inner.lock_unpoisoned();
        if inner.scores.len() >= capacity {
            inner.scores.clear();
        }
        if capacity > 0 {
            inner.scores.insert(key, score);
        }
    }

    /// Pod shapes remembered.
    pub fn len(&self) -> usize {
        self.inner.lock_unpoisoned().scores.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Free share of a device in milli-GPU: `min(free cores, free memory)` as a fraction
/// of the device, ×1000; 0 when no slot is left or the device has no capacity.
pub fn free_share(info: &DeviceInfo, u: &Usage) -> i32 {
    if info.count == 0 || u.used >= info.count || info.cores == 0 || info.mem_mib == 0 {
        return 0;
    }
    let cores = u64::from(info.cores).saturating_sub(u.cores_used) * 1000 / u64::from(info.cores);
    let mem = u64::from(info.mem_mib).saturating_sub(u.mem_used) * 1000 / u64::from(info.mem_mib);
    cores.min(mem).min(1000) as i32
}

/// What a container taking `cores` % and `mem` MiB of a device uses of it, in
/// milli-GPU: `max(cores, memory)` as a fraction of the device (whole card = 1000).
pub fn taken_share(info: &DeviceInfo, cores: u32, mem: u32) -> i32 {
    if info.cores == 0 || info.mem_mib == 0 {
        return 0;
    }
    let c = u64::from(cores) * 1000 / u64::from(info.cores);
    let m = u64::from(mem) * 1000 / u64::from(info.mem_mib);
    c.max(m).min(1000) as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frag::node_frag;

    fn dev(i: u32) -> DeviceInfo {
        DeviceInfo {
            id: format!("GPU-{i}").into(),
            index: i,
            count: 10,
            mem_mib: 1000,
            cores: 100,
            dev_type: "NVIDIA-A100".into(),
            health: true,
            ..Default::default()
        }
    }

    #[test]
    fn shares_follow_the_tighter_dimension() {
        let d = dev(0);
        let u = Usage {
            used: 1,
            mem_used: 300,
            cores_used: 50,
        };
        assert_eq!(free_share(&d, &u), 500);
        let full = Usage {
            used: 10,
            ..Usage::default()
        };
        assert_eq!(free_share(&d, &full), 0);
        assert_eq!(taken_share(&d, 100, 0), 1000);
        assert_eq!(taken_share(&d, 20, 400), 400);
    }

    #[test]
    fn builtin_weights_sum_to_one() {
        let m = FragModel::builtin();
        let s: f64 = m.workload().classes.iter().map(|c| c.weight).sum();
        assert!((s - 1.0).abs() < 1e-9);
        // An empty 8-GPU node strands nothing; a 100-milli sliver is stranded for
        // every class larger than that.
        assert_eq!(m.frag_of(&[1000; 8]), 0.0);
        assert!(m.frag_of(&[100, 1000, 1000, 1000, 1000, 1000, 1000, 1000]) > 90.0);
    }

    #[test]
    fn memo_answers_every_thread_as_the_measure_does() {
        let m = FragModel::builtin();
        // Deterministic share vectors, many repeated across threads and calls.
        let states: Vec<Vec<i32>> = (0..400u32)
            .map(|i| (0..8).map(|g| ((i * 37 + g * 101) % 1001) as i32).collect())
            .collect();
        let direct = |shares: &[i32]| {
            let view = NodeView {
                model: 0,
                cpu_free: LIVE_CPU_FREE,
                mem_free: 0,
                gpu_free: shares,
            };
            node_frag(&view, m.workload(), false)
        };
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (m, states) = (&m, &states);
                scope.spawn(move || {
                    for round in 0..3 {
                        for s in states.iter().skip(t * 50 + round) {
                            assert_eq!(m.frag_of(s).to_bits(), direct(s).to_bits());
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn device_score_prefers_the_exact_fit() {
        let m = FragModel::new(workload_from_shapes(&[
            GpuTaskShape::new(1, 500, 1),
            GpuTaskShape::new(1, 1000, 1),
        ]));
        let infos = [dev(0), dev(1)];
        let usage = [
            Usage {
                used: 1,
                mem_used: 500,
                cores_used: 50,
            },
            Usage::default(),
        ];
        let req = ContainerDeviceRequest {
            count: 1,
            dev_type: "NVIDIA".into(),
            mem_mib: 0,
            mem_percent: Some(50),
            cores: 50,
        };
        let on_half = m.device_score(&infos, &usage, 0, &req);
        let on_empty = m.device_score(&infos, &usage, 1, &req);
        assert!(on_half > on_empty, "{on_half} vs {on_empty}");
    }
}
