//! What a `/metrics` scrape reads: a copy of every node's devices and usage and of every
//! pod's holding, kept in step with the ledger through its change journal. A scrape
//! copies under the state lock only what changed since the previous one (and the
//! namespaces' quota use), so it holds up a concurrent /filter for microseconds, not for
//! a copy of 50,000 pods; every row is then built and formatted with no lock held
//! (`docs/extender.md#metrics`).
//!
//! Nodes and pods are kept in page order, each copy numbered ([`NodeCopy::version`]), so
//! the page's pieces can be cached and re-formatted only where a number changed
//! (`scrape_blocks.rs`).

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hami_core::ledger::changes::Change;
use hami_core::ledger::{Ledger, NodeInventory, NodeState, PodRecord};
use hami_core::score::Usage;
use rustc_hash::FxHashMap;

use crate::scrape_blocks::{NODES_PER_PIECE, PODS_PER_PIECE};
use crate::state::SchedState;

/// A node as the view keeps it: its (shared) inventory and a copy of its usage.
#[derive(Debug, Clone)]
pub(crate) struct NodeCopy {
    pub name: Arc<str>,
    pub inventory: Arc<NodeInventory>,
    pub usage: Vec<Vec<Usage>>,
    /// Per vendor group: whether its cores are percent of a card (else compute units).
    pub cores_in_percent: Vec<bool>,
    /// Unique to this copy: a new number whenever the node is copied again.
    pub version: u64,
    /// Whether the node starts a piece of the page ([`starts_piece`]), worked out once
    /// per copy instead of on every scrape.
    pub starts_piece: bool,
}

/// A pod as the view keeps it: names (shared with the ledger) and what it holds.
#[derive(Debug)]
pub(crate) struct PodCopy {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub node: Arc<str>,
    /// Device UUID, MiB, cores (collapsed usage, as HAMi reports it), by UUID.
    pub charges: Box<[(Arc<str>, u64, u64)]>,
    /// Unique to this copy: a new number whenever the pod is copied again.
    pub version: u64,
    /// Whether the pod starts a piece of the page ([`starts_piece`]).
    pub starts_piece: bool,
}

/// A pod's place on the page: namespace, name, then UID (two pods of one name: a
/// deleted one not yet gone and its successor).
pub(crate) type PodKey = (Arc<str>, Arc<str>, Arc<str>);

/// What one pod holds on one device.
#[derive(Debug)]
pub(crate) struct PodDeviceRow<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    pub node: &'a str,
    pub uuid: &'a str,
    pub mem: u64,
    pub cores: u64,
}

/// The copy, and the ledger change it is in step with (`None`: never copied).
#[derive(Debug, Default)]
pub(crate) struct ScrapeView {
    seq: Option<u64>,
    /// The next copy's [`NodeCopy::version`] / [`PodCopy::version`].
    next_version: u64,
    nodes: BTreeMap<Arc<str>, Arc<NodeCopy>>,
    pods: BTreeMap<PodKey, Arc<PodCopy>>,
    /// Each pod's key, by UID (what the journal names).
    pod_keys: FxHashMap<Arc<str>, PodKey>,
}

/// How a refresh went, for the debug log.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refreshed {
    /// Ledger changes applied; `None` when everything was copied.
    pub changes: Option<usize>,
    /// Time spent copying (the caller holds the state lock meanwhile).
    pub took: Duration,
}

impl ScrapeView {
    /// Brings the copy in step with `st`: the nodes and pods changed since the last
    /// refresh, or everything when the ledger no longer knows what changed (first
    /// scrape, far behind, relist). The caller holds the state lock.
    pub fn refresh(&mut self, st: &SchedState) -> Refreshed {
        let started = Instant::now();
        let ledger = st.ledger();
        let changes = match self.seq.and_then(|seq| ledger.changes_since(seq)) {
            Some(changes) => {
                for change in changes {
                    match change {
                        Change::Node(name) => self.copy_node(st, name),
                        Change::Pod(uid) => self.copy_pod(ledger, uid),
                    }
                }
                Some(changes.len())
            }
            None => {
                self.copy_all(st);
                None
            }
        };
        self.seq = Some(ledger.next_change());
        Refreshed {
            changes,
            took: started.elapsed(),
        }
    }

