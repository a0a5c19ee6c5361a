//! The runtime form of a task: normalised resources plus an interned type id
//! so policies can cache per-(node, type) scores.

use rustc_hash::FxHashMap;

use crate::frag::{ModelSet, TaskShape};
use crate::trace::PodRecord;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Task {
    pub cpu: i64,
    pub mem: i64,
    /// Number of GPUs (0 = CPU-only).
    pub num: u32,
    /// Per-GPU share d in milli.
    pub milli: i32,
    pub models: ModelSet,
    /// Dense id of (cpu, mem, num, milli, models).
    pub type_id: u32,
}

impl Task {
    /// One GPU, partial share.
    pub fn is_sharing(&self) -> bool {
        self.num == 1 && self.milli < 1000
    }

    /// num·d in milli.
    pub fn gpu_request(&self) -> i64 {
        i64::from(self.num) * i64::from(self.milli)
    }

    pub fn shape(&self) -> TaskShape {
        TaskShape {
            cpu_milli: self.cpu,
            mem_mib: self.mem,
            gpu_milli: self.milli,
            num_gpu: self.num,
        }
    }
}

/// Converts pods to tasks, interning type ids; returns the tasks and the
/// number of distinct types.
pub fn to_tasks(pods: &[PodRecord]) -> (Vec<Task>, usize) {
    let mut ids: FxHashMap<(i64, i64, u32, i32, u64), u32> = FxHashMap::default();
    let tasks = pods
        .iter()
        .map(|p| {
            let key = (
                p.cpu_milli,
                p.memory_mib,
                p.num_gpu,
                p.gpu_milli,
                p.models.0,
            );
            let next = ids.len() as u32;
            let type_id = *ids.entry(key).or_insert(next);
            Task {
                cpu: p.cpu_milli,
                mem: p.memory_mib,
                num: p.num_gpu,
                milli: p.gpu_milli,
                models: p.models,
                type_id,
            }
        })
        .collect();
    (tasks, ids.len())
}
