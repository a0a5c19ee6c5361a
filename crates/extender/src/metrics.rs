//! Metrics: HAMi's per-GPU series (same names and labels, so HAMi dashboards keep
//! working), per-node totals, and the extender's own latency and error series.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hami_core::sync::MutexExt;
use prometheus_client::collector::Collector;
use std::fmt::Write as _;

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::state::SchedState;

const MIB: u64 = 1024 * 1024;

/// An enum whose variants are label values: typed in code, fixed strings on the wire,
/// so every family has a bounded label set.
macro_rules! label_values {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            pub const ALL: &[$name] = &[$($name::$variant,)+];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                encoder.write_str(self.as_str())
            }
        }
    };
}

label_values! {
    /// How a /filter call ended (`result` of `hami_scheduler_filter_requests`).
    FilterOutcome {
        /// A node was chosen and its devices reserved.
        Placed => "placed",
        /// No candidate fits; FailedNodes says why.
        Unschedulable => "unschedulable",
        /// The pod asks for no managed device: every candidate passes.
        Passthrough => "passthrough",
        /// Answered with `Error` set.
        Error => "error",
    }
}

label_values! {
    /// How a /bind call ended (`result` of `hami_scheduler_bind_requests`).
    BindOutcome {
        Bound => "bound",
        Error => "error",
    }
}

label_values! {
    /// The call an error belongs to (`operation` of `hami_scheduler_errors`).
    Operation {
        Filter => "filter",
        Bind => "bind",
    }
}

