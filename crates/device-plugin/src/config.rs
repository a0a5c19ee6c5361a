//! The settings a plugin runs with, already merged from the device config file, the
//! per-node overrides and the command line.

use std::path::PathBuf;
use std::time::Duration;

use hami_core::annotations;

use crate::backend::PhysicalDevice;

/// The vendor-specific names of HAMi's protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VendorSpec {
    /// The TYPE field of pod device strings (`NVIDIA`).
    pub device_type: String,
    /// Node annotation carrying the inventory (`hami.io/node-nvidia-register`).
    pub register_annotation: String,
    /// Pod annotation the scheduler fills and the plugin consumes
    /// (`hami.io/vgpu-devices-to-allocate`).
    pub to_allocate_annotation: String,
    /// Environment variable that selects the container's devices (`NVIDIA_VISIBLE_DEVICES`).
    pub visible_devices_env: String,
    /// Node annotation of the scheduler's handshake (`hami.io/node-handshake`), if any.
    pub handshake_annotation: Option<String>,
}

impl VendorSpec {
    pub fn nvidia() -> Self {
        VendorSpec {
            device_type: "NVIDIA".into(),
            register_annotation: annotations::NVIDIA_NODE_REGISTER.into(),
            to_allocate_annotation: annotations::NVIDIA_DEVICES_TO_ALLOCATE.into(),
            visible_devices_env: "NVIDIA_VISIBLE_DEVICES".into(),
            handshake_annotation: Some(annotations::NVIDIA_NODE_HANDSHAKE.into()),
        }
    }
}

/// Why a core [`Vendor`](hami_core::vendor::Vendor) cannot drive a device plugin.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum VendorSpecError {
    #[error("vendor {0}: its inventory is not a node annotation a plugin writes")]
    NoRegisterAnnotation(String),
    #[error("vendor {0}: its plugin consumes no to-allocate annotation")]
    NoToAllocateAnnotation(String),
}

impl VendorSpec {
    /// The names core's `Vendor` already knows (one table for scheduler and plugin);
    /// `visible_devices_env` is the plugin's own.
    pub fn from_vendor(
        vendor: &dyn hami_core::vendor::Vendor,
        visible_devices_env: &str,
    ) -> Result<Self, VendorSpecError> {
        let word = vendor.common_word();
        let register = match vendor.inventory_source() {
            hami_core::vendor::InventorySource::Annotation(key) => key.to_string(),
            hami_core::vendor::InventorySource::Capacity(_) => {
                return Err(VendorSpecError::NoRegisterAnnotation(word.into()));
            }
        };
        let to_allocate = vendor
            .to_allocate_annotation()
            .ok_or_else(|| VendorSpecError::NoToAllocateAnnotation(word.into()))?;
        Ok(VendorSpec {
            device_type: word.into(),
            register_annotation: register,
            to_allocate_annotation: to_allocate.into(),
            visible_devices_env: visible_devices_env.into(),
            handshake_annotation: vendor.handshake_annotation().map(str::to_string),
        })
    }
}

/// Devices excluded from the node (HAMi's `filterdevices`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceFilter {
    pub uuids: Vec<String>,
    pub indexes: Vec<u32>,
}

impl DeviceFilter {
    pub fn excludes(&self, device: &PhysicalDevice) -> bool {
        self.uuids.contains(&device.uuid) || self.indexes.contains(&device.index)
    }
}

/// What the vGPU hook, HAMi-core (`libvgpu.so`), needs in every container.
#[derive(Debug, Clone, PartialEq)]
pub struct VgpuHookSettings {
    /// `HOOK_PATH`: host directory holding `vgpu/libvgpu.so`, `vgpu/ld.so.preload` and the
    /// per-container cache directories (`vgpu/containers/<podUID>_<container>`).
    pub hook_path: PathBuf,
    /// `LIBCUDA_LOG_LEVEL` (empty: not set).
    pub lib_cuda_log_level: String,
    /// Sets `GPU_CORE_UTILIZATION_POLICY=disable`.
    pub disable_core_limit: bool,
    /// Mount `vgpu/libvgpu.so.<version>` when it exists, so a plugin upgrade that brings a
    /// new library never swaps the file under running containers.
    pub libvgpu_version: Option<String>,
}

/// Everything the framework needs to serve one resource.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    pub node_name: String,
    /// Resource advertised to kubelet (`nvidia.com/gpu`).
    pub resource_name: String,
    /// Kubelet's device plugin directory (holds `kubelet.sock`).
    pub plugin_dir: PathBuf,
    /// Our socket's file name in `plugin_dir` (the Register endpoint).
    pub socket_name: String,
    pub vendor: VendorSpec,
    /// Replicas advertised per physical device (`deviceSplitCount`).
    pub split_count: u32,
    /// Registered memory = real memory × this (`deviceMemoryScaling`; > 1 oversubscribes).
    pub memory_scaling: f64,
    /// Registered cores = 100 × this (`deviceCoreScaling`).
    pub core_scaling: f64,
    /// MiB registered for a device whose memory the library cannot report.
    pub preconfigured_memory: u32,
    /// Send each replica's NUMA node to kubelet.
    pub numa_topology: bool,
    /// Offer GetPreferredAllocation (answered by GetDevicePluginOptions and sent in Register).
    pub preferred_allocation: bool,
    /// Device mode written into the register annotation (`hami-core`: shared through
    /// HAMi-core, `libvgpu.so`).
    pub operating_mode: String,
    pub filter: DeviceFilter,
    pub vgpu_hook: VgpuHookSettings,
    /// How often the register annotation is checked against the node.
    pub register_interval: Duration,
}

