//! The extender service: shared state plus the HTTP routes kube-scheduler calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hami_core::engine::SchedulerDefaults;
use hami_core::sync::MutexExt;
use hami_core::vendor::VendorRegistry;
use hami_k8s::events::Recorder;
use hami_k8s::lock::LocalBinds;
use hami_k8s::quotas::QuotaCache;
use hami_server::body::read_request_bounded;
use hami_server::{Handler, HttpResponse, handler_fn, respond};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use kube::Client;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::hot_client::HotClient;
use crate::metrics::{ErrorReason, Metrics, Operation};
use crate::state::SchedState;
use crate::wire::{ExtenderBindingArgs, ExtenderBindingResult, ExtenderFilterResult};

/// Settings of the service (from the flags).
#[derive(Debug, Clone)]
pub struct Settings {
    pub scheduler_name: String,
    pub defaults: SchedulerDefaults,
    pub node_lock_timeout: Duration,
    pub node_lock_wait: Duration,
    pub reservation_timeout: Duration,
    pub body_limit: usize,
    /// How long /filter waits for the caches to sync before answering with an error.
    pub sync_wait: Duration,
}

/// Progress of a pod's annotation write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteState {
    Pending,
    Written,
    Failed(String),
}

/// The extender: what /filter and /bind share.
pub struct Extender {
    pub(crate) state: Arc<Mutex<SchedState>>,
    /// The namespaces' ResourceQuota limits.
    pub(crate) quotas: QuotaCache,
    pub(crate) registry: VendorRegistry,
    pub(crate) client: Client,
    /// The client /bind's own calls use: the HTTP thread's ([`HotClient`]).
    pub(crate) api: HotClient,
    pub(crate) events: Recorder,
    pub(crate) metrics: Metrics,
    pub(crate) settings: Settings,
    /// Annotation writes in flight, by pod UID.
    pub(crate) writes: Arc<Mutex<HashMap<String, watch::Receiver<WriteState>>>>,
    /// Turns of the annotation writes to the API server (`filter::WRITES_IN_FLIGHT`).
    pub(crate) write_slots: Arc<tokio::sync::Semaphore>,
    /// Bumped on every node event, so lock waiters wake when a lock is released.
    pub(crate) node_changes: watch::Sender<u64>,
    /// Per node: binds waiting for its lock queue here.
    queues: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The binds in flight here, which tell an abandoned node lock from a live one.
    pub(crate) binds: Arc<LocalBinds>,
    /// Where writes and events run, away from the thread answering kube-scheduler.
    pub(crate) background: tokio::runtime::Handle,
}

impl std::fmt::Debug for Extender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extender")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// What the extender works with, made by the caller.
pub struct ExtenderParts {
    pub state: Arc<Mutex<SchedState>>,
    pub quotas: QuotaCache,
    pub client: Client,
    /// Where `client` connects: /bind makes its own client from it on the HTTP thread
    /// (`hot_client`); `None`: /bind uses `client`.
    pub config: Option<kube::Config>,
    pub events: Recorder,
    pub metrics: Metrics,
    /// Bumped on every node event (lock waiters wake on it).
    pub node_changes: watch::Sender<u64>,
    /// The binds this process has in flight ([`LocalBinds::sole`] unless other replicas
    /// may bind).
    pub binds: Arc<LocalBinds>,
}

impl std::fmt::Debug for ExtenderParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtenderParts").finish_non_exhaustive()
    }
}

impl Extender {
    pub fn new(parts: ExtenderParts, settings: Settings) -> Self {
        let ExtenderParts {
            state,
            quotas,
            client,
            config,
            events,
            metrics,
            node_changes,
            binds,
        } = parts;
        let registry = state.lock_unpoisoned().registry().clone();
        Extender {
            state,
            quotas,
            registry,
            api: HotClient::new(client.clone(), config),
            client,
            events,
            metrics,
            settings,
            writes: Arc::default(),
            write_slots: Arc::new(tokio::sync::Semaphore::new(crate::filter::WRITES_IN_FLIGHT)),
            node_changes,
            queues: Mutex::default(),
            binds,
            background: tokio::runtime::Handle::current(),
        }
    }

