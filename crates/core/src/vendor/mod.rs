//! Vendor plug-ins: what differs between NVIDIA, Hygon, Cambricon, Ascend, … lives behind
//! [`Vendor`]; the fit walk, scoring and accounting are shared. `docs/vendors.md` has the
//! table of every family (resources, annotations, health, special rules) and how to add one:
//! a file here with the vendor and its config section, one line in
//! [`VendorRegistry::from_config`], and its tests.

pub mod admission;
mod common;

pub mod amd;
pub mod ascend;
pub mod awsneuron;
pub mod biren;
pub mod cambricon;
pub mod enflame;
pub mod enflame_drs;
pub mod hygon;
pub mod iluvatar;
pub mod kunlun;
pub mod metax;
pub mod mthreads;
mod nvidia;
pub mod vastai;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Node};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use rustc_hash::FxHashMap;

use crate::codec::CodecError;
use crate::codec::selectors::DeviceSelector;
use crate::config::DeviceConfig;
use crate::model::{ContainerDeviceRequest, DeviceInfo, PodSingleDevice};
use crate::quota::QuotaResources;
use crate::reason::Reason;
use crate::request::{RequestError, plain_integer};
use crate::score::Usage;

pub use admission::Admission;
pub use nvidia::{NVIDIA, Nvidia};

/// Pod annotations, as every vendor reads them.
pub type Annotations = BTreeMap<String, String>;

/// Per-pod device constraints a vendor reads from the pod's annotations.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceConstraints {
    /// use/nouse type and UUID lists.
    pub selector: DeviceSelector,
    /// All devices of one container on one NUMA node.
    pub numa_bind: bool,
    /// Allowed device modes (`nvidia.com/vgpu-mode`); the device mode must be a substring.
    pub mode_filter: Option<String>,
    /// Other pod-level settings the vendor reads (Ascend's `huawei.com/vnpu-mode`,
    /// Metax's QoS policy, …), by annotation key, values trimmed.
    pub options: BTreeMap<String, String>,
}

impl DeviceConstraints {
    /// A vendor option, if the pod set it.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options.get(key).map(String::as_str)
    }
}

/// Why a pod's constraint annotations were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod annotation {key}={value:?} is invalid: {reason}")]
pub struct ConstraintError {
    pub key: String,
    pub value: String,
    pub reason: String,
}

/// What a vendor may read of a node to learn its devices: the annotations its device
/// plugin writes and, for vendors whose plugin only advertises a resource, the node's
/// capacity.
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    pub name: &'a str,
    pub annotations: &'a BTreeMap<String, String>,
    pub capacity: Option<&'a BTreeMap<String, Quantity>>,
    /// Node labels (AWS Neuron reads the instance type).
    pub labels: Option<&'a BTreeMap<String, String>>,
}

/// No annotations (a node without metadata.annotations).
static NO_ANNOTATIONS: BTreeMap<String, String> = BTreeMap::new();

impl<'a> NodeView<'a> {
    /// The view of a Node object.
    pub fn of(node: &'a Node) -> Self {
        NodeView {
            name: node.metadata.name.as_deref().unwrap_or_default(),
            annotations: node
                .metadata
                .annotations
                .as_ref()
                .unwrap_or(&NO_ANNOTATIONS),
            capacity: node.status.as_ref().and_then(|s| s.capacity.as_ref()),
            labels: node.metadata.labels.as_ref(),
        }
    }

    /// A node known by its annotations only (snapshots, tests).
    pub fn annotations_only(name: &'a str, annotations: &'a BTreeMap<String, String>) -> Self {
        NodeView {
            name,
            annotations,
            capacity: None,
            labels: None,
        }
    }

    /// A node label.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels?.get(key).map(String::as_str)
    }

    /// `status.capacity[resource]` as a plain integer; `None` when absent or not an
    /// integer.
    pub fn capacity_of(&self, resource: &str) -> Option<i64> {
        self.capacity?.get(resource).and_then(plain_integer)
    }
}

