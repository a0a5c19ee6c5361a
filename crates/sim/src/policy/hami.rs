//! HAMi's own binpack / spread (`docs/protocol.md#scores`), with openb shares
//! mapped to gpucores % = d/10 and gpumem % = d/10
//! (`docs/simulator.md#mapping-shares-onto-hamis-model`).
//!
//! Node score = 10·(Σused slots/Σslots + Σused cores/Σcores + Σused mem/Σmem)
//! before placement; binpack takes the highest, spread the lowest (CPU is not
//! scored). Device score = 10·((used+1)/slots + (usedcores+req)/100 +
//! (usedmem+req)/100); devices are sorted ascending (binpack) or descending
//! (spread) with a stable sort and walked from the end, as HAMi's NVIDIA Fit
//! does. HAMi breaks equal node scores by goroutine timing; we use the rank.

use super::{Placement, Policy, pick_best};
use crate::Task;
use crate::cluster::{Cluster, GPU_MILLI, NodeState};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HamiMode {
    Binpack,
    Spread,
}

#[derive(Debug)]
pub struct Hami {
    mode: HamiMode,
}

impl Hami {
    pub fn new(mode: HamiMode) -> Self {
        Self { mode }
    }
}

/// HAMi node score before placement.
pub fn hami_node_score(node: &NodeState, slots: u16) -> f64 {
    let g = f64::from(node.gpu_count);
    if g == 0.0 || slots == 0 {
        return 0.0;
    }
    let used_slots: f64 = node
        .gpus()
        .iter()
        .zip(&node.gpu_tasks)
        .map(|(_, &t)| f64::from(t))
        .sum();
    let used_milli = (i64::from(node.gpu_count) * i64::from(GPU_MILLI) - node.idle()) as f64;
    let cap = g * f64::from(GPU_MILLI);
    10.0 * (used_slots / (g * f64::from(slots)) + 2.0 * used_milli / cap)
}

/// HAMi device score for a request of `milli` (cores % and memory % = milli/10).
pub fn hami_device_score(node: &NodeState, g: usize, milli: i32, slots: u16) -> f64 {
    let used = f64::from(node.gpu_tasks[g]);
    let used_share = f64::from(GPU_MILLI - node.gpu_free[g] + milli) / f64::from(GPU_MILLI);
    10.0 * ((used + 1.0) / f64::from(slots.max(1)) + 2.0 * used_share)
}

/// HAMi GPU choice: order devices by score (stable), walk from the end and
/// take the first `num` that fit.
pub fn hami_gpus(node: &NodeState, task: &Task, slots: u16, mode: HamiMode) -> u16 {
    if task.num == 0 {
        return 0;
    }
    let mut order: Vec<(f64, usize)> = (0..usize::from(node.gpu_count))
        .map(|g| (hami_device_score(node, g, task.milli, slots), g))
        .collect();
    match mode {
        HamiMode::Binpack => order.sort_by(|a, b| a.0.total_cmp(&b.0)),
        HamiMode::Spread => order.sort_by(|a, b| b.0.total_cmp(&a.0)),
    }
    let mut mask = 0u16;
    let mut left = task.num;
    for &(_, g) in order.iter().rev() {
        if left == 0 {
            break;
        }
        if node.gpu_fits(g, task.milli, slots) {
            mask |= 1 << g;
            left -= 1;
        }
    }
    mask
}

impl Policy for Hami {
    fn place(
        &mut self,
        cluster: &Cluster,
        ranks: &[u32],
        task: &Task,
        feasible: &[u32],
    ) -> Option<Placement> {
        let sign = if self.mode == HamiMode::Binpack {
            1.0
        } else {
            -1.0
        };
        let node = pick_best(feasible, ranks, |n| {
            Some(sign * hami_node_score(&cluster.nodes[n], cluster.slots))
        })?;
        Some(Placement {
            node,
            gpus: hami_gpus(&cluster.nodes[node], task, cluster.slots, self.mode),
        })
    }
}
