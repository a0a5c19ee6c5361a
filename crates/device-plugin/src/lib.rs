//! hami-device-plugin: a vendor-neutral kubelet device plugin that speaks HAMi's protocol.
//!
//! A vendor supplies a [`DeviceBackend`] (devices, memory, model, NUMA, health events), a
//! [`PluginConfig`] (names from core's `Vendor`: [`VendorSpec::from_vendor`]) and, unless
//! it answers like NVIDIA, a [`VendorHook`]
//! (`docs/device-plugin.md#vendor-hooks`);
//! [`Plugin::run`] does the rest:
//!
//! - **Serve, then register** (`lifecycle`): the `DevicePlugin` service on
//!   `<plugin dir>/<socket>` (a stale socket is removed first), then `Register` with kubelet
//!   (`v1beta1`, endpoint = socket file name, options). inotify on the directory notices a
//!   re-created `kubelet.sock` (kubelet restarted) or our socket disappearing; the server is
//!   then stopped (ending its ListAndWatch streams), served again and registered again.
//!   Graceful shutdown ends open ListAndWatch streams and removes the socket.
//! - **ListAndWatch**: each physical device `split_count` times as `<uuid>-<i>`, sent at once
//!   and again whenever health or devices change, with NUMA topology when enabled.
//! - **Inventory publisher**: the vendor's register annotation (NVIDIA:
//!   `hami.io/node-nvidia-register`, HAMi's JSON form) written only when the node's value
//!   differs, checked every `register_interval` and on every change, retried with
//!   backoff; the handshake policy is described in `publisher`.
//! - **Allocate** (`allocate`): finds the pod kubelet is admitting (node lock owner, else
//!   the oldest pod on this node in bind-phase `allocating`), consumes the next non-empty
//!   container entry of the vendor's `*-devices-to-allocate` per container request, checks the
//!   count, type and health, asks the vendor's [`VendorHook`] for the container's answer
//!   (NVIDIA's default, [`HamiCoreHook`]: the environment and mounts of HAMi-core,
//!   `libvgpu.so`, [`libvgpu`]), rewrites the annotation, and sets `bind-phase=success` +
//!   releases the node lock once the pod is fully allocated. Any failure sets
//!   `bind-phase=failed`, releases the lock and returns an error that tells the user what
//!   went wrong.
//! - **GetPreferredAllocation**: replicas of the GPUs annotated for the pending pod.
//! - **Supervision** ([`Plugin::supervise`]): the server with its registration loop, the
//!   publisher and the backend's health watch each run as a supervised task
//!   ([`tasks`]); one that stops unexpectedly turns readiness not ready with the reason
//!   and is started again with backoff, and one that keeps failing stops the plugin.
//!
//! Deliberate differences from HAMi v2.10 (wire formats unchanged): the GPUs handed to a
//! container are always the ones the scheduler annotated (HAMi swaps in kubelet's choice
//! when preferred allocation is on, which can give a container a GPU the scheduler never
//! accounted); the rewritten to-allocate value keeps the scheduler's number of entries
//! (HAMi's grows by one `;` per call); a pod that the scheduler did not place (no
//! bind-phase/bind-time, other node) is never picked; the pending-pod fallback takes the
//! oldest pod, not the first listed; GetDevicePluginOptions answers what was registered.

mod allocate;
pub mod backend;
mod backoff;
pub mod config;
pub mod dir_watch;
pub mod facts_file;
pub mod health;
pub mod hook;
pub mod inventory;
pub mod libvgpu;
mod lifecycle;
pub mod metrics;
pub mod pending;
mod preferred;
mod publisher;
mod service;
pub mod serving;
mod shared;
pub mod tree_backend;
pub mod vendor_args;

use std::sync::Arc;

use hami_server::admin::Readiness;
use hami_server::supervise::{GaveUp, RestartPolicy, Supervisor};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

pub use allocate::AllocateError;
pub use backend::{BackendError, BackendEvent, DeviceBackend, PhysicalDevice, spawn_rediscovery};
pub use config::{
    ConfigError, DeviceFilter, PluginConfig, VendorSpec, VendorSpecError, VgpuHookSettings,
};
pub use dir_watch::DirWatcher;
pub use hook::{ContainerContext, HamiCoreHook, HookError, PodAllocation, VendorHook};
pub use inventory::Inventory;
pub use lifecycle::LifecycleError;
pub use metrics::Metrics;
pub use publisher::PublishError;
pub use service::plugin_options;
pub use shared::PluginStatus;

use shared::Shared;

/// Why the plugin could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    #[error(transparent)]
    GaveUp(#[from] GaveUp),
}

/// Names of the plugin's supervised tasks, as `/readyz` shows them.
pub mod tasks {
    /// Serving the device plugin API and registering with kubelet, again whenever
    /// kubelet restarts or the socket disappears.
    pub const SERVER: &str = "device plugin server";
    /// Keeping the node's register annotation equal to the inventory.
    pub const PUBLISHER: &str = "inventory publisher";
    /// The backend's watch of device health and of the device list.
    pub const HEALTH: &str = "device health watch";
    /// Writing the Warning events of failed allocations ([`crate::Plugin::with_events`]).
    pub const EVENTS: &str = "event writer";
}

