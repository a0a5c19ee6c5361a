//! Our fragmentation-aware policy: the scoring lives in `crate::frag`; this adapter
//! adds caching, GPU masks and, when configured (`pair=`), the supply-aware pairing term
//! (`docs/simulator.md#supply-aware-pairing`), which reads the whole cluster and so is added
//! after the per-node cache.

use super::{Placement, Policy, PolicyInit, ScoreCache, pick_best};
use crate::Task;
use crate::cluster::{Cluster, lowest_fitting_gpus};
use crate::frag::{FragScoreConfig, FragScorer, reweighted_by_gpu, typical_workload};
use hami_core::frag::pairing::{FreeShares, HoleSupply, Pairing};
use std::sync::Arc;

#[derive(Debug)]
pub struct HamiFrag {
    scorer: FragScorer,
    cache: ScoreCache,
    /// The pairing term, its demand the sharing tasks seen so far.
    pairing: Pairing,
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
            pairing: Pairing {
                weight: cfg.pair,
                horizon: cfg.pair_horizon,
                matching: cfg.pair_matching,
                blend: cfg.pair_blend,
                supply: Arc::new(HoleSupply::default()),
            },
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
            let res = this.scorer.score(&node.view(), &shape);
            let (score, gpu) = res.map_or((None, None), |s| (Some(s.score), s.gpu));
            let delta = res.map_or(0.0, |s| s.delta);
            this.cache
                .put(n, task.type_id, node.version, score, gpu, delta);
            (score, gpu)
        };
        let node = if self.pairing.weight != 0.0 && task.is_sharing() {
            Arc::make_mut(&mut self.pairing.supply).observe(task.milli);
            let bonus = self.pairing.bonus(&FreeShares::of(
                cluster.nodes.iter().flat_map(|n| n.gpus().iter().copied()),
            ));
            pick_best(feasible, ranks, |n| {
                let (score, gpu) = score_of(n, self);
                let (score, g) = (score?, gpu?);
                let free = cluster.nodes[n].gpu_free[g];
                let delta = self.cache.delta(n, task.type_id);
                let scoring = self.scorer.scoring();
                Some(bonus.rank(score, delta, (free, free - task.milli), |d| {
                    scoring.primary(d)
                }))
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
