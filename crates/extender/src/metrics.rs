//! Metrics: HAMi's per-GPU series (same names and labels, so HAMi dashboards keep
//! working), per-node totals, and the extender's own latency and error series.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hami_core::sync::MutexExt;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::state::SchedState;

const MIB: u64 = 1024 * 1024;

/// Outcome labels are fixed strings, so every family has a bounded label set.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    operation: &'static str,
    reason: &'static str,
}

/// The extender's own series.
#[derive(Debug, Clone)]
pub struct Metrics {
    filter_duration: Histogram,
    bind_duration: Histogram,
    lock_wait: Histogram,
    filters: Family<ResultLabels, Counter>,
    binds: Family<ResultLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    expired: Counter,
    leader: Gauge,
}

impl Metrics {
    /// Registers the series and the per-GPU collector reading `state` at scrape time.
    pub fn register(registry: &mut Registry, state: Arc<Mutex<SchedState>>) -> Self {
        // 25 µs .. ~0.8 s
        let filter_duration = Histogram::new(exponential_buckets(0.000_025, 2.0, 16));
        registry.register(
            "hami_scheduler_filter_duration_seconds",
            "Time to answer one /filter call, body read to answer built",
            filter_duration.clone(),
        );
        // 1 ms .. ~33 s
        let bind_duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register(
            "hami_scheduler_bind_duration_seconds",
            "Time to answer one /bind call, node lock wait included",
            bind_duration.clone(),
        );
        let lock_wait = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register(
            "hami_scheduler_node_lock_wait_seconds",
            "Time /bind waited for a node locked by another pod",
            lock_wait.clone(),
        );
        let filters = Family::<ResultLabels, Counter>::default();
        registry.register(
            "hami_scheduler_filter_requests",
            "/filter calls by result (placed, unschedulable, passthrough, error)",
            filters.clone(),
        );
        let binds = Family::<ResultLabels, Counter>::default();
        registry.register(
            "hami_scheduler_bind_requests",
            "/bind calls by result (bound, error)",
            binds.clone(),
        );
        let errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "hami_scheduler_errors",
            "Errors by operation and reason",
            errors.clone(),
        );
        let expired = Counter::default();
        registry.register(
            "hami_scheduler_reservations_expired",
            "Pods whose GPUs were released because they stayed unbound past the reservation timeout",
            expired.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "hami_scheduler_leader",
            "1 when this replica's kube-scheduler holds the leader Lease (or leader election is off)",
            leader.clone(),
        );
        registry.register_collector(Box::new(UsageCollector { state }));
        Metrics {
            filter_duration,
            bind_duration,
            lock_wait,
            filters,
            binds,
            errors,
            expired,
            leader,
        }
    }

    pub fn filter_done(&self, result: &'static str, elapsed: Duration) {
        self.filters.get_or_create(&ResultLabels { result }).inc();
        self.filter_duration.observe(elapsed.as_secs_f64());
    }

    pub fn bind_done(&self, result: &'static str, elapsed: Duration) {
        self.binds.get_or_create(&ResultLabels { result }).inc();
        self.bind_duration.observe(elapsed.as_secs_f64());
    }

    pub fn lock_waited(&self, elapsed: Duration) {
        self.lock_wait.observe(elapsed.as_secs_f64());
    }

    pub fn error(&self, operation: &'static str, reason: &'static str) {
        self.errors
            .get_or_create(&ErrorLabels { operation, reason })
            .inc();
    }

    pub fn expired(&self, n: usize) {
        self.expired.inc_by(n as u64);
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }
}

/// One device's numbers, copied out of the state so the lock is not held while encoding.
struct DeviceRow {
    node: String,
    uuid: String,
    index: String,
    dev_type: String,
    totalmem: u64,
    totalcore: u64,
    usedmem: u64,
    usedcores: u64,
    used: u64,
}

/// Reads per-GPU usage from the ledger at scrape time.
#[derive(Debug)]
struct UsageCollector {
    state: Arc<Mutex<SchedState>>,
}

