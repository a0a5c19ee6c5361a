//! The plugin's series, registered in the process registry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HealthLabel {
    health: String,
}

/// Counters and gauges of one plugin. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    registrations: Family<ResultLabel, Counter>,
    allocations: Family<ResultLabel, Counter>,
    annotation_writes: Family<ResultLabel, Counter>,
    devices: Family<HealthLabel, Gauge>,
}

impl Metrics {
    /// Registers every series in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics::default();
        registry.register(
            "hami_device_plugin_registrations",
            "Registrations with kubelet, by result (ok, error)",
            m.registrations.clone(),
        );
        registry.register(
            "hami_device_plugin_allocations",
            "Allocate calls answered, by result (success, failed)",
            m.allocations.clone(),
        );
        registry.register(
            "hami_device_plugin_node_annotation_writes",
            "Writes of the node register/handshake annotations, by result (ok, error)",
            m.annotation_writes.clone(),
        );
        registry.register(
            "hami_device_plugin_devices",
            "Physical devices published, by health (healthy, unhealthy)",
            m.devices.clone(),
        );
        m
    }

    fn inc(family: &Family<ResultLabel, Counter>, ok: bool, good: &str, bad: &str) {
        let result = if ok { good } else { bad }.to_string();
        family.get_or_create(&ResultLabel { result }).inc();
    }

    pub(crate) fn registration(&self, ok: bool) {
        Self::inc(&self.registrations, ok, "ok", "error");
    }

    pub(crate) fn allocation(&self, ok: bool) {
        Self::inc(&self.allocations, ok, "success", "failed");
    }

    pub(crate) fn annotation_write(&self, ok: bool) {
        Self::inc(&self.annotation_writes, ok, "ok", "error");
    }

    pub(crate) fn devices(&self, healthy: usize, unhealthy: usize) {
        for (label, n) in [("healthy", healthy), ("unhealthy", unhealthy)] {
            self.devices
                .get_or_create(&HealthLabel {
                    health: label.into(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}
