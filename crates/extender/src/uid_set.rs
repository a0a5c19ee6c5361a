//! The pod UIDs a relist showed, kept compactly (`docs/extender.md#memory`): the pod
//! watch collects every listed UID to forget, once the list is done, the pods it did not
//! show. Kept as strings that was 3.8 MiB at 50,000 pods (its table's growth included),
//! resident at the moment the cache syncs; a UID in Kubernetes' canonical form (a
//! lowercase hyphenated UUID, what the API server assigns) is kept as its 16 bytes
//! instead, any other string as itself, so membership stays exact: 2.2 MiB
//! (`tests/memory.rs`).

use std::fmt::Write as _;

use rustc_hash::FxHashSet;

/// A set of pod UIDs.
#[derive(Debug, Default)]
pub struct UidSet {
    uuids: FxHashSet<u128>,
    other: FxHashSet<Box<str>>,
}

/// Lengths of the groups of hex digits in `8-4-4-4-12`.
const GROUPS: [usize; 5] = [8, 4, 4, 4, 12];

/// The UUID `uid` spells in canonical form, or None when it is anything else (uppercase
/// digits included: the string would not come back the same).
fn canonical_uuid(uid: &str) -> Option<u128> {
    let mut value: u128 = 0;
    let mut groups = uid.split('-');
    for len in GROUPS {
        let group = groups.next()?;
        if group.len() != len {
            return None;
        }
        for b in group.bytes() {
            let digit = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                _ => return None,
            };
            value = (value << 4) | u128::from(digit);
        }
    }
    groups.next().is_none().then_some(value)
}

/// `value` in canonical form: the inverse of [`canonical_uuid`].
fn spell_uuid(value: u128, out: &mut String) {
    out.clear();
    let mut shift = 128;
    for (i, len) in GROUPS.into_iter().enumerate() {
        if i > 0 {
            out.push('-');
        }
        shift -= len * 4;
        let group = (value >> shift) & ((1u128 << (len * 4)) - 1);
        // Writing to a String cannot fail.
        let _ = write!(out, "{group:0len$x}");
    }
}

impl UidSet {
    pub fn new() -> Self {
        UidSet::default()
    }

    pub fn insert(&mut self, uid: &str) {
        match canonical_uuid(uid) {
            Some(v) => {
                self.uuids.insert(v);
            }
            None => {
                if !self.other.contains(uid) {
                    self.other.insert(uid.into());
                }
            }
        }
    }

    pub fn contains(&self, uid: &str) -> bool {
        match canonical_uuid(uid) {
            Some(v) => self.uuids.contains(&v),
            None => self.other.contains(uid),
        }
    }

    pub fn len(&self) -> usize {
        self.uuids.len() + self.other.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with every UID, spelt as it was inserted.
    pub fn for_each(&self, mut f: impl FnMut(&str)) {
        let mut spelt = String::with_capacity(36);
        for &v in &self.uuids {
            spell_uuid(v, &mut spelt);
            f(&spelt);
        }
        for uid in &self.other {
            f(uid);
        }
    }
}

impl<S: AsRef<str>> FromIterator<S> for UidSet {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let mut set = UidSet::new();
        for uid in iter {
            set.insert(uid.as_ref());
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_uuids_are_kept_as_numbers_and_spelt_back_the_same() {
        let uid = "0f3b5d7e-1111-4222-8333-000000049999";
        let v = canonical_uuid(uid);
        assert_eq!(v, Some(0x0f3b5d7e_1111_4222_8333_000000049999));
        let mut spelt = String::new();
        spell_uuid(v.unwrap_or_default(), &mut spelt);
        assert_eq!(spelt, uid);
        spell_uuid(0, &mut spelt);
        assert_eq!(spelt, "00000000-0000-0000-0000-000000000000");
    }

    #[test]
    fn other_spellings_are_not_uuids() {
        for uid in [
            "",
            "kept",
            "0F3B5D7E-1111-4222-8333-000000049999",
            "0f3b5d7e11114222833300000004999a",
            "0f3b5d7e-1111-4222-8333-000000049999-",
            "0f3b5d7e-1111-4222-8333-00000004999",
            "0f3b5d7e-1111-4222-8333-0000000499990",
            "0f3b5d7e-111-14222-8333-000000049999",
            "0f3b5d7g-1111-4222-8333-000000049999",
            "{0f3b5d7e-1111-4222-8333-000000049999}",
        ] {
            assert_eq!(canonical_uuid(uid), None, "{uid}");
        }
    }

    #[test]
    fn membership_is_exact_for_every_kind_of_uid() {
        let lower = "0f3b5d7e-1111-4222-8333-000000049999";
        let upper = "0F3B5D7E-1111-4222-8333-000000049999";
        let set: UidSet = [lower, "kept", "kept"].into_iter().collect();
        assert_eq!(set.len(), 2);
        assert!(set.contains(lower));
        assert!(set.contains("kept"));
        // The same UUID spelt otherwise is another UID to the API server.
        assert!(!set.contains(upper));
        assert!(!set.contains("0f3b5d7e-1111-4222-8333-000000049998"));
        assert!(!set.contains("gone"));
        let mut all = Vec::new();
        set.for_each(|uid| all.push(uid.to_string()));
        all.sort();
        assert_eq!(all, [lower, "kept"]);
        assert!(UidSet::new().is_empty());
    }
}