label_values! {
    /// Why a call failed (`reason` of `hami_scheduler_errors`).
    ErrorReason {
        /// The body could not be read or parsed.
        BadBody => "bad_body",
        /// The request is not one the extender can act on.
        BadRequest => "bad_request",
        /// /filter args without a Pod.
        NoPod => "no_pod",
        /// A pod without `metadata.uid`.
        NoUid => "no_uid",
        /// The node and pod caches had not synced in time.
        NotSynced => "not_synced",
        /// The placement could not be written into the pod.
        AnnotateFailed => "annotate_failed",
        /// /bind for another node than /filter chose.
        WrongNode => "wrong_node",
        /// /bind for a GPU pod that holds no reservation.
        NotReserved => "not_reserved",
        /// The reservation ended while /bind waited for the node lock.
        ReservationLost => "reservation_lost",
        /// The node stayed locked past `--node-lock-wait`.
        LockTimeout => "lock_timeout",
        /// The node lock could not be released.
        LockReleaseFailed => "lock_release_failed",
        /// The node is gone.
        NodeGone => "node_gone",
        /// The pod is gone (deleted, or re-created under its name: another UID).
        PodGone => "pod_gone",
        /// Any other API server failure.
        Api => "api",
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FilterLabels {
    result: FilterOutcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BindLabels {
    result: BindOutcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    operation: Operation,
    reason: ErrorReason,
}

/// The extender's own series.
#[derive(Debug, Clone)]
pub struct Metrics {
    filter_duration: Histogram,
    bind_duration: Histogram,
    lock_wait: Histogram,
    filters: Family<FilterLabels, Counter>,
    binds: Family<BindLabels, Counter>,
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
        let filters = Family::<FilterLabels, Counter>::default();
        registry.register(
            "hami_scheduler_filter_requests",
            "/filter calls by result (placed, unschedulable, passthrough, error)",
            filters.clone(),
        );
        let binds = Family::<BindLabels, Counter>::default();
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

    pub fn filter_done(&self, result: FilterOutcome, elapsed: Duration) {
        self.filters.get_or_create(&FilterLabels { result }).inc();
        self.filter_duration.observe(elapsed.as_secs_f64());
    }

    pub fn bind_done(&self, result: BindOutcome, elapsed: Duration) {
        self.binds.get_or_create(&BindLabels { result }).inc();
        self.bind_duration.observe(elapsed.as_secs_f64());
    }

    pub fn lock_waited(&self, elapsed: Duration) {
        self.lock_wait.observe(elapsed.as_secs_f64());
    }

    pub fn error(&self, operation: Operation, reason: ErrorReason) {
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

/// One node's sums over its devices.
struct NodeTotals<'a> {
    node: &'a str,
    gpus: u64,
    totalmem: u64,
    usedmem: u64,
    used: u64,
}

impl<'a> NodeTotals<'a> {
    /// Per-node sums of `rows` (grouped by node, as [`UsageCollector::rows`] yields them).
    fn of(rows: &'a [DeviceRow]) -> Vec<Self> {
        let mut totals: Vec<NodeTotals<'a>> = Vec::new();
        for r in rows {
            match totals.last_mut() {
                Some(t) if t.node == r.node => {
                    t.gpus += 1;
                    t.totalmem += r.totalmem;
                    t.usedmem += r.usedmem;
                    t.used += r.used;
                }
                _ => totals.push(NodeTotals {
                    node: r.node.as_str(),
                    gpus: 1,
                    totalmem: r.totalmem,
                    usedmem: r.usedmem,
                    used: r.used,
                }),
            }
        }
        totals
    }
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
                // Vendors counting compute units (AMD) are shown in percent, as HAMi
                // does: the card is 100, the units taken rounded up.
                let percent = state
                    .registry()
                    .get(&vd.vendor)
                    .is_none_or(|v| v.cores_in_percent());
                for (d, u) in vd.devices.iter().zip(usage) {
                    let (totalcore, usedcores) = match (percent, u64::from(d.cores)) {
                        (false, total) if total > 0 => (100, (u.cores_used * 100).div_ceil(total)),
                        (_, total) => (total, u.cores_used),
                    };
                    rows.push(DeviceRow {
                        node: node.name().to_string(),
                        uuid: d.id.clone(),
                        index: d.index.to_string(),
                        dev_type: d.dev_type.clone(),
                        totalmem: u64::from(d.mem_mib),
                        totalcore,
                        usedmem: u.mem_used,
                        usedcores,
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

        let totals = NodeTotals::of(&rows);
        type Pick = fn(&NodeTotals<'_>) -> u64;
        let families: [(&str, &str, Pick); 4] = [
            (
                "hami_scheduler_node_gpus",
                "GPUs registered and usable on each node",
                |t| t.gpus,
            ),
            (
                "hami_scheduler_node_gpu_memory_limit_bytes",
                "Total GPU memory of each node, in bytes",
                |t| t.totalmem * MIB,
            ),
            (
                "hami_scheduler_node_gpu_memory_allocated_bytes",
                "GPU memory allocated on each node, in bytes",
                |t| t.usedmem * MIB,
            ),
            (
                "hami_scheduler_node_gpu_shared_count",
                "Container slots taken on each node's GPUs",
                |t| t.used,
            ),
        ];
        for (name, help, pick) in families {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for t in &totals {
                ConstGauge::new(pick(t)).encode(metric.encode_family(&[("node", t.node)])?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hami_core::config::DeviceConfig;
    use hami_core::vendor::VendorRegistry;
    use prometheus_client::encoding::text::encode;

    /// The label values are on the wire (dashboards, alerts): typed in code, the same
    /// strings as before they were typed.
    #[test]
    fn typed_labels_encode_as_their_fixed_strings() {
        let state = SchedState::new(VendorRegistry::from_config(&DeviceConfig::default()), 60);
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry, Arc::new(Mutex::new(state)));
        for o in FilterOutcome::ALL {
            metrics.filter_done(*o, Duration::ZERO);
        }
        for o in BindOutcome::ALL {
            metrics.bind_done(*o, Duration::ZERO);
        }
        for op in Operation::ALL {
            for r in ErrorReason::ALL {
                metrics.error(*op, *r);
            }
        }
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for result in ["placed", "unschedulable", "passthrough", "error"] {
            let line = format!("hami_scheduler_filter_requests_total{{result=\"{result}\"}} 1");
            assert!(text.contains(&line), "{line} missing in\n{text}");
        }
        for result in ["bound", "error"] {
            let line = format!("hami_scheduler_bind_requests_total{{result=\"{result}\"}} 1");
            assert!(text.contains(&line), "{line} missing in\n{text}");
        }
        let reasons = [
            "bad_body",
            "bad_request",
            "no_pod",
            "no_uid",
            "not_synced",
            "annotate_failed",
            "wrong_node",
            "not_reserved",
            "reservation_lost",
            "lock_timeout",
            "lock_release_failed",
            "node_gone",
            "pod_gone",
            "api",
        ];
        assert_eq!(ErrorReason::ALL.len(), reasons.len());
        for op in ["filter", "bind"] {
            for reason in reasons {
                let line = format!(
                    "hami_scheduler_errors_total{{operation=\"{op}\",reason=\"{reason}\"}} 1"
                );
                assert!(text.contains(&line), "{line} missing in\n{text}");
            }
        }
    }
}
