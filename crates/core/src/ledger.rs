//! The allocation ledger: one record per pod UID, and per-node device usage kept up to
//! date incrementally from it (invariant 1, `docs/architecture.md#invariants`).
//!
//! Usage = inventory − Σ records. Applying or deleting a pod touches only the devices
//! it holds, so the placement engine reads usage without rescanning pods.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::accounting::{DeviceCharge, collapse_vendor};
use crate::annotations as keys;
use crate::codec::topology::PairScores;
use crate::codec::{
    CodecError, decode_pod_single_device, decode_topology_scores, parse_device_cordon,
};
use crate::fit::{DeviceFacts, DeviceSet};
use crate::frag::live::{NodeFragCache, free_share};
use crate::frag::pairing::FreeShares;
use crate::model::{DeviceInfo, DeviceUsage, PodSingleDevice};
use crate::pod;
use crate::quota::NamespaceUse;
use crate::request::ContainerKind;
use crate::resources::Resources;
use crate::score::{Usage, node_score};
use crate::vendor::{NodeView, VendorRegistry};

pub mod changes;
mod pod_table;

use changes::{Change, Journal};
use pod_table::PodTable;

/// The devices one vendor registered on a node.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VendorDevices {
    pub vendor: String,
    pub devices: Vec<DeviceInfo>,
}

/// A node's registered devices and the node-level settings that affect placement.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeInventory {
    /// Sorted by vendor key.
    pub vendors: Vec<VendorDevices>,
    /// `hami.io/device-cordon`.
    pub cordon: BTreeSet<String>,
    /// `hami.io/node-nvidia-score`.
    pub pair_scores: PairScores,
}

/// A node annotation (or capacity) that could not be used, for the caller to log and
/// to report in `FailedNodes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryIssue {
    /// The vendor whose devices it concerns.
    pub vendor: String,
    /// Where the bad value is (`hami.io/node-dcu-register`, `capacity cambricon.com/...`).
    pub annotation: String,
    pub error: String,
    /// The vendor's devices on the node are out of scheduling because of it (a
    /// duplicate device only drops the duplicate).
    pub blocking: bool,
}

/// Why a node that registered no usable device cannot take a pod, as FailedNodes and
/// `hamictl explain` word it: the first annotation that could not be read, if any, else
/// HAMi's `node unregistered`.
pub fn unregistered_reason(first_issue: Option<&InventoryIssue>) -> String {
    match first_issue {
        Some(issue) => format!(
            "{}: {} is invalid: {}",
            crate::reason::NODE_UNREGISTERED,
            issue.annotation,
            issue.error
        ),
        None => crate::reason::NODE_UNREGISTERED.to_string(),
    }
}

impl NodeInventory {
    /// Reads a node's annotations only (snapshots and tests without node capacity);
    /// see [`NodeInventory::from_node`].
    pub fn from_annotations(
        annotations: &BTreeMap<String, String>,
        registry: &VendorRegistry,
    ) -> (Self, Vec<InventoryIssue>) {
        Self::from_node(&NodeView::annotations_only("", annotations), registry)
    }

    /// Reads a node's devices, vendor by vendor. A vendor whose register value does not
    /// decode contributes no devices (and a blocking issue), so a corrupt value never
    /// half-registers and never touches another vendor's devices.
    pub fn from_node(
        node: &NodeView<'_>,
        registry: &VendorRegistry,
    ) -> (Self, Vec<InventoryIssue>) {
        let annotations = node.annotations;
        let mut issues = Vec::new();
        let mut vendors = Vec::new();
        let mut pair_scores = PairScores::default();
        for v in registry.vendors() {
            let source = v.inventory_source().describe();
            match v.decode_inventory(node) {
                None => {}
                Some(Ok(devices)) => {
                    let mut devices = dedup_devices(devices, v.common_word(), &source, &mut issues);
                    DeviceInfo::share_strings(&mut devices);
                    if !devices.is_empty() {
                        vendors.push(VendorDevices {
                            vendor: v.common_word().to_string(),
                            devices,
                        });
                    }
                }
                Some(Err(e)) => issues.push(InventoryIssue {
                    vendor: v.common_word().to_string(),
                    annotation: source,
                    error: e.to_string(),
                    blocking: true,
                }),
            }
            let Some(key) = v.pair_score_annotation() else {
                continue;
            };
            if let Some(value) = annotations.get(key) {
                match decode_topology_scores(value) {
                    Ok(s) => pair_scores = PairScores::new(&s),
                    Err(e) => issues.push(InventoryIssue {
                        vendor: v.common_word().to_string(),
                        annotation: key.to_string(),
                        error: e.to_string(),
                        blocking: false,
                    }),
                }
            }
        }
        let cordon = annotations
            .get(keys::DEVICE_CORDON)
            .map(|v| parse_device_cordon(v))
            .unwrap_or_default();
        (
            NodeInventory {
                vendors,
                cordon,
                pair_scores,
            },
            issues,
        )
    }
}

