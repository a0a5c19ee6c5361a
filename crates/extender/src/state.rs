//! The extender's state: node inventories and the allocation ledger, fed by watch events
//! and by the extender's own decisions. Pure (no I/O, no clock of its own: callers pass
//! `now`), so the rules below are unit-tested without an API server.
//!
//! Which pods hold devices (invariant 1, `docs/architecture.md#invariants`): what a
//! pod's own object says, by the rule `hamictl explain` applies to snapshots too
//! ([`hami_core::holding`]: bound pods hold until they terminate, unbound ones until
//! `hami.io/vgpu-time` + the reservation timeout, pods bound elsewhere nothing), plus
//! what only this process knows:
//! - a pod this process **reserved** in /filter holds its devices at once, before the
//!   annotations reach the API server, until the pod's own annotations show the same
//!   decision (then it is an annotated pod like any other), the reservation is abandoned
//!   (bind failed, re-filtered) or it expires unbound;
//! - a decision this process **abandoned** does not count again while the pod stays
//!   unbound, even if its annotations still show it;
//! - a pod in the middle of **/bind** keeps its hold whatever its age.
//!
//! Memory: a cluster of 5,000 nodes and 50,000 pods must fit in a few tens of MiB, so
//! what a pod holds lives once, in the ledger (with interned strings); the per-pod
//! entry here keeps only a hash of the decision and a few numbers.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use hami_core::annotations as keys;
use hami_core::engine::PlanError;
use hami_core::frag::live::FragModel;
use hami_core::frag::observed::PodShape;
use hami_core::frag::pairing::Pairing;
use hami_core::holding::{self, Expiry, Standing};
use hami_core::ledger::{
    ApplyReport, InventoryIssue, Ledger, NodeInventory, PodRecord, PodRecordError,
};
use hami_core::model::PodSingleDevice;
use hami_core::quota::{QuotaBook, QuotaBudget};
use hami_core::request::{ContainerKind, plain_integer};
use hami_core::resources::{QuantityError, Resources, node_allocatable, pod_requests};
use hami_core::vendor::{InventorySource, NodeView, VendorRegistry};
use k8s_openapi::api::core::v1::{Node, Pod};
use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::Value;

use crate::frag_workload::LiveFrag;
use crate::pod_resources::{PodRequestsSeen, PodResourceBook};
use crate::unschedulable::{Refusal, Unschedulable};

/// Abandoned decisions remembered per pod.
const MAX_ABANDONED: usize = 8;

/// What a node looks like to the extender.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeEntry {
    pub uid: Option<String>,
    /// Devices as registered (before health filtering); shared with the ledger while
    /// every vendor is healthy.
    pub inventory: Arc<NodeInventory>,
    /// Register annotations that could not be used.
    pub issues: Vec<InventoryIssue>,
    /// Hash of the annotations the inventory is decoded from (register annotations,
    /// cordon, topology scores), to tell a new registration from a repeat.
    shaping: u64,
    /// Per vendor the node shows anything of ([`NodeEntry::vendor`]).
    vendors: Vec<(u16, VendorNode)>,
    /// `hami.io/mutex.lock`, raw.
    pub lock: Option<String>,
    /// `metadata.resourceVersion` of the node object the fields above were read from: a
    /// lock write guarded by it is refused (409) if the node changed since
    /// (`docs/extender.md#flow`).
    pub resource_version: Option<String>,
    /// Vendors whose device plugin is judged not to be reporting, with the reason.
    pub unhealthy: BTreeMap<String, String>,
}

impl NodeEntry {
    /// What the vendor at `index` in the registry shows on the node (nothing set when it
    /// shows nothing). Only vendors with something to show are stored: a registry has
    /// about fifteen vendors and a node usually one, and 5,000 nodes of fifteen empty
    /// entries each cost 5 MiB (`docs/extender.md#memory`).
    pub fn vendor(&self, index: usize) -> &VendorNode {
        self.vendors
            .iter()
            .find(|(i, _)| usize::from(*i) == index)
            .map_or(&NO_VENDOR, |(_, v)| v)
    }
}

