//! Moore Threads GPUs (`Mthreads`): devices derived from the node's capacity of sGPU
//! cores (16 per GPU) and memory (512 MiB units), requests split evenly over the GPUs
//! asked for, and the `mthreads.com/*` pod annotations its device plugin reads
//! (`docs/vendors.md#moore-threads`).

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Serialize};

use super::admission::{has_limit, set_resource};
use super::common::{RequestShape, capacity_count, limit, selection_constraints, selector_keys};
use super::{
    Admission, AllocationContext, Annotations, ConstraintError, DeviceConstraints, HealthRule,
    InventorySource, NodeLockRule, NodeView, Vendor,
};
use crate::codec::CodecError;
use crate::codec::selectors::SelectorKeys;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::quota::QuotaResources;
use crate::request::{RequestError, plain_integer};

/// The vendor key of Moore Threads GPUs.
pub const MTHREADS: &str = "Mthreads";
/// Pod: devices given at filter time (the plugin reads no to-allocate key).
pub const ALLOCATED: &str = "hami.io/mthreads-vgpu-devices-allocated";
/// Pod: allowed / forbidden UUIDs (exact).
pub const USE_UUID: &str = "mthreads.ai/use-gpuuuid";
pub const NOUSE_UUID: &str = "mthreads.ai/nouse-gpuuuid";
/// Pod: indexes of the GPUs given, the node and the decision time (ns), read by the
/// Moore Threads device plugin.
pub const ASSIGNED_GPU_INDEX: &str = "mthreads.com/gpu-index";
pub const ASSIGNED_NODE: &str = "mthreads.com/predicate-node";
pub const PREDICATE_TIME: &str = "mthreads.com/predicate-time";
/// sGPU cores of one GPU.
pub const CORES_PER_GPU: u32 = 16;
/// Memory units of one GPU.
pub const MEMORY_PER_GPU: u32 = 96;
/// MiB per memory unit.
pub const MEMORY_UNIT: u32 = 512;
/// The memory sizes (units) one sGPU may ask for.
pub const LEGAL_MEMORY: [i64; 7] = [2, 4, 8, 16, 32, 64, 96];

/// The `mthreads:` section of `device-config.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MthreadsConfig {
    pub resource_count_name: String,
    pub resource_memory_name: String,
    pub resource_core_name: String,
}

impl Default for MthreadsConfig {
    fn default() -> Self {
        MthreadsConfig {
            resource_count_name: "mthreads.com/vgpu".into(),
            resource_memory_name: "mthreads.com/sgpu-memory".into(),
            resource_core_name: "mthreads.com/sgpu-core".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Mthreads {
    cfg: MthreadsConfig,
    keys: SelectorKeys,
}

impl Mthreads {
    pub fn new(cfg: MthreadsConfig) -> Self {
        Mthreads {
            cfg,
            keys: selector_keys(None, None, Some(USE_UUID), Some(NOUSE_UUID)),
        }
    }
}

impl Vendor for Mthreads {
    fn common_word(&self) -> &str {
        MTHREADS
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
        None
    }

    fn allocated_annotation(&self) -> &str {
        ALLOCATED
    }

    fn node_lock(&self) -> NodeLockRule<'_> {
        NodeLockRule::None
    }

    /// Memory (512 MiB units) and cores are for all the GPUs asked for together: each
    /// GPU gets its share.
    fn container_request(
        &self,
        c: &Container,
        _pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        let Some(mut req) = RequestShape {
            vendor: MTHREADS,
            count: &self.cfg.resource_count_name,
            count_from_limits_only: false,
            memory: Some(&self.cfg.resource_memory_name),
            memory_unit: MEMORY_UNIT,
            cores: Some(&self.cfg.resource_core_name),
            default_cores: 0,
        }
        .read(c)?
        else {
            return Ok(None);
        };
        req.mem_mib /= req.count;
        req.cores /= req.count;
        Ok(Some(req))
    }

    /// One GPU per 16 cores of capacity; each GPU's memory is its share of the memory
    /// capacity.
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
        let per_gpu = u64::from(memory) * u64::from(MEMORY_UNIT) * u64::from(CORES_PER_GPU)
            / u64::from(cores);
        let Ok(mem_mib) = u32::try_from(per_gpu) else {
            return Some(Err(CodecError::Inventory {
                what: format!("status.capacity[{}]", self.cfg.resource_memory_name),
                reason: format!("{per_gpu} MiB per GPU does not fit a 32-bit count"),
            }));
        };
        Some(Ok((0..cores.div_ceil(CORES_PER_GPU))
            .map(|i| DeviceInfo {
                id: format!("{}-mthreads-{i}", node.name).into(),
                index: i,
                count: 100,
                mem_mib,
                cores: CORES_PER_GPU,
                dev_type: MTHREADS.into(),
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
        req.dev_type == MTHREADS
    }

    fn type_matches(
        &self,
        _d: &DeviceInfo,
        req: &ContainerDeviceRequest,
        _c: &DeviceConstraints,
    ) -> bool {
        req.dev_type == MTHREADS
    }

    /// The indexes of the last container's GPUs (HAMi overwrites the key container by
    /// container), the node, and the decision time in nanoseconds.
    fn extra_annotations(&self, ctx: &AllocationContext<'_>) -> Vec<(String, String)> {
        let Some(last) = ctx.devices.iter().rfind(|c| !c.is_empty()) else {
            return Vec::new();
        };
        let indexes: Vec<String> = last.iter().map(|d| d.idx.to_string()).collect();
        vec![
            (ASSIGNED_GPU_INDEX.to_string(), indexes.join(",")),
            (
                PREDICATE_TIME.to_string(),
                ctx.now_unix.saturating_mul(1_000_000_000).to_string(),
            ),
            (ASSIGNED_NODE.to_string(), ctx.node.to_string()),
        ]
    }

    /// Several GPUs are taken whole (16 cores and 96 memory units each); one GPU without
    /// memory is taken whole; one GPU's memory must be one of the sizes the plugin cuts.
    fn mutate_admission(&self, c: &mut Container, _pod: &Annotations) -> Result<Admission, String> {
        let cfg = &self.cfg;
        let Some(count) = limit(c, &cfg.resource_count_name).map(|q| plain_integer(q).unwrap_or(0))
        else {
            return Ok(Admission::uses(false));
        };
        let whole = |c: &mut Container, n: u64| {
            set_resource(c, &cfg.resource_core_name, n * u64::from(CORES_PER_GPU));
            set_resource(c, &cfg.resource_memory_name, n * u64::from(MEMORY_PER_GPU));
        };
        if count > 1 {
            whole(c, count as u64);
        } else if !has_limit(c, &cfg.resource_memory_name) {
            whole(c, count.max(0) as u64);
        } else {
            let mem = limit(c, &cfg.resource_memory_name).and_then(plain_integer);
            if !mem.is_some_and(|m| LEGAL_MEMORY.contains(&m)) {
                return Err(format!(
                    "sGPU memory request value is invalid, valid values are {LEGAL_MEMORY:?}"
                ));
            }
        }
        Ok(Admission::uses(true))
    }
}
