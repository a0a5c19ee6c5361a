//! The usage a snapshot shows: node inventories, and the pods that hold devices by the
//! rule the extender applies to the pods it watches ([`hami_core::holding`]), so that
//! `hamictl explain` and the live scheduler count the same pods.

use std::collections::BTreeMap;

use hami_core::holding::{Expiry, PodHolding, Standing, pod_holding};
use hami_core::ledger::{
    InventoryIssue, Ledger, NodeInventory, unknown_allocations, unregistered_reason,
};
use hami_core::pod::{bound_node, pod_name};
use hami_core::vendor::{NodeView, VendorRegistry};
use k8s_openapi::api::core::v1::{Node, Pod};

/// A snapshot's nodes and their usage.
#[derive(Debug, Default)]
pub struct SnapshotUsage {
    pub ledger: Ledger,
    /// Every node's name, sorted (nodes without devices included: they are candidates
    /// that fail).
    pub candidates: Vec<String>,
    /// What could not be used, for the user.
    pub warnings: Vec<String>,
    /// Per node, the first of its annotations that could not be read.
    pub issues: BTreeMap<String, InventoryIssue>,
}

impl SnapshotUsage {
    /// Why a candidate the ledger does not know cannot take a pod, in hami-scheduler's
    /// words (FailedNodes).
    pub fn unusable_reason(&self, node: &str) -> String {
        unregistered_reason(self.issues.get(node))
    }
}

/// Builds the usage of `nodes` and `pods` judged at `expiry`; the pod `skip_uid` (the
/// one being explained) does not count against itself.
pub fn snapshot_usage(
    nodes: &[Node],
    pods: &[Pod],
    registry: &VendorRegistry,
    expiry: Expiry,
    skip_uid: Option<&str>,
) -> SnapshotUsage {
    let mut usage = SnapshotUsage::default();
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let (inventory, issues) = NodeInventory::from_node(&NodeView::of(node), registry);
        for i in &issues {
            usage
                .warnings
                .push(format!("node {name}: {}: {}", i.annotation, i.error));
        }
        if let Some(first) = issues.into_iter().next() {
            usage.issues.entry(name.clone()).or_insert(first);
        }
        if !inventory.vendors.is_empty() {
            usage.ledger.set_node(&name, inventory);
        }
        usage.candidates.push(name);
    }
    usage.candidates.sort();
    usage.candidates.dedup();

    for p in pods {
        if skip_uid.is_some() && p.metadata.uid.as_deref() == skip_uid {
            continue;
        }
        if let Some(a) = p.metadata.annotations.as_ref() {
            let unknown = unknown_allocations(a, registry);
            if !unknown.is_empty() {
                usage.warnings.push(format!(
                    "pod {}: {} name vendors not served (switched off or unknown); not counted",
                    pod_name(p),
                    unknown.join(",")
                ));
            }
        }
        match pod_holding(p, registry, expiry) {
            Ok(PodHolding::Counts(record)) => {
                let report = usage.ledger.apply_pod(record);
                if !report.unknown_devices.is_empty() {
                    usage.warnings.push(format!(
                        "pod {}: holds devices its node does not register: {}",
                        pod_name(p),
                        report.unknown_devices.join(",")
                    ));
                }
            }
            Ok(PodHolding::Lapsed {
                record,
                standing: Standing::BoundElsewhere,
            }) => usage.warnings.push(format!(
                "pod {}: bound to node {} but assigned GPUs on {}; not counted",
                pod_name(p),
                bound_node(p).unwrap_or_default(),
                record.node
            )),
            Ok(PodHolding::Nothing | PodHolding::Lapsed { .. }) => {}
            Err(e) => usage.warnings.push(format!("ignoring usage of {e}")),
        }
    }
    usage
}
