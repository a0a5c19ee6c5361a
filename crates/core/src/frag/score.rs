//! Our fragmentation-aware score (`docs/simulator.md#our-policy-hami-frag`): FGD's quantised
//! fragmentation change plus two terms FGD lacks, a CPU-stranding term and a GPU-model
//! scarcity term, each computed per GPU model.
//!
//! One score, two users: the simulator's `hami-frag` policy and the placement engine's
//! `frag` policies ([`super::live`]) call [`FragScoring::score`] / [`FragScoring::phi`], so the
//! live scheduler places exactly as the simulator's policy does.
//!
//! ```text
//! Φ(n)  = F_n(M) + λ · max(0, L_n − cpu_free_n / ρ_t) − μ · π_t · L_n      t = model of n
//! score = ⌊100 · σ((Φ(n) − Φ(n′)) / 1000)⌋                                  n′ = n after the placement
//! ```
//!
//! ρ_t is the CPU per milli-GPU of the classes of M that may run on model t; π_t the share of
//! model t's GPUs that the classes of M restricted to a few models would take at full load
//! (capped at 1). GPU shares are in milli-GPU (1000 = one whole GPU).

use super::pairing::{Blend, Matching};
use super::{FragMemo, MEMO_MAX_GPUS, ModelSet, NodeView, TaskClass, TypicalWorkload};

/// Model ids a [`ModelSet`] can name.
pub const MODEL_IDS: usize = 64;

/// FGD's quantised score for a fragmentation change: ⌊100·σ(Δ/1000)⌋ with
/// Δ = F(before) − F(after), truncated like Go's `int64()`.
pub fn fgd_score(before: f64, after: f64) -> i64 {
    quantised(before - after)
}

