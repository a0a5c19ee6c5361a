//! Metax GPUs, two families sharing the `metax:` section (`docs/vendors.md#metax`):
//! whole GPUs (`Metax-GPU`) derived from node capacity, and shared sGPUs
//! (`Metax-SGPU`) from the annotation `metax-tech.com/node-gpu-devices` its device plugin
//! writes, with the QoS policy and app class a pod may ask for.

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Serialize};

use super::admission::has_limit;
use super::common::{
    MAX_I32, bounded, capacity_count, capacity_device, limit, selection_constraints, selector_keys,
    uses_count,
};
use super::{
    Admission, AllocationContext, Annotations, CapacityCheck, ConstraintError, DeviceConstraints,
    HealthRule, InventorySource, NodeView, Vendor,
};
use crate::codec::CodecError;
use crate::codec::selectors::SelectorKeys;
use crate::fit::{check_resources, check_slots};
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::quota::QuotaResources;
use crate::reason::Reason;
use crate::request::{RequestError, plain_integer};

/// The vendor key of whole Metax GPUs.
pub const METAX_GPU: &str = "Metax-GPU";
/// The vendor key of Metax sGPUs.
pub const METAX_SGPU: &str = "Metax-SGPU";
/// Pod: whole GPUs still to hand out / given.
pub const GPU_TO_ALLOCATE: &str = "hami.io/metax-gpu-devices-to-allocate";
pub const GPU_ALLOCATED: &str = "hami.io/metax-gpu-devices-allocated";
/// Pod: sGPUs still to hand out / given.
pub const SGPU_TO_ALLOCATE: &str = "hami.io/metax-sgpu-devices-to-allocate";
pub const SGPU_ALLOCATED: &str = "hami.io/metax-sgpu-devices-allocated";
/// Node: the sGPU plugin's inventory (its own JSON).
pub const SGPU_REGISTER: &str = "metax-tech.com/node-gpu-devices";
/// Pod: the sGPU allocation in the Metax plugin's form, and the decision time (ns).
pub const SGPU_DEVICES_ALLOCATED: &str = "metax-tech.com/gpu-devices-allocated";
pub const SGPU_PREDICATE_TIME: &str = "metax-tech.com/predicate-time";
/// Pod: allowed / forbidden sGPU UUIDs (exact).
pub const USE_UUID: &str = "metax-tech.com/use-gpuuuid";
pub const NOUSE_UUID: &str = "metax-tech.com/nouse-gpuuuid";
/// Pod: `best-effort` (default), `fixed-share` or `burst-share`.
pub const QOS_POLICY: &str = "metax-tech.com/sgpu-qos-policy";
/// Pod: `online` or `offline`.
pub const APP_CLASS: &str = "metax-tech.com/sgpu-app-class";
/// Pod: keep exclusive sGPUs within one MetaLink zone.
pub const TOPOLOGY_AWARE: &str = "metax-tech.com/sgpu-topology-aware";
/// The QoS policies a pod may ask for.
pub const QOS_POLICIES: [&str; 3] = ["best-effort", "fixed-share", "burst-share"];
/// The default QoS policy.
pub const BEST_EFFORT: &str = "best-effort";
/// The app classes a pod may ask for.
pub const ONLINE: &str = "online";
pub const OFFLINE: &str = "offline";
/// `custominfo` keys of an sGPU.
pub const QOS_KEY: &str = "QosPolicy";
pub const MODEL_KEY: &str = "Model";
pub const LINK_ZONE_KEY: &str = "LinkZone";
/// MiB of a whole Metax GPU (its plugin registers no inventory).
pub const GPU_MEMORY: u32 = 65536;

/// The `metax:` section of `device-config.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MetaxConfig {
    /// Whole GPUs.
    pub resource_count_name: String,
    /// sGPUs.
    pub resource_v_count_name: String,
    /// sGPU memory: a bare number is GiB, a number with a unit is bytes.
    pub resource_v_memory_name: String,
    /// sGPU compute in percent.
    pub resource_v_core_name: String,
    pub sgpu_topology_aware: bool,
}

impl Default for MetaxConfig {
    fn default() -> Self {
        MetaxConfig {
            resource_count_name: "metax-tech.com/gpu".into(),
            resource_v_count_name: "metax-tech.com/sgpu".into(),
            resource_v_memory_name: "metax-tech.com/vmemory".into(),
            resource_v_core_name: "metax-tech.com/vcore".into(),
            sgpu_topology_aware: false,
        }
    }
}

/// Whole Metax GPUs.
#[derive(Debug, Clone)]
pub struct MetaxGpu {
    cfg: MetaxConfig,
}

