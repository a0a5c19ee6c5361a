//! Kunlunxin XPUs, two families sharing the `kunlun:` section
//! (`docs/vendors.md#kunlunxin`): whole XPUs (`kunlun`) derived from node capacity, and
//! vXPUs (`XPU`) from the JSON register `hami.io/node-register-xpu` with memory cut to
//! 24/48/96 GiB. Both take devices by the board's topology: two groups of four (0–3,
//! 4–7) fully connected inside, linked pairwise (`i` to `i+4`) across.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Serialize};

use super::admission::{has_limit, set_resource};
use super::common::{
    MAX_I32, RequestShape, bounded, capacity_count, json_register, limit, selection_constraints,
    selector_keys, uses_count,
};
use super::{
    Admission, AllocationContext, Annotations, CapacityCheck, ConstraintError, DeviceConstraints,
    HealthRule, InventorySource, NodeLockRule, NodeView, Vendor,
};
use crate::codec::CodecError;
use crate::codec::selectors::SelectorKeys;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::quota::QuotaResources;
use crate::reason::Reason;
use crate::request::{RequestError, integer_resource, plain_integer};

/// The vendor key of whole Kunlunxin XPUs.
pub const KUNLUN: &str = "kunlun";
/// The vendor key of Kunlunxin vXPUs.
pub const XPU: &str = "XPU";
/// Pod: whole XPUs given (the plugin reads no to-allocate key).
pub const KUNLUN_ALLOCATED: &str = "hami.io/kunlun-allocated";
/// Pod: indexes of the XPUs given, read by Kunlunxin's device plugin.
pub const DEVICE_SELECTION: &str = "BAIDU_COM_DEVICE_IDX";
/// Pod: allowed / forbidden whole XPU UUIDs (exact).
pub const KUNLUN_USE_UUID: &str = "baidu.com/use-gpuuuid";
pub const KUNLUN_NOUSE_UUID: &str = "baidu.com/nouse-gpuuuid";
/// Node: the vXPU plugin's inventory (JSON) and handshake.
pub const XPU_REGISTER: &str = "hami.io/node-register-xpu";
pub const XPU_HANDSHAKE: &str = "hami.io/node-handshake-xpu";
/// Pod: vXPUs still to hand out / given.
pub const XPU_TO_ALLOCATE: &str = "hami.io/xpu-devices-to-allocate";
pub const XPU_ALLOCATED: &str = "hami.io/xpu-devices-allocated";
/// Pod: allowed / forbidden vXPU UUIDs (exact).
pub const XPU_USE_UUID: &str = "hami.io/use-xpu-uuid";
pub const XPU_NOUSE_UUID: &str = "hami.io/no-use-xpu-uuid";
/// MiB of one XPU.
pub const XPU_MEMORY: u32 = 98304;
/// The vXPU sizes (MiB), smallest first; anything larger is the whole XPU.
pub const VXPU_SIZES: [u32; 2] = [24576, 49152];

/// Cross-group links: XPU `i` to `i + 4`.
const INTER_GROUP: [[u32; 2]; 4] = [[0, 4], [1, 5], [2, 6], [3, 7]];
/// Sets of four XPUs that are connected (two pairs across the groups).
const INTER_GROUP_FOUR: [[u32; 4]; 6] = [
    [0, 1, 4, 5],
    [2, 3, 6, 7],
    [0, 2, 4, 6],
    [1, 3, 5, 7],
    [0, 3, 4, 7],
    [1, 2, 5, 6],
];
/// Links inside a group.
const IN_GROUP: [[u32; 2]; 12] = [
    [0, 1],
    [0, 2],
    [0, 3],
    [1, 2],
    [1, 3],
    [2, 3],
    [4, 5],
    [4, 6],
    [4, 7],
    [5, 6],
    [5, 7],
    [6, 7],
];

/// The `kunlun:` section of `device-config.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct KunlunConfig {
    pub resource_count_name: String,
    pub resource_v_count_name: String,
    pub resource_v_memory_name: String,
}

impl Default for KunlunConfig {
    fn default() -> Self {
        KunlunConfig {
            resource_count_name: "kunlunxin.com/xpu".into(),
            resource_v_count_name: "kunlunxin.com/vxpu".into(),
            resource_v_memory_name: "kunlunxin.com/vxpu-memory".into(),
        }
    }
}

/// The vXPU size a memory request (MiB) gets.
pub fn vxpu_size(mib: i64) -> u32 {
    VXPU_SIZES
        .iter()
        .copied()
        .find(|s| mib <= i64::from(*s))
        .unwrap_or(XPU_MEMORY)
}