    fn version(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    fn copy_all(&mut self, st: &SchedState) {
        let nodes: Vec<_> = st
            .ledger()
            .nodes_unordered()
            .map(|node| {
                let copy = node_copy(st, node.name().into(), node, self.version());
                (copy.name.clone(), Arc::new(copy))
            })
            .collect();
        self.nodes = nodes.into_iter().collect();
        self.pod_keys.clear();
        let pods: Vec<_> = st
            .ledger()
            .pods()
            .map(|rec| {
                let key = pod_key(rec);
                self.pod_keys.insert(rec.uid.clone(), key.clone());
                let copy = pod_copy(&key, rec, self.version());
                (key, Arc::new(copy))
            })
            .collect();
        self.pods = pods.into_iter().collect();
    }

    fn copy_node(&mut self, st: &SchedState, name: &Arc<str>) {
        let Some(node) = st.ledger().node(name) else {
            self.nodes.remove(name);
            return;
        };
        let version = self.version();
        match self.nodes.get_mut(name) {
            // Same devices: only the usage moved (a pod came or went); copied in place.
            Some(copy)
                if Arc::ptr_eq(&copy.inventory, node.shared_inventory())
                    && copy
                        .usage
                        .iter()
                        .map(Vec::len)
                        .eq(node.groups().map(|(_, u)| u.len())) =>
            {
                let copy = Arc::make_mut(copy);
                for (mine, (_, theirs)) in copy.usage.iter_mut().zip(node.groups()) {
                    mine.copy_from_slice(theirs);
                }
                copy.version = version;
            }
            _ => {
                let copy = node_copy(st, name.clone(), node, version);
                self.nodes.insert(name.clone(), Arc::new(copy));
            }
        }
    }

    fn copy_pod(&mut self, ledger: &Ledger, uid: &Arc<str>) {
        if let Some(old) = self.pod_keys.remove(uid) {
            self.pods.remove(&old);
        }
        if let Some(rec) = ledger.pod(uid) {
            let key = pod_key(rec);
            self.pod_keys.insert(uid.clone(), key.clone());
            let copy = pod_copy(&key, rec, self.version());
            self.pods.insert(key, Arc::new(copy));
        }
    }

    /// The nodes, by name.
    pub fn nodes(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<NodeCopy>)> {
        self.nodes.iter()
    }

    /// The pods, by namespace, name and UID.
    pub fn pods(&self) -> impl Iterator<Item = (&PodKey, &Arc<PodCopy>)> {
        self.pods.iter()
    }
}

/// One row per pod and device, in the order `pods` come (each pod's devices by UUID).
pub(crate) fn pod_rows<'a>(pods: &[&'a PodCopy]) -> Vec<PodDeviceRow<'a>> {
    pods.iter()
        .flat_map(|p| {
            p.charges.iter().map(|(uuid, mem, cores)| PodDeviceRow {
                namespace: &p.namespace,
                pod: &p.name,
                node: &p.node,
                uuid,
                mem: *mem,
                cores: *cores,
            })
        })
        .collect()
}

/// Whether `key` starts a new piece of the page: about one key in `per_piece` does, by a
/// hash of the key alone, so adding or removing a key leaves the other pieces as they
/// were (`scrape_blocks.rs`).
pub(crate) fn starts_piece<K: Hash + ?Sized>(key: &K, per_piece: u64) -> bool {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish().is_multiple_of(per_piece)
}

fn node_copy(st: &SchedState, name: Arc<str>, node: &NodeState, version: u64) -> NodeCopy {
    NodeCopy {
        inventory: node.shared_inventory().clone(),
        usage: node.groups().map(|(_, u)| u.to_vec()).collect(),
        cores_in_percent: node
            .groups()
            .map(|(vd, _)| {
                st.registry()
                    .get(&vd.vendor)
                    .is_none_or(|v| v.cores_in_percent())
            })
            .collect(),
        starts_piece: starts_piece(&*name, NODES_PER_PIECE),
        name,
        version,
    }
}

fn pod_key(rec: &PodRecord) -> PodKey {
    (rec.namespace.clone(), rec.name.clone(), rec.uid.clone())
}

fn pod_copy(key: &PodKey, rec: &PodRecord, version: u64) -> PodCopy {
    let mut charges: Box<[(Arc<str>, u64, u64)]> = rec
        .charges
        .iter()
        .map(|c| (c.uuid.clone(), c.mem, c.cores))
        .collect();
    charges.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    PodCopy {
        namespace: rec.namespace.clone(),
        name: rec.name.clone(),
        node: rec.node.clone(),
        charges,
        version,
        starts_piece: starts_piece(key, PODS_PER_PIECE),
    }
}
