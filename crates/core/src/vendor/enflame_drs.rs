//! Enflame DRS (`docs/vendors.md#enflame-drs`): GCUs cut into hardware slices by profile
//! (`1g.6gb`, `3g.20gb`, …), HAMi's `Enflame` family. The device plugin registers the
//! GCUs and the node's profile menu in `enflame.com/gcu-drs-capacity`; a container asks
//! for a profile by its slice count (`enflame.com/drs-gcu`) or by memory and compute
//! (`enflame.com/gcu-memory`, `enflame.com/gcu-core`), and takes one GCU's slices for it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use super::common::{MAX_I32, bounded, selection_constraints, selector_keys};
use super::enflame::EnflameConfig;
use super::{
    Admission, AllocationContext, Annotations, CapacityCheck, ConstraintError, DeviceConstraints,
    HealthRule, InventorySource, NodeLockRule, NodeView, Vendor,
};
use crate::codec::CodecError;
use crate::codec::selectors::SelectorKeys;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::quota::QuotaResources;
use crate::reason::Reason;
use crate::request::{RequestError, integer_resource, resource_quantity};

/// The vendor key (HAMi's `Enflame`).
pub const ENFLAME: &str = "Enflame";
/// Pod: the slices given (no to-allocate key: the plugin reads this one).
pub const ALLOCATED: &str = "hami.io/enflame-vgpu-devices-allocated";
/// Node: the GCUs and the profile menu, written by Enflame's DRS device plugin.
pub const DRS_CAPACITY: &str = "enflame.com/gcu-drs-capacity";
/// Pod: `"false"` until the device plugin has created the slice.
pub const ASSIGNED: &str = "enflame.com/gcu-assigned";
/// Pod: decision time, Unix nanoseconds.
pub const ASSIGNED_TIME: &str = "enflame.com/gcu-assigned-time";
/// Pod: the GCU's index (both keys), minor number and the slice count, of the first
/// container given a slice.
pub const ASSIGNED_ID: &str = "enflame.com/gcu-assigned-id";
pub const ASSIGNED_INDEX: &str = "enflame.com/gcu-assigned-index";
pub const ASSIGNED_MINOR: &str = "enflame.com/gcu-assigned-minor";
pub const REQUEST_SIZE: &str = "enflame.com/gcu-request-size";
/// Pod: per container name `{"allocated","request","profileID","profileName"}`.
pub const ASSIGNED_CONTAINERS: &str = "assigned-containers";
/// Pod selection keys.
pub const USE_UUID: &str = "enflame.com/use-gpuuuid";
pub const NOUSE_UUID: &str = "enflame.com/nouse-gpuuuid";

/// The chart's names, used where the `enflame:` section leaves a DRS name empty.
const DEFAULT_DRS: &str = "enflame.com/drs-gcu";
const DEFAULT_MEMORY: &str = "enflame.com/gcu-memory";
const DEFAULT_CORE: &str = "enflame.com/gcu-core";

/// A request by slice count carries this `mem_percent` (HAMi's `MemPercentagereq` 0);
/// a request by memory and compute carries none (HAMi's -1).
const BY_SLICES: Option<u32> = Some(0);

/// One profile of the node's menu, as the fit prices it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: String,
    pub id: String,
    /// Slices it takes.
    pub size: u32,
    pub memory_gb: u32,
    /// Its share of the GCU's compute, `size × 100 / largest size` rounded down.
    pub core_percent: u32,
}

impl Profile {
    pub fn memory_mib(&self) -> u32 {
        self.memory_gb * 1024
    }
}

/// A profile name's slices and GiB (`3g.20gb` → (3, 20)); (size, 0) when the memory part
/// is unreadable, `None` without a readable size.
pub fn parse_profile(name: &str) -> Option<(u32, u32)> {
    let name = name.trim().to_ascii_lowercase();
    let mut parts = name.split('.');
    let size_part = parts.next()?.trim();
    let mem_part = parts.next()?.trim();
    let size_part = size_part.strip_suffix('g').unwrap_or(size_part);
    let size: u32 = size_part.parse().ok()?;
    let mem_part = mem_part.strip_suffix("gb").unwrap_or(mem_part);
    Some((size, mem_part.parse().unwrap_or(0)))
}