/// ⌊100·σ(Δ/1000)⌋ of a fragmentation change Δ in milli-GPU.
pub fn quantised(delta: f64) -> i64 {
    let sigmoid = 1.0 / (1.0 + (-delta / 1000.0).exp());
    (100.0 * sigmoid) as i64
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

/// ρ: expected CPU milli consumed per milli-GPU of demand, over the classes of M that
/// `allowed` keeps (CPU-only classes always count: they also eat GPU nodes' CPU).
fn cpu_per_gpu_milli_where(
    workload: &TypicalWorkload,
    allowed: impl Fn(&TaskClass) -> bool,
) -> f64 {
    let (mut cpu, mut gpu) = (0.0, 0.0);
    for c in workload.classes.iter().filter(|c| allowed(c)) {
        cpu += c.weight * c.cpu_milli as f64;
        gpu += c.weight * f64::from(c.num_gpu) * f64::from(c.gpu_milli);
    }
    if gpu > 0.0 { cpu / gpu } else { 0.0 }
}

/// ρ over the whole mix.
pub fn cpu_per_gpu_milli(workload: &TypicalWorkload) -> f64 {
    cpu_per_gpu_milli_where(workload, |_| true)
}

/// ρ_t: ρ over the classes that may run on GPU model `model`.
pub fn cpu_per_gpu_milli_on(workload: &TypicalWorkload, model: u8) -> f64 {
    cpu_per_gpu_milli_where(workload, |c| c.models.allows(model))
}

/// π_t per model id: the share of model t's GPUs that M's model-restricted classes would
/// take if M filled the whole cluster, capped at 1. A restricted class's demand is split
/// over the models it allows in proportion to their GPUs. `gpus_per_model[t]` is the
/// cluster's GPU count of model t (missing or 0: no such GPUs, π = 0).
pub fn model_pressure(workload: &TypicalWorkload, gpus_per_model: &[i64]) -> [f64; MODEL_IDS] {
    let mut out = [0.0; MODEL_IDS];
    let cap = |t: usize| gpus_per_model.get(t).copied().unwrap_or(0).max(0) as f64;
    let total_cap: f64 = (0..MODEL_IDS).map(cap).sum();
    let demand = |c: &TaskClass| c.weight * f64::from(c.num_gpu) * f64::from(c.gpu_milli);
    let total_demand: f64 = workload.classes.iter().map(demand).sum();
    if total_cap <= 0.0 || total_demand <= 0.0 {
        return out;
    }
    let mut restricted = [0.0; MODEL_IDS];
    for c in workload
        .classes
        .iter()
        .filter(|c| c.models != ModelSet::ANY)
    {
        let allowed: Vec<usize> = (0..MODEL_IDS)
            .filter(|&t| c.models.allows(t as u8) && cap(t) > 0.0)
            .collect();
        let allowed_cap: f64 = allowed.iter().map(|&t| cap(t)).sum();
        if allowed_cap <= 0.0 {
            continue;
        }
        for &t in &allowed {
            restricted[t] += demand(c) * cap(t) / allowed_cap;
        }
    }
    for (t, p) in out.iter_mut().enumerate() {
        if cap(t) > 0.0 {
            *p = ((restricted[t] / total_demand) / (cap(t) / total_cap)).min(1.0);
        }
    }
    out
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

/// Tuning of our score, kept as plain data so the live scheduler can expose it as
/// configuration.
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
    /// ρ per GPU model (the classes that may run on the node's model) instead of one ρ
    /// for the whole mix.
    pub model_rho: bool,
    /// μ: weight of the model-scarcity term (0 = none).
    pub scarcity: f64,
    /// Coverage of the typical workload (the paper uses 95).
    pub coverage_pct: u32,
    /// When set to `b`, class weights become p_m·(num·d/1000 + b): weight by
    /// GPU demand (the allocation metric) with `b` for CPU-only classes.
    pub gpu_weighting: Option<f64>,
    /// Weight of the supply-aware pairing term ([`super::pairing`]) in score points per GPU
    /// (0 = none). It reads the whole cluster's holes, so it is added to a node's rank after
    /// the per-node score (the simulator's `hami-frag`, the engine's node policy `frag`).
    pub pair: f64,
    /// The pairing term's horizon: future sharing tasks expected per sharing task seen.
    pub pair_horizon: f64,
    /// How the pairing term matches expected fillers to holes ([`super::pairing::Matching`]).
    pub pair_matching: Matching,
    /// Where the pairing term enters the score ([`Blend`]).
    pub pair_blend: Blend,
}

impl Default for FragScoreConfig {
    fn default() -> Self {
        // Chosen by sweeps over the openb traces (docs/simulator.md).
        Self {
            mem_aware: true,
            primary: Primary::Quantised,
            secondary: Secondary::None,
            weight: 0.0,
            gpu_best_fit: false,
            strand: 0.25,
            model_rho: true,
            scarcity: 0.5,
            coverage_pct: 95,
            gpu_weighting: None,
            pair: 5.0,
            pair_horizon: 4.0,
            pair_matching: Matching::Pooled,
            pair_blend: Blend::Delta,
        }
    }
}

impl FragScoreConfig {
    /// Parses `key=value` pairs separated by commas, e.g.
    /// `primary=raw,secondary=util,weight=0.5,mem=1,gpu=bestfit`; unknown keys
    /// or values are errors.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut cfg = Self::default();
        let num = |k: &str, v: &str| -> Result<f64, String> {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("bad {k} {v:?}"))
        };
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
                ("strand", l) => cfg.strand = num(k, l)?,
                ("rho", "model") => cfg.model_rho = true,
                ("rho", "global") => cfg.model_rho = false,
                ("scarcity", m) => cfg.scarcity = num(k, m)?,
                ("coverage", c) => {
                    cfg.coverage_pct = c.parse().map_err(|_| format!("bad coverage {c:?}"))?
                }
                ("gpuweight", g) => cfg.gpu_weighting = Some(num(k, g)?),
                ("pair", w) => cfg.pair = num(k, w)?,
                ("horizon", h) => cfg.pair_horizon = num(k, h)?,
                ("match", "pooled") => cfg.pair_matching = Matching::Pooled,
                ("match", "greedy") => cfg.pair_matching = Matching::Greedy,
                ("blend", "delta") => cfg.pair_blend = Blend::Delta,
                ("blend", "rank") => cfg.pair_blend = Blend::Rank,
                ("secondary", "none") => cfg.secondary = Secondary::None,
                ("secondary", "util") => cfg.secondary = Secondary::Utilisation,
                ("secondary", "idle") => cfg.secondary = Secondary::LeastIdle,
                ("weight", w) => cfg.weight = num(k, w)?,
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
    /// Φ(n) − Φ(n′) of that placement in milli-GPU, before the primary term ranks it (what
    /// the pairing term's [`super::pairing::Blend::Delta`] adds to).
    pub delta: f64,
}

