//! Our fragmentation-aware policy: the scoring lives in `crate::frag`; this adapter
//! adds caching, GPU masks and, when configured (`pair=`), the supply-aware pairing term
//! (`docs/simulator.md#supply-aware-pairing`), which reads the whole cluster and so is added
//! after the per-node cache.

use super::{Placement, Policy, PolicyInit, ScoreCache, pick_best};
use crate::Task;
use crate::cluster::{Cluster, lowest_fitting_gpus};
use crate::frag::{FragScoreConfig, FragScorer, reweighted_by_gpu, typical_workload};
use hami_core::frag::pairing::{FreeShares, HoleSupply, Matching};

#[derive(Debug)]
pub struct HamiFrag {
    scorer: FragScorer,
    cache: ScoreCache,
    /// Sharing tasks seen so far (for the pairing term).
    supply: HoleSupply,
    pair: f64,
    pair_horizon: f64,
    pair_matching: Matching,
}

impl HamiFrag {
    pub fn new(init: &PolicyInit<'_>, cfg: FragScoreConfig) -> Self {
        let mut workload = if cfg.coverage_pct == crate::TYPICAL_COVERAGE_PCT {
            init.workload.clone()
        } else {
            typical_workload(
                init.pods.iter().map(|p| (p.class_key(), p.memory_mib)),
                cfg.coverage_pct,
            )
        };
        if let Some(bias) = cfg.gpu_weighting {
            workload = reweighted_by_gpu(&workload, bias);
        }
        Self {
            scorer: FragScorer::new(workload, cfg, init.gpus_per_model),
            cache: ScoreCache::new(init.n_nodes, init.n_types),
            supply: HoleSupply::default(),
            pair: cfg.pair,
            pair_horizon: cfg.pair_horizon,
            pair_matching: cfg.pair_matching,
        }
    }
}

impl Policy for HamiFrag {
    fn place(
        &mut self,
        cluster: &Cluster,
        ranks: &[u32],
        task: &Task,
        feasible: &[u32],
    ) -> Option<Placement> {
        let shape = task.shape();
        let score_of = |n: usize, this: &mut Self| -> (Option<f64>, Option<usize>) {
            let node = &cluster.nodes[n];
            if let Some(hit) = this.cache.get(n, task.type_id, node.version) {
                return hit;
            }
            let res = this
                .scorer
                .score(&node.view(), &shape)
                .map_or((None, None), |s| (Some(s.score), s.gpu));
            this.cache.put(n, task.type_id, node.version, res.0, res.1);
            res
        };
        let node = if self.pair != 0.0 && task.is_sharing() {
            self.supply.observe(task.milli);
            let waste = self.supply.waste_matched(
                &FreeShares::of(cluster.nodes.iter().flat_map(|n| n.gpus().iter().copied())),
                self.pair_horizon,
                self.pair_matching,
            );
            let weight = self.pair;
            pick_best(feasible, ranks, |n| {
                let (score, gpu) = score_of(n, self);
                let gain = gpu.map_or(0.0, |g| {
                    let free = cluster.nodes[n].gpu_free[g];
                    waste.gain(free, free - task.milli)
                });
                score.map(|s| s + weight * gain)
            })?
        } else {
            pick_best(feasible, ranks, |n| score_of(n, self).0)?
        };
        let gpus = if task.is_sharing() {
            score_of(node, self).1.map_or(0, |g| 1u16 << g)
        } else {
            lowest_fitting_gpus(&cluster.nodes[node], task, cluster.slots)
        };
        Some(Placement { node, gpus })
    }
}