/// Two registrations of one UUID would let two pods book "different" devices that are
/// the same card: keep the first, report the rest.
fn dedup_devices(
    devices: Vec<DeviceInfo>,
    vendor: &str,
    source: &str,
    issues: &mut Vec<InventoryIssue>,
) -> Vec<DeviceInfo> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(devices.len());
    for d in devices {
        if seen.insert(d.id.clone()) {
            out.push(d);
        } else {
            issues.push(InventoryIssue {
                vendor: vendor.to_string(),
                annotation: source.to_string(),
                error: format!("device {} registered twice; the duplicate is ignored", d.id),
                blocking: false,
            });
        }
    }
    out
}

/// What one pod holds, on which node.
///
/// Strings are shared (`Arc<str>`): the ledger interns namespaces, node names and device
/// UUIDs, so tens of thousands of records cost little more than their numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRecord {
    pub uid: Arc<str>,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub node: Arc<str>,
    pub charges: Vec<DeviceCharge>,
}

/// Why a pod's allocation annotations could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodRecordError {
    #[error("pod {namespace}/{name} has no metadata.uid")]
    MissingUid { namespace: String, name: String },
    #[error("pod {namespace}/{name}: annotation {annotation} is invalid: {error}")]
    BadAnnotation {
        namespace: String,
        name: String,
        annotation: String,
        error: Box<CodecError>,
    },
}

impl PodRecord {
    /// The pod's holding from its annotations, or `None` if it holds nothing: not
    /// placed by us, or terminated (Succeeded/Failed). Terminating pods still hold.
    pub fn from_pod(pod: &Pod, registry: &VendorRegistry) -> Result<Option<Self>, PodRecordError> {
        let meta = &pod.metadata;
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let Some(annotations) = &meta.annotations else {
            return Ok(None);
        };
        let Some(node) = annotations.get(keys::VGPU_NODE).filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        if pod::is_terminal(pod) {
            return Ok(None);
        }
        let Some(uid) = meta.uid.clone().filter(|u| !u.is_empty()) else {
            return Err(PodRecordError::MissingUid { namespace, name });
        };
        let kinds = container_kinds(pod);
        let mut charges = Vec::new();
        for v in registry.vendors() {
            let Some(value) = annotations.get(v.allocated_annotation()) else {
                continue;
            };
            let devices =
                decode_pod_single_device(value).map_err(|error| PodRecordError::BadAnnotation {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    annotation: v.allocated_annotation().to_string(),
                    error: Box::new(error),
                })?;
            charges.extend(collapse_vendor(v.common_word(), &devices, &kinds));
        }
        Ok(Some(PodRecord {
            uid: uid.into(),
            namespace: namespace.into(),
            name: name.into(),
            node: node.as_str().into(),
            charges,
        }))
    }

    /// The holding of a placement decision (a reservation, before the pod is bound).
    pub fn from_devices(
        uid: &str,
        namespace: &str,
        name: &str,
        node: &str,
        devices: &BTreeMap<String, PodSingleDevice>,
        kinds: &[ContainerKind],
    ) -> Self {
        PodRecord {
            uid: uid.into(),
            namespace: namespace.into(),
            name: name.into(),
            node: node.into(),
            charges: devices
                .iter()
                .flat_map(|(vendor, d)| collapse_vendor(vendor, d, kinds))
                .collect(),
        }
    }
}

/// Allocation annotations of vendors `registry` does not serve (a family switched off,
/// or one hami-rs does not know): the keys, for a warning. Their devices are not
/// accounted.
pub fn unknown_allocations(
    annotations: &BTreeMap<String, String>,
    registry: &VendorRegistry,
) -> Vec<String> {
    annotations
        .keys()
        .filter(|k| {
            let rest = k.strip_prefix("hami.io/").unwrap_or_default();
            (rest.ends_with("-devices-allocated") || rest.ends_with("-allocated"))
                && !registry
                    .vendors()
                    .iter()
                    .any(|v| v.allocated_annotation() == k.as_str())
        })
        .cloned()
        .collect()
}

