//! GPU fragmentation measure (FGD, Weng et al., USENIX ATC '23;
//! `docs/simulator.md#node-fragmentation`) and the
//! node/GPU scoring of our fragmentation-aware policy.
//!
//! Pure and self-contained (moved here from hami-sim): it only sees plain data (a
//! node's model id, free CPU/memory and per-GPU free milli-shares, and the
//! typical workload table) so the live scheduler can reuse it unchanged.
//! GPU shares are in milli-GPU (1000 = one whole GPU).

use rustc_hash::FxHashMap;

pub mod live;

/// Largest GPU count per node that the packed memo key supports. Nodes with
/// more GPUs still work, they just bypass the memo.
pub const MEMO_MAX_GPUS: usize = 8;

/// A set of GPU model ids (bit i = model i). The empty set means "any model",
/// matching an empty `gpu_spec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct ModelSet(pub u64);

impl ModelSet {
    /// No constraint.
    pub const ANY: ModelSet = ModelSet(0);

    /// Whether a node of `model` may run a task with this constraint.
    pub fn allows(self, model: u8) -> bool {
        self.0 == 0 || (model < 64 && self.0 & (1u64 << model) != 0)
    }
}

/// One entry of the typical workload: a task shape and its probability.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskClass {
    pub cpu_milli: i64,
    pub mem_mib: i64,
    /// Per-GPU share in milli (0 for CPU-only tasks).
    pub gpu_milli: i32,
    pub num_gpu: u32,
    pub models: ModelSet,
    /// p_m: the class's share of the typical prefix.
    pub weight: f64,
}

/// Key used to group tasks into classes (`docs/simulator.md#typical-workload`). Memory is not
/// part of the paper's key; `mem_mib` is carried as the class's mean memory for the
/// memory-aware variant of our policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassKey {
    pub cpu_milli: i64,
    pub gpu_milli: i32,
    pub num_gpu: u32,
    /// The raw `gpu_spec` text (part of the paper's key and its sort order).
    pub spec: String,
    pub models: ModelSet,
}

/// The target workload M ("typical pods").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TypicalWorkload {
    pub classes: Vec<TaskClass>,
}

impl TypicalWorkload {
    /// Builds M from an observed task list: group by key, sort by count
    /// descending (ties: key descending), keep the shortest prefix covering at
    /// least `coverage_pct` percent of the tasks (the paper uses 95).
    ///
    /// `tasks` yields (key, memory MiB).
    pub fn from_tasks<I>(tasks: I, coverage_pct: u32) -> Self
    where
        I: IntoIterator<Item = (ClassKey, i64)>,
    {
        let mut groups: Vec<(ClassKey, usize, i64)> = Vec::new();
        let mut index: FxHashMap<(i64, i32, u32, String), usize> = FxHashMap::default();
        let mut total = 0usize;
        for (key, mem) in tasks {
            total += 1;
            let k = (key.cpu_milli, key.gpu_milli, key.num_gpu, key.spec.clone());
            match index.get(&k) {
                Some(&i) => {
                    groups[i].1 += 1;
                    groups[i].2 += mem;
                }
                None => {
                    index.insert(k, groups.len());
                    groups.push((key, 1, mem));
                }
            }
        }
        if total == 0 {
            return Self::default();
        }
        groups.sort_by(|a, b| {
            b.1.cmp(&a.1)
                .then_with(|| b.0.cpu_milli.cmp(&a.0.cpu_milli))
                .then_with(|| b.0.gpu_milli.cmp(&a.0.gpu_milli))
                .then_with(|| b.0.num_gpu.cmp(&a.0.num_gpu))
                .then_with(|| b.0.spec.cmp(&a.0.spec))
        });
        let mut cum = 0usize;
        let mut keep = 0usize;
        for g in &groups {
            cum += g.1;
            keep += 1;
            if cum * 100 >= coverage_pct as usize * total {
                break;
            }
        }
        let n = total as f64;
        // The paper's simulator computes (count/N)/(cum/N); the plain ratio
        // differs in the last bit and flips a few quantised FGD ties.
        let cum_frac = cum as f64 / n;
        let classes = groups
            .into_iter()
            .take(keep)
            .map(|(key, count, mem)| TaskClass {
                cpu_milli: key.cpu_milli,
                mem_mib: mem / count as i64,
                gpu_milli: key.gpu_milli,
                num_gpu: key.num_gpu,
                models: key.models,
                weight: (count as f64 / n) / cum_frac,
            })
            .collect();
        Self { classes }
    }
}