/// A setting that cannot work.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("node name is empty (set NODE_NAME)")]
    NoNodeName,
    #[error("deviceSplitCount must be at least 1")]
    ZeroSplitCount,
    #[error("{key} must be a positive number, got {value}")]
    BadScaling { key: &'static str, value: f64 },
    #[error("resource name {0:?} is not a domain-prefixed extended resource")]
    BadResourceName(String),
    #[error("socket name {0:?} must be a plain file name")]
    BadSocketName(String),
}

impl PluginConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.node_name.trim().is_empty() {
            return Err(ConfigError::NoNodeName);
        }
        if self.split_count == 0 {
            return Err(ConfigError::ZeroSplitCount);
        }
        for (key, value) in [
            ("deviceMemoryScaling", self.memory_scaling),
            ("deviceCoreScaling", self.core_scaling),
        ] {
            if !value.is_finite() || value <= 0.0 {
                return Err(ConfigError::BadScaling { key, value });
            }
        }
        let r = &self.resource_name;
        let slash = r.find('/');
        if slash.is_none_or(|i| i == 0 || i + 1 == r.len()) || r.contains("kubernetes.io/") {
            return Err(ConfigError::BadResourceName(r.clone()));
        }
        let s = &self.socket_name;
        if s.is_empty()
            || s.contains('/')
            || s == "."
            || s == ".."
            || s == hami_kubelet_api::KUBELET_SOCKET
        {
            return Err(ConfigError::BadSocketName(s.clone()));
        }
        Ok(())
    }

    /// `<plugin_dir>/<socket_name>`.
    pub fn socket_path(&self) -> PathBuf {
        self.plugin_dir.join(&self.socket_name)
    }

    /// `<plugin_dir>/kubelet.sock`.
    pub fn kubelet_socket(&self) -> PathBuf {
        self.plugin_dir.join(hami_kubelet_api::KUBELET_SOCKET)
    }
}

/// `<vendor>-<resource suffix>.sock`, e.g. `nvidia-gpu.sock` for `nvidia.com/gpu`, as HAMi
/// names it.
pub fn socket_name_for(prefix: &str, resource_name: &str) -> String {
    let suffix = resource_name.rsplit('/').next().unwrap_or(resource_name);
    format!("{prefix}-{suffix}.sock")
}

#[cfg(test)]
pub(crate) fn test_config(node: &str, dir: &std::path::Path) -> PluginConfig {
    PluginConfig {
        node_name: node.into(),
        resource_name: "nvidia.com/gpu".into(),
        plugin_dir: dir.to_path_buf(),
        socket_name: "nvidia-gpu.sock".into(),
        vendor: VendorSpec::nvidia(),
        split_count: 4,
        memory_scaling: 1.0,
        core_scaling: 1.0,
        preconfigured_memory: 0,
        numa_topology: false,
        preferred_allocation: true,
        operating_mode: "hami-core".into(),
        filter: DeviceFilter::default(),
        vgpu_hook: VgpuHookSettings {
            hook_path: "/usr/local".into(),
            lib_cuda_log_level: "1".into(),
            disable_core_limit: false,
            libvgpu_version: None,
        },
        register_interval: Duration::from_secs(30),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_problem() {
        let ok = test_config("n1", std::path::Path::new("/tmp"));
        assert_eq!(ok.validate(), Ok(()));
        let mut c = ok.clone();
        c.node_name = " ".into();
        assert_eq!(c.validate(), Err(ConfigError::NoNodeName));
        let mut c = ok.clone();
        c.split_count = 0;
        assert_eq!(c.validate(), Err(ConfigError::ZeroSplitCount));
        let mut c = ok.clone();
        c.memory_scaling = f64::NAN;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::BadScaling {
                key: "deviceMemoryScaling",
                ..
            })
        ));
        let mut c = ok.clone();
        c.core_scaling = 0.0;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::BadScaling {
                key: "deviceCoreScaling",
                ..
            })
        ));
        for bad in ["gpu", "/gpu", "nvidia.com/", "kubernetes.io/gpu"] {
            let mut c = ok.clone();
            c.resource_name = bad.into();
            assert!(
                matches!(c.validate(), Err(ConfigError::BadResourceName(_))),
                "{bad}"
            );
        }
        for bad in ["", "a/b.sock", "kubelet.sock", ".."] {
            let mut c = ok.clone();
            c.socket_name = bad.into();
            assert!(
                matches!(c.validate(), Err(ConfigError::BadSocketName(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn vendor_spec_comes_from_core() {
        use hami_core::vendor::{amd, hygon};
        let a = VendorSpec::from_vendor(&amd::Amd::new(Default::default()), "ROCR_VISIBLE_DEVICES")
            .unwrap();
        assert_eq!(a.device_type, "AMD");
        assert_eq!(a.register_annotation, "hami.io/node-amd-register");
        assert_eq!(a.to_allocate_annotation, "hami.io/amd-devices-to-allocate");
        assert_eq!(a.handshake_annotation, None);
        let d = VendorSpec::from_vendor(&hygon::Hygon::new(Default::default()), "").unwrap();
        assert_eq!(d.device_type, "DCU");
        assert_eq!(d.register_annotation, "hami.io/node-dcu-register");
        assert_eq!(d.to_allocate_annotation, "hami.io/dcu-devices-to-allocate");
        assert_eq!(
            d.handshake_annotation.as_deref(),
            Some("hami.io/node-handshake-dcu")
        );
    }

    #[test]
    fn socket_name_follows_hami() {
        assert_eq!(
            socket_name_for("nvidia", "nvidia.com/gpu"),
            "nvidia-gpu.sock"
        );
        assert_eq!(
            socket_name_for("nvidia", "example.com/vgpu"),
            "nvidia-vgpu.sock"
        );
    }
}
