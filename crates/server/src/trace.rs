//! Log setup shared by the binaries.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("invalid log filter {filter:?}: {detail}")]
    Filter { filter: String, detail: String },
    #[error("a global logger is already installed")]
    AlreadySet,
}

/// Installs the global subscriber writing to stderr. `filter` uses the `RUST_LOG`
/// syntax (`info`, `hami_webhook=debug,info`); None reads `RUST_LOG`, defaulting to
/// `info`.
pub fn init_tracing(format: LogFormat, filter: Option<&str>) -> Result<(), TraceError> {
    let env = std::env::var("RUST_LOG").ok();
    let directives = filter
        .map(str::to_string)
        .or(env)
        .unwrap_or_else(|| "info".to_string());
    let filter = EnvFilter::try_new(&directives).map_err(|e| TraceError::Filter {
        filter: directives.clone(),
        detail: e.to_string(),
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    result.map_err(|_| TraceError::AlreadySet)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_filter_is_reported() {
        let err = init_tracing(LogFormat::Text, Some("=[")).err();
        assert!(matches!(err, Some(TraceError::Filter { .. })), "{err:?}");
    }
}
