//! Metrics: HAMi's scheduler series (per GPU, per pod, per quota, `hami_build_info`; same
//! names, labels and units, so HAMi's dashboards and alerts keep working; HAMi's legacy
//! names with `--legacy-metrics`), per-node totals, and the extender's own latency and
//! error series (`docs/protocol.md#metrics`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hami_core::quota::QuotaBook;
use hami_core::sync::MutexExt;
use hami_server::metrics_page;
use prometheus_client::collector::Collector;
use std::fmt::Write as _;

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use hami_k8s::events::Recorder;
use hami_k8s::quotas::QuotaCache;

use crate::scrape_blocks::{ScrapeBlocks, Tail};
use crate::scrape_view::{NodeCopy, PodCopy, PodDeviceRow, ScrapeView, pod_rows};
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
        /// The node, pod and resourcequota caches had not synced in time.
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
        /// The process is shutting down: it starts no bind and ends lock waits.
        ShuttingDown => "shutting_down",
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
    /// Registers the series, `hami_build_info`, and the collector of HAMi's series
    /// reading `state` at scrape time (`legacy`: also HAMi's pre-2.8 names).
    pub fn register(
        registry: &mut Registry,
        state: Arc<Mutex<SchedState>>,
        quotas: QuotaCache,
        legacy: bool,
    ) -> Self {
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
        registry.register_collector(Box::new(UsageCollector {
            state,
            quotas,
            view: Mutex::default(),
            legacy,
        }));
        hami_server::build_info::register_build_info(registry);
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

/// One device's numbers, for the per-GPU families.
struct DeviceRow<'a> {
    node: &'a str,
    uuid: &'a str,
    index: u32,
    dev_type: &'a str,
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
    /// Per-node sums of `rows` (grouped by node, as [`device_rows`] yields them).
    fn of(rows: &[DeviceRow<'a>]) -> Vec<Self> {
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
                    node: r.node,
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

/// A namespace's use of one quota resource, with its limit when one is set.
#[derive(Debug)]
pub(crate) struct QuotaRow {
    namespace: String,
    resource: String,
    used: u64,
    limit: Option<u64>,
}

/// The per-GPU rows of `nodes` (by node name, each node's devices in inventory order).
fn device_rows<'a>(nodes: &[&'a NodeCopy]) -> Vec<DeviceRow<'a>> {
    let mut rows = Vec::with_capacity(
        nodes
            .iter()
            .map(|n| n.usage.iter().map(Vec::len).sum::<usize>())
            .sum(),
    );
    for node in nodes {
        let groups = node.inventory.vendors.iter().zip(&node.usage);
        for ((vd, usage), &percent) in groups.zip(&node.cores_in_percent) {
            // Vendors counting compute units (AMD) are shown in percent, as HAMi
            // does: the card is 100, the units taken rounded up.
            for (d, u) in vd.devices.iter().zip(usage) {
                let (totalcore, usedcores) = match (percent, u64::from(d.cores)) {
                    (false, total) if total > 0 => (100, (u.cores_used * 100).div_ceil(total)),
                    (_, total) => (total, u.cores_used),
                };
                rows.push(DeviceRow {
                    node: &node.name,
                    uuid: &d.id,
                    index: d.index,
                    dev_type: &d.dev_type,
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

/// HAMi's quota entries: every resource a namespace's pods use (memory and cores of
/// each vendor they hold devices of) or a ResourceQuota limits, with the limit when set
/// (`docs/protocol.md#metrics`).
fn quota_rows(st: &SchedState, book: &QuotaBook) -> Vec<QuotaRow> {
    let mut rows: BTreeMap<(String, String), QuotaRow> = BTreeMap::new();
    let mut add = |namespace: &str, resource: &str, used: u64| {
        rows.entry((namespace.to_string(), resource.to_string()))
            .or_insert_with(|| QuotaRow {
                namespace: namespace.to_string(),
                resource: resource.to_string(),
                used: 0,
                limit: book.limit(namespace, resource),
            })
            .used += used;
    };
    for (namespace, vendor, u) in st.ledger().namespace_uses() {
        let Some(v) = st.registry().get(vendor) else {
            continue;
        };
        let r = v.quota_resources();
        if let Some(memory) = &r.memory {
            add(namespace, memory, u.memory);
        }
        if let Some(cores) = &r.cores {
            add(namespace, cores, u.cores);
        }
    }
    for (namespace, resource, _) in book.limits() {
        add(namespace, resource, 0);
    }
    rows.into_values().collect()
}

/// Reads per-GPU, per-pod and per-quota numbers from the state at scrape time.
#[derive(Debug)]
struct UsageCollector {
    state: Arc<Mutex<SchedState>>,
    quotas: QuotaCache,
    /// The nodes and pods as of the last scrape, and the page's pieces formatted from
    /// them; held for a whole scrape (concurrent scrapes take turns).
    view: Mutex<(ScrapeView, ScrapeBlocks)>,
    /// Also HAMi's pre-2.8 names (`--legacy-metrics`).
    legacy: bool,
}

/// A label value: text, or a number (written as prometheus-client writes integers), so
/// no row needs a string of its own.
#[derive(Debug, Clone, Copy)]
enum Value<'a> {
    Text(&'a str),
    Number(u64),
}

impl EncodeLabelValue for Value<'_> {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        match self {
            Value::Text(s) => encoder.write_str(s),
            Value::Number(n) => n.encode(encoder),
        }
    }
}

type Labels<'a, const N: usize> = [(&'static str, Value<'a>); N];

const ZONE: (&str, Value<'_>) = ("zone", Value::Text("vGPU"));

/// HAMi's per-device labels.
fn device<'a>(r: &DeviceRow<'a>) -> Labels<'a, 5> {
    [
        ZONE,
        ("node", Value::Text(r.node)),
        ("device_uuid", Value::Text(r.uuid)),
        ("device_index", Value::Number(u64::from(r.index))),
        ("device_type", Value::Text(r.dev_type)),
    ]
}

/// HAMi's legacy per-device labels.
fn legacy_device<'a>(r: &DeviceRow<'a>) -> Labels<'a, 5> {
    [
        ZONE,
        ("nodeid", Value::Text(r.node)),
        ("deviceuuid", Value::Text(r.uuid)),
        ("deviceidx", Value::Number(u64::from(r.index))),
        ("devicetype", Value::Text(r.dev_type)),
    ]
}

