//! The device configuration file (`device-config.yaml`), compatible with HAMi's chart:
//! one section per vendor family (`nvidia`, `cambricon`, `hygon`, `metax`, `enflame`,
//! `mthreads`, `iluvatars`, `kunlun`, `awsneuron`, `amd`, `vastai`, `biren`, `vnpus`),
//! each defaulting to the chart's values. A vendor's section lives beside the vendor
//! (`crate::vendor`); `docs/vendors.md` lists the keys.

use serde::{Deserialize, Serialize};

pub use crate::vendor::VendorSwitches;
pub use crate::vendor::amd::AmdConfig;
pub use crate::vendor::ascend::{AscendConfig, AscendTemplate, VnpusConfig};
pub use crate::vendor::awsneuron::AwsNeuronConfig;
pub use crate::vendor::biren::BirenConfig;
pub use crate::vendor::cambricon::CambriconConfig;
pub use crate::vendor::enflame::EnflameConfig;
pub use crate::vendor::hygon::HygonConfig;
pub use crate::vendor::iluvatar::IluvatarConfig;
pub use crate::vendor::kunlun::KunlunConfig;
pub use crate::vendor::metax::MetaxConfig;
pub use crate::vendor::mthreads::MthreadsConfig;
pub use crate::vendor::vastai::VastaiConfig;

/// Top level of `device-config.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceConfig {
    pub nvidia: NvidiaConfig,
    pub cambricon: CambriconConfig,
    pub hygon: HygonConfig,
    pub metax: MetaxConfig,
    pub enflame: EnflameConfig,
    pub mthreads: MthreadsConfig,
    /// Iluvatar's chips, each scheduled as its own vendor (needs `--enable-iluvatar`).
    pub iluvatars: Vec<IluvatarConfig>,
    pub kunlun: KunlunConfig,
    pub awsneuron: AwsNeuronConfig,
    pub amd: AmdConfig,
    pub vastai: VastaiConfig,
    pub biren: BirenConfig,
    /// Ascend's chips (needs `--enable-ascend`).
    pub vnpus: VnpusConfig,
    /// HAMi's `--enable-ascend` and `--enable-iluvatar`: flags, not file keys.
    #[serde(skip)]
    pub switches: VendorSwitches,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            nvidia: NvidiaConfig::default(),
            cambricon: CambriconConfig::default(),
            hygon: HygonConfig::default(),
            metax: MetaxConfig::default(),
            enflame: EnflameConfig::default(),
            mthreads: MthreadsConfig::default(),
            iluvatars: IluvatarConfig::chart_defaults(),
            kunlun: KunlunConfig::default(),
            awsneuron: AwsNeuronConfig::default(),
            amd: AmdConfig::default(),
            vastai: VastaiConfig::default(),
            biren: BirenConfig::default(),
            vnpus: VnpusConfig::default(),
            switches: VendorSwitches::default(),
        }
    }
}

/// The `nvidia:` section. Key names are HAMi's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvidiaConfig {
    #[serde(rename = "resourceCountName")]
    pub resource_count_name: String,
    #[serde(rename = "resourceMemoryName")]
    pub resource_memory_name: String,
    #[serde(rename = "resourceMemoryPercentageName")]
    pub resource_memory_percentage_name: String,
    #[serde(rename = "resourceCoreName")]
    pub resource_core_name: String,
    #[serde(rename = "resourcePriorityName")]
    pub resource_priority_name: String,
    /// MiB given to a container that asks for neither memory nor a memory percentage.
    #[serde(rename = "defaultMemory")]
    pub default_memory: u32,
    #[serde(rename = "defaultCores")]
    pub default_cores: u32,
    #[serde(rename = "defaultGPUNum")]
    pub default_gpu_num: u32,
    /// Multiplier applied to `gpumem` requests (a request of 1 means `memoryFactor` MiB).
    #[serde(rename = "memoryFactor")]
    pub memory_factor: u32,
    #[serde(rename = "overwriteEnv")]
    pub overwrite_env: bool,
    #[serde(rename = "gpuCorePolicy")]
    pub gpu_core_policy: String,
    #[serde(rename = "runtimeClassName")]
    pub runtime_class_name: String,
    #[serde(rename = "disableCoreLimit")]
    pub disable_core_limit: bool,
    #[serde(rename = "deviceSplitCount")]
    pub device_split_count: u32,
    #[serde(rename = "deviceMemoryScaling")]
    pub device_memory_scaling: f64,
    #[serde(rename = "deviceCoreScaling")]
    pub device_core_scaling: f64,
    #[serde(rename = "preConfiguredDeviceMemory")]
    pub pre_configured_device_memory: u32,
    #[serde(rename = "enableNumaTopology")]
    pub enable_numa_topology: bool,
    #[serde(rename = "libCudaLogLevel")]
    pub lib_cuda_log_level: String,
}

impl Default for NvidiaConfig {
    fn default() -> Self {
        NvidiaConfig {
            resource_count_name: "nvidia.com/gpu".into(),
            resource_memory_name: "nvidia.com/gpumem".into(),
            resource_memory_percentage_name: "nvidia.com/gpumem-percentage".into(),
            resource_core_name: "nvidia.com/gpucores".into(),
            resource_priority_name: "nvidia.com/priority".into(),
            default_memory: 0,
            default_cores: 0,
            default_gpu_num: 1,
            memory_factor: 1,
            overwrite_env: false,
            gpu_core_policy: "default".into(),
            runtime_class_name: String::new(),
            disable_core_limit: false,
            device_split_count: 10,
            device_memory_scaling: 1.0,
            device_core_scaling: 1.0,
            pre_configured_device_memory: 0,
            enable_numa_topology: false,
            lib_cuda_log_level: "1".into(),
        }
    }
}

