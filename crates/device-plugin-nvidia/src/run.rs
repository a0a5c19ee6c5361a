//! The serving mode: plugin, inventory publisher and admin port until shutdown, each a
//! supervised task: one that stops unexpectedly turns `/readyz` not ready with the
//! reason and is started again with backoff; one that keeps failing stops the process
//! with an error.

use std::sync::Arc;

use hami_device_plugin::serving::{self, ServeError, VendorPlugin};
use hami_device_plugin::{DeviceBackend, HamiCoreHook, PluginConfig};
use hami_server::CancellationToken;
use hami_server::admin::Readiness;
use hami_server::supervise::{RestartPolicy, Supervisor};
use tokio::net::TcpListener;

use crate::backends::Selected;
use crate::cli::ServeArgs;
use crate::settings::{self, SettingsError};

/// The binary's name, in its start-up log line and errors.
pub const BINARY: &str = "hami-device-plugin-nvidia";

/// Why the plugin could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("--node-name (NODE_NAME) is required")]
    NoNodeName,
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Backend(#[from] hami_device_plugin::BackendError),
    /// Connecting, binding the admin port, building or supervising the plugin: the
    /// start-up every plugin binary shares.
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("--fake-workload needs --backend fake: real GPUs have HAMi-core write their regions")]
    FakeWorkloadNeedsFake,
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
    serving::serve_plugin(
        plugin(cfg, backend),
        client,
        admin_listener,
        shutdown,
        |_| {},
    )
    .await?;
    Ok(())
}

/// Starts every task of the serving mode — the plugin's (see
/// [`hami_device_plugin::tasks`]) with HAMi-core's Allocate answer, the readiness
/// follower and the admin server — under one supervisor, which the caller runs; with
/// the readiness `/readyz` reports.
pub fn start(
    cfg: PluginConfig,
    backend: Arc<dyn DeviceBackend>,
    client: kube::Client,
    admin_listener: TcpListener,
    shutdown: CancellationToken,
    policy: RestartPolicy,
) -> Result<(Readiness, Supervisor), RunError> {
    Ok(serving::start_plugin(
        plugin(cfg, backend),
        client,
        admin_listener,
        shutdown,
        policy,
    )?)
}

/// The NVIDIA plugin: HAMi-core's Allocate answer (the framework's default hook).
fn plugin(cfg: PluginConfig, backend: Arc<dyn DeviceBackend>) -> VendorPlugin {
    VendorPlugin {
        binary: BINARY,
        cfg,
        backend,
        hook: Arc::new(HamiCoreHook),
    }
}

/// Loads everything the flags name and serves until `shutdown`.
pub async fn run(args: ServeArgs, shutdown: CancellationToken) -> Result<(), RunError> {
    let cfg = plugin_config(&args)?;
    let selected = Selected::build(&args.backend)?;
    let (client, admin_listener) = serving::connect(&args.client, args.admin.address).await?;
    tracing::info!(
        node = %cfg.node_name,
        resource = %cfg.resource_name,
        backend = ?args.backend.backend,
        split = cfg.split_count,
        plugin_dir = %cfg.plugin_dir.display(),
        admin = %args.admin.address,
        "{BINARY} starting"
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
    serving::serve_plugin(
        plugin(cfg, selected.backend()),
        client,
        admin_listener,
        shutdown,
        |sup| {
            if let Some(settings) = workload {
                sup.spawn("fake workload", move |stop| {
                    crate::workload::run(c.clone(), settings.clone(), stop)
                });
            }
        },
    )
    .await?;
    Ok(())
}
