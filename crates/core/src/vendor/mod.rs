//! Vendor plug-ins: what differs between NVIDIA, Hygon, Cambricon, … lives behind
//! [`Vendor`]; the fit walk, scoring and accounting are shared.

mod nvidia;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Container;

use crate::codec::CodecError;
use crate::codec::selectors::DeviceSelector;
use crate::config::DeviceConfig;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::quota::QuotaResources;
use crate::request::RequestError;

pub use nvidia::Nvidia;

/// Per-pod device constraints a vendor reads from the pod's annotations.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceConstraints {
    /// use/nouse type and UUID lists.
    pub selector: DeviceSelector,
    /// All devices of one container on one NUMA node.
    pub numa_bind: bool,
    /// Allowed device modes (`nvidia.com/vgpu-mode`); the device mode must be a substring.
    pub mode_filter: Option<String>,
}

/// Why a pod's constraint annotations were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod annotation {key}={value:?} is invalid: {reason}")]
pub struct ConstraintError {
    pub key: String,
    pub value: String,
    pub reason: String,
}

/// One accelerator vendor.
pub trait Vendor: Send + Sync + Debug {
    /// The vendor key written into pod device strings (`NVIDIA`).
    fn common_word(&self) -> &str;
    /// Extended resource names this vendor manages.
    fn resource_names(&self) -> Vec<String>;
    /// The resource counting devices (`nvidia.com/gpu`): what the device plugin advertises
    /// to kubelet, so its allocatable on the node tells whether the plugin is alive.
    fn count_resource(&self) -> &str;
    /// The node annotation holding the vendor's device inventory.
    fn register_annotation(&self) -> &str;
    /// Pod annotation the device plugin consumes container by container.
    fn to_allocate_annotation(&self) -> &str;
    /// Pod annotation recording what was allocated (usage accounting reads it).
    fn allocated_annotation(&self) -> &str;
    /// Node handshake annotation, when the vendor has one.
    fn handshake_annotation(&self) -> Option<&str>;
    /// The container's request for this vendor, `None` when it asks for none.
    fn container_request(
        &self,
        c: &Container,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError>;
    /// Decodes the node's inventory; `None` when the node has no register annotation.
    fn decode_inventory(
        &self,
        node_annotations: &BTreeMap<String, String>,
    ) -> Option<Result<Vec<DeviceInfo>, CodecError>>;
    /// Reads the pod's constraints (type/UUID lists, NUMA binding, mode).
    fn pod_constraints(
        &self,
        pod_annotations: &BTreeMap<String, String>,
    ) -> Result<DeviceConstraints, ConstraintError>;
    /// True when [`Vendor::type_matches`] holds for every device of this vendor given
    /// this request and these constraints (no type, UUID-free mode or model filter), so
    /// the fit can skip the per-device check. `false` is always a safe answer.
    fn accepts_any_type(
        &self,
        _req: &ContainerDeviceRequest,
        _constraints: &DeviceConstraints,
    ) -> bool {
        false
    }
    /// The memory and core resources a namespace's ResourceQuota can limit
    /// (`docs/protocol.md#resourcequota`); none by default.
    fn quota_resources(&self) -> QuotaResources {
        QuotaResources::default()
    }
    /// Device-level type check (HAMi's `CardTypeMismatch`), for devices whose type
    /// already names the vendor.
    fn type_matches(
        &self,
        device: &DeviceInfo,
        req: &ContainerDeviceRequest,
        constraints: &DeviceConstraints,
    ) -> bool;
}

/// The vendors a process manages, in a fixed order (sorted by vendor key).
#[derive(Debug, Clone)]
pub struct VendorRegistry {
    vendors: Vec<Arc<dyn Vendor>>,
}

impl VendorRegistry {
    pub fn new(mut vendors: Vec<Arc<dyn Vendor>>) -> Self {
        vendors.sort_by(|a, b| a.common_word().cmp(b.common_word()));
        vendors.dedup_by(|a, b| a.common_word() == b.common_word());
        VendorRegistry { vendors }
    }

    /// The registry built from a device config: NVIDIA today.
    pub fn from_config(cfg: &DeviceConfig) -> Self {
        Self::new(vec![Arc::new(Nvidia::new(cfg.nvidia.clone()))])
    }

    pub fn vendors(&self) -> &[Arc<dyn Vendor>] {
        &self.vendors
    }

    pub fn get(&self, common_word: &str) -> Option<&Arc<dyn Vendor>> {
        self.vendors.iter().find(|v| v.common_word() == common_word)
    }

    /// Every resource name any vendor manages.
    pub fn resource_names(&self) -> Vec<String> {
        self.vendors
            .iter()
            .flat_map(|v| v.resource_names())
            .collect()
    }
}

/// ASCII case-insensitive substring test without allocating (hot path of the fit).
pub fn contains_ignore_ascii_case(haystack: &str, needle: &str) -> bool {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    if n.is_empty() {
        return true;
    }
    if n.len() > h.len() {
        return false;
    }
    // Registered models usually start with the vendor name: answer that without a scan.
    h[..n.len()].eq_ignore_ascii_case(n) || h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substring_ignores_case() {
        assert!(contains_ignore_ascii_case("NVIDIA-Tesla V100", "nvidia"));
        assert!(contains_ignore_ascii_case("nvidia a100", "A100"));
        assert!(!contains_ignore_ascii_case("MLU370", "NVIDIA"));
        assert!(contains_ignore_ascii_case("x", ""));
        assert!(!contains_ignore_ascii_case("", "x"));
    }

    #[test]
    fn registry_is_sorted_and_deduplicated() {
        let cfg = DeviceConfig::default();
        let n1: Arc<dyn Vendor> = Arc::new(Nvidia::new(cfg.nvidia.clone()));
        let n2: Arc<dyn Vendor> = Arc::new(Nvidia::new(cfg.nvidia.clone()));
        let reg = VendorRegistry::new(vec![n1, n2]);
        assert_eq!(reg.vendors().len(), 1);
        assert!(reg.get("NVIDIA").is_some());
        assert!(reg.get("MLU").is_none());
        assert_eq!(reg.resource_names().len(), 4);
    }
}
