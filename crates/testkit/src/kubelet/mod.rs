//! Kubelet emulator, device-manager side, for testing device plugins over real unix sockets.
//!
//! It serves `Registration` on `<dir>/kubelet.sock` and behaves like kubelet's device manager
//! (`pkg/kubelet/cm/devicemanager`):
//!
//! - **Register** checks the version (`v1beta1`) and that the resource is an extended
//!   resource name, dials the plugin back on `<dir>/<endpoint>` *inside* the call (so a plugin
//!   must serve before it registers), asks `GetDevicePluginOptions` (kubelet uses that answer,
//!   not the options sent with Register) and then reads `ListAndWatch`. Rejections carry
//!   kubelet's error texts.
//! - Every ListAndWatch response replaces the resource's healthy/unhealthy sets. When the
//!   stream ends, every device of the resource becomes unhealthy and the endpoint is stopped;
//!   the resource disappears from [`Kubelet::capacity`] after the stop grace period.
//! - [`Kubelet::admit`] admits a pod bound to this node: per container (init containers
//!   first) and resource, devices come from healthy − allocated, with `GetPreferredAllocation`
//!   asked first when the plugin's options offer it; `Allocate` is called once per container
//!   with one `ContainerAllocateRequest`; `PreStartContainer` follows when the plugin asks for
//!   it. A failure rejects the pod with `UnexpectedAdmissionError` and
//!   `Allocate failed due to <error>, which is unexpected`.
//! - [`Kubelet::restart`] stops serving, disconnects every plugin, keeps the pods' devices
//!   (kubelet's checkpoint), deletes every socket in the directory and serves a new
//!   `kubelet.sock`: plugins must notice and register again.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let kubelet = hami_testkit::kubelet::Kubelet::start().await?;
//! println!("device plugin dir: {}", kubelet.dir().display());
//! # Ok(()) }
//! ```

mod admit;
mod go_error;
mod registration;
mod resource_name;
mod state;

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hami_core::sync::MutexExt;
use hami_kubelet_api::v1beta1::registration_server::RegistrationServer;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use admit::{
    Admission, AdmitError, AdmittedContainer, CREATE_CONTAINER_CONFIG_ERROR,
    UNEXPECTED_ADMISSION_ERROR,
};
pub use go_error::go_status;
pub use resource_name::is_extended_resource_name;
pub use state::{
    ContainerResources, PluginCall, RegistrationRecord, ResourceAllocation, ResourceCapacity,
    ResourceState,
};

use registration::RegistrationService;
use state::State;

/// Kubelet's grace period before a stopped plugin's resource leaves the node status.
pub const ENDPOINT_STOP_GRACE_PERIOD: Duration = Duration::from_secs(5 * 60);
/// Kubelet's deadline for dialing a registering plugin.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Knobs of the emulator; the defaults are kubelet's.
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    /// When set, [`Kubelet::admit`] refuses pods whose `spec.nodeName` differs.
    pub node_name: Option<String>,
    /// How long Register keeps dialing the plugin's socket.
    pub dial_timeout: Duration,
    /// How long a stopped plugin's resource stays in [`Kubelet::capacity`].
    pub stop_grace_period: Duration,
}

impl Default for KubeletOptions {
    fn default() -> Self {
        KubeletOptions {
            node_name: None,
            dial_timeout: DIAL_TIMEOUT,
            stop_grace_period: ENDPOINT_STOP_GRACE_PERIOD,
        }
    }
}

pub(crate) struct Inner {
    dir: PathBuf,
    opts: KubeletOptions,
    state: Mutex<State>,
    /// Bumped on every state change, so waiters wake up without polling.
    changes: watch::Sender<u64>,
    admit_lock: tokio::sync::Mutex<()>,
    server: Mutex<Option<ServerTask>>,
}

struct ServerTask {
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock_unpoisoned()
    }

    /// Reads the state.
    fn with<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.lock())
    }

    /// Changes the state and wakes waiters.
    fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let r = f(&mut self.lock());
        self.changes.send_modify(|v| *v += 1);
        r
    }

    fn socket_path(&self) -> PathBuf {
        self.dir.join(hami_kubelet_api::KUBELET_SOCKET)
    }
}

