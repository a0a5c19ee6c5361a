//! Webhook metrics: reviews by result (and the rule that denied), latency, and whether
//! the quota rule has the namespaces' limits yet.

use std::time::Duration;

use hami_k8s::quotas::QuotaCache;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted with a patch.
    Patched,
    /// Admitted unchanged.
    Allowed,
    /// Admitted unchanged because another scheduler owns the pod.
    Skipped,
    /// Refused by a rule.
    Denied(&'static str),
    /// Not an AdmissionReview we can answer (HTTP 4xx).
    BadRequest,
}

impl Outcome {
    fn labels(self) -> RequestLabels {
        let (result, rule) = match self {
            Outcome::Patched => ("patched", "none"),
            Outcome::Allowed => ("allowed", "none"),
            Outcome::Skipped => ("skipped", "none"),
            Outcome::Denied(rule) => ("denied", rule),
            Outcome::BadRequest => ("bad_request", "none"),
        };
        RequestLabels {
            result: result.to_string(),
            rule: rule.to_string(),
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    result: String,
    rule: String,
}

/// The webhook's series, registered in the process registry.
#[derive(Debug, Clone)]
pub struct Metrics {
    requests: Family<RequestLabels, Counter>,
    duration: Histogram,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "hami_webhook_admission_requests",
            "Admission requests handled, by result (patched, allowed, skipped, denied, bad_request) and the rule that denied",
            requests.clone(),
        );
        // 0.25 ms .. ~0.5 s
        let duration = Histogram::new(exponential_buckets(0.000_25, 2.0, 12));
        registry.register(
            "hami_webhook_admission_duration_seconds",
            "Time to answer one admission request, body read to response built",
            duration.clone(),
        );
        Metrics { requests, duration }
    }

    pub fn observe(&self, outcome: Outcome, elapsed: Duration) {
        self.requests.get_or_create(&outcome.labels()).inc();
        self.duration.observe(elapsed.as_secs_f64());
    }
}

/// Registers `hami_webhook_resource_quotas_synced` and
/// `hami_webhook_resource_quota_limits`: whether the quota rule has listed the
/// ResourceQuotas yet (before that, it refuses nothing), and how many limits it knows.
pub fn register_quota_state(registry: &mut Registry, quotas: QuotaCache) {
    registry.register_collector(Box::new(QuotaState(quotas)));
}

#[derive(Debug)]
struct QuotaState(QuotaCache);

impl Collector for QuotaState {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let synced = i64::from(self.0.synced());
        let limits = self.0.read().limits().count() as i64;
        for (name, help, value) in [
            (
                "hami_webhook_resource_quotas_synced",
                "1 once the quota rule has listed every ResourceQuota",
                synced,
            ),
            (
                "hami_webhook_resource_quota_limits",
                "Namespace limits on device resources the quota rule knows",
                limits,
            ),
        ] {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(value).encode(metric)?;
        }
        Ok(())
    }
}
