//! Keeps the node's register annotation equal to the inventory, and answers the scheduler's
//! handshake when kubelet cannot vouch for us.
//!
//! Handshake decision (`docs/protocol.md#handshake`): HAMi's current plugin writes no
//! handshake value and both schedulers treat a node whose `status.allocatable[<resource>]`
//! is positive as alive, so while kubelet reports our devices we leave
//! `hami.io/node-handshake` alone (answering there would only make HAMi's scheduler write a
//! fresh `Requesting_` every round). When allocatable is 0 or missing (all devices
//! unhealthy, kubelet not reporting yet, a test cluster without kubelet status) a pending
//! `Requesting_<time>` is answered with `Reported <time>`, which both schedulers read as
//! "the plugin is alive". A vendor whose HAMi scheduler re-reads the register annotation
//! only after such an answer (DCU) has it written every round instead
//! (`VendorHook::reports_handshake_every_round`).
//!
//! On graceful shutdown every device is published unhealthy, so no scheduler sends pods to a
//! node whose plugin is gone (kubelet would reject them); the next start publishes the real
//! health again.

use std::sync::Arc;
use std::time::Duration;

use hami_core::codec::handshake::REQUESTING;
use hami_k8s::patch::{MetadataPatch, patch_node};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::inventory::Inventory;
use crate::shared::{PluginStatus, Shared};

/// How long the shutdown write may take.
const WITHDRAW_TIMEOUT: Duration = Duration::from_secs(5);

/// Why one round failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("cannot read node {node}: {source}")]
    Read { node: String, source: kube::Error },
    #[error("cannot patch node {node}: {source}")]
    Write { node: String, source: kube::Error },
}

pub(crate) async fn run(
    shared: Arc<Shared>,
    status: watch::Sender<PluginStatus>,
    shutdown: CancellationToken,
) {
    let interval = shared.cfg.register_interval.max(Duration::from_secs(1));
    let mut inventory = shared.inventory.subscribe();
    let mut backoff = Backoff::new(Duration::from_secs(1), interval);
    loop {
        let current = inventory.borrow_and_update().clone();
        let healthy = current.devices().iter().filter(|d| d.healthy).count();
        shared
            .metrics
            .devices(healthy, current.devices().len() - healthy);
        let wait = match publish_once(&shared, &current).await {
            Ok(()) => {
                backoff.reset();
                status.send_modify(|s| {
                    s.published = true;
                    s.publish_error = None;
                });
                interval
            }
            Err(e) => {
                let wait = backoff.next_delay();
                tracing::warn!(error = %e, retry_in = ?wait, "cannot publish the node's devices");
                status.send_modify(|s| {
                    s.published = false;
                    s.publish_error = Some(e.to_string());
                });
                wait
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            changed = inventory.changed() => if changed.is_err() { break },
            _ = tokio::time::sleep(wait) => {}
        }
    }
    withdraw(&shared).await;
}

/// One round: read the node, write what differs.
pub(crate) async fn publish_once(
    shared: &Shared,
    inventory: &Inventory,
) -> Result<(), PublishError> {
    let cfg = &shared.cfg;
    let node_name = cfg.node_name.as_str();
    let value = shared.hook.register_value(inventory, cfg);
    let api: Api<Node> = Api::all(shared.kube.clone());
    let node = api
        .get(node_name)
        .await
        .map_err(|source| PublishError::Read {
            node: node_name.into(),
            source,
        })?;
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    let mut patch = MetadataPatch::new();
    let mut changed = Vec::new();
    if annotations.get(&cfg.vendor.register_annotation) != Some(&value) {
        patch = patch.annotate(&cfg.vendor.register_annotation, value.clone());
        changed.push("register");
    }
    if let Some(key) = &cfg.vendor.handshake_annotation {
        let requested = annotations.get(key).is_some_and(|v| v.contains(REQUESTING));
        let every_round = shared.hook.reports_handshake_every_round();
        if every_round || (requested && !kubelet_vouches(&node, &cfg.resource_name)) {
            let now = chrono::Local::now().format("%Y-%m-%d %H:%M:%S");
            patch = patch.annotate(key, format!("Reported {now}"));
            changed.push("handshake");
        }
    }
    if changed.is_empty() {
        return Ok(());
    }
    let written = patch_node(&shared.kube, node_name, &patch).await;
    shared.metrics.annotation_write(written.is_ok());
    written.map_err(|source| PublishError::Write {
        node: node_name.into(),
        source,
    })?;
    tracing::info!(node = node_name, annotations = ?changed, devices = inventory.devices().len(), register = %value, "node annotations updated");
    Ok(())
}

/// kubelet reports at least one allocatable device of our resource.
fn kubelet_vouches(node: &Node, resource: &str) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(resource))
        .and_then(|q| q.0.trim().parse::<i64>().ok())
        .is_some_and(|n| n > 0)
}

/// Publishes every device unhealthy (best effort, bounded).
async fn withdraw(shared: &Shared) {
    let mut inventory = shared.inventory();
    let uuids: Vec<String> = inventory.devices().iter().map(|d| d.uuid.clone()).collect();
    for uuid in &uuids {
        inventory.set_health(uuid, false);
    }
    match tokio::time::timeout(WITHDRAW_TIMEOUT, publish_once(shared, &inventory)).await {
        Ok(Ok(())) => {
            tracing::info!("devices withdrawn from the node annotation (plugin stopping)")
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot withdraw the node's devices"),
        Err(_) => tracing::warn!("withdrawing the node's devices timed out"),
    }
}