/// Container kinds of a pod in annotation order (init containers first).
pub fn container_kinds(pod: &Pod) -> Vec<ContainerKind> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(ContainerKind::of_init);
    init.chain(spec.containers.iter().map(|_| ContainerKind::App))
        .collect()
}

/// A node's CPU and memory as kube-scheduler counts them: what it has for pods and what
/// the pods bound (or reserved) there request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeResources {
    /// `status.allocatable`; `None` while unknown.
    pub allocatable: Option<Resources>,
    pub requested: Resources,
}

impl NodeResources {
    /// Allocatable less requested, when the allocatable amounts are known.
    pub fn free(&self) -> Option<Resources> {
        self.allocatable.map(|a| a.saturating_sub(self.requested))
    }

    fn is_empty(&self) -> bool {
        self.allocatable.is_none() && self.requested == Resources::ZERO
    }
}

/// Pod shapes whose frag node scores a node remembers by default
/// ([`Ledger::set_score_cache_capacity`]).
pub const DEFAULT_SCORE_CACHE_CAPACITY: usize = 32;

/// One node as the placement engine reads it.
#[derive(Debug, Clone)]
pub struct NodeState {
    /// The ledger's interned name (the same string as its key and its pods' `node`).
    name: Arc<str>,
    /// Shared with whoever registered it (the extender keeps it to restore a vendor
    /// taken out of scheduling).
    inventory: Arc<NodeInventory>,
    /// Per vendor group, per device.
    usage: Vec<Vec<Usage>>,
    facts: Vec<Vec<DeviceFacts>>,
    /// [`node_score`] of the current usage, kept up to date as pods come and go: every
    /// placement reads it for every candidate.
    score: f32,
    /// CPU and memory.
    resources: NodeResources,
    /// Scores of the `frag` policies for the node as it is; cleared on every change.
    frag: NodeFragCache,
}

impl NodeState {
    fn new(name: Arc<str>, inventory: Arc<NodeInventory>, resources: NodeResources) -> Self {
        let usage = inventory
            .vendors
            .iter()
            .map(|vd| vec![Usage::default(); vd.devices.len()])
            .collect();
        let facts = inventory
            .vendors
            .iter()
            .map(|vd| {
                vd.devices
                    .iter()
                    .map(|d| DeviceFacts::of(d, &vd.vendor))
                    .collect()
            })
            .collect();
        let mut state = NodeState {
            name,
            inventory,
            usage,
            facts,
            score: 0.0,
            resources,
            frag: NodeFragCache::default(),
        };
        state.rescore();
        state
    }

    /// CPU and memory of the node.
    pub fn resources(&self) -> NodeResources {
        self.resources
    }

    /// The `frag` policies' cache for this node as it is now.
    pub fn frag_cache(&self) -> &NodeFragCache {
        &self.frag
    }

    /// Type of the node's first device: the node's GPU model for the `frag` policies.
    pub fn primary_device_type(&self) -> Option<&str> {
        self.inventory
            .vendors
            .iter()
            .flat_map(|v| v.devices.first())
            .map(|d| &*d.dev_type)
            .next()
    }

    fn rescore(&mut self) {
        self.score = node_score(
            self.inventory
                .vendors
                .iter()
                .zip(&self.usage)
                .flat_map(|(vd, us)| vd.devices.iter().zip(us.iter())),
        );
    }

    /// HAMi's node score (how full its devices are) for the current usage.
    pub fn score(&self) -> f32 {
        self.score
    }

    /// Where the device with this UUID is (group, index). Nodes have a handful of
    /// devices: a scan is cheaper than an index kept per node.
    fn position(&self, uuid: &str) -> Option<(usize, usize)> {
        self.inventory
            .vendors
            .iter()
            .enumerate()
            .find_map(|(g, vd)| {
                vd.devices
                    .iter()
                    .position(|d| &*d.id == uuid)
                    .map(|i| (g, i))
            })
    }