impl TypicalWorkload {
    /// ρ: expected CPU milli consumed per milli-GPU of demand, over the whole
    /// mix (CPU-only classes included: they also eat GPU nodes' CPU).
    pub fn cpu_per_gpu_milli(&self) -> f64 {
        let cpu: f64 = self
            .classes
            .iter()
            .map(|c| c.weight * c.cpu_milli as f64)
            .sum();
        let gpu: f64 = self
            .classes
            .iter()
            .map(|c| c.weight * f64::from(c.num_gpu) * f64::from(c.gpu_milli))
            .sum();
        if gpu > 0.0 { cpu / gpu } else { 0.0 }
    }

    /// Re-weights classes by GPU demand: p_m ∝ p_m·(num·d/1000 + cpu_bias).
    pub fn reweighted_by_gpu(&self, cpu_bias: f64) -> Self {
        let raw: Vec<f64> = self
            .classes
            .iter()
            .map(|c| c.weight * (f64::from(c.num_gpu) * f64::from(c.gpu_milli) / 1000.0 + cpu_bias))
            .collect();
        let total: f64 = raw.iter().sum();
        let classes = self
            .classes
            .iter()
            .zip(&raw)
            .map(|(c, &w)| TaskClass {
                weight: if total > 0.0 { w / total } else { 0.0 },
                ..c.clone()
            })
            .collect();
        Self { classes }
    }
}

/// Plain view of one node's free resources.
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    pub model: u8,
    pub cpu_free: i64,
    pub mem_free: i64,
    /// Free milli per GPU, in GPU-index order.
    pub gpu_free: &'a [i32],
}

/// F_n(M) of `docs/simulator.md#node-fragmentation`: the expected milli-GPU that a task drawn
/// from M could not use on this node. When `mem_aware` is set, a class also counts as not
/// fitting when its (mean) memory does not fit, an extension of ours.
///
/// Per-class contributions are accumulated in the paper simulator's bucket
/// order (Q1, Q2, Q4, XL, XR, no-access) so quantised FGD ties match bit-exactly.
pub fn node_frag(node: &NodeView<'_>, workload: &TypicalWorkload, mem_aware: bool) -> f64 {
    let idle: i64 = node.gpu_free.iter().map(|&r| i64::from(r)).sum();
    // Buckets: 0 = Q1 (lack both), 1 = Q2 (lack GPU, and the unusable part of
    // fitting cases), 2 = Q4 (lack CPU), 3 = XL, 4 = XR, 5 = no access.
    let mut buckets = [0f64; 6];
    for class in &workload.classes {
        let cpu_ok =
            node.cpu_free >= class.cpu_milli && (!mem_aware || node.mem_free >= class.mem_mib);
        if class.gpu_milli == 0 || class.num_gpu == 0 {
            let b = if cpu_ok { 3 } else { 4 };
            buckets[b] += class.weight * idle as f64;
            continue;
        }
        if !class.models.allows(node.model) {
            buckets[5] += class.weight * idle as f64;
            continue;
        }
        let d = class.gpu_milli;
        let mut fitting = 0u32;
        let mut too_small: i64 = 0;
        for &r in node.gpu_free {
            if r >= d {
                fitting += 1;
            } else {
                too_small += i64::from(r);
            }
        }
        let gpu_ok = fitting >= class.num_gpu;
        match (gpu_ok, cpu_ok) {
            (true, true) => buckets[1] += class.weight * too_small as f64,
            (false, true) => buckets[1] += class.weight * idle as f64,
            (true, false) => buckets[2] += class.weight * idle as f64,
            (false, false) => buckets[0] += class.weight * idle as f64,
        }
    }
    buckets.iter().sum()
}

