//! The serving mode: plugin, inventory publisher and admin port until shutdown, each a
//! supervised task: one that stops unexpectedly turns `/readyz` not ready with the
//! reason and is started again with backoff; one that keeps failing stops the process
//! with an error.

use std::sync::Arc;

use hami_device_plugin::{DeviceBackend, Metrics, Plugin, PluginConfig, PluginError};
use hami_server::CancellationToken;
use hami_server::admin::Readiness;
use hami_server::supervise::{RestartPolicy, Supervisor};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::backends::Selected;
use crate::cli::ServeArgs;
use crate::settings::{self, SettingsError};

/// Why the plugin could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("--node-name (NODE_NAME) is required")]
    NoNodeName,
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Backend(#[from] hami_device_plugin::BackendError),
    #[error(transparent)]
    Client(#[from] hami_k8s::client::ClientError),
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },
    #[error("--fake-workload needs --backend fake: real GPUs have HAMi-core write their regions")]
    FakeWorkloadNeedsFake,
    #[error(transparent)]
    Listener(#[from] hami_server::listener::TakeOverError),
    #[error(transparent)]
    GaveUp(#[from] hami_server::supervise::GaveUp),
}

/// Parses the flags into the framework configuration.
pub fn plugin_config(args: &ServeArgs) -> Result<PluginConfig, RunError> {
    let node = args
        .node_name
        .as_deref()
        .filter(|n| !n.trim().is_empty())
        .ok_or(RunError::NoNodeName)?;
    let loaded = settings::load(&args.config, Some(node))?;
    Ok(settings::plugin_config(
        &loaded,
        &args.config,
        node,
        &args.device_plugin_path,
        args.register_interval,
    )?)
}

/// Runs with everything already built (tests pass emulators and a 127.0.0.1:0 listener),
/// until `shutdown` or until a task keeps failing.
pub async fn serve(
    cfg: PluginConfig,
    backend: Arc<dyn DeviceBackend>,
    client: kube::Client,
    admin_listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let (_, sup) = start(
        cfg,
        backend,
        client,
        admin_listener,
        shutdown,
        RestartPolicy::default(),
    )?;
    sup.run().await?;
    Ok(())
}

/// Starts every task of the serving mode — the plugin's (see
/// [`hami_device_plugin::tasks`]), the readiness follower and the admin server — under
/// one supervisor, which the caller runs; with the readiness `/readyz` reports.
pub fn start(
    cfg: PluginConfig,
    backend: Arc<dyn DeviceBackend>,
    client: kube::Client,
    admin_listener: TcpListener,
    shutdown: CancellationToken,
    policy: RestartPolicy,
) -> Result<(Readiness, Supervisor), RunError> {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let events =
        hami_k8s::events::Recorder::start(client.clone(), "hami-device-plugin", &cfg.node_name);
    let plugin = Plugin::new(cfg, backend, client, metrics)?.with_events(events);
    Ok(hami_device_plugin::serving::start(
        plugin,
        registry,
        admin_listener,
        shutdown,
        policy,
    )?)
}

/// Loads everything the flags name and serves until `shutdown`.
pub async fn run(args: ServeArgs, shutdown: CancellationToken) -> Result<(), RunError> {
    let cfg = plugin_config(&args)?;
    let selected = Selected::build(&args.backend)?;
    let client = hami_k8s::client::connect(args.client.kubeconfig.as_deref()).await?;
    let admin_listener = TcpListener::bind(args.admin.address)
        .await
        .map_err(|source| RunError::Bind {
            address: args.admin.address.to_string(),
            source,
        })?;
    tracing::info!(
        node = %cfg.node_name,
        resource = %cfg.resource_name,
        backend = ?args.backend.backend,
        split = cfg.split_count,
        plugin_dir = %cfg.plugin_dir.display(),
        admin = %args.admin.address,
        "hami-device-plugin-nvidia starting"
    );
    if args.fake_workload && !matches!(selected, Selected::Fake(_)) {
        return Err(RunError::FakeWorkloadNeedsFake);
    }
    let workload = args
        .fake_workload
        .then(|| crate::workload::WorkloadSettings {
            node: cfg.node_name.clone(),
            hook_path: args.config.hook_path.clone(),
            interval: args.fake_workload_interval,
        });
    let c = client.clone();
    let (_, mut sup) = start(
        cfg,
        selected.backend(),
        client,
        admin_listener,
        shutdown,
        RestartPolicy::default(),
    )?;
    if let Some(settings) = workload {
        sup.spawn("fake workload", move |stop| {
            crate::workload::run(c.clone(), settings.clone(), stop)
        });
    }
    sup.run().await?;
    Ok(())
}
