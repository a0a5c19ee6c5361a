//! What the dashboard shows, copied out of the extender's state under its lock and
//! turned into documents outside it: /filter never waits for a page to be built
//! (`docs/dashboard.md`).
//!
//! Under the lock only the per-node usage (a few vectors per node) and the refusals are
//! copied; sums, fragmentation and JSON are computed afterwards.

use std::sync::Mutex;

use hami_core::ledger::{NodeState, PodRecord};
use hami_core::sync::MutexExt;
use hami_core::view::{ClusterSummary, GpuView, NodeSummary, node_gpus};
use serde::Serialize;

use crate::state::{NodeEntry, SchedState};
use crate::unschedulable::Refusal;

/// A vendor's devices on a node that hami-scheduler does not place pods on now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unavailable {
    pub vendor: String,
    pub gpus: usize,
    /// Why (its device plugin stopped reporting).
    pub reason: String,
}

/// One node as the overview lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeRow {
    #[serde(flatten)]
    pub summary: NodeSummary,
    pub unavailable: Vec<Unavailable>,
    /// Why the node takes no GPU pod at all, when it does not (FailedNodes' words).
    pub reason: Option<String>,
}

/// `/api/v1/cluster`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterDoc {
    pub scheduler: String,
    /// Whether the node and pod caches have synced (until then the numbers are partial).
    pub synced: bool,
    pub summary: ClusterSummary,
    /// Every node hami-scheduler watches, by name.
    pub nodes: Vec<NodeRow>,
    /// Pods /filter found no node for, oldest first.
    pub pending: Vec<Refusal>,
}

/// `/api/v1/nodes/{name}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeDoc {
    #[serde(flatten)]
    pub row: NodeRow,
    /// Its GPUs, each with the pods holding it (`gpus` is their count).
    pub devices: Vec<GpuView>,
}

/// One node as copied under the lock.
struct NodeCopy {
    name: String,
    /// The ledger's view (devices of healthy vendors and their usage), if it has one.
    state: Option<NodeState>,
    pods: usize,
    unavailable: Vec<Unavailable>,
    reason: Option<String>,
}

impl NodeCopy {
    fn of(st: &SchedState, name: &str, entry: &NodeEntry) -> Self {
        let ledger = st.ledger();
        let state = ledger.node(name).cloned();
        let unavailable = entry
            .unhealthy
            .iter()
            .map(|(vendor, reason)| Unavailable {
                vendor: vendor.clone(),
                gpus: entry
                    .inventory
                    .vendors
                    .iter()
                    .find(|v| v.vendor == *vendor)
                    .map_or(0, |v| v.devices.len()),
                reason: reason.clone(),
            })
            .collect();
        NodeCopy {
            name: name.to_string(),
            reason: state.is_none().then(|| st.unusable_reason(name)),
            state,
            pods: ledger.pod_count_on(name),
            unavailable,
        }
    }

    fn row(&self) -> NodeRow {
        let summary = match &self.state {
            Some(state) => NodeSummary::of(state, self.pods),
            None => NodeSummary {
                name: self.name.clone(),
                gpus: 0,
                models: Vec::new(),
                memory_mib: Default::default(),
                cores: Default::default(),
                slots: Default::default(),
                pods: self.pods,
                fragmentation: Default::default(),
            },
        };
        NodeRow {
            summary,
            unavailable: self.unavailable.clone(),
            reason: self.reason.clone(),
        }
    }
}

/// The overview of the cluster (`scheduler`: this extender's name).
pub fn cluster_doc(state: &Mutex<SchedState>, scheduler: &str) -> ClusterDoc {
    let (nodes, pending, synced) = {
        let st = state.lock_unpoisoned();
        let nodes: Vec<NodeCopy> = st
            .nodes()
            .map(|(name, entry)| NodeCopy::of(&st, name, entry))
            .collect();
        (nodes, st.unschedulable().list(), st.synced())
    };
    ClusterDoc {
        scheduler: scheduler.to_string(),
        synced,
        summary: ClusterSummary::of(nodes.iter().filter_map(|n| n.state.as_ref())),
        nodes: nodes.iter().map(NodeCopy::row).collect(),
        pending,
    }
}

/// One node with its GPUs and their pods; `None` when the extender does not know it.
pub fn node_doc(state: &Mutex<SchedState>, name: &str) -> Option<NodeDoc> {
    let (node, pods): (NodeCopy, Vec<PodRecord>) = {
        let st = state.lock_unpoisoned();
        let entry = st.node(name)?;
        let pods = st.ledger().pods_on(name).into_iter().cloned().collect();
        (NodeCopy::of(&st, name, entry), pods)
    };
    let pods: Vec<&PodRecord> = pods.iter().collect();
    let devices = node
        .state
        .as_ref()
        .map(|s| node_gpus(s, &pods))
        .unwrap_or_default();
    Some(NodeDoc {
        row: node.row(),
        devices,
    })
}
