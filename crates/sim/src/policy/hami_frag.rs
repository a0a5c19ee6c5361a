//! Our fragmentation-aware policy: the scoring lives in `crate::frag`; this adapter
//! adds caching and GPU masks.

use super::{Placement, Policy, PolicyInit, ScoreCache, pick_best};
use crate::Task;
use crate::cluster::{Cluster, lowest_fitting_gpus};
use crate::frag::{FragScoreConfig, FragScorer, reweighted_by_gpu, typical_workload};

#[derive(Debug)]
pub struct HamiFrag {
    scorer: FragScorer,
    cache: ScoreCache,
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
        let node = pick_best(feasible, ranks, |n| score_of(n, self).0)?;
        let gpus = if task.is_sharing() {
            score_of(node, self).1.map_or(0, |g| 1u16 << g)
        } else {
            lowest_fitting_gpus(&cluster.nodes[node], task, cluster.slots)
        };
        Some(Placement { node, gpus })
    }
}
