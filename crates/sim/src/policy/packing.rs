//! GPU Packing: prefer an already shared GPU, then a free GPU on a used node,
//! then an idle node (smaller idle nodes first). GPU: best fit.

use super::{Placement, Policy, place_with_best_fit_gpus};
use crate::Task;
use crate::cluster::{Cluster, GPU_MILLI, NodeState};

#[derive(Debug, Default)]
pub struct Packing;

pub fn packing_score(node: &NodeState, task: &Task, slots: u16) -> i64 {
    if task.num == 0 {
        return 0;
    }
    let g = i64::from(node.gpu_count);
    if node.gpus().iter().all(|&r| r == GPU_MILLI) {
        return (33 - g).max(g);
    }
    // The k GPUs a best-fit choice would take: ascending free share.
    let mut fitting: Vec<i32> = (0..usize::from(node.gpu_count))
        .filter(|&i| node.gpu_fits(i, task.milli, slots))
        .map(|i| node.gpu_free[i])
        .collect();
    fitting.sort_unstable();
    let chosen = &fitting[..fitting.len().min(task.num as usize)];
    let full = chosen.iter().filter(|&&r| r == GPU_MILLI).count() as i64;
    if full > 0 {
        return (50 - full).max(33);
    }
    let pct: i64 = chosen.iter().map(|&r| i64::from(r) * 100 / 1000).sum();
    (100 - pct / 10).max(50)
}

impl Policy for Packing {
    fn place(
        &mut self,
        cluster: &Cluster,
        ranks: &[u32],
        task: &Task,
        feasible: &[u32],
    ) -> Option<Placement> {
        place_with_best_fit_gpus(cluster, ranks, task, feasible, |n| {
            Some(packing_score(&cluster.nodes[n], task, cluster.slots) as f64)
        })
    }
}