/// The board's choice of `count` XPUs among the fitting `candidates` (positions into
/// `devices`, whose index says where the XPU sits on the board): a group with exactly
/// the right number free first, else devices linked across the groups. Counts other
/// than 1, 2, 4 and 8 are never placed (the board has no such connected set). Answers
/// positions into `candidates`, in device index order.
pub fn board_choice(devices: &[DeviceInfo], candidates: &[usize], count: usize) -> Vec<usize> {
    let by_index: BTreeMap<u32, usize> = candidates
        .iter()
        .enumerate()
        .filter_map(|(i, &pos)| devices.get(pos).map(|d| (d.index, i)))
        .filter(|(index, _)| *index < 8)
        .collect();
    let free: Vec<u32> = by_index.keys().copied().collect();
    let answer = |indexes: &[u32]| -> Vec<usize> {
        indexes
            .iter()
            .filter_map(|i| by_index.get(i).copied())
            .collect()
    };
    let left = free.iter().filter(|i| **i < 4).count();
    let right = free.len() - left;
    let pick = |start: u32| -> Vec<usize> {
        let chosen: Vec<u32> = free
            .iter()
            .copied()
            .filter(|i| *i >= start)
            .take(count)
            .collect();
        answer(&chosen)
    };
    match count {
        8 if free.len() == 8 => answer(&free),
        1 | 2 | 4 => {
            if left >= count || right >= count {
                // A group left with exactly as many free as asked keeps the other whole;
                // a single device prefers a group with one or three free.
                const ODD_ORDER: [usize; 4] = [1, 3, 2, 4];
                for slots in count..=4 {
                    let num = if count % 2 == 1 {
                        ODD_ORDER[slots - 1]
                    } else {
                        slots
                    };
                    if left == num {
                        return pick(0);
                    }
                    if right == num {
                        return pick(4);
                    }
                }
            }
            answer(&linked(&free, count))
        }
        _ => Vec::new(),
    }
}

/// Devices linked across the groups: a linked pair, or a connected four.
fn linked(free: &[u32], count: usize) -> Vec<u32> {
    let has = |set: &[u32], want: &[u32]| want.iter().all(|w| set.contains(w));
    match count {
        2 => {
            for &a in free {
                for &b in free {
                    if a != b && INTER_GROUP.iter().any(|p| has(&[a, b], p)) {
                        return vec![a, b];
                    }
                }
            }
            Vec::new()
        }
        4 if matches!(free.len(), 4 | 5) => INTER_GROUP_FOUR
            .iter()
            .find(|c| has(free, &c[..]))
            .map(|c| c.to_vec())
            .unwrap_or_default(),
        4 if free.len() == 6 => {
            // Prefer a four whose leftovers still hold a linked pair.
            let mut last = Vec::new();
            for c in &INTER_GROUP_FOUR {
                if has(free, c) {
                    last = c.to_vec();
                    let rest: Vec<u32> = free.iter().copied().filter(|i| !c.contains(i)).collect();
                    if INTER_GROUP
                        .iter()
                        .chain(IN_GROUP.iter())
                        .any(|p| has(&rest, p))
                    {
                        return last;
                    }
                }
            }
            last
        }
        _ => Vec::new(),
    }
}

/// Whole Kunlunxin XPUs.
#[derive(Debug, Clone)]
pub struct KunlunXpu {
    cfg: KunlunConfig,
    keys: SelectorKeys,
}

impl KunlunXpu {
    pub fn new(cfg: KunlunConfig) -> Self {
        KunlunXpu {
            cfg,
            keys: selector_keys(None, None, Some(KUNLUN_USE_UUID), Some(KUNLUN_NOUSE_UUID)),
        }
    }
}

impl Vendor for KunlunXpu {
    fn common_word(&self) -> &str {
        KUNLUN
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
        HealthRule::Always
    }

    fn to_allocate_annotation(&self) -> Option<&str> {
        None
    }

    fn allocated_annotation(&self) -> &str {
        KUNLUN_ALLOCATED
    }

