//! The AMD and DCU device plugins of the demo's non-NVIDIA nodes: the real plugins,
//! configured from the flags their binaries take, on their crates' fake sysfs/dev trees
//! written into the node's directory (`docs/device-plugin.md`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hami_device_plugin::{DeviceBackend, Metrics, Plugin, PluginConfig};
use hami_device_plugin_amd::{AmdHook, fake_tree as amd_tree};
use hami_device_plugin_dcu::{DcuHook, fake_tree as dcu_tree};

use crate::component::HarnessError;
use crate::spec::{NodeSpec, NodeVendor};

/// A non-NVIDIA node's plugin, ready to start (again).
#[derive(Debug, Clone)]
pub(crate) enum VendorPlugin {
    Amd(Box<hami_device_plugin_amd::cli::ServeArgs>),
    Dcu(Box<hami_device_plugin_dcu::cli::ServeArgs>),
}

fn setup(what: &str) -> impl FnOnce(String) -> HarnessError + '_ {
    move |e| HarnessError::Setup(format!("{what}: {e}"))
}

impl VendorPlugin {
    /// Writes the node's fake tree under `tree` and parses the plugin's flags for it;
    /// `None` for an NVIDIA node.
    pub(crate) fn prepare(
        node: &NodeSpec,
        tree: &Path,
        plugin_dir: &Path,
        register_interval: Duration,
    ) -> Result<Option<Self>, HarnessError> {
        let common = [
            format!("--node-name={}", node.name),
            format!("--device-plugin-path={}", plugin_dir.display()),
            format!("--sysfs-root={}", tree.join("sys").display()),
            format!("--dev-root={}", tree.join("dev").display()),
            format!("--register-interval={}ms", register_interval.as_millis()),
        ];
        let written = HarnessError::io(format!("writing the fake tree of {}", node.name));
        match node.vendor {
            NodeVendor::Nvidia => Ok(None),
            NodeVendor::Amd { gpus } => {
                amd_tree::write(tree, &amd_tree::mi300x(gpus)).map_err(written)?;
                // No AMD SMI or libdrm here: the facts come from the tree's file.
                let flags = [
                    "--facts-source=file".to_string(),
                    format!("--gpu-facts={}", tree.join("gpu-facts.json").display()),
                    format!("--hook-path={}", tree.join("hook").display()),
                ];
                let cli: hami_device_plugin_amd::cli::Cli = hami_device_plugin_amd::cli::BINARY
                    .try_parse_from(binary_args("hami-device-plugin-amd", &common, &flags))
                    .map_err(|e| setup("AMD plugin flags")(e.to_string()))?;
                Ok(Some(Self::Amd(Box::new(cli.serve))))
            }
            NodeVendor::Dcu { cards } => {
                dcu_tree::write(tree, &dcu_tree::k100_ai(cards)).map_err(written)?;
                // No ROCm SMI here: the facts come from the tree's file.
                let flags = [
                    "--facts-source=file".to_string(),
                    format!("--dcu-facts={}", tree.join("dcu-facts.json").display()),
                    format!("--vgpu-dir={}", tree.join("vgpu").display()),
                    format!("--vdev-dir={}", tree.join("etc-vdev").display()),
                    format!("--hygon-path={}", tree.join("dtk").display()),
                    format!("--hyhal-path={}", tree.join("hyhal").display()),
                ];
                let cli: hami_device_plugin_dcu::cli::Cli = hami_device_plugin_dcu::cli::BINARY
                    .try_parse_from(binary_args("hami-device-plugin-dcu", &common, &flags))
                    .map_err(|e| setup("DCU plugin flags")(e.to_string()))?;
                Ok(Some(Self::Dcu(Box::new(cli.serve))))
            }
        }
    }

    /// The framework configuration the binary builds from its flags.
    pub(crate) fn config(&self, node: &str) -> Result<PluginConfig, HarnessError> {
        match self {
            Self::Amd(args) => hami_device_plugin_amd::run::plugin_config(args, node)
                .map_err(|e| setup("AMD plugin configuration")(e.to_string())),
            Self::Dcu(args) => hami_device_plugin_dcu::run::plugin_config(args, node)
                .map_err(|e| setup("DCU plugin configuration")(e.to_string())),
        }
    }

    /// The plugin as the binary builds it: backend and hook from the flags.
    pub(crate) fn plugin(
        &self,
        cfg: PluginConfig,
        client: kube::Client,
        metrics: Metrics,
    ) -> Result<Plugin, HarnessError> {
        let built = match self {
            Self::Amd(args) => {
                let backend =
                    hami_device_plugin_amd::run::backend(&args.node, args.common.health_interval)
                        .map_err(|e| setup("AMD backend")(e.to_string()))?;
                let backend = Arc::new(backend);
                let hook = Arc::new(AmdHook::new(
                    backend.catalog(),
                    args.hook_path.clone(),
                    args.node.roots.dev_root.clone(),
                ));
                let backend: Arc<dyn DeviceBackend> = backend;
                Plugin::new(cfg, backend, client, metrics).map(|p| p.with_hook(hook))
            }
            Self::Dcu(args) => {
                let backend =
                    hami_device_plugin_dcu::run::backend(&args.node, args.common.health_interval)
                        .map_err(|e| setup("DCU backend")(e.to_string()))?;
                let backend = Arc::new(backend);
                let hook = Arc::new(DcuHook::new(
                    backend.catalog(),
                    hami_device_plugin_dcu::run::host_paths(args),
                ));
                let backend: Arc<dyn DeviceBackend> = backend;
                Plugin::new(cfg, backend, client, metrics).map(|p| p.with_hook(hook))
            }
        };
        built.map_err(|e| setup("vendor device plugin")(e.to_string()))
    }

    /// The device root the plugin answers host paths under (`<tree>/dev`).
    pub(crate) fn dev_root(&self) -> PathBuf {
        match self {
            Self::Amd(args) => args.node.roots.dev_root.clone(),
            Self::Dcu(args) => args.node.roots.dev_root.clone(),
        }
    }
}

fn binary_args(binary: &str, common: &[String], flags: &[String]) -> Vec<String> {
    std::iter::once(binary.to_string())
        .chain(common.iter().cloned())
        .chain(flags.iter().cloned())
        .collect()
}
