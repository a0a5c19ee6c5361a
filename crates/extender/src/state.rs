//! The extender's state: node inventories and the allocation ledger, fed by watch events
//! and by the extender's own decisions. Pure (no I/O, no clock of its own: callers pass
//! `now`), so the rules below are unit-tested without an API server.
//!
//! Which pods hold devices (design invariant 1):
//! - a pod **bound** to the node its annotations name holds what `hami.io/vgpu-devices-allocated`
//!   says until it terminates or is deleted (terminating pods still hold);
//! - a pod this process **reserved** in /filter holds its devices at once, before the
//!   annotations reach the API server, until the pod's own annotations show the same
//!   decision (then it is an annotated pod like any other), the reservation is abandoned
//!   (bind failed, re-filtered) or it expires unbound;
//! - an **unbound** pod with annotations (written by an earlier run or another replica)
//!   holds them only until `hami.io/vgpu-time` + the reservation timeout, so a pod whose
//!   bind never happened cannot block idle GPUs for ever (HAMi's phantom reservations);
//! - a pod bound to another node than its annotations name holds nothing.

use std::collections::{BTreeMap, HashMap, HashSet};

use hami_core::annotations as keys;
use hami_core::ledger::{
    ApplyReport, InventoryIssue, Ledger, NodeInventory, PodRecord, PodRecordError,
};
use hami_core::model::PodSingleDevice;
use hami_core::request::{ContainerKind, plain_integer};
use hami_core::vendor::VendorRegistry;
use k8s_openapi::api::core::v1::{Node, Pod};

/// Abandoned decisions remembered per pod.
const MAX_ABANDONED: usize = 8;

/// What a node looks like to the extender.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeEntry {
    pub uid: Option<String>,
    /// Devices as registered (before health filtering).
    pub inventory: NodeInventory,
    /// Register annotations that could not be used.
    pub issues: Vec<InventoryIssue>,
    /// Raw values of the annotations the inventory is decoded from (register annotations,
    /// cordon, topology scores), to tell a new registration from a repeat.
    pub shaping: BTreeMap<String, String>,
    /// Raw handshake annotation per vendor key (vendors that have one).
    pub handshakes: BTreeMap<String, Option<String>>,
    /// `status.allocatable[<count resource>]` per vendor key, when present.
    pub allocatable: BTreeMap<String, i64>,
    /// `hami.io/mutex.lock`, raw.
    pub lock: Option<String>,
    /// Vendors whose device plugin is judged not to be reporting, with the reason.
    pub unhealthy: BTreeMap<String, String>,
}

/// Why a pod's decision signature differs: node, decision time and device strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature(String);

