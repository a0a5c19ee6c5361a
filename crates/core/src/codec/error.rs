//! The one error type of every annotation codec.
//!
//! Annotations are written by other programs (and by people with `kubectl annotate`), so every
//! rejection names the text it rejected. Where HAMi has a fixed message for a rejection, ours
//! reads the same so operators can search for it in either project's issues and logs.

use std::fmt;

use super::gofmt::quote;

/// Why a Go-style integer parse failed (the two cases Go's `strconv` distinguishes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumErrorKind {
    /// Not an optionally signed run of ASCII digits.
    Syntax,
    /// Digits, but outside the target type.
    Range,
}

/// A number that did not parse, worded like Go's `strconv.NumError` because HAMi wraps those
/// texts into its own messages (`invalid count field: strconv.ParseInt: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoNumError {
    /// The Go function the message names (`ParseInt`, `Atoi`).
    pub func: &'static str,
    /// The offending text.
    pub input: String,
    pub kind: NumErrorKind,
}

impl GoNumError {
    pub(crate) fn syntax(func: &'static str, input: &str) -> Self {
        GoNumError {
            func,
            input: input.to_owned(),
            kind: NumErrorKind::Syntax,
        }
    }

    pub(crate) fn range(func: &'static str, input: &str) -> Self {
        GoNumError {
            func,
            input: input.to_owned(),
            kind: NumErrorKind::Range,
        }
    }
}

impl fmt::Display for GoNumError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            NumErrorKind::Syntax => "invalid syntax",
            NumErrorKind::Range => "value out of range",
        };
        write!(
            f,
            "strconv.{}: parsing {}: {what}",
            self.func,
            quote(&self.input)
        )
    }
}

impl std::error::Error for GoNumError {}

/// Every way an annotation value can be rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    // ---- JSON values (node register, MIG allocations, topology scores) ----
    /// The value is not JSON of the expected overall shape.
    #[error("invalid {what} JSON: {reason}")]
    Json {
        what: &'static str,
        reason: String,
        input: String,
    },
    /// One field of one array entry has the wrong JSON type or does not fit the field.
    #[error(
        "invalid {what} JSON: entry {entry}: field {}: expected {expected}, found {found}",
        quote(.field)
    )]
    JsonField {
        what: &'static str,
        entry: usize,
        field: String,
        expected: &'static str,
        /// The offending JSON value as text.
        found: String,
    },

    // ---- legacy node register (`id,count,devmem,devcore,type,numa,health[,index,mode]:`) ----
    #[error("node annotation missing device separator")]
    RegisterMissingSeparator { input: String },
    #[error("malformed node annotation segment: {}", quote(.segment))]
    RegisterMalformedSegment { segment: String },
    #[error("unexpected field count {count} in node annotation")]
    RegisterFieldCount { count: usize, segment: String },
    /// A numeric field that is not a number of the field's width.
    #[error("invalid {field} field: {cause}")]
    RegisterInvalidNumber {
        field: &'static str,
        cause: GoNumError,
    },
    /// The health field is not a Go boolean.
    #[error("invalid health field: strconv.ParseBool: parsing {}: invalid syntax", quote(.value))]
    RegisterInvalidHealth { value: String },
    /// A capacity or index field that is negative (Go would accept some of these and
    /// wrap or under-count; we refuse).
    #[error("{field} field must not be negative: {value}")]
    RegisterNegativeField { field: &'static str, value: i64 },
    #[error("device ID must not be empty")]
    RegisterEmptyId { segment: String },
    #[error("duplicate device ID {}", quote(.id))]
    RegisterDuplicateId { id: String },

    // ---- pod device strings (`UUID,TYPE,MEM,CORES:` ... `;`) ----
    #[error(
        "pod annotation format error, missing fields, do not use nodeName in task spec: {}",
        quote(.segment)
    )]
    PodDeviceMissingFields { segment: String },
    #[error("invalid {field} in pod device {}: {cause}", quote(.segment))]
    PodDeviceInvalidNumber {
        field: &'static str,
        segment: String,
        cause: GoNumError,
    },
    #[error("{field} must not be negative in pod device {}", quote(.segment))]
    PodDeviceNegative {
        field: &'static str,
        segment: String,
    },
    #[error("empty device UUID in pod device {}", quote(.segment))]
    PodDeviceEmptyUuid { segment: String },

    // ---- node lock (`<RFC3339>,<ns>,<name>` or bare RFC3339) ----
    #[error("malformed lock annotation: expected 3 parts, got {parts} from {value}")]
    LockMalformed { parts: usize, value: String },
    #[error("invalid lock time {} in lock annotation {}: {reason}", quote(.time), quote(.value))]
    LockTime {
        time: String,
        value: String,
        reason: String,
    },

    // ---- device scoring weights (`slot=<n>,core=<n>,memory=<n>`) ----
    #[error(
        "invalid hami.io/device-scoring-weights annotation {}: expected slot, core, and memory weights",
        quote(.value)
    )]
    WeightsEntryCount { value: String },
    #[error(
        "invalid hami.io/device-scoring-weights annotation {}: expected key=value entries",
        quote(.value)
    )]
    WeightsNotKeyValue { value: String, entry: String },
    #[error(
        "invalid hami.io/device-scoring-weights annotation {}: duplicate {} weight",
        quote(.value),
        quote(.key)
    )]
    WeightsDuplicateKey { value: String, key: String },
    #[error(
        "invalid hami.io/device-scoring-weights annotation {}: {} weight must be an integer",
        quote(.value),
        quote(.key)
    )]
    WeightsNotInteger { value: String, key: String },
    #[error(
        "invalid hami.io/device-scoring-weights annotation {}: {} weight must not be negative",
        quote(.value),
        quote(.key)
    )]
    WeightsNegative { value: String, key: String },
    #[error(
        "invalid hami.io/device-scoring-weights annotation {}: {} weight is too large",
        quote(.value),
        quote(.key)
    )]
    WeightsTooLarge { value: String, key: String },
    #[error(
        "invalid hami.io/device-scoring-weights annotation {}: unknown weight {}",
        quote(.value),
        quote(.key)
    )]
    WeightsUnknownKey { value: String, key: String },
    #[error(
        "invalid hami.io/device-scoring-weights annotation {}: at least one weight must be positive",
        quote(.value)
    )]
    WeightsAllZero { value: String },

    // ---- vendor inventories ----
    /// A node capacity a vendor derives its devices from is not a count.
    #[error("node capacity {resource}={} is not a non-negative integer", quote(.value))]
    Capacity { resource: String, value: String },
    /// A vendor's inventory value is well-formed but unusable (the text says why).
    #[error("{what}: {reason}")]
    Inventory { what: String, reason: String },

    // ---- Go booleans (`strconv.ParseBool`) ----
    #[error("strconv.ParseBool: parsing {}: invalid syntax", quote(.input))]
    InvalidBool { input: String },

    // ---- MIG allocations ----
    #[error("MIG allocation {entry} is incomplete: {detail}")]
    MigIncomplete { entry: usize, detail: String },
    #[error("MIG allocation {entry} has partial runtime identity")]
    MigPartialRuntimeIdentity { entry: usize },
    #[error("duplicate MIG allocation for container {container_index} device {device_index}")]
    MigDuplicate {
        container_index: u32,
        device_index: u32,
    },
}
