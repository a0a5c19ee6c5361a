//! One simulation run: tasks arrive in order, are placed at once or dropped,
//! and an event (arrived, used, fragmentation, idle) is recorded after each.

use std::time::Instant;

use crate::Task;
use crate::cluster::Cluster;
use crate::frag::{FragMemo, TypicalWorkload};
use crate::policy::{Placement, Policy};
use crate::trace::NodeRecord;

/// State after one arrival (`docs/simulator.md#events-and-curves`); all GPU quantities in milli.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Event {
    /// Cumulative requested GPU, failed tasks included.
    pub arrived: i64,
    pub used: i64,
    /// Cluster fragmentation F = Σ_n F_n(M).
    pub frag: f64,
    pub idle: i64,
}

#[derive(Debug, Clone)]
pub struct RunOutput {
    pub events: Vec<Event>,
    pub decisions: Vec<Option<Placement>>,
    pub capacity: i64,
    pub total_gpus: i64,
    pub elapsed_ms: f64,
    /// Final CPU / memory allocation ratios in %.
    pub cpu_alloc_pct: f64,
    pub mem_alloc_pct: f64,
}

/// Runs `tasks` through `policy`. `ranks[i]` is node i's tie-break rank.
/// When `track_frag` is false the F column is left at 0 (faster sweeps).
pub fn simulate(
    nodes: &[NodeRecord],
    tasks: &[Task],
    ranks: &[u32],
    workload: &TypicalWorkload,
    policy: &mut dyn Policy,
    slots: u16,
    track_frag: bool,
) -> RunOutput {
    let start = Instant::now();
    let mut cluster = Cluster::new(nodes, slots);
    let mut memo = FragMemo::new(false);
    let mut node_frag: Vec<f64> = if track_frag {
        cluster
            .nodes
            .iter()
            .map(|n| memo.frag(&n.view(), workload))
            .collect()
    } else {
        vec![0.0; cluster.nodes.len()]
    };
    let mut events = Vec::with_capacity(tasks.len());
    let mut decisions = Vec::with_capacity(tasks.len());
    let mut feasible: Vec<u32> = Vec::with_capacity(cluster.nodes.len());
    let mut arrived = 0i64;
    let mut idle: i64 = cluster.capacity;
    for task in tasks {
        arrived += task.gpu_request();
        feasible.clear();
        feasible.extend(
            cluster
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.feasible(task, slots))
                .map(|(i, _)| i as u32),
        );
        let placed = if feasible.is_empty() {
            None
        } else {
            policy.place(&cluster, ranks, task, &feasible)
        };
        if let Some(p) = placed {
            cluster.apply(p.node, task, p.gpus);
            idle -= i64::from(p.gpus.count_ones()) * i64::from(task.milli);
            if track_frag {
                node_frag[p.node] = memo.frag(&cluster.nodes[p.node].view(), workload);
            }
        }
        decisions.push(placed);
        events.push(Event {
            arrived,
            used: cluster.capacity - idle,
            // Summed afresh in node order so the value does not drift.
            frag: if track_frag {
                node_frag.iter().sum()
            } else {
                0.0
            },
            idle,
        });
    }
    let (mut cpu_cap, mut cpu_free, mut mem_cap, mut mem_free) = (0i64, 0i64, 0i64, 0i64);
    for (rec, st) in nodes.iter().zip(&cluster.nodes) {
        cpu_cap += rec.cpu_milli;
        cpu_free += st.cpu_free;
        mem_cap += rec.memory_mib;
        mem_free += st.mem_free;
    }
    let pct = |free: i64, cap: i64| {
        if cap > 0 {
            100.0 * (cap - free) as f64 / cap as f64
        } else {
            0.0
        }
    };
    RunOutput {
        events,
        decisions,
        capacity: cluster.capacity,
        total_gpus: cluster.total_gpus,
        elapsed_ms: start.elapsed().as_secs_f64() * 1000.0,
        cpu_alloc_pct: pct(cpu_free, cpu_cap),
        mem_alloc_pct: pct(mem_free, mem_cap),
    }
}