/// A running kubelet emulator. Dropping it stops serving and disconnects every plugin.
pub struct Kubelet {
    inner: Arc<Inner>,
    _temp: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet")
            .field("dir", &self.inner.dir)
            .field("opts", &self.inner.opts)
            .finish_non_exhaustive()
    }
}

impl Kubelet {
    /// Starts in a fresh temporary directory (removed on drop) with kubelet's defaults.
    pub async fn start() -> io::Result<Self> {
        Self::start_with(KubeletOptions::default()).await
    }

    /// Starts in a fresh temporary directory (removed on drop).
    pub async fn start_with(opts: KubeletOptions) -> io::Result<Self> {
        // Short prefix: unix socket paths are limited to 107 bytes.
        let temp = tempfile::Builder::new().prefix("kl").tempdir()?;
        let mut kubelet = Self::start_in(temp.path(), opts).await?;
        kubelet._temp = Some(temp);
        Ok(kubelet)
    }

    /// Starts with `dir` as the device plugin directory (created if missing). Like kubelet,
    /// it deletes every socket already in the directory.
    pub async fn start_in(dir: &Path, opts: KubeletOptions) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let inner = Arc::new(Inner {
            dir: dir.to_path_buf(),
            opts,
            state: Mutex::new(State::default()),
            changes: watch::channel(0).0,
            admit_lock: tokio::sync::Mutex::new(()),
            server: Mutex::new(None),
        });
        serve(&inner)?;
        Ok(Kubelet { inner, _temp: None })
    }

    /// The device plugin directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// `<dir>/kubelet.sock`.
    pub fn socket_path(&self) -> PathBuf {
        self.inner.socket_path()
    }

    /// Whether the registration socket is being served.
    pub fn is_serving(&self) -> bool {
        self.server_slot().is_some()
    }

    /// A kubelet restart: stop, then start again over the same directory. Pods keep their
    /// devices; every resource stays known with no devices and a stopped endpoint until its
    /// plugin registers again.
    pub async fn restart(&self) -> io::Result<()> {
        self.stop().await;
        self.inner.update(reload_checkpoint);
        serve(&self.inner)
    }

    /// Stops serving: every plugin is disconnected (its devices become unhealthy) and
    /// `kubelet.sock` disappears, as when the kubelet process exits.
    pub async fn stop(&self) {
        let server = self.server_slot().take();
        if let Some(server) = server {
            server.cancel.cancel();
            let abort = server.task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), server.task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        self.inner.update(|s| {
            let resources: Vec<String> = s.endpoints.keys().cloned().collect();
            for resource in resources {
                if let Some(task) = s
                    .endpoints
                    .get_mut(&resource)
                    .and_then(|e| e.watch_task.take())
                {
                    task.abort();
                }
                s.disconnect(&resource);
            }
        });
        let _ = std::fs::remove_file(self.socket_path());
    }

    /// Resources kubelet knows (registered now or before a restart).
    pub fn resources(&self) -> Vec<String> {
        self.inner.with(|s| {
            let mut names: Vec<String> = s.endpoints.keys().cloned().collect();
            names.extend(s.healthy.keys().cloned());
            names.sort();
            names.dedup();
            names
        })
    }

    /// The device sets of `resource`, `None` when kubelet does not know it.
    pub fn resource(&self, resource: &str) -> Option<ResourceState> {
        self.inner.with(|s| s.resource_state(resource))
    }

    /// `GetCapacity`: capacity counts healthy and unhealthy devices, allocatable only healthy
    /// ones. A resource whose plugin stopped longer than the grace period ago is dropped.
    pub fn capacity(&self) -> BTreeMap<String, ResourceCapacity> {
        let grace = self.inner.opts.stop_grace_period;
        self.inner.update(|s| {
            let expired: Vec<String> = s
                .endpoints
                .iter()
                .filter(|(_, e)| e.stopped_at.is_some_and(|t| t.elapsed() > grace))
                .map(|(r, _)| r.clone())
                .collect();
            for r in &expired {
                s.endpoints.remove(r);
                s.healthy.remove(r);
                s.unhealthy.remove(r);
                s.all_devices.remove(r);
            }
            let mut out: BTreeMap<String, ResourceCapacity> = BTreeMap::new();
            for (r, devices) in &s.healthy {
                let n = devices.len() as u64;
                let c = out.entry(r.clone()).or_default();
                c.capacity += n;
                c.allocatable += n;
            }
            for (r, devices) in &s.unhealthy {
                out.entry(r.clone()).or_default().capacity += devices.len() as u64;
            }
            out
        })
    }

    /// Every Register call so far, with kubelet's answer.
    pub fn registrations(&self) -> Vec<RegistrationRecord> {
        self.inner.with(|s| s.registrations.clone())
    }

    /// Every call kubelet made to plugins so far.
    pub fn calls(&self) -> Vec<PluginCall> {
        self.inner.with(|s| s.calls.clone())
    }

    /// Forgets the call log (registrations are kept).
    pub fn clear_calls(&self) {
        self.inner.update(|s| s.calls.clear());
    }

    /// What each container of pod `uid` holds, by container name.
    pub fn pod_allocations(&self, uid: &str) -> Option<BTreeMap<String, ContainerResources>> {
        self.inner.with(|s| s.pods.get(uid).cloned())
    }

    /// What container `name` of pod `uid` holds, by resource.
    pub fn container_allocation(&self, uid: &str, name: &str) -> Option<ContainerResources> {
        self.inner
            .with(|s| s.pods.get(uid).and_then(|p| p.get(name)).cloned())
    }

    /// The pod left the node (deleted or terminated): its devices are free again.
    /// Returns whether it held any.
    pub fn remove_pod(&self, uid: &str) -> bool {
        self.inner.update(|s| s.pods.remove(uid).is_some())
    }

    /// Waits until `cond` holds, re-checking on every state change. Returns whether it held
    /// before `timeout`.
    pub async fn wait_until(&self, timeout: Duration, mut cond: impl FnMut(&Self) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.inner.changes.subscribe();
        loop {
            changes.borrow_and_update();
            if cond(self) {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => return cond(self),
            }
        }
    }

    /// Waits until `resource` is connected with `healthy` healthy devices.
    pub async fn wait_for_healthy(
        &self,
        resource: &str,
        healthy: usize,
        timeout: Duration,
    ) -> bool {
        self.wait_until(timeout, |k| {
            k.resource(resource)
                .is_some_and(|r| r.connected && r.healthy.len() == healthy)
        })
        .await
    }

    fn server_slot(&self) -> MutexGuard<'_, Option<ServerTask>> {
        self.inner.server.lock_unpoisoned()
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        if let Some(server) = self.server_slot().take() {
            server.cancel.cancel();
            server.task.abort();
        }
        self.inner.update(|s| {
            for e in s.endpoints.values_mut() {
                if let Some(task) = e.watch_task.take() {
                    task.abort();
                }
                e.client = None;
            }
        });
    }
}

