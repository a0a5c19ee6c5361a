//! Watch errors that retrying cannot fix. kube's watcher retries every error with
//! backoff, forever; a watch the API server refuses outright (RBAC, a resource it does
//! not serve) then looks alive while its cache goes stale. Such errors end the watch
//! instead, so its supervisor reports it and the process's readiness says why.

use futures::{Stream, TryStreamExt};
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;

/// Why a watch stopped.
#[derive(Debug, thiserror::Error)]
pub enum WatchStopped {
    #[error("the API server refused the {watch} watch: {error}")]
    Refused { watch: &'static str, error: String },
    #[error("the {0} watch stream ended")]
    Ended(&'static str),
}

/// The next watch event, `None` once shutting down. Errors a retry may fix are logged and
/// skipped (the watcher retries with backoff, and relists when it must); the others, and
/// the stream ending, stop the watch.
pub async fn next_event<K>(
    stream: &mut (impl Stream<Item = Result<Event<K>, watcher::Error>> + Unpin),
    shutdown: &CancellationToken,
    what: &'static str,
) -> Result<Option<Event<K>>, WatchStopped> {
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            n = stream.try_next() => n,
        };
        match next {
            Ok(Some(e)) => return Ok(Some(e)),
            Ok(None) => return Err(WatchStopped::Ended(what)),
            Err(e) if is_permanent(&e) => {
                return Err(WatchStopped::Refused {
                    watch: what,
                    error: e.to_string(),
                });
            }
            Err(e) => tracing::warn!(error = %e, watch = what, "watch failed; retrying"),
        }
    }
}

/// Whether `e` is an answer of the API server that no retry changes: a 4xx other than
/// 408 (Request Timeout), 409 (Conflict), 410 (Gone: the watcher relists) and 429 (Too
/// Many Requests), or a list without a resourceVersion (the resource cannot be watched).
pub fn is_permanent(e: &watcher::Error) -> bool {
    let code = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code,
        watcher::Error::WatchError(s) => s.code,
        watcher::Error::NoResourceVersion => return true,
        _ => return false,
    };
    (400..500).contains(&code) && !matches!(code, 408 | 409 | 410 | 429)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Status::failure("x", "y").with_code(code).boxed())
    }

    #[test]
    fn refusals_are_permanent_and_the_rest_is_retried() {
        assert!(is_permanent(&watcher::Error::InitialListFailed(api(403))));
        assert!(is_permanent(&watcher::Error::WatchStartFailed(api(404))));
        assert!(is_permanent(&watcher::Error::NoResourceVersion));
        for code in [408, 409, 410, 429, 500, 503] {
            assert!(
                !is_permanent(&watcher::Error::WatchStartFailed(api(code))),
                "{code}"
            );
        }
        assert!(!is_permanent(&watcher::Error::WatchError(
            Status::failure("too old resource version", "Expired")
                .with_code(410)
                .boxed()
        )));
    }
}
