//! What a `/metrics` scrape reads: a copy of every node's devices and usage and of every
//! pod's holding, kept in step with the ledger through its change journal. A scrape
//! copies under the state lock only what changed since the previous one (and the
//! namespaces' quota use), so it holds up a concurrent /filter for microseconds, not for
//! a copy of 50,000 pods; every row is then built and formatted with no lock held
//! (`docs/extender.md#metrics`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hami_core::ledger::changes::Change;
use hami_core::ledger::{Ledger, NodeInventory, NodeState, PodRecord};
use hami_core::score::Usage;
use rustc_hash::FxHashMap;

use crate::state::SchedState;

/// A node as the view keeps it: its (shared) inventory and a copy of its usage.
#[derive(Debug)]
pub(crate) struct NodeCopy {
    pub name: Arc<str>,
    pub inventory: Arc<NodeInventory>,
    pub usage: Vec<Vec<Usage>>,
    /// Per vendor group: whether its cores are percent of a card (else compute units).
    pub cores_in_percent: Vec<bool>,
}

/// A pod as the view keeps it: names (shared with the ledger) and what it holds.
#[derive(Debug)]
struct PodCopy {
    namespace: Arc<str>,
    name: Arc<str>,
    node: Arc<str>,
    /// Device UUID, MiB, cores (collapsed usage, as HAMi reports it).
    charges: Box<[(Arc<str>, u64, u64)]>,
}

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
    nodes: FxHashMap<Arc<str>, NodeCopy>,
    pods: FxHashMap<Arc<str>, PodCopy>,
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

    fn copy_all(&mut self, st: &SchedState) {
        self.nodes.clear();
        self.pods.clear();
        for node in st.ledger().nodes_unordered() {
            let copy = node_copy(st, node.name().into(), node);
            self.nodes.insert(copy.name.clone(), copy);
        }
        for rec in st.ledger().pods() {
            self.pods.insert(rec.uid.clone(), pod_copy(rec));
        }
    }

    fn copy_node(&mut self, st: &SchedState, name: &Arc<str>) {
        let Some(node) = st.ledger().node(name) else {
            self.nodes.remove(name);
            return;
        };
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
                for (mine, (_, theirs)) in copy.usage.iter_mut().zip(node.groups()) {
                    mine.copy_from_slice(theirs);
                }
            }
            _ => {
                let copy = node_copy(st, name.clone(), node);
                self.nodes.insert(name.clone(), copy);
            }
        }
    }

    fn copy_pod(&mut self, ledger: &Ledger, uid: &Arc<str>) {
        match ledger.pod(uid) {
            Some(rec) => {
                self.pods.insert(uid.clone(), pod_copy(rec));
            }
            None => {
                self.pods.remove(uid);
            }
        }
    }

    /// The nodes, by name.
    pub fn nodes(&self) -> Vec<&NodeCopy> {
        let mut nodes: Vec<&NodeCopy> = self.nodes.values().collect();
        nodes.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        nodes
    }

    /// One row per pod and device, by namespace, pod name and device (then UID, for
    /// two pods of one name: a deleted one not yet gone and its successor).
    pub fn pod_rows(&self) -> Vec<PodDeviceRow<'_>> {
        let mut pods: Vec<(&Arc<str>, &PodCopy)> = self.pods.iter().collect();
        pods.sort_unstable_by(|(ua, a), (ub, b)| {
            (&a.namespace, &a.name, ua).cmp(&(&b.namespace, &b.name, ub))
        });
        let mut rows = Vec::with_capacity(pods.len());
        for (_, p) in pods {
            let first = rows.len();
            rows.extend(p.charges.iter().map(|(uuid, mem, cores)| PodDeviceRow {
                namespace: &p.namespace,
                pod: &p.name,
                node: &p.node,
                uuid,
                mem: *mem,
                cores: *cores,
            }));
            rows[first..].sort_unstable_by(|a, b| a.uuid.cmp(b.uuid));
        }
        rows
    }
}

fn node_copy(st: &SchedState, name: Arc<str>, node: &NodeState) -> NodeCopy {
    NodeCopy {
        name,
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
    }
}

fn pod_copy(rec: &PodRecord) -> PodCopy {
    PodCopy {
        namespace: rec.namespace.clone(),
        name: rec.name.clone(),
        node: rec.node.clone(),
        charges: rec
            .charges
            .iter()
            .map(|c| (c.uuid.clone(), c.mem, c.cores))
            .collect(),
    }
}
