//! The admin port: `/livez`, `/readyz` and `/metrics`, and whatever else a service
//! serves beside them (hami-scheduler's dashboard).

use std::sync::{Arc, RwLock};

use hami_core::sync::RwLockExt;
use hyper::StatusCode;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::low_priority::{LowPrioritySlot, lower_this_thread};
use crate::metrics_page::{PageEncoding, encode_page};
use crate::respond;
use crate::serve::{
    Handler, HttpResponse, Offload, ServeError, ServeOptions, handler_fn, serve, serve_with,
};
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
    // The runtime the handler is made on: the page's thread is started from one of its
    // threads, never from a low-priority one (see [`metrics`]).
    let starter = tokio::runtime::Handle::try_current().ok();
    handler_fn(move |req| {
        let state = state.clone();
        let more = more.clone();
        let starter = starter.clone();
        async move {
            if req.uri().path() == "/metrics" {
                let encoding =
                    PageEncoding::negotiate(req.headers().get(hyper::header::ACCEPT_ENCODING));
                return metrics(state.registry.clone(), encoding, starter).await;
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
/// [`lower_encoding_priority`]), off the runtime's threads. The thread is started from
/// one of `starter`'s threads: a thread inherits its starter's CPU priority, and the page
/// starts by copying under locks that request threads wait for, which must not happen at
/// the lowest priority (a connection served at it: [`MetricsPriority::Lowest`]).
async fn metrics(
    registry: Arc<Registry>,
    encoding: PageEncoding,
    starter: Option<tokio::runtime::Handle>,
) -> HttpResponse {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job = {
        let registry = registry.clone();
        move || {
            ENCODING_THREAD.set(true);
            let _ = tx.send(encode_page(&registry, encoding));
        }
    };
    let start = move || {
        std::thread::Builder::new()
            .name("metrics-encode".into())
            .spawn(job)
    };
    let started = match starter {
        Some(starter) => starter
            .spawn(async move { start() })
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e))),
        None => start(),
    };
    let encoded = match started {
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

/// Drops the thread encoding a `/metrics` page to the lowest CPU priority
/// (`SCHED_IDLE`: `low_priority.rs`) for the rest of the page; a no-op on any other
/// thread. A collector with a large page calls it once it
/// has copied what it reads and released every lock a request thread may wait for: the
/// page then takes only CPU time the process's request threads leave over, so a scrape
/// does not slow down a concurrent /filter (`docs/extender.md#metrics`). Called under
/// such a lock it would make things worse: the lock would stay held for as long as the
/// thread waits for CPU.
pub fn lower_encoding_priority() {
    // Where it cannot be changed, the page is encoded at normal priority.
    if ENCODING_THREAD.get()
        && let Err(e) = lower_this_thread()
    {
        tracing::debug!(error = %e, "the metrics page is encoded at normal priority");
    }
}

/// At which CPU priority the admin port serves a `/metrics` scrape's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsPriority {
    /// Where every other connection is served.
    Normal,
    /// On a thread of its own at the lowest priority (`low_priority.rs`), plain HTTP
    /// only: a large page's writes take only CPU time that request threads leave over
    /// (`docs/extender.md#metrics`). A scrape on a machine whose CPUs are all busy waits.
    Lowest,
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
/// `shutdown` is cancelled; plain `/metrics` connections on the runtime `lowest` offers
/// ([`MetricsPriority::Lowest`], kept running by its supervised task:
/// [`crate::supervise::supervise_admin_with`]), all others where they are accepted.
pub async fn serve_admin_with(
    listener: TcpListener,
    state: AdminState,
    more: Option<Handler>,
    tls: TlsConfig,
    lowest: Option<LowPrioritySlot>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let handler = admin_handler_with(state, more);
    let offload = lowest.map(|runtime| Offload {
        prefix: b"GET /metrics",
        runtime,
    });
    let opts = ServeOptions {
        offload,
        ..ServeOptions::default()
    };
    serve_with(listener, tls, handler, shutdown, opts).await
}
