//! The FGD method on top of the fragmentation measure: building the typical workload from
//! a trace, FGD's quantised score, and the node/GPU scoring of our fragmentation-aware
//! policy (`hami-frag`).
//!
//! The measure itself (typical workload M, F_n(M), its memo) is `hami_core::frag`, shared
//! with the live placement engine's `frag` policies, and re-exported here so the simulator
//! reads one module. GPU shares are in milli-GPU (1000 = one whole GPU).

use rustc_hash::FxHashMap;

pub use hami_core::frag::{
    FragMemo, MEMO_MAX_GPUS, ModelSet, NodeView, TaskClass, TypicalWorkload, node_frag,
};

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

/// Builds M from an observed task list: group by key, sort by count
/// descending (ties: key descending), keep the shortest prefix covering at
/// least `coverage_pct` percent of the tasks (the paper uses 95).
///
/// `tasks` yields (key, memory MiB).
pub fn typical_workload<I>(tasks: I, coverage_pct: u32) -> TypicalWorkload
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
        return TypicalWorkload::default();
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
    TypicalWorkload { classes }
}

/// ρ: expected CPU milli consumed per milli-GPU of demand, over the whole
/// mix (CPU-only classes included: they also eat GPU nodes' CPU).
pub fn cpu_per_gpu_milli(workload: &TypicalWorkload) -> f64 {
    let cpu: f64 = workload
        .classes
        .iter()
        .map(|c| c.weight * c.cpu_milli as f64)
        .sum();
    let gpu: f64 = workload
        .classes
        .iter()
        .map(|c| c.weight * f64::from(c.num_gpu) * f64::from(c.gpu_milli))
        .sum();
    if gpu > 0.0 { cpu / gpu } else { 0.0 }
}

/// Re-weights classes by GPU demand: p_m ∝ p_m·(num·d/1000 + cpu_bias).
pub fn reweighted_by_gpu(workload: &TypicalWorkload, cpu_bias: f64) -> TypicalWorkload {
    let raw: Vec<f64> = workload
        .classes
        .iter()
        .map(|c| c.weight * (f64::from(c.num_gpu) * f64::from(c.gpu_milli) / 1000.0 + cpu_bias))
        .collect();
    let total: f64 = raw.iter().sum();
    let classes = workload
        .classes
        .iter()
        .zip(&raw)
        .map(|(c, &w)| TaskClass {
            weight: if total > 0.0 { w / total } else { 0.0 },
            ..c.clone()
        })
        .collect();
    TypicalWorkload { classes }
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
        let rho = cpu_per_gpu_milli(&workload);
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

/// `rho` is [`cpu_per_gpu_milli`] (passed in so callers can
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

    fn class(gpu_milli: i32) -> TaskClass {
        TaskClass {
            cpu_milli: 4000,
            mem_mib: 0,
            gpu_milli,
            num_gpu: 1,
            models: ModelSet::ANY,
            weight: 0.5,
        }
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
        let w = typical_workload(tasks, 95);
        assert_eq!(w.classes.len(), 1);
        assert!((w.classes[0].weight - 1.0).abs() < 1e-12);
    }

    #[test]
    fn frag_score_prefers_exact_fit() {
        let w = TypicalWorkload {
            classes: vec![class(500), class(1000)],
        };
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
        let s = frag_score(&v, &task, &w, &cfg, cpu_per_gpu_milli(&w), &mut memo).map(|s| s.gpu);
        assert_eq!(s, Some(Some(0)));
    }
}