    /// The registered UUID string of the device with this UUID, to share.
    fn device_id(&self, uuid: &str) -> Option<&Arc<str>> {
        self.position(uuid)
            .map(|(g, i)| &self.inventory.vendors[g].devices[i].id)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The vendor whose device has this UUID on this node.
    pub fn vendor_of(&self, uuid: &str) -> Option<&str> {
        self.position(uuid)
            .map(|(g, _)| self.inventory.vendors[g].vendor.as_str())
    }

    pub fn inventory(&self) -> &NodeInventory {
        &self.inventory
    }

    /// The inventory itself, shared: a copy that costs one reference count.
    pub fn shared_inventory(&self) -> &Arc<NodeInventory> {
        &self.inventory
    }

    /// The vendor's devices and their usage, if the node has any.
    pub fn vendor(&self, vendor: &str) -> Option<(&[DeviceInfo], &[Usage])> {
        self.group(vendor).map(|g| {
            (
                self.inventory.vendors[g].devices.as_slice(),
                self.usage[g].as_slice(),
            )
        })
    }

    /// Position of the vendor's group.
    pub fn group(&self, vendor: &str) -> Option<usize> {
        self.inventory
            .vendors
            .iter()
            .position(|v| v.vendor == vendor)
    }

    /// The vendor group's devices as the fit reads them.
    pub fn device_set(&self, group: usize) -> Option<DeviceSet<'_>> {
        Some(DeviceSet {
            infos: &self.inventory.vendors.get(group)?.devices,
            facts: self.facts.get(group)?,
            cordon: &self.inventory.cordon,
            pair_scores: &self.inventory.pair_scores,
        })
    }

    /// Usage of a vendor group's devices.
    pub fn group_usage(&self, group: usize) -> &[Usage] {
        self.usage.get(group).map_or(&[], Vec::as_slice)
    }

    /// Every device with its usage, for scores, metrics and display.
    pub fn groups(&self) -> impl Iterator<Item = (&VendorDevices, &[Usage])> {
        self.inventory
            .vendors
            .iter()
            .zip(self.usage.iter().map(Vec::as_slice))
    }

    /// Free share of every device (milli-GPU, [`free_share`]), in group order.
    pub fn free_shares(&self) -> impl Iterator<Item = i32> + '_ {
        self.groups()
            .flat_map(|(vd, us)| vd.devices.iter().zip(us).map(|(d, u)| free_share(d, u)))
    }

    /// HAMi's `DeviceUsage` view of every device.
    pub fn device_usage(&self) -> Vec<DeviceUsage> {
        self.groups()
            .flat_map(|(vd, us)| {
                vd.devices.iter().zip(us).map(|(d, u)| DeviceUsage {
                    used: u.used,
                    mem_used: u.mem_used,
                    cores_used: u.cores_used,
                    ..DeviceUsage::idle(d)
                })
            })
            .collect()
    }

    /// Adds (or with `sign = false` removes) charges; returns UUIDs not on this node.
    /// `shares`, when given, follows the free share of every device charged.
    fn charge(
        &mut self,
        charges: &[DeviceCharge],
        add: bool,
        mut shares: Option<&mut FreeShares>,
    ) -> Vec<String> {
        let mut unknown = Vec::new();
        for c in charges {
            match self.position(&c.uuid) {
                Some((g, i)) => {
                    let info = &self.inventory.vendors[g].devices[i];
                    let u = &mut self.usage[g][i];
                    let before = free_share(info, u);
                    if add {
                        u.add(c.slots, c.mem, c.cores);
                    } else {
                        u.sub(c.slots, c.mem, c.cores);
                    }
                    if let Some(h) = shares.as_deref_mut() {
                        h.moved(before, free_share(info, u));
                    }
                }
                None => unknown.push(c.uuid.to_string()),
            }
        }
        self.rescore();
        self.frag.clear();
        unknown
    }
}

/// What applying a pod record found worth logging.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApplyReport {
    /// Devices the pod holds that its node does not (or not yet) register.
    pub unknown_devices: Vec<String>,
    /// The node the pod points at is not (yet) known.
    pub unknown_node: bool,
}

