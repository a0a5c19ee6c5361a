//! Rate-limited warnings: a file that stays broken is named in the log once per period,
//! not once per scan, and again promptly when a new problem appears.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Remembers when each problem was last logged.
#[derive(Debug)]
pub struct Warnings {
    every: Duration,
    last: HashMap<String, (Instant, String)>,
}

impl Warnings {
    pub fn new(every: Duration) -> Self {
        Warnings {
            every,
            last: HashMap::new(),
        }
    }

    /// Whether a warning about `key` saying `what` should be logged now: the first time,
    /// when `what` changed, or once `every` has passed.
    pub fn allow(&mut self, key: &str, what: &str) -> bool {
        let now = Instant::now();
        match self.last.get_mut(key) {
            Some((at, said)) if said == what && now.duration_since(*at) < self.every => false,
            Some(entry) => {
                *entry = (now, what.to_string());
                true
            }
            None => {
                self.last.insert(key.to_string(), (now, what.to_string()));
                true
            }
        }
    }

    /// The problem about `key` is gone.
    pub fn clear(&mut self, key: &str) {
        self.last.remove(key);
    }

    /// Forgets every key `keep` rejects (files that no longer exist).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.last.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_period_unless_the_problem_changes() {
        let mut w = Warnings::new(Duration::from_secs(60));
        assert!(w.allow("a", "too small"));
        assert!(!w.allow("a", "too small"));
        assert!(w.allow("a", "bad magic"));
        assert!(w.allow("b", "bad magic"));
        w.clear("a");
        assert!(w.allow("a", "bad magic"));
        let mut w = Warnings::new(Duration::ZERO);
        assert!(w.allow("a", "x") && w.allow("a", "x"));
        w.retain(|k| k != "a");
        assert!(w.last.is_empty());
    }
}
