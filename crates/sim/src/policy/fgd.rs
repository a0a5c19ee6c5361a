//! FGD (`docs/simulator.md#fgd-score`): the node and GPU whose placement increases the
//! expected fragmentation least, scored ⌊100·σ(Δ/1000)⌋.

use super::{Placement, Policy, PolicyInit, ScoreCache, pick_best};
use crate::Task;
use crate::cluster::{Cluster, NodeState, lowest_fitting_gpus};
use crate::frag::{FragMemo, MEMO_MAX_GPUS, NodeView, TypicalWorkload, after_place, fgd_score};

#[derive(Debug)]
pub struct Fgd {
    workload: TypicalWorkload,
    memo: FragMemo,
    cache: ScoreCache,
}

impl Fgd {
    pub fn new(init: &PolicyInit<'_>) -> Self {
        Self {
            workload: init.workload.clone(),
            memo: FragMemo::new(false),
            cache: ScoreCache::new(init.n_nodes, init.n_types),
        }
    }
}

/// FGD's score of one node and, for sharing tasks, the chosen GPU (the first
/// index reaching the best score).
pub fn fgd_node_score(
    node: &NodeState,
    task: &Task,
    slots: u16,
    workload: &TypicalWorkload,
    memo: &mut FragMemo,
) -> (Option<f64>, Option<usize>) {
    let before = memo.frag(&node.view(), workload);
    let cpu_after = node.cpu_free - task.cpu;
    if task.is_sharing() {
        let mut best: Option<(i64, usize)> = None;
        let mut seen: [(i32, i64); MEMO_MAX_GPUS] = [(-1, 0); MEMO_MAX_GPUS];
        let mut seen_n = 0;
        for g in 0..usize::from(node.gpu_count) {
            if !node.gpu_fits(g, task.milli, slots) {
                continue;
            }
            let r = node.gpu_free[g];
            // Equal free shares give equal scores: evaluate each value once.
            let score = match seen[..seen_n].iter().find(|(v, _)| *v == r) {
                Some(&(_, s)) => s,
                None => {
                    let after = after_place(node.gpus(), task.milli, 1, Some(g));
                    let view = NodeView {
                        model: node.model,
                        cpu_free: cpu_after,
                        mem_free: node.mem_free,
                        gpu_free: &after,
                    };
                    let s = fgd_score(before, memo.frag(&view, workload));
                    if seen_n < MEMO_MAX_GPUS {
                        seen[seen_n] = (r, s);
                        seen_n += 1;
                    }
                    s
                }
            };
            if best.is_none_or(|(bs, _)| score > bs) {
                best = Some((score, g));
            }
        }
        return match best {
            Some((s, g)) => (Some(s as f64), Some(g)),
            None => (None, None),
        };
    }
    let after = after_place(node.gpus(), task.milli, task.num, None);
    let view = NodeView {
        model: node.model,
        cpu_free: cpu_after,
        mem_free: node.mem_free,
        gpu_free: &after,
    };
    (
        Some(fgd_score(before, memo.frag(&view, workload)) as f64),
        None,
    )
}

impl Policy for Fgd {
    fn place(
        &mut self,
        cluster: &Cluster,
        ranks: &[u32],
        task: &Task,
        feasible: &[u32],
    ) -> Option<Placement> {
        let gpu_of = |n: usize, this: &mut Self| -> (Option<f64>, Option<usize>) {
            let node = &cluster.nodes[n];
            if let Some(hit) = this.cache.get(n, task.type_id, node.version) {
                return hit;
            }
            let res = fgd_node_score(node, task, cluster.slots, &this.workload, &mut this.memo);
            this.cache
                .put(n, task.type_id, node.version, res.0, res.1, 0.0);
            res
        };
        let node = pick_best(feasible, ranks, |n| gpu_of(n, self).0)?;
        let state = &cluster.nodes[node];
        let gpus = if task.is_sharing() {
            gpu_of(node, self).1.map_or(0, |g| 1u16 << g)
        } else {
            lowest_fitting_gpus(state, task, cluster.slots)
        };
        Some(Placement { node, gpus })
    }
}