/// Pod records and the node usage derived from them.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    /// Hashed: the placement engine looks every candidate up by name. Keyed by the
    /// node's interned name.
    nodes: FxHashMap<Arc<str>, NodeState>,
    /// Keyed by the record's own UID: a table of records alone, without a key beside
    /// each (16 bytes a pod; `docs/extender.md#memory`).
    pods: PodTable,
    /// The UIDs of each node's records, unordered: a node holds a few dozen pods at
    /// most, and a list costs a third of a hash set (`docs/extender.md#memory`).
    pods_by_node: FxHashMap<Arc<str>, Vec<Arc<str>>>,
    /// Namespaces, node names and device UUIDs the records share.
    interned: FxHashSet<Arc<str>>,
    /// Records removed since unused interned strings were last dropped.
    removed_since_prune: usize,
    /// CPU and memory per node, also of nodes not (or not yet) registered.
    resources: FxHashMap<Arc<str>, NodeResources>,
    /// Pod shapes whose frag scores each node remembers; `None` = the default.
    score_cache_capacity: Option<usize>,
    /// Per namespace, per vendor: what its pods hold, for ResourceQuota.
    namespaces: FxHashMap<Arc<str>, FxHashMap<Arc<str>, NamespaceUse>>,
    /// Nodes and pods changed, for readers that keep a copy in step ([`Ledger::changes_since`]).
    changes: Journal,
    /// Every registered device's free share, for the `frag` pairing term.
    free_shares: FreeShares,
}

/// Removals between two sweeps of interned strings nobody uses any more (deleted nodes
/// and namespaces would otherwise stay for the life of the process).
const PRUNE_EVERY: usize = 8192;

impl Ledger {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers or replaces a node's inventory; its usage is rebuilt from the pods
    /// recorded on it (only this node's pods are visited).
    pub fn set_node(&mut self, name: &str, inventory: impl Into<Arc<NodeInventory>>) {
        let inventory = inventory.into();
        if self
            .nodes
            .get(name)
            .is_some_and(|n| Arc::ptr_eq(&n.inventory, &inventory) || n.inventory == inventory)
        {
            return;
        }
        let resources = self.resources.get(name).copied().unwrap_or_default();
        let name = self.intern(name);
        let mut state = NodeState::new(name.clone(), inventory, resources);
        if let Some(uids) = self.pods_by_node.get(&name) {
            for uid in uids {
                if let Some(rec) = self.pods.get(uid) {
                    state.charge(&rec.charges, true, None);
                }
            }
        }
        for share in state.free_shares() {
            self.free_shares.add(share);
        }
        if let Some(old) = self.nodes.insert(name.clone(), state) {
            for share in old.free_shares() {
                self.free_shares.remove(share);
            }
        }
        self.changes.push(Change::Node(name));
    }

    /// Forgets a node. Its pods stay recorded and count again if it comes back.
    pub fn remove_node(&mut self, name: &str) -> bool {
        let Some(old) = self.nodes.remove(name) else {
            return false;
        };
        for share in old.free_shares() {
            self.free_shares.remove(share);
        }
        self.node_changed(name);
        true
    }

    fn node_changed(&mut self, name: &str) {
        let name = self.intern(name);
        self.changes.push(Change::Node(name));
    }

    /// The nodes and pods changed since `seq` (a value of [`Ledger::next_change`]), in
    /// order, repeats included; `None` when the ledger no longer knows them all (too far
    /// behind, or cleared): the reader must then copy every node and pod.
    pub fn changes_since(&self, seq: u64) -> Option<&[Change]> {
        self.changes.since(seq)
    }

    /// What a reader that has just copied the ledger passes to [`Ledger::changes_since`]
    /// next time.
    pub fn next_change(&self) -> u64 {
        self.changes.next()
    }

    /// Records a pod's holding, replacing any earlier record for the same UID.
    /// Applying the same record twice changes nothing.
    pub fn apply_pod(&mut self, mut record: PodRecord) -> ApplyReport {
        if self.pods.get(&record.uid) == Some(&record) {
            return ApplyReport::default();
        }
        self.remove_pod(&record.uid);
        record.namespace = self.intern(&record.namespace);
        record.node = self.intern(&record.node);
        for c in &mut record.charges {
            // The node's own UUID string where it registers the device (one allocation per
            // device, whatever the number of pods on it), interned where it does not (yet).
            let registered = self
                .nodes
                .get(&*record.node)
                .and_then(|n| n.device_id(&c.uuid))
                .cloned();
            c.uuid = match registered {
                Some(id) => id,
                None => self.intern(&c.uuid),
            };
            c.vendor = self.intern(&c.vendor);
        }
        self.charge_namespace(&record, true);
        // Records live as long as their pods; `extend` leaves room for four charges.
        record.charges.shrink_to_fit();
        let mut report = ApplyReport::default();
        match self.nodes.get_mut(&*record.node) {
            Some(node) => {
                report.unknown_devices =
                    node.charge(&record.charges, true, Some(&mut self.free_shares));
                self.changes.push(Change::Node(record.node.clone()));
            }
            None => report.unknown_node = true,
        }
        self.changes.push(Change::Pod(record.uid.clone()));
        // Not there: `remove_pod` above took out any earlier record of this UID.
        self.pods_by_node
            .entry(record.node.clone())
            .or_default()
            .push(record.uid.clone());
        self.pods.insert(record);
        report
    }