/// HAMi's per-container labels (collapsed usage: the container index is always 0).
fn pod_labels<'a>(r: &PodDeviceRow<'a>) -> Labels<'a, 6> {
    [
        ZONE,
        ("namespace", Value::Text(r.namespace)),
        ("node", Value::Text(r.node)),
        ("pod", Value::Text(r.pod)),
        ("container_index", Value::Number(0)),
        ("device_uuid", Value::Text(r.uuid)),
    ]
}

/// HAMi's legacy per-container labels.
fn legacy_pod_labels<'a>(r: &PodDeviceRow<'a>) -> Labels<'a, 6> {
    [
        ZONE,
        ("podnamespace", Value::Text(r.namespace)),
        ("nodename", Value::Text(r.node)),
        ("podname", Value::Text(r.pod)),
        ("containeridx", Value::Number(0)),
        ("deviceuuid", Value::Text(r.uuid)),
    ]
}

fn gauge_family<'r, R, L, T>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &'r [R],
    labels: impl Fn(&'r R) -> L,
    value: impl Fn(&R) -> Option<T>,
) -> Result<(), std::fmt::Error>
where
    L: EncodeLabelSet,
    T: prometheus_client::encoding::EncodeGaugeValue + Copy,
    ConstGauge<T>: EncodeMetric,
{
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for r in rows {
        if let Some(v) = value(r) {
            ConstGauge::new(v).encode(metric.encode_family(&labels(r))?)?;
        }
    }
    Ok(())
}

/// A label whose value is a number taken from each device row.
type RowLabel = (&'static str, fn(&DeviceRow<'_>) -> u64);