/// GPU milli on the node that the free CPU cannot be expected to drive:
/// max(0, L − cpu_free/ρ). FGD only sees CPU shortage once a class no longer
/// fits; this term sees it coming, so CPU-hungry tasks avoid CPU-poor nodes.
pub fn cpu_stranded(gpu_free: &[i32], cpu_free: i64, rho: f64) -> f64 {
    let idle: i64 = gpu_free.iter().map(|&r| i64::from(r)).sum();
    if rho <= 0.0 {
        return 0.0;
    }
    (idle as f64 - cpu_free as f64 / rho).max(0.0)
}

/// FGD's quantised score for a fragmentation change: ⌊100·σ(Δ/1000)⌋ with
/// Δ = F(before) − F(after), truncated like Go's `int64()`.
pub fn fgd_score(before: f64, after: f64) -> i64 {
    let delta = before - after;
    let sigmoid = 1.0 / (1.0 + (-delta / 1000.0).exp());
    (100.0 * sigmoid) as i64
}

/// Free shares after placing `num` × `milli` on a node: for a single share the
/// GPU `gpu`; for whole-GPU tasks the lowest-index fully free GPUs (the value of
/// F does not depend on which of equal GPUs is taken).
pub fn after_place(gpu_free: &[i32], milli: i32, num: u32, gpu: Option<usize>) -> Vec<i32> {
    let mut out = gpu_free.to_vec();
    if milli == 0 || num == 0 {
        return out;
    }
    if let Some(g) = gpu {
        if let Some(v) = out.get_mut(g) {
            *v -= milli;
        }
        return out;
    }
    let mut left = num;
    for v in out.iter_mut() {
        if left == 0 {
            break;
        }
        if *v >= milli {
            *v -= milli;
            left -= 1;
        }
    }
    out
}

/// Memo of F_n(M) by node state (model, free CPU, [free memory], sorted free
/// shares). Most nodes share a state early in a run, so hit rates are high.
#[derive(Debug, Default)]
pub struct FragMemo {
    map: FxHashMap<(u128, i64), f64>,
    mem_aware: bool,
}

impl FragMemo {
    pub fn new(mem_aware: bool) -> Self {
        Self {
            map: FxHashMap::default(),
            mem_aware,
        }
    }

    /// Number of memoised node states.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Forgets every memoised state (bounds memory in long-lived callers).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// F_n(M), memoised when the node state packs into the key.
    pub fn frag(&mut self, node: &NodeView<'_>, workload: &TypicalWorkload) -> f64 {
        match self.key(node) {
            Some(k) => {
                if let Some(&f) = self.map.get(&k) {
                    return f;
                }
                let f = node_frag(node, workload, self.mem_aware);
                self.map.insert(k, f);
                f
            }
            None => node_frag(node, workload, self.mem_aware),
        }
    }

    fn key(&self, node: &NodeView<'_>) -> Option<(u128, i64)> {
        let n = node.gpu_free.len();
        if n > MEMO_MAX_GPUS || !(0..(1 << 21)).contains(&node.cpu_free) {
            return None;
        }
        let mut sorted = [0i32; MEMO_MAX_GPUS];
        sorted[..n].copy_from_slice(node.gpu_free);
        sorted[..n].sort_unstable();
        // 8 × 11 bits of shares + 4 bits count + 6 bits model + 21 bits CPU.
        let mut k: u128 = 0;
        for &s in &sorted[..n] {
            if !(0..2048).contains(&s) {
                return None;
            }
            k = (k << 11) | s as u128;
        }
        k = (k << 4) | n as u128;
        k = (k << 6) | u128::from(node.model & 63);
        k = (k << 21) | node.cpu_free as u128;
        // Memory only enters the key when it can change the result.
        let mem = if self.mem_aware { node.mem_free } else { 0 };
        Some((k, mem))
    }
}

/// Primary term of our score.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primary {
    /// FGD's quantised ⌊100·σ(Δ/1000)⌋ (coarse: ~40 milli per point).
    Quantised,
    /// The raw fragmentation change Δ in GPUs (continuous).
    Raw,
    /// ⌊Δ / width⌋ for a bucket width in milli.
    Bucket(u32),
}