    /// Adds (or removes) a record's charges to its namespace's use.
    fn charge_namespace(&mut self, rec: &PodRecord, add: bool) {
        if rec.charges.is_empty() {
            return;
        }
        let vendors = self.namespaces.entry(rec.namespace.clone()).or_default();
        for c in &rec.charges {
            let u = vendors.entry(c.vendor.clone()).or_default();
            if add {
                u.memory = u.memory.saturating_add(c.mem);
                u.cores = u.cores.saturating_add(c.cores);
            } else {
                u.memory = u.memory.saturating_sub(c.mem);
                u.cores = u.cores.saturating_sub(c.cores);
            }
        }
        if !add {
            vendors.retain(|_, u| *u != NamespaceUse::default());
            if vendors.is_empty() {
                self.namespaces.remove(&rec.namespace);
            }
        }
    }

    /// What the namespace's pods hold of the vendor's devices (reservations included),
    /// kept up to date as records come and go.
    pub fn namespace_use(&self, namespace: &str, vendor: &str) -> NamespaceUse {
        self.namespaces
            .get(namespace)
            .and_then(|v| v.get(vendor))
            .copied()
            .unwrap_or_default()
    }

    /// Every namespace's use per vendor: (namespace, vendor, use).
    pub fn namespace_uses(&self) -> impl Iterator<Item = (&str, &str, NamespaceUse)> {
        self.namespaces
            .iter()
            .flat_map(|(ns, v)| v.iter().map(move |(vendor, u)| (&**ns, &**vendor, *u)))
    }

    /// Recomputes a namespace's use from the records; for tests that check the incremental
    /// bookkeeping against the definition.
    pub fn recomputed_namespace_use(&self, namespace: &str, vendor: &str) -> NamespaceUse {
        let mut u = NamespaceUse::default();
        for c in self
            .pods
            .values()
            .filter(|r| &*r.namespace == namespace)
            .flat_map(|r| &r.charges)
            .filter(|c| &*c.vendor == vendor)
        {
            u.memory += c.mem;
            u.cores += c.cores;
        }
        u
    }

