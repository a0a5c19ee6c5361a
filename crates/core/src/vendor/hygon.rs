//! Hygon DCU (`DCU`): the legacy register string `hami.io/node-dcu-register` written by
//! the DCU device plugin, its handshake, percent cores defaulting to a whole device
//! (`docs/vendors.md#hygon-dcu`).

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Serialize};

use super::common::{
    RequestShape, legacy_register, selection_constraints, selector_keys, uses_count,
};
use super::{
    Admission, Annotations, ConstraintError, DeviceConstraints, HealthRule, InventorySource,
    NodeView, Vendor,
};
use crate::codec::CodecError;
use crate::codec::selectors::SelectorKeys;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::request::RequestError;

/// The vendor key of Hygon DCUs.
pub const DCU: &str = "DCU";
/// Node: the DCU plugin's inventory (legacy string).
pub const REGISTER: &str = "hami.io/node-dcu-register";
/// Node: the DCU plugin's handshake.
pub const HANDSHAKE: &str = "hami.io/node-handshake-dcu";
/// Pod: devices still to hand out.
pub const TO_ALLOCATE: &str = "hami.io/dcu-devices-to-allocate";
/// Pod: devices given at filter time.
pub const ALLOCATED: &str = "hami.io/dcu-devices-allocated";
/// Pod: allowed / forbidden DCU models (substring) and UUIDs (exact).
pub const USE_TYPE: &str = "hygon.com/use-dcutype";
pub const NOUSE_TYPE: &str = "hygon.com/nouse-dcutype";
pub const USE_UUID: &str = "hygon.com/use-gpuuuid";
pub const NOUSE_UUID: &str = "hygon.com/nouse-gpuuuid";

/// The `hygon:` section of `device-config.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HygonConfig {
    pub resource_count_name: String,
    pub resource_memory_name: String,
    pub resource_core_name: String,
    /// MiB per unit of the memory resource (values below 2 mean MiB).
    pub memory_factor: u32,
}

impl Default for HygonConfig {
    fn default() -> Self {
        HygonConfig {
            resource_count_name: "hygon.com/dcunum".into(),
            resource_memory_name: "hygon.com/dcumem".into(),
            resource_core_name: "hygon.com/dcucores".into(),
            memory_factor: 1,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Hygon {
    cfg: HygonConfig,
    keys: SelectorKeys,
}

impl Hygon {
    pub fn new(cfg: HygonConfig) -> Self {
        Hygon {
            cfg,
            keys: selector_keys(
                Some(USE_TYPE),
                Some(NOUSE_TYPE),
                Some(USE_UUID),
                Some(NOUSE_UUID),
            ),
        }
    }
}

impl Vendor for Hygon {
    fn common_word(&self) -> &str {
        DCU
    }

    fn resource_names(&self) -> Vec<String> {
        vec![
            self.cfg.resource_count_name.clone(),
            self.cfg.resource_memory_name.clone(),
            self.cfg.resource_core_name.clone(),
        ]
    }

    fn count_resource(&self) -> &str {
        &self.cfg.resource_count_name
    }

    fn inventory_source(&self) -> InventorySource<'_> {
        InventorySource::Annotation(REGISTER)
    }

    fn health_rule(&self) -> HealthRule<'_> {
        HealthRule::Handshake(HANDSHAKE)
    }

    fn to_allocate_annotation(&self) -> Option<&str> {
        Some(TO_ALLOCATE)
    }

    fn allocated_annotation(&self) -> &str {
        ALLOCATED
    }

    fn container_request(
        &self,
        c: &Container,
        _pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        RequestShape {
            vendor: DCU,
            count: &self.cfg.resource_count_name,
            count_from_limits_only: false,
            memory: Some(&self.cfg.resource_memory_name),
            memory_unit: self.cfg.memory_factor.max(1),
            cores: Some(&self.cfg.resource_core_name),
            default_cores: 100,
        }
        .read(c)
    }

    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        legacy_register(node, REGISTER)
    }

    fn pod_constraints(
        &self,
        pod_annotations: &Annotations,
    ) -> Result<DeviceConstraints, ConstraintError> {
        selection_constraints(pod_annotations, &self.keys)
    }

    fn accepts_any_type(
        &self,
        req: &ContainerDeviceRequest,
        constraints: &DeviceConstraints,
    ) -> bool {
        req.dev_type == DCU && constraints.selector.types_unconstrained()
    }

    fn type_matches(
        &self,
        device: &DeviceInfo,
        req: &ContainerDeviceRequest,
        constraints: &DeviceConstraints,
    ) -> bool {
        req.dev_type == DCU && constraints.selector.type_allowed(&device.dev_type)
    }

    fn mutate_admission(&self, c: &mut Container, _pod: &Annotations) -> Result<Admission, String> {
        Ok(uses_count(c, &self.cfg.resource_count_name))
    }
}