/// Where a vendor's inventory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InventorySource<'a> {
    /// A node annotation its device plugin writes (JSON or the legacy string).
    Annotation(&'a str),
    /// The node's capacity of this resource (the plugin writes no annotation).
    Capacity(&'a str),
}

impl InventorySource<'_> {
    /// Where the source is, as messages name it: the annotation key, or
    /// `status.capacity[<resource>]`.
    pub fn describe(&self) -> String {
        match self {
            InventorySource::Annotation(k) => (*k).to_string(),
            InventorySource::Capacity(r) => format!("status.capacity[{r}]"),
        }
    }
}

/// How the scheduler tells that a vendor's device plugin on a node is alive
/// (`docs/protocol.md#handshake`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthRule<'a> {
    /// HAMi's handshake on this node annotation; allocatable devices also count.
    Handshake(&'a str),
    /// Alive while the node's capacity of the count resource is above 0.
    Capacity,
    /// Always alive (the inventory itself comes from the node's capacity, or the vendor
    /// has no signal).
    Always,
}

/// The node lock a vendor's pods take in /bind (`docs/protocol.md#node-lock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeLockRule<'a> {
    /// `hami.io/mutex.lock`, shared by every vendor that uses it.
    Shared,
    /// No lock (the vendor's device plugin does not look for the pod through one).
    None,
    /// A vendor key holding an RFC 3339 time, free again after `expiry` (Cambricon's
    /// `cambricon.com/dsmlu.lock`, which its device plugin removes after allocating).
    Timestamp { key: &'a str, expiry: Duration },
}

/// What a device can give one container, as the capacity checks see it.
#[derive(Debug, Clone, Copy)]
pub struct CapacityCheck<'a> {
    pub info: &'a DeviceInfo,
    pub usage: &'a Usage,
    pub req: &'a ContainerDeviceRequest,
    pub constraints: &'a DeviceConstraints,
    /// GPU policy `mutex`: devices in use are refused.
    pub mutex: bool,
}

/// What a vendor writes for one placement, beyond the device strings.
#[derive(Debug, Clone, Copy)]
pub struct AllocationContext<'a> {
    pub node: &'a str,
    /// This vendor's devices of every container (init containers first).
    pub devices: &'a PodSingleDevice,
    /// This vendor's request of every container (same positions), if it has one.
    pub requests: &'a [Option<&'a ContainerDeviceRequest>],
    /// The node's devices of this vendor.
    pub node_devices: &'a [DeviceInfo],
    /// The pod's container names (init containers first, same positions).
    pub container_names: &'a [&'a str],
    pub constraints: &'a DeviceConstraints,
    pub now_unix: i64,
}

