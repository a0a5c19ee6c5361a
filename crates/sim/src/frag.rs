//! The FGD method on top of the fragmentation measure: building the typical workload from
//! a trace.
//!
//! The measure (typical workload M, F_n(M), its memo) is `hami_core::frag`, and the scores
//! (FGD's quantised score, our `hami-frag` score) are `hami_core::frag::score`: the live
//! placement engine's `frag` policies share both. They are re-exported here so the
//! simulator reads one module. GPU shares are in milli-GPU (1000 = one whole GPU).

use rustc_hash::FxHashMap;

pub use hami_core::frag::score::{
    FragScoreConfig, FragScorer, FragScoring, NodeScore, Primary, Secondary, TaskShape,
    after_place, cpu_per_gpu_milli, cpu_per_gpu_milli_on, cpu_stranded, fgd_score, model_pressure,
    reweighted_by_gpu,
};
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
