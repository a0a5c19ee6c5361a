//! The ledger's change journal: which nodes and pods changed, in order, so a reader that
//! keeps a copy of them (the scheduler's metrics) copies only what changed instead of
//! every node and pod (`docs/extender.md#metrics`).

use std::sync::Arc;

/// Something whose ledger entry changed (added, replaced, charged or removed).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Change {
    /// A node: its inventory or its usage.
    Node(Arc<str>),
    /// A pod, by UID.
    Pod(Arc<str>),
}

/// Entries kept before the older half is dropped; a reader further behind copies
/// everything once (see [`Journal::since`]).
const KEEP: usize = 32_768;

/// The changes, numbered: entry `i` has sequence number `base + i`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Journal {
    base: u64,
    entries: Vec<Change>,
}

impl Journal {
    pub(crate) fn push(&mut self, change: Change) {
        if self.entries.len() >= KEEP {
            self.entries.drain(..KEEP / 2);
            self.base += (KEEP / 2) as u64;
        }
        self.entries.push(change);
    }

    /// The sequence number the next change will get: what a reader that is now in step
    /// passes to [`Journal::since`] next time.
    pub(crate) fn next(&self) -> u64 {
        self.base + self.entries.len() as u64
    }

    /// The changes from sequence number `seq` on; `None` when some of them are no longer
    /// kept (or the ledger was cleared), so the reader must copy everything.
    pub(crate) fn since(&self, seq: u64) -> Option<&[Change]> {
        let from = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        self.entries.get(from..)
    }

    /// Forgets every entry and skips one sequence number, so every reader copies
    /// everything next time.
    pub(crate) fn reset(&mut self) {
        self.base = self.next() + 1;
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> Change {
        Change::Pod(uid.into())
    }

    #[test]
    fn a_reader_in_step_gets_what_came_after() {
        let mut j = Journal::default();
        assert_eq!(j.since(0), Some(&[][..]));
        j.push(pod("a"));
        let seq = j.next();
        j.push(Change::Node("n1".into()));
        j.push(pod("b"));
        assert_eq!(
            j.since(seq),
            Some(&[Change::Node("n1".into()), pod("b")][..])
        );
        assert_eq!(j.since(j.next()), Some(&[][..]));
        assert_eq!(
            j.since(j.next() + 1),
            None,
            "a sequence number from the future"
        );
    }

    #[test]
    fn a_reader_too_far_behind_or_before_a_reset_copies_everything() {
        let mut j = Journal::default();
        for i in 0..KEEP + 10 {
            j.push(pod(&i.to_string()));
        }
        assert_eq!(j.since(0), None, "its first changes were dropped");
        let kept = j.next() - (KEEP / 2 + 10) as u64;
        assert_eq!(j.since(kept).map(<[Change]>::len), Some(KEEP / 2 + 10));
        let before = j.next();
        j.reset();
        assert_eq!(j.since(before), None);
        assert_eq!(j.since(j.next()), Some(&[][..]));
    }
}