/// A family over device rows whose labels end with per-row numbers.
#[allow(clippy::too_many_arguments)]
fn device_family_with<const M: usize>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[DeviceRow<'_>],
    base: for<'a> fn(&DeviceRow<'a>) -> Labels<'a, 5>,
    extra: [RowLabel; M],
    value: fn(&DeviceRow<'_>) -> u64,
) -> Result<(), std::fmt::Error> {
    gauge_family(
        encoder,
        name,
        help,
        rows,
        |r| (base(r), extra.map(|(k, f)| (k, Value::Number(f(r))))),
        |r| Some(value(r)),
    )
}

/// Which parts of the collector's series to encode, in page order (see
/// [`encode_sections`]); a part left out writes nothing, not even its headers.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Sections<'a> {
    /// The per-GPU families and the per-node totals.
    pub nodes: Option<&'a [&'a NodeCopy]>,
    /// The per-pod families.
    pub pods: Option<&'a [&'a PodCopy]>,
    /// The quota families and the reservations gauge.
    pub tail: Option<&'a Tail>,
}

/// The collector's series for `sections`, in page order: per GPU, per pod, quotas, per
/// node, reservations. The one place that order is written: a whole page and the pieces
/// a cached page is made of (`scrape_blocks.rs`) both come from here.
pub(crate) fn encode_sections(
    encoder: &mut DescriptorEncoder,
    sections: Sections<'_>,
    legacy: bool,
) -> Result<(), std::fmt::Error> {
    let rows = sections.nodes.map(device_rows);
    if let Some(rows) = &rows {
        encode_devices(encoder, rows, legacy)?;
    }
    if let Some(pods) = sections.pods {
        encode_pods(encoder, &pod_rows(pods), legacy)?;
    }
    if let Some(tail) = sections.tail {
        encode_quotas(encoder, &tail.quotas, legacy)?;
    }
    if let Some(rows) = &rows {
        encode_node_totals(encoder, &NodeTotals::of(rows))?;
    }
    if let Some(tail) = sections.tail {
        ConstGauge::new(tail.held).encode(encoder.encode_descriptor(
            "hami_scheduler_reservations",
            "Pods holding GPUs while unbound (a /filter decision awaiting its bind, or annotations not yet expired)",
            None,
            MetricType::Gauge,
        )?)?;
    }
    Ok(())
}

/// Families [`encode_node_totals`] writes (the last of a node piece's families).
pub(crate) const NODE_TOTAL_FAMILIES: usize = 4;

