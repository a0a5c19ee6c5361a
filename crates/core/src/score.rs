//! Node and device scores (`docs/protocol.md#scores`).
//!
//! Scores are `f32` as in HAMi so rankings agree with HAMi's on the same inputs.

use crate::codec::scoring_weights::ScoringWeights;
use crate::model::{ContainerDeviceRequest, DeviceInfo};

/// What pods take of one device; the mutable half of a device's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Containers on the device (slots).
    pub used: u32,
    /// MiB taken.
    pub mem_used: u64,
    /// Percent of compute taken.
    pub cores_used: u64,
}

impl Usage {
    pub fn add(&mut self, slots: u32, mem: u64, cores: u64) {
        self.used = self.used.saturating_add(slots);
        self.mem_used = self.mem_used.saturating_add(mem);
        self.cores_used = self.cores_used.saturating_add(cores);
    }

    pub fn sub(&mut self, slots: u32, mem: u64, cores: u64) {
        self.used = self.used.saturating_sub(slots);
        self.mem_used = self.mem_used.saturating_sub(mem);
        self.cores_used = self.cores_used.saturating_sub(cores);
    }
}

/// Device score: how full the device would be with `req` on it, weighted per dimension.
///
/// Unlike HAMi (whose request term compares the card model with the vendor key and so
/// is always zero in production), the request is counted: it is what makes binpack
/// prefer the card the pod would fill best.
#[inline]
pub fn device_score(
    info: &DeviceInfo,
    usage: &Usage,
    req: Option<&ContainerDeviceRequest>,
    w: &ScoringWeights,
) -> f32 {
    if info.count == 0 || info.cores == 0 || info.mem_mib == 0 {
        return 0.0;
    }
    let (slots, cores, mem) = match req {
        Some(r) => (
            1u64,
            u64::from(r.cores),
            u64::from(r.memory_on(info.mem_mib)),
        ),
        None => (0, 0, 0),
    };
    let slot_term = (slots + u64::from(usage.used)) as f32 / info.count as f32;
    let core_term = (cores + usage.cores_used) as f32 / info.cores as f32;
    let mem_term = (mem + usage.mem_used) as f32 / info.mem_mib as f32;
    10.0 * (w.slot as f32 * slot_term + w.core as f32 * core_term + w.memory as f32 * mem_term)
}

/// Node score: how full the node's devices are before the pod is added.
pub fn node_score<'a>(devices: impl IntoIterator<Item = (&'a DeviceInfo, &'a Usage)>) -> f32 {
    let (mut used, mut count, mut cores, mut cores_total, mut mem, mut mem_total) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    for (info, u) in devices {
        used += u64::from(u.used);
        count += u64::from(info.count);
        cores += u.cores_used;
        cores_total += u64::from(info.cores);
        mem += u.mem_used;
        mem_total += u64::from(info.mem_mib);
    }
    if count == 0 || cores_total == 0 || mem_total == 0 {
        return 0.0;
    }
    10.0 * (used as f32 / count as f32
        + cores as f32 / cores_total as f32
        + mem as f32 / mem_total as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(count: u32, mem: u32, core: u32) -> DeviceInfo {
        DeviceInfo {
            id: "GPU-0".into(),
            count,
            mem_mib: mem,
            cores: core,
            dev_type: "NVIDIA-A100".into(),
            health: true,
            ..Default::default()
        }
    }

    fn req(mem: u32, pct: Option<u32>, cores: u32) -> ContainerDeviceRequest {
        ContainerDeviceRequest {
            count: 1,
            dev_type: "NVIDIA".into(),
            mem_mib: mem,
            mem_percent: pct,
            cores,
        }
    }

    #[test]
    fn device_score_counts_usage_and_request() {
        let d = dev(10, 1000, 100);
        let u = Usage {
            used: 1,
            mem_used: 200,
            cores_used: 20,
        };
        let w = ScoringWeights::default();
        // 10 * (2/10 + 50/100 + 500/1000) = 12
        let s = device_score(&d, &u, Some(&req(300, None, 30)), &w);
        assert!((s - 12.0).abs() < 1e-5, "{s}");
        // Percentage requests are resolved against the device's memory.
        let s = device_score(&d, &Usage::default(), Some(&req(0, Some(50), 0)), &w);
        assert!((s - 6.0).abs() < 1e-5, "{s}");
        let w = ScoringWeights {
            slot: 0,
            core: 0,
            memory: 2,
        };
        let s = device_score(&d, &u, None, &w);
        assert!((s - 4.0).abs() < 1e-5, "{s}");
    }

    #[test]
    fn zero_capacity_scores_zero() {
        let w = ScoringWeights::default();
        assert_eq!(
            device_score(&dev(0, 1000, 100), &Usage::default(), None, &w),
            0.0
        );
        assert_eq!(node_score([(&dev(10, 0, 100), &Usage::default())]), 0.0);
    }

    #[test]
    fn node_score_sums_over_devices() {
        let devs = [dev(10, 1000, 100), dev(10, 1000, 100)];
        let us = [
            Usage {
                used: 2,
                mem_used: 500,
                cores_used: 50,
            },
            Usage::default(),
        ];
        // 10 * (2/20 + 50/200 + 500/2000) = 6
        assert!((node_score(devs.iter().zip(us.iter())) - 6.0).abs() < 1e-5);
    }
}
