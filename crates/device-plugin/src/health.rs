//! Health signals that only count once they persist: a single bad reading (a transient Xid,
//! one failed probe) must not take a node's GPUs away, and a single good one must not bring
//! a broken GPU back.

use std::time::{Duration, Instant};

/// Publishes a boolean only after a new value has been observed continuously for `hold`.
#[derive(Debug, Clone)]
pub struct Persistent {
    published: bool,
    /// The differing value being observed, and since when.
    candidate: Option<(bool, Instant)>,
    hold: Duration,
}

impl Persistent {
    pub fn new(initial: bool, hold: Duration) -> Self {
        Persistent {
            published: initial,
            candidate: None,
            hold,
        }
    }

    pub fn published(&self) -> bool {
        self.published
    }

    /// Feeds an observation made at `now`; returns the new published value when it flips.
    pub fn observe(&mut self, value: bool, now: Instant) -> Option<bool> {
        if value == self.published {
            self.candidate = None;
            return None;
        }
        let since = match self.candidate {
            Some((v, since)) if v == value => since,
            _ => {
                self.candidate = Some((value, now));
                now
            }
        };
        if now.saturating_duration_since(since) >= self.hold {
            self.published = value;
            self.candidate = None;
            Some(value)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flips_only_after_the_value_persists() {
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let mut p = Persistent::new(true, Duration::from_secs(10));
        assert_eq!(p.observe(false, s(0)), None);
        assert_eq!(
            p.observe(true, s(5)),
            None,
            "a good reading resets the count"
        );
        assert_eq!(p.observe(false, s(6)), None);
        assert_eq!(p.observe(false, s(15)), None);
        assert_eq!(p.observe(false, s(16)), Some(false));
        assert!(!p.published());
        assert_eq!(p.observe(false, s(30)), None);
        assert_eq!(p.observe(true, s(31)), None);
        assert_eq!(p.observe(true, s(41)), Some(true));
    }

    #[test]
    fn zero_hold_publishes_at_once() {
        let mut p = Persistent::new(true, Duration::ZERO);
        assert_eq!(p.observe(false, Instant::now()), Some(false));
    }
}
