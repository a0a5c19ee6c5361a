//! Node handshake values (`hami.io/node-handshake`, `hami.io/node-handshake-<vendor>`).
//!
//! The scheduler writes `Requesting_<local time>` and expects the device plugin (or, for
//! NVIDIA today, a fresh register annotation) to answer before the request grows stale.
//! Only two things matter to a reader: is a request pending, and since when.

use chrono::{NaiveDateTime, Timelike};

/// The marker whose presence anywhere in the value means "a request is pending".
pub const REQUESTING: &str = "Requesting";

/// Time layout HAMi writes since v2.5 (Go `2006-01-02 15:04:05`, local time, no zone).
pub const TIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S";
/// Time layout HAMi v2.4 wrote (Go `2006.01.02 15:04:05`), still found on old nodes.
pub const LEGACY_TIME_FORMAT: &str = "%Y.%m.%d %H:%M:%S";

/// What a handshake value says. An absent annotation is the caller's `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handshake {
    /// The value contains `Requesting`. The time is `None` when it is missing or unreadable,
    /// which HAMi treats as "still fresh" (healthy, nothing to update).
    Requesting(Option<NaiveDateTime>),
    /// Any other value (`Reported …`, `Deleted_…`, garbage): the scheduler should issue a new
    /// request.
    Other(String),
}

impl Handshake {
    pub fn is_requesting(&self) -> bool {
        matches!(self, Handshake::Requesting(_))
    }
}

/// The value the scheduler writes to request a handshake at `at` (local wall-clock time).
pub fn encode_requesting(at: NaiveDateTime) -> String {
    format!("{REQUESTING}_{}", at.format(TIME_FORMAT))
}

/// Classifies a handshake value. For a request, the time is read from the text between the
/// first and second `_` (as HAMi splits it), in the current layout or v2.4's dotted one, with
/// optional fractional seconds as Go's parser allows.
pub fn decode_handshake(value: &str) -> Handshake {
    if !value.contains(REQUESTING) {
        return Handshake::Other(value.to_owned());
    }
    let time = value.split('_').nth(1).and_then(parse_handshake_time);
    Handshake::Requesting(time)
}

fn parse_handshake_time(text: &str) -> Option<NaiveDateTime> {
    [TIME_FORMAT, LEGACY_TIME_FORMAT]
        .iter()
        .find_map(|layout| NaiveDateTime::parse_from_str(text, &format!("{layout}%.f")).ok())
        // chrono accepts a leap second (`:60`), Go's parser does not: HAMi would see an
        // unparsable time, and a leap second could not be written back unchanged.
        .filter(|t| t.nanosecond() < 1_000_000_000)
}
