//! Best-fit: least free CPU and GPU after placement, with the scheduler
//! framework's min-max normalisation (integer division creates the ties the
//! paper's runs had). GPU: best fit.

use super::{Placement, Policy, place_with_best_fit_gpus};
use crate::Task;
use crate::cluster::{Cluster, NodeState};

#[derive(Debug, Default)]
pub struct BestFit {
    raw: Vec<i64>,
}

/// ⌊100·(1 − [0.5·(c_free − c)/128000 + 0.5·(L − req)/8000])⌋.
pub fn bestfit_raw(node: &NodeState, task: &Task) -> i64 {
    let cpu = 0.5 * (node.cpu_free - task.cpu) as f64 / 128_000.0;
    let gpu = 0.5 * (node.idle() - task.gpu_request()) as f64 / 8000.0;
    (100.0 * (1.0 - (cpu + gpu))) as i64
}

impl Policy for BestFit {
    fn place(
        &mut self,
        cluster: &Cluster,
        ranks: &[u32],
        task: &Task,
        feasible: &[u32],
    ) -> Option<Placement> {
        self.raw.clear();
        self.raw.resize(cluster.nodes.len(), 0);
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        for &n in feasible {
            let r = bestfit_raw(&cluster.nodes[n as usize], task);
            self.raw[n as usize] = r;
            lo = lo.min(r);
            hi = hi.max(r);
        }
        let raw = &self.raw;
        place_with_best_fit_gpus(cluster, ranks, task, feasible, |n| {
            let norm = if hi > lo {
                (raw[n] - lo) * 100 / (hi - lo)
            } else {
                0
            };
            Some(norm as f64)
        })
    }
}