/// A vendor the node shows nothing of.
static NO_VENDOR: VendorNode = VendorNode {
    registration: None,
    handshake: None,
    allocatable: None,
    capacity: None,
};

/// What one vendor's device plugin shows on a node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VendorNode {
    /// Hash of the register annotation (a changed one proves the plugin alive).
    pub registration: Option<u64>,
    /// Raw handshake annotation, for vendors that have one.
    pub handshake: Option<Box<str>>,
    /// `status.allocatable[<count resource>]`, when present.
    pub allocatable: Option<i64>,
    /// `status.capacity[<count resource>]`, when present (the liveness signal of vendors
    /// without a handshake).
    pub capacity: Option<i64>,
}

/// A placement decision as it shows in pod annotations (node, decision time, device
/// strings), hashed with this process's random key.
type Signature = u64;

#[derive(Debug, Clone, PartialEq)]
enum Holding {
    None,
    /// Made by /filter in this process; authoritative until the annotations catch up.
    Reserved {
        sig: Signature,
        node: Arc<str>,
        at: i64,
        epoch: u64,
    },
    /// Read from the pod's annotations.
    Annotated {
        sig: Signature,
        node: Arc<str>,
        vgpu_time: Option<i64>,
        /// The annotations carry the bind mark (`bind-phase=allocating` and a
        /// `bind-time`): /bind need not write it ([`SchedState::bind_marked`]).
        marked: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct PodEntry {
    /// `spec.nodeName`.
    bound: Option<Arc<str>>,
    holding: Holding,
    /// Decisions this process gave up on (re-filtered, bind failed, expired): annotations
    /// still showing one of them do not count while the pod is unbound, since their
    /// devices may already be someone else's.
    abandoned: Vec<Signature>,
}

impl PodEntry {
    fn new() -> Self {
        PodEntry {
            bound: None,
            holding: Holding::None,
            abandoned: Vec::new(),
        }
    }
}

/// What applying a pod event found worth logging.
#[derive(Debug, Default)]
pub struct PodApplied {
    pub error: Option<PodRecordError>,
    pub report: ApplyReport,
    /// The pod is bound to another node than the one its annotations name.
    pub bound_elsewhere: Option<(String, String)>,
    /// The pod's CPU or memory requests do not parse: it counts as requesting none.
    pub resources_error: Option<QuantityError>,
    /// The pod's requests could not be read for the typical workload: not counted there.
    pub shape_error: Option<PlanError>,
}

/// /filter's decision for a pod, as [`SchedState::reserve`] records it.
#[derive(Debug, Clone, Copy)]
pub struct Reservation<'a> {
    pub uid: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub node: &'a str,
    /// Per vendor, per container: the devices chosen.
    pub devices: &'a BTreeMap<String, PodSingleDevice>,
    /// Container kinds in annotation order (how the devices collapse per pod).
    pub kinds: &'a [ContainerKind],
    /// The annotations that will be written into the pod (the decision's signature).
    pub annotations: &'a BTreeMap<String, String>,
    /// When the decision was made (unix seconds).
    pub at: i64,
}

/// A pod whose hold ended by timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// True for a reservation this process made, false for a stale annotated pod.
    pub reservation: bool,
}

/// Nodes, pods and the ledger derived from them.
#[derive(Debug)]
pub struct SchedState {
    registry: VendorRegistry,
    ledger: Ledger,
    nodes: BTreeMap<String, NodeEntry>,
    pods: FxHashMap<Arc<str>, PodEntry>,
    /// Pods that hold devices while unbound (expiry candidates).
    unbound_holders: FxHashSet<Arc<str>>,
    /// Pods in the middle of /bind: their hold does not expire under them.
    binding: FxHashSet<Arc<str>>,
    reservation_ttl: i64,
    /// Bumped when a pod relist starts; reservations made since survive its end.
    epoch: u64,
    nodes_synced: bool,
    pods_synced: bool,
    /// Keys the signature hash: annotations cannot be crafted to collide with a
    /// decision of this process.
    hasher: RandomState,
    /// CPU and memory requests of every pod, summed per node into the ledger.
    resources: PodResourceBook,
    /// The typical workload of the `frag` policies.
    frag: LiveFrag,
    /// Pods /filter refused, until they are placed, bound or gone (the dashboard's
    /// pending pods).
    unschedulable: Unschedulable,
}

