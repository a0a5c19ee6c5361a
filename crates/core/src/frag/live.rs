//! The fragmentation measure applied to HAMi's device model, for the live
//! placement engine (node policy `frag`, GPU policy `frag`).
//!
//! Mapping (documented in `docs/simulator.md`):
//! - a device's free share, in milli-GPU, is `min(free cores %, free memory %) × 10`,
//!   and 0 when its slots (`count`) are all taken;
//! - what a container takes of a device is `max(cores %, memory %) × 10`; a whole
//!   card (cores 100) is 1000;
//! - the live engine has no CPU or memory data of nodes: every class of the typical
//!   workload is taken to fit CPU-wise (the simulator's policy adds CPU/memory
//!   awareness on top of the same measure).
//!
//! Node score (node policy `frag`): `F(before) − F(after)` in milli-GPU, the
//! fragmentation the pod's placement removes (higher is better). Device score (GPU
//! policy `frag`): `−F(after)` of placing one container's share on the device.

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

use thread_local::ThreadLocal;

use super::{FragMemo, ModelSet, NodeView, TaskClass, TypicalWorkload, node_frag};
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::score::Usage;

/// CPU the live engine assumes free on every node (fits any realistic class; the
/// largest value the memo key packs).
const LIVE_CPU_FREE: i64 = (1 << 21) - 1;

/// Memoised node states a thread keeps before its memo is cleared (a few MiB each).
const MEMO_CAP: usize = 1 << 16;

/// A GPU task shape of a typical workload and how common it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuTaskShape {
    /// GPUs per task.
    pub num_gpu: u32,
    /// Share of each GPU, in milli-GPU.
    pub gpu_milli: i32,
    /// Relative frequency (any unit: weights are normalised).
    pub weight: u32,
}

impl GpuTaskShape {
    pub const fn new(num_gpu: u32, gpu_milli: i32, weight: u32) -> Self {
        GpuTaskShape {
            num_gpu,
            gpu_milli,
            weight,
        }
    }
}

/// Built-in typical workload: the GPU task shapes of Alibaba's openb default trace
/// (`openb_pod_list_default.csv`), weights in 1/10000 of its tasks, covering 99.6 % of
/// its GPU tasks.
pub const OPENB_DEFAULT_CLASSES: &[GpuTaskShape] = &[
    GpuTaskShape::new(1, 1000, 4798),
    GpuTaskShape::new(1, 810, 1322),
    GpuTaskShape::new(1, 470, 920),
    GpuTaskShape::new(1, 320, 402),
    GpuTaskShape::new(1, 650, 310),
    GpuTaskShape::new(1, 230, 172),
    GpuTaskShape::new(1, 460, 157),
    GpuTaskShape::new(1, 590, 92),
    GpuTaskShape::new(1, 160, 91),
    GpuTaskShape::new(1, 550, 88),
    GpuTaskShape::new(1, 220, 76),
    GpuTaskShape::new(1, 370, 58),
    GpuTaskShape::new(8, 1000, 54),
    GpuTaskShape::new(1, 110, 29),
    GpuTaskShape::new(1, 480, 23),
    GpuTaskShape::new(2, 1000, 20),
    GpuTaskShape::new(4, 1000, 18),
];

/// A typical workload built from task shapes; weights are normalised. CPU and memory
/// are 0 and every model is allowed.
pub fn workload_from_shapes(shapes: &[GpuTaskShape]) -> TypicalWorkload {
    let total: f64 = shapes.iter().map(|s| f64::from(s.weight)).sum();
    let classes = shapes
        .iter()
        .filter(|s| total > 0.0 && s.weight > 0)
        .map(|s| TaskClass {
            cpu_milli: 0,
            mem_mib: 0,
            gpu_milli: s.gpu_milli,
            num_gpu: s.num_gpu,
            models: ModelSet::ANY,
            weight: f64::from(s.weight) / total,
        })
        .collect();
    TypicalWorkload { classes }
}

/// The fragmentation model of the live engine: a typical workload and a memo of F
/// by node state (shared by all pods; safe to use from several threads).
///
/// Every device score of a `frag` placement reads F, from every thread that scans nodes,
/// so the memo takes no lock: each thread has a memo of its own for this model (F of a
/// state is the same whichever thread computes it; a thread only repeats the few states
/// another one already knows).
#[derive(Debug)]
pub struct FragModel {
    workload: TypicalWorkload,
    memo: ThreadLocal<RefCell<FragMemo>>,
}

impl FragModel {
    pub fn new(workload: TypicalWorkload) -> Self {
        Self {
            workload,
            memo: ThreadLocal::new(),
        }
    }

    /// The model built from [`OPENB_DEFAULT_CLASSES`], shared process-wide.
    pub fn builtin() -> Arc<FragModel> {
        static BUILTIN: OnceLock<Arc<FragModel>> = OnceLock::new();
        BUILTIN
            .get_or_init(|| Arc::new(FragModel::new(workload_from_shapes(OPENB_DEFAULT_CLASSES))))
            .clone()
    }

    pub fn workload(&self) -> &TypicalWorkload {
        &self.workload
    }

    /// F of a node whose devices have these free shares (milli-GPU).
    pub fn frag_of(&self, shares: &[i32]) -> f64 {
        let view = NodeView {
            model: 0,
            cpu_free: LIVE_CPU_FREE,
            mem_free: 0,
            gpu_free: shares,
        };
        let memo = self.memo.get_or(|| RefCell::new(FragMemo::new(false)));
        // `frag_of` does not call itself, so the memo is never borrowed here already;
        // were it ever, computing F directly gives the same value.
        let Ok(mut memo) = memo.try_borrow_mut() else {
            return node_frag(&view, &self.workload, false);
        };
        if memo.len() >= MEMO_CAP {
            memo.clear();
        }
        memo.frag(&view, &self.workload)
    }