/// The task being placed, as plain data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskShape {
    pub cpu_milli: i64,
    pub mem_mib: i64,
    pub gpu_milli: i32,
    pub num_gpu: u32,
}

/// The score's fixed parts: M, the tuning and the per-model constants derived from them.
/// Immutable, so threads share one; each brings its own [`FragMemo`].
#[derive(Debug, Clone)]
pub struct FragScoring {
    workload: TypicalWorkload,
    cfg: FragScoreConfig,
    /// ρ_t per model id (all equal without `model_rho`).
    rho: [f64; MODEL_IDS],
    /// μ·π_t per model id.
    scarcity: [f64; MODEL_IDS],
}

impl FragScoring {
    /// `gpus_per_model[t]`: the cluster's GPUs of model id t (for the scarcity term).
    pub fn new(workload: TypicalWorkload, cfg: FragScoreConfig, gpus_per_model: &[i64]) -> Self {
        let global = cpu_per_gpu_milli(&workload);
        let rho = std::array::from_fn(|t| {
            if cfg.model_rho {
                cpu_per_gpu_milli_on(&workload, t as u8)
            } else {
                global
            }
        });
        let scarcity = if cfg.scarcity != 0.0 {
            model_pressure(&workload, gpus_per_model).map(|p| cfg.scarcity * p)
        } else {
            [0.0; MODEL_IDS]
        };
        Self {
            workload,
            cfg,
            rho,
            scarcity,
        }
    }

    pub fn workload(&self) -> &TypicalWorkload {
        &self.workload
    }

    pub fn config(&self) -> &FragScoreConfig {
        &self.cfg
    }

    /// ρ_t of model id `model`.
    pub fn rho(&self, model: u8) -> f64 {
        self.rho[usize::from(model) % MODEL_IDS]
    }

    /// μ·π_t of model id `model`.
    pub fn scarcity(&self, model: u8) -> f64 {
        self.scarcity[usize::from(model) % MODEL_IDS]
    }

    /// A memo matching this scoring's settings.
    pub fn memo(&self) -> FragMemo {
        FragMemo::new(self.cfg.mem_aware)
    }

    /// Φ(n): F_n(M) plus the stranding and scarcity terms.
    pub fn phi(&self, node: &NodeView<'_>, memo: &mut FragMemo) -> f64 {
        let f = memo.frag(node, &self.workload);
        self.phi_from(f, node.model, node.gpu_free, node.cpu_free)
    }

    fn phi_from(&self, frag: f64, model: u8, gpus: &[i32], cpu_free: i64) -> f64 {
        let mut phi = frag;
        if self.cfg.strand != 0.0 {
            phi += self.cfg.strand * cpu_stranded(gpus, cpu_free, self.rho(model));
        }
        let scarcity = self.scarcity(model);
        if scarcity != 0.0 {
            let idle: i64 = gpus.iter().map(|&r| i64::from(r)).sum();
            phi -= scarcity * idle as f64;
        }
        phi
    }

    /// The primary term of a change Δ = Φ(n) − Φ(n′) in milli-GPU (FGD's quantised score
    /// by default): what nodes, and a sharing task's GPUs on a node, are ranked by.
    pub fn primary(&self, delta: f64) -> f64 {
        match self.cfg.primary {
            Primary::Quantised => quantised(delta) as f64,
            Primary::Raw => delta / 1000.0,
            Primary::Bucket(w) => (delta / f64::from(w.max(1))).floor(),
        }
    }