/// Why a device configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("device config is not valid YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    #[error("device config: nvidia.memoryFactor must be at least 1, got 0")]
    ZeroMemoryFactor,
    #[error("device config: nvidia.{key} must not be empty")]
    EmptyResourceName { key: &'static str },
    #[error("device config: {section}: {reason}")]
    Vendor { section: String, reason: String },
}

impl DeviceConfig {
    /// Parses and validates `device-config.yaml`. Missing keys take HAMi's chart defaults.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let cfg: DeviceConfig = if text.trim().is_empty() {
            DeviceConfig::default()
        } else {
            serde_yaml_ng::from_str(text)?
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let n = &self.nvidia;
        if n.memory_factor == 0 {
            return Err(ConfigError::ZeroMemoryFactor);
        }
        for (key, value) in [
            ("resourceCountName", &n.resource_count_name),
            ("resourceMemoryName", &n.resource_memory_name),
            (
                "resourceMemoryPercentageName",
                &n.resource_memory_percentage_name,
            ),
            ("resourceCoreName", &n.resource_core_name),
        ] {
            if value.trim().is_empty() {
                return Err(ConfigError::EmptyResourceName { key });
            }
        }
        // Vendor keys go into pod device strings: no separators, none empty.
        let words = self
            .vnpus
            .configs
            .iter()
            .map(|c| ("vnpus.configs", c.common_word.as_str()))
            .chain(
                self.iluvatars
                    .iter()
                    .map(|c| ("iluvatars", c.common_word.as_str())),
            );
        for (section, word) in words {
            if word.trim().is_empty() || word.contains([',', ':', ';']) {
                return Err(ConfigError::Vendor {
                    section: section.to_string(),
                    reason: format!(
                        "commonWord {word:?} must be non-empty and free of ',', ':' and ';'"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The same configuration with HAMi's vendor switches set.
    pub fn with_switches(mut self, switches: VendorSwitches) -> Self {
        self.switches = switches;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_chart_defaults() {
        let cfg = DeviceConfig::from_yaml("").unwrap();
        assert_eq!(cfg.nvidia.resource_count_name, "nvidia.com/gpu");
        assert_eq!(cfg.nvidia.default_gpu_num, 1);
        assert_eq!(cfg.nvidia.memory_factor, 1);
    }

    #[test]
    fn vendor_sections_default_to_the_chart_and_are_read() {
        let cfg = DeviceConfig::from_yaml("").unwrap();
        assert_eq!(cfg.hygon.resource_count_name, "hygon.com/dcunum");
        assert_eq!(cfg.cambricon.resource_count_name, "cambricon.com/vmlu");
        assert_eq!(cfg.iluvatars.len(), 4);
        assert_eq!(cfg.vnpus.configs.len(), 7);
        assert!(!cfg.switches.ascend && !cfg.switches.iluvatar);
        let yaml = "hygon:\n  resourceCountName: hygon.com/dcu\n  memoryFactor: 2\niluvatars:\n- chipName: MR-V100\n  commonWord: MR-V100\n  resourceCountName: iluvatar.ai/vgpu\n  resourceMemoryName: iluvatar.ai/vcuda-memory\n  resourceCoreName: iluvatar.ai/vcuda-core\n";
        let cfg = DeviceConfig::from_yaml(yaml).unwrap();
        assert_eq!(cfg.hygon.resource_count_name, "hygon.com/dcu");
        assert_eq!(cfg.hygon.resource_memory_name, "hygon.com/dcumem");
        assert_eq!(cfg.hygon.memory_factor, 2);
        assert_eq!(cfg.iluvatars.len(), 1);
        assert_eq!(cfg.iluvatars[0].resource_count_name, "iluvatar.ai/vgpu");
        let err = DeviceConfig::from_yaml("iluvatars:\n- commonWord: 'a,b'\n").unwrap_err();
        assert!(err.to_string().contains("commonWord"), "{err}");
    }

    #[test]
    fn hami_keys_are_read_and_other_vendors_ignored() {
        let yaml = "nvidia:\n  resourceCountName: example.com/vgpu\n  defaultGPUNum: 2\n  memoryFactor: 1024\n  defaultMemory: 512\ncambricon:\n  resourceCountName: cambricon.com/vmlu\n";
        let cfg = DeviceConfig::from_yaml(yaml).unwrap();
        assert_eq!(cfg.nvidia.resource_count_name, "example.com/vgpu");
        assert_eq!(cfg.nvidia.default_gpu_num, 2);
        assert_eq!(cfg.nvidia.memory_factor, 1024);
        assert_eq!(cfg.nvidia.default_memory, 512);
        assert_eq!(cfg.nvidia.resource_memory_name, "nvidia.com/gpumem");
    }

    #[test]
    fn zero_memory_factor_is_refused() {
        let err = DeviceConfig::from_yaml("nvidia:\n  memoryFactor: 0\n").unwrap_err();
        assert!(err.to_string().contains("memoryFactor"));
    }

    #[test]
    fn garbage_is_a_yaml_error() {
        assert!(matches!(
            DeviceConfig::from_yaml("nvidia: [1, 2"),
            Err(ConfigError::Yaml(_))
        ));
    }
}
