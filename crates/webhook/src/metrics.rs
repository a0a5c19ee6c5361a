//! Webhook metrics: reviews by result (and the rule that denied), and latency.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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