/// One accelerator vendor (one device family, or one chip of a family whose chips
/// are scheduled separately, as Ascend's and Iluvatar's).
pub trait Vendor: Send + Sync + Debug {
    /// The vendor key written into pod device strings (`NVIDIA`, `DCU`, `Ascend910B3`).
    fn common_word(&self) -> &str;
    /// Extended resource names this vendor manages.
    fn resource_names(&self) -> Vec<String>;
    /// The resource counting devices (`nvidia.com/gpu`): what the device plugin advertises
    /// to kubelet, so its allocatable on the node tells whether the plugin is alive.
    fn count_resource(&self) -> &str;
    /// Where the node's devices of this vendor are read from.
    fn inventory_source(&self) -> InventorySource<'_>;
    /// Everything [`Vendor::decode_inventory`] reads (the source and whatever else
    /// shapes the devices), so a cache re-reads the inventory when one changes.
    fn inventory_inputs(&self) -> Vec<InventorySource<'_>> {
        vec![self.inventory_source()]
    }
    /// How the plugin's liveness is judged.
    fn health_rule(&self) -> HealthRule<'_>;
    /// Node handshake annotation, when the vendor has one.
    fn handshake_annotation(&self) -> Option<&str> {
        match self.health_rule() {
            HealthRule::Handshake(key) => Some(key),
            _ => None,
        }
    }
    /// Pod annotation the device plugin consumes container by container (`None`: the
    /// vendor's plugin reads the allocated annotation only).
    fn to_allocate_annotation(&self) -> Option<&str>;
    /// Pod annotation recording what was allocated (usage accounting reads it).
    fn allocated_annotation(&self) -> &str;
    /// The node lock its pods take.
    fn node_lock(&self) -> NodeLockRule<'_> {
        NodeLockRule::Shared
    }
    /// Node annotation with pairwise device scores for `topology-aware` (NVIDIA).
    fn pair_score_annotation(&self) -> Option<&str> {
        None
    }
    /// The container's request for this vendor, `None` when it asks for none.
    fn container_request(
        &self,
        c: &Container,
        pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError>;
    /// Decodes the node's inventory; `None` when the node has none of this vendor.
    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>>;
    /// Reads the pod's constraints (type/UUID lists, NUMA binding, modes).
    fn pod_constraints(
        &self,
        pod_annotations: &Annotations,
    ) -> Result<DeviceConstraints, ConstraintError>;
    /// True when [`Vendor::type_matches`] holds for every device of this vendor given
    /// this request and these constraints (no type, UUID-free mode or model filter), so
    /// the fit can skip the per-device check. `false` is always a safe answer.
    fn accepts_any_type(
        &self,
        _req: &ContainerDeviceRequest,
        _constraints: &DeviceConstraints,
    ) -> bool {
        false
    }
    /// The memory and core resources a namespace's ResourceQuota can limit
    /// (`docs/protocol.md#resourcequota`); none by default.
    fn quota_resources(&self) -> QuotaResources {
        QuotaResources::default()
    }
    /// Device-level type check (HAMi's `CardTypeMismatch`), for devices whose type
    /// already names the vendor.
    fn type_matches(
        &self,
        device: &DeviceInfo,
        req: &ContainerDeviceRequest,
        constraints: &DeviceConstraints,
    ) -> bool;

    // ---- fit specifics (docs/vendors.md#fit) ----

    /// Whether [`Vendor::check_capacity`] replaces the shared capacity checks.
    fn custom_capacity(&self) -> bool {
        false
    }
    /// The capacity checks after the UUID check: what the device gives (MiB, cores in
    /// the unit the vendor accounts in) or why it cannot.
    fn check_capacity(&self, c: &CapacityCheck<'_>) -> Result<(u32, u32), Reason> {
        crate::fit::check_slots(c.info, c.usage, c.mutex)?;
        let (mem, cores) = (c.req.memory_on(c.info.mem_mib), c.req.cores_clamped());
        crate::fit::check_resources(c.info, c.usage, mem, cores)?;
        Ok((mem, cores))
    }
    /// A check of the whole node before any device is tried (Ascend's mode); a refusal
    /// fails the node with that reason counted once.
    fn check_node(
        &self,
        _devices: &[DeviceInfo],
        _req: &ContainerDeviceRequest,
        _constraints: &DeviceConstraints,
    ) -> Result<(), Reason> {
        Ok(())
    }
    /// Whether [`Vendor::check_node`] can refuse anything (skips the call otherwise).
    fn checks_node(&self) -> bool {
        false
    }
    /// Whether [`Vendor::chooses_devices`] can ever answer true (lets the fit skip the
    /// question, and rank nodes without choosing devices, for vendors that never do).
    fn may_choose_devices(&self) -> bool {
        false
    }
    /// Whether this vendor picks among all fitting devices itself on a node with these
    /// devices (Ascend's network groups and 910C pairs, Vastai's dies, Kunlun's
    /// topology); then every fitting device is collected first.
    fn chooses_devices(&self, _devices: &[DeviceInfo], _req: &ContainerDeviceRequest) -> bool {
        false
    }
    /// Chooses `count` of the fitting `candidates` (positions into `devices`, in walk
    /// order): positions into `candidates`. Fewer than `count` fails the node with
    /// `AllocatedCardsInsufficientRequest`.
    fn choose_devices(
        &self,
        _devices: &[DeviceInfo],
        candidates: &[usize],
        count: usize,
    ) -> Vec<usize> {
        (0..candidates.len().min(count)).collect()
    }
    /// The reason a node fails with when enough devices fit but
    /// [`Vendor::choose_devices`] finds no acceptable set (Kunlun: `NumaNotFit`).
    fn choice_failure(&self) -> Reason {
        Reason::AllocatedCardsInsufficientRequest
    }
    /// The TYPE field of an allocated device in the pod device string (the vendor key;
    /// AMD writes the card model).
    fn allocated_type<'a>(
        &self,
        _info: &'a DeviceInfo,
        req: &'a ContainerDeviceRequest,
    ) -> &'a str {
        &req.dev_type
    }
    /// The slots one container takes on `device` with this request (Enflame DRS: its
    /// profile's slices); one for every other family.
    fn slots_taken(&self, _device: &DeviceInfo, _req: &ContainerDeviceRequest) -> u32 {
        1
    }
    /// Whether device cores are percent of one device (HAMi's metrics normalise the
    /// vendors that count compute units, AMD, to percent).
    fn cores_in_percent(&self) -> bool {
        true
    }
    /// Pod annotations the vendor's device plugin expects beyond the device strings.
    fn extra_annotations(&self, _ctx: &AllocationContext<'_>) -> Vec<(String, String)> {
        Vec::new()
    }

    // ---- admission (docs/protocol.md#webhook) ----

    /// Applies the vendor's admission rules to one container; `Err` is the message of a
    /// refusal. `pod_annotations` are the pod's (some vendors read a mode there).
    fn mutate_admission(
        &self,
        c: &mut Container,
        pod_annotations: &Annotations,
    ) -> Result<Admission, String>;
}

