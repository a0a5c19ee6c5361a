//! What can go wrong with a vendor library, worded for the operator.

use std::path::PathBuf;

/// How a library is named in errors: what it is, and the flag and environment variable
/// that set its path (the plugin's, so the error says what to change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LibrarySpec {
    /// What the library is, e.g. `AMD SMI`.
    pub name: &'static str,
    /// The flag that sets its path, e.g. `--amd-smi-lib`.
    pub flag: &'static str,
    /// The environment variable that sets its path, e.g. `AMD_SMI_LIB`.
    pub env: &'static str,
}

/// Why a vendor library gave no facts.
#[derive(Debug, thiserror::Error)]
pub enum FfiError {
    /// The library file cannot be loaded (absent, not a shared object, a missing
    /// dependency of its own).
    #[error(
        "cannot load {library} from {path}: {detail}; install it, or set {flag} ({env}) to the library's path"
    )]
    Load {
        library: &'static str,
        path: String,
        flag: &'static str,
        env: &'static str,
        detail: String,
    },
    /// The library lacks a function this crate calls (an older or foreign library).
    #[error("{path} ({library}) has no function {symbol}: {detail}")]
    Symbol {
        library: &'static str,
        path: String,
        symbol: &'static str,
        detail: String,
    },
    /// A call returned a failure status.
    #[error("{library}: {call} failed: {status}")]
    Status {
        library: &'static str,
        call: &'static str,
        /// The status code's name and number, e.g. `AMDSMI_STATUS_NOT_INIT (32)`.
        status: String,
    },
    /// A device file the library needs cannot be opened.
    #[error("{library}: cannot open {path}: {source}")]
    Open {
        library: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A call succeeded but its answer cannot be used.
    #[error("{library}: {call} returned {what}")]
    Unexpected {
        library: &'static str,
        call: &'static str,
        what: String,
    },
}

/// `Ok` for status 0 (success in AMD SMI and ROCm SMI), else the status's name.
pub(crate) fn check(
    spec: LibrarySpec,
    call: &'static str,
    status: u32,
    names: fn(u32) -> &'static str,
) -> Result<(), FfiError> {
    if status == 0 {
        return Ok(());
    }
    Err(FfiError::Status {
        library: spec.name,
        call,
        status: format!("{} ({status})", names(status)),
    })
}