/// The profile menu a device carries (`custominfo.profiles`), usable entries sorted by
/// slices then memory. Profiles without slices or memory, or too large for HAMi's int32
/// MiB, are left out.
pub fn profiles_of(device: &DeviceInfo) -> Vec<Profile> {
    let Some(menu) = device
        .custom_info
        .get("profiles")
        .and_then(serde_json::Value::as_object)
    else {
        return Vec::new();
    };
    let parsed: Vec<(&String, &str, u32, u32)> = menu
        .iter()
        .filter_map(|(name, id)| {
            let (size, mem) = parse_profile(name)?;
            Some((name, id.as_str()?, size, mem))
        })
        .collect();
    let max_slice = parsed.iter().map(|p| p.2).max().unwrap_or(0);
    let mut out: Vec<Profile> = parsed
        .into_iter()
        .filter(|&(_, _, size, mem)| {
            size > 0
                && i64::from(size) <= MAX_I32
                && mem > 0
                && u64::from(mem) * 1024 <= MAX_I32 as u64
        })
        .map(|(name, id, size, memory_gb)| Profile {
            name: name.clone(),
            id: id.to_string(),
            size,
            memory_gb,
            core_percent: (u64::from(size) * 100 / u64::from(max_slice)).max(1) as u32,
        })
        .collect();
    out.sort_by_key(|p| (p.size, p.memory_gb));
    out
}

/// The profile a request gets from `menu` (sorted as [`profiles_of`] gives it): by slice
/// count the profile of exactly that many slices; by memory and compute the smallest
/// holding both. Memory is read in GiB, or in MiB (rounded up to GiB) when it is above
/// twice the memory of the largest profile, as HAMi reads it.
pub fn select_profile<'a>(
    menu: &'a [Profile],
    req: &ContainerDeviceRequest,
) -> Option<&'a Profile> {
    if req.mem_percent == BY_SLICES {
        return menu.iter().find(|p| p.size == req.mem_mib);
    }
    let largest_gb = menu.last()?.memory_gb;
    let mem_gb = if req.mem_mib > largest_gb.saturating_mul(2) {
        req.mem_mib.div_ceil(1024)
    } else {
        req.mem_mib
    };
    menu.iter().find(|p| {
        (mem_gb == 0 || p.memory_gb >= mem_gb) && (req.cores == 0 || p.core_percent >= req.cores)
    })
}

