//! Log setup shared by the binaries, and the span every call acting for one pod runs in.
//!
//! Calls made for a pod (the extender's `/filter` and `/bind`, the webhook's admission
//! review, the device plugin's Allocate, GetPreferredAllocation and PreStartContainer)
//! run inside a span made by [`pod_span!`](crate::pod_span) with the fields
//! `pod.namespace`, `pod.name` and `pod.uid`. Every line logged inside carries them, in
//! the text format (`filter{pod.namespace=ml pod.name=train-0 pod.uid=…}: …`) and in the
//! JSON one (the `span` and `spans` members), so one pod's path can be followed through
//! the logs of all services.

use tracing::Dispatch;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

#[doc(hidden)]
pub use tracing as __tracing;

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
    let dispatch = subscriber(format, filter, std::io::stderr)?;
    tracing::dispatcher::set_global_default(dispatch).map_err(|_| TraceError::AlreadySet)
}

/// The subscriber [`init_tracing`] installs, writing to `writer` (tests capture lines
/// with it).
pub fn subscriber<W>(
    format: LogFormat,
    filter: Option<&str>,
    writer: W,
) -> Result<Dispatch, TraceError>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
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
        .with_writer(writer);
    Ok(match format {
        LogFormat::Text => Dispatch::new(builder.finish()),
        LogFormat::Json => Dispatch::new(builder.json().flatten_event(true).finish()),
    })
}

/// A span for one call acting for a pod: `pod_span!("filter", namespace, name, uid)`
/// (each a `Display`), or `pod_span!("allocate")` when the pod is not known yet (its
/// fields are filled in later by [`record_pod`]). See the module docs for the fields.
///
/// A macro rather than a function so the span's target is the caller's module: a log
/// filter such as `hami_scheduler=debug` covers the spans of that service.
#[macro_export]
macro_rules! pod_span {
    ($call:literal) => {
        $crate::trace::__tracing::info_span!(
            $call,
            pod.namespace = $crate::trace::__tracing::field::Empty,
            pod.name = $crate::trace::__tracing::field::Empty,
            pod.uid = $crate::trace::__tracing::field::Empty,
        )
    };
    ($call:literal, $namespace:expr, $name:expr, $uid:expr $(,)?) => {
        $crate::trace::__tracing::info_span!(
            $call,
            pod.namespace = %$namespace,
            pod.name = %$name,
            pod.uid = %$uid,
        )
    };
}

/// Fills in the pod of a span made by [`pod_span!`](crate::pod_span) without one (the
/// call learnt which pod it serves only after it started).
pub fn record_pod(span: &tracing::Span, namespace: &str, name: &str, uid: &str) {
    // Displayed like the fields `pod_span!` starts with (unquoted in the text format).
    use tracing::field::display;
    span.record("pod.namespace", display(namespace));
    span.record("pod.name", display(name));
    span.record("pod.uid", display(uid));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::LogCapture;

    #[test]
    fn bad_filter_is_reported() {
        let err = init_tracing(LogFormat::Text, Some("=[")).err();
        assert!(matches!(err, Some(TraceError::Filter { .. })), "{err:?}");
    }

    fn logged_inside(format: LogFormat, log: impl FnOnce()) -> Vec<String> {
        let capture = LogCapture::default();
        let dispatch = subscriber(format, Some("info"), capture.clone()).unwrap();
        tracing::dispatcher::with_default(&dispatch, log);
        capture.lines()
    }

    #[test]
    fn json_lines_inside_a_pod_span_carry_the_pod() {
        let lines = logged_inside(LogFormat::Json, || {
            let span = crate::pod_span!("filter", "ml", "train-0", "uid-1");
            let _inside = span.enter();
            tracing::info!(node = "n1", "placed");
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(line["message"], "placed");
        assert_eq!(line["span"]["name"], "filter");
        assert_eq!(line["span"]["pod.namespace"], "ml");
        assert_eq!(line["span"]["pod.name"], "train-0");
        assert_eq!(line["span"]["pod.uid"], "uid-1");
    }

    #[test]
    fn a_pod_learnt_later_is_recorded_on_the_span() {
        let lines = logged_inside(LogFormat::Text, || {
            let span = crate::pod_span!("allocate");
            let _inside = span.enter();
            tracing::info!("looking for the pending pod");
            record_pod(&span, "ml", "train-0", "uid-1");
            tracing::info!("allocated");
        });
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(!lines[0].contains("pod.name"), "{}", lines[0]);
        assert!(
            lines[1].contains("allocate{pod.namespace=ml pod.name=train-0 pod.uid=uid-1}"),
            "{}",
            lines[1]
        );
    }
}
