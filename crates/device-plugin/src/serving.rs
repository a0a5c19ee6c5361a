//! The serving mode every vendor's binary shares: the plugin's tasks, a readiness that
//! follows registration and publishing, and the admin port (`/healthz`, `/readyz`,
//! `/metrics`), all under one supervisor.

use std::sync::Arc;

use hami_server::CancellationToken;
use hami_server::admin::{AdminState, Readiness};
use hami_server::args::ClientArgs;
use hami_server::listener::{Relistener, TakeOverError};
use hami_server::supervise::{RestartPolicy, Supervisor, supervise_admin};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::{Plugin, PluginStatus};

/// Starts `plugin` (its metrics already in `registry`), the readiness follower and the
/// admin server under one supervisor, which the caller runs; with the readiness
/// `/readyz` reports.
pub fn start(
    plugin: Plugin,
    registry: Registry,
    admin_listener: TcpListener,
    shutdown: CancellationToken,
    policy: RestartPolicy,
) -> Result<(Readiness, Supervisor), TakeOverError> {
    let readiness = Readiness::not_ready("not registered with kubelet yet");
    let mut sup = Supervisor::new(readiness.clone(), shutdown, policy);
    let (status, r) = (plugin.status(), readiness.clone());
    sup.spawn("plugin status", move |stop| {
        follow_status(status.clone(), r.clone(), stop)
    });
    let admin = AdminState {
        readiness: readiness.clone(),
        registry: Arc::new(registry),
    };
    supervise_admin(&mut sup, Relistener::new(admin_listener)?, admin);
    plugin.supervise(&mut sup);
    Ok((readiness, sup))
}

/// Ready once registered with kubelet and the node annotation is published.
async fn follow_status(
    mut status: tokio::sync::watch::Receiver<PluginStatus>,
    readiness: Readiness,
    stop: CancellationToken,
) -> Result<(), String> {
    loop {
        let s = status.borrow_and_update().clone();
        match (s.registered, s.published) {
            (true, true) => readiness.set_ready(),
            (false, _) => readiness.set_not_ready("not registered with kubelet"),
            (true, false) => readiness.set_not_ready(format!(
                "node annotation not published: {}",
                s.publish_error.as_deref().unwrap_or("pending")
            )),
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            changed = status.changed() => if changed.is_err() {
                return Err("the plugin's status feed closed".into());
            },
        }
    }
}

/// Why a vendor binary could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Client(#[from] hami_k8s::client::ClientError),
    #[error(transparent)]
    Plugin(#[from] crate::PluginError),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Listener(#[from] TakeOverError),
    #[error(transparent)]
    GaveUp(#[from] hami_server::supervise::GaveUp),
}

/// A vendor plugin ready to serve: its configuration, backend and hook.
pub struct VendorPlugin {
    /// The binary's name, for the start-up log line.
    pub binary: &'static str,
    pub cfg: crate::PluginConfig,
    pub backend: Arc<dyn crate::DeviceBackend>,
    pub hook: Arc<dyn crate::VendorHook>,
}

impl std::fmt::Debug for VendorPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VendorPlugin")
            .field("binary", &self.binary)
            .field("cfg", &self.cfg)
            .field("backend", &self.backend.name())
            .finish_non_exhaustive()
    }
}

/// Connects to the API server (`--kubeconfig`, else in-cluster) and binds the admin
/// port: what every plugin binary does before it starts.
pub async fn connect(
    client: &ClientArgs,
    admin: std::net::SocketAddr,
) -> Result<(kube::Client, TcpListener), ServeError> {
    let kube = hami_k8s::client::connect(client.kubeconfig.as_deref()).await?;
    let listener = TcpListener::bind(admin)
        .await
        .map_err(|source| ServeError::Bind {
            address: admin.to_string(),
            source,
        })?;
    Ok((kube, listener))
}

/// Builds the plugin on `client` (Warning events on failed allocations, metrics, the
/// vendor's hook) and [`start`]s it with the admin server under one supervisor, which
/// the caller runs (and may give tasks of its own first).
pub fn start_plugin(
    plugin: VendorPlugin,
    client: kube::Client,
    admin_listener: TcpListener,
    shutdown: CancellationToken,
    policy: RestartPolicy,
) -> Result<(Readiness, Supervisor), ServeError> {
    let VendorPlugin {
        binary: _,
        cfg,
        backend,
        hook,
    } = plugin;
    let mut registry = Registry::default();
    let metrics = crate::Metrics::register(&mut registry);
    let events =
        hami_k8s::events::Recorder::new(client.clone(), "hami-device-plugin", &cfg.node_name);
    let plugin = Plugin::new(cfg, backend, client, metrics)?
        .with_events(events)
        .with_hook(hook);
    Ok(start(plugin, registry, admin_listener, shutdown, policy)?)
}

/// The serving mode of a vendor binary: [`connect`]s, starts the plugin
/// ([`start_plugin`]) and runs it supervised until `shutdown`.
pub async fn serve_vendor(
    plugin: VendorPlugin,
    args: &crate::vendor_args::VendorServeArgs,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let (client, admin_listener) = connect(&args.client, args.admin.address).await?;
    let cfg = &plugin.cfg;
    tracing::info!(node = %cfg.node_name, resource = %cfg.resource_name, split = cfg.split_count,
        backend = plugin.backend.name(), plugin_dir = %cfg.plugin_dir.display(),
        admin = %args.admin.address, "{} starting", plugin.binary);
    serve_plugin(plugin, client, admin_listener, shutdown, |_| {}).await
}

/// Runs `plugin` ([`start_plugin`]) supervised until `shutdown` or until a task keeps
/// failing, with the tasks `extra` adds to the supervisor first (NVIDIA's fake
/// workload).
pub async fn serve_plugin(
    plugin: VendorPlugin,
    client: kube::Client,
    admin_listener: TcpListener,
    shutdown: CancellationToken,
    extra: impl FnOnce(&mut Supervisor),
) -> Result<(), ServeError> {
    let (_, mut sup) = start_plugin(
        plugin,
        client,
        admin_listener,
        shutdown,
        RestartPolicy::default(),
    )?;
    extra(&mut sup);
    sup.run().await?;
    Ok(())
}
