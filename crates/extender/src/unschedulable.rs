//! Pods /filter could not place, remembered until they are placed, bound or gone: the
//! dashboard's list of pending pods, each with HAMi's FilteringFailed summary
//! (`docs/dashboard.md`). The per-node reasons are not kept (a large cluster would make
//! them megabytes per pod): the dashboard asks the placement engine again, against the
//! usage of the moment.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

/// Pods remembered at most; the oldest refusal is forgotten first.
pub const MAX_REMEMBERED: usize = 1000;

/// The last refusal of one pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub namespace: String,
    pub name: String,
    /// When /filter refused it (Unix seconds).
    pub at: i64,
    /// Candidate nodes that did not fit.
    pub nodes: usize,
    /// HAMi's FilteringFailed text (`no available node, 3 nodes do not meet: ...`).
    pub summary: String,
}

/// Refusals by pod UID.
#[derive(Debug, Default)]
pub struct Unschedulable {
    by_uid: BTreeMap<Arc<str>, Refusal>,
}

impl Unschedulable {
    /// Remembers the pod's latest refusal.
    pub fn note(&mut self, uid: &str, refusal: Refusal) {
        if !self.by_uid.contains_key(uid)
            && self.by_uid.len() >= MAX_REMEMBERED
            && let Some(oldest) = self
                .by_uid
                .iter()
                .min_by_key(|(_, r)| r.at)
                .map(|(k, _)| k.clone())
        {
            self.by_uid.remove(&oldest);
        }
        self.by_uid.insert(uid.into(), refusal);
    }

    /// Forgets the pod (placed, bound, deleted).
    pub fn forget(&mut self, uid: &str) {
        self.by_uid.remove(uid);
    }

    /// Keeps the pods whose UID `keep` accepts (after a relist: the pods that still exist).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.by_uid.retain(|uid, _| keep(uid));
    }

    pub fn get(&self, uid: &str) -> Option<&Refusal> {
        self.by_uid.get(uid)
    }

    /// Every refusal, oldest first.
    pub fn list(&self) -> Vec<Refusal> {
        let mut out: Vec<Refusal> = self.by_uid.values().cloned().collect();
        out.sort_by(|a, b| (a.at, &a.namespace, &a.name).cmp(&(b.at, &b.namespace, &b.name)));
        out
    }

    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(name: &str, at: i64) -> Refusal {
        Refusal {
            namespace: "default".into(),
            name: name.into(),
            at,
            nodes: 3,
            summary: "no available node".into(),
        }
    }

    #[test]
    fn latest_refusal_per_pod_bounded_oldest_out() {
        let mut u = Unschedulable::default();
        u.note("a", refusal("a", 10));
        u.note("a", refusal("a", 20));
        assert_eq!(u.len(), 1);
        assert_eq!(u.get("a").map(|r| r.at), Some(20));
        for i in 0..MAX_REMEMBERED {
            u.note(&format!("p{i}"), refusal(&format!("p{i}"), 100 + i as i64));
        }
        assert_eq!(u.len(), MAX_REMEMBERED);
        assert!(u.get("a").is_none(), "the oldest refusal goes first");
        assert_eq!(u.list()[0].name, "p0");
        u.forget("p0");
        assert_eq!(u.list()[0].name, "p1");
    }
}
