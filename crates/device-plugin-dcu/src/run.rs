//! The serving mode and `discover`.

use std::sync::Arc;

use hami_core::vendor::hygon::Hygon;
use hami_device_plugin::serving::{VendorPlugin, serve_vendor};
use hami_device_plugin::vendor_args::{VendorConfig, VendorRunError, VendorServeArgs};
use hami_device_plugin::{DeviceBackend, Inventory, PluginConfig, VendorHook};
use hami_server::CancellationToken;

use crate::backend::{DcuBackend, DcuTree, Roots};
use crate::cli::{NodeArgs, ServeArgs};
use crate::facts::{DcuFacts, FactsSource};
use crate::hook::{DcuHook, HostPaths};
use crate::lib_facts::LibraryFacts;
use hami_device_plugin::facts_file::choose_source;

/// Why the plugin could not start or stopped.
pub type RunError = VendorRunError;

/// The framework configuration for `node`.
pub fn plugin_config(args: &ServeArgs, node: &str) -> Result<PluginConfig, RunError> {
    Ok(args.common.plugin_config(
        node,
        VendorConfig {
            resource_name: crate::RESOURCE.into(),
            socket_name: "hygon-dcunum.sock".into(),
            // DCU containers get no environment: no visible-devices variable.
            vendor: hami_device_plugin::VendorSpec::from_vendor(
                &Hygon::new(Default::default()),
                "",
            )?,
            split_count: args.node.split_count,
            hook_path: args.vgpu_dir.clone(),
        },
    ))
}

/// The host paths the Allocate answer names.
pub fn host_paths(args: &ServeArgs) -> HostPaths {
    HostPaths {
        dev_root: args.node.roots.dev_root.clone(),
        vgpu_dir: args.vgpu_dir.clone(),
        vdev_dir: args.vdev_dir.clone(),
        hygon_path: args.hygon_path.clone(),
        hyhal_path: args.hyhal_path.clone(),
    }
}

/// The backend the flags describe. With ROCm SMI as the facts source it is loaded here,
/// so a missing library stops the plugin at start-up, naming it.
pub fn backend(args: &NodeArgs, poll: std::time::Duration) -> Result<DcuBackend, RunError> {
    let facts: Arc<dyn FactsSource<DcuFacts>> = match choose_source(
        args.facts_source,
        args.dcu_facts.as_deref(),
        "--dcu-facts (DCU_FACTS)",
    )? {
        Some(file) => Arc::new(file),
        None => Arc::new(LibraryFacts::open(&args.rocm_smi_lib)?),
    };
    Ok(DcuBackend::new(
        DcuTree::new(
            Roots {
                sysfs: args.roots.sysfs_root.clone(),
                dev: args.roots.dev_root.clone(),
            },
            facts,
        ),
        poll,
    ))
}

/// What `discover` prints: the DCUs and the register annotation's value.
pub fn discover(args: &NodeArgs) -> Result<serde_json::Value, RunError> {
    let backend = backend(args, std::time::Duration::from_secs(10))?;
    let dcus = backend.devices()?;
    let devices = backend.discover()?;
    let serve = ServeArgs {
        common: VendorServeArgs::default(),
        node: args.clone(),
        vgpu_dir: "/usr/local/vgpu".into(),
        vdev_dir: "/etc/vdev".into(),
        hygon_path: "/opt/dtk".into(),
        hyhal_path: "/opt/hyhal".into(),
    };
    let cfg = plugin_config(&serve, "discover")?;
    let hook = DcuHook::new(backend.catalog(), host_paths(&serve));
    let register = hook.register_value(&Inventory::new(devices, &cfg), &cfg);
    Ok(serde_json::json!({
        "dcus": dcus.iter().map(|d| serde_json::json!({
            "id": d.id(), "type": d.dev_type(), "index": d.facts.index,
            "pciBDF": d.sys.pci_bdf, "card": d.sys.card, "render": d.sys.render,
            "numa": d.sys.numa, "memoryMiB": d.facts.memory_mib, "cuCount": d.facts.cu_count,
        })).collect::<Vec<_>>(),
        "annotations": {cfg.vendor.register_annotation: register},
    }))
}

/// Loads everything the flags name and serves until `shutdown`.
pub async fn run(args: ServeArgs, shutdown: CancellationToken) -> Result<(), RunError> {
    let node = args.common.node()?;
    let cfg = plugin_config(&args, &node)?;
    let backend = Arc::new(backend(&args.node, args.common.health_interval)?);
    let hook = Arc::new(DcuHook::new(backend.catalog(), host_paths(&args)));
    tracing::info!(sysfs = %args.node.roots.sysfs_root.display(), dev = %args.node.roots.dev_root.display(),
        vgpu = %args.vgpu_dir.display(), vdev = %args.vdev_dir.display(), "reading the node's DCUs");
    let backend: Arc<dyn DeviceBackend> = backend;
    let plugin = VendorPlugin {
        binary: "hami-device-plugin-dcu",
        cfg,
        backend,
        hook,
    };
    serve_vendor(plugin, &args.common, shutdown).await?;
    Ok(())
}