fn encode_node_totals(
    encoder: &mut DescriptorEncoder,
    totals: &[NodeTotals<'_>],
) -> Result<(), std::fmt::Error> {
    type Pick = fn(&NodeTotals<'_>) -> u64;
    let families: [(&str, &str, Pick); NODE_TOTAL_FAMILIES] = [
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
        for t in totals {
            ConstGauge::new(pick(t)).encode(metric.encode_family(&[("node", t.node)])?)?;
        }
    }
    Ok(())
}

fn encode_devices(
    encoder: &mut DescriptorEncoder,
    rows: &[DeviceRow<'_>],
    legacy: bool,
) -> Result<(), std::fmt::Error> {
    let used_cores: fn(&DeviceRow<'_>) -> u64 = |r| r.usedcores;
    let total_mem: fn(&DeviceRow<'_>) -> u64 = |r| r.totalmem;
    gauge_family(
        encoder,
        "hami_gpu_memory_limit_bytes",
        "Device memory of each GPU, in bytes",
        rows,
        device,
        |r| Some(r.totalmem * MIB),
    )?;
    gauge_family(
        encoder,
        "hami_gpu_core_limit_ratio",
        "Compute of each GPU in percent of one card",
        rows,
        device,
        |r| Some(r.totalcore),
    )?;
    device_family_with(
        encoder,
        "hami_gpu_memory_allocated_bytes",
        "Device memory allocated to pods on each GPU, in bytes",
        rows,
        device,
        [("device_cores", used_cores)],
        |r| r.usedmem * MIB,
    )?;
    gauge_family(
        encoder,
        "hami_gpu_shared_count",
        "Containers sharing each GPU",
        rows,
        device,
        |r| Some(r.used),
    )?;
    gauge_family(
        encoder,
        "hami_gpu_core_allocated_ratio",
        "Compute allocated on each GPU, in percent of one card",
        rows,
        device,
        |r| Some(r.usedcores),
    )?;
    device_family_with(
        encoder,
        "hami_node_gpu_overview",
        "GPU overview on a certain node: memory allocated, in bytes, with the cores allocated and the memory limit (MiB) as labels",
        rows,
        device,
        [
            ("device_cores", used_cores),
            ("device_memory_limit", total_mem),
        ],
        |r| r.usedmem * MIB,
    )?;
    gauge_family(
        encoder,
        "hami_node_gpu_memory_allocated_ratio",
        "Fraction (0..1) of each GPU's memory allocated",
        rows,
        device,
        |r| (r.totalmem > 0).then(|| r.usedmem as f64 / r.totalmem as f64),
    )?;
    if !legacy {
        return Ok(());
    }
    gauge_family(
        encoder,
        "GPUDeviceMemoryLimit",
        "Device memory limit for a certain GPU",
        rows,
        legacy_device,
        |r| Some(r.totalmem * MIB),
    )?;
    gauge_family(
        encoder,
        "GPUDeviceCoreLimit",
        "Device memory core limit for a certain GPU",
        rows,
        legacy_device,
        |r| Some(r.totalcore),
    )?;
    device_family_with(
        encoder,
        "GPUDeviceMemoryAllocated",
        "Device memory allocated for a certain GPU",
        rows,
        legacy_device,
        [("devicecores", used_cores)],
        |r| r.usedmem * MIB,
    )?;
    gauge_family(
        encoder,
        "GPUDeviceSharedNum",
        "Number of containers sharing this GPU",
        rows,
        legacy_device,
        |r| Some(r.used),
    )?;
    gauge_family(
        encoder,
        "GPUDeviceCoreAllocated",
        "Device core allocated for a certain GPU",
        rows,
        legacy_device,
        |r| Some(r.usedcores),
    )?;
    device_family_with(
        encoder,
        "nodeGPUOverview",
        "GPU overview on a certain node",
        rows,
        legacy_device,
        [
            ("devicecores", used_cores),
            ("devicememorylimit", total_mem),
        ],
        |r| r.usedmem * MIB,
    )?;
    gauge_family(
        encoder,
        "nodeGPUMemoryPercentage",
        "GPU Memory Allocated Percentage on a certain GPU",
        rows,
        |r| {
            [
                ZONE,
                ("nodeid", Value::Text(r.node)),
                ("deviceuuid", Value::Text(r.uuid)),
                ("deviceidx", Value::Number(u64::from(r.index))),
            ]
        },
        |r| (r.totalmem > 0).then(|| r.usedmem as f64 / r.totalmem as f64),
    )
}

/// HAMi's per-container series: one per pod and device, collapsed (so the container
/// index is always 0, as in HAMi).
fn encode_pods(
    encoder: &mut DescriptorEncoder,
    pods: &[PodDeviceRow<'_>],
    legacy: bool,
) -> Result<(), std::fmt::Error> {
    gauge_family(
        encoder,
        "hami_vgpu_memory_allocated_bytes",
        "vGPU memory allocated from a container, in bytes",
        pods,
        pod_labels,
        |r| Some(r.mem * MIB),
    )?;
    gauge_family(
        encoder,
        "hami_vgpu_core_allocated_ratio",
        "vGPU core allocated from a container, in percent of one card",
        pods,
        pod_labels,
        |r| Some(r.cores),
    )?;
    if legacy {
        gauge_family(
            encoder,
            "vGPUMemoryAllocated",
            "vGPU memory allocated from a container",
            pods,
            legacy_pod_labels,
            |r| Some(r.mem * MIB),
        )?;
        gauge_family(
            encoder,
            "vGPUCoreAllocated",
            "vGPU core allocated from a container",
            pods,
            legacy_pod_labels,
            |r| Some(r.cores),
        )?;
    }
    Ok(())
}

/// HAMi's quota series: use per namespace and resource (the limit as a label, `0`
/// when none is set), and the limit where one is.
fn encode_quotas(
    encoder: &mut DescriptorEncoder,
    quotas: &[QuotaRow],
    legacy: bool,
) -> Result<(), std::fmt::Error> {
    let limit = |q: &QuotaRow| Value::Number(q.limit.unwrap_or(0));
    gauge_family(
        encoder,
        "hami_resource_quota_used",
        "resourcequota usage for a certain device",
        quotas,
        |q| {
            [
                ZONE,
                ("namespace", Value::Text(&q.namespace)),
                ("quota_name", Value::Text(&q.resource)),
                ("limit", limit(q)),
            ]
        },
        |q| Some(q.used),
    )?;
    gauge_family(
        encoder,
        "hami_resource_quota_limit",
        "resourcequota limit for a certain device",
        quotas,
        |q| {
            [
                ZONE,
                ("namespace", Value::Text(&q.namespace)),
                ("quota_name", Value::Text(&q.resource)),
            ]
        },
        |q| q.limit,
    )?;
    if legacy {
        gauge_family(
            encoder,
            "QuotaUsed",
            "resourcequota usage for a certain device",
            quotas,
            |q| {
                [
                    ZONE,
                    ("quotanamespace", Value::Text(&q.namespace)),
                    ("quotaName", Value::Text(&q.resource)),
                    ("limit", limit(q)),
                ]
            },
            |q| Some(q.used),
        )?;
    }
    Ok(())
}

/// Registers `hami_scheduler_events_dropped_total`: Kubernetes events the recorder
/// dropped because its queue was full (the API server fell behind a burst of
/// decisions; `docs/extender.md#memory`). Read from the recorder at scrape time.
pub fn register_event_drops(registry: &mut Registry, events: Recorder) {
    registry.register_collector(Box::new(EventDrops(events)));
}

#[derive(Debug)]
struct EventDrops(Recorder);

impl Collector for EventDrops {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        ConstCounter::new(self.0.dropped()).encode(encoder.encode_descriptor(
            "hami_scheduler_events_dropped",
            "Kubernetes events dropped because the event queue was full (the API server was slower than the decisions)",
            None,
            MetricType::Counter,
        )?)
    }
}

impl Collector for UsageCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let started = Instant::now();
        let mut scrape = self.view.lock_unpoisoned();
        let (view, blocks) = &mut *scrape;
        // The only hold of the state lock: what changed since the last scrape, the quota
        // use (a few rows per namespace) and the number of unbound holders.
        let (refreshed, tail) = {
            let st = self.state.lock_unpoisoned();
            let refreshed = view.refresh(&st);
            let quotas = quota_rows(&st, &self.quotas.read());
            let held = st.unbound_holders() as u64;
            (refreshed, Tail { quotas, held })
        };
        // Not before: at the lowest priority, the copy above would keep the state lock
        // (and every /filter waiting for it) for as long as it waits for CPU.
        hami_server::admin::lower_encoding_priority();
        let Some(encoding) = metrics_page::page_encoding() else {
            // Encoded into a string (not a served page): everything formatted here.
            let nodes: Vec<&NodeCopy> = view.nodes().map(|(_, n)| &**n).collect();
            let pods: Vec<&PodCopy> = view.pods().map(|(_, p)| &**p).collect();
            let sections = Sections {
                nodes: Some(&nodes),
                pods: Some(&pods),
                tail: Some(&tail),
            };
            return encode_sections(&mut encoder, sections, self.legacy);
        };
        let page = blocks
            .page(view, encoding, self.legacy, tail)
            .map_err(|e| {
                tracing::warn!(error = %e, "the metrics page could not be assembled");
                std::fmt::Error
            })?;
        let stats = page.stats;
        metrics_page::splice(page.chunks);
        tracing::debug!(
            changes = ?refreshed.changes,
            lock_held_us = refreshed.took.as_micros() as u64,
            ?encoding,
            pieces = stats.pieces,
            pieces_formatted = stats.formatted,
            bytes = stats.bytes,
            took_ms = started.elapsed().as_millis() as u64,
            "metrics scraped (changes: none = every node and pod copied)"
        );
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
        let vendors = VendorRegistry::from_config(&DeviceConfig::default());
        let quotas = QuotaCache::new(&vendors);
        let state = SchedState::new(vendors, 60);
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry, Arc::new(Mutex::new(state)), quotas, false);
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
            "shutting_down",
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
