//! HAMi's priority feedback loop (`docs/monitor.md`): the only write into the shared
//! regions. Each round, per container:
//!
//! 1. a positive `recent_kernel` (HAMi-core sets 2 at kernel launches) is counted down by
//!    one; a container whose value is still positive is *active* on each of its GPUs,
//!    counted per priority;
//! 2. a container with an active container of higher priority (lower number) on one of
//!    its GPUs is blocked (`recent_kernel = -1`: HAMi-core then waits before launching),
//!    otherwise a block is lifted (`0`);
//! 3. `utilization_switch` is 1 while a higher-priority container, or more than one
//!    container of its own priority, is active on one of its GPUs, else 0.
//!
//! Fields are written only when their value changes.

use std::collections::{BTreeMap, HashMap};

use crate::scan::ContainerReading;
use crate::warnings::Warnings;

/// What one container's region says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackInput<'a> {
    /// The container's GPUs.
    pub uuids: Vec<&'a str>,
    pub priority: i32,
    pub recent_kernel: i32,
    pub utilization_switch: i32,
}

/// The values the container's region must hold after the round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedbackOutput {
    pub recent_kernel: i32,
    pub utilization_switch: i32,
}

/// One round of decisions, in input order.
pub fn decide(inputs: &[FeedbackInput<'_>]) -> Vec<FeedbackOutput> {
    let counted: Vec<i32> = inputs
        .iter()
        .map(|c| {
            if c.recent_kernel > 0 {
                c.recent_kernel - 1
            } else {
                c.recent_kernel
            }
        })
        .collect();
    // GPU -> priority -> active containers.
    let mut active: HashMap<&str, BTreeMap<i32, u32>> = HashMap::new();
    for (c, rk) in inputs.iter().zip(&counted) {
        if *rk > 0 {
            for u in &c.uuids {
                *active.entry(u).or_default().entry(c.priority).or_default() += 1;
            }
        }
    }
    let higher_active = |u: &str, p: i32| {
        active
            .get(u)
            .is_some_and(|by| by.range(..p).any(|(_, n)| *n > 0))
    };
    let peers_active = |u: &str, p: i32| {
        active
            .get(u)
            .and_then(|by| by.get(&p))
            .is_some_and(|n| *n > 1)
    };
    inputs
        .iter()
        .zip(counted)
        .map(|(c, rk)| {
            let blocked = c.uuids.iter().any(|u| higher_active(u, c.priority));
            let recent_kernel = match (blocked, rk) {
                (true, rk) if rk >= 0 => -1,
                (false, rk) if rk < 0 => 0,
                (_, rk) => rk,
            };
            let switch = c
                .uuids
                .iter()
                .any(|u| higher_active(u, c.priority) || peers_active(u, c.priority));
            FeedbackOutput {
                recent_kernel,
                utilization_switch: i32::from(switch),
            }
        })
        .collect()
}

/// What a round changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundStats {
    pub containers: usize,
    pub writes: usize,
    /// Containers left blocked after the round.
    pub blocked: usize,
    pub errors: usize,
}

/// Reads each container's feedback fields afresh, decides, and writes what changed.
pub fn run_round(readings: &[ContainerReading], warnings: &mut Warnings) -> RoundStats {
    let mut stats = RoundStats::default();
    let mut inputs = Vec::with_capacity(readings.len());
    let mut targets = Vec::with_capacity(readings.len());
    for r in readings {
        let layout = r.usage.version.layout();
        match r.file.read_feedback_fields(layout) {
            Ok([utilization_switch, recent_kernel, priority]) => {
                inputs.push(FeedbackInput {
                    uuids: r
                        .usage
                        .devices
                        .iter()
                        .filter_map(|d| d.uuid.as_str())
                        .collect(),
                    priority,
                    recent_kernel,
                    utilization_switch,
                });
                targets.push(r);
            }
            Err(e) => {
                stats.errors += 1;
                let key = r.file.path().display().to_string();
                if warnings.allow(&key, &e.to_string()) {
                    tracing::warn!(file = %key, error = %e, "cannot read the feedback fields; container left out of this round");
                }
            }
        }
    }
    stats.containers = inputs.len();
    for ((r, input), out) in targets.iter().zip(&inputs).zip(decide(&inputs)) {
        let layout = r.usage.version.layout();
        let mut write = |offset: usize, old: i32, new: i32, what: &str| {
            if old == new {
                return;
            }
            match r.file.write_i32(offset, new) {
                Ok(()) => {
                    stats.writes += 1;
                    if what == "recent_kernel" && (new < 0) != (old < 0) {
                        tracing::info!(pod = %format!("{}/{}", r.pod.namespace, r.pod.name), container = %r.container, priority = input.priority, blocked = new < 0, "priority feedback");
                    }
                }
                Err(e) => {
                    stats.errors += 1;
                    let key = r.file.path().display().to_string();
                    if warnings.allow(&key, &e.to_string()) {
                        tracing::warn!(file = %key, field = what, error = %e, "cannot write a feedback field");
                    }
                }
            }
        };
        write(
            layout.recent_kernel,
            input.recent_kernel,
            out.recent_kernel,
            "recent_kernel",
        );
        write(
            layout.utilization_switch,
            input.utilization_switch,
            out.utilization_switch,
            "utilization_switch",
        );
        if out.recent_kernel < 0 {
            stats.blocked += 1;
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(uuids: &[&'static str], priority: i32, recent_kernel: i32) -> FeedbackInput<'static> {
        FeedbackInput {
            uuids: uuids.to_vec(),
            priority,
            recent_kernel,
            utilization_switch: 0,
        }
    }

    fn out(recent_kernel: i32, utilization_switch: i32) -> FeedbackOutput {
        FeedbackOutput {
            recent_kernel,
            utilization_switch,
        }
    }

    #[test]
    fn high_priority_activity_blocks_low_priority_on_the_same_gpu_only() {
        let got = decide(&[
            c(&["GPU-a"], 0, 2),
            c(&["GPU-a"], 1, 2),
            c(&["GPU-b"], 1, 2),
        ]);
        assert_eq!(got, [out(1, 0), out(-1, 1), out(1, 0)]);
    }

    #[test]
    fn blocks_lift_once_the_high_priority_task_is_idle() {
        // The high-priority task launched nothing since the last round (1 counts down to 0).
        let got = decide(&[c(&["GPU-a"], 0, 1), c(&["GPU-a"], 1, -1)]);
        assert_eq!(got, [out(0, 0), out(0, 0)]);
    }

    #[test]
    fn same_priority_peers_switch_utilization_without_blocking() {
        let got = decide(&[
            c(&["GPU-a"], 1, 2),
            c(&["GPU-a"], 1, 2),
            c(&["GPU-a"], 1, 0),
        ]);
        assert_eq!(got, [out(1, 1), out(1, 1), out(0, 1)]);
    }

    #[test]
    fn any_of_several_gpus_counts_and_odd_priorities_do_not_panic() {
        let got = decide(&[
            c(&["GPU-a", "GPU-b"], 1, 2),
            c(&["GPU-b"], -3, 2),
            c(&["GPU-c"], 7, 2),
        ]);
        assert_eq!(got, [out(-1, 1), out(1, 0), out(1, 0)]);
    }
}
