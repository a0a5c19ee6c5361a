//! The node lock value (`hami.io/mutex.lock`): `<RFC3339>,<namespace>,<pod>`, or a bare RFC3339
//! time written by HAMi before locks had owners.
//!
//! The owner makes release safe (only the pod that took the lock may drop it), lets the same
//! pod re-enter, and lets a locker detect a lock whose pod no longer exists.

use std::time::Duration;

use chrono::{DateTime, FixedOffset, SecondsFormat, TimeDelta, TimeZone};

use super::error::CodecError;

/// Separates the time, namespace and pod name.
pub const LOCK_SEPARATOR: char = ',';

/// The pod a lock was taken for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockOwner {
    pub namespace: String,
    pub name: String,
}

/// A decoded lock value.
///
/// Equality compares the offset as well as the instant, so that a decode/encode round trip is
/// checked byte for byte (chrono's own `DateTime` equality ignores the offset).
#[derive(Debug, Clone)]
pub struct NodeLock {
    /// When the lock was taken, in the writer's local offset (only seconds reach the wire).
    pub acquired_at: DateTime<FixedOffset>,
    /// `None` for a legacy owner-less value.
    pub owner: Option<LockOwner>,
}

impl PartialEq for NodeLock {
    fn eq(&self, other: &Self) -> bool {
        self.acquired_at == other.acquired_at
            && self.acquired_at.offset() == other.acquired_at.offset()
            && self.owner == other.owner
    }
}

impl Eq for NodeLock {}

impl NodeLock {
    /// A lock owned by pod `namespace/name`.
    pub fn owned(acquired_at: DateTime<FixedOffset>, namespace: &str, name: &str) -> Self {
        NodeLock {
            acquired_at,
            owner: Some(LockOwner {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            }),
        }
    }

    /// Whether pod `namespace/name` holds this lock (a legacy lock has no holder).
    pub fn is_owned_by(&self, namespace: &str, name: &str) -> bool {
        self.owner
            .as_ref()
            .is_some_and(|o| o.namespace == namespace && o.name == name)
    }

    /// Whether the lock is older than `timeout` at `now` (strictly, as HAMi compares).
    ///
    /// A lock stamped in the future (clock skew between writers) is not expired; a timeout too
    /// large for a time delta never expires.
    pub fn is_expired<Tz: TimeZone>(&self, now: &DateTime<Tz>, timeout: Duration) -> bool {
        let Ok(timeout) = TimeDelta::from_std(timeout) else {
            return false;
        };
        now.clone().signed_duration_since(self.acquired_at) > timeout
    }
}

/// Decodes a lock value. A value without `,` is the legacy bare time; otherwise it must have
/// exactly three parts (HAMi's message: `malformed lock annotation: expected 3 parts, got N
/// from <value>`). The time must be RFC3339 as Go's `time.Parse(time.RFC3339, …)` reads it:
/// upper-case `T` and `Z`, optional fractional seconds, no leap second.
pub fn decode_node_lock(value: &str) -> Result<NodeLock, CodecError> {
    if !value.contains(LOCK_SEPARATOR) {
        return Ok(NodeLock {
            acquired_at: parse_lock_time(value, value)?,
            owner: None,
        });
    }
    let parts: Vec<&str> = value.split(LOCK_SEPARATOR).collect();
    let [time, namespace, name] = parts.as_slice() else {
        return Err(CodecError::LockMalformed {
            parts: parts.len(),
            value: value.to_owned(),
        });
    };
    Ok(NodeLock::owned(
        parse_lock_time(time, value)?,
        namespace,
        name,
    ))
}

fn parse_lock_time(time: &str, value: &str) -> Result<DateTime<FixedOffset>, CodecError> {
    let invalid = |reason: String| CodecError::LockTime {
        time: time.to_owned(),
        value: value.to_owned(),
        reason,
    };
    // chrono also accepts a lower-case `t`/`z` or a space separator; Go's parser does not.
    if time.bytes().any(|b| matches!(b, b't' | b'z' | b' ')) {
        return Err(invalid(
            "RFC3339 requires an upper-case T separator and Z zone".to_owned(),
        ));
    }
    let parsed = DateTime::parse_from_rfc3339(time).map_err(|e| invalid(e.to_string()))?;
    if parsed.timestamp_subsec_nanos() >= 1_000_000_000 {
        return Err(invalid("second out of range".to_owned()));
    }
    Ok(parsed)
}

/// Encodes a lock value as HAMi writes it: the time with second precision and the writer's
/// offset (`2026-08-21T06:20:39+08:00`, or `…Z` at offset zero, as Go's `time.RFC3339`
/// layout prints), then `,<namespace>,<pod>` when the lock has an owner.
///
/// Sub-second precision is dropped. Years outside 0000–9999 do not fit RFC3339 and will not
/// decode back.
pub fn encode_node_lock(lock: &NodeLock) -> String {
    let time = lock.acquired_at.to_rfc3339_opts(SecondsFormat::Secs, true);
    match &lock.owner {
        Some(owner) => format!(
            "{time}{LOCK_SEPARATOR}{}{LOCK_SEPARATOR}{}",
            owner.namespace, owner.name
        ),
        None => time,
    }
}

/// Whether pod `namespace/name` may release a lock whose current value is `value`: the value
/// ends with `,<namespace>,<name>`, or it is a legacy owner-less value (no `,`), which nobody
/// can prove to own and which would otherwise block the node until it expires.
///
/// Works on the raw text on purpose: a malformed value that still names the pod as its owner
/// can be released by that pod.
pub fn release_allowed(value: &str, namespace: &str, name: &str) -> bool {
    if !value.contains(LOCK_SEPARATOR) {
        return true;
    }
    let suffix = format!("{LOCK_SEPARATOR}{namespace}{LOCK_SEPARATOR}{name}");
    value.ends_with(&suffix)
}
