//! The GPU fragmentation measure (FGD, Weng et al., USENIX ATC '23;
//! `docs/simulator.md#node-fragmentation`): a typical workload M, the fragmentation F_n(M)
//! of one node's free resources and a memo of it by node state.
//!
//! The placement engine's `frag` policies ([`live`]) and the simulator (`hami-sim`, which
//! adds the paper's scoring and our tuned scorer on top) share this one measure. It only
//! sees plain data: a node's model id, free CPU/memory, per-GPU free milli-shares and the
//! typical workload table. GPU shares are in milli-GPU (1000 = one whole GPU).

use rustc_hash::FxHashMap;

pub mod live;
pub mod observed;
pub mod pairing;
pub mod score;

/// Largest GPU count per node that the packed memo key supports. Nodes with
/// more GPUs still work, they just bypass the memo.
pub const MEMO_MAX_GPUS: usize = 8;

/// A set of GPU model ids (bit i = model i). The empty set means "any model",
/// matching an empty `gpu_spec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct ModelSet(pub u64);

impl ModelSet {
    /// No constraint.
    pub const ANY: ModelSet = ModelSet(0);

    /// Whether a node of `model` may run a task with this constraint.
    pub fn allows(self, model: u8) -> bool {
        self.0 == 0 || (model < 64 && self.0 & (1u64 << model) != 0)
    }
}

/// One entry of the typical workload: a task shape and its probability.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskClass {
    pub cpu_milli: i64,
    pub mem_mib: i64,
    /// Per-GPU share in milli (0 for CPU-only tasks).
    pub gpu_milli: i32,
    pub num_gpu: u32,
    pub models: ModelSet,
    /// p_m: the class's share of the typical prefix.
    pub weight: f64,
}

/// The target workload M ("typical pods").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TypicalWorkload {
    pub classes: Vec<TaskClass>,
}

/// Plain view of one node's free resources.
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    pub model: u8,
    pub cpu_free: i64,
    pub mem_free: i64,
    /// Free milli per GPU, in GPU-index order.
    pub gpu_free: &'a [i32],
}

/// F_n(M) of `docs/simulator.md#node-fragmentation`: the expected milli-GPU that a task drawn
/// from M could not use on this node. When `mem_aware` is set, a class also counts as not
/// fitting when its (mean) memory does not fit, an extension of ours.
///
/// Per-class contributions are accumulated in the paper simulator's bucket
/// order (Q1, Q2, Q4, XL, XR, no-access) so quantised FGD ties match bit-exactly.
pub fn node_frag(node: &NodeView<'_>, workload: &TypicalWorkload, mem_aware: bool) -> f64 {
    let idle: i64 = node.gpu_free.iter().map(|&r| i64::from(r)).sum();
    // Buckets: 0 = Q1 (lack both), 1 = Q2 (lack GPU, and the unusable part of
    // fitting cases), 2 = Q4 (lack CPU), 3 = XL, 4 = XR, 5 = no access.
    let mut buckets = [0f64; 6];
    for class in &workload.classes {
        let cpu_ok =
            node.cpu_free >= class.cpu_milli && (!mem_aware || node.mem_free >= class.mem_mib);
        if class.gpu_milli == 0 || class.num_gpu == 0 {
            let b = if cpu_ok { 3 } else { 4 };
            buckets[b] += class.weight * idle as f64;
            continue;
        }
        if !class.models.allows(node.model) {
            buckets[5] += class.weight * idle as f64;
            continue;
        }
        let d = class.gpu_milli;
        let mut fitting = 0u32;
        let mut too_small: i64 = 0;
        for &r in node.gpu_free {
            if r >= d {
                fitting += 1;
            } else {
                too_small += i64::from(r);
            }
        }
        let gpu_ok = fitting >= class.num_gpu;
        match (gpu_ok, cpu_ok) {
            (true, true) => buckets[1] += class.weight * too_small as f64,
            (false, true) => buckets[1] += class.weight * idle as f64,
            (true, false) => buckets[2] += class.weight * idle as f64,
            (false, false) => buckets[0] += class.weight * idle as f64,
        }
    }
    buckets.iter().sum()
}

/// Memo of F_n(M) by node state (model, free CPU, [free memory], sorted free
/// shares). Most nodes share a state early in a run, so hit rates are high.
#[derive(Debug, Default)]
pub struct FragMemo {
    map: FxHashMap<(u128, i64), f64>,
    mem_aware: bool,
}

impl FragMemo {
    pub fn new(mem_aware: bool) -> Self {
        Self {
            map: FxHashMap::default(),
            mem_aware,
        }
    }

    /// Number of memoised node states.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Forgets every memoised state (bounds memory in long-lived callers).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// F_n(M), memoised when the node state packs into the key.
    pub fn frag(&mut self, node: &NodeView<'_>, workload: &TypicalWorkload) -> f64 {
        match self.key(node) {
            Some(k) => {
                if let Some(&f) = self.map.get(&k) {
                    return f;
                }
                let f = node_frag(node, workload, self.mem_aware);
                self.map.insert(k, f);
                f
            }
            None => node_frag(node, workload, self.mem_aware),
        }
    }

    fn key(&self, node: &NodeView<'_>) -> Option<(u128, i64)> {
        let n = node.gpu_free.len();
        if n > MEMO_MAX_GPUS || !(0..(1 << 21)).contains(&node.cpu_free) {
            return None;
        }
        let mut sorted = [0i32; MEMO_MAX_GPUS];
        sorted[..n].copy_from_slice(node.gpu_free);
        sorted[..n].sort_unstable();
        // 8 × 11 bits of shares + 4 bits count + 6 bits model + 21 bits CPU.
        let mut k: u128 = 0;
        for &s in &sorted[..n] {
            if !(0..2048).contains(&s) {
                return None;
            }
            k = (k << 11) | s as u128;
        }
        k = (k << 4) | n as u128;
        k = (k << 6) | u128::from(node.model & 63);
        k = (k << 21) | node.cpu_free as u128;
        // Memory only enters the key when it can change the result.
        let mem = if self.mem_aware { node.mem_free } else { 0 };
        Some((k, mem))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload() -> TypicalWorkload {
        TypicalWorkload {
            classes: vec![
                TaskClass {
                    cpu_milli: 4000,
                    mem_mib: 0,
                    gpu_milli: 500,
                    num_gpu: 1,
                    models: ModelSet::ANY,
                    weight: 0.5,
                },
                TaskClass {
                    cpu_milli: 4000,
                    mem_mib: 0,
                    gpu_milli: 1000,
                    num_gpu: 1,
                    models: ModelSet::ANY,
                    weight: 0.5,
                },
            ],
        }
    }

    #[test]
    fn frag_of_half_used_gpu() {
        let w = workload();
        let gpus = [1000, 400];
        let v = NodeView {
            model: 0,
            cpu_free: 8000,
            mem_free: 0,
            gpu_free: &gpus,
        };
        // 500m class: GPU1 (400) is too small → 0.5·400; 1000m class: same → 0.5·400.
        assert!((node_frag(&v, &w, false) - 400.0).abs() < 1e-9);
        let v = NodeView {
            model: 0,
            cpu_free: 1000,
            mem_free: 0,
            gpu_free: &gpus,
        };
        // CPU lacks for both: all idle (1400) counts.
        assert!((node_frag(&v, &w, false) - 1400.0).abs() < 1e-9);
    }
}