impl UsageCollector {
    fn rows(&self) -> Vec<DeviceRow> {
        let state = self.state.lock_unpoisoned();
        let mut rows = Vec::new();
        for node in state.ledger().nodes() {
            for (vd, usage) in node.groups() {
                for (d, u) in vd.devices.iter().zip(usage) {
                    rows.push(DeviceRow {
                        node: node.name().to_string(),
                        uuid: d.id.clone(),
                        index: d.index.to_string(),
                        dev_type: d.dev_type.clone(),
                        totalmem: u64::from(d.mem_mib),
                        totalcore: u64::from(d.cores),
                        usedmem: u.mem_used,
                        usedcores: u.cores_used,
                        used: u64::from(u.used),
                    });
                }
            }
        }
        rows
    }
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

/// HAMi's per-device labels.
fn device(r: &DeviceRow) -> Labels<'_> {
    vec![
        ("zone", "vGPU"),
        ("node", r.node.as_str()),
        ("device_uuid", r.uuid.as_str()),
        ("device_index", r.index.as_str()),
        ("device_type", r.dev_type.as_str()),
    ]
}

fn gauge_family<'r, T: prometheus_client::encoding::EncodeGaugeValue + Copy>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &'r [DeviceRow],
    labels: impl Fn(&'r DeviceRow) -> Labels<'r>,
    value: impl Fn(&DeviceRow) -> Option<T>,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<T>: EncodeMetric,
{
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for r in rows {
        if let Some(v) = value(r) {
            let l = labels(r);
            ConstGauge::new(v).encode(metric.encode_family(&l)?)?;
        }
    }
    Ok(())
}

impl Collector for UsageCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows = self.rows();
        gauge_family(
            &mut encoder,
            "hami_gpu_memory_limit_bytes",
            "Device memory of each GPU, in bytes",
            &rows,
            device,
            |r| Some(r.totalmem * MIB),
        )?;
        gauge_family(
            &mut encoder,
            "hami_gpu_core_limit_ratio",
            "Compute of each GPU in percent of one card",
            &rows,
            device,
            |r| Some(r.totalcore),
        )?;
        let cores: Vec<String> = rows.iter().map(|r| r.usedcores.to_string()).collect();
        let mut metric = encoder.encode_descriptor(
            "hami_gpu_memory_allocated_bytes",
            "Device memory allocated to pods on each GPU, in bytes",
            None,
            MetricType::Gauge,
        )?;
        for (r, c) in rows.iter().zip(&cores) {
            let mut l = device(r);
            l.push(("device_cores", c.as_str()));
            ConstGauge::new(r.usedmem * MIB).encode(metric.encode_family(&l)?)?;
        }
        gauge_family(
            &mut encoder,
            "hami_gpu_shared_count",
            "Containers sharing each GPU",
            &rows,
            device,
            |r| Some(r.used),
        )?;
        gauge_family(
            &mut encoder,
            "hami_gpu_core_allocated_ratio",
            "Compute allocated on each GPU, in percent of one card",
            &rows,
            device,
            |r| Some(r.usedcores),
        )?;
        gauge_family(
            &mut encoder,
            "hami_node_gpu_memory_allocated_ratio",
            "Fraction (0..1) of each GPU's memory allocated",
            &rows,
            device,
            |r| (r.totalmem > 0).then(|| r.usedmem as f64 / r.totalmem as f64),
        )?;

        // Per-node totals.
        let mut totals: Vec<(&str, u64, u64, u64, u64)> = Vec::new();
        for r in &rows {
            match totals.last_mut() {
                Some(t) if t.0 == r.node => {
                    t.1 += 1;
                    t.2 += r.totalmem;
                    t.3 += r.usedmem;
                    t.4 += r.used;
                }
                _ => totals.push((r.node.as_str(), 1, r.totalmem, r.usedmem, r.used)),
            }
        }
        for (name, help, pick) in [
            (
                "hami_scheduler_node_gpus",
                "GPUs registered and usable on each node",
                1usize,
            ),
            (
                "hami_scheduler_node_gpu_memory_limit_bytes",
                "Total GPU memory of each node, in bytes",
                2,
            ),
            (
                "hami_scheduler_node_gpu_memory_allocated_bytes",
                "GPU memory allocated on each node, in bytes",
                3,
            ),
            (
                "hami_scheduler_node_gpu_shared_count",
                "Container slots taken on each node's GPUs",
                4,
            ),
        ] {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for t in &totals {
                let v = match pick {
                    1 => t.1,
                    2 => t.2 * MIB,
                    3 => t.3 * MIB,
                    _ => t.4,
                };
                ConstGauge::new(v).encode(metric.encode_family(&[("node", t.0)])?)?;
            }
        }
        Ok(())
    }
}
