//! Reading HAMi's `device-config.yaml` (the chart's device ConfigMap): one loader for
//! every binary that takes the file (the scheduler extender, the webhook, the NVIDIA
//! device plugin and hamictl), so they agree on defaults and on error texts. Parsing and
//! validation are hami-core's ([`DeviceConfig::from_yaml`]); this adds the file.

use std::path::{Path, PathBuf};

use hami_core::config::{ConfigError, DeviceConfig};

/// Why the device config file could not be used. Both name the file.
#[derive(Debug, thiserror::Error)]
pub enum DeviceConfigError {
    #[error("cannot read device config {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("device config {}: {source}", path.display())]
    Parse { path: PathBuf, source: ConfigError },
}

/// Reads and validates the file at `path`; the chart defaults
/// ([`DeviceConfig::default`]) when no file is given. Keys the file leaves out take the
/// chart defaults too; an empty file is all defaults. A file given but unreadable or
/// invalid is an error, never a silent fallback.
pub fn load_device_config(path: Option<&Path>) -> Result<DeviceConfig, DeviceConfigError> {
    let Some(path) = path else {
        return Ok(DeviceConfig::default());
    };
    let text = std::fs::read_to_string(path).map_err(|source| DeviceConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    DeviceConfig::from_yaml(&text).map_err(|source| DeviceConfigError::Parse {
        path: path.to_path_buf(),
        source,
    })
}