impl MetaxGpu {
    pub fn new(cfg: MetaxConfig) -> Self {
        MetaxGpu { cfg }
    }
}

impl Vendor for MetaxGpu {
    fn common_word(&self) -> &str {
        METAX_GPU
    }

    fn resource_names(&self) -> Vec<String> {
        vec![self.cfg.resource_count_name.clone()]
    }

    fn count_resource(&self) -> &str {
        &self.cfg.resource_count_name
    }

    fn inventory_source(&self) -> InventorySource<'_> {
        InventorySource::Capacity(&self.cfg.resource_count_name)
    }

    fn health_rule(&self) -> HealthRule<'_> {
        HealthRule::Capacity
    }

    fn to_allocate_annotation(&self) -> Option<&str> {
        Some(GPU_TO_ALLOCATE)
    }

    fn allocated_annotation(&self) -> &str {
        GPU_ALLOCATED
    }

    /// Whole GPUs: all memory and compute of each.
    fn container_request(
        &self,
        c: &Container,
        _pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        let shape = super::common::RequestShape {
            default_cores: 100,
            ..super::common::RequestShape::count_only(METAX_GPU, &self.cfg.resource_count_name)
        };
        shape.read(c)
    }

    /// One 64 GiB GPU per unit of capacity (the plugin says no more).
    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        let count = match capacity_count(node, &self.cfg.resource_count_name)? {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        Some(Ok((0..count)
            .map(|i| capacity_device(node.name, "metax", i, GPU_MEMORY, METAX_GPU))
            .collect()))
    }

    fn pod_constraints(
        &self,
        _pod_annotations: &Annotations,
    ) -> Result<DeviceConstraints, ConstraintError> {
        Ok(DeviceConstraints::default())
    }

    fn accepts_any_type(&self, req: &ContainerDeviceRequest, _c: &DeviceConstraints) -> bool {
        req.dev_type == METAX_GPU
    }

    fn type_matches(
        &self,
        _d: &DeviceInfo,
        req: &ContainerDeviceRequest,
        _c: &DeviceConstraints,
    ) -> bool {
        req.dev_type == METAX_GPU
    }

    fn mutate_admission(&self, c: &mut Container, _pod: &Annotations) -> Result<Admission, String> {
        Ok(uses_count(c, &self.cfg.resource_count_name))
    }
}

/// Metax sGPUs.
#[derive(Debug, Clone)]
pub struct MetaxSgpu {
    cfg: MetaxConfig,
    keys: SelectorKeys,
}

impl MetaxSgpu {
    pub fn new(cfg: MetaxConfig) -> Self {
        MetaxSgpu {
            cfg,
            keys: selector_keys(None, None, Some(USE_UUID), Some(NOUSE_UUID)),
        }
    }

    /// The sGPU memory request in MiB: a bare number is GiB, a number with a unit is
    /// bytes (HAMi's rule: `16G` is 15258 MiB, `16` is 16384 MiB).
    fn memory(&self, c: &Container) -> Result<u32, RequestError> {
        let r = &self.cfg.resource_v_memory_name;
        let Some(q) = limit(c, r) else {
            return Ok(0);
        };
        let text = q.0.trim();
        let bad = || RequestError::NotAnInteger {
            container: c.name.clone(),
            resource: r.clone(),
            value: q.0.clone(),
        };
        if let Some(gib) = plain_integer(q) {
            return bounded(c, r, gib, MAX_I32 / 1024).map(|g| g * 1024);
        }
        let bytes = parse_bytes(text).ok_or_else(bad)?;
        bounded(c, r, bytes / 1024 / 1024, MAX_I32)
    }
}

