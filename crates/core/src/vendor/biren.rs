//! Biren GPUs (`Biren`): whole cards from the JSON register `hami.io/node-biren-register`
//! of Biren's device plugin, with its handshake (`docs/vendors.md#biren`).

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Serialize};

use super::common::{
    RequestShape, json_register, selection_constraints, selector_keys, uses_count,
};
use super::{
    Admission, Annotations, CapacityCheck, ConstraintError, DeviceConstraints, HealthRule,
    InventorySource, NodeView, Vendor,
};
use crate::codec::CodecError;
use crate::codec::selectors::SelectorKeys;
use crate::fit::check_slots;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::reason::Reason;
use crate::request::RequestError;

/// The vendor key of Biren GPUs.
pub const BIREN: &str = "Biren";
/// Node: the Biren plugin's inventory (JSON).
pub const REGISTER: &str = "hami.io/node-biren-register";
/// Node: the Biren plugin's handshake.
pub const HANDSHAKE: &str = "hami.io/node-handshake-biren";
/// Pod: devices still to hand out (the plugin should read this one).
pub const TO_ALLOCATE: &str = "hami.io/Biren-devices-to-allocate";
/// Pod: devices given at filter time.
pub const ALLOCATED: &str = "hami.io/Biren-devices-allocated";
/// Pod: allowed / forbidden models (substring) and UUIDs (exact).
pub const USE_TYPE: &str = "birentech.com/use-biren";
pub const NOUSE_TYPE: &str = "birentech.com/nouse-biren";
pub const USE_UUID: &str = "birentech.com/use-gpuuuid";
pub const NOUSE_UUID: &str = "birentech.com/nouse-gpuuuid";

/// The `biren:` section of `device-config.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct BirenConfig {
    pub resource_count_name: String,
}

impl Default for BirenConfig {
    fn default() -> Self {
        BirenConfig {
            resource_count_name: "birentech.com/gpu".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Biren {
    cfg: BirenConfig,
    keys: SelectorKeys,
}

impl Biren {
    pub fn new(cfg: BirenConfig) -> Self {
        // HAMi declares the type keys but never reads them: UUIDs only.
        Biren {
            cfg,
            keys: selector_keys(None, None, Some(USE_UUID), Some(NOUSE_UUID)),
        }
    }
}

/// Whole cards: a free slot (an idle card under `mutex`); nothing is accounted but the
/// slot, as HAMi writes no memory or cores for whole-card vendors.
pub(crate) fn whole_card(c: &CapacityCheck<'_>) -> Result<(u32, u32), Reason> {
    check_slots(c.info, c.usage, c.mutex)?;
    Ok((0, 0))
}

impl Vendor for Biren {
    fn common_word(&self) -> &str {
        BIREN
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
        RequestShape::count_only(BIREN, &self.cfg.resource_count_name).read(c)
    }

    /// The plugin registers no compute: every card counts as 100 (for scores).
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
        req.dev_type == BIREN
    }

    fn type_matches(
        &self,
        _d: &DeviceInfo,
        req: &ContainerDeviceRequest,
        _c: &DeviceConstraints,
    ) -> bool {
        req.dev_type == BIREN
    }

    fn custom_capacity(&self) -> bool {
        true
    }

    fn check_capacity(&self, c: &CapacityCheck<'_>) -> Result<(u32, u32), Reason> {
        whole_card(c)
    }

    fn mutate_admission(&self, c: &mut Container, _pod: &Annotations) -> Result<Admission, String> {
        Ok(uses_count(c, &self.cfg.resource_count_name))
    }
}
