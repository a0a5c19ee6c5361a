//! The dashboard on the admin port (`--ui`): a read-only web page (`/ui`, plain
//! HTML/CSS/JS embedded in the binary) and the JSON API it is built from:
//!
//! - `GET /api/v1/cluster`: GPUs by model, allocated vs free, fragmentation, every node
//!   with its sums, and the pods /filter could not place;
//! - `GET /api/v1/nodes/{name}`: one node's GPUs with the pods on each;
//! - `GET /api/v1/pods/{namespace}/{name}/explain`: node by node, why the pod fits or
//!   not, from the placement engine /filter runs, against the usage of the moment.
//!
//! Documents are built from a copy of the state taken under its lock
//! ([`snapshot`]); answers carry an ETag so the page's polling costs a `304` when nothing
//! changed. Nothing here writes, and nothing secret is shown: names, numbers, reasons.
//! See `docs/dashboard.md`.

pub mod snapshot;

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hami_core::engine::{PodPlan, SchedulerDefaults, place_explained};
use hami_core::explain::Explanation;
use hami_core::pod::{bound_node, phase};
use hami_core::sync::MutexExt;
use hami_core::vendor::VendorRegistry;
use hami_server::{Handler, HttpResponse, handler_fn, respond};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use serde::Serialize;

use crate::state::SchedState;
use crate::unschedulable::Refusal;

/// The page and its assets.
const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The overview is rebuilt at most this often, however many pages poll it.
const CLUSTER_REFRESH: Duration = Duration::from_secs(1);

/// Only this origin's scripts, styles and API; no frames, forms or plugins.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

/// What the dashboard reads.
pub struct Dashboard {
    state: Arc<Mutex<SchedState>>,
    registry: VendorRegistry,
    defaults: SchedulerDefaults,
    scheduler: String,
    client: Client,
    cluster: Mutex<Option<Cached>>,
}

impl std::fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard")
            .field("scheduler", &self.scheduler)
            .finish_non_exhaustive()
    }
}

/// The last overview built.
struct Cached {
    built: Instant,
    body: Bytes,
    etag: String,
}

/// `/api/v1/pods/{namespace}/{name}/explain`.
#[derive(Debug, Serialize)]
struct ExplainDoc {
    pod: String,
    phase: Option<String>,
    /// `spec.nodeName`.
    bound_node: Option<String>,
    /// The node the pod's GPUs are held on now, if it holds any: it is placed, and the
    /// engine is not asked again.
    holds_on: Option<String>,
    /// Whether the pod asks for devices hami-scheduler places.
    asks_for_devices: bool,
    /// /filter's last refusal of it, if it is pending.
    refused: Option<Refusal>,
    /// The engine's answer now (empty for a placed pod or one asking for no device).
    #[serde(flatten)]
    explanation: Explanation,
}

impl Dashboard {
    pub fn new(
        state: Arc<Mutex<SchedState>>,
        defaults: SchedulerDefaults,
        scheduler: &str,
        client: Client,
    ) -> Self {
        let registry = state.lock_unpoisoned().registry().clone();
        Dashboard {
            state,
            registry,
            defaults,
            scheduler: scheduler.to_string(),
            client,
            cluster: Mutex::new(None),
        }
    }

    /// The routes as a handler for the admin port.
    pub fn into_handler(self: Arc<Self>) -> Handler {
        handler_fn(move |req| {
            let this = self.clone();
            async move { this.route(req).await }
        })
    }

