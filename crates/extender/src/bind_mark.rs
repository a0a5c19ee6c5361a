//! The bind mark: `hami.io/bind-phase=allocating` and `hami.io/bind-time`, what the
//! device plugin's pending-pod lookup reads on a pod bound to its node
//! (`docs/protocol.md#pod-annotations-the-scheduler-writes`).
//!
//! HAMi writes it at Bind, between the node lock and the Binding. Here /filter's
//! annotation write carries it, in the same patch as the decision, so /bind goes from
//! the node lock straight to the Binding: one API round trip less per pod
//! (`docs/extender.md#where-a-cycles-time-goes`). The device plugin reads the mark only on
//! a pod bound to its node, so what it sees is unchanged: the mark arrives with the
//! allocation annotations (never before them) and before the Binding.

use std::collections::BTreeMap;

use hami_core::annotations::{BIND_PHASE, BIND_TIME};
use hami_k8s::patch::MetadataPatch;

/// The bind phase the scheduler writes.
pub const ALLOCATING: &str = "allocating";

/// `patch` with the mark, stamped `now` (Unix seconds).
pub fn mark(patch: MetadataPatch, now: i64) -> MetadataPatch {
    patch
        .annotate(BIND_PHASE, ALLOCATING)
        .annotate(BIND_TIME, now.to_string())
}

/// Whether `annotations` carry the mark as the device plugin reads it: phase
/// `allocating` and a `bind-time` in Unix seconds.
pub fn is_marked(annotations: &BTreeMap<String, String>) -> bool {
    annotations.get(BIND_PHASE).map(String::as_str) == Some(ALLOCATING)
        && annotations
            .get(BIND_TIME)
            .is_some_and(|t| t.trim().parse::<i64>().is_ok())
}