    /// Device score of GPU policy `frag`: `−F(after)` (milli-GPU) when `req` takes
    /// device `pos` of a node whose devices are `infos` with `usage`. Higher is better.
    pub fn device_score(
        &self,
        infos: &[DeviceInfo],
        usage: &[Usage],
        pos: usize,
        req: &ContainerDeviceRequest,
    ) -> f32 {
        let mut shares: Vec<i32> = infos
            .iter()
            .zip(usage)
            .map(|(d, u)| free_share(d, u))
            .collect();
        if let (Some(info), Some(u), Some(s)) =
            (infos.get(pos), usage.get(pos), shares.get_mut(pos))
        {
            let mut after = *u;
            after.add(
                1,
                u64::from(req.memory_on(info.mem_mib)),
                u64::from(req.cores_clamped()),
            );
            *s = free_share(info, &after);
        }
        -(self.frag_of(&shares) as f32)
    }

    /// Node score of node policy `frag`: `F(before) − F(after)` in milli-GPU.
    pub fn node_gain(&self, before: &[i32], after: &[i32]) -> f32 {
        (self.frag_of(before) - self.frag_of(after)) as f32
    }
}

/// Free share of a device in milli-GPU: `min(free cores, free memory)` as a fraction
/// of the device, ×1000; 0 when no slot is left or the device has no capacity.
pub fn free_share(info: &DeviceInfo, u: &Usage) -> i32 {
    if info.count == 0 || u.used >= info.count || info.cores == 0 || info.mem_mib == 0 {
        return 0;
    }
    let cores = u64::from(info.cores).saturating_sub(u.cores_used) * 1000 / u64::from(info.cores);
    let mem = u64::from(info.mem_mib).saturating_sub(u.mem_used) * 1000 / u64::from(info.mem_mib);
    cores.min(mem).min(1000) as i32
}

/// What a container taking `cores` % and `mem` MiB of a device uses of it, in
/// milli-GPU: `max(cores, memory)` as a fraction of the device (whole card = 1000).
pub fn taken_share(info: &DeviceInfo, cores: u32, mem: u32) -> i32 {
    if info.cores == 0 || info.mem_mib == 0 {
        return 0;
    }
    let c = u64::from(cores) * 1000 / u64::from(info.cores);
    let m = u64::from(mem) * 1000 / u64::from(info.mem_mib);
    c.max(m).min(1000) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(i: u32) -> DeviceInfo {
        DeviceInfo {
            id: format!("GPU-{i}"),
            index: i,
            count: 10,
            mem_mib: 1000,
            cores: 100,
            dev_type: "NVIDIA-A100".into(),
            health: true,
            ..Default::default()
        }
    }

    #[test]
    fn shares_follow_the_tighter_dimension() {
        let d = dev(0);
        let u = Usage {
            used: 1,
            mem_used: 300,
            cores_used: 50,
        };
        assert_eq!(free_share(&d, &u), 500);
        let full = Usage {
            used: 10,
            ..Usage::default()
        };
        assert_eq!(free_share(&d, &full), 0);
        assert_eq!(taken_share(&d, 100, 0), 1000);
        assert_eq!(taken_share(&d, 20, 400), 400);
    }

    #[test]
    fn builtin_weights_sum_to_one() {
        let m = FragModel::builtin();
        let s: f64 = m.workload().classes.iter().map(|c| c.weight).sum();
        assert!((s - 1.0).abs() < 1e-9);
        // An empty 8-GPU node strands nothing; a 100-milli sliver is stranded for
        // every class larger than that.
        assert_eq!(m.frag_of(&[1000; 8]), 0.0);
        assert!(m.frag_of(&[100, 1000, 1000, 1000, 1000, 1000, 1000, 1000]) > 90.0);
    }

    #[test]
    fn memo_answers_every_thread_as_the_measure_does() {
        let m = FragModel::builtin();
        // Deterministic share vectors, many repeated across threads and calls.
        let states: Vec<Vec<i32>> = (0..400u32)
            .map(|i| (0..8).map(|g| ((i * 37 + g * 101) % 1001) as i32).collect())
            .collect();
        let direct = |shares: &[i32]| {
            let view = NodeView {
                model: 0,
                cpu_free: LIVE_CPU_FREE,
                mem_free: 0,
                gpu_free: shares,
            };
            node_frag(&view, m.workload(), false)
        };
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (m, states) = (&m, &states);
                scope.spawn(move || {
                    for round in 0..3 {
                        for s in states.iter().skip(t * 50 + round) {
                            assert_eq!(m.frag_of(s).to_bits(), direct(s).to_bits());
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn device_score_prefers_the_exact_fit() {
        let m = FragModel::new(workload_from_shapes(&[
            GpuTaskShape::new(1, 500, 1),
            GpuTaskShape::new(1, 1000, 1),
        ]));
        let infos = [dev(0), dev(1)];
        let usage = [
            Usage {
                used: 1,
                mem_used: 500,
                cores_used: 50,
            },
            Usage::default(),
        ];
        let req = ContainerDeviceRequest {
            count: 1,
            dev_type: "NVIDIA".into(),
            mem_mib: 0,
            mem_percent: Some(50),
            cores: 50,
        };
        let on_half = m.device_score(&infos, &usage, 0, &req);
        let on_empty = m.device_score(&infos, &usage, 1, &req);
        assert!(on_half > on_empty, "{on_half} vs {on_empty}");
    }
}