/// The `enflame.com/gcu-drs-capacity` JSON.
#[derive(Debug, Deserialize)]
struct DrsCapacity {
    #[serde(default)]
    devices: Vec<DrsDevice>,
    #[serde(default)]
    profiles: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct DrsDevice {
    #[serde(default)]
    index: String,
    #[serde(default)]
    minor: String,
    #[serde(default)]
    capacity: serde_json::Value,
}

/// A device's slice count: a JSON number or a numeric string, above 0 and within int32.
fn slice_capacity(v: &serde_json::Value) -> Option<u32> {
    let n = match v {
        serde_json::Value::Number(n) => n.as_f64().filter(|f| f.is_finite())?.trunc() as i64,
        serde_json::Value::String(s) => s.trim().parse::<i64>().ok()?,
        _ => return None,
    };
    u32::try_from(n)
        .ok()
        .filter(|&n| n > 0 && i64::from(n) <= MAX_I32)
}

/// Decodes the node's DRS capacity into one device per GCU: id `<node>-enflame-drs-<i>`,
/// as many slots as slices, the largest profile's memory, 100 cores, and the menu, the
/// GCU's index and minor number in `custominfo`.
pub fn decode_drs_capacity(node: &str, value: &str) -> Result<Vec<DeviceInfo>, CodecError> {
    let spec: DrsCapacity = serde_json::from_str(value).map_err(|e| CodecError::Json {
        what: "Enflame DRS capacity",
        reason: e.to_string(),
        input: value.to_string(),
    })?;
    let bad = |reason: String| CodecError::Inventory {
        what: format!("{DRS_CAPACITY} of node {node}"),
        reason,
    };
    let sizes: Vec<(u32, u32)> = spec
        .profiles
        .keys()
        .filter_map(|p| parse_profile(p))
        .collect();
    let max_slice = sizes.iter().map(|s| s.0).max().unwrap_or(0);
    let max_mem_gb = match sizes.iter().map(|s| s.1).max().unwrap_or(0) {
        0 => max_slice,
        gb => gb,
    };
    if max_slice == 0 {
        return Err(bad(format!(
            "no valid drs profiles in {:?}",
            spec.profiles.keys().collect::<Vec<_>>()
        )));
    }
    let mem_mib = u32::try_from(u64::from(max_mem_gb) * 1024)
        .ok()
        .filter(|m| i64::from(*m) <= MAX_I32)
        .ok_or_else(|| bad(format!("profile memory {max_mem_gb} GiB is too large")))?;
    if spec.devices.is_empty() {
        return Err(bad("no drs devices".into()));
    }
    let profiles: serde_json::Map<String, serde_json::Value> = spec
        .profiles
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let mut out: Vec<DeviceInfo> = Vec::with_capacity(spec.devices.len());
    for (pos, d) in spec.devices.iter().enumerate() {
        // HAMi takes the device's position when its index is not a number.
        let index = d.index.trim().parse::<u32>().unwrap_or(pos as u32);
        let count = slice_capacity(&d.capacity)
            .ok_or_else(|| bad(format!("device {index}: invalid capacity {}", d.capacity)))?;
        if out.iter().any(|o| o.index == index) {
            return Err(bad(format!("device index {index} appears twice")));
        }
        let minor = match d.minor.trim() {
            "" => index.to_string(),
            m => m.to_string(),
        };
        let custom_info = BTreeMap::from([
            ("minor".to_string(), serde_json::Value::String(minor)),
            (
                "index".to_string(),
                serde_json::Value::String(index.to_string()),
            ),
            (
                "profiles".to_string(),
                serde_json::Value::Object(profiles.clone()),
            ),
            ("maxSlice".to_string(), serde_json::Value::from(max_slice)),
        ]);
        out.push(DeviceInfo {
            id: format!("{node}-enflame-drs-{index}").into(),
            index,
            count,
            mem_mib,
            cores: 100,
            dev_type: ENFLAME.into(),
            health: true,
            custom_info,
            ..DeviceInfo::default()
        });
    }
    Ok(out)
}

/// One container's entry in `assigned-containers`.
#[derive(Debug, Serialize)]
struct AssignedContainer<'a> {
    allocated: bool,
    request: u32,
    #[serde(rename = "profileID", skip_serializing_if = "str::is_empty")]
    profile_id: &'a str,
    #[serde(rename = "profileName", skip_serializing_if = "str::is_empty")]
    profile_name: &'a str,
}

/// Enflame DRS slices.
#[derive(Debug, Clone)]
pub struct EnflameDrs {
    count: String,
    memory: String,
    core: String,
}

impl EnflameDrs {
    /// The DRS resource names of the `enflame:` section; an empty DRS name falls back to
    /// the legacy `resourceNameVGCU`, then to the chart's name, as HAMi does.
    pub fn new(cfg: &EnflameConfig) -> Self {
        let or = |name: &str, default: &str| match name.trim() {
            "" => default.to_string(),
            n => n.to_string(),
        };
        EnflameDrs {
            count: or(
                &cfg.resource_name_drs_gcu,
                &or(&cfg.resource_name_vgcu, DEFAULT_DRS),
            ),
            memory: or(&cfg.resource_name_gcu_memory, DEFAULT_MEMORY),
            core: or(&cfg.resource_name_gcu_core, DEFAULT_CORE),
        }
    }

    fn keys() -> SelectorKeys {
        selector_keys(None, None, Some(USE_UUID), Some(NOUSE_UUID))
    }
}

/// Fills `resource` into whichever of limits and requests lacks it.
fn mirror(c: &mut Container, resource: &str, q: &Quantity) {
    let r = c.resources.get_or_insert_with(Default::default);
    for list in [&mut r.limits, &mut r.requests] {
        list.get_or_insert_with(Default::default)
            .entry(resource.to_string())
            .or_insert_with(|| q.clone());
    }
}

impl Vendor for EnflameDrs {
    fn common_word(&self) -> &str {
        ENFLAME
    }

    fn resource_names(&self) -> Vec<String> {
        vec![self.count.clone(), self.memory.clone(), self.core.clone()]
    }

    fn count_resource(&self) -> &str {
        &self.count
    }

