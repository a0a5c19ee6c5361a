//! The plugin's settings: device-config.yaml's `nvidia` section, overridden by this node's
//! config.json entry, plus the command line.

use std::path::Path;
use std::time::Duration;

use hami_core::config::NvidiaConfig;
use hami_device_plugin::config::socket_name_for;
use hami_device_plugin::{DeviceFilter, PluginConfig, VendorSpec, VgpuHookSettings};
use hami_server::device_config::{DeviceConfigError, load_device_config};

use crate::cli::ConfigArgs;
use crate::node_config::{self, NodeConfig, NodeConfigError};

/// Why the settings could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    DeviceConfig(#[from] DeviceConfigError),
    #[error(transparent)]
    NodeConfig(#[from] NodeConfigError),
    #[error(
        "operating mode {0:?} is not supported: use hami-core (or mps, served like hami-core); MIG is not implemented by hami-device-plugin-nvidia"
    )]
    OperatingMode(String),
}

/// Everything that does not depend on the serving flags.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub nvidia: NvidiaConfig,
    pub node: Option<NodeConfig>,
}

pub fn load(args: &ConfigArgs, node_name: Option<&str>) -> Result<Loaded, SettingsError> {
    let device = load_device_config(args.config_file.as_deref())?;
    let node = match node_name {
        Some(n) => node_config::load(&args.node_config_file, n)?,
        None => None,
    };
    if let Some(n) = &node {
        tracing::info!(node = %n.name, file = %args.node_config_file.display(), "per-node overrides found");
    }
    Ok(Loaded {
        nvidia: device.nvidia,
        node,
    })
}

/// Merges everything into the framework's configuration.
pub fn plugin_config(
    loaded: &Loaded,
    args: &ConfigArgs,
    node_name: &str,
    plugin_dir: &Path,
    register_interval: Duration,
) -> Result<PluginConfig, SettingsError> {
    let nv = &loaded.nvidia;
    let node = loaded.node.clone().unwrap_or_default();
    let mode = node
        .operating_mode
        .clone()
        .unwrap_or_else(|| "hami-core".into());
    if !matches!(mode.as_str(), "hami-core" | "mps") {
        return Err(SettingsError::OperatingMode(mode));
    }
    let resource = nv.resource_count_name.clone();
    Ok(PluginConfig {
        node_name: node_name.to_string(),
        socket_name: socket_name_for("nvidia", &resource),
        resource_name: resource,
        plugin_dir: plugin_dir.to_path_buf(),
        vendor: VendorSpec::nvidia(),
        split_count: node.device_split_count.unwrap_or(nv.device_split_count),
        memory_scaling: node
            .device_memory_scaling
            .unwrap_or(nv.device_memory_scaling),
        core_scaling: node.device_core_scaling.unwrap_or(nv.device_core_scaling),
        preconfigured_memory: node
            .pre_configured_device_memory
            .unwrap_or(nv.pre_configured_device_memory),
        numa_topology: node.enable_numa_topology.unwrap_or(nv.enable_numa_topology),
        // On unless the node turns it off: HAMi's RPC always offers it, and kubelet follows
        // the RPC, so clusters running HAMi already use it.
        preferred_allocation: node.enable_get_preferred_allocation.unwrap_or(true),
        operating_mode: mode,
        filter: DeviceFilter {
            uuids: node.filter_uuids.clone(),
            indexes: node.filter_indexes.clone(),
        },
        vgpu_hook: VgpuHookSettings {
            hook_path: args.hook_path.clone(),
            lib_cuda_log_level: node
                .lib_cuda_log_level
                .clone()
                .unwrap_or_else(|| nv.lib_cuda_log_level.clone()),
            disable_core_limit: nv.disable_core_limit,
            libvgpu_version: args.libvgpu_version.clone(),
        },
        register_interval,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn args(dir: &Path) -> ConfigArgs {
        ConfigArgs {
            config_file: Some(dir.join("device-config.yaml")),
            node_config_file: dir.join("config.json"),
            hook_path: PathBuf::from("/usr/local"),
            libvgpu_version: None,
        }
    }

    #[test]
    fn device_config_then_node_overrides() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("device-config.yaml"),
            "nvidia:\n  resourceCountName: example.com/vgpu\n  deviceSplitCount: 10\n  deviceMemoryScaling: 1\n  libCudaLogLevel: '1'\n  disableCoreLimit: true\n  migProfileAllowlist: {models: [A100]}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"nodeconfig":[{"name":"n1","devicesplitcount":3,"devicememoryscaling":2,"libcudaloglevel":"4","filterdevices":{"index":[1]},"enablegetpreferredallocation":false}]}"#,
        )
        .unwrap();
        let a = args(dir.path());
        let loaded = load(&a, Some("n1")).unwrap();
        let c =
            plugin_config(&loaded, &a, "n1", Path::new("/dp"), Duration::from_secs(30)).unwrap();
        assert_eq!(c.resource_name, "example.com/vgpu");
        assert_eq!(c.socket_name, "nvidia-vgpu.sock");
        assert_eq!(c.split_count, 3);
        assert_eq!(c.memory_scaling, 2.0);
        assert_eq!(c.vgpu_hook.lib_cuda_log_level, "4");
        assert!(c.vgpu_hook.disable_core_limit);
        assert_eq!(c.filter.indexes, [1]);
        assert!(!c.preferred_allocation);
        assert_eq!(c.operating_mode, "hami-core");
        assert_eq!(c.validate(), Ok(()));

        // Another node: device config only.
        let loaded = load(&a, Some("n2")).unwrap();
        let c =
            plugin_config(&loaded, &a, "n2", Path::new("/dp"), Duration::from_secs(30)).unwrap();
        assert_eq!((c.split_count, c.preferred_allocation), (10, true));
    }

    #[test]
    fn defaults_errors_and_mig() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = args(dir.path());
        a.config_file = None;
        let loaded = load(&a, Some("n1")).unwrap();
        let c =
            plugin_config(&loaded, &a, "n1", Path::new("/dp"), Duration::from_secs(30)).unwrap();
        assert_eq!(
            (c.resource_name.as_str(), c.split_count),
            ("nvidia.com/gpu", 10)
        );
        assert_eq!(c.socket_name, "nvidia-gpu.sock");

        a.config_file = Some(dir.path().join("missing.yaml"));
        assert!(matches!(
            load(&a, None),
            Err(SettingsError::DeviceConfig(DeviceConfigError::Read { .. }))
        ));

        a.config_file = None;
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"nodeconfig":[{"name":"n1","operatingmode":"mig"}]}"#,
        )
        .unwrap();
        let loaded = load(&a, Some("n1")).unwrap();
        let e = plugin_config(&loaded, &a, "n1", Path::new("/dp"), Duration::from_secs(30))
            .unwrap_err();
        assert!(e.to_string().contains("MIG is not implemented"), "{e}");
    }
}
