//! The ledger's pod records by UID: a hash table of the records themselves, found by the
//! UID each carries. A map from UID to record would keep a second pointer to the UID
//! beside every record: 16 bytes, 21 with the table's spare room, a pod; 1 MiB at
//! 50,000 pods (`docs/extender.md#memory`).

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use super::PodRecord;

#[derive(Debug, Clone, Default)]
pub(crate) struct PodTable {
    records: HashTable<PodRecord>,
}

fn hash(uid: &str) -> u64 {
    FxBuildHasher.hash_one(uid)
}

impl PodTable {
    pub(crate) fn get(&self, uid: &str) -> Option<&PodRecord> {
        self.records.find(hash(uid), |r| &*r.uid == uid)
    }

    /// Adds a record whose UID is not in the table (the caller removed any earlier one).
    pub(crate) fn insert(&mut self, record: PodRecord) {
        debug_assert!(self.get(&record.uid).is_none());
        self.records
            .insert_unique(hash(&record.uid), record, |r| hash(&r.uid));
    }

    pub(crate) fn remove(&mut self, uid: &str) -> Option<PodRecord> {
        let entry = self
            .records
            .find_entry(hash(uid), |r| &*r.uid == uid)
            .ok()?;
        Some(entry.remove().0)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &PodRecord> {
        self.records.iter()
    }

    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(uid: &str) -> PodRecord {
        PodRecord {
            uid: uid.into(),
            namespace: "ns".into(),
            name: format!("pod-{uid}").into(),
            node: "n1".into(),
            charges: Vec::new(),
        }
    }

    #[test]
    fn records_are_found_and_removed_by_their_uid() {
        let mut t = PodTable::default();
        for i in 0..1_000 {
            t.insert(record(&i.to_string()));
        }
        assert_eq!(t.len(), 1_000);
        assert_eq!(t.get("7").map(|r| &*r.name), Some("pod-7"));
        assert_eq!(t.get("1000"), None);
        assert_eq!(t.remove("7").map(|r| r.uid), Some("7".into()));
        assert_eq!(t.remove("7"), None);
        assert_eq!(t.get("7"), None);
        assert_eq!(t.len(), 999);
        assert_eq!(t.values().count(), 999);
        assert!(t.get("999").is_some());
    }
}
