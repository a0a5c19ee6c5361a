//! The serving mode and `discover`.

use std::sync::Arc;

use hami_core::vendor::amd::Amd;
use hami_device_plugin::{
    DeviceBackend, DeviceFilter, Inventory, Metrics, Plugin, PluginConfig, PluginError, VendorHook,
    VendorSpec, VgpuHookSettings,
};
use hami_server::CancellationToken;
use hami_server::supervise::RestartPolicy;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::backend::{AmdBackend, Roots};
use crate::cli::{NodeArgs, ServeArgs};
use crate::facts::FileFacts;
use crate::hook::AmdHook;

/// Why the plugin could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("--node-name (NODE_NAME) is required")]
    NoNodeName,
    #[error("--gpu-facts (GPU_FACTS) is required")]
    NoFacts,
    #[error(transparent)]
    Spec(#[from] hami_device_plugin::VendorSpecError),
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
    Listener(#[from] hami_server::listener::TakeOverError),
    #[error(transparent)]
    GaveUp(#[from] hami_server::supervise::GaveUp),
}

/// The framework configuration for `node` (the hook path doubles as the vGPU hook's).
pub fn plugin_config(args: &ServeArgs, node: &str) -> Result<PluginConfig, RunError> {
    Ok(PluginConfig {
        node_name: node.into(),
        resource_name: crate::RESOURCE.into(),
        plugin_dir: args.device_plugin_path.clone(),
        socket_name: "amd-gpu.sock".into(),
        vendor: VendorSpec::from_vendor(&Amd::new(Default::default()), crate::hook::ENV_VISIBLE)?,
        split_count: args.node.split_count,
        memory_scaling: 1.0,
        core_scaling: 1.0,
        preconfigured_memory: 0,
        numa_topology: true,
        preferred_allocation: false,
        operating_mode: String::new(),
        filter: DeviceFilter::default(),
        vgpu_hook: VgpuHookSettings {
            hook_path: args.hook_path.clone(),
            lib_cuda_log_level: String::new(),
            disable_core_limit: false,
            libvgpu_version: None,
        },
        register_interval: args.register_interval,
    })
}

/// The backend the flags describe.
pub fn backend(args: &NodeArgs, poll: std::time::Duration) -> Result<AmdBackend, RunError> {
    let facts = args.gpu_facts.clone().ok_or(RunError::NoFacts)?;
    Ok(AmdBackend::new(
        Roots {
            sysfs: args.sysfs_root.clone(),
            dev: args.dev_root.clone(),
        },
        Arc::new(FileFacts::new(facts)),
        poll,
    ))
}

/// What `discover` prints: the GPUs and the register annotation's value.
pub fn discover(args: &NodeArgs) -> Result<serde_json::Value, RunError> {
    let backend = backend(args, std::time::Duration::from_secs(10))?;
    let gpus = backend.gpus()?;
    let devices = backend.discover()?;
    let serve = ServeArgs {
        node_name: None,
        device_plugin_path: "/var/lib/kubelet/device-plugins".into(),
        hook_path: "/usr/local".into(),
        node: args.clone(),
        admin: hami_server::args::AdminArgs::new(([0, 0, 0, 0], 9396).into()),
        client: hami_server::args::ClientArgs { kubeconfig: None },
        register_interval: std::time::Duration::from_secs(30),
        health_interval: std::time::Duration::from_secs(10),
    };
    let cfg = plugin_config(&serve, "discover")?;
    let hook = AmdHook::new(
        backend.catalog(),
        serve.hook_path.clone(),
        args.dev_root.clone(),
    );
    let inventory = Inventory::new(devices, &cfg);
    let register = hook.encode_register(&hook.register_info(&inventory, &cfg));
    Ok(serde_json::json!({
        "gpus": gpus.iter().map(|g| serde_json::json!({
            "pciBDF": g.sys.pci_bdf, "card": g.sys.card, "renderD": g.sys.render,
            "numa": g.sys.numa, "rocrUUID": g.sys.rocr_uuid, "kfdNode": g.sys.kfd_node,
            "computePartition": g.sys.compute_partition, "memoryPartition": g.sys.memory_partition,
            "uuid": g.facts.uuid, "marketName": g.facts.market_name,
            "vramMiB": g.facts.vram_mib, "cuCount": g.facts.cu_count,
        })).collect::<Vec<_>>(),
        "annotations": {cfg.vendor.register_annotation: register},
    }))
}

/// Loads everything the flags name and serves until `shutdown`.
pub async fn run(args: ServeArgs, shutdown: CancellationToken) -> Result<(), RunError> {
    let node = args
        .node_name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .ok_or(RunError::NoNodeName)?;
    let cfg = plugin_config(&args, &node)?;
    let backend = Arc::new(backend(&args.node, args.health_interval)?);
    let hook = Arc::new(AmdHook::new(
        backend.catalog(),
        args.hook_path.clone(),
        args.node.dev_root.clone(),
    ));
    let client = hami_k8s::client::connect(args.client.kubeconfig.as_deref()).await?;
    let admin_listener = TcpListener::bind(args.admin.address)
        .await
        .map_err(|source| RunError::Bind {
            address: args.admin.address.to_string(),
            source,
        })?;
    tracing::info!(node = %cfg.node_name, resource = %cfg.resource_name, split = cfg.split_count,
        sysfs = %args.node.sysfs_root.display(), dev = %args.node.dev_root.display(),
        plugin_dir = %cfg.plugin_dir.display(), admin = %args.admin.address, "hami-device-plugin-amd starting");
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let events = hami_k8s::events::Recorder::start(client.clone(), "hami-device-plugin", &node);
    let backend: Arc<dyn DeviceBackend> = backend;
    let plugin = Plugin::new(cfg, backend, client, metrics)?
        .with_events(events)
        .with_hook(hook);
    let (_, sup) = hami_device_plugin::serving::start(
        plugin,
        registry,
        admin_listener,
        shutdown,
        RestartPolicy::default(),
    )?;
    sup.run().await?;
    Ok(())
}
