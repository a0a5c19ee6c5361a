//! GPU Clustering: keep sharing and whole-GPU tasks on separate nodes.
//! GPU: best fit.

use super::{Placement, Policy, place_with_best_fit_gpus};
use crate::Task;
use crate::cluster::{Cluster, NodeState, cluster_tag};

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
        place_with_best_fit_gpus(cluster, ranks, task, feasible, |n| {
            Some(clustering_score(&cluster.nodes[n], task) as f64)
        })
    }
}
