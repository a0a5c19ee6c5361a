//! Huawei Ascend NPUs (each chip of `vnpus.configs` its own vendor: `Ascend910A`,
//! `Ascend910B2`, `Ascend910B3`, `Ascend910B4`, `Ascend910B4-1`, `Ascend310P`,
//! `Ascend910C`; switched on by `--enable-ascend`): JSON registers
//! `hami.io/node-register-<chip>` with a handshake per chip, memory rounded up to the
//! chip's vNPU templates (hard split) or taken as asked (`huawei.com/vnpu-mode:
//! hami-core`, soft split), network groups kept together, 910C super-pod modules
//! allocated in pairs, and the `huawei.com/<chip>` and `predicate-time` annotations the
//! Ascend device plugin reads (`docs/vendors.md#huawei-ascend`).

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Deserializer, Serialize};

use super::admission::{has_limit, set_env, set_resource};
use super::common::{
    MAX_I32, bounded, choose_by_group, json_register, selection_constraints, selector_keys,
};
use super::{
    Admission, AllocationContext, Annotations, ConstraintError, DeviceConstraints, HealthRule,
    InventorySource, NodeView, Vendor,
};
use crate::codec::CodecError;
use crate::codec::selectors::SelectorKeys;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::quota::QuotaResources;
use crate::reason::Reason;
use crate::request::{RequestError, integer_resource};

/// Pod: `hami-core` asks for the soft split (hami-vnpu-core); anything else is the
/// template (hard) split.
pub const VNPU_MODE: &str = "huawei.com/vnpu-mode";
/// The soft-split mode, as pods and devices name it.
pub const HAMI_CORE: &str = "hami-core";
/// Node: `true` when the node runs hami-vnpu-core (overrides `vnpus.hamiVnpuCore`).
pub const NODE_VNPU_CORE: &str = "hami-vnpu-core";
/// Pod: Unix seconds of the decision, read by the Ascend device plugin.
pub const PREDICATE_TIME: &str = "predicate-time";
/// `custominfo` key of a 910 device's network (HCCS) group.
pub const NETWORK_ID: &str = "NetworkID";
/// The chips whose devices form network groups.
const ASCEND910_PREFIX: &str = "Ascend910";
/// Set for containers asking for no NPU when `overwriteEnv` is on.
pub const VISIBLE_DEVICES_ENV: &str = "ASCEND_VISIBLE_DEVICES";
/// NPUs per 910C module (one physical card).
const NPUS_PER_MODULE: u32 = 2;

/// One vNPU template of a chip.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct AscendTemplate {
    pub name: String,
    /// MiB.
    pub memory: i64,
    #[serde(rename = "aiCore")]
    pub ai_core: u32,
    #[serde(rename = "aiCPU")]
    pub ai_cpu: u32,
}

/// One chip of `vnpus.configs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
pub struct AscendConfig {
    pub chip_name: String,
    pub common_word: String,
    pub resource_name: String,
    pub resource_memory_name: String,
    pub resource_core_name: String,
    /// MiB the plugin registers per device (what a whole-device request gets).
    pub memory_allocatable: i64,
    /// MiB of the device; requests above it are refused.
    pub memory_capacity: i64,
    /// MiB per unit of the memory resource (values below 2 mean MiB).
    pub memory_factor: u32,
    pub ai_core: u32,
    #[serde(rename = "aiCPU")]
    pub ai_cpu: u32,
    pub runtime_class_name: String,
    pub overwrite_env: bool,
    pub templates: Vec<AscendTemplate>,
    /// 910C super pods: NPUs come in modules of two, allocated together.
    pub super_pod: bool,
}

/// The `vnpus:` section: `{hamiVnpuCore, configs}` (HAMi ≥ 2.9), or the older bare list
/// of chips.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VnpusConfig {
    /// Nodes run hami-vnpu-core unless their `hami-vnpu-core` annotation says otherwise.
    pub hami_vnpu_core: bool,
    pub configs: Vec<AscendConfig>,
}