impl SchedState {
    pub fn new(registry: VendorRegistry, reservation_ttl_secs: i64) -> Self {
        SchedState {
            registry,
            ledger: Ledger::new(),
            nodes: BTreeMap::new(),
            pods: FxHashMap::default(),
            unbound_holders: FxHashSet::default(),
            binding: FxHashSet::default(),
            reservation_ttl: reservation_ttl_secs.max(1),
            epoch: 0,
            nodes_synced: false,
            pods_synced: false,
            hasher: RandomState::new(),
            resources: PodResourceBook::default(),
            frag: LiveFrag::default(),
            unschedulable: Unschedulable::default(),
        }
    }

    /// The fragmentation model the `frag` policies place with at `now`: learnt from the
    /// pods seen (`docs/extender.md#the-typical-workload`).
    pub fn frag_model(&mut self, now: i64) -> Arc<FragModel> {
        self.frag.model(&self.ledger, now)
    }

    /// The `frag` pairing term at `now`, from the same pods as [`SchedState::frag_model`].
    pub fn frag_pairing(&mut self, now: i64) -> Option<Arc<Pairing>> {
        self.frag.pairing(&self.ledger, now)
    }

    /// What `/debug/frag-workload` shows.
    pub fn frag_view(&self) -> Value {
        self.frag.view(&self.ledger)
    }

    /// Pods whose CPU and memory requests are counted (every non-terminal pod seen).
    pub fn counted_pods(&self) -> usize {
        self.resources.len()
    }

    /// Pods holding devices while unbound: reservations from /filter awaiting their
    /// bind, and unbound pods whose annotations still count until they expire.
    pub fn unbound_holders(&self) -> usize {
        self.unbound_holders.len()
    }

