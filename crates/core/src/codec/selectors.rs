//! User-facing device selection annotations: allowed/forbidden device types and UUIDs on pods
//! (`nvidia.com/use-gputype` and friends) and the operator's per-node `hami.io/device-cordon`.

use std::collections::{BTreeMap, BTreeSet};

use crate::annotations;

/// Splits a comma list as HAMi reads every list annotation: items trimmed, empty items
/// dropped, so `" A100, ,V100 "` is `["A100", "V100"]` and a blank value is no list at all.
pub fn parse_comma_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Device UUIDs an operator has withdrawn from new allocations on a node
/// (`hami.io/device-cordon`). Running pods keep their devices.
pub fn parse_device_cordon(value: &str) -> BTreeSet<String> {
    parse_comma_list(value).into_iter().collect()
}

/// The four pod annotation keys a vendor reads for device selection. A vendor without one of
/// the lists (Iluvatar and Ascend have no type lists) leaves that key `None`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SelectorKeys {
    pub use_types: Option<String>,
    pub nouse_types: Option<String>,
    pub use_uuids: Option<String>,
    pub nouse_uuids: Option<String>,
}

impl SelectorKeys {
    /// NVIDIA's keys.
    pub fn nvidia() -> Self {
        SelectorKeys {
            use_types: Some(annotations::NVIDIA_USE_GPUTYPE.to_owned()),
            nouse_types: Some(annotations::NVIDIA_NOUSE_GPUTYPE.to_owned()),
            use_uuids: Some(annotations::NVIDIA_USE_GPUUUID.to_owned()),
            nouse_uuids: Some(annotations::NVIDIA_NOUSE_GPUUUID.to_owned()),
        }
    }
}

/// A pod's device constraints. Empty lists mean "no constraint".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceSelector {
    /// Device models allowed (case-insensitive substrings of the registered type).
    pub use_types: Vec<String>,
    /// Device models forbidden (case-insensitive substrings).
    pub nouse_types: Vec<String>,
    /// Device UUIDs allowed (exact).
    pub use_uuids: Vec<String>,
    /// Device UUIDs forbidden (exact).
    pub nouse_uuids: Vec<String>,
}

impl DeviceSelector {
    /// Reads the lists named by `keys` from a pod's annotations.
    pub fn from_annotations(annotations: &BTreeMap<String, String>, keys: &SelectorKeys) -> Self {
        let list = |key: &Option<String>| {
            key.as_ref()
                .and_then(|k| annotations.get(k))
                .map(|v| parse_comma_list(v))
                .unwrap_or_default()
        };
        DeviceSelector {
            use_types: list(&keys.use_types),
            nouse_types: list(&keys.nouse_types),
            use_uuids: list(&keys.use_uuids),
            nouse_uuids: list(&keys.nouse_uuids),
        }
    }

    /// Whether a device of registered model `device_type` (e.g. `NVIDIA-Tesla V100-SXM2-32GB`)
    /// may be used. Substring matching lets users write `V100` rather than the full model
    /// string, which differs between driver versions.
    /// No type list: every device type is allowed.
    pub fn types_unconstrained(&self) -> bool {
        self.use_types.is_empty() && self.nouse_types.is_empty()
    }

    pub fn type_allowed(&self, device_type: &str) -> bool {
        if self.types_unconstrained() {
            return true; // the common case, on the scheduler's hot path: no allocation
        }
        let device_type = device_type.to_lowercase();
        let matches_any = |list: &[String]| {
            list.iter()
                .any(|item| device_type.contains(&item.to_lowercase()))
        };
        (self.use_types.is_empty() || matches_any(&self.use_types))
            && !matches_any(&self.nouse_types)
    }

    /// Whether the device with `uuid` may be used (exact matches only).
    pub fn uuid_allowed(&self, uuid: &str) -> bool {
        let listed = |list: &[String]| list.iter().any(|item| item == uuid);
        (self.use_uuids.is_empty() || listed(&self.use_uuids)) && !listed(&self.nouse_uuids)
    }
}