/// The node locks /bind takes for a pod on a node (`docs/vendors.md#node-locks`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeLocks {
    /// `hami.io/mutex.lock`.
    pub shared: bool,
    /// Vendors' own time-stamp locks: key and expiry, sorted by key.
    pub stamps: Vec<(String, Duration)>,
}

impl NodeLocks {
    /// The locks of the vendors a pod holds devices of (HAMi locks vendor by vendor in
    /// sorted order; all share one key but Cambricon). No vendor known: the shared lock,
    /// as before vendors had their own.
    pub fn for_vendors<'a>(
        registry: &VendorRegistry,
        vendors: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        let mut locks = NodeLocks::default();
        let mut any = false;
        for key in vendors {
            let Some(v) = registry.get(key) else {
                continue;
            };
            any = true;
            match v.node_lock() {
                NodeLockRule::Shared => locks.shared = true,
                NodeLockRule::None => {}
                NodeLockRule::Timestamp { key, expiry } => {
                    if !locks.stamps.iter().any(|(k, _)| k == key) {
                        locks.stamps.push((key.to_string(), expiry));
                    }
                }
            }
        }
        locks.shared |= !any;
        locks.stamps.sort();
        locks
    }
}

/// Which optional vendor families are switched on (HAMi's `--enable-ascend`,
/// `--enable-iluvatar`); every other family is always on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VendorSwitches {
    pub ascend: bool,
    pub iluvatar: bool,
}

/// The vendors a process manages, in a fixed order (sorted by vendor key).
#[derive(Debug, Clone)]
pub struct VendorRegistry {
    vendors: Vec<Arc<dyn Vendor>>,
    /// Resource name → vendors (positions) that read it.
    by_resource: FxHashMap<String, Vec<usize>>,
    /// Vendor key → position: every placement looks vendors up by key.
    by_word: FxHashMap<String, usize>,
}