    fn inventory_source(&self) -> InventorySource<'_> {
        InventorySource::Annotation(DRS_CAPACITY)
    }

    /// HAMi judges the DRS plugin always alive; its capacity annotation is the signal.
    fn health_rule(&self) -> HealthRule<'_> {
        HealthRule::Always
    }

    fn to_allocate_annotation(&self) -> Option<&str> {
        None
    }

    fn allocated_annotation(&self) -> &str {
        ALLOCATED
    }

    /// Its device plugin does not look for the pod through a node lock.
    fn node_lock(&self) -> NodeLockRule<'_> {
        NodeLockRule::None
    }

    fn quota_resources(&self) -> QuotaResources {
        QuotaResources::named(&self.memory, &self.core, 1)
    }

    /// One GCU per container: by slice count when `drs-gcu` is positive, else by memory
    /// and compute.
    fn container_request(
        &self,
        c: &Container,
        _pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        let req = |mem_mib, mem_percent, cores| ContainerDeviceRequest {
            count: 1,
            dev_type: ENFLAME.to_string(),
            mem_mib,
            mem_percent,
            cores,
        };
        if let Some(n) = integer_resource(c, &self.count)?
            && n > 0
        {
            return Ok(Some(req(
                bounded(c, &self.count, n, MAX_I32)?,
                BY_SLICES,
                0,
            )));
        }
        let mem = integer_resource(c, &self.memory)?;
        let core = integer_resource(c, &self.core)?;
        if mem.is_none() && core.is_none() {
            return Ok(None);
        }
        let mem = mem.map_or(Ok(0), |m| bounded(c, &self.memory, m, MAX_I32))?;
        // Compute is a percent of one GCU (HAMi drops a request above 100).
        let core = core.map_or(Ok(0), |v| bounded(c, &self.core, v, 100))?;
        Ok(Some(req(mem, None, core)))
    }

    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        let value = node.annotations.get(DRS_CAPACITY)?;
        Some(decode_drs_capacity(node.name, value))
    }

    fn pod_constraints(
        &self,
        pod_annotations: &Annotations,
    ) -> Result<DeviceConstraints, ConstraintError> {
        selection_constraints(pod_annotations, &Self::keys())
    }

    fn accepts_any_type(&self, req: &ContainerDeviceRequest, _c: &DeviceConstraints) -> bool {
        req.dev_type == ENFLAME
    }

    fn type_matches(
        &self,
        _d: &DeviceInfo,
        req: &ContainerDeviceRequest,
        _c: &DeviceConstraints,
    ) -> bool {
        req.dev_type == ENFLAME
    }

    fn checks_node(&self) -> bool {
        true
    }

    /// No profile of the node's menu serves the request: `ModeNotFit`.
    fn check_node(
        &self,
        devices: &[DeviceInfo],
        req: &ContainerDeviceRequest,
        _constraints: &DeviceConstraints,
    ) -> Result<(), Reason> {
        let mut menu: Vec<Profile> = devices.iter().flat_map(profiles_of).collect();
        menu.sort_by_key(|p| (p.size, p.memory_gb));
        match select_profile(&menu, req) {
            Some(_) => Ok(()),
            None => Err(Reason::ModeNotFit),
        }
    }

    fn custom_capacity(&self) -> bool {
        true
    }

    /// The profile's slices must all be free (`CardTimeSlicingExhausted`), the GCU idle
    /// under `mutex` (`ExclusiveDeviceAllocateConflict`), its memory and compute free
    /// (`CardInsufficientMemory`, `CardInsufficientCore`); the container takes the
    /// profile's memory and compute.
    fn check_capacity(&self, c: &CapacityCheck<'_>) -> Result<(u32, u32), Reason> {
        let menu = profiles_of(c.info);
        let p = select_profile(&menu, c.req).ok_or(Reason::ModeNotFit)?;
        // HAMi's order: no slice left, then `mutex`, then too few slices left for the
        // whole profile (the check HAMi added after v2.10).
        crate::fit::check_slots(c.info, c.usage, c.mutex)?;
        if c.info.count.saturating_sub(c.usage.used) < p.size {
            return Err(Reason::CardTimeSlicingExhausted);
        }
        if u64::from(c.info.mem_mib).saturating_sub(c.usage.mem_used) < u64::from(p.memory_mib()) {
            return Err(Reason::CardInsufficientMemory);
        }
        if c.info.cores > 0
            && u64::from(c.info.cores).saturating_sub(c.usage.cores_used)
                < u64::from(p.core_percent)
        {
            return Err(Reason::CardInsufficientCore);
        }
        Ok((p.memory_mib(), p.core_percent))
    }

    fn slots_taken(&self, device: &DeviceInfo, req: &ContainerDeviceRequest) -> u32 {
        select_profile(&profiles_of(device), req).map_or(1, |p| p.size)
    }

    fn extra_annotations(&self, ctx: &AllocationContext<'_>) -> Vec<(String, String)> {
        let mut out: BTreeMap<&str, String> = BTreeMap::new();
        let mut assigned: BTreeMap<String, AssignedContainer<'_>> = BTreeMap::new();
        let menus: Vec<Vec<Profile>> = ctx.node_devices.iter().map(profiles_of).collect();
        for (i, devices) in ctx.devices.iter().enumerate() {
            let Some(chosen) = devices.first() else {
                continue;
            };
            let pos = ctx.node_devices.iter().position(|d| *d.id == *chosen.uuid);
            let device = pos.map(|p| &ctx.node_devices[p]);
            let profile = match (pos, ctx.requests.get(i).copied().flatten()) {
                (Some(p), Some(req)) => select_profile(&menus[p], req),
                _ => None,
            };
            let slice = chosen.slots_taken();
            let name = ctx
                .container_names
                .get(i)
                .map_or_else(|| format!("container-{i}"), |n| n.to_string());
            assigned.insert(
                name,
                AssignedContainer {
                    allocated: false,
                    request: slice,
                    profile_id: profile.map_or("", |p| p.id.as_str()),
                    profile_name: profile.map_or("", |p| p.name.as_str()),
                },
            );
            if let Some(d) = device {
                if let Some(index) = d.custom_str("index").filter(|s| !s.is_empty())
                    && !out.contains_key(ASSIGNED_INDEX)
                {
                    out.insert(ASSIGNED_INDEX, index.to_string());
                    out.insert(ASSIGNED_ID, index.to_string());
                }
                if let Some(minor) = d.custom_str("minor").filter(|s| !s.is_empty()) {
                    out.entry(ASSIGNED_MINOR)
                        .or_insert_with(|| minor.to_string());
                }
            }
            out.entry(REQUEST_SIZE).or_insert_with(|| slice.to_string());
        }
        if assigned.is_empty() {
            return Vec::new();
        }
        out.insert(ASSIGNED, "false".into());
        out.insert(
            ASSIGNED_TIME,
            ctx.now_unix.saturating_mul(1_000_000_000).to_string(),
        );
        // A map of plain fields: serialising cannot fail.
        if let Ok(json) = serde_json::to_string(&assigned) {
            out.insert(ASSIGNED_CONTAINERS, json);
        }
        out.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// HAMi's rules: a slice count must be positive; memory positive and compute in
    /// (0, 100]; the value found is copied into whichever of limits and requests lacks it.
    fn mutate_admission(&self, c: &mut Container, _pod: &Annotations) -> Result<Admission, String> {
        let read = |c: &Container, r: &str| -> Result<Option<(i64, Quantity)>, String> {
            let Some(q) = resource_quantity(c, r).cloned() else {
                return Ok(None);
            };
            let v = integer_resource(c, r)
                .map_err(|e| e.to_string())?
                .unwrap_or(0);
            Ok(Some((v, q)))
        };
        if let Some((n, q)) = read(c, &self.count)? {
            if n <= 0 {
                return Err(format!("{} must be greater than 0", self.count));
            }
            mirror(c, &self.count, &q);
            return Ok(Admission::uses(true));
        }
        let mem = read(c, &self.memory)?;
        let core = read(c, &self.core)?;
        if mem.is_none() && core.is_none() {
            return Ok(Admission::uses(false));
        }
        if let Some((m, _)) = &mem
            && *m <= 0
        {
            return Err(format!("{} must be greater than 0", self.memory));
        }
        if let Some((v, _)) = &core
            && (*v <= 0 || *v > 100)
        {
            return Err(format!("{} must be in range (0,100]", self.core));
        }
        for (r, found) in [(&self.memory, mem), (&self.core, core)] {
            if let Some((_, q)) = found {
                mirror(c, r, &q);
            }
        }
        Ok(Admission::uses(true))
    }
}
