//! Whether a pod's allocation counts, and on which node: the one rule the extender
//! (watched pods) and `hamictl explain` (snapshots) apply, so that for the same pods they
//! compute the same usage (invariant 1, `docs/architecture.md#invariants`).
//!
//! A pod placed by the scheduler carries the decision in its annotations
//! (`hami.io/vgpu-node`, `hami.io/vgpu-time`, the vendors' `*-devices-allocated`):
//! - **terminated** (Succeeded/Failed) or **without a decision**, it holds nothing;
//! - **bound** (`spec.nodeName`) to the node the decision names, it holds the decided
//!   devices until it terminates or is deleted: terminating pods still hold, and so do
//!   pods whose allocation failed (`hami.io/bind-phase=failed`), which stay bound;
//! - **bound elsewhere**, it holds nothing;
//! - **not bound yet**, it holds the devices until `hami.io/vgpu-time` + the reservation
//!   timeout (HAMi's phantom reservations: a pod whose bind never happened must not block
//!   idle GPUs for ever), then nothing; without a decision time it holds nothing.
//!
//! The extender adds what only its own process knows (reservations made before the
//! annotations arrive, decisions it gave up, pods in the middle of /bind); see
//! `docs/extender.md`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use crate::annotations as keys;
use crate::ledger::{PodRecord, PodRecordError};
use crate::pod::bound_node;
use crate::vendor::VendorRegistry;

/// When holdings are judged, and how long an unbound decision holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    /// Unix seconds.
    pub now: i64,
    /// Seconds an unbound decision holds (at least 1).
    pub reservation_ttl: i64,
}

impl Expiry {
    pub fn new(now: i64, reservation_ttl: i64) -> Self {
        Expiry {
            now,
            reservation_ttl: reservation_ttl.max(1),
        }
    }

    /// Whether an unbound decision made at `decided_at` no longer holds. One made at an
    /// unknown time never did.
    pub fn expired(&self, decided_at: Option<i64>) -> bool {
        decided_at.is_none_or(|t| self.now >= t.saturating_add(self.reservation_ttl))
    }
}

/// How a pod's scheduling decision stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Bound to the decision's node: holds.
    Bound,
    /// Not bound yet, within the reservation timeout: holds.
    Pending,
    /// Not bound, past the reservation timeout (or decided at an unknown time): holds
    /// nothing.
    Expired,
    /// Bound to another node than the decision names: holds nothing.
    BoundElsewhere,
}

impl Standing {
    /// The standing of a decision for `decision_node` made at `decided_at`, for a pod
    /// bound to `bound_to`.
    pub fn of(
        decision_node: &str,
        decided_at: Option<i64>,
        bound_to: Option<&str>,
        expiry: Expiry,
    ) -> Standing {
        match bound_to {
            Some(b) if b == decision_node => Standing::Bound,
            Some(_) => Standing::BoundElsewhere,
            None if expiry.expired(decided_at) => Standing::Expired,
            None => Standing::Pending,
        }
    }

    /// Whether the decision's devices count.
    pub fn holds(self) -> bool {
        matches!(self, Standing::Bound | Standing::Pending)
    }
}

/// When the decision in these pod annotations was made (`hami.io/vgpu-time`), if it
/// says so readably.
pub fn decided_at(annotations: &BTreeMap<String, String>) -> Option<i64> {
    annotations
        .get(keys::VGPU_TIME)
        .and_then(|t| t.trim().parse::<i64>().ok())
}

/// What a pod holds, by its own object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodHolding {
    /// No decision, or terminated.
    Nothing,
    /// The record counts on its node.
    Counts(PodRecord),
    /// A decision that does not count (bound elsewhere, or expired unbound).
    Lapsed {
        record: PodRecord,
        standing: Standing,
    },
}

impl PodHolding {
    /// The record that counts, if any.
    pub fn counted(self) -> Option<PodRecord> {
        match self {
            PodHolding::Counts(r) => Some(r),
            PodHolding::Nothing | PodHolding::Lapsed { .. } => None,
        }
    }
}

