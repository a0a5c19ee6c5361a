//! The serving mode and `discover`.

use std::sync::Arc;

use hami_core::vendor::amd::Amd;
use hami_device_plugin::serving::{VendorPlugin, serve_vendor};
use hami_device_plugin::vendor_args::{VendorConfig, VendorRunError, VendorServeArgs};
use hami_device_plugin::{DeviceBackend, Inventory, PluginConfig, VendorHook};
use hami_server::CancellationToken;

use crate::backend::{AmdBackend, AmdTree, Roots};
use crate::cli::{NodeArgs, ServeArgs};
use crate::facts::{FactsSource, GpuFacts};
use crate::hook::AmdHook;
use crate::lib_facts::LibraryFacts;
use hami_device_plugin::facts_file::choose_source;

/// Why the plugin could not start or stopped.
pub type RunError = VendorRunError;

/// The framework configuration for `node` (the hook path doubles as the vGPU hook's).
pub fn plugin_config(args: &ServeArgs, node: &str) -> Result<PluginConfig, RunError> {
    Ok(args.common.plugin_config(
        node,
        VendorConfig {
            resource_name: crate::RESOURCE.into(),
            socket_name: "amd-gpu.sock".into(),
            vendor: hami_device_plugin::VendorSpec::from_vendor(
                &Amd::new(Default::default()),
                crate::hook::ENV_VISIBLE,
            )?,
            split_count: args.node.split_count,
            hook_path: args.hook_path.clone(),
        },
    ))
}

/// The backend the flags describe. With the libraries as the facts source they are
/// loaded here, so a missing one stops the plugin at start-up, naming it.
pub fn backend(args: &NodeArgs, poll: std::time::Duration) -> Result<AmdBackend, RunError> {
    let roots = Roots {
        sysfs: args.roots.sysfs_root.clone(),
        dev: args.roots.dev_root.clone(),
    };
    let facts: Arc<dyn FactsSource<GpuFacts>> = match choose_source(
        args.facts_source,
        args.gpu_facts.as_deref(),
        "--gpu-facts (GPU_FACTS)",
    )? {
        Some(file) => Arc::new(file),
        None => Arc::new(LibraryFacts::open(
            &args.amd_smi_lib,
            &args.libdrm_amdgpu_lib,
            roots.clone(),
        )?),
    };
    Ok(AmdBackend::new(AmdTree::new(roots, facts), poll))
}

/// What `discover` prints: the GPUs and the register annotation's value.
pub fn discover(args: &NodeArgs) -> Result<serde_json::Value, RunError> {
    let backend = backend(args, std::time::Duration::from_secs(10))?;
    let gpus = backend.devices()?;
    let devices = backend.discover()?;
    let serve = ServeArgs {
        common: VendorServeArgs::default(),
        hook_path: "/usr/local".into(),
        node: args.clone(),
    };
    let cfg = plugin_config(&serve, "discover")?;
    let hook = AmdHook::new(
        backend.catalog(),
        serve.hook_path.clone(),
        args.roots.dev_root.clone(),
    );
    let register = hook.register_value(&Inventory::new(devices, &cfg), &cfg);
    Ok(serde_json::json!({
        "gpus": gpus.iter().map(|g| serde_json::json!({
            "pciBDF": g.sys.pci_bdf, "address": g.sys.address, "partition": g.sys.partition,
            "platformDevice": g.sys.platform, "card": g.sys.card, "renderD": g.sys.render,
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
    let node = args.common.node()?;
    let cfg = plugin_config(&args, &node)?;
    let backend = Arc::new(backend(&args.node, args.common.health_interval)?);
    let hook = Arc::new(AmdHook::new(
        backend.catalog(),
        args.hook_path.clone(),
        args.node.roots.dev_root.clone(),
    ));
    tracing::info!(sysfs = %args.node.roots.sysfs_root.display(), dev = %args.node.roots.dev_root.display(), "reading the node's GPUs");
    let backend: Arc<dyn DeviceBackend> = backend;
    let plugin = VendorPlugin {
        binary: "hami-device-plugin-amd",
        cfg,
        backend,
        hook,
    };
    serve_vendor(plugin, &args.common, shutdown).await?;
    Ok(())
}