/// Secondary term, used to break (or blend with) the primary term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secondary {
    None,
    /// Fraction of the node's GPU capacity in use after placement (HAMi
    /// binpack's node utilisation): fill the fullest node first.
    Utilisation,
    /// Negative idle GPUs left on the node after placement (best fit in
    /// absolute terms).
    LeastIdle,
}

/// Tuning of our policy (`hami-frag`), kept as plain data so the live
/// scheduler can expose it as configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FragScoreConfig {
    /// Count memory as well as CPU when deciding whether a class fits.
    pub mem_aware: bool,
    pub primary: Primary,
    pub secondary: Secondary,
    /// Weight of the secondary term (in primary units; < 1 with a quantised
    /// primary makes it a pure tie-break).
    pub weight: f64,
    /// Among GPUs with equal score on the chosen node, take the fullest one
    /// (best fit) instead of the lowest index.
    pub gpu_best_fit: bool,
    /// λ: weight of the CPU-stranding term added to F (0 = plain FGD measure).
    pub strand: f64,
    /// Coverage of the typical workload (the paper uses 95).
    pub coverage_pct: u32,
    /// When set to `b`, class weights become p_m·(num·d/1000 + b): weight by
    /// GPU demand (the allocation metric) with `b` for CPU-only classes.
    pub gpu_weighting: Option<f64>,
}

impl Default for FragScoreConfig {
    fn default() -> Self {
        // Chosen by a sweep on the default trace (docs/simulator.md).
        Self {
            mem_aware: true,
            primary: Primary::Quantised,
            secondary: Secondary::None,
            weight: 0.0,
            gpu_best_fit: false,
            strand: 0.25,
            coverage_pct: 95,
            gpu_weighting: None,
        }
    }
}

impl FragScoreConfig {
    /// Parses `key=value` pairs separated by commas, e.g.
    /// `primary=raw,secondary=util,weight=0.5,mem=1,gpu=bestfit`; unknown keys
    /// or values are errors.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut cfg = Self::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("expected key=value, got {part:?}"))?;
            match (k, v) {
                ("mem", "1" | "true") => cfg.mem_aware = true,
                ("mem", "0" | "false") => cfg.mem_aware = false,
                ("primary", "q" | "quantised") => cfg.primary = Primary::Quantised,
                ("primary", "raw") => cfg.primary = Primary::Raw,
                ("bucket", b) => {
                    cfg.primary =
                        Primary::Bucket(b.parse().map_err(|_| format!("bad bucket {b:?}"))?)
                }
                ("strand", l) => cfg.strand = l.parse().map_err(|_| format!("bad strand {l:?}"))?,
                ("coverage", c) => {
                    cfg.coverage_pct = c.parse().map_err(|_| format!("bad coverage {c:?}"))?
                }
                ("gpuweight", g) => {
                    cfg.gpu_weighting = Some(g.parse().map_err(|_| format!("bad gpuweight {g:?}"))?)
                }
                ("secondary", "none") => cfg.secondary = Secondary::None,
                ("secondary", "util") => cfg.secondary = Secondary::Utilisation,
                ("secondary", "idle") => cfg.secondary = Secondary::LeastIdle,
                ("weight", w) => cfg.weight = w.parse().map_err(|_| format!("bad weight {w:?}"))?,
                ("gpu", "bestfit") => cfg.gpu_best_fit = true,
                ("gpu", "first") => cfg.gpu_best_fit = false,
                _ => return Err(format!("unknown setting {part:?}")),
            }
        }
        Ok(cfg)
    }
}

/// Result of scoring one node for one task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeScore {
    /// Higher is better.
    pub score: f64,
    /// Chosen GPU for a single-share task (index), `None` for whole-GPU
    /// and CPU-only tasks (those take the lowest-index fully free GPUs).
    pub gpu: Option<usize>,
}

/// The task being placed, as plain data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskShape {
    pub cpu_milli: i64,
    pub mem_mib: i64,
    pub gpu_milli: i32,
    pub num_gpu: u32,
}