/// What `pod` holds at `expiry.now` (see the module docs). Unreadable allocation
/// annotations are an error: the pod counts nothing, and the caller says why.
pub fn pod_holding(
    pod: &Pod,
    registry: &VendorRegistry,
    expiry: Expiry,
) -> Result<PodHolding, PodRecordError> {
    let Some(record) = PodRecord::from_pod(pod, registry)? else {
        return Ok(PodHolding::Nothing);
    };
    let decided = pod.metadata.annotations.as_ref().and_then(decided_at);
    let standing = Standing::of(&record.node, decided, bound_node(pod), expiry);
    Ok(if standing.holds() {
        PodHolding::Counts(record)
    } else {
        PodHolding::Lapsed { record, standing }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DeviceConfig;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000;
    const TTL: i64 = 120;

    /// A pod decided for node `a`'s GPU at `decided_at`, with `extra` merged in.
    fn pod(decided_at: &str, extra: serde_json::Value) -> Pod {
        let mut v = json!({
            "metadata": {"name": "p", "namespace": "ml", "uid": "u1", "annotations": {
                "hami.io/vgpu-node": "a",
                "hami.io/vgpu-time": decided_at,
                "hami.io/vgpu-devices-allocated": "GPU-a0,NVIDIA,1000,10:;",
            }},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Pending"},
        });
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
        match (into, from) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (slot, v) => *slot = v,
        }
    }

    /// What a pod was judged to hold, in short.
    #[derive(Debug, PartialEq)]
    enum Judged {
        Nothing,
        CountsOn(String),
        Lapsed(Standing),
    }

    fn judged(pod: &Pod) -> Judged {
        let registry = VendorRegistry::from_config(&DeviceConfig::default());
        match pod_holding(pod, &registry, Expiry::new(NOW, TTL)).unwrap() {
            PodHolding::Nothing => Judged::Nothing,
            PodHolding::Counts(r) => {
                assert_eq!(r.charges.len(), 1);
                assert_eq!(&*r.charges[0].uuid, "GPU-a0");
                assert_eq!(r.charges[0].mem, 1000);
                Judged::CountsOn(r.node.to_string())
            }
            PodHolding::Lapsed { standing, .. } => Judged::Lapsed(standing),
        }
    }

    #[test]
    fn which_pods_count_and_where() {
        let fresh = (NOW - 10).to_string();
        let old = (NOW - TTL).to_string();
        let cases = [
            (
                "bound and running",
                pod(
                    &old,
                    json!({"spec": {"nodeName": "a"}, "status": {"phase": "Running"}}),
                ),
                Judged::CountsOn("a".into()),
            ),
            (
                "bound, decided long ago",
                pod(&old, json!({"spec": {"nodeName": "a"}})),
                Judged::CountsOn("a".into()),
            ),
            (
                "unbound, fresh decision",
                pod(&fresh, json!({})),
                Judged::CountsOn("a".into()),
            ),
            (
                "unbound, decision past the timeout",
                pod(&old, json!({})),
                Judged::Lapsed(Standing::Expired),
            ),
            (
                "unbound, decision time unreadable",
                pod("soon", json!({})),
                Judged::Lapsed(Standing::Expired),
            ),
            (
                "decided for a, bound to b",
                pod(&fresh, json!({"spec": {"nodeName": "b"}})),
                Judged::Lapsed(Standing::BoundElsewhere),
            ),
            (
                "succeeded",
                pod(
                    &fresh,
                    json!({"spec": {"nodeName": "a"}, "status": {"phase": "Succeeded"}}),
                ),
                Judged::Nothing,
            ),
            (
                "failed",
                pod(
                    &fresh,
                    json!({"spec": {"nodeName": "a"}, "status": {"phase": "Failed"}}),
                ),
                Judged::Nothing,
            ),
            (
                "terminating",
                pod(
                    &old,
                    json!({"metadata": {"deletionTimestamp": "2027-01-15T08:00:00Z"},
                           "spec": {"nodeName": "a"}, "status": {"phase": "Running"}}),
                ),
                Judged::CountsOn("a".into()),
            ),
            (
                "allocation failed (bind-phase failed), still bound",
                pod(
                    &old,
                    json!({"metadata": {"annotations": {"hami.io/bind-phase": "failed"}},
                           "spec": {"nodeName": "a"}}),
                ),
                Judged::CountsOn("a".into()),
            ),
        ];
        for (what, p, expected) in cases {
            assert_eq!(judged(&p), expected, "{what}");
        }
    }

    #[test]
    fn pods_without_a_decision_hold_nothing_and_bad_ones_are_errors() {
        let registry = VendorRegistry::from_config(&DeviceConfig::default());
        let expiry = Expiry::new(NOW, TTL);
        let plain: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ml", "uid": "u2"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}
        }))
        .unwrap();
        assert_eq!(
            pod_holding(&plain, &registry, expiry),
            Ok(PodHolding::Nothing)
        );
        let garbage = pod(
            &NOW.to_string(),
            json!({"metadata": {"annotations": {"hami.io/vgpu-devices-allocated": "GPU-a0,NVIDIA,lots,10:;"}}}),
        );
        assert!(matches!(
            pod_holding(&garbage, &registry, expiry),
            Err(PodRecordError::BadAnnotation { .. })
        ));
    }

    #[test]
    fn expiry_is_at_decision_time_plus_the_timeout() {
        let e = Expiry::new(NOW, TTL);
        assert!(!e.expired(Some(NOW - TTL + 1)));
        assert!(e.expired(Some(NOW - TTL)));
        assert!(e.expired(None));
        assert!(!e.expired(Some(i64::MAX)));
        assert_eq!(Expiry::new(NOW, 0).reservation_ttl, 1);
    }
}
