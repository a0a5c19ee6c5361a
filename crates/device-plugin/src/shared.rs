//! State shared by the gRPC service, the publisher and the lifecycle loop.

use std::sync::Arc;

use hami_k8s::events::Recorder;
use tokio::sync::watch;

use crate::config::PluginConfig;
use crate::dir_watch::DirWatcher;
use crate::hook::VendorHook;
use crate::inventory::Inventory;
use crate::metrics::Metrics;

/// What a running plugin has achieved so far (for readiness and tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginStatus {
    /// Registered with the current kubelet.
    pub registered: bool,
    /// Successful registrations since start (a kubelet restart adds one).
    pub registrations: u64,
    /// The node's register annotation matches the inventory.
    pub published: bool,
    /// The last error of the inventory publisher, cleared by a success.
    pub publish_error: Option<String>,
}

impl PluginStatus {
    /// Waits up to `timeout` until the plugin behind `status` is registered with the
    /// current kubelet after at least `times` registrations; the last status as the
    /// error (for tests and harnesses).
    pub async fn wait_registered(
        status: &mut watch::Receiver<PluginStatus>,
        times: u64,
        timeout: std::time::Duration,
    ) -> Result<(), PluginStatus> {
        let reached = tokio::time::timeout(
            timeout,
            status.wait_for(|s| s.registered && s.registrations >= times),
        )
        .await
        .is_ok_and(|r| r.is_ok());
        if reached {
            return Ok(());
        }
        Err(status.borrow().clone())
    }
}

pub(crate) struct Shared {
    pub cfg: Arc<PluginConfig>,
    pub inventory: watch::Sender<Inventory>,
    pub kube: kube::Client,
    /// HAMi serialises Allocate: two containers must not consume the same annotation entry.
    pub allocate_lock: tokio::sync::Mutex<()>,
    pub metrics: Metrics,
    pub events: Option<Recorder>,
    /// The vendor's register entries and Allocate answer.
    pub hook: Arc<dyn VendorHook>,
    /// Notices kubelet restarts and our socket's removal in the plugin directory.
    pub dir_watcher: DirWatcher,
}

impl Shared {
    pub fn inventory(&self) -> Inventory {
        self.inventory.borrow().clone()
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("cfg", &self.cfg)
            .field("inventory", &*self.inventory.borrow())
            .finish_non_exhaustive()
    }
}