    pub fn registry(&self) -> &VendorRegistry {
        &self.registry
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    pub fn synced(&self) -> bool {
        self.nodes_synced && self.pods_synced
    }

    pub fn set_nodes_synced(&mut self) {
        self.nodes_synced = true;
    }

    pub fn set_pods_synced(&mut self) {
        self.pods_synced = true;
    }

    /// The signature of a set of pod annotations, or `None` without `hami.io/vgpu-node`.
    pub fn signature(&self, annotations: &BTreeMap<String, String>) -> Option<Signature> {
        let node = annotations.get(keys::VGPU_NODE).filter(|n| !n.is_empty())?;
        let mut h = self.hasher.build_hasher();
        node.hash(&mut h);
        annotations.get(keys::VGPU_TIME).hash(&mut h);
        for v in self.registry.vendors() {
            annotations.get(v.allocated_annotation()).hash(&mut h);
        }
        Some(h.finish())
    }

    // ---- nodes ----

    /// Applies a node from a watch event; returns the inventory issues when its
    /// registration changed (so they are logged once, not on every status update).
    pub fn apply_node(&mut self, node: &Node) -> Option<Vec<InventoryIssue>> {
        let name = node.metadata.name.clone().unwrap_or_default();
        if name.is_empty() {
            return None;
        }
        let view = NodeView::of(node);
        let annotations = view.annotations;
        let mut shaping = self.hasher.build_hasher();
        annotations.get(keys::DEVICE_CORDON).hash(&mut shaping);
        let mut vendors = Vec::new();
        for (index, v) in self.registry.vendors().iter().enumerate() {
            v.pair_score_annotation()
                .and_then(|k| annotations.get(k))
                .hash(&mut shaping);
            // Everything the vendor's inventory is read from: a change re-reads it.
            let mut register = self.hasher.build_hasher();
            let mut any = false;
            for input in v.inventory_inputs() {
                let value = match input {
                    InventorySource::Annotation(key) => annotations.get(key).map(String::as_str),
                    InventorySource::Capacity(resource) => view
                        .capacity
                        .and_then(|c| c.get(resource))
                        .map(|q| q.0.as_str()),
                };
                any |= value.is_some();
                value.hash(&mut register);
            }
            let register = any.then(|| register.finish());
            register.hash(&mut shaping);
            let shown = VendorNode {
                registration: register,
                handshake: v
                    .handshake_annotation()
                    .and_then(|h| annotations.get(h))
                    .map(|h| h.as_str().into()),
                allocatable: node
                    .status
                    .as_ref()
                    .and_then(|s| s.allocatable.as_ref())
                    .and_then(|a| a.get(v.count_resource()))
                    .and_then(plain_integer),
                capacity: view.capacity_of(v.count_resource()),
            };
            if shown != NO_VENDOR
                && let Ok(index) = u16::try_from(index)
            {
                vendors.push((index, shown));
            }
        }
        vendors.shrink_to_fit();
        let shaping = shaping.finish();
        let previous = self.nodes.remove(&name);
        let changed = previous.as_ref().is_none_or(|p| p.shaping != shaping);
        let (inventory, issues) = match previous {
            Some(ref p) if !changed => (p.inventory.clone(), p.issues.clone()),
            _ => {
                let (inv, issues) = NodeInventory::from_node(&view, &self.registry);
                (Arc::new(inv), issues)
            }
        };
        let entry = NodeEntry {
            uid: node.metadata.uid.clone(),
            inventory,
            issues,
            shaping,
            vendors,
            lock: annotations.get(keys::NODE_LOCK).cloned(),
            resource_version: node.metadata.resource_version.clone(),
            unhealthy: previous.map(|p| p.unhealthy).unwrap_or_default(),
        };
        let issues = changed.then(|| entry.issues.clone());
        self.nodes.insert(name.clone(), entry);
        self.refresh_ledger_node(&name);
        if changed {
            self.frag.note_registration_change();
        }
        let allocatable = node_allocatable(node).unwrap_or_else(|e| {
            tracing::warn!(node = %name, error = %e, "node allocatable unreadable; its CPU and memory count as unknown");
            None
        });
        self.ledger.set_node_allocatable(&name, allocatable);
        issues
    }

    pub fn delete_node(&mut self, name: &str) {
        self.nodes.remove(name);
        self.ledger.remove_node(name);
        self.ledger.set_node_allocatable(name, None);
        self.frag.note_registration_change();
    }

    /// After a node relist: forgets nodes that were not listed.
    pub fn retain_nodes(&mut self, listed: &HashSet<String>) {
        let gone: Vec<String> = self
            .nodes
            .keys()
            .filter(|n| !listed.contains(*n))
            .cloned()
            .collect();
        for n in gone {
            self.delete_node(&n);
        }
    }

    pub fn node(&self, name: &str) -> Option<&NodeEntry> {
        self.nodes.get(name)
    }

    pub fn nodes(&self) -> impl Iterator<Item = (&String, &NodeEntry)> {
        self.nodes.iter()
    }

    /// Marks a vendor's devices on a node usable (`None`) or not (with the reason).
    /// Returns true when that changed.
    pub fn set_vendor_health(
        &mut self,
        node: &str,
        vendor: &str,
        unhealthy: Option<String>,
    ) -> bool {
        let Some(entry) = self.nodes.get_mut(node) else {
            return false;
        };
        let changed = match unhealthy {
            Some(reason) => entry.unhealthy.insert(vendor.to_string(), reason).is_none(),
            None => entry.unhealthy.remove(vendor).is_some(),
        };
        if changed {
            self.refresh_ledger_node(node);
        }
        changed
    }

    /// The ledger sees the registered devices of healthy vendors only.
    fn refresh_ledger_node(&mut self, name: &str) {
        let Some(entry) = self.nodes.get(name) else {
            self.ledger.remove_node(name);
            return;
        };
        let inventory = if entry.unhealthy.is_empty() {
            entry.inventory.clone()
        } else {
            let mut filtered = NodeInventory::clone(&entry.inventory);
            filtered
                .vendors
                .retain(|v| !entry.unhealthy.contains_key(&v.vendor));
            Arc::new(filtered)
        };
        if inventory.vendors.is_empty() {
            self.ledger.remove_node(name);
        } else {
            self.ledger.set_node(name, inventory);
        }
    }

    /// Why a node cannot take the pod at all (for /filter's FailedNodes), when the
    /// ledger does not know it.
    pub fn unusable_reason(&self, name: &str) -> String {
        let Some(entry) = self.nodes.get(name) else {
            return "node unknown to hami-scheduler (not watched yet, deleted, or outside --node-label-selector)".into();
        };
        if let Some((vendor, why)) = entry.unhealthy.iter().next() {
            return format!("{vendor} devices unavailable: {why}");
        }
        hami_core::ledger::unregistered_reason(entry.issues.first())
    }

    /// Why the devices of one of `vendors` on a node cannot be used (the plugin is not
    /// reporting, or its registration is invalid), for FailedNodes; `None` when every
    /// vendor that has no devices there simply has none.
    pub fn vendor_unavailable(&self, name: &str, vendors: &[String]) -> Option<String> {
        let entry = self.nodes.get(name)?;
        for vendor in vendors {
            if let Some(why) = entry.unhealthy.get(vendor) {
                return Some(format!("{vendor} devices unavailable: {why}"));
            }
            if let Some(issue) = entry
                .issues
                .iter()
                .find(|i| i.blocking && &i.vendor == vendor)
            {
                return Some(format!(
                    "{vendor} devices unavailable: {} is invalid: {}",
                    issue.annotation, issue.error
                ));
            }
        }
        None
    }

    /// The vendors whose devices the pod holds (what /bind locks for).
    pub fn vendors_held(&self, uid: &str) -> Vec<String> {
        let Some(rec) = self.ledger.pod(uid) else {
            return Vec::new();
        };
        let Some(node) = self.ledger.node(&rec.node) else {
            return Vec::new();
        };
        let mut vendors: Vec<String> = rec
            .charges
            .iter()
            .filter_map(|c| node.vendor_of(&c.uuid))
            .map(String::from)
            .collect();
        vendors.sort();
        vendors.dedup();
        vendors
    }

    // ---- ResourceQuotas (`docs/protocol.md#resourcequota`) ----

    /// What the namespace's limits (in `quotas`) leave for a pod asking for these vendors,
    /// given what the namespace holds now (reservations included).
    pub fn quota_budgets(
        &self,
        quotas: &QuotaBook,
        namespace: &str,
        vendor_keys: &[String],
    ) -> BTreeMap<String, QuotaBudget> {
        if !quotas.limits_namespace(namespace) {
            return BTreeMap::new();
        }
        vendor_keys
            .iter()
            .filter_map(|key| {
                let vendor = self.registry.get(key)?;
                let used = self.ledger.namespace_use(namespace, key);
                let budget = quotas.budget(namespace, vendor.as_ref(), used)?;
                Some((key.clone(), budget))
            })
            .collect()
    }

    // ---- pods ----

    /// Applies a pod from a watch event (add, update, or relist).
    pub fn apply_pod(&mut self, pod: &Pod, now: i64) -> PodApplied {
        let mut out = PodApplied::default();
        let Some(uid_str) = pod.metadata.uid.as_deref().filter(|u| !u.is_empty()) else {
            return out;
        };
        if hami_core::pod::is_terminal(pod) {
            self.delete_pod(uid_str);
            return out;
        }
        self.count_requests(pod, uid_str, &mut out);
        if hami_core::pod::bound_node(pod).is_some() {
            self.unschedulable.forget(uid_str);
        }
        let empty = BTreeMap::new();
        let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
        let record = match PodRecord::from_pod(pod, &self.registry) {
            Ok(r) => r,
            Err(e) => {
                out.error = Some(e);
                None
            }
        };
        let sig = self.signature(annotations);
        let vgpu_time = holding::decided_at(annotations);
        let marked = crate::bind_mark::is_marked(annotations);
        let bound = hami_core::pod::bound_node(pod).map(|n| self.ledger.intern(n));
        if let (Some(b), Some(r)) = (&bound, &record)
            && *b != r.node
        {
            out.bound_elsewhere = Some((b.to_string(), r.node.to_string()));
        }
        // The record's UID becomes the key here and in the ledger: one allocation.
        let uid: Arc<str> = match &record {
            Some(r) => r.uid.clone(),
            None => self
                .pods
                .get_key_value(uid_str)
                .map_or_else(|| Arc::from(uid_str), |(k, _)| k.clone()),
        };
        let record_node = record.as_ref().map(|r| self.ledger.intern(&r.node));
        let seen_bound = bound.is_some();
        let entry = self.pods.entry(uid.clone()).or_insert_with(PodEntry::new);
        // spec.nodeName never changes once set: an older event (the watch may still be
        // behind this process's own Binding) cannot unbind the pod.
        if bound.is_some() {
            entry.bound = bound;
        }
        let keep_reservation = match &entry.holding {
            // The annotations still show an older state (the watch runs behind this
            // process's own writes): the reservation stays until they catch up.
            Holding::Reserved { sig: rsig, .. } => sig != Some(*rsig),
            _ => false,
        };
        let mut record = record;
        if keep_reservation {
            // The event's record is not the reservation's: keep the ledger as it is.
            record = None;
        } else {
            let suppressed =
                entry.bound.is_none() && sig.as_ref().is_some_and(|s| entry.abandoned.contains(s));
            entry.holding = match (sig, record_node) {
                (Some(sig), Some(node)) if !suppressed => Holding::Annotated {
                    sig,
                    node,
                    vgpu_time,
                    marked,
                },
                _ => Holding::None,
            };
        }
        out.report = self.sync(&uid, now, record);
        // Keep an entry only while it knows something the pod's next event will not say:
        // most pods never ask for a GPU, and a pod the watch shows bound to the node its
        // annotations name is fully described by its record in the ledger (no older
        // event can follow this one on the watch).
        let forgettable = self.pods.get(&uid).is_some_and(|e| {
            e.abandoned.is_empty()
                && match &e.holding {
                    Holding::None => true,
                    Holding::Annotated { node, .. } => seen_bound && e.bound.as_ref() == Some(node),
                    Holding::Reserved { .. } => false,
                }
        });
        if forgettable && !self.binding.contains(&uid) {
            self.pods.remove(&uid);
        }
        out
    }

    /// Counts the pod's CPU and memory on its node and, the first time it is seen, its
    /// shape in the typical workload.
    fn count_requests(&mut self, pod: &Pod, uid: &str, out: &mut PodApplied) {
        let requests = pod_requests(pod).unwrap_or_else(|e| {
            out.resources_error = Some(e);
            Resources::ZERO
        });
        let bound = hami_core::pod::bound_node(pod);
        let seen = PodRequestsSeen {
            uid,
            bound,
            requests,
        };
        if self.resources.apply(seen, &mut self.ledger) {
            match PodShape::of(pod, &self.registry) {
                Ok(shape) => self.frag.observe(&shape),
                Err(e) => out.shape_error = Some(e),
            }
        }
    }

    /// A pod was deleted.
    pub fn delete_pod(&mut self, uid: &str) {
        self.resources.remove(uid, &mut self.ledger);
        self.unschedulable.forget(uid);
        self.pods.remove(uid);
        self.unbound_holders.remove(uid);
        self.binding.remove(uid);
        self.ledger.remove_pod(uid);
    }

    /// A pod relist is starting: until [`SchedState::retain_pods`], a pod counts as listed
    /// once the watch shows it.
    pub fn begin_pod_relist(&mut self) {
        self.epoch += 1;
        self.resources.begin_relist();
    }

    /// After a pod relist: forgets pods that were not listed, except reservations made
    /// while the relist ran (their pods may be newer than the list). Every pod the watch
    /// shows is counted in the resource book, which marks it listed
    /// ([`PodResourceBook::listed`]).
    pub fn retain_pods(&mut self) {
        let epoch = self.epoch;
        let listed = &self.resources;
        let fresh = |uid: &str| {
            self.pods.get(uid).is_some_and(
                |e| matches!(e.holding, Holding::Reserved { epoch: re, .. } if re == epoch),
            )
        };
        // Bound pods live in the ledger alone; entries cover the rest.
        let gone: Vec<Arc<str>> = self
            .pods
            .keys()
            .chain(self.ledger.pods().map(|r| &r.uid))
            .filter(|uid| !listed.listed(uid) && !fresh(uid))
            .cloned()
            .collect();
        for uid in gone {
            self.delete_pod(&uid);
        }
        self.resources.retain_listed(&mut self.ledger);
        let listed = &self.resources;
        self.unschedulable.retain(|uid| listed.listed(uid));
    }

    /// Puts the ledger in line with whether the pod holds its devices now; `record` is
    /// what it holds when the caller has it (the ledger keeps it otherwise).
    fn sync(&mut self, uid: &Arc<str>, now: i64, record: Option<PodRecord>) -> ApplyReport {
        let Some(entry) = self.pods.get(uid) else {
            self.ledger.remove_pod(uid);
            return ApplyReport::default();
        };
        let (holds, unbound) = match &entry.holding {
            Holding::None => (false, false),
            Holding::Reserved { .. } => (true, entry.bound.is_none()),
            Holding::Annotated {
                node, vgpu_time, ..
            } => {
                let standing =
                    Standing::of(node, *vgpu_time, entry.bound.as_deref(), self.expiry(now));
                // A pod in the middle of /bind keeps its hold whatever its age.
                let pinned = standing == Standing::Expired && self.binding.contains(uid);
                (standing.holds() || pinned, entry.bound.is_none())
            }
        };
        tracing::trace!(%uid, holds, unbound, bound = ?entry.bound, "pod hold synced");
        if !holds {
            self.unbound_holders.remove(uid);
            self.ledger.remove_pod(uid);
            return ApplyReport::default();
        }
        if unbound {
            self.unbound_holders.insert(uid.clone());
        } else {
            self.unbound_holders.remove(uid);
        }
        match record {
            Some(r) => self.ledger.apply_pod(r),
            // Holds already: only holds that are counted can stay counted without a
            // fresh record (reservations, pinned or bound pods).
            None => ApplyReport::default(),
        }
    }

    /// Drops what `uid` holds before it is filtered again (the new decision replaces
    /// it). A bound pod keeps its devices.
    pub fn begin_filter(&mut self, uid: &str, now: i64) {
        if self.pods.get(uid).is_some_and(|e| e.bound.is_none()) {
            self.abandon(uid, now);
        }
    }

    /// Records /filter's decision for the pod: its devices count from now on.
    pub fn reserve(&mut self, r: &Reservation<'_>) -> ApplyReport {
        let record =
            PodRecord::from_devices(r.uid, r.namespace, r.name, r.node, r.devices, r.kinds);
        let now = r.at;
        let sig = self
            .signature(r.annotations)
            .unwrap_or_else(|| self.hasher.hash_one((r.node, now)));
        let key = record.uid.clone();
        self.unschedulable.forget(r.uid);
        let node = self.ledger.intern(r.node);
        let epoch = self.epoch;
        let entry = self.pods.entry(key.clone()).or_insert_with(PodEntry::new);
        entry.abandoned.retain(|s| *s != sig);
        entry.holding = Holding::Reserved {
            sig,
            node,
            at: now,
            epoch,
        };
        self.sync(&key, now, Some(record))
    }

    /// Counts the CPU and memory of a pod /filter just reserved on `node` there, until the
    /// pod is bound or the reservation ends.
    pub fn reserve_resources(&mut self, uid: &str, node: &str, requests: Resources) {
        self.resources
            .reserve(uid, node, requests, &mut self.ledger);
    }

    /// Gives up this process's decision for the pod (bind failed, annotation write
    /// failed). Unbound, it holds nothing; the same annotations read later do not count
    /// while it stays unbound. Returns the node it was held on.
    pub fn abandon(&mut self, uid: &str, now: i64) -> Option<String> {
        let key = self.pods.get_key_value(uid).map(|(k, _)| k.clone())?;
        if self.pods.get(&key)?.bound.is_some() {
            return None;
        }
        self.resources.release_reservation(uid, &mut self.ledger);
        let entry = self.pods.get_mut(&key)?;
        let (node, sig) = match &entry.holding {
            Holding::Reserved { node, sig, .. } | Holding::Annotated { node, sig, .. } => {
                (node.to_string(), *sig)
            }
            Holding::None => return None,
        };
        if !entry.abandoned.contains(&sig) {
            // A pod filtered again and again must not grow without bound; only recent
            // decisions can still show up in its annotations.
            if entry.abandoned.len() == MAX_ABANDONED {
                entry.abandoned.remove(0);
            }
            entry.abandoned.push(sig);
        }
        entry.holding = Holding::None;
        self.sync(&key, now, None);
        Some(node)
    }

    /// Whether the pod's decision already carries the bind mark (`bind-phase=allocating`
    /// and a `bind-time`), so /bind goes from the node lock straight to the Binding: a
    /// decision of this process's /filter does (its annotation write carries the mark,
    /// `docs/extender.md#flow`), one read from annotations does when they show it
    /// (written by an earlier run); annotations written without it (by HAMi, or an
    /// older version) are marked by /bind as HAMi does.
    pub fn bind_marked(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|e| match e.holding {
            Holding::Reserved { .. } => true,
            Holding::Annotated { marked, .. } => marked,
            Holding::None => false,
        })
    }

