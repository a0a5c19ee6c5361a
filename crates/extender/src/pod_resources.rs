//! CPU and memory requests of every pod, counted on the node it is bound to (or reserved
//! on by /filter), as kube-scheduler's NodeResourcesFit counts them
//! (`docs/extender.md#cpu-and-memory`). The ledger keeps the per-node sums the `frag`
//! policies read; this book keeps what each pod added, so an update or a deletion takes
//! back exactly that.
//!
//! Memory: one small entry per pod (a hash of its UID, the node's number, the two amounts),
//! about 24 bytes, for every pod of the cluster, GPU or not.

use std::hash::{BuildHasher, BuildHasherDefault};
use std::sync::Arc;

use hami_core::ledger::Ledger;
use hami_core::resources::Resources;
use rustc_hash::{FxHashMap, FxHasher};

/// Node number of a pod that counts nowhere.
const NOWHERE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    node: u32,
    /// Counted on `node` because /filter reserved it there; the watch has not shown it
    /// bound yet.
    reserved: bool,
    cpu_milli: u32,
    mem_mib: u32,
    /// The pod watch showed the pod since the current relist began (true outside
    /// relists): what a relist did not show is forgotten when it ends. Kept here rather
    /// than in a set of the listed UIDs: it fits the entry's padding, where such a set
    /// was megabytes alive at the moment the cache syncs (`docs/extender.md#memory`).
    listed: bool,
}

impl Entry {
    fn resources(&self) -> Resources {
        Resources::new(i64::from(self.cpu_milli), i64::from(self.mem_mib) << 20)
    }

    /// What the ledger's sums depend on.
    fn counted(&self) -> (u32, u32, u32) {
        (self.node, self.cpu_milli, self.mem_mib)
    }
}

/// The requests of the known pods and where they count.
#[derive(Debug, Default)]
pub struct PodResourceBook {
    /// By a hash of the pod's UID.
    pods: FxHashMap<u64, Entry>,
    node_ids: FxHashMap<Arc<str>, u32>,
    node_names: Vec<Arc<str>>,
}

/// What the book needs of a pod event.
#[derive(Debug, Clone, Copy)]
pub struct PodRequestsSeen<'a> {
    pub uid: &'a str,
    /// `spec.nodeName`.
    pub bound: Option<&'a str>,
    pub requests: Resources,
}

fn key(uid: &str) -> u64 {
    BuildHasherDefault::<FxHasher>::default().hash_one(uid)
}

/// Requests as the book stores them: milli-CPU and MiB (rounded up), saturated.
fn compact(r: Resources) -> (u32, u32) {
    let cpu = u32::try_from(r.cpu_milli.max(0)).unwrap_or(u32::MAX);
    let mib = (r.memory_bytes.max(0) as u64).div_ceil(1 << 20);
    (cpu, u32::try_from(mib).unwrap_or(u32::MAX))
}