    async fn route(&self, req: Request<Incoming>) -> HttpResponse {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return secured(
                respond::error_json(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "the dashboard is read-only: GET only",
                ),
                None,
            );
        }
        let path = req.uri().path().to_string();
        let seen = req
            .headers()
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        match segments.as_slice() {
            ["ui"] => asset(INDEX_HTML, "text/html; charset=utf-8"),
            ["ui", "app.js"] => asset(APP_JS, "text/javascript; charset=utf-8"),
            ["ui", "app.css"] => asset(APP_CSS, "text/css; charset=utf-8"),
            ["api", "v1", "cluster"] => {
                let (body, etag) = self.cluster_body();
                fresh_or_not_modified(body, etag, seen.as_deref())
            }
            ["api", "v1", "nodes", name] if !name.is_empty() => {
                match snapshot::node_doc(&self.state, name) {
                    Some(doc) => match serde_json::to_vec(&doc) {
                        Ok(body) => {
                            let etag = etag_of(&body);
                            fresh_or_not_modified(body.into(), etag, seen.as_deref())
                        }
                        Err(e) => internal(&e),
                    },
                    None => not_found(&format!("hami-scheduler does not watch node {name}")),
                }
            }
            ["api", "v1", "pods", namespace, name, "explain"]
                if !namespace.is_empty() && !name.is_empty() =>
            {
                self.explain(namespace, name).await
            }
            _ => not_found(&format!(
                "no route {path}; the dashboard is at /ui, its API under /api/v1"
            )),
        }
    }

    /// The overview's JSON and ETag, rebuilt when older than [`CLUSTER_REFRESH`].
    fn cluster_body(&self) -> (Bytes, String) {
        let mut cached = self.cluster.lock_unpoisoned();
        if let Some(c) = cached.as_ref()
            && c.built.elapsed() < CLUSTER_REFRESH
        {
            return (c.body.clone(), c.etag.clone());
        }
        let doc = snapshot::cluster_doc(&self.state, &self.scheduler);
        // A document of numbers and names always serialises; were it not to, the page
        // shows the error instead of stale numbers.
        let body: Bytes = serde_json::to_vec(&doc)
            .unwrap_or_else(|e| {
                serde_json::json!({ "error": format!("cannot encode the overview: {e}") })
                    .to_string()
                    .into_bytes()
            })
            .into();
        let etag = etag_of(&body);
        *cached = Some(Cached {
            built: Instant::now(),
            body: body.clone(),
            etag: etag.clone(),
        });
        (body, etag)
    }

    async fn explain(&self, namespace: &str, name: &str) -> HttpResponse {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod = match pods.get_opt(name).await {
            Ok(Some(pod)) => pod,
            Ok(None) => return not_found(&format!("pod {namespace}/{name} not found")),
            Err(e) => {
                return secured(
                    respond::error_json(
                        StatusCode::BAD_GATEWAY,
                        &format!("cannot read pod {namespace}/{name}: {e}"),
                    ),
                    None,
                );
            }
        };
        let plan = match PodPlan::new(&pod, &self.registry, &self.defaults) {
            Ok(plan) => plan,
            Err(e) => {
                return secured(
                    respond::error_json(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        &format!("pod {namespace}/{name} cannot be scheduled: {e}"),
                    ),
                    None,
                );
            }
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let (holds_on, refused, placement) = {
            let st = self.state.lock_unpoisoned();
            let holds_on = st.holding_node(&uid).map(str::to_string);
            let refused = st.unschedulable().get(&uid).cloned();
            // The same call as /filter, over every node this extender watches, while the
            // lock is held as long as one /filter holds it.
            let placement = (holds_on.is_none() && !plan.is_empty()).then(|| {
                let candidates: Vec<String> = st.nodes().map(|(n, _)| n.clone()).collect();
                place_explained(&plan, &self.registry, st.ledger(), &candidates, |n| {
                    st.unusable_reason(n)
                })
            });
            (holds_on, refused, placement)
        };
        let doc = ExplainDoc {
            pod: format!("{namespace}/{name}"),
            phase: phase(&pod).map(str::to_string),
            bound_node: bound_node(&pod).map(str::to_string),
            holds_on,
            asks_for_devices: !plan.is_empty(),
            refused,
            explanation: placement
                .as_ref()
                .map(|p| Explanation::of(&plan, p))
                .unwrap_or_default(),
        };
        secured(respond::json(StatusCode::OK, &doc), None)
    }
}

/// A quoted ETag of `body`.
fn etag_of(body: &[u8]) -> String {
    let mut h = DefaultHasher::new();
    body.hash(&mut h);
    format!("\"{:016x}\"", h.finish())
}

/// `body` with its ETag, or `304 Not Modified` when the client has it already.
fn fresh_or_not_modified(body: Bytes, etag: String, seen: Option<&str>) -> HttpResponse {
    let resp = if seen == Some(etag.as_str()) {
        respond::bytes(StatusCode::NOT_MODIFIED, "application/json", Bytes::new())
    } else {
        respond::bytes(StatusCode::OK, "application/json", body)
    };
    secured(resp, Some(&etag))
}

fn asset(body: &'static str, content_type: &'static str) -> HttpResponse {
    secured(respond::bytes(StatusCode::OK, content_type, body), None)
}

fn not_found(message: &str) -> HttpResponse {
    secured(respond::error_json(StatusCode::NOT_FOUND, message), None)
}

fn internal(e: &dyn std::fmt::Display) -> HttpResponse {
    secured(
        respond::error_json(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot encode the answer: {e}"),
        ),
        None,
    )
}

/// Headers every dashboard answer carries: nothing cached without asking, nothing
/// framed, sniffed or loaded from elsewhere.
fn secured(mut resp: HttpResponse, etag: Option<&str>) -> HttpResponse {
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if let Some(tag) = etag.and_then(|t| HeaderValue::from_str(t).ok()) {
        h.insert(header::ETAG, tag);
    }
    resp
}