    /// A shared copy of `s`: the same allocation for every record that names it.
    pub fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.interned.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.interned.insert(a.clone());
        a
    }

    /// Releases a pod's holding. Deleting an unknown UID is a no-op.
    pub fn remove_pod(&mut self, uid: &str) -> Option<PodRecord> {
        let rec = self.pods.remove(uid)?;
        self.removed_since_prune += 1;
        if self.removed_since_prune >= PRUNE_EVERY {
            self.removed_since_prune = 0;
            // Still referenced by a record besides the set itself, or dropped.
            self.interned.retain(|a| Arc::strong_count(a) > 1);
        }
        if let Some(node) = self.nodes.get_mut(&*rec.node) {
            node.charge(&rec.charges, false, Some(&mut self.free_shares));
            self.changes.push(Change::Node(rec.node.clone()));
        }
        self.changes.push(Change::Pod(rec.uid.clone()));
        self.charge_namespace(&rec, false);
        if let Some(uids) = self.pods_by_node.get_mut(&rec.node) {
            // The record's own UID string is the one in the list.
            if let Some(at) = uids.iter().position(|u| Arc::ptr_eq(u, &rec.uid)) {
                uids.swap_remove(at);
            }
            if uids.is_empty() {
                self.pods_by_node.remove(&rec.node);
            }
        }
        Some(rec)
    }

    /// Sets a node's allocatable CPU and memory (`None`: unknown, e.g. deleted).
    pub fn set_node_allocatable(&mut self, name: &str, allocatable: Option<Resources>) {
        self.update_resources(name, |r| r.allocatable = allocatable);
    }

    /// Adds `delta` to what the pods on a node request (subtracts with `add = false`).
    pub fn add_node_requests(&mut self, name: &str, delta: Resources, add: bool) {
        if delta == Resources::ZERO {
            return;
        }
        self.update_resources(name, |r| {
            r.requested = if add {
                r.requested.saturating_add(delta)
            } else {
                r.requested.saturating_sub(delta)
            }
        });
    }

    fn update_resources(&mut self, name: &str, change: impl FnOnce(&mut NodeResources)) {
        let key = match self.resources.get_key_value(name) {
            Some((k, _)) => k.clone(),
            None => self.intern(name),
        };
        let entry = self.resources.entry(key.clone()).or_default();
        let before = *entry;
        change(entry);
        let now = *entry;
        if now.is_empty() {
            self.resources.remove(&key);
        }
        if now != before
            && let Some(node) = self.nodes.get_mut(name)
        {
            node.resources = now;
            node.frag.clear();
        }
    }

    /// A node's CPU and memory, registered or not.
    pub fn node_resources(&self, name: &str) -> NodeResources {
        self.resources.get(name).copied().unwrap_or_default()
    }

    /// Pod shapes whose `frag` node scores each node remembers (memory: about 16 bytes
    /// each per node); the engine drops a node's entries when it reaches this many.
    pub fn score_cache_capacity(&self) -> usize {
        self.score_cache_capacity
            .unwrap_or(DEFAULT_SCORE_CACHE_CAPACITY)
    }

    /// Sets [`Ledger::score_cache_capacity`]: larger for callers placing many different
    /// pod shapes on few nodes (simulations), 0 to cache nothing.
    pub fn set_score_cache_capacity(&mut self, capacity: usize) {
        self.score_cache_capacity = Some(capacity);
    }

    /// Drops everything (before a full relist) but its settings.
    pub fn clear(&mut self) {
        let mut changes = std::mem::take(&mut self.changes);
        changes.reset();
        *self = Ledger {
            score_cache_capacity: self.score_cache_capacity,
            changes,
            ..Ledger::default()
        };
    }

    pub fn node(&self, name: &str) -> Option<&NodeState> {
        self.nodes.get(name)
    }

    /// Nodes in no particular order (cheaper than [`Ledger::nodes`]).
    pub fn nodes_unordered(&self) -> impl Iterator<Item = &NodeState> {
        self.nodes.values()
    }

    /// Nodes in name order.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeState> {
        let mut nodes: Vec<&NodeState> = self.nodes.values().collect();
        nodes.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        nodes.into_iter()
    }

    pub fn pod(&self, uid: &str) -> Option<&PodRecord> {
        self.pods.get(uid)
    }

    pub fn pods(&self) -> impl Iterator<Item = &PodRecord> {
        self.pods.values()
    }

    /// How many pods hold devices on `node`.
    pub fn pod_count_on(&self, node: &str) -> usize {
        self.pods_by_node.get(node).map_or(0, |s| s.len())
    }

    /// The records of the pods holding devices on `node`, by namespace and name.
    pub fn pods_on(&self, node: &str) -> Vec<&PodRecord> {
        let mut pods: Vec<&PodRecord> = self
            .pods_by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.pods.get(uid))
            .collect();
        pods.sort_unstable_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        pods
    }

    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Recomputes a node's usage from scratch; for tests that check the incremental
    /// bookkeeping against the definition.
    pub fn recomputed_usage(&self, name: &str) -> Option<Vec<Vec<Usage>>> {
        let node = self.nodes.get(name)?;
        let mut fresh = NodeState::new(node.name.clone(), node.inventory.clone(), node.resources);
        for rec in self.pods.values().filter(|r| &*r.node == name) {
            fresh.charge(&rec.charges, true, None);
        }
        Some(fresh.usage)
    }

    /// How many registered devices have each free share (milli-GPU), kept as pods and
    /// nodes come and go: the cluster's holes for the `frag` pairing term
    /// (`docs/simulator.md#supply-aware-pairing`).
    pub fn free_shares(&self) -> &FreeShares {
        &self.free_shares
    }

    /// [`Ledger::free_shares`] recomputed from every node; for tests that check the
    /// incremental bookkeeping against the definition.
    pub fn recomputed_free_shares(&self) -> FreeShares {
        FreeShares::of(self.nodes.values().flat_map(NodeState::free_shares))
    }

    /// The current usage of a node, per vendor group.
    pub fn usage(&self, name: &str) -> Option<&[Vec<Usage>]> {
        self.nodes.get(name).map(|n| n.usage.as_slice())
    }
}
