//! AMD GPUs (`AMD`): the JSON register `hami.io/node-amd-register` of HAMi's AMD device
//! plugin, liveness from node capacity (no handshake), cores accounted in compute units
//! (`docs/vendors.md#amd`).

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Serialize};

use super::admission::has_limit;
use super::common::{
    MAX_I32, RequestShape, json_register, limit, selection_constraints, selector_keys,
};
use super::{
    Admission, Annotations, CapacityCheck, ConstraintError, DeviceConstraints, HealthRule,
    InventorySource, NodeView, Vendor,
};
use crate::codec::CodecError;
use crate::codec::selectors::SelectorKeys;
use crate::fit::check_slots;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::quota::QuotaResources;
use crate::reason::Reason;
use crate::request::{RequestError, plain_integer};

/// The vendor key of AMD GPUs.
pub const AMD: &str = "AMD";
/// Node: the AMD plugin's inventory (JSON).
pub const REGISTER: &str = "hami.io/node-amd-register";
/// Pod: devices still to hand out.
pub const TO_ALLOCATE: &str = "hami.io/amd-devices-to-allocate";
/// Pod: devices given at filter time.
pub const ALLOCATED: &str = "hami.io/amd-devices-allocated";
/// Pod: allowed / forbidden GPU models (substring) and UUIDs (exact).
pub const USE_TYPE: &str = "amd.com/use-gputype";
pub const NOUSE_TYPE: &str = "amd.com/nouse-gputype";
pub const USE_UUID: &str = "amd.com/use-gpu-uuid";
pub const NOUSE_UUID: &str = "amd.com/nouse-gpu-uuid";

/// The `amd:` section of `device-config.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AmdConfig {
    pub resource_count_name: String,
    pub resource_memory_name: String,
    /// Percent of each GPU's compute units (1–100, default 100).
    pub resource_core_name: String,
}