    pub(crate) fn lock_state(&self) -> MutexGuard<'_, SchedState> {
        self.state.lock_unpoisoned()
    }

    /// Waits until the node, pod and resourcequota caches have synced, up to `sync_wait`.
    pub(crate) async fn wait_synced(&self) -> Result<(), String> {
        let deadline = Instant::now() + self.settings.sync_wait;
        loop {
            if self.quotas.synced() && self.lock_state().synced() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "hami-scheduler has not finished listing nodes, pods and resourcequotas after {}s; try again",
                    self.settings.sync_wait.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn node_queue(&self, node: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut queues = self.queues.lock_unpoisoned();
        // Drop queues nobody waits on, so the map stays as small as the set of busy nodes.
        if queues.len() > 1024 {
            queues.retain(|_, q| Arc::strong_count(q) > 1);
        }
        queues.entry(node.to_string()).or_default().clone()
    }

    /// The routes as a server handler.
    pub fn into_handler(self: Arc<Self>) -> Handler {
        handler_fn(move |req| {
            let this = self.clone();
            async move { this.route(req).await }
        })
    }

    async fn route(self: Arc<Self>, req: Request<Incoming>) -> HttpResponse {
        let path = req.uri().path().to_string();
        match (req.method().clone(), path.as_str()) {
            (Method::POST, "/filter") => {
                let started = std::time::Instant::now();
                let parsed = match read_request_bounded(req, self.settings.body_limit).await {
                    Ok((_, body)) => match serde_json::from_slice(&body) {
                        Ok(args) => Ok(self.filter(args, started).await),
                        Err(e) => Err(format!("request body is not valid ExtenderArgs JSON: {e}")),
                    },
                    Err(e) => Err(e.to_string()),
                };
                match parsed {
                    Ok(result) => respond::json(StatusCode::OK, &result),
                    // kube-scheduler reads errors in-band: 200 with `Error` set.
                    Err(e) => {
                        self.metrics.error(Operation::Filter, ErrorReason::BadBody);
                        respond::json(StatusCode::OK, &ExtenderFilterResult::error(e))
                    }
                }
            }
            (Method::POST, "/bind") => match self.read_json(req).await {
                Ok(args) => respond::json(StatusCode::OK, &self.clone().bind_detached(args).await),
                Err(e) => {
                    self.metrics.error(Operation::Bind, ErrorReason::BadBody);
                    respond::json(StatusCode::OK, &ExtenderBindingResult { error: e })
                }
            },
            (Method::GET, "/healthz") => respond::text(StatusCode::OK, "ok"),
            (_, "/filter" | "/bind") => respond::error_json(
                StatusCode::METHOD_NOT_ALLOWED,
                "extender calls must be sent with POST",
            ),
            _ => respond::error_json(
                StatusCode::NOT_FOUND,
                &format!("no route {path}; kube-scheduler calls POST /filter and POST /bind"),
            ),
        }
    }

    /// Runs a /bind to its end even when kube-scheduler hangs up first: a bind cut off
    /// between taking the node lock and giving it back would leave the lock behind.
    async fn bind_detached(self: Arc<Self>, args: ExtenderBindingArgs) -> ExtenderBindingResult {
        match tokio::spawn(async move { self.bind(args).await }).await {
            Ok(result) => result,
            Err(e) => ExtenderBindingResult {
                error: format!("bind failed inside hami-scheduler: {e}"),
            },
        }
    }

    async fn read_json<T: DeserializeOwned>(&self, req: Request<Incoming>) -> Result<T, String> {
        let (_, body) = read_request_bounded(req, self.settings.body_limit)
            .await
            .map_err(|e| e.to_string())?;
        serde_json::from_slice(&body)
            .map_err(|e| format!("request body is not valid JSON for this call: {e}"))
    }
}

/// A failed call: the message for kube-scheduler and a bounded metric reason.
pub(crate) struct Failure {
    pub reason: ErrorReason,
    pub message: String,
}

pub(crate) fn fail(reason: ErrorReason, message: impl Into<String>) -> Failure {
    Failure {
        reason,
        message: message.into(),
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}