impl<'de> Deserialize<'de> for VnpusConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Current {
                #[serde(default, rename = "hamiVnpuCore")]
                hami_vnpu_core: bool,
                #[serde(default)]
                configs: Vec<AscendConfig>,
            },
            Legacy(Vec<AscendConfig>),
        }
        Ok(match Form::deserialize(d)? {
            Form::Current {
                hami_vnpu_core,
                configs,
            } => VnpusConfig {
                hami_vnpu_core,
                configs,
            },
            Form::Legacy(configs) => VnpusConfig {
                hami_vnpu_core: false,
                configs,
            },
        })
    }
}

impl Default for VnpusConfig {
    /// The chart's seven chips.
    fn default() -> Self {
        let t = |name: &str, memory: i64, ai_core: u32, ai_cpu: u32| AscendTemplate {
            name: name.into(),
            memory,
            ai_core,
            ai_cpu,
        };
        let chip =
            |chip: &str, cw: &str, alloc: i64, cap: i64, ai_core: u32, ai_cpu: u32, templates| {
                AscendConfig {
                    chip_name: chip.into(),
                    common_word: cw.into(),
                    resource_name: format!("huawei.com/{cw}"),
                    resource_memory_name: format!("huawei.com/{cw}-memory"),
                    resource_core_name: format!("huawei.com/{cw}-core"),
                    memory_allocatable: alloc,
                    memory_capacity: cap,
                    memory_factor: 1,
                    ai_core,
                    ai_cpu,
                    runtime_class_name: String::new(),
                    overwrite_env: false,
                    templates,
                    super_pod: false,
                }
            };
        let b3 = || {
            vec![
                t("vir05_1c_16g", 16384, 5, 1),
                t("vir10_3c_32g", 32768, 10, 3),
            ]
        };
        let mut c910 = chip("Ascend910", "Ascend910C", 65536, 65536, 20, 7, b3());
        c910.super_pod = true;
        // The chart gives 910C no memoryFactor (0 reads as 1).
        c910.memory_factor = 0;
        VnpusConfig {
            hami_vnpu_core: false,
            configs: vec![
                chip(
                    "910A",
                    "Ascend910A",
                    32768,
                    32768,
                    30,
                    0,
                    vec![
                        t("vir02", 2184, 2, 0),
                        t("vir04", 4369, 4, 0),
                        t("vir08", 8738, 8, 0),
                        t("vir16", 17476, 16, 0),
                    ],
                ),
                chip(
                    "910B2",
                    "Ascend910B2",
                    65536,
                    65536,
                    24,
                    6,
                    vec![
                        t("vir03_1c_8g", 8192, 3, 1),
                        t("vir06_1c_16g", 16384, 6, 1),
                        t("vir12_3c_32g", 32768, 12, 3),
                    ],
                ),
                chip("910B3", "Ascend910B3", 65536, 65536, 20, 7, b3()),
                chip("910B4-1", "Ascend910B4-1", 65536, 65536, 20, 7, b3()),
                chip(
                    "910B4",
                    "Ascend910B4",
                    32768,
                    32768,
                    20,
                    7,
                    vec![
                        t("vir05_1c_8g", 8192, 5, 1),
                        t("vir10_3c_16g", 16384, 10, 3),
                    ],
                ),
                chip(
                    "310P3",
                    "Ascend310P",
                    21527,
                    24576,
                    8,
                    7,
                    vec![
                        t("vir01", 3072, 1, 1),
                        t("vir02", 6144, 2, 2),
                        t("vir04", 12288, 4, 4),
                    ],
                ),
                c910,
            ],
        }
    }
}

/// One Ascend chip.
#[derive(Debug, Clone)]
pub struct Ascend {
    cfg: AscendConfig,
    /// `vnpus.hamiVnpuCore`: nodes without the annotation run hami-vnpu-core.
    default_hami_core: bool,
    /// Every configured chip's count resource: `overwriteEnv` spares containers that
    /// ask for any of them.
    chip_resources: Vec<String>,
    register: String,
    handshake: String,
    to_allocate: String,
    allocated: String,
    runtime_info: String,
    keys: SelectorKeys,
}

