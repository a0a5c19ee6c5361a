//! Cluster state, feasibility filter and bookkeeping (`docs/simulator.md#placement`).

use crate::Task;
use crate::frag::NodeView;
use crate::trace::NodeRecord;

/// Most GPUs per node the simulator supports (the openb nodes have ≤ 8).
pub const MAX_GPUS: usize = 8;

/// Full GPU in milli.
pub const GPU_MILLI: i32 = 1000;

/// GPU Clustering tag of a task: bit 0 = "share-gpu", bit k = "k-gpu"
/// (whole-GPU tasks are tagged by their GPU count, so 1-, 2- and 8-GPU tasks
/// are different clusters).
pub fn cluster_tag(task: &Task) -> u16 {
    if task.num == 0 {
        0
    } else if task.is_sharing() {
        1
    } else {
        1 << task.num.min(15)
    }
}

/// Mutable state of one node.
#[derive(Debug, Clone)]
pub struct NodeState {
    pub cpu_free: i64,
    pub mem_free: i64,
    pub model: u8,
    pub gpu_count: u8,
    pub gpu_free: [i32; MAX_GPUS],
    /// Tasks per GPU (HAMi "used slots").
    pub gpu_tasks: [u16; MAX_GPUS],
    /// Union of the GPU Clustering tags of the tasks on the node.
    pub tags: u16,
    /// Bumped on every change so policies can cache per-node scores.
    pub version: u32,
}

impl NodeState {
    pub fn new(rec: &NodeRecord) -> Self {
        let mut gpu_free = [0; MAX_GPUS];
        for g in gpu_free.iter_mut().take(usize::from(rec.gpus)) {
            *g = GPU_MILLI;
        }
        Self {
            cpu_free: rec.cpu_milli,
            mem_free: rec.memory_mib,
            model: rec.model,
            gpu_count: rec.gpus,
            gpu_free,
            gpu_tasks: [0; MAX_GPUS],
            tags: 0,
            version: 1,
        }
    }

    pub fn gpus(&self) -> &[i32] {
        &self.gpu_free[..usize::from(self.gpu_count)]
    }

    /// Σ free milli (L_n).
    pub fn idle(&self) -> i64 {
        self.gpus().iter().map(|&r| i64::from(r)).sum()
    }

    pub fn view(&self) -> NodeView<'_> {
        NodeView {
            model: self.model,
            cpu_free: self.cpu_free,
            mem_free: self.mem_free,
            gpu_free: self.gpus(),
        }
    }

    /// Whether GPU `g` can take a share of `milli` under the slot cap.
    pub fn gpu_fits(&self, g: usize, milli: i32, slots: u16) -> bool {
        self.gpu_free[g] >= milli && self.gpu_tasks[g] < slots
    }

    /// The feasibility test of `docs/simulator.md#placement`, plus HAMi's per-GPU slot cap
    /// (non-binding at the default of 20 because the smallest share is 50 milli).
    pub fn feasible(&self, task: &Task, slots: u16) -> bool {
        if self.cpu_free < task.cpu || self.mem_free < task.mem {
            return false;
        }
        if task.num == 0 {
            return true;
        }
        if self.gpu_count == 0 || !task.models.allows(self.model) {
            return false;
        }
        let mut fit = 0u32;
        for g in 0..usize::from(self.gpu_count) {
            if self.gpu_fits(g, task.milli, slots) {
                fit += 1;
                if fit >= task.num {
                    return true;
                }
            }
        }
        false
    }
}

/// The whole cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub nodes: Vec<NodeState>,
    /// C = 1000 × Σ gpu.
    pub capacity: i64,
    pub total_gpus: i64,
    pub slots: u16,
}

impl Cluster {
    pub fn new(records: &[NodeRecord], slots: u16) -> Self {
        let nodes: Vec<NodeState> = records.iter().map(NodeState::new).collect();
        let total_gpus: i64 = records.iter().map(|r| i64::from(r.gpus)).sum();
        Self {
            nodes,
            capacity: total_gpus * i64::from(GPU_MILLI),
            total_gpus,
            slots,
        }
    }

    /// Books `task` on node `n` using the GPUs in `mask`.
    pub fn apply(&mut self, n: usize, task: &Task, mask: u16) {
        let Some(node) = self.nodes.get_mut(n) else {
            return;
        };
        node.cpu_free -= task.cpu;
        node.mem_free -= task.mem;
        for g in 0..usize::from(node.gpu_count) {
            if mask & (1 << g) != 0 {
                node.gpu_free[g] -= task.milli;
                node.gpu_tasks[g] += 1;
            }
        }
        node.tags |= cluster_tag(task);
        node.version = node.version.wrapping_add(1).max(1);
    }
}

/// Best-fit GPU choice ("best" in the paper simulator): for a sharing task the
/// GPU with the least free share that fits (lowest index on ties); for
/// whole-GPU tasks the lowest-index fully free GPUs. Empty mask for CPU-only.
pub fn best_fit_gpus(node: &NodeState, task: &Task, slots: u16) -> u16 {
    if task.num == 0 {
        return 0;
    }
    if task.is_sharing() {
        let mut best: Option<usize> = None;
        for g in 0..usize::from(node.gpu_count) {
            if node.gpu_fits(g, task.milli, slots)
                && best.is_none_or(|b| node.gpu_free[g] < node.gpu_free[b])
            {
                best = Some(g);
            }
        }
        return best.map_or(0, |g| 1 << g);
    }
    lowest_fitting_gpus(node, task, slots)
}

/// The `num` lowest-index GPUs that fit the per-GPU share.
pub fn lowest_fitting_gpus(node: &NodeState, task: &Task, slots: u16) -> u16 {
    let mut mask = 0u16;
    let mut left = task.num;
    for g in 0..usize::from(node.gpu_count) {
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