/// A quantity with a unit as bytes (`16G`, `16Gi`, `512Mi`, `1k`); `None` for anything
/// else.
fn parse_bytes(text: &str) -> Option<i64> {
    let split = text.find(|ch: char| !ch.is_ascii_digit())?;
    let (digits, unit) = text.split_at(split);
    let n: i64 = digits.parse().ok()?;
    let mult: i64 = match unit {
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// The sGPU inventory as its plugin writes it.
fn decode_sgpus(value: &str) -> Result<Vec<DeviceInfo>, CodecError> {
    let bad = |reason: String| CodecError::Inventory {
        what: SGPU_REGISTER.to_string(),
        reason,
    };
    let items: Vec<serde_json::Value> = match serde_json::from_str(value) {
        Ok(serde_json::Value::Array(items)) => items,
        Ok(serde_json::Value::Null) => Vec::new(),
        Ok(other) => return Err(bad(format!("expected a JSON array, found {other}"))),
        Err(e) => return Err(bad(format!("not JSON: {e}"))),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let field = |k: &str| item.get(k).filter(|v| !v.is_null());
            let num = |k: &str| -> Result<u32, CodecError> {
                match field(k) {
                    None => Ok(0),
                    Some(v) => v
                        .as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| bad(format!("entry {i}: {k} is not a count: {v}"))),
                }
            };
            let text = |k: &str| {
                field(k)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            let uuid = text("uuid");
            if uuid.is_empty() {
                return Err(bad(format!("entry {i} has no uuid")));
            }
            let mut d = DeviceInfo {
                id: uuid.into(),
                index: i as u32,
                count: num("totalDevCount")?,
                mem_mib: num("totalVRam")?,
                cores: num("totalCompute")?,
                dev_type: METAX_SGPU.into(),
                numa: field("numa").and_then(|v| v.as_i64()).unwrap_or(0) as i32,
                health: field("healthy").and_then(|v| v.as_bool()).unwrap_or(false),
                ..DeviceInfo::default()
            };
            d.custom_info
                .insert(QOS_KEY.into(), text("qosPolicy").into());
            d.custom_info.insert(MODEL_KEY.into(), text("model").into());
            let zone = field("linkZone").and_then(|v| v.as_i64()).unwrap_or(0);
            d.custom_info.insert(LINK_ZONE_KEY.into(), zone.into());
            Ok(d)
        })
        .collect()
}

impl Vendor for MetaxSgpu {
    fn common_word(&self) -> &str {
        METAX_SGPU
    }

    fn resource_names(&self) -> Vec<String> {
        vec![
            self.cfg.resource_v_count_name.clone(),
            self.cfg.resource_v_memory_name.clone(),
            self.cfg.resource_v_core_name.clone(),
        ]
    }

    fn quota_resources(&self) -> QuotaResources {
        QuotaResources::named(
            &self.cfg.resource_v_memory_name,
            &self.cfg.resource_v_core_name,
            1,
        )
    }

    fn count_resource(&self) -> &str {
        &self.cfg.resource_v_count_name
    }

    fn inventory_source(&self) -> InventorySource<'_> {
        InventorySource::Annotation(SGPU_REGISTER)
    }

    /// HAMi counts the node alive while the annotation lists devices.
    fn health_rule(&self) -> HealthRule<'_> {
        HealthRule::Always
    }

    fn to_allocate_annotation(&self) -> Option<&str> {
        Some(SGPU_TO_ALLOCATE)
    }

    fn allocated_annotation(&self) -> &str {
        SGPU_ALLOCATED
    }

    /// Count, memory and cores from limits only (default: whole memory, 100 cores).
    fn container_request(
        &self,
        c: &Container,
        _pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        let Some(q) = limit(c, &self.cfg.resource_v_count_name) else {
            return Ok(None);
        };
        let count = plain_integer(q).ok_or_else(|| RequestError::NotAnInteger {
            container: c.name.clone(),
            resource: self.cfg.resource_v_count_name.clone(),
            value: q.0.clone(),
        })?;
        if count <= 0 {
            return Ok(None);
        }
        let count = bounded(c, &self.cfg.resource_v_count_name, count, MAX_I32)?;
        let cores = match limit(c, &self.cfg.resource_v_core_name) {
            None => 100,
            Some(q) => match plain_integer(q) {
                Some(v) => bounded(c, &self.cfg.resource_v_core_name, v, MAX_I32)?,
                None => {
                    return Err(RequestError::NotAnInteger {
                        container: c.name.clone(),
                        resource: self.cfg.resource_v_core_name.clone(),
                        value: q.0.clone(),
                    });
                }
            },
        };
        let mem_mib = self.memory(c)?;
        Ok(Some(ContainerDeviceRequest {
            count,
            dev_type: METAX_SGPU.to_string(),
            mem_mib,
            mem_percent: (mem_mib == 0).then_some(100),
            cores,
        }))
    }

    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        node.annotations.get(SGPU_REGISTER).map(|v| decode_sgpus(v))
    }

    fn pod_constraints(
        &self,
        pod_annotations: &Annotations,
    ) -> Result<DeviceConstraints, ConstraintError> {
        let mut c = selection_constraints(pod_annotations, &self.keys)?;
        for key in [QOS_POLICY, APP_CLASS, TOPOLOGY_AWARE] {
            if let Some(v) = pod_annotations.get(key) {
                c.options.insert(key.to_string(), v.trim().to_string());
            }
        }
        Ok(c)
    }

    fn accepts_any_type(&self, req: &ContainerDeviceRequest, _c: &DeviceConstraints) -> bool {
        req.dev_type == METAX_SGPU
    }

    fn type_matches(
        &self,
        _d: &DeviceInfo,
        req: &ContainerDeviceRequest,
        _c: &DeviceConstraints,
    ) -> bool {
        req.dev_type == METAX_SGPU
    }

    fn custom_capacity(&self) -> bool {
        true
    }

    /// A device in use keeps its QoS policy (`CardNotFoundCustomFilterRule` for another
    /// one, unless the request takes the device whole); then HAMi's checks, without
    /// clamping cores; an online pod asks no compute of its own.
    fn check_capacity(&self, c: &CapacityCheck<'_>) -> Result<(u32, u32), Reason> {
        let (info, u, req) = (c.info, c.usage, c.req);
        let online = c.constraints.option(APP_CLASS) == Some(ONLINE);
        if !online && u.used > 0 && req.cores != 100 {
            let want = c.constraints.option(QOS_POLICY).unwrap_or(BEST_EFFORT);
            let have = info.custom_str(QOS_KEY).unwrap_or_default();
            if !have.is_empty() && have != want {
                return Err(Reason::CardNotFoundCustomFilterRule);
            }
        }
        check_slots(info, u, c.mutex)?;
        let mem = req.memory_on(info.mem_mib);
        if online {
            if u64::from(info.mem_mib).saturating_sub(u.mem_used) < u64::from(mem) {
                return Err(Reason::CardInsufficientMemory);
            }
            return Ok((mem, 0));
        }
        check_resources(info, u, mem, req.cores)?;
        Ok((mem, req.cores))
    }

    fn allocated_type<'a>(
        &self,
        info: &'a DeviceInfo,
        _req: &'a ContainerDeviceRequest,
    ) -> &'a str {
        &info.dev_type
    }

    /// The allocation in the Metax plugin's form (`[[{"uuid","compute","vRam"}]]` per
    /// container) and the decision time in nanoseconds.
    fn extra_annotations(&self, ctx: &AllocationContext<'_>) -> Vec<(String, String)> {
        // Written by hand in the plugin's field order (uuid, compute, vRam; zero values
        // left out as Go's omitempty does).
        let container = |devs: &Vec<crate::model::ContainerDevice>| {
            let items: Vec<String> = devs
                .iter()
                .map(|d| {
                    let mut fields = vec![format!(
                        "\"uuid\":{}",
                        serde_json::Value::from(d.uuid.as_str())
                    )];
                    if d.cores != 0 {
                        fields.push(format!("\"compute\":{}", d.cores));
                    }
                    if d.mem_mib != 0 {
                        fields.push(format!("\"vRam\":{}", d.mem_mib));
                    }
                    format!("{{{}}}", fields.join(","))
                })
                .collect();
            format!("[{}]", items.join(","))
        };
        let body: Vec<String> = ctx.devices.iter().map(container).collect();
        vec![
            (
                SGPU_DEVICES_ALLOCATED.to_string(),
                format!("[{}]", body.join(",")),
            ),
            (
                SGPU_PREDICATE_TIME.to_string(),
                ctx.now_unix.saturating_mul(1_000_000_000).to_string(),
            ),
        ]
    }

    /// App class `online` or `offline`, a single device; a QoS policy among HAMi's
    /// three (HAMi then writes `best-effort` for pods that name none).
    fn mutate_admission(&self, c: &mut Container, pod: &Annotations) -> Result<Admission, String> {
        if !has_limit(c, &self.cfg.resource_v_count_name) {
            return Ok(Admission::uses(false));
        }
        let app_class = pod.get(APP_CLASS).map(String::as_str);
        if let Some(class) = app_class {
            if class != ONLINE && class != OFFLINE {
                return Err(format!(
                    "{APP_CLASS} must be set one of [{ONLINE}, {OFFLINE}]"
                ));
            }
            let count = limit(c, &self.cfg.resource_v_count_name).and_then(plain_integer);
            if count != Some(1) {
                return Err("app-class pod must request single device".to_string());
            }
        }
        if app_class != Some(ONLINE)
            && let Some(qos) = pod.get(QOS_POLICY)
            && !QOS_POLICIES.contains(&qos.as_str())
        {
            return Err(format!(
                "{QOS_POLICY} must be set one of [{}]",
                QOS_POLICIES.join(", ")
            ));
        }
        Ok(Admission::uses(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgpu_memory_units_follow_hami() {
        assert_eq!(parse_bytes("16G"), Some(16_000_000_000));
        assert_eq!(parse_bytes("16Gi"), Some(16 << 30));
        assert_eq!(parse_bytes("16"), None);
        assert_eq!(parse_bytes("G"), None);
        assert_eq!(parse_bytes("16Q"), None);
    }
}
