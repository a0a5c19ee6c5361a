//! Typed errors of the simulator library.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no data rows")]
    Empty { path: PathBuf },
    #[error("{path}: missing column `{column}`")]
    MissingColumn { path: PathBuf, column: String },
    #[error("{path}:{line}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("unknown policy `{0}` (see --list-policies)")]
    UnknownPolicy(String),
    #[error("bad --seeds `{0}`: use A..B (inclusive) or a comma list")]
    BadSeeds(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
}
