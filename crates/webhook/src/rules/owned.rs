//! Annotations and labels only the scheduler may write. A pod that arrives with them
//! is trying to pick its own devices (HAMi#3041): the device plugin and the usage
//! ledger read them from any pod, whichever scheduler placed it.

use std::collections::BTreeMap;

use hami_core::annotations as keys;
use hami_core::vendor::VendorRegistry;

/// Keys every vendor shares.
const SHARED: &[&str] = &[
    keys::VGPU_NODE,
    keys::VGPU_TIME,
    keys::BIND_PHASE,
    keys::BIND_TIME,
    keys::MIG_ALLOCATIONS,
];

/// Suffixes of the per-vendor allocation keys (`hami.io/dcu-devices-to-allocate`,
/// `hami.io/kunlun-allocated`, …), so vendors this build does not manage are covered
/// too.
const VENDOR_SUFFIXES: &[&str] = &["-devices-to-allocate", "-devices-allocated", "-allocated"];

/// Which scheduler-owned keys a pod carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnedKeys {
    pub annotations: Vec<String>,
    pub labels: Vec<String>,
}

impl OwnedKeys {
    pub fn is_empty(&self) -> bool {
        self.annotations.is_empty() && self.labels.is_empty()
    }

    /// `annotation a, annotation b, label c` for messages.
    pub fn describe(&self) -> String {
        self.annotations
            .iter()
            .map(|k| format!("annotation {k}"))
            .chain(self.labels.iter().map(|k| format!("label {k}")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// True for a key the scheduler (or device plugin) writes.
pub fn is_scheduler_owned(key: &str, registry: &VendorRegistry) -> bool {
    if SHARED.contains(&key) {
        return true;
    }
    if registry
        .vendors()
        .iter()
        .any(|v| v.to_allocate_annotation() == Some(key) || v.allocated_annotation() == key)
    {
        return true;
    }
    key.strip_prefix("hami.io/")
        .is_some_and(|rest| VENDOR_SUFFIXES.iter().any(|s| rest.ends_with(s)))
}

/// The scheduler-owned keys among `annotations` and `labels`, sorted.
pub fn find(
    annotations: Option<&BTreeMap<String, String>>,
    labels: Option<&BTreeMap<String, String>>,
    registry: &VendorRegistry,
) -> OwnedKeys {
    let annotations = annotations
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .filter(|k| is_scheduler_owned(k, registry))
        .cloned()
        .collect();
    // Only the node label is written by the scheduler (the monitor selects on it).
    let labels = labels
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .filter(|k| k.as_str() == keys::VGPU_NODE)
        .cloned()
        .collect();
    OwnedKeys {
        annotations,
        labels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hami_core::config::DeviceConfig;

    #[test]
    fn recognises_shared_vendor_and_foreign_vendor_keys() {
        let reg = VendorRegistry::from_config(&DeviceConfig::default());
        for k in [
            "hami.io/vgpu-node",
            "hami.io/vgpu-devices-to-allocate",
            "hami.io/vgpu-devices-allocated",
            "hami.io/bind-phase",
            "hami.io/bind-time",
            "hami.io/vgpu-time",
            "hami.io/vgpu-mig-allocations",
            "hami.io/dcu-devices-to-allocate",
            "hami.io/Ascend910B3-devices-allocated",
            "hami.io/kunlun-allocated",
            "hami.io/aws-neuron-devices-allocated",
        ] {
            assert!(is_scheduler_owned(k, &reg), "{k}");
        }
        for k in [
            "hami.io/node-scheduler-policy",
            "hami.io/gpu-scheduler-policy",
            "hami.io/device-scoring-weights",
            "nvidia.com/use-gputype",
            "example.com/devices-allocated",
            "hami.io/webhook",
        ] {
            assert!(!is_scheduler_owned(k, &reg), "{k}");
        }
    }
}