    /// Its device plugin does not look for the pod through a node lock.
    fn node_lock(&self) -> NodeLockRule<'_> {
        NodeLockRule::None
    }

    fn container_request(
        &self,
        c: &Container,
        _pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        RequestShape::count_only(KUNLUN, &self.cfg.resource_count_name).read(c)
    }

    /// 96 GiB XPUs, the second half of the board on NUMA node 1.
    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        let cards = match capacity_count(node, &self.cfg.resource_count_name)? {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        Some(Ok((0..cards)
            .map(|i| DeviceInfo {
                id: format!("{}-kunlun-{i}", node.name).into(),
                index: i,
                count: 100,
                mem_mib: XPU_MEMORY,
                cores: 100,
                dev_type: KUNLUN.into(),
                numa: i32::from(i >= cards / 2),
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
        req.dev_type == KUNLUN
    }

    fn type_matches(
        &self,
        _d: &DeviceInfo,
        req: &ContainerDeviceRequest,
        _c: &DeviceConstraints,
    ) -> bool {
        req.dev_type == KUNLUN
    }

    fn custom_capacity(&self) -> bool {
        true
    }

    /// Only idle XPUs, taken whole.
    fn check_capacity(&self, c: &CapacityCheck<'_>) -> Result<(u32, u32), Reason> {
        if c.usage.used > 0 {
            return Err(Reason::ExclusiveDeviceAllocateConflict);
        }
        Ok((c.info.mem_mib, c.info.cores))
    }

    fn may_choose_devices(&self) -> bool {
        true
    }

    fn chooses_devices(&self, _devices: &[DeviceInfo], _req: &ContainerDeviceRequest) -> bool {
        true
    }

    fn choose_devices(
        &self,
        devices: &[DeviceInfo],
        candidates: &[usize],
        count: usize,
    ) -> Vec<usize> {
        board_choice(devices, candidates, count)
    }

    fn choice_failure(&self) -> Reason {
        Reason::NumaNotFit
    }

    /// The indexes of the last container's XPUs (HAMi overwrites the key container by
    /// container).
    fn extra_annotations(&self, ctx: &AllocationContext<'_>) -> Vec<(String, String)> {
        let Some(last) = ctx.devices.iter().rfind(|c| !c.is_empty()) else {
            return Vec::new();
        };
        let indexes: Vec<String> = last.iter().map(|d| d.idx.to_string()).collect();
        vec![(DEVICE_SELECTION.to_string(), indexes.join(","))]
    }

    fn mutate_admission(&self, c: &mut Container, _pod: &Annotations) -> Result<Admission, String> {
        Ok(uses_count(c, &self.cfg.resource_count_name))
    }
}

/// Kunlunxin vXPUs.
#[derive(Debug, Clone)]
pub struct KunlunVxpu {
    cfg: KunlunConfig,
    keys: SelectorKeys,
}

impl KunlunVxpu {
    pub fn new(cfg: KunlunConfig) -> Self {
        KunlunVxpu {
            cfg,
            keys: selector_keys(None, None, Some(XPU_USE_UUID), Some(XPU_NOUSE_UUID)),
        }
    }
}

impl Vendor for KunlunVxpu {
    fn common_word(&self) -> &str {
        XPU
    }

    fn resource_names(&self) -> Vec<String> {
        vec![
            self.cfg.resource_v_count_name.clone(),
            self.cfg.resource_v_memory_name.clone(),
        ]
    }

    fn quota_resources(&self) -> QuotaResources {
        QuotaResources::named(&self.cfg.resource_v_memory_name, "", 1)
    }

    fn count_resource(&self) -> &str {
        &self.cfg.resource_v_count_name
    }

    fn inventory_source(&self) -> InventorySource<'_> {
        InventorySource::Annotation(XPU_REGISTER)
    }

    fn health_rule(&self) -> HealthRule<'_> {
        HealthRule::Handshake(XPU_HANDSHAKE)
    }

    fn to_allocate_annotation(&self) -> Option<&str> {
        Some(XPU_TO_ALLOCATE)
    }

    fn allocated_annotation(&self) -> &str {
        XPU_ALLOCATED
    }

    /// A vXPU's memory is one of the sizes (24, 48 or 96 GiB) and its compute the same
    /// share of the XPU; no memory is a whole XPU.
    fn container_request(
        &self,
        c: &Container,
        _pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        let Some(mut req) =
            RequestShape::count_only(XPU, &self.cfg.resource_v_count_name).read(c)?
        else {
            return Ok(None);
        };
        let r = &self.cfg.resource_v_memory_name;
        let mem = match integer_resource(c, r)? {
            None => 0,
            Some(m) => vxpu_size(i64::from(bounded(c, r, m, MAX_I32)?)),
        };
        if mem == 0 {
            req.mem_mib = XPU_MEMORY;
            req.mem_percent = Some(100);
            req.cores = 100;
        } else {
            req.mem_mib = mem;
            req.mem_percent = None;
            req.cores = mem * 100 / XPU_MEMORY;
        }
        Ok(Some(req))
    }

    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        json_register(node, XPU_REGISTER)
    }

    fn pod_constraints(
        &self,
        pod_annotations: &Annotations,
    ) -> Result<DeviceConstraints, ConstraintError> {
        selection_constraints(pod_annotations, &self.keys)
    }

    fn accepts_any_type(&self, req: &ContainerDeviceRequest, _c: &DeviceConstraints) -> bool {
        req.dev_type == XPU
    }

    fn type_matches(
        &self,
        _d: &DeviceInfo,
        req: &ContainerDeviceRequest,
        _c: &DeviceConstraints,
    ) -> bool {
        req.dev_type == XPU
    }

    fn custom_capacity(&self) -> bool {
        true
    }

    /// The memory must fit, and an XPU already cut serves only vXPUs of the same size.
    fn check_capacity(&self, c: &CapacityCheck<'_>) -> Result<(u32, u32), Reason> {
        let (info, u, req) = (c.info, c.usage, c.req);
        if u.mem_used + u64::from(req.mem_mib) > u64::from(info.mem_mib) {
            return Err(Reason::CardInsufficientMemory);
        }
        if u.used > 0 && u.mem_used / u64::from(u.used) != u64::from(req.mem_mib) {
            return Err(Reason::CardNotFoundCustomFilterRule);
        }
        Ok((req.mem_mib, req.cores))
    }

    fn may_choose_devices(&self) -> bool {
        true
    }

    fn chooses_devices(&self, _devices: &[DeviceInfo], _req: &ContainerDeviceRequest) -> bool {
        true
    }

    fn choose_devices(
        &self,
        devices: &[DeviceInfo],
        candidates: &[usize],
        count: usize,
    ) -> Vec<usize> {
        board_choice(devices, candidates, count)
    }

    fn choice_failure(&self) -> Reason {
        Reason::NumaNotFit
    }

    /// The memory rounded up to a vXPU size.
    fn mutate_admission(&self, c: &mut Container, _pod: &Annotations) -> Result<Admission, String> {
        if !has_limit(c, &self.cfg.resource_v_count_name) {
            return Ok(Admission::uses(false));
        }
        if let Some(q) = limit(c, &self.cfg.resource_v_memory_name) {
            let Some(m) = plain_integer(q) else {
                return Err(format!(
                    "container {}: resource {}={:?} must be a plain integer (MiB)",
                    c.name, self.cfg.resource_v_memory_name, q.0
                ));
            };
            set_resource(c, &self.cfg.resource_v_memory_name, u64::from(vxpu_size(m)));
        }
        Ok(Admission::uses(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board(n: u32) -> Vec<DeviceInfo> {
        (0..n)
            .map(|i| DeviceInfo {
                index: i,
                ..DeviceInfo::default()
            })
            .collect()
    }

    fn chosen(free: &[u32], count: usize) -> Vec<u32> {
        let devices = board(8);
        let candidates: Vec<usize> = free.iter().map(|i| *i as usize).collect();
        board_choice(&devices, &candidates, count)
            .into_iter()
            .map(|i| candidates[i] as u32)
            .collect()
    }

    #[test]
    fn the_board_is_taken_by_groups_and_links() {
        let all = [0, 1, 2, 3, 4, 5, 6, 7];
        assert_eq!(chosen(&all, 8), all);
        assert_eq!(chosen(&all[..7], 8), Vec::<u32>::new());
        assert_eq!(chosen(&all, 4), [0, 1, 2, 3]);
        // One device: a group with one (or three) free first, keeping the other whole.
        assert_eq!(chosen(&[0, 1, 2, 3, 7], 1), [7]);
        assert_eq!(chosen(&[0, 1, 2, 5, 6, 7, 4], 1), [0]);
        // Two: a group with exactly two free.
        assert_eq!(chosen(&[2, 3, 4, 5, 6], 2), [2, 3]);
        // Two, no group fits: a linked pair across.
        assert_eq!(chosen(&[0, 4], 2), [0, 4]);
        assert_eq!(chosen(&[0, 5], 2), Vec::<u32>::new());
        // Four across the groups.
        assert_eq!(chosen(&[0, 1, 4, 5, 6], 4), [0, 1, 4, 5]);
        // Counts the board cannot serve.
        for count in [3, 5, 6, 7] {
            assert!(chosen(&all, count).is_empty(), "{count}");
        }
    }

    #[test]
    fn vxpu_sizes_round_up() {
        assert_eq!(vxpu_size(1), 24576);
        assert_eq!(vxpu_size(24576), 24576);
        assert_eq!(vxpu_size(24577), 49152);
        assert_eq!(vxpu_size(60000), 98304);
    }
}
