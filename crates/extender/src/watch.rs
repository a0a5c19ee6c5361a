//! Watch-fed caches: nodes and pods stream into [`SchedState`] through kube's watcher
//! (list, then watch; relist on 410 or a dropped connection). Nothing here polls.
//!
//! Each watch runs supervised (`run.rs`): an error no retry fixes (the API server
//! refuses the watch) or the stream ending ends the task, so `/readyz` says why and the
//! supervisor starts it again, which relists.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};
use hami_core::pod::pod_name;
use hami_core::sync::MutexExt;
use hami_server::CancellationToken;
use hami_server::admin::Readiness;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use crate::service::unix_now;
use crate::slim::WatchedPod;
use crate::state::SchedState;

/// Which caches have synced, so readiness is reported once both have.
#[derive(Debug, Clone)]
pub struct SyncTracker {
    state: Arc<Mutex<SchedState>>,
    readiness: Readiness,
}

impl SyncTracker {
    pub fn new(state: Arc<Mutex<SchedState>>, readiness: Readiness) -> Self {
        SyncTracker { state, readiness }
    }

    fn update(&self) {
        if self.state.lock_unpoisoned().synced() {
            self.readiness.set_ready();
        }
    }
}

/// Why a watch stopped.
#[derive(Debug, thiserror::Error)]
pub enum WatchStopped {
    #[error("the API server refused the {watch} watch: {error}")]
    Refused { watch: &'static str, error: String },
    #[error("the {0} watch stream ended")]
    Ended(&'static str),
}

/// What the node watch feeds, and from where.
#[derive(Clone)]
pub struct NodeWatch {
    pub client: Client,
    pub state: Arc<Mutex<SchedState>>,
    /// Only nodes with these labels (`--node-label-selector`).
    pub label_selector: Option<String>,
    /// Bumped on every node event.
    pub changes: watch::Sender<u64>,
    pub sync: SyncTracker,
}

impl std::fmt::Debug for NodeWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeWatch")
            .field("label_selector", &self.label_selector)
            .finish_non_exhaustive()
    }
}

/// Streams nodes (matching the label selector) into the state until `shutdown`.
pub async fn watch_nodes(
    watch: NodeWatch,
    shutdown: CancellationToken,
) -> Result<(), WatchStopped> {
    let NodeWatch {
        client,
        state,
        label_selector,
        changes,
        sync,
    } = watch;
    let api: Api<Node> = Api::all(client);
    let mut config = watcher::Config::default();
    if let Some(sel) = label_selector.filter(|s| !s.trim().is_empty()) {
        config = config.labels(&sel);
    }
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut listed: HashSet<String> = HashSet::new();
    while let Some(event) = next_event(&mut stream, &shutdown, "node").await? {
        {
            let mut st = state.lock_unpoisoned();
            match event {
                Event::Init => listed.clear(),
                Event::InitApply(n) => {
                    listed.insert(n.metadata.name.clone().unwrap_or_default());
                    apply_node(&mut st, &n);
                }
                Event::InitDone => {
                    st.retain_nodes(&listed);
                    st.set_nodes_synced();
                    tracing::info!(nodes = listed.len(), "node cache synced");
                    // Free it: the next relist may be hours away.
                    listed = HashSet::new();
                }
                Event::Apply(n) => apply_node(&mut st, &n),
                Event::Delete(n) => {
                    let name = n.metadata.name.clone().unwrap_or_default();
                    tracing::info!(node = %name, "node deleted");
                    st.delete_node(&name);
                }
            }
        }
        sync.update();
        changes.send_modify(|v| *v = v.wrapping_add(1));
    }
    Ok(())
}

/// The next watch event, `None` once shutting down. Errors a retry may fix are logged and
/// skipped (the watcher retries with backoff, and relists when it must); the others, and
/// the stream ending, stop the watch.
async fn next_event<K>(
    stream: &mut (impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Unpin),
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
            Err(e) if hami_k8s::watch::is_permanent(&e) => {
                return Err(WatchStopped::Refused {
                    watch: what,
                    error: e.to_string(),
                });
            }
            Err(e) => tracing::warn!(error = %e, watch = what, "watch failed; retrying"),
        }
    }
}

fn apply_node(st: &mut SchedState, n: &Node) {
    let name = n.metadata.name.as_deref().unwrap_or_default();
    if let Some(issues) = st.apply_node(n) {
        for i in issues {
            tracing::warn!(node = %name, annotation = %i.annotation, error = %i.error, "node registration not usable");
        }
        let devices: usize = st.node(name).map_or(0, |e| {
            e.inventory.vendors.iter().map(|v| v.devices.len()).sum()
        });
        tracing::info!(node = %name, devices, "node registration read");
    }
}

/// Streams every pod into the state until `shutdown`.
pub async fn watch_pods(
    client: Client,
    state: Arc<Mutex<SchedState>>,
    sync: SyncTracker,
    shutdown: CancellationToken,
) -> Result<(), WatchStopped> {
    let api: Api<WatchedPod> = Api::all(client);
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listed: HashSet<String> = HashSet::new();
    while let Some(event) = next_event(&mut stream, &shutdown, "pod").await? {
        let now = unix_now();
        let mut st = state.lock_unpoisoned();
        match event {
            Event::Init => {
                listed.clear();
                st.begin_pod_relist();
            }
            Event::InitApply(p) => {
                if let Some(uid) = &p.metadata.uid {
                    listed.insert(uid.clone());
                }
                apply_pod(&mut st, &p.into_pod(), now);
            }
            Event::InitDone => {
                st.retain_pods(&listed);
                st.set_pods_synced();
                tracing::info!(
                    pods = listed.len(),
                    holding = st.ledger().pod_count(),
                    "pod cache synced"
                );
                listed = HashSet::new();
                drop(st);
                sync.update();
            }
            Event::Apply(p) => apply_pod(&mut st, &p.into_pod(), now),
            Event::Delete(p) => {
                let p = p.into_pod();
                if let Some(uid) = &p.metadata.uid {
                    if st.holding_node(uid).is_some() {
                        tracing::info!(
                            pod = %pod_name(&p),
                            "pod deleted; its GPUs are released"
                        );
                    }
                    st.delete_pod(uid);
                }
            }
        }
    }
    Ok(())
}

fn apply_pod(st: &mut SchedState, p: &Pod, now: i64) {
    let applied = st.apply_pod(p, now);
    if let Some(e) = applied.error {
        tracing::warn!(error = %e, "pod allocation annotations unreadable; the pod is not counted");
    }
    if let Some((bound, annotated)) = applied.bound_elsewhere {
        tracing::warn!(pod = %pod_name(p), %bound, %annotated, "pod is bound to another node than its GPU assignment names; not counted");
    }
    if let Some(e) = applied.resources_error {
        tracing::warn!(pod = %pod_name(p), error = %e, "pod CPU/memory requests unreadable; counted as none");
    }
    if let Some(e) = applied.shape_error {
        tracing::debug!(pod = %pod_name(p), error = %e, "pod requests unreadable; not counted in the frag workload");
    }
    if applied.report.unknown_node {
        tracing::debug!(pod = %pod_name(p), "pod holds GPUs on a node not (yet) registered");
    }
    if !applied.report.unknown_devices.is_empty() {
        tracing::warn!(pod = %pod_name(p), devices = ?applied.report.unknown_devices, "pod holds devices its node does not register");
    }
}
