//! Vastai (`Vastai`): whole cards (or dies) from the JSON register
//! `hami.io/node-va-register`, with its handshake; in die mode the devices of one AIC are
//! kept together (`docs/vendors.md#vastai`).

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Serialize};

use super::biren::whole_card;
use super::common::{
    RequestShape, choose_by_group, json_register, selection_constraints, selector_keys, uses_count,
};
use super::{
    Admission, Annotations, CapacityCheck, ConstraintError, DeviceConstraints, HealthRule,
    InventorySource, NodeView, Vendor,
};
use crate::codec::CodecError;
use crate::codec::selectors::SelectorKeys;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::reason::Reason;
use crate::request::RequestError;

/// The vendor key of Vastai devices.
pub const VASTAI: &str = "Vastai";
/// Node: the Vastai plugin's inventory (JSON).
pub const REGISTER: &str = "hami.io/node-va-register";
/// Node: the Vastai plugin's handshake.
pub const HANDSHAKE: &str = "hami.io/node-handshake-va";
/// Pod: devices still to hand out.
pub const TO_ALLOCATE: &str = "hami.io/Vastai-devices-to-allocate";
/// Pod: devices given at filter time.
pub const ALLOCATED: &str = "hami.io/Vastai-devices-allocated";
/// Pod: allowed / forbidden models (substring) and UUIDs (exact).
pub const USE_TYPE: &str = "vastaitech.com/use-va";
pub const NOUSE_TYPE: &str = "vastaitech.com/nouse-va";
pub const USE_UUID: &str = "vastaitech.com/use-gpuuuid";
pub const NOUSE_UUID: &str = "vastaitech.com/nouse-gpuuuid";
/// `custominfo` keys: the registration strategy (`die`) and the die's AIC.
pub const DEVICE_STRATEGY: &str = "DeviceStrategy";
pub const AIC: &str = "AIC";

/// The `vastai:` section of `device-config.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VastaiConfig {
    pub resource_count_name: String,
}

impl Default for VastaiConfig {
    fn default() -> Self {
        VastaiConfig {
            resource_count_name: "vastaitech.com/va".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Vastai {
    cfg: VastaiConfig,
    keys: SelectorKeys,
}

impl Vastai {
    pub fn new(cfg: VastaiConfig) -> Self {
        // HAMi declares the type keys but never reads them: UUIDs only.
        Vastai {
            cfg,
            keys: selector_keys(None, None, Some(USE_UUID), Some(NOUSE_UUID)),
        }
    }
}

impl Vendor for Vastai {
    fn common_word(&self) -> &str {
        VASTAI
    }

    fn resource_names(&self) -> Vec<String> {
        vec![self.cfg.resource_count_name.clone()]
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
        RequestShape::count_only(VASTAI, &self.cfg.resource_count_name).read(c)
    }

    /// The plugin registers no compute: every device counts as 100 (for scores).
    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        Some(json_register(node, REGISTER)?.map(|mut devices| {
            for d in &mut devices {
                d.cores = 100;
            }
            devices
        }))
    }

    fn pod_constraints(
        &self,
        pod_annotations: &Annotations,
    ) -> Result<DeviceConstraints, ConstraintError> {
        selection_constraints(pod_annotations, &self.keys)
    }

    fn accepts_any_type(&self, req: &ContainerDeviceRequest, _c: &DeviceConstraints) -> bool {
        req.dev_type == VASTAI
    }

    fn type_matches(
        &self,
        _d: &DeviceInfo,
        req: &ContainerDeviceRequest,
        _c: &DeviceConstraints,
    ) -> bool {
        req.dev_type == VASTAI
    }

    fn custom_capacity(&self) -> bool {
        true
    }

    fn check_capacity(&self, c: &CapacityCheck<'_>) -> Result<(u32, u32), Reason> {
        whole_card(c)
    }

    fn may_choose_devices(&self) -> bool {
        true
    }

    /// Die mode: the node's first device registers `DeviceStrategy: die`.
    fn chooses_devices(&self, devices: &[DeviceInfo], _req: &ContainerDeviceRequest) -> bool {
        devices
            .first()
            .is_some_and(|d| d.custom_str(DEVICE_STRATEGY) == Some("die"))
    }

    fn choose_devices(
        &self,
        devices: &[DeviceInfo],
        candidates: &[usize],
        count: usize,
    ) -> Vec<usize> {
        choose_by_group(devices, candidates, count, |d| {
            d.custom_str(AIC).map(String::from)
        })
    }

    fn mutate_admission(&self, c: &mut Container, _pod: &Annotations) -> Result<Admission, String> {
        Ok(uses_count(c, &self.cfg.resource_count_name))
    }
}
