//! Watch-fed caches: nodes and pods stream into [`SchedState`] through kube's watcher
//! (list, then watch; relist on 410 or a dropped connection); ResourceQuotas into
//! [`hami_k8s::quotas::QuotaCache`]. Nothing here polls.
//!
//! Each watch runs supervised (`run.rs`): an error no retry fixes (the API server
//! refuses the watch) or the stream ending ends the task, so `/readyz` says why and the
//! supervisor starts it again, which relists.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hami_core::annotations as keys;
use hami_core::pod::pod_name;
use hami_core::sync::MutexExt;
use hami_k8s::events::{EventType, Recorder, Subject};
use hami_k8s::quotas::QuotaCache;
use hami_k8s::watch::next_event;
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

/// Which caches have synced, so readiness is reported once all have.
#[derive(Debug, Clone)]
pub struct SyncTracker {
    state: Arc<Mutex<SchedState>>,
    quotas: QuotaCache,
    readiness: Readiness,
}

impl SyncTracker {
    pub fn new(state: Arc<Mutex<SchedState>>, quotas: QuotaCache, readiness: Readiness) -> Self {
        SyncTracker {
            state,
            quotas,
            readiness,
        }
    }

    pub fn update(&self) {
        if self.quotas.synced() && self.state.lock_unpoisoned().synced() {
            self.readiness.set_ready();
        }
    }
}

pub use hami_k8s::watch::WatchStopped;

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
    /// Node events about annotations that cannot be used.
    pub events: Recorder,
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
        events,
    } = watch;
    let mut score_warnings = Throttle::new(SCORE_WARNING_INTERVAL);
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
                    apply_node(&mut st, &n, &events, &mut score_warnings);
                }
                Event::InitDone => {
                    st.retain_nodes(&listed);
                    st.set_nodes_synced();
                    tracing::info!(nodes = listed.len(), "node cache synced");
                    // Free it: the next relist may be hours away.
                    listed = HashSet::new();
                }
                Event::Apply(n) => apply_node(&mut st, &n, &events, &mut score_warnings),
                Event::Delete(n) => {
                    let name = n.metadata.name.clone().unwrap_or_default();
                    tracing::info!(node = %name, "node deleted");
                    st.delete_node(&name);
                    score_warnings.forget(&name);
                }
            }
        }
        sync.update();
        changes.send_modify(|v| *v = v.wrapping_add(1));
    }
    Ok(())
}

/// Longest a repeated warning about one node's topology scores stays quiet.
const SCORE_WARNING_INTERVAL: Duration = Duration::from_secs(600);
/// Characters of an annotation value quoted in a warning.
const QUOTED_VALUE: usize = 200;

/// Lets a warning about a key through at most once per interval.
#[derive(Debug)]
struct Throttle {
    interval: Duration,
    last: HashMap<String, Instant>,
}

impl Throttle {
    fn new(interval: Duration) -> Self {
        Throttle {
            interval,
            last: HashMap::new(),
        }
    }

    /// Whether a warning about `key` may go out at `now` (and notes that it did).
    fn allow(&mut self, key: &str, now: Instant) -> bool {
        match self.last.get(key) {
            Some(t) if now.saturating_duration_since(*t) < self.interval => false,
            _ => {
                self.last.insert(key.to_string(), now);
                true
            }
        }
    }

    fn forget(&mut self, key: &str) {
        self.last.remove(key);
    }
}

/// `value` cut to [`QUOTED_VALUE`] characters for a message.
fn quoted(value: &str) -> String {
    match value.char_indices().nth(QUOTED_VALUE) {
        Some((i, _)) => format!("{:?}...", &value[..i]),
        None => format!("{value:?}"),
    }
}

fn apply_node(st: &mut SchedState, n: &Node, events: &Recorder, throttle: &mut Throttle) {
    let name = n.metadata.name.as_deref().unwrap_or_default();
    if let Some(issues) = st.apply_node(n) {
        for i in issues {
            if i.annotation == keys::NVIDIA_NODE_SCORE {
                // Kept on purpose (HAMi drops the node): the node schedules as before,
                // topology-aware placement there has no pair scores
                // (`docs/protocol.md#node-annotations`).
                if throttle.allow(name, Instant::now()) {
                    let value = n
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(keys::NVIDIA_NODE_SCORE))
                        .map_or_else(String::new, |v| quoted(v));
                    let message = format!(
                        "{} on node {name} is invalid ({}): value {value}; the node stays schedulable without GPU pair scores (topology-aware placement there has no topology information)",
                        keys::NVIDIA_NODE_SCORE,
                        i.error
                    );
                    tracing::warn!(node = %name, annotation = %i.annotation, value = %value, error = %i.error, "node topology scores not usable; pair scores ignored");
                    events.record(
                        Subject::node(name, n.metadata.uid.as_deref()),
                        EventType::Warning,
                        "NodeScoreInvalid",
                        message,
                    );
                }
                continue;
            }
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
    // Pods the relist showed; the state marks them itself (`SchedState::retain_pods`).
    let mut listed: usize = 0;
    while let Some(event) = next_event(&mut stream, &shutdown, "pod").await? {
        let now = unix_now();
        let mut st = state.lock_unpoisoned();
        match event {
            Event::Init => {
                listed = 0;
                st.begin_pod_relist();
            }
            Event::InitApply(p) => {
                listed += 1;
                apply_pod(&mut st, &p.into_pod(), now);
            }
            Event::InitDone => {
                st.retain_pods();
                st.set_pods_synced();
                tracing::info!(
                    pods = listed,
                    holding = st.ledger().pod_count(),
                    "pod cache synced"
                );
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
    if let Some(annotations) = p.metadata.annotations.as_ref() {
        let unknown = hami_core::ledger::unknown_allocations(annotations, st.registry());
        if !unknown.is_empty() {
            tracing::warn!(pod = %pod_name(p), annotations = ?unknown, "pod holds devices of vendors this scheduler does not serve (switched off or unknown); they are not accounted");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_lets_one_warning_per_key_through_per_interval() {
        let mut t = Throttle::new(Duration::from_secs(600));
        let start = Instant::now();
        assert!(t.allow("n1", start));
        assert!(!t.allow("n1", start + Duration::from_secs(599)));
        assert!(t.allow("n2", start + Duration::from_secs(1)));
        assert!(t.allow("n1", start + Duration::from_secs(600)));
        t.forget("n2");
        assert!(t.allow("n2", start + Duration::from_secs(2)));
    }

    #[test]
    fn long_values_are_cut_for_messages() {
        assert_eq!(quoted("abc"), "\"abc\"");
        let long = "x".repeat(500);
        let q = quoted(&long);
        assert!(q.ends_with("\"..."), "{q}");
        assert_eq!(q.len(), QUOTED_VALUE + 5);
    }
}