impl Default for AmdConfig {
    fn default() -> Self {
        AmdConfig {
            resource_count_name: "amd.com/gpu".into(),
            resource_memory_name: "amd.com/gpumem".into(),
            resource_core_name: "amd.com/gpucores".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Amd {
    cfg: AmdConfig,
    keys: SelectorKeys,
}

impl Amd {
    pub fn new(cfg: AmdConfig) -> Self {
        Amd {
            cfg,
            keys: selector_keys(
                Some(USE_TYPE),
                Some(NOUSE_TYPE),
                Some(USE_UUID),
                Some(NOUSE_UUID),
            ),
        }
    }

    /// The core percentage of a container (limits only, as HAMi reads it), or the
    /// refusal naming the container.
    fn core_percent(&self, c: &Container) -> Result<u32, RequestError> {
        let r = &self.cfg.resource_core_name;
        match limit(c, r) {
            None => Ok(100),
            Some(q) => match plain_integer(q) {
                Some(v @ 1..=100) => Ok(v as u32),
                _ => Err(RequestError::NotAnInteger {
                    container: c.name.clone(),
                    resource: r.clone(),
                    value: format!("{} (a percentage from 1 to 100)", q.0),
                }),
            },
        }
    }
}

impl Vendor for Amd {
    fn common_word(&self) -> &str {
        AMD
    }

    fn resource_names(&self) -> Vec<String> {
        vec![
            self.cfg.resource_count_name.clone(),
            self.cfg.resource_memory_name.clone(),
            self.cfg.resource_core_name.clone(),
        ]
    }

    fn quota_resources(&self) -> QuotaResources {
        QuotaResources::named(
            &self.cfg.resource_memory_name,
            &self.cfg.resource_core_name,
            1,
        )
    }

    fn count_resource(&self) -> &str {
        &self.cfg.resource_count_name
    }

    fn inventory_source(&self) -> InventorySource<'_> {
        InventorySource::Annotation(REGISTER)
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

    fn container_request(
        &self,
        c: &Container,
        _pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        // Count and memory from limits only, as HAMi's AMD support reads them.
        let Some(mut req) = RequestShape {
            vendor: AMD,
            count: &self.cfg.resource_count_name,
            count_from_limits_only: true,
            memory: None,
            memory_unit: 1,
            cores: None,
            default_cores: 100,
        }
        .read(c)?
        else {
            return Ok(None);
        };
        let mem = &self.cfg.resource_memory_name;
        req.mem_mib = match limit(c, mem) {
            None => 0,
            Some(q) => match plain_integer(q) {
                Some(v @ 0..=MAX_I32) => v as u32,
                _ => {
                    return Err(RequestError::NotAnInteger {
                        container: c.name.clone(),
                        resource: mem.clone(),
                        value: q.0.clone(),
                    });
                }
            },
        };
        // No percentage: memory 0 means the whole card (resolved per device).
        req.mem_percent = None;
        req.cores = self.core_percent(c)?;
        Ok(Some(req))
    }

    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        json_register(node, REGISTER)
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
        req.dev_type.eq_ignore_ascii_case(AMD) && constraints.selector.types_unconstrained()
    }

    fn type_matches(
        &self,
        device: &DeviceInfo,
        req: &ContainerDeviceRequest,
        constraints: &DeviceConstraints,
    ) -> bool {
        req.dev_type.eq_ignore_ascii_case(AMD)
            && constraints.selector.type_allowed(&device.dev_type)
    }

    fn custom_capacity(&self) -> bool {
        true
    }

    /// Slots, then memory (none asked means the whole card), then compute units: the
    /// percentage of the card's units, at least one; a whole-memory request without a
    /// percentage takes every unit. No exclusivity rule beyond that.
    fn check_capacity(&self, c: &CapacityCheck<'_>) -> Result<(u32, u32), Reason> {
        let (info, u, req) = (c.info, c.usage, c.req);
        check_slots(info, u, c.mutex)?;
        let mem = if req.mem_mib == 0 && info.mem_mib > 0 {
            info.mem_mib
        } else {
            req.mem_mib
        };
        if u64::from(info.mem_mib).saturating_sub(u.mem_used) < u64::from(mem) {
            return Err(Reason::CardInsufficientMemory);
        }
        let cores = if req.cores > 0 {
            if info.cores == 0 {
                return Err(Reason::CardInsufficientCore);
            }
            (u64::from(info.cores) * u64::from(req.cores) / 100).clamp(1, u64::from(info.cores))
                as u32
        } else if info.mem_mib > 0 && mem >= info.mem_mib {
            info.cores
        } else {
            0
        };
        if u64::from(info.cores).saturating_sub(u.cores_used) < u64::from(cores) {
            return Err(Reason::CardInsufficientCore);
        }
        Ok((mem, cores))
    }

    /// The card model, as HAMi's AMD support writes it (consumers read the model from
    /// the allocation); the vendor key when the model could not be carried.
    fn allocated_type<'a>(&self, info: &'a DeviceInfo, req: &'a ContainerDeviceRequest) -> &'a str {
        let t: &str = &info.dev_type;
        if t.is_empty() || t.contains([',', ':', ';']) {
            &req.dev_type
        } else {
            t
        }
    }

    /// A count must be a positive integer and cores a percentage from 1 to 100, with
    /// HAMi's messages.
    fn mutate_admission(&self, c: &mut Container, _pod: &Annotations) -> Result<Admission, String> {
        let cfg = &self.cfg;
        if let Some(q) = limit(c, &cfg.resource_count_name) {
            if plain_integer(q).is_none_or(|n| n < 1) {
                return Err(format!(
                    "{} must be a positive integer",
                    cfg.resource_count_name
                ));
            }
            if let Some(core) = limit(c, &cfg.resource_core_name)
                && !plain_integer(core).is_some_and(|p| (1..=100).contains(&p))
            {
                return Err(format!(
                    "{} must be an integer percentage between 1 and 100",
                    cfg.resource_core_name
                ));
            }
        }
        let uses = [
            &cfg.resource_count_name,
            &cfg.resource_memory_name,
            &cfg.resource_core_name,
        ]
        .iter()
        .any(|r| has_limit(c, r));
        Ok(Admission::uses(uses))
    }

    fn cores_in_percent(&self) -> bool {
        false
    }
}
