//! The admin port: `/livez`, `/readyz` and `/metrics`, and whatever else a service
//! serves beside them (hami-scheduler's dashboard).

use std::sync::{Arc, RwLock};

use hami_core::sync::RwLockExt;
use hyper::StatusCode;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::metrics_page::{PageEncoding, encode_page};
use crate::respond;
use crate::serve::{Handler, HttpResponse, ServeError, handler_fn, serve};
use crate::tls::TlsConfig;

/// Content type of the OpenMetrics text that prometheus-client writes.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A shared readiness flag: not ready (with a reason) until someone says otherwise.
/// Besides the main flag, named components (supervised tasks) can each hold a reason of
/// their own; the process is ready only when none does.
#[derive(Debug, Clone)]
pub struct Readiness(Arc<RwLock<ReadyState>>);

#[derive(Debug, Default)]
struct ReadyState {
    main: Option<String>,
    components: std::collections::BTreeMap<String, String>,
}

impl Readiness {
    /// Starts not ready, with `reason` shown by `/readyz`.
    pub fn not_ready(reason: impl Into<String>) -> Self {
        Readiness(Arc::new(RwLock::new(ReadyState {
            main: Some(reason.into()),
            ..ReadyState::default()
        })))
    }

    /// Starts ready.
    pub fn ready() -> Self {
        Readiness(Arc::new(RwLock::new(ReadyState::default())))
    }

    pub fn set_ready(&self) {
        self.0.write_unpoisoned().main = None;
    }

    pub fn set_not_ready(&self, reason: impl Into<String>) {
        self.0.write_unpoisoned().main = Some(reason.into());
    }

    /// Sets (`Err`) or clears (`Ok`) the reason `component` holds against readiness.
    pub fn set_component(&self, component: &str, state: Result<(), String>) {
        let mut s = self.0.write_unpoisoned();
        match state {
            Ok(()) => {
                s.components.remove(component);
            }
            Err(reason) => {
                s.components.insert(component.to_string(), reason);
            }
        }
    }

    /// `Ok` when ready, else every reason (the main one first).
    pub fn check(&self) -> Result<(), String> {
        let s = self.0.read_unpoisoned();
        let reasons: Vec<String> = s
            .main
            .iter()
            .cloned()
            .chain(s.components.iter().map(|(c, r)| format!("{c}: {r}")))
            .collect();
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons.join("; "))
        }
    }
}

/// What the admin port reports on.
#[derive(Debug, Clone)]
pub struct AdminState {
    pub readiness: Readiness,
    /// The process's one registry; metrics are registered before it is shared.
    pub registry: Arc<Registry>,
}

/// The admin routes as a [`Handler`], for tests or to mount elsewhere.
pub fn admin_handler(state: AdminState) -> Handler {
    admin_handler_with(state, None)
}

/// The admin routes, and `more` for every other path.
pub fn admin_handler_with(state: AdminState, more: Option<Handler>) -> Handler {
    let state = Arc::new(state);
    handler_fn(move |req| {
        let state = state.clone();
        let more = more.clone();
        async move {
            if req.uri().path() == "/metrics" {
                let encoding =
                    PageEncoding::negotiate(req.headers().get(hyper::header::ACCEPT_ENCODING));
                return metrics(state.registry.clone(), encoding).await;
            }
            match (route(&state, req.uri().path()), more) {
                (Some(resp), _) => resp,
                (None, Some(more)) => more(req).await,
                (None, None) => respond::text(
                    StatusCode::NOT_FOUND,
                    format!(
                        "no route {}; try /livez, /readyz or /metrics",
                        req.uri().path()
                    ),
                ),
            }
        }
    })
}

/// The answer of an admin route, `None` for any other path.
fn route(state: &AdminState, path: &str) -> Option<HttpResponse> {
    Some(match path {
        "/livez" | "/healthz" => respond::text(StatusCode::OK, "ok"),
        "/readyz" => match state.readiness.check() {
            Ok(()) => respond::text(StatusCode::OK, "ready"),
            Err(reason) => respond::text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {reason}"),
            ),
        },
        _ => return None,
    })
}

/// The `/metrics` answer in `encoding`, encoded on a thread of its own (see
/// [`lower_encoding_priority`]), off the runtime's threads.
async fn metrics(registry: Arc<Registry>, encoding: PageEncoding) -> HttpResponse {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job = {
        let registry = registry.clone();
        move || {
            ENCODING_THREAD.set(true);
            let _ = tx.send(encode_page(&registry, encoding));
        }
    };
    let encoded = match std::thread::Builder::new()
        .name("metrics-encode".into())
        .spawn(job)
    {
        Ok(_) => rx.await.unwrap_or_else(|_| {
            Err("the thread encoding the metrics stopped without an answer".into())
        }),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start a thread to encode the metrics; encoding them here");
            encode_page(&registry, encoding)
        }
    };
    match encoded {
        Ok(chunks) => respond::chunks(
            StatusCode::OK,
            METRICS_CONTENT_TYPE,
            encoding.content_encoding(),
            chunks,
        ),
        Err(e) => respond::text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("metrics could not be encoded: {e}"),
        ),
    }
}

thread_local! {
    /// Set on the thread [`metrics`] starts for one page (and that ends with it).
    static ENCODING_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `nice 19`.
const LOWEST_PRIORITY: i32 = 19;

/// Drops the thread encoding a `/metrics` page to the lowest CPU priority for the rest of
/// the page; a no-op on any other thread. A collector with a large page calls it once it
/// has copied what it reads and released every lock a request thread may wait for: the
/// page then takes only CPU time the process's request threads leave over, so a scrape
/// does not slow down a concurrent /filter (`docs/extender.md#metrics`). Called under
/// such a lock it would make things worse: the lock would stay held for as long as the
/// thread waits for CPU.
pub fn lower_encoding_priority() {
    if ENCODING_THREAD.get() {
        // Linux applies a thread's own nice value to that thread only; where it cannot
        // be changed, the page is encoded at normal priority.
        let _ = rustix::process::setpriority_process(None, LOWEST_PRIORITY);
    }
}

/// Serves the admin routes over plain HTTP until `shutdown` is cancelled.
pub async fn serve_admin(
    listener: TcpListener,
    state: AdminState,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    serve(listener, TlsConfig::None, admin_handler(state), shutdown).await
}

/// Serves the admin routes and `more` (see [`admin_handler_with`]), over `tls`, until
/// `shutdown` is cancelled.
pub async fn serve_admin_with(
    listener: TcpListener,
    state: AdminState,
    more: Option<Handler>,
    tls: TlsConfig,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    serve(listener, tls, admin_handler_with(state, more), shutdown).await
}