/// Cleans the directory of sockets and serves `Registration` on a new `kubelet.sock`.
fn serve(inner: &Arc<Inner>) -> io::Result<()> {
    remove_sockets(&inner.dir)?;
    let listener = UnixListener::bind(inner.socket_path())?;
    let cancel = CancellationToken::new();
    let service = RegistrationServer::new(RegistrationService {
        inner: inner.clone(),
    });
    let stop = cancel.clone();
    let task = tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                hami_kubelet_api::unix::incoming(listener),
                stop.cancelled_owned(),
            )
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "kubelet: registration server failed");
        }
    });
    *inner.server.lock_unpoisoned() = Some(ServerTask { cancel, task });
    inner.changes.send_modify(|v| *v += 1);
    Ok(())
}

/// `CleanupPluginDirectory`: every socket goes (plugins' too); directories and other files
/// stay.
fn remove_sockets(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.file_type().is_socket() {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// `readCheckpoint` after a restart: allocations are kept; every resource that had devices
/// is known again with empty sets and a stopped endpoint without options.
fn reload_checkpoint(s: &mut State) {
    let registered: Vec<String> = s.healthy.keys().cloned().collect();
    s.endpoints.clear();
    s.all_devices.clear();
    s.healthy.clear();
    s.unhealthy.clear();
    s.updates.clear();
    for resource in registered {
        let id = s.next_id();
        s.healthy.insert(resource.clone(), Default::default());
        s.unhealthy.insert(resource.clone(), Default::default());
        s.endpoints.insert(
            resource,
            state::Endpoint {
                id,
                socket: None,
                client: None,
                options: None,
                stopped_at: Some(Instant::now()),
                watch_task: None,
            },
        );
    }
}
