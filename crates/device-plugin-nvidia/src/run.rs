//! The serving mode: plugin, inventory publisher and admin port until shutdown.

use std::sync::Arc;

use hami_device_plugin::{DeviceBackend, Metrics, Plugin, PluginConfig, PluginError, PluginStatus};
use hami_server::CancellationToken;
use hami_server::admin::{AdminState, Readiness, serve_admin};
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
    #[error(transparent)]
    Serve(#[from] hami_server::ServeError),
    #[error("--fake-workload needs --backend fake: real GPUs have HAMi-core write their regions")]
    FakeWorkloadNeedsFake,
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

/// Runs with everything already built (tests pass emulators and a 127.0.0.1:0 listener).
pub async fn serve(
    cfg: PluginConfig,
    backend: Arc<dyn DeviceBackend>,
    client: kube::Client,
    admin_listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let events =
        hami_k8s::events::Recorder::start(client.clone(), "hami-device-plugin", &cfg.node_name);
    let plugin = Plugin::new(cfg, backend, client, metrics)?.with_events(events);
    let readiness = Readiness::not_ready("not registered with kubelet yet");
    tokio::spawn(follow_status(plugin.status(), readiness.clone()));
    let admin = AdminState {
        readiness,
        registry: Arc::new(registry),
    };
    let admin_task = tokio::spawn(serve_admin(admin_listener, admin, shutdown.clone()));
    let ran = plugin.run(shutdown.clone()).await;
    shutdown.cancel();
    match admin_task.await {
        Ok(r) => r?,
        Err(e) => tracing::error!(error = %e, "admin server task failed"),
    }
    ran.map_err(RunError::from)
}

/// Ready once registered with kubelet and the node annotation is published.
async fn follow_status(
    mut status: tokio::sync::watch::Receiver<PluginStatus>,
    readiness: Readiness,
) {
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
        if status.changed().await.is_err() {
            return;
        }
    }
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
    if !args.fake_workload {
        return serve(cfg, selected.backend(), client, admin_listener, shutdown).await;
    }
    if !matches!(selected, Selected::Fake(_)) {
        return Err(RunError::FakeWorkloadNeedsFake);
    }
    let settings = crate::workload::WorkloadSettings {
        node: cfg.node_name.clone(),
        hook_path: args.config.hook_path.clone(),
        interval: args.fake_workload_interval,
    };
    let mut workload = Supervisor::new(
        Readiness::ready(),
        shutdown.clone(),
        RestartPolicy::default(),
    );
    let c = client.clone();
    workload.spawn("fake workload", move |stop| {
        crate::workload::run(c.clone(), settings.clone(), stop)
    });
    let (served, supervised) = tokio::join!(
        serve(cfg, selected.backend(), client, admin_listener, shutdown),
        workload.run()
    );
    supervised?;
    served
}