/// Our node/GPU score: FGD's fragmentation change against the typical
/// workload as the primary term, plus a secondary packing term that replaces
/// FGD's random tie-break. Returns `None` when the task does not fit the
/// node's GPUs (CPU/memory/model filtering is the caller's).
/// Our scorer: the typical workload, the tuning and a memo of F by node state.
#[derive(Debug)]
pub struct FragScorer {
    workload: TypicalWorkload,
    cfg: FragScoreConfig,
    rho: f64,
    memo: FragMemo,
}

impl FragScorer {
    pub fn new(workload: TypicalWorkload, cfg: FragScoreConfig) -> Self {
        let rho = workload.cpu_per_gpu_milli();
        Self {
            workload,
            memo: FragMemo::new(cfg.mem_aware),
            cfg,
            rho,
        }
    }

    pub fn workload(&self) -> &TypicalWorkload {
        &self.workload
    }

    pub fn config(&self) -> &FragScoreConfig {
        &self.cfg
    }

    /// Scores `task` on `node`; see [`frag_score`].
    pub fn score(&mut self, node: &NodeView<'_>, task: &TaskShape) -> Option<NodeScore> {
        frag_score(
            node,
            task,
            &self.workload,
            &self.cfg,
            self.rho,
            &mut self.memo,
        )
    }
}