    /// Scores `task` on `node`: the primary term of Φ(n) − Φ(n′) plus the secondary term.
    /// Returns `None` when the task does not fit the node's GPUs (CPU/memory/model
    /// filtering is the caller's).
    pub fn score(
        &self,
        node: &NodeView<'_>,
        task: &TaskShape,
        memo: &mut FragMemo,
    ) -> Option<NodeScore> {
        let cfg = &self.cfg;
        let cpu_after = node.cpu_free - task.cpu_milli;
        let mem_after = node.mem_free - task.mem_mib;
        let before = self.phi(node, memo);
        let phi_after = |gpus: &[i32], memo: &mut FragMemo| {
            self.phi(
                &NodeView {
                    model: node.model,
                    cpu_free: cpu_after,
                    mem_free: mem_after,
                    gpu_free: gpus,
                },
                memo,
            )
        };
        let idle: i64 = node.gpu_free.iter().map(|&r| i64::from(r)).sum();
        let cap = (node.gpu_free.len() as f64 * 1000.0).max(1.0);
        let primary = |after: f64| -> (f64, f64) {
            let delta = before - after;
            (self.primary(delta), delta)
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
            let mut best: Option<((f64, f64), i32, usize)> = None;
            let mut seen: [(i32, (f64, f64)); MEMO_MAX_GPUS] = [(-1, (0.0, 0.0)); MEMO_MAX_GPUS];
            let mut seen_n = 0usize;
            for (i, &r) in node.gpu_free.iter().enumerate() {
                if r < task.gpu_milli {
                    continue;
                }
                let p = match seen[..seen_n].iter().find(|(v, _)| *v == r) {
                    Some(&(_, p)) => p,
                    None => {
                        let after = after_place(node.gpu_free, task.gpu_milli, 1, Some(i));
                        let p = primary(phi_after(&after, memo));
                        if seen_n < MEMO_MAX_GPUS {
                            seen[seen_n] = (r, p);
                            seen_n += 1;
                        }
                        p
                    }
                };
                let better = match best {
                    None => true,
                    Some(((bp, _), br, _)) => p.0 > bp || (cfg.gpu_best_fit && p.0 == bp && r < br),
                };
                if better {
                    best = Some((p, r, i));
                }
            }
            return best.map(|((p, delta), _, i)| NodeScore {
                score: p + node_term,
                gpu: Some(i),
                delta,
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
        let (p, delta) = primary(phi_after(&after, memo));
        let used = i64::from(task.gpu_milli) * i64::from(need);
        Some(NodeScore {
            score: p + cfg.weight * secondary(used),
            gpu: None,
            delta,
        })
    }
}

/// [`FragScoring`] with a memo of its own, for single-threaded callers (the simulator).
#[derive(Debug)]
pub struct FragScorer {
    scoring: FragScoring,
    memo: FragMemo,
}

impl FragScorer {
    pub fn new(workload: TypicalWorkload, cfg: FragScoreConfig, gpus_per_model: &[i64]) -> Self {
        let scoring = FragScoring::new(workload, cfg, gpus_per_model);
        Self {
            memo: scoring.memo(),
            scoring,
        }
    }

    pub fn scoring(&self) -> &FragScoring {
        &self.scoring
    }

    pub fn workload(&self) -> &TypicalWorkload {
        self.scoring.workload()
    }

    pub fn config(&self) -> &FragScoreConfig {
        self.scoring.config()
    }

    /// Scores `task` on `node`; see [`FragScoring::score`].
    pub fn score(&mut self, node: &NodeView<'_>, task: &TaskShape) -> Option<NodeScore> {
        self.scoring.score(node, task, &mut self.memo)
    }
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
    fn frag_score_prefers_exact_fit() {
        let w = TypicalWorkload {
            classes: vec![class(500), class(1000)],
        };
        let scoring = FragScoring::new(w, FragScoreConfig::default(), &[]);
        let mut memo = scoring.memo();
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
        let s = scoring.score(&v, &task, &mut memo).map(|s| s.gpu);
        assert_eq!(s, Some(Some(0)));
    }

    fn restricted(models: u64, gpu_milli: i32, weight: f64) -> TaskClass {
        TaskClass {
            models: ModelSet(models),
            weight,
            ..class(gpu_milli)
        }
    }

    #[test]
    fn rho_per_model_counts_only_the_classes_allowed_there() {
        // Model 1 only runs the CPU-heavy restricted class; everything runs on model 0.
        let w = TypicalWorkload {
            classes: vec![
                TaskClass {
                    cpu_milli: 1000,
                    ..class(1000)
                },
                TaskClass {
                    cpu_milli: 9000,
                    ..restricted(1 << 1, 1000, 0.5)
                },
            ],
        };
        assert!((cpu_per_gpu_milli(&w) - 5.0).abs() < 1e-12);
        assert!((cpu_per_gpu_milli_on(&w, 0) - 1.0).abs() < 1e-12);
        assert!((cpu_per_gpu_milli_on(&w, 1) - 5.0).abs() < 1e-12);
        let scoring = FragScoring::new(w, FragScoreConfig::default(), &[]);
        assert!((scoring.rho(1) - 5.0).abs() < 1e-12);
        let global = FragScoring::new(
            scoring.workload().clone(),
            FragScoreConfig::parse("rho=global").unwrap_or_default(),
            &[],
        );
        assert!((global.rho(0) - 5.0).abs() < 1e-12);
    }

    #[test]
    fn pressure_is_restricted_demand_over_capacity() {
        // Half of the demand may only use model 1, which has a quarter of the GPUs:
        // model 1 is wanted twice over (capped at 1); model 0 by no restricted class.
        let w = TypicalWorkload {
            classes: vec![class(1000), restricted(1 << 1, 1000, 0.5)],
        };
        let p = model_pressure(&w, &[300, 100]);
        assert_eq!(p[0], 0.0);
        assert_eq!(p[1], 1.0);
        // A restricted class allowed on both models is split by capacity: 0.5·(3/4)
        // of the demand on 3/4 of the GPUs.
        let w = TypicalWorkload {
            classes: vec![class(1000), restricted(0b11, 1000, 0.5)],
        };
        let p = model_pressure(&w, &[300, 100]);
        assert!((p[0] - 0.5).abs() < 1e-12, "{p:?}");
        assert!((p[1] - 0.5).abs() < 1e-12, "{p:?}");
        // Unknown capacity: no pressure.
        assert!(model_pressure(&w, &[]).iter().all(|&x| x == 0.0));
    }

    #[test]
    fn pairing_is_on_in_the_delta_by_default_and_set_by_its_keys() {
        let d = FragScoreConfig::default();
        assert_eq!(
            (d.pair, d.pair_horizon, d.pair_blend),
            (5.0, 4.0, Blend::Delta)
        );
        let cfg = FragScoreConfig::parse("pair=10,horizon=2,blend=rank").unwrap_or_default();
        assert_eq!(
            (cfg.pair, cfg.pair_horizon, cfg.pair_blend),
            (10.0, 2.0, Blend::Rank)
        );
        assert!(FragScoreConfig::parse("blend=after").is_err());
        assert!(FragScoreConfig::parse("pair=x").is_err());
        assert!(FragScoreConfig::parse("horizon=inf").is_err());
    }

    #[test]
    fn scarcity_steers_flexible_tasks_away_from_wanted_models() {
        let w = TypicalWorkload {
            classes: vec![class(1000), restricted(1 << 1, 1000, 0.5)],
        };
        let cfg = FragScoreConfig::parse("scarcity=1,strand=0").unwrap_or_default();
        let scoring = FragScoring::new(w, cfg, &[300, 100]);
        let mut memo = scoring.memo();
        let task = TaskShape {
            cpu_milli: 0,
            mem_mib: 0,
            gpu_milli: 1000,
            num_gpu: 1,
        };
        let gpus = [1000, 1000];
        let on = |model: u8, memo: &mut FragMemo| {
            let v = NodeView {
                model,
                cpu_free: 64000,
                mem_free: 0,
                gpu_free: &gpus,
            };
            scoring.score(&v, &task, memo).map(|s| s.score)
        };
        let (plain, wanted) = (on(0, &mut memo), on(1, &mut memo));
        assert!(plain > wanted, "{plain:?} vs {wanted:?}");
    }
}