impl Signature {
    /// The signature of a set of pod annotations, or `None` without `hami.io/vgpu-node`.
    pub fn of(annotations: &BTreeMap<String, String>, registry: &VendorRegistry) -> Option<Self> {
        let node = annotations.get(keys::VGPU_NODE).filter(|n| !n.is_empty())?;
        let mut s = format!(
            "{node}\n{}",
            annotations.get(keys::VGPU_TIME).map_or("", String::as_str)
        );
        for v in registry.vendors() {
            s.push('\n');
            if let Some(d) = annotations.get(v.allocated_annotation()) {
                s.push_str(d);
            }
        }
        Some(Signature(s))
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Holding {
    None,
    /// Made by /filter in this process; authoritative until the annotations catch up.
    Reserved {
        sig: Signature,
        record: PodRecord,
        at: i64,
        epoch: u64,
    },
    /// Read from the pod's annotations.
    Annotated {
        sig: Signature,
        record: PodRecord,
        vgpu_time: Option<i64>,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct PodEntry {
    namespace: String,
    name: String,
    /// `spec.nodeName`.
    bound: Option<String>,
    holding: Holding,
    /// Decisions this process gave up on (re-filtered, bind failed, expired): annotations
    /// still showing one of them do not count while the pod is unbound, since their
    /// devices may already be someone else's.
    abandoned: Vec<Signature>,
}

/// What applying a pod event found worth logging.
#[derive(Debug, Default)]
pub struct PodApplied {
    pub error: Option<PodRecordError>,
    pub report: ApplyReport,
    /// The pod is bound to another node than the one its annotations name.
    pub bound_elsewhere: Option<(String, String)>,
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
    pods: HashMap<String, PodEntry>,
    /// Pods that hold devices while unbound (expiry candidates).
    unbound_holders: HashSet<String>,
    /// Pods in the middle of /bind: their hold does not expire under them.
    binding: HashSet<String>,
    reservation_ttl: i64,
    /// Bumped when a pod relist starts; reservations made since survive its end.
    epoch: u64,
    nodes_synced: bool,
    pods_synced: bool,
}

impl SchedState {
    pub fn new(registry: VendorRegistry, reservation_ttl_secs: i64) -> Self {
        SchedState {
            registry,
            ledger: Ledger::new(),
            nodes: BTreeMap::new(),
            pods: HashMap::new(),
            unbound_holders: HashSet::new(),
            binding: HashSet::new(),
            reservation_ttl: reservation_ttl_secs.max(1),
            epoch: 0,
            nodes_synced: false,
            pods_synced: false,
        }
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

    // ---- nodes ----

    /// Applies a node from a watch event; returns the inventory issues when its
    /// registration changed (so they are logged once, not on every status update).
    pub fn apply_node(&mut self, node: &Node) -> Option<Vec<InventoryIssue>> {
        let name = node.metadata.name.clone().unwrap_or_default();
        if name.is_empty() {
            return None;
        }
        let empty = BTreeMap::new();
        let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);
        let shaping: BTreeMap<String, String> = annotations
            .iter()
            .filter(|(k, _)| {
                *k == keys::DEVICE_CORDON
                    || *k == keys::NVIDIA_NODE_SCORE
                    || self
                        .registry
                        .vendors()
                        .iter()
                        .any(|v| v.register_annotation() == *k)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut handshakes = BTreeMap::new();
        let mut allocatable = BTreeMap::new();
        for v in self.registry.vendors() {
            let key = v.common_word().to_string();
            if let Some(h) = v.handshake_annotation() {
                handshakes.insert(key.clone(), annotations.get(h).cloned());
            }
            let count = node
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| a.get(v.count_resource()))
                .and_then(plain_integer);
            if let Some(c) = count {
                allocatable.insert(key, c);
            }
        }
        let previous = self.nodes.remove(&name);
        let changed = previous.as_ref().is_none_or(|p| p.shaping != shaping);
        let (inventory, issues) = match previous {
            Some(ref p) if !changed => (p.inventory.clone(), p.issues.clone()),
            _ => NodeInventory::from_annotations(annotations, &self.registry),
        };
        let entry = NodeEntry {
            uid: node.metadata.uid.clone(),
            inventory,
            issues,
            shaping,
            handshakes,
            allocatable,
            lock: annotations.get(keys::NODE_LOCK).cloned(),
            unhealthy: previous.map(|p| p.unhealthy).unwrap_or_default(),
        };
        let issues = changed.then(|| entry.issues.clone());
        self.nodes.insert(name.clone(), entry);
        self.refresh_ledger_node(&name);
        issues
    }

    pub fn delete_node(&mut self, name: &str) {
        self.nodes.remove(name);
        self.ledger.remove_node(name);
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
        let mut inventory = entry.inventory.clone();
        inventory
            .vendors
            .retain(|v| !entry.unhealthy.contains_key(&v.vendor));
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
        if let Some(issue) = entry.issues.first() {
            return format!(
                "node unregistered: {} is invalid: {}",
                issue.annotation, issue.error
            );
        }
        hami_core::reason::NODE_UNREGISTERED.to_string()
    }

    // ---- pods ----

    /// Applies a pod from a watch event (add, update, or relist).
    pub fn apply_pod(&mut self, pod: &Pod, now: i64) -> PodApplied {
        let mut out = PodApplied::default();
        let Some(uid) = pod.metadata.uid.clone().filter(|u| !u.is_empty()) else {
            return out;
        };
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            self.delete_pod(&uid);
            return out;
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
        let sig = Signature::of(annotations, &self.registry);
        let vgpu_time = annotations
            .get(keys::VGPU_TIME)
            .and_then(|t| t.trim().parse::<i64>().ok());
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        if let (Some(b), Some(r)) = (&bound, &record)
            && *b != r.node
        {
            out.bound_elsewhere = Some((b.clone(), r.node.clone()));
        }
        let entry = self.pods.entry(uid.clone()).or_insert_with(|| PodEntry {
            namespace: String::new(),
            name: String::new(),
            bound: None,
            holding: Holding::None,
            abandoned: Vec::new(),
        });
        entry.namespace = pod.metadata.namespace.clone().unwrap_or_default();
        entry.name = pod.metadata.name.clone().unwrap_or_default();
        // spec.nodeName never changes once set: an older event (the watch may still be
        // behind this process's own Binding) cannot unbind the pod.
        if bound.is_some() {
            entry.bound = bound;
        }
        let annotated = |record: Option<PodRecord>, sig: Option<Signature>| match (record, sig) {
            (Some(record), Some(sig)) => Holding::Annotated {
                sig,
                record,
                vgpu_time,
            },
            _ => Holding::None,
        };
        let keep_reservation = match &entry.holding {
            // The annotations still show an older state (the watch runs behind this
            // process's own writes): the reservation stays until they catch up.
            Holding::Reserved { sig: rsig, .. } => sig.as_ref() != Some(rsig),
            _ => false,
        };
        if !keep_reservation {
            let suppressed =
                entry.bound.is_none() && sig.as_ref().is_some_and(|s| entry.abandoned.contains(s));
            entry.holding = if suppressed {
                Holding::None
            } else {
                annotated(record, sig)
            };
        }
        out.report = self.sync(&uid, now);
        out
    }

    /// A pod was deleted.
    pub fn delete_pod(&mut self, uid: &str) {
        self.pods.remove(uid);
        self.binding.remove(uid);
        self.unbound_holders.remove(uid);
        self.ledger.remove_pod(uid);
    }

    /// A pod relist is starting.
    pub fn begin_pod_relist(&mut self) {
        self.epoch += 1;
    }

    /// After a pod relist: forgets pods that were not listed, except reservations made
    /// while the relist ran (their pods may be newer than the list).
    pub fn retain_pods(&mut self, listed: &HashSet<String>) {
        let epoch = self.epoch;
        let gone: Vec<String> = self
            .pods
            .iter()
            .filter(|(uid, e)| {
                !listed.contains(*uid)
                    && !matches!(e.holding, Holding::Reserved { epoch: re, .. } if re == epoch)
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            self.delete_pod(&uid);
        }
    }

    /// Puts the ledger in line with whether the pod holds its devices now.
    fn sync(&mut self, uid: &str, now: i64) -> ApplyReport {
        let Some(entry) = self.pods.get(uid) else {
            self.ledger.remove_pod(uid);
            return ApplyReport::default();
        };
        let (holds, unbound) = match &entry.holding {
            Holding::None => (None, false),
            Holding::Reserved { record, .. } => (Some(record), entry.bound.is_none()),
            Holding::Annotated {
                record, vgpu_time, ..
            } => match &entry.bound {
                Some(b) if *b == record.node => (Some(record), false),
                Some(_) => (None, false),
                None => {
                    // A pod in the middle of /bind keeps its hold whatever its age.
                    let fresh = self.binding.contains(uid)
                        || vgpu_time.is_some_and(|t| now < t.saturating_add(self.reservation_ttl));
                    (fresh.then_some(record), true)
                }
            },
        };
        tracing::trace!(%uid, holds = holds.is_some(), unbound, bound = ?entry.bound, holding = ?std::mem::discriminant(&entry.holding), "pod hold synced");
        match holds {
            Some(record) => {
                if unbound {
                    self.unbound_holders.insert(uid.to_string());
                } else {
                    self.unbound_holders.remove(uid);
                }
                self.ledger.apply_pod(record.clone())
            }
            None => {
                self.unbound_holders.remove(uid);
                self.ledger.remove_pod(uid);
                ApplyReport::default()
            }
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
    #[allow(clippy::too_many_arguments)]
    pub fn reserve(
        &mut self,
        uid: &str,
        namespace: &str,
        name: &str,
        node: &str,
        devices: &BTreeMap<String, PodSingleDevice>,
        kinds: &[ContainerKind],
        annotations: &BTreeMap<String, String>,
        now: i64,
    ) -> ApplyReport {
        let record = PodRecord::from_devices(uid, namespace, name, node, devices, kinds);
        let sig = Signature::of(annotations, &self.registry)
            .unwrap_or_else(|| Signature(format!("{node}\n{now}")));
        let entry = self
            .pods
            .entry(uid.to_string())
            .or_insert_with(|| PodEntry {
                namespace: namespace.to_string(),
                name: name.to_string(),
                bound: None,
                holding: Holding::None,
                abandoned: Vec::new(),
            });
        entry.abandoned.retain(|s| *s != sig);
        entry.holding = Holding::Reserved {
            sig,
            record,
            at: now,
            epoch: self.epoch,
        };
        self.sync(uid, now)
    }

    /// Gives up this process's decision for the pod (bind failed, annotation write
    /// failed). Unbound, it holds nothing; the same annotations read later do not count
    /// while it stays unbound. Returns the node it was held on.
    pub fn abandon(&mut self, uid: &str, now: i64) -> Option<String> {
        let entry = self.pods.get_mut(uid)?;
        if entry.bound.is_some() {
            return None;
        }
        let (node, sig) = match &entry.holding {
            Holding::Reserved { record, sig, .. } | Holding::Annotated { record, sig, .. } => {
                (record.node.clone(), sig.clone())
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
        self.sync(uid, now);
        Some(node)
    }

    /// The node the pod's devices are held on now, if it holds any (what the ledger
    /// counts: an expired or abandoned decision holds nothing).
    pub fn holding_node(&self, uid: &str) -> Option<&str> {
        self.ledger.pod(uid).map(|r| r.node.as_str())
    }

    /// Marks the pod as being bound (`true`) or not any more: while it is, its hold does
    /// not expire.
    pub fn set_binding(&mut self, uid: &str, binding: bool, now: i64) {
        tracing::trace!(%uid, binding, "pin");
        if binding {
            self.binding.insert(uid.to_string());
        } else if self.binding.remove(uid) {
            self.sync(uid, now);
        }
    }

    /// Notes a Binding this process created, before the watch shows it: the hold no
    /// longer expires.
    pub fn note_bound(&mut self, uid: &str, node: &str, now: i64) {
        if let Some(entry) = self.pods.get_mut(uid) {
            entry.bound = Some(node.to_string());
            self.sync(uid, now);
        }
    }

    /// Ends holds of pods that stayed unbound past the reservation timeout.
    pub fn expire(&mut self, now: i64) -> Vec<Expired> {
        let ttl = self.reservation_ttl;
        let due: Vec<String> = self
            .unbound_holders
            .iter()
            .filter(|uid| !self.binding.contains(*uid))
            .filter(|uid| {
                self.pods.get(*uid).is_some_and(|e| match &e.holding {
                    Holding::Reserved { at, .. } => now >= at.saturating_add(ttl),
                    Holding::Annotated { vgpu_time, .. } => {
                        vgpu_time.is_none_or(|t| now >= t.saturating_add(ttl))
                    }
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
            let (namespace, name) = (e.namespace.clone(), e.name.clone());
            let node = if reservation {
                self.abandon(&uid, now)
            } else {
                let node = self.holding_node(&uid).map(str::to_string);
                self.sync(&uid, now);
                node.filter(|_| self.ledger.pod(&uid).is_none())
            };
            if let Some(node) = node {
                out.push(Expired {
                    uid,
                    namespace,
                    name,
                    node,
                    reservation,
                });
            }
        }
        out
    }

    /// Number of pods known (holding or not).
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }
}
