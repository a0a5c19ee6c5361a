//! Cambricon MLU (`MLU`): devices derived from the node's capacity of the dynamic sMLU
//! resources, memory in units of 256 MiB, the `CAMBRICON_DSMLU_*` pod annotations its
//! device plugin reads and its own node lock `cambricon.com/dsmlu.lock`
//! (`docs/vendors.md#cambricon-mlu`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Serialize};

use super::common::{
    RequestShape, capacity_count, selection_constraints, selector_keys, uses_count,
};
use super::{
    Admission, AllocationContext, Annotations, ConstraintError, DeviceConstraints, HealthRule,
    InventorySource, NodeLockRule, NodeView, Vendor,
};
use crate::codec::CodecError;
use crate::codec::selectors::SelectorKeys;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::quota::QuotaResources;
use crate::request::RequestError;

/// The vendor key of Cambricon MLUs.
pub const MLU: &str = "MLU";
/// Pod: devices still to hand out.
pub const TO_ALLOCATE: &str = "hami.io/cambricon-mlu-devices-to-allocate";
/// Pod: devices given at filter time.
pub const ALLOCATED: &str = "hami.io/cambricon-mlu-devices-allocated";
/// Pod: allowed / forbidden MLU UUIDs (exact).
pub const USE_UUID: &str = "cambricon.com/use-gpuuuid";
pub const NOUSE_UUID: &str = "cambricon.com/nouse-gpuuuid";
/// Node: Cambricon's own lock (an RFC 3339 time); its device plugin removes it after
/// allocating.
pub const LOCK: &str = "cambricon.com/dsmlu.lock";
/// How long a Cambricon lock holds.
pub const LOCK_EXPIRY: Duration = Duration::from_secs(120);
/// Pod: the slice the plugin creates, `<device index>_<cores>_<memory units>`.
pub const DSMLU_PROFILE: &str = "CAMBRICON_DSMLU_PROFILE";
/// Pod: `false` until the plugin assigned the slice.
pub const DSMLU_ASSIGNED: &str = "CAMBRICON_DSMLU_ASSIGNED";
/// MiB per unit of the memory resource.
pub const MEMORY_UNIT: u32 = 256;

/// The `cambricon:` section of `device-config.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CambriconConfig {
    pub resource_count_name: String,
    pub resource_memory_name: String,
    pub resource_core_name: String,
}

impl Default for CambriconConfig {
    fn default() -> Self {
        CambriconConfig {
            resource_count_name: "cambricon.com/vmlu".into(),
            resource_memory_name: "cambricon.com/mlu.smlu.vmemory".into(),
            resource_core_name: "cambricon.com/mlu.smlu.vcore".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Cambricon {
    cfg: CambriconConfig,
    keys: SelectorKeys,
}

impl Cambricon {
    pub fn new(cfg: CambriconConfig) -> Self {
        // HAMi declares cambricon.com/use-mlutype and nouse-mlutype but never reads them
        // (every MLU registers as type `MLU`); only the UUID lists select devices.
        Cambricon {
            cfg,
            keys: selector_keys(None, None, Some(USE_UUID), Some(NOUSE_UUID)),
        }
    }
}

impl Vendor for Cambricon {
    fn common_word(&self) -> &str {
        MLU
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
        InventorySource::Capacity(&self.cfg.resource_core_name)
    }

    fn inventory_inputs(&self) -> Vec<InventorySource<'_>> {
        vec![
            InventorySource::Capacity(&self.cfg.resource_core_name),
            InventorySource::Capacity(&self.cfg.resource_memory_name),
        ]
    }

    fn health_rule(&self) -> HealthRule<'_> {
        HealthRule::Always
    }

    fn to_allocate_annotation(&self) -> Option<&str> {
        Some(TO_ALLOCATE)
    }

    fn allocated_annotation(&self) -> &str {
        ALLOCATED
    }

    fn node_lock(&self) -> NodeLockRule<'_> {
        NodeLockRule::Timestamp {
            key: LOCK,
            expiry: LOCK_EXPIRY,
        }
    }

    fn container_request(
        &self,
        c: &Container,
        _pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        RequestShape {
            vendor: MLU,
            count: &self.cfg.resource_count_name,
            count_from_limits_only: false,
            memory: Some(&self.cfg.resource_memory_name),
            memory_unit: MEMORY_UNIT,
            cores: Some(&self.cfg.resource_core_name),
            default_cores: 100,
        }
        .read(c)
    }

    /// One device per 100 units of the core capacity; each device's memory is its share
    /// of the memory capacity (in 256 MiB units).
    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        let cores = match capacity_count(node, &self.cfg.resource_core_name)? {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        let memory = match capacity_count(node, &self.cfg.resource_memory_name) {
            None => 0,
            Some(Ok(m)) => m,
            Some(Err(e)) => return Some(Err(e)),
        };
        let per_card = u64::from(memory) * u64::from(MEMORY_UNIT) * 100 / u64::from(cores);
        let Ok(mem_mib) = u32::try_from(per_card) else {
            return Some(Err(CodecError::Inventory {
                what: format!("status.capacity[{}]", self.cfg.resource_memory_name),
                reason: format!("{per_card} MiB per MLU does not fit a 32-bit count"),
            }));
        };
        let cards = cores.div_ceil(100);
        Some(Ok((0..cards)
            .map(|i| DeviceInfo {
                id: format!("{}-cambricon-mlu-{i}", node.name).into(),
                index: i,
                count: 100,
                mem_mib,
                cores: 100,
                dev_type: MLU.into(),
                health: true,
                ..DeviceInfo::default()
            })
            .collect()))
    }

    fn pod_constraints(
        &self,
        pod_annotations: &Annotations,
    ) -> Result<DeviceConstraints, ConstraintError> {
        selection_constraints(pod_annotations, &self.keys)
    }

    fn accepts_any_type(&self, req: &ContainerDeviceRequest, _c: &DeviceConstraints) -> bool {
        req.dev_type == MLU
    }

    fn type_matches(
        &self,
        _d: &DeviceInfo,
        req: &ContainerDeviceRequest,
        _c: &DeviceConstraints,
    ) -> bool {
        req.dev_type == MLU
    }

    /// The slice of the first device given (HAMi takes the first container's; a pod
    /// whose first container asks for no MLU would crash HAMi, here the first
    /// container with a device counts).
    fn extra_annotations(&self, ctx: &AllocationContext<'_>) -> Vec<(String, String)> {
        let Some(first) = ctx.devices.iter().flatten().next() else {
            return Vec::new();
        };
        vec![
            (DSMLU_ASSIGNED.to_string(), "false".to_string()),
            (
                DSMLU_PROFILE.to_string(),
                format!(
                    "{}_{}_{}",
                    first.idx,
                    first.cores,
                    first.mem_mib / MEMORY_UNIT
                ),
            ),
        ]
    }

    fn mutate_admission(&self, c: &mut Container, _pod: &Annotations) -> Result<Admission, String> {
        Ok(uses_count(c, &self.cfg.resource_count_name))
    }
}