impl VendorRegistry {
    pub fn new(mut vendors: Vec<Arc<dyn Vendor>>) -> Self {
        vendors.sort_by(|a, b| a.common_word().cmp(b.common_word()));
        vendors.dedup_by(|a, b| a.common_word() == b.common_word());
        let mut by_resource: FxHashMap<String, Vec<usize>> = FxHashMap::default();
        let by_word = vendors
            .iter()
            .enumerate()
            .map(|(i, v)| (v.common_word().to_string(), i))
            .collect();
        for (i, v) in vendors.iter().enumerate() {
            for r in v.resource_names() {
                let e = by_resource.entry(r).or_default();
                if !e.contains(&i) {
                    e.push(i);
                }
            }
        }
        VendorRegistry {
            vendors,
            by_resource,
            by_word,
        }
    }

    /// The registry of a device config: every family HAMi serves, Ascend and Iluvatar
    /// only when switched on ([`DeviceConfig::switches`]).
    pub fn from_config(cfg: &DeviceConfig) -> Self {
        let mut v: Vec<Arc<dyn Vendor>> = vec![
            Arc::new(Nvidia::new(cfg.nvidia.clone())),
            Arc::new(cambricon::Cambricon::new(cfg.cambricon.clone())),
            Arc::new(hygon::Hygon::new(cfg.hygon.clone())),
            Arc::new(metax::MetaxGpu::new(cfg.metax.clone())),
            Arc::new(metax::MetaxSgpu::new(cfg.metax.clone())),
            Arc::new(mthreads::Mthreads::new(cfg.mthreads.clone())),
            Arc::new(enflame::EnflameGcu::new(cfg.enflame.clone())),
            Arc::new(enflame_drs::EnflameDrs::new(&cfg.enflame)),
            Arc::new(kunlun::KunlunXpu::new(cfg.kunlun.clone())),
            Arc::new(kunlun::KunlunVxpu::new(cfg.kunlun.clone())),
            Arc::new(awsneuron::AwsNeuron::new(cfg.awsneuron.clone())),
            Arc::new(amd::Amd::new(cfg.amd.clone())),
            Arc::new(vastai::Vastai::new(cfg.vastai.clone())),
            Arc::new(biren::Biren::new(cfg.biren.clone())),
        ];
        if cfg.switches.ascend {
            for chip in &cfg.vnpus.configs {
                v.push(Arc::new(ascend::Ascend::new(chip.clone(), &cfg.vnpus)));
            }
        }
        if cfg.switches.iluvatar {
            for chip in &cfg.iluvatars {
                v.push(Arc::new(iluvatar::Iluvatar::new(chip.clone())));
            }
        }
        Self::new(v)
    }

    /// Only NVIDIA, with the config's settings (the device plugin's and the
    /// simulator's view).
    pub fn nvidia_only(cfg: &DeviceConfig) -> Self {
        Self::new(vec![Arc::new(Nvidia::new(cfg.nvidia.clone()))])
    }

    pub fn vendors(&self) -> &[Arc<dyn Vendor>] {
        &self.vendors
    }

    pub fn get(&self, common_word: &str) -> Option<&Arc<dyn Vendor>> {
        self.by_word
            .get(common_word)
            .and_then(|i| self.vendors.get(*i))
    }

    /// Every resource name any vendor manages.
    pub fn resource_names(&self) -> Vec<String> {
        self.vendors
            .iter()
            .flat_map(|v| v.resource_names())
            .collect()
    }

    /// The vendors that read any of `resources` (a container's resource names), in
    /// registry order: only they can find a request in the container.
    pub fn vendors_reading<'a>(
        &self,
        resources: impl IntoIterator<Item = &'a String>,
    ) -> Vec<&Arc<dyn Vendor>> {
        let mut hit: Vec<usize> = resources
            .into_iter()
            .filter_map(|r| self.by_resource.get(r))
            .flatten()
            .copied()
            .collect();
        hit.sort_unstable();
        hit.dedup();
        hit.into_iter().map(|i| &self.vendors[i]).collect()
    }
}

