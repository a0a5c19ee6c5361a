//! Iluvatar (`MR-V100`, `MR-V50`, `BI-V150`, `BI-V100`, each its own vendor, switched on
//! by `--enable-iluvatar`): legacy register strings `hami.io/node-<chip>-register`, a
//! handshake per chip, memory in units of 256 MiB (`docs/vendors.md#iluvatar`).

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Serialize};

use super::admission::{default_env, has_limit, set_resource};
use super::common::{RequestShape, legacy_register, selection_constraints, selector_keys};
use super::{
    Admission, Annotations, ConstraintError, DeviceConstraints, HealthRule, InventorySource,
    NodeView, Vendor,
};
use crate::codec::CodecError;
use crate::codec::selectors::SelectorKeys;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::request::{RequestError, integer_resource};

/// MiB per unit of the memory resource.
pub const MEMORY_UNIT: u32 = 256;
/// The container name for Iluvatar's runtime, with the spelling its device plugin reads.
pub const CONTAINER_NAME_ENV: &str = "SOL_CONTINER_NAME";

/// One chip of the `iluvatars:` list of `device-config.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
pub struct IluvatarConfig {
    pub chip_name: String,
    pub common_word: String,
    pub resource_count_name: String,
    pub resource_memory_name: String,
    pub resource_core_name: String,
}

impl IluvatarConfig {
    /// The chart's four chips.
    pub fn chart_defaults() -> Vec<Self> {
        ["MR-V100", "MR-V50", "BI-V150", "BI-V100"]
            .iter()
            .map(|chip| IluvatarConfig {
                chip_name: chip.to_string(),
                common_word: chip.to_string(),
                resource_count_name: format!("iluvatar.ai/{chip}-vgpu"),
                resource_memory_name: format!("iluvatar.ai/{chip}.vMem"),
                resource_core_name: format!("iluvatar.ai/{chip}.vCore"),
            })
            .collect()
    }
}

/// One Iluvatar chip.
#[derive(Debug, Clone)]
pub struct Iluvatar {
    cfg: IluvatarConfig,
    register: String,
    handshake: String,
    to_allocate: String,
    allocated: String,
    keys: SelectorKeys,
}

impl Iluvatar {
    pub fn new(cfg: IluvatarConfig) -> Self {
        let cw = cfg.common_word.clone();
        let use_uuid = format!("hami.io/use-{cw}-uuid");
        let nouse_uuid = format!("hami.io/no-use-{cw}-uuid");
        Iluvatar {
            register: format!("hami.io/node-{cw}-register"),
            handshake: format!("hami.io/node-handshake-{cw}"),
            to_allocate: format!("hami.io/{cw}-devices-to-allocate"),
            allocated: format!("hami.io/{cw}-devices-allocated"),
            keys: selector_keys(None, None, Some(&use_uuid), Some(&nouse_uuid)),
            cfg,
        }
    }
}

impl Vendor for Iluvatar {
    fn common_word(&self) -> &str {
        &self.cfg.common_word
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
        InventorySource::Annotation(&self.register)
    }

    fn health_rule(&self) -> HealthRule<'_> {
        HealthRule::Handshake(&self.handshake)
    }

    fn to_allocate_annotation(&self) -> Option<&str> {
        Some(&self.to_allocate)
    }

    fn allocated_annotation(&self) -> &str {
        &self.allocated
    }

    fn container_request(
        &self,
        c: &Container,
        _pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        RequestShape {
            vendor: &self.cfg.common_word,
            count: &self.cfg.resource_count_name,
            count_from_limits_only: false,
            memory: Some(&self.cfg.resource_memory_name),
            memory_unit: MEMORY_UNIT,
            cores: Some(&self.cfg.resource_core_name),
            default_cores: 0,
        }
        .read(c)
    }

    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        legacy_register(node, &self.register)
    }

    fn pod_constraints(
        &self,
        pod_annotations: &Annotations,
    ) -> Result<DeviceConstraints, ConstraintError> {
        selection_constraints(pod_annotations, &self.keys)
    }

    fn accepts_any_type(&self, req: &ContainerDeviceRequest, _c: &DeviceConstraints) -> bool {
        req.dev_type == self.cfg.common_word
    }

    fn type_matches(
        &self,
        _d: &DeviceInfo,
        req: &ContainerDeviceRequest,
        _c: &DeviceConstraints,
    ) -> bool {
        req.dev_type == self.cfg.common_word
    }

    /// More than one device takes them whole: vCore becomes 100 per device (HAMi's
    /// rule; the fit clamps it to 100 per device). The runtime learns the container's
    /// name from `SOL_CONTINER_NAME` (sic).
    fn mutate_admission(&self, c: &mut Container, _pod: &Annotations) -> Result<Admission, String> {
        if !has_limit(c, &self.cfg.resource_count_name) {
            return Ok(Admission::uses(false));
        }
        let count =
            integer_resource(c, &self.cfg.resource_count_name).map_err(|e| e.to_string())?;
        if let Some(n) = count.filter(|n| *n > 1) {
            let cores = u64::try_from(n).unwrap_or(0).saturating_mul(100);
            set_resource(c, &self.cfg.resource_core_name, cores);
        }
        if !c.name.is_empty() {
            let name = c.name.clone();
            default_env(c, CONTAINER_NAME_ENV, &name);
        }
        Ok(Admission::uses(true))
    }
}