impl Ascend {
    /// The chip `cfg` among the `vnpus` section's chips.
    pub fn new(mut cfg: AscendConfig, vnpus: &VnpusConfig) -> Self {
        cfg.templates.sort_by_key(|t| t.memory);
        let cw = cfg.common_word.clone();
        let use_uuid = format!("hami.io/use-{cw}-uuid");
        let nouse_uuid = format!("hami.io/no-use-{cw}-uuid");
        Ascend {
            register: format!("hami.io/node-register-{cw}"),
            handshake: format!("hami.io/node-handshake-{cw}"),
            to_allocate: format!("hami.io/{cw}-devices-to-allocate"),
            allocated: format!("hami.io/{cw}-devices-allocated"),
            runtime_info: format!("huawei.com/{cw}"),
            keys: selector_keys(None, None, Some(&use_uuid), Some(&nouse_uuid)),
            default_hami_core: vnpus.hami_vnpu_core,
            chip_resources: vnpus
                .configs
                .iter()
                .map(|c| c.resource_name.clone())
                .filter(|r| !r.is_empty())
                .collect(),
            cfg,
        }
    }

    /// The memory a hard-split request of `mib` gets and its template: the smallest
    /// template that holds it, else the whole device when it fits the device, else
    /// nothing (`None`).
    pub fn trim_memory(&self, mib: i64) -> Option<(i64, &str)> {
        if let Some(t) = self.cfg.templates.iter().find(|t| mib <= t.memory) {
            return Some((t.memory, &t.name));
        }
        (mib <= self.cfg.memory_capacity).then_some((self.cfg.memory_allocatable, ""))
    }

    fn soft(pod_annotations: &Annotations) -> bool {
        pod_annotations.get(VNPU_MODE).map(|v| v.trim()) == Some(HAMI_CORE)
    }

    /// 910C super pods count NPUs in modules: 1 becomes 2, other odd counts are refused.
    fn module_count(&self, n: i64) -> Result<i64, String> {
        if !self.cfg.super_pod {
            return Ok(n);
        }
        match n {
            1 => Ok(2),
            n if n % 2 != 0 => Err(format!(
                "{} device request must be 1 or 2*n, got {n}",
                self.cfg.common_word
            )),
            n => Ok(n),
        }
    }
}

impl Vendor for Ascend {
    fn common_word(&self) -> &str {
        &self.cfg.common_word
    }

    fn resource_names(&self) -> Vec<String> {
        [
            &self.cfg.resource_name,
            &self.cfg.resource_memory_name,
            &self.cfg.resource_core_name,
        ]
        .into_iter()
        .filter(|r| !r.is_empty())
        .cloned()
        .collect()
    }

    fn quota_resources(&self) -> QuotaResources {
        QuotaResources::named(
            &self.cfg.resource_memory_name,
            &self.cfg.resource_core_name,
            self.cfg.memory_factor,
        )
    }

    fn count_resource(&self) -> &str {
        &self.cfg.resource_name
    }

