//! Is a node's device plugin alive? (`docs/protocol.md#handshake`, without
//! HAMi's flapping.)
//!
//! The strongest signal is kubelet's: `status.allocatable[<count resource>] > 0` means the
//! plugin is registered and advertises healthy devices. Without it (the plugin died,
//! kubelet zeroed the resource, or it never registered) the scheduler falls back to
//! HAMi's handshake: it writes `Requesting_<time>` into the vendor's handshake annotation
//! and expects any other value (`Reported <time>`) before the handshake timeout.
//!
//! Unlike HAMi, an expired request is left in place rather than deleted: HAMi's delete
//! makes the next round write a fresh request and treat the node as healthy again, so a
//! node whose plugin is dead keeps receiving pods most of the time. Here the
//! node stays out until the plugin proves it is back: a non-`Requesting` value, or
//! allocatable devices.

use std::time::Duration;

use chrono::{NaiveDateTime, TimeDelta};
use hami_core::codec::{Handshake, decode_handshake, encode_requesting};

/// What to do about one vendor on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `Some(reason)` when the vendor's devices must not be used.
    pub unhealthy: Option<String>,
    /// A new handshake value to write.
    pub write: Option<String>,
}

/// Judges one vendor of one node at local wall-clock time `now` (HAMi writes and reads
/// handshake times in local time without a zone).
pub fn judge(
    handshake: Option<&str>,
    allocatable: Option<i64>,
    count_resource: &str,
    now: NaiveDateTime,
    timeout: Duration,
) -> Verdict {
    if allocatable.is_some_and(|n| n > 0) {
        return Verdict {
            unhealthy: None,
            write: None,
        };
    }
    let request = || Some(encode_requesting(now));
    match handshake.map(decode_handshake) {
        // Nothing asked yet, or the plugin answered: ask (again).
        None | Some(Handshake::Other(_)) => Verdict {
            unhealthy: None,
            write: request(),
        },
        // A request nobody can date: restart the probe rather than trust it for ever.
        Some(Handshake::Requesting(None)) => Verdict {
            unhealthy: None,
            write: request(),
        },
        Some(Handshake::Requesting(Some(at))) => {
            let limit = TimeDelta::from_std(timeout).unwrap_or(TimeDelta::MAX);
            let deadline = at.checked_add_signed(limit);
            if deadline.is_none_or(|d| now < d) {
                Verdict {
                    unhealthy: None,
                    write: None,
                }
            } else {
                let alloc = match allocatable {
                    Some(n) => format!("allocatable {count_resource} is {n}"),
                    None => format!("the node reports no allocatable {count_resource}"),
                };
                Verdict {
                    unhealthy: Some(format!(
                        "device plugin not reporting: handshake requested at {} unanswered after {}s and {alloc}",
                        at.format("%Y-%m-%d %H:%M:%S"),
                        timeout.as_secs()
                    )),
                    write: None,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap()
    }

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn allocatable_devices_mean_alive_whatever_the_handshake() {
        let v = judge(
            Some("Requesting_2020-01-01 00:00:00"),
            Some(8),
            "nvidia.com/gpu",
            t("2026-01-01 00:00:00"),
            MIN,
        );
        assert_eq!(
            v,
            Verdict {
                unhealthy: None,
                write: None
            }
        );
    }

    #[test]
    fn handshake_round_trip() {
        let now = t("2026-01-01 10:00:00");
        // No value yet: ask.
        let v = judge(None, None, "nvidia.com/gpu", now, MIN);
        assert_eq!(v.unhealthy, None);
        assert_eq!(v.write.as_deref(), Some("Requesting_2026-01-01 10:00:00"));
        // Within the timeout: wait.
        let v = judge(
            Some("Requesting_2026-01-01 09:59:30"),
            Some(0),
            "nvidia.com/gpu",
            now,
            MIN,
        );
        assert_eq!(
            v,
            Verdict {
                unhealthy: None,
                write: None
            }
        );
        // Answered: ask again (the plugin proved it is alive).
        let v = judge(
            Some("Reported 2026-01-01 09:59:59"),
            None,
            "nvidia.com/gpu",
            now,
            MIN,
        );
        assert_eq!(v.unhealthy, None);
        assert!(v.write.is_some());
        // Expired: out, and the request stays (no flapping back in).
        let v = judge(
            Some("Requesting_2026-01-01 09:58:00"),
            Some(0),
            "nvidia.com/gpu",
            now,
            MIN,
        );
        assert_eq!(v.write, None);
        let why = v.unhealthy.unwrap();
        assert!(
            why.contains("09:58:00") && why.contains("allocatable nvidia.com/gpu is 0"),
            "{why}"
        );
        // Unreadable request time: probe again.
        let v = judge(Some("Requesting_garbage"), None, "nvidia.com/gpu", now, MIN);
        assert_eq!(v.unhealthy, None);
        assert!(v.write.is_some());
    }
}