    /// The node the pod's devices are held on now, if it holds any (what the ledger
    /// counts: an expired or abandoned decision holds nothing).
    pub fn holding_node(&self, uid: &str) -> Option<&str> {
        self.ledger.pod(uid).map(|r| &*r.node)
    }

    /// Marks the pod as being bound (`true`) or not any more: while it is, its hold does
    /// not expire.
    pub fn set_binding(&mut self, uid: &str, binding: bool, now: i64) {
        tracing::trace!(%uid, binding, "pin");
        let Some(key) = self.pods.get_key_value(uid).map(|(k, _)| k.clone()) else {
            return;
        };
        if binding {
            self.binding.insert(key);
        } else if self.binding.remove(uid) {
            self.sync(&key, now, None);
        }
    }

    /// Notes a Binding this process created, before the watch shows it: the hold no
    /// longer expires.
    pub fn note_bound(&mut self, uid: &str, node: &str, now: i64) {
        let node = self.ledger.intern(node);
        let Some(key) = self.pods.get_key_value(uid).map(|(k, _)| k.clone()) else {
            return;
        };
        if let Some(entry) = self.pods.get_mut(&key) {
            entry.bound = Some(node);
        }
        self.sync(&key, now, None);
    }

    /// Ends holds of pods that stayed unbound past the reservation timeout.
    pub fn expire(&mut self, now: i64) -> Vec<Expired> {
        let expiry = self.expiry(now);
        let due: Vec<Arc<str>> = self
            .unbound_holders
            .iter()
            .filter(|uid| !self.binding.contains(*uid))
            .filter(|uid| {
                self.pods.get(*uid).is_some_and(|e| match &e.holding {
                    Holding::Reserved { at, .. } => expiry.expired(Some(*at)),
                    Holding::Annotated { vgpu_time, .. } => expiry.expired(*vgpu_time),
                    Holding::None => true,
                })
            })
            .cloned()
            .collect();
        let mut out = Vec::new();
        for uid in due {
            let Some(e) = self.pods.get(&uid) else {
                continue;
            };
            let reservation = matches!(e.holding, Holding::Reserved { .. });
            let held = self.ledger.pod(&uid).map(|r| Expired {
                uid: uid.to_string(),
                namespace: r.namespace.to_string(),
                name: r.name.to_string(),
                node: r.node.to_string(),
                reservation,
            });
            if reservation {
                self.abandon(&uid, now);
            } else {
                self.sync(&uid, now, None);
            }
            if let Some(expired) = held
                && self.ledger.pod(&uid).is_none()
            {
                out.push(expired);
            }
        }
        out
    }

    /// How unbound decisions are judged at `now`.
    fn expiry(&self, now: i64) -> Expiry {
        Expiry::new(now, self.reservation_ttl)
    }

    /// Remembers that /filter found no node for the pod.
    pub fn note_unschedulable(&mut self, uid: &str, refusal: Refusal) {
        self.unschedulable.note(uid, refusal);
    }

    /// Pods /filter refused that are not placed, bound or gone since.
    pub fn unschedulable(&self) -> &Unschedulable {
        &self.unschedulable
    }

    /// Number of pods known (holding or not).
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }
}