    fn inventory_source(&self) -> InventorySource<'_> {
        InventorySource::Annotation(&self.register)
    }

    fn inventory_inputs(&self) -> Vec<InventorySource<'_>> {
        vec![
            InventorySource::Annotation(&self.register),
            InventorySource::Annotation(NODE_VNPU_CORE),
        ]
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
        pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        let cfg = &self.cfg;
        let count = match integer_resource(c, &cfg.resource_name)? {
            Some(n) if n > 0 => n,
            _ => return Ok(None),
        };
        let count = self
            .module_count(count)
            .map_err(|reason| RequestError::Unservable {
                container: c.name.clone(),
                resource: cfg.resource_name.clone(),
                value: count.to_string(),
                reason,
            })?;
        let count = bounded(c, &cfg.resource_name, count, MAX_I32)?;
        let factor = i64::from(cfg.memory_factor.max(1));
        let mut mem = match integer_resource(c, &cfg.resource_memory_name)? {
            None => 0,
            Some(m) => {
                i64::from(bounded(c, &cfg.resource_memory_name, m, MAX_I32 / factor)?) * factor
            }
        };
        if mem > 0 && !Self::soft(pod_annotations) {
            mem =
                self.trim_memory(mem)
                    .map(|(m, _)| m)
                    .ok_or_else(|| RequestError::Unservable {
                        container: c.name.clone(),
                        resource: cfg.resource_memory_name.clone(),
                        value: mem.to_string(),
                        reason: format!("more than the device's {} MiB", cfg.memory_capacity),
                    })?;
        }
        let cores = match (
            cfg.resource_core_name.is_empty(),
            integer_resource(c, &cfg.resource_core_name)?,
        ) {
            (false, Some(v)) => bounded(c, &cfg.resource_core_name, v, 100)?,
            _ => 0,
        };
        let mem = u32::try_from(mem).unwrap_or(u32::MAX);
        Ok(Some(ContainerDeviceRequest {
            count,
            dev_type: cfg.common_word.clone(),
            mem_mib: mem,
            mem_percent: (mem == 0).then_some(100),
            cores,
        }))
    }

    /// The chip's devices; on a node running hami-vnpu-core they are marked `hami-core`
    /// and count 100 cores (the soft split shares compute by percent).
    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        let soft = match node.annotations.get(NODE_VNPU_CORE) {
            Some(v) => v.trim() == "true",
            None => self.default_hami_core,
        };
        Some(json_register(node, &self.register)?.map(|mut devices| {
            for d in &mut devices {
                if soft {
                    d.mode = HAMI_CORE.into();
                    d.cores = 100;
                }
            }
            devices
        }))
    }

    fn pod_constraints(
        &self,
        pod_annotations: &Annotations,
    ) -> Result<DeviceConstraints, ConstraintError> {
        let mut c = selection_constraints(pod_annotations, &self.keys)?;
        if let Some(mode) = pod_annotations.get(VNPU_MODE) {
            c.options
                .insert(VNPU_MODE.to_string(), mode.trim().to_string());
        }
        Ok(c)
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

    fn checks_node(&self) -> bool {
        true
    }

    /// A soft-split pod needs a node running hami-vnpu-core (`ModeNotFit`).
    fn check_node(
        &self,
        devices: &[DeviceInfo],
        _req: &ContainerDeviceRequest,
        constraints: &DeviceConstraints,
    ) -> Result<(), Reason> {
        let wants_soft = constraints.option(VNPU_MODE) == Some(HAMI_CORE);
        let node_soft = devices.first().is_some_and(|d| &*d.mode == HAMI_CORE);
        if wants_soft && !node_soft {
            return Err(Reason::ModeNotFit);
        }
        Ok(())
    }

    fn may_choose_devices(&self) -> bool {
        self.cfg.super_pod || self.cfg.common_word.starts_with(ASCEND910_PREFIX)
    }

    /// 910C (`superPod`) always takes whole modules; other 910 chips whose every device
    /// registers a network ID keep groups together.
    fn chooses_devices(&self, devices: &[DeviceInfo], _req: &ContainerDeviceRequest) -> bool {
        self.cfg.super_pod
            || (self.may_choose_devices()
                && !devices.is_empty()
                && devices.iter().all(|d| d.custom_int(NETWORK_ID).is_some()))
    }

    /// 910C: whole modules (both NPUs `2k`, `2k+1` fitting), in the order the walk met
    /// them; other 910 chips: the largest network group first.
    fn choose_devices(
        &self,
        devices: &[DeviceInfo],
        candidates: &[usize],
        count: usize,
    ) -> Vec<usize> {
        if !self.cfg.super_pod {
            return choose_by_group(devices, candidates, count, |d| d.custom_int(NETWORK_ID));
        }
        let module = |i: usize| {
            devices
                .get(candidates[i])
                .map(|d| d.index / NPUS_PER_MODULE)
        };
        let mut chosen = Vec::new();
        for i in 0..candidates.len() {
            if chosen.len() >= count || chosen.contains(&i) {
                continue;
            }
            let Some(m) = module(i) else { continue };
            if let Some(j) = (i + 1..candidates.len()).find(|&j| module(j) == Some(m)) {
                chosen.push(i);
                chosen.push(j);
            }
        }
        chosen.truncate(count);
        chosen
    }

    /// `predicate-time` and `huawei.com/<chip>`: per device its UUID, the template of
    /// a hard split, and memory and cores.
    fn extra_annotations(&self, ctx: &AllocationContext<'_>) -> Vec<(String, String)> {
        let soft = ctx.constraints.option(VNPU_MODE) == Some(HAMI_CORE);
        let mut items = Vec::new();
        for d in ctx.devices.iter().flatten() {
            let mut item = serde_json::Map::new();
            item.insert("UUID".into(), d.uuid.clone().into());
            if !soft
                && let Some((_, temp)) = self.trim_memory(i64::from(d.mem_mib))
                && !temp.is_empty()
            {
                item.insert("temp".into(), temp.into());
            }
            if d.mem_mib != 0 {
                item.insert("memory".into(), d.mem_mib.into());
            }
            if d.cores != 0 {
                item.insert("core".into(), d.cores.into());
            }
            items.push(item);
        }
        // Go writes struct fields in declaration order: UUID, temp, memory, core.
        let order = ["UUID", "temp", "memory", "core"];
        let body: Vec<String> = items
            .iter()
            .map(|item| {
                let fields: Vec<String> = order
                    .iter()
                    .filter_map(|k| {
                        item.get(*k)
                            .map(|v| format!("{}:{v}", serde_json::Value::from(*k)))
                    })
                    .collect();
                format!("{{{}}}", fields.join(","))
            })
            .collect();
        vec![
            (PREDICATE_TIME.to_string(), ctx.now_unix.to_string()),
            (self.runtime_info.clone(), format!("[{}]", body.join(","))),
        ]
    }

    /// HAMi's rules: `overwriteEnv` hides NPUs from containers asking for none (of any
    /// chip: HAMi also blanks a container asking for another chip, and that empty value
    /// would override the one the device plugin gives); 910C
    /// counts in modules; cores only with the soft split; a hard split's memory rounded
    /// up to a template (several devices only whole); the chip's RuntimeClass.
    fn mutate_admission(&self, c: &mut Container, pod: &Annotations) -> Result<Admission, String> {
        let cfg = &self.cfg;
        if !has_limit(c, &cfg.resource_name) {
            if cfg.overwrite_env && !self.chip_resources.iter().any(|r| has_limit(c, r)) {
                set_env(c, VISIBLE_DEVICES_ENV, "");
            }
            return Ok(Admission::uses(false));
        }
        let count = integer_resource(c, &cfg.resource_name)
            .map_err(|e| e.to_string())?
            .unwrap_or(0);
        let normalized = self.module_count(count)?;
        if normalized != count {
            set_resource(c, &cfg.resource_name, normalized.max(0) as u64);
        }
        let soft = Self::soft(pod);
        if !cfg.resource_core_name.is_empty() && !soft {
            let cores = integer_resource(c, &cfg.resource_core_name).map_err(|e| e.to_string())?;
            if cores.is_some_and(|v| v > 0) {
                return Err(format!(
                    "{} is only supported in hami-core (soft split) mode: set the pod annotation {VNPU_MODE}: {HAMI_CORE}",
                    cfg.resource_core_name
                ));
            }
        }
        if !soft {
            let mut trimmed = cfg.memory_allocatable;
            if let Some(m) =
                integer_resource(c, &cfg.resource_memory_name).map_err(|e| e.to_string())?
            {
                trimmed = match self.trim_memory(m) {
                    Some((t, _)) if t > 0 => t,
                    _ => return Err(format!("{} {m} is invalid", cfg.resource_memory_name)),
                };
            }
            if normalized > 1 && trimmed != cfg.memory_allocatable {
                return Err("vNPU nor supported for multiple devices".to_string());
            }
            set_resource(c, &cfg.resource_memory_name, trimmed.max(0) as u64);
        }
        let runtime_class = cfg.runtime_class_name.trim();
        Ok(Admission {
            uses: true,
            runtime_class: (!runtime_class.is_empty()).then(|| runtime_class.to_string()),
        })
    }
}
