//! GPU Clustering: keep sharing and whole-GPU tasks on separate nodes.
//! GPU: best fit.

use super::{Placement, Policy, pick_best};
use crate::Task;
use crate::cluster::{Cluster, NodeState, best_fit_gpus, cluster_tag};

#[derive(Debug, Default)]
pub struct Clustering;

pub fn clustering_score(node: &NodeState, task: &Task) -> i64 {
    if task.num == 0 {
        return 0;
    }
    let tag = cluster_tag(task);
    let base = (25 * (8000 - node.idle())) / 8000;
    if node.tags == tag {
        75 + base
    } else if node.tags & tag != 0 {
        50 + base
    } else if node.tags == 0 {
        25 + base
    } else {
        base
    }
}

impl Policy for Clustering {
    fn place(
        &mut self,
        cluster: &Cluster,
        ranks: &[u32],
        task: &Task,
        feasible: &[u32],
    ) -> Option<Placement> {
        let node = pick_best(feasible, ranks, |n| {
            Some(clustering_score(&cluster.nodes[n], task) as f64)
        })?;
        Some(Placement {
            node,
            gpus: best_fit_gpus(&cluster.nodes[node], task, cluster.slots),
        })
    }
}