/// A device plugin ready to run.
pub struct Plugin {
    shared: Arc<Shared>,
    backend: Arc<dyn DeviceBackend>,
    status: watch::Sender<PluginStatus>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("config", &self.shared.cfg)
            .field("backend", &self.backend.name())
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// Validates the configuration and discovers the devices.
    pub fn new(
        cfg: PluginConfig,
        backend: Arc<dyn DeviceBackend>,
        kube: kube::Client,
        metrics: Metrics,
    ) -> Result<Self, PluginError> {
        cfg.validate()?;
        let devices = backend.discover()?;
        let inventory = Inventory::new(devices, &cfg);
        tracing::info!(
            backend = backend.name(),
            node = %cfg.node_name,
            resource = %cfg.resource_name,
            devices = inventory.devices().len(),
            split = cfg.split_count,
            "devices discovered"
        );
        for d in inventory.devices() {
            tracing::info!(uuid = %d.uuid, index = d.index, model = %d.model, memory_mib = d.memory_mib, numa = ?d.numa, healthy = d.healthy, "device");
        }
        let shared = Shared {
            cfg: Arc::new(cfg),
            inventory: watch::channel(inventory).0,
            kube,
            allocate_lock: tokio::sync::Mutex::new(()),
            metrics,
            events: None,
            hook: Arc::new(HamiCoreHook),
            dir_watcher: DirWatcher::shared(),
        };
        Ok(Plugin {
            shared: Arc::new(shared),
            backend,
            status: watch::channel(PluginStatus::default()).0,
        })
    }

    /// Writes a Warning event on pods whose allocation fails (the recorder's writer runs
    /// as the supervised task [`tasks::EVENTS`]).
    pub fn with_events(mut self, events: hami_k8s::events::Recorder) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.events = Some(events);
        }
        self
    }

    /// Answers Allocate and registers devices the vendor's way (default: NVIDIA's
    /// HAMi-core answer, [`HamiCoreHook`]).
    pub fn with_hook(mut self, hook: Arc<dyn VendorHook>) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.hook = hook;
        }
        self
    }

    /// Watches the plugin directory through `watcher` instead of the process's
    /// [`DirWatcher::shared`] (tests use one that fails, to exercise the polling fallback).
    pub fn with_dir_watcher(mut self, watcher: DirWatcher) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.dir_watcher = watcher;
        }
        self
    }

    /// Registration and publishing progress.
    pub fn status(&self) -> watch::Receiver<PluginStatus> {
        self.status.subscribe()
    }

    /// The devices as published now.
    pub fn inventory(&self) -> watch::Receiver<Inventory> {
        self.shared.inventory.subscribe()
    }

    pub fn config(&self) -> &PluginConfig {
        &self.shared.cfg
    }

    /// Runs until `shutdown` is cancelled, then withdraws the devices and stops serving;
    /// each task supervised with the default policy (a task that keeps failing ends
    /// the run with [`PluginError::GaveUp`]).
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), PluginError> {
        let mut sup = Supervisor::new(Readiness::ready(), shutdown, RestartPolicy::default());
        self.supervise(&mut sup);
        sup.run().await.map_err(PluginError::from)
    }

    /// Starts the plugin's long-running tasks under `sup` (see [`tasks`]): each one that
    /// stops while the process is not shutting down is reported on the supervisor's
    /// readiness and started again. On shutdown the devices are withdrawn and the
    /// socket removed.
    pub fn supervise(self, sup: &mut Supervisor) {
        let (shared, status) = (self.shared.clone(), self.status.clone());
        sup.spawn(tasks::SERVER, move |stop| {
            lifecycle::run(shared.clone(), status.clone(), stop)
        });
        let (shared, status) = (self.shared.clone(), self.status.clone());
        sup.spawn(tasks::PUBLISHER, move |stop| {
            let (shared, status) = (shared.clone(), status.clone());
            async move {
                publisher::run(shared, status, stop).await;
                Ok::<(), std::convert::Infallible>(())
            }
        });
        if let Some(events) = &self.shared.events {
            let writer = events.writer();
            sup.spawn(tasks::EVENTS, move |stop| writer.clone().run(stop));
        }
        let (shared, backend) = (self.shared, self.backend);
        sup.spawn(tasks::HEALTH, move |stop| {
            watch_devices(shared.clone(), backend.clone(), stop)
        });
    }
}

/// Starts the backend's watch and applies what it reports until `stop`. The backend
/// closing its side before then means its watch died (a panicked thread): an error, so
/// the supervisor starts the watch again.
async fn watch_devices(
    shared: Arc<Shared>,
    backend: Arc<dyn DeviceBackend>,
    stop: CancellationToken,
) -> Result<(), String> {
    let (tx, mut rx) = mpsc::channel(64);
    let devices = shared.inventory().devices().to_vec();
    backend
        .watch(&devices, tx, stop.clone())
        .map_err(|e| e.to_string())?;
    loop {
        let event = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            e = rx.recv() => e,
        };
        let Some(event) = event else {
            return Err(format!(
                "the {} backend stopped reporting device health",
                backend.name()
            ));
        };
        match event {
            BackendEvent::Health {
                uuid,
                healthy,
                reason,
            } => {
                let changed = shared
                    .inventory
                    .send_if_modified(|inv| inv.set_health(&uuid, healthy));
                if changed {
                    tracing::warn!(%uuid, healthy, %reason, "device health changed");
                }
            }
            BackendEvent::Devices(devices) => {
                let next = Inventory::new(devices, &shared.cfg);
                let changed = shared.inventory.send_if_modified(|inv| {
                    let differs = *inv != next;
                    if differs {
                        *inv = next.clone();
                    }
                    differs
                });
                if changed {
                    tracing::info!(devices = next.devices().len(), "device list changed");
                }
            }
        }
    }
}
