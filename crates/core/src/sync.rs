//! Locks that outlive a panic.
//!
//! A panic while a std lock is held poisons it, and every later `lock()` returns an
//! error. The state behind hami-rs's locks (caches, ledgers, registries) is updated
//! in steps that each leave it consistent, so a panic in one request must not take
//! every later request down with it: these helpers take the lock whether or not it
//! is poisoned. One home for that rule, used by every crate that locks.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`] that ignores poisoning.
pub trait MutexExt<T: ?Sized> {
    /// The guard, also when a previous holder panicked.
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> MutexExt<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// [`RwLock::read`] and [`RwLock::write`] that ignore poisoning.
pub trait RwLockExt<T: ?Sized> {
    /// A read guard, also when a previous writer panicked.
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;
    /// The write guard, also when a previous writer panicked.
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_mutex_still_locks_with_its_last_value() {
        let m = Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let panicked = std::thread::spawn(move || {
            let mut g = m2.lock_unpoisoned();
            *g = 2;
            panic!("holder dies with the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(m.is_poisoned());
        assert!(m.lock().is_err(), "std's lock reports the poison");
        *m.lock_unpoisoned() += 1;
        assert_eq!(*m.lock_unpoisoned(), 3);
    }

    #[test]
    fn a_poisoned_rwlock_still_reads_and_writes() {
        let l = Arc::new(RwLock::new(String::from("a")));
        let l2 = l.clone();
        let panicked = std::thread::spawn(move || {
            l2.write_unpoisoned().push('b');
            let _held = l2.write_unpoisoned();
            panic!("writer dies with the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(l.is_poisoned());
        assert!(l.read().is_err());
        l.write_unpoisoned().push('c');
        assert_eq!(*l.read_unpoisoned(), "abc");
    }
}