/// `rho` is [`TypicalWorkload::cpu_per_gpu_milli`] (passed in so callers can
/// compute it once).
pub fn frag_score(
    node: &NodeView<'_>,
    task: &TaskShape,
    workload: &TypicalWorkload,
    cfg: &FragScoreConfig,
    rho: f64,
    memo: &mut FragMemo,
) -> Option<NodeScore> {
    let cpu_after = node.cpu_free - task.cpu_milli;
    let strand = |gpus: &[i32], cpu: i64| cfg.strand * cpu_stranded(gpus, cpu, rho);
    let before = memo.frag(node, workload) + strand(node.gpu_free, node.cpu_free);
    let mem_after = node.mem_free - task.mem_mib;
    let idle: i64 = node.gpu_free.iter().map(|&r| i64::from(r)).sum();
    let cap = (node.gpu_free.len() as f64 * 1000.0).max(1.0);
    let primary = |f_after: f64| -> f64 {
        match cfg.primary {
            Primary::Quantised => fgd_score(before, f_after) as f64,
            Primary::Raw => (before - f_after) / 1000.0,
            Primary::Bucket(w) => ((before - f_after) / f64::from(w.max(1))).floor(),
        }
    };
    let secondary = |used: i64| -> f64 {
        let left = (idle - used) as f64;
        match cfg.secondary {
            Secondary::None => 0.0,
            Secondary::Utilisation => 1.0 - left / cap,
            Secondary::LeastIdle => -left / 8000.0,
        }
    };
    let sharing = task.num_gpu == 1 && task.gpu_milli > 0 && task.gpu_milli < 1000;
    if sharing {
        let node_term = cfg.weight * secondary(i64::from(task.gpu_milli));
        let mut best: Option<(f64, i32, usize)> = None;
        let mut seen: [(i32, f64); MEMO_MAX_GPUS] = [(-1, 0.0); MEMO_MAX_GPUS];
        let mut seen_n = 0usize;
        for (i, &r) in node.gpu_free.iter().enumerate() {
            if r < task.gpu_milli {
                continue;
            }
            let p = match seen[..seen_n].iter().find(|(v, _)| *v == r) {
                Some(&(_, p)) => p,
                None => {
                    let after = after_place(node.gpu_free, task.gpu_milli, 1, Some(i));
                    let view = NodeView {
                        model: node.model,
                        cpu_free: cpu_after,
                        mem_free: mem_after,
                        gpu_free: &after,
                    };
                    let p = primary(memo.frag(&view, workload) + strand(&after, cpu_after));
                    if seen_n < MEMO_MAX_GPUS {
                        seen[seen_n] = (r, p);
                        seen_n += 1;
                    }
                    p
                }
            };
            let better = match best {
                None => true,
                Some((bp, br, _)) => p > bp || (cfg.gpu_best_fit && p == bp && r < br),
            };
            if better {
                best = Some((p, r, i));
            }
        }
        return best.map(|(p, _, i)| NodeScore {
            score: p + node_term,
            gpu: Some(i),
        });
    }
    let need = if task.num_gpu == 0 || task.gpu_milli == 0 {
        0
    } else {
        task.num_gpu
    };
    if need > 0 {
        let fitting = node
            .gpu_free
            .iter()
            .filter(|&&r| r >= task.gpu_milli)
            .count();
        if fitting < need as usize {
            return None;
        }
    }
    let after = after_place(node.gpu_free, task.gpu_milli, need, None);
    let view = NodeView {
        model: node.model,
        cpu_free: cpu_after,
        mem_free: mem_after,
        gpu_free: &after,
    };
    let p = primary(memo.frag(&view, workload) + strand(&after, cpu_after));
    let used = i64::from(task.gpu_milli) * i64::from(need);
    Some(NodeScore {
        score: p + cfg.weight * secondary(used),
        gpu: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload() -> TypicalWorkload {
        TypicalWorkload {
            classes: vec![
                TaskClass {
                    cpu_milli: 4000,
                    mem_mib: 0,
                    gpu_milli: 500,
                    num_gpu: 1,
                    models: ModelSet::ANY,
                    weight: 0.5,
                },
                TaskClass {
                    cpu_milli: 4000,
                    mem_mib: 0,
                    gpu_milli: 1000,
                    num_gpu: 1,
                    models: ModelSet::ANY,
                    weight: 0.5,
                },
            ],
        }
    }

    #[test]
    fn frag_of_half_used_gpu() {
        let w = workload();
        let gpus = [1000, 400];
        let v = NodeView {
            model: 0,
            cpu_free: 8000,
            mem_free: 0,
            gpu_free: &gpus,
        };
        // 500m class: GPU1 (400) is too small → 0.5·400; 1000m class: same → 0.5·400.
        assert!((node_frag(&v, &w, false) - 400.0).abs() < 1e-9);
        let v = NodeView {
            model: 0,
            cpu_free: 1000,
            mem_free: 0,
            gpu_free: &gpus,
        };
        // CPU lacks for both: all idle (1400) counts.
        assert!((node_frag(&v, &w, false) - 1400.0).abs() < 1e-9);
    }

    #[test]
    fn fgd_quantisation() {
        assert_eq!(fgd_score(0.0, 0.0), 50);
        assert_eq!(fgd_score(0.0, 1.0), 49);
        assert_eq!(fgd_score(39.0, 0.0), 50);
        assert_eq!(fgd_score(41.0, 0.0), 51);
    }

    #[test]
    fn typical_prefix_and_weights() {
        let key = |cpu, milli| ClassKey {
            cpu_milli: cpu,
            gpu_milli: milli,
            num_gpu: 1,
            spec: String::new(),
            models: ModelSet::ANY,
        };
        let mut tasks = Vec::new();
        for _ in 0..96 {
            tasks.push((key(1000, 500), 10));
        }
        for _ in 0..4 {
            tasks.push((key(2000, 300), 10));
        }
        let w = TypicalWorkload::from_tasks(tasks, 95);
        assert_eq!(w.classes.len(), 1);
        assert!((w.classes[0].weight - 1.0).abs() < 1e-12);
    }

    #[test]
    fn frag_score_prefers_exact_fit() {
        let w = workload();
        let mut memo = FragMemo::new(false);
        let cfg = FragScoreConfig::default();
        let task = TaskShape {
            cpu_milli: 1000,
            mem_mib: 0,
            gpu_milli: 500,
            num_gpu: 1,
        };
        let a = [500, 1000];
        let v = NodeView {
            model: 0,
            cpu_free: 64000,
            mem_free: 0,
            gpu_free: &a,
        };
        let s = frag_score(&v, &task, &w, &cfg, w.cpu_per_gpu_milli(), &mut memo).map(|s| s.gpu);
        assert_eq!(s, Some(Some(0)));
    }
}
