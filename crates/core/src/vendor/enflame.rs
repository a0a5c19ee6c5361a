//! Enflame GCUs (`docs/vendors.md#enflame`): whole GCUs (`GCU`) derived from the node's
//! capacity of `enflame.com/gcu`, one pod per GCU. The `enflame:` section also names the
//! DRS resources, served by [`super::enflame_drs`] (`Enflame`, GCUs cut by profile).

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Serialize};

use super::common::{RequestShape, capacity_count, capacity_device, uses_count};
use super::{
    Admission, Annotations, CapacityCheck, ConstraintError, DeviceConstraints, HealthRule,
    InventorySource, NodeLockRule, NodeView, Vendor,
};
use crate::codec::CodecError;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::reason::Reason;
use crate::request::RequestError;

/// The vendor key of whole Enflame GCUs.
pub const GCU: &str = "GCU";
/// Pod: GCUs still to hand out / given.
pub const TO_ALLOCATE: &str = "hami.io/enflame-gcu-devices-to-allocate";
pub const ALLOCATED: &str = "hami.io/enflame-gcu-devices-allocated";
/// What one whole GCU accounts (HAMi registers 100 "MiB" and 100 cores per GCU and a
/// pod takes both).
const WHOLE: u32 = 100;

/// The `enflame:` section of `device-config.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EnflameConfig {
    /// Whole GCUs.
    #[serde(rename = "resourceNameGCU")]
    pub resource_name_gcu: String,
    /// DRS slices by count ([`super::enflame_drs`]).
    #[serde(rename = "resourceNameDRSGCU")]
    pub resource_name_drs_gcu: String,
    /// DRS slices by memory and compute.
    #[serde(rename = "resourceNameGCUMemory")]
    pub resource_name_gcu_memory: String,
    #[serde(rename = "resourceNameGCUCore")]
    pub resource_name_gcu_core: String,
    /// HAMi's legacy shared-GCU names: `resourceNameVGCU` stands for the DRS count when
    /// `resourceNameDRSGCU` is empty; the percentage name is read and not used, as in
    /// HAMi.
    #[serde(rename = "resourceNameVGCU", skip_serializing_if = "String::is_empty")]
    pub resource_name_vgcu: String,
    #[serde(
        rename = "resourceNameVGCUPercentage",
        skip_serializing_if = "String::is_empty"
    )]
    pub resource_name_vgcu_percentage: String,
}

impl Default for EnflameConfig {
    fn default() -> Self {
        EnflameConfig {
            resource_name_gcu: "enflame.com/gcu".into(),
            resource_name_drs_gcu: "enflame.com/drs-gcu".into(),
            resource_name_gcu_memory: "enflame.com/gcu-memory".into(),
            resource_name_gcu_core: "enflame.com/gcu-core".into(),
            resource_name_vgcu: String::new(),
            resource_name_vgcu_percentage: String::new(),
        }
    }
}

/// Whole Enflame GCUs.
#[derive(Debug, Clone)]
pub struct EnflameGcu {
    cfg: EnflameConfig,
}

impl EnflameGcu {
    pub fn new(cfg: EnflameConfig) -> Self {
        EnflameGcu { cfg }
    }
}

impl Vendor for EnflameGcu {
    fn common_word(&self) -> &str {
        GCU
    }

    fn resource_names(&self) -> Vec<String> {
        vec![self.cfg.resource_name_gcu.clone()]
    }

    fn count_resource(&self) -> &str {
        &self.cfg.resource_name_gcu
    }

    fn inventory_source(&self) -> InventorySource<'_> {
        InventorySource::Capacity(&self.cfg.resource_name_gcu)
    }

    fn health_rule(&self) -> HealthRule<'_> {
        HealthRule::Capacity
    }

    fn to_allocate_annotation(&self) -> Option<&str> {
        Some(TO_ALLOCATE)
    }

    fn allocated_annotation(&self) -> &str {
        ALLOCATED
    }

    /// Its device plugin does not look for the pod through a node lock.
    fn node_lock(&self) -> NodeLockRule<'_> {
        NodeLockRule::None
    }

    fn container_request(
        &self,
        c: &Container,
        _pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        Ok(RequestShape::count_only(GCU, &self.cfg.resource_name_gcu)
            .read(c)?
            .map(|r| ContainerDeviceRequest {
                mem_mib: WHOLE,
                cores: WHOLE,
                ..r
            }))
    }

    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        let count = match capacity_count(node, &self.cfg.resource_name_gcu)? {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        Some(Ok((0..count)
            .map(|i| capacity_device(node.name, GCU, i, WHOLE, GCU))
            .collect()))
    }

    fn pod_constraints(
        &self,
        _pod_annotations: &Annotations,
    ) -> Result<DeviceConstraints, ConstraintError> {
        Ok(DeviceConstraints::default())
    }

    fn accepts_any_type(&self, req: &ContainerDeviceRequest, _c: &DeviceConstraints) -> bool {
        req.dev_type == GCU
    }

    fn type_matches(
        &self,
        _d: &DeviceInfo,
        req: &ContainerDeviceRequest,
        _c: &DeviceConstraints,
    ) -> bool {
        req.dev_type == GCU
    }

    fn custom_capacity(&self) -> bool {
        true
    }

    /// A GCU in use is refused (`ExclusiveDeviceAllocateConflict`); a free one is taken
    /// whole.
    fn check_capacity(&self, c: &CapacityCheck<'_>) -> Result<(u32, u32), Reason> {
        if c.usage.used > 0 {
            return Err(Reason::ExclusiveDeviceAllocateConflict);
        }
        Ok((WHOLE, WHOLE))
    }

    fn mutate_admission(&self, c: &mut Container, _pod: &Annotations) -> Result<Admission, String> {
        Ok(uses_count(c, &self.cfg.resource_name_gcu))
    }
}
