//! Dot-product (Tetris-style): node vector (free CPU/128000, free GPU/8000)
//! against the task vector; a smaller product scores higher. GPU: best fit.

use super::{Placement, Policy, place_with_best_fit_gpus};
use crate::Task;
use crate::cluster::{Cluster, NodeState};

#[derive(Debug, Default)]
pub struct DotProd;

/// ⌊100·(1 − v·u / 2)⌋ with max-spec normalisation (128 CPUs, 8 GPUs).
pub fn dotprod_score(node: &NodeState, task: &Task) -> i64 {
    let v_cpu = node.cpu_free as f64 / 128_000.0;
    let v_gpu = node.idle() as f64 / 8000.0;
    let u_cpu = task.cpu as f64 / 128_000.0;
    let u_gpu = task.gpu_request() as f64 / 8000.0;
    let dot = v_cpu * u_cpu + v_gpu * u_gpu;
    (100.0 * (1.0 - dot / 2.0)) as i64
}

impl Policy for DotProd {
    fn place(
        &mut self,
        cluster: &Cluster,
        ranks: &[u32],
        task: &Task,
        feasible: &[u32],
    ) -> Option<Placement> {
        place_with_best_fit_gpus(cluster, ranks, task, feasible, |n| {
            Some(dotprod_score(&cluster.nodes[n], task) as f64)
        })
    }
}