impl PodResourceBook {
    /// Number of pods known.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    fn node_id(&mut self, name: &str, ledger: &mut Ledger) -> u32 {
        if let Some(&id) = self.node_ids.get(name) {
            return id;
        }
        let name = ledger.intern(name);
        let id = self.node_names.len() as u32;
        self.node_names.push(name.clone());
        self.node_ids.insert(name, id);
        id
    }

    fn set(&mut self, k: u64, entry: Option<Entry>, ledger: &mut Ledger) {
        let old = match entry {
            Some(e) => self.pods.insert(k, e),
            None => self.pods.remove(&k),
        };
        if old.map(|o| o.counted()) == entry.map(|e| e.counted()) {
            return;
        }
        if let Some(o) = old.filter(|o| o.node != NOWHERE)
            && let Some(name) = self.node_names.get(o.node as usize)
        {
            ledger.add_node_requests(name, o.resources(), false);
        }
        if let Some(e) = entry.filter(|e| e.node != NOWHERE)
            && let Some(name) = self.node_names.get(e.node as usize)
        {
            ledger.add_node_requests(name, e.resources(), true);
        }
    }

    /// A non-terminal pod from the watch: it counts on the node it is bound to; unbound, it
    /// counts where /filter reserved it, or nowhere; it is listed. Returns true the first
    /// time the pod is seen.
    pub fn apply(&mut self, pod: PodRequestsSeen<'_>, ledger: &mut Ledger) -> bool {
        let k = key(pod.uid);
        let old = self.pods.get(&k).copied();
        let (cpu_milli, mem_mib) = compact(pod.requests);
        let entry = match (pod.bound, old) {
            (Some(node), _) => Entry {
                node: self.node_id(node, ledger),
                reserved: false,
                cpu_milli,
                mem_mib,
                listed: true,
            },
            (None, Some(o)) if o.reserved => Entry {
                cpu_milli,
                mem_mib,
                listed: true,
                ..o
            },
            (None, _) => Entry {
                node: NOWHERE,
                reserved: false,
                cpu_milli,
                mem_mib,
                listed: true,
            },
        };
        self.set(k, Some(entry), ledger);
        old.is_none()
    }

    /// /filter reserved the pod on `node`: its requests count there until it is bound.
    pub fn reserve(&mut self, uid: &str, node: &str, requests: Resources, ledger: &mut Ledger) {
        let k = key(uid);
        if self
            .pods
            .get(&k)
            .is_some_and(|e| e.node != NOWHERE && !e.reserved)
        {
            // Bound already: it counts where it runs.
            return;
        }
        let (cpu_milli, mem_mib) = compact(requests);
        let entry = Entry {
            node: self.node_id(node, ledger),
            reserved: true,
            cpu_milli,
            mem_mib,
            // A reservation is not a sighting: a relist that does not show the pod
            // forgets it with its reservation's end, as before.
            listed: self.pods.get(&k).is_some_and(|e| e.listed),
        };
        self.set(k, Some(entry), ledger);
    }

    /// The reservation of an unbound pod ended (bind failed, filtered again, expired).
    pub fn release_reservation(&mut self, uid: &str, ledger: &mut Ledger) {
        let k = key(uid);
        if let Some(e) = self.pods.get(&k).copied().filter(|e| e.reserved) {
            let entry = Entry {
                node: NOWHERE,
                reserved: false,
                ..e
            };
            self.set(k, Some(entry), ledger);
        }
    }

    /// The pod is gone (deleted or terminal).
    pub fn remove(&mut self, uid: &str, ledger: &mut Ledger) {
        self.set(key(uid), None, ledger);
    }

    /// A relist begins: no pod is listed until the watch shows it again.
    pub fn begin_relist(&mut self) {
        for e in self.pods.values_mut() {
            e.listed = false;
        }
    }

    /// Whether the watch showed the pod since the current relist began (any pod it
    /// showed, outside relists). A pod is known here by a 64-bit hash of its UID, as
    /// everywhere in the book.
    pub fn listed(&self, uid: &str) -> bool {
        self.pods.get(&key(uid)).is_some_and(|e| e.listed)
    }

    /// After a relist: forgets the pods not listed, except reservations (their pods may
    /// be newer than the list; they end with their reservation).
    pub fn retain_listed(&mut self, ledger: &mut Ledger) {
        let gone: Vec<u64> = self
            .pods
            .iter()
            .filter(|(_, e)| !e.listed && !e.reserved)
            .map(|(k, _)| *k)
            .collect();
        for k in gone {
            self.set(k, None, ledger);
        }
    }

    /// What the book counts on `node`, recomputed from the entries (for tests).
    pub fn recomputed(&self, node: &str) -> Resources {
        let Some(&id) = self.node_ids.get(node) else {
            return Resources::ZERO;
        };
        self.pods
            .values()
            .filter(|e| e.node == id)
            .fold(Resources::ZERO, |acc, e| acc.saturating_add(e.resources()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen<'a>(uid: &'a str, bound: Option<&'a str>, cpu: i64) -> PodRequestsSeen<'a> {
        PodRequestsSeen {
            uid,
            bound,
            requests: Resources::new(cpu, 3 << 20),
        }
    }

    fn requested(ledger: &Ledger, node: &str) -> Resources {
        ledger.node_resources(node).requested
    }

    #[test]
    fn pods_count_where_they_are_bound() {
        let mut ledger = Ledger::new();
        let mut book = PodResourceBook::default();
        assert!(book.apply(seen("a", None, 500), &mut ledger));
        assert_eq!(requested(&ledger, "n1"), Resources::ZERO);
        assert!(!book.apply(seen("a", Some("n1"), 500), &mut ledger));
        assert!(book.apply(seen("b", Some("n1"), 250), &mut ledger));
        assert_eq!(requested(&ledger, "n1"), Resources::new(750, 6 << 20));
        // A resized pod counts its new requests; a deleted one nothing.
        book.apply(seen("a", Some("n1"), 1000), &mut ledger);
        assert_eq!(requested(&ledger, "n1"), Resources::new(1250, 6 << 20));
        book.remove("b", &mut ledger);
        assert_eq!(requested(&ledger, "n1"), Resources::new(1000, 3 << 20));
        assert_eq!(book.recomputed("n1"), requested(&ledger, "n1"));
        book.remove("a", &mut ledger);
        assert_eq!(requested(&ledger, "n1"), Resources::ZERO);
        assert!(book.is_empty());
    }

    #[test]
    fn reservations_count_until_bound_or_released() {
        let mut ledger = Ledger::new();
        let mut book = PodResourceBook::default();
        book.apply(seen("p", None, 2000), &mut ledger);
        book.reserve("p", "n1", Resources::new(2000, 3 << 20), &mut ledger);
        assert_eq!(requested(&ledger, "n1").cpu_milli, 2000);
        // The watch still shows it unbound: the reservation stands.
        book.apply(seen("p", None, 2000), &mut ledger);
        assert_eq!(requested(&ledger, "n1").cpu_milli, 2000);
        // Bound elsewhere: it moves.
        book.apply(seen("p", Some("n2"), 2000), &mut ledger);
        assert_eq!(requested(&ledger, "n1").cpu_milli, 0);
        assert_eq!(requested(&ledger, "n2").cpu_milli, 2000);
        // A bound pod is not moved by a stray reservation, nor released.
        book.reserve("p", "n1", Resources::new(2000, 0), &mut ledger);
        book.release_reservation("p", &mut ledger);
        assert_eq!(requested(&ledger, "n2").cpu_milli, 2000);
        // A reservation given up stops counting.
        book.reserve("q", "n1", Resources::new(700, 0), &mut ledger);
        assert_eq!(requested(&ledger, "n1").cpu_milli, 700);
        book.release_reservation("q", &mut ledger);
        assert_eq!(requested(&ledger, "n1").cpu_milli, 0);
    }

    #[test]
    fn relists_forget_pods_not_listed() {
        let mut ledger = Ledger::new();
        let mut book = PodResourceBook::default();
        book.apply(seen("a", Some("n1"), 100), &mut ledger);
        book.apply(seen("b", Some("n1"), 200), &mut ledger);
        book.reserve("r", "n1", Resources::new(400, 0), &mut ledger);
        let uuid = "0f3b5d7e-1111-4222-8333-000000049999";
        book.apply(seen(uuid, Some("n1"), 1000), &mut ledger);
        assert!(book.listed("b"));
        book.begin_relist();
        assert!(!book.listed("a") && !book.listed("b") && !book.listed("r"));
        // The relist shows `a` and the UUID again, not `b`; `r` is only reserved.
        book.apply(seen("a", Some("n1"), 100), &mut ledger);
        book.apply(seen(uuid, Some("n1"), 1000), &mut ledger);
        assert_eq!(requested(&ledger, "n1").cpu_milli, 1700);
        assert!(book.listed("a") && book.listed(uuid) && !book.listed("b"));
        book.retain_listed(&mut ledger);
        assert_eq!(requested(&ledger, "n1").cpu_milli, 1500);
        assert_eq!(book.len(), 3);
        assert!(!book.listed("b") && !book.listed("never seen"));
    }
}