/// ASCII case-insensitive substring test without allocating (hot path of the fit).
pub fn contains_ignore_ascii_case(haystack: &str, needle: &str) -> bool {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    if n.is_empty() {
        return true;
    }
    if n.len() > h.len() {
        return false;
    }
    // Registered models usually start with the vendor name: answer that without a scan.
    h[..n.len()].eq_ignore_ascii_case(n) || h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substring_ignores_case() {
        assert!(contains_ignore_ascii_case("NVIDIA-Tesla V100", "nvidia"));
        assert!(contains_ignore_ascii_case("nvidia a100", "A100"));
        assert!(!contains_ignore_ascii_case("MLU370", "NVIDIA"));
        assert!(contains_ignore_ascii_case("x", ""));
        assert!(!contains_ignore_ascii_case("", "x"));
    }

    #[test]
    fn registry_is_sorted_and_deduplicated() {
        let cfg = DeviceConfig::default();
        let n1: Arc<dyn Vendor> = Arc::new(Nvidia::new(cfg.nvidia.clone()));
        let n2: Arc<dyn Vendor> = Arc::new(Nvidia::new(cfg.nvidia.clone()));
        let reg = VendorRegistry::new(vec![n1, n2]);
        assert_eq!(reg.vendors().len(), 1);
        assert!(reg.get("NVIDIA").is_some());
        assert!(reg.get("MLU").is_none());
        assert_eq!(reg.resource_names().len(), 4);
    }

    #[test]
    fn default_registry_serves_every_always_on_family_and_switches_add_the_rest() {
        let mut cfg = DeviceConfig::default();
        let reg = VendorRegistry::from_config(&cfg);
        let words: Vec<&str> = reg.vendors().iter().map(|v| v.common_word()).collect();
        assert_eq!(
            words,
            [
                "AMD",
                "AWSNeuron",
                "Biren",
                "DCU",
                "Enflame",
                "GCU",
                "MLU",
                "Metax-GPU",
                "Metax-SGPU",
                "Mthreads",
                "NVIDIA",
                "Vastai",
                "XPU",
                "kunlun"
            ]
        );
        cfg.switches = VendorSwitches {
            ascend: true,
            iluvatar: true,
        };
        let reg = VendorRegistry::from_config(&cfg);
        for w in [
            "Ascend910A",
            "Ascend910B2",
            "Ascend910B3",
            "Ascend910B4",
            "Ascend910B4-1",
            "Ascend310P",
            "Ascend910C",
            "MR-V100",
            "MR-V50",
            "BI-V150",
            "BI-V100",
        ] {
            assert!(reg.get(w).is_some(), "{w}");
        }
        // Every resource name belongs to exactly one vendor.
        let mut names = reg.resource_names();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "a resource name is claimed twice");
    }

    #[test]
    fn node_locks_follow_the_vendors() {
        let reg = VendorRegistry::from_config(&DeviceConfig::default());
        let l = NodeLocks::for_vendors(&reg, ["NVIDIA", "MLU"]);
        assert!(l.shared);
        assert_eq!(
            l.stamps,
            vec![(
                "cambricon.com/dsmlu.lock".to_string(),
                Duration::from_secs(120)
            )]
        );
        let l = NodeLocks::for_vendors(&reg, ["MLU"]);
        assert!(!l.shared && l.stamps.len() == 1);
        assert_eq!(
            NodeLocks::for_vendors(&reg, ["Mthreads"]),
            NodeLocks::default()
        );
        assert!(NodeLocks::for_vendors(&reg, []).shared);
        assert!(NodeLocks::for_vendors(&reg, ["DCU", "AMD"]).shared);
    }

    #[test]
    fn only_vendors_reading_a_resource_are_asked() {
        let reg = VendorRegistry::from_config(&DeviceConfig::default());
        let res = ["cpu".to_string(), "hygon.com/dcunum".to_string()];
        let hit: Vec<&str> = reg
            .vendors_reading(res.iter())
            .iter()
            .map(|v| v.common_word())
            .collect();
        assert_eq!(hit, ["DCU"]);
        assert!(
            reg.vendors_reading(["memory".to_string()].iter())
                .is_empty()
        );
    }
}
