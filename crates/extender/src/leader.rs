//! Leader awareness: kube-scheduler elects a leader through a Lease; only the replica
//! whose kube-scheduler holds it is called, and only it writes node handshakes
//! (`docs/protocol.md#leader-election`). The Lease is watched, and re-judged on a timer
//! because a lease expires without any event.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use hami_server::CancellationToken;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::metrics::Metrics;

/// Whether this replica leads. Always true when leader election is off.
#[derive(Debug, Clone)]
pub struct Leadership(Arc<AtomicBool>);

impl Leadership {
    pub fn always() -> Self {
        Leadership(Arc::new(AtomicBool::new(true)))
    }

    pub fn is_leader(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, v: bool) -> bool {
        self.0.swap(v, Ordering::Relaxed) != v
    }
}

/// Whether `lease` is held by `identity` (kube-scheduler's holder identity is
/// `<hostname>_<uuid>`, the hostname being the pod name) and not expired at `now`.
pub fn holds(lease: &Lease, identity: &str, now: k8s_openapi::jiff::Timestamp) -> bool {
    let Some(spec) = &lease.spec else {
        return false;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if identity.is_empty() || !holder.starts_with(identity) {
        return false;
    }
    let (Some(renew), Some(secs)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return false;
    };
    let Ok(span) = k8s_openapi::jiff::SignedDuration::try_from(Duration::from_secs(
        u64::try_from(secs).unwrap_or(0),
    )) else {
        return false;
    };
    renew.0.checked_add(span).is_ok_and(|until| until > now)
}

/// kube-scheduler's leader Lease, and who this replica is in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRef {
    pub namespace: String,
    pub name: String,
    /// This replica's kube-scheduler identity (the holder identity's prefix).
    pub identity: String,
}

/// Follows `lease` until `shutdown`, updating `leadership`. The watch stream ending, or
/// an error no retry fixes, stops it (its supervisor starts it again).
pub async fn follow_lease(
    client: Client,
    lease: LeaseRef,
    leadership: Leadership,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let LeaseRef {
        namespace,
        name,
        identity,
    } = lease;
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut current: Option<Lease> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tick.tick() => {}
            next = stream.try_next() => match next {
                Ok(Some(Event::Apply(l) | Event::InitApply(l))) => current = Some(l),
                Ok(Some(Event::Delete(_))) => current = None,
                Ok(Some(Event::Init | Event::InitDone)) => {}
                Ok(None) => return Err("the lease watch stream ended".into()),
                Err(e) if hami_k8s::watch::is_permanent(&e) => {
                    return Err(format!("the API server refused the lease watch: {e}"));
                }
                Err(e) => tracing::warn!(error = %e, "lease watch failed; retrying"),
            },
        }
        let now = k8s_openapi::jiff::Timestamp::now();
        let leads = current.as_ref().is_some_and(|l| holds(l, &identity, now));
        if leadership.set(leads) {
            tracing::info!(leader = leads, lease = %format!("{namespace}/{name}"), %identity, "leadership changed");
        }
        metrics.set_leader(leads);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn holder_prefix_and_expiry() {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": "hami-scheduler"},
            "spec": {"holderIdentity": "sched-0_1234", "leaseDurationSeconds": 15,
                     "renewTime": "2026-01-01T00:00:00.000000Z"}
        }))
        .unwrap();
        let at = |s: &str| s.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
        assert!(holds(&lease, "sched-0", at("2026-01-01T00:00:10Z")));
        assert!(!holds(&lease, "sched-0", at("2026-01-01T00:00:16Z")));
        assert!(!holds(&lease, "sched-1", at("2026-01-01T00:00:10Z")));
        assert!(!holds(&lease, "", at("2026-01-01T00:00:10Z")));
        assert!(!holds(
            &Lease::default(),
            "sched-0",
            at("2026-01-01T00:00:10Z")
        ));
    }
}
