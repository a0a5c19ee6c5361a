//! A minimal kube-scheduler for tests and the demo: it schedules the pods that name
//! it (`spec.schedulerName`) and have no node, one at a time like kube-scheduler,
//! through the built-in filters that matter for GPU pods ([`filters`]) and then
//! the configured scheduler extenders over HTTP(S) ([`extender`]), exactly as
//! kube-scheduler calls them. It binds through the extender's `bind` verb when it
//! has one, else through `pods/binding`; records `Scheduled` /
//! `FailedScheduling` events and the `PodScheduled=False` condition with
//! kube-scheduler's reasons and messages; and retries failed pods with
//! exponential backoff.
//!
//! Not emulated: scoring (among several feasible nodes the first by name wins,
//! where kube-scheduler would score them), extender `prioritize`/`preempt`,
//! preemption, and queueing hints (an unschedulable pod is retried when its
//! backoff expires, not when a node changes).

pub mod events;
pub mod extender;
pub mod filters;
pub mod quantity;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hami_core::pod::is_terminal;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use extender::{ExtenderConfig, ManagedResource};
use filters::NodeUsage;

/// How the scheduler behaves.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// The profile name pods select with `spec.schedulerName`.
    pub scheduler_name: String,
    /// Called in order, as kube-scheduler calls its extenders.
    pub extenders: Vec<ExtenderConfig>,
    /// First retry delay of a pod that failed (kube-scheduler: 1 s).
    pub initial_backoff: Duration,
    /// Longest retry delay (kube-scheduler: 10 s).
    pub max_backoff: Duration,
}

impl SchedulerConfig {
    pub fn new(scheduler_name: &str) -> Self {
        Self {
            scheduler_name: scheduler_name.to_string(),
            extenders: Vec::new(),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
        }
    }

    pub fn with_extender(mut self, extender: ExtenderConfig) -> Self {
        self.extenders.push(extender);
        self
    }
}

/// A running scheduler; stops when dropped.
#[derive(Debug)]
pub struct Scheduler {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Scheduler {
    /// Starts watching nodes and pods through `client` and scheduling.
    pub fn start(client: Client, config: SchedulerConfig) -> Self {
        let wake = Arc::new(Notify::new());
        let (nodes, node_writer) = reflector::store::<Node>();
        let (pods, pod_writer) = reflector::store::<Pod>();
        let watch_nodes = {
            let wake = wake.clone();
            let stream = watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
                .default_backoff()
                .reflect(node_writer);
            tokio::spawn(async move {
                stream
                    .for_each(|_| {
                        wake.notify_one();
                        async {}
                    })
                    .await;
            })
        };
        let watch_pods = {
            let wake = wake.clone();
            let stream = watcher(Api::<Pod>::all(client.clone()), watcher::Config::default())
                .default_backoff()
                .reflect(pod_writer);
            tokio::spawn(async move {
                stream
                    .for_each(|_| {
                        wake.notify_one();
                        async {}
                    })
                    .await;
            })
        };
        let events = events::Recorder::new(client.clone(), &config.scheduler_name);
        let lp = Loop {
            client,
            cfg: config,
            nodes,
            pods,
            wake,
            backoff: HashMap::new(),
            assumed: HashMap::new(),
            events,
        };
        Self {
            tasks: vec![watch_nodes, watch_pods, tokio::spawn(lp.run())],
        }
    }
}

/// Why a scheduling attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// No node fits: reason `Unschedulable`.
    Unschedulable(String),
    /// Anything else (an extender error, a failed bind): reason `SchedulerError`.
    Error(String),
}

struct Loop {
    client: Client,
    cfg: SchedulerConfig,
    nodes: Store<Node>,
    pods: Store<Pod>,
    wake: Arc<Notify>,
    /// pod uid → (next attempt, attempts so far)
    backoff: HashMap<String, (Instant, u32)>,
    /// Pods bound but not yet seen bound in the watch: pod uid → (node, requests).
    assumed: HashMap<String, (String, BTreeMap<String, i128>)>,
    events: events::Recorder,
}

fn node_name(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

impl Loop {
    async fn run(mut self) {
        // Both caches must be filled before the first decision.
        if self.nodes.wait_until_ready().await.is_err()
            || self.pods.wait_until_ready().await.is_err()
        {
            tracing::error!("scheduler watches ended before their first list");
            return;
        }
        tracing::info!(scheduler = %self.cfg.scheduler_name, extenders = self.cfg.extenders.len(), "scheduler emulator running");
        loop {
            let next = self.cycle().await;
            match next {
                Some(at) => {
                    tokio::select! {
                        () = self.wake.notified() => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => self.wake.notified().await,
            }
        }
    }

    fn pending(&self, p: &Pod) -> bool {
        let spec = p.spec.as_ref();
        spec.and_then(|s| s.scheduler_name.as_deref()) == Some(self.cfg.scheduler_name.as_str())
            && node_name(p).is_empty()
            && p.metadata.deletion_timestamp.is_none()
            && !is_terminal(p)
    }

    /// One pass over the queue; answers when the next backoff ends.
    async fn cycle(&mut self) -> Option<Instant> {
        let pods = self.pods.state();
        let live: HashSet<String> = pods.iter().filter_map(|p| p.uid()).collect();
        // An assumed pod is done once the cache shows it bound (or gone).
        self.assumed.retain(|uid, _| {
            pods.iter()
                .find(|p| p.uid().as_deref() == Some(uid.as_str()))
                .is_some_and(|p| node_name(p).is_empty())
        });
        self.backoff.retain(|uid, _| live.contains(uid));
        self.events.retain_pods(&live);
        let mut queue: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| self.pending(p))
            .filter(|p| !p.uid().is_some_and(|u| self.assumed.contains_key(&u)))
            .cloned()
            .collect();
        queue.sort_by(|a, b| {
            let t = |p: &Pod| p.metadata.creation_timestamp.clone().map(|t| t.0);
            t(a).cmp(&t(b))
                .then_with(|| a.namespace().cmp(&b.namespace()))
                .then_with(|| a.name_any().cmp(&b.name_any()))
        });
        let mut next: Option<Instant> = None;
        for pod in queue {
            let uid = pod.uid().unwrap_or_default();
            let now = Instant::now();
            if let Some((due, _)) = self.backoff.get(&uid).filter(|(due, _)| *due > now) {
                next = Some(next.map_or(*due, |n| n.min(*due)));
                continue;
            }
            match self.schedule_one(&pod).await {
                Ok(()) => {
                    self.backoff.remove(&uid);
                }
                Err(f) => {
                    let attempts = self.backoff.get(&uid).map_or(0, |(_, a)| *a) + 1;
                    let delay = self
                        .cfg
                        .initial_backoff
                        .saturating_mul(1 << (attempts - 1).min(16))
                        .min(self.cfg.max_backoff);
                    let due = Instant::now() + delay;
                    self.backoff.insert(uid, (due, attempts));
                    next = Some(next.map_or(due, |n| n.min(due)));
                    self.record_failure(&pod, &f).await;
                }
            }
        }
        next
    }

    /// Per-node usage from the pods in the cache plus the ones just bound.
    fn usage(&self, pods: &[Arc<Pod>], skip_uid: &str) -> HashMap<String, NodeUsage> {
        let mut out: HashMap<String, NodeUsage> = HashMap::new();
        for p in pods {
            let node = node_name(p);
            if node.is_empty() || is_terminal(p) || p.uid().as_deref() == Some(skip_uid) {
                continue;
            }
            let v = serde_json::to_value(&**p).unwrap_or(Value::Null);
            out.entry(node.to_string())
                .or_default()
                .add(&filters::pod_requests(&v));
        }
        for (uid, (node, req)) in &self.assumed {
            if uid != skip_uid {
                out.entry(node.clone()).or_default().add(req);
            }
        }
        out
    }

    async fn schedule_one(&mut self, pod: &Pod) -> Result<(), Failure> {
        let pod_v = serde_json::to_value(pod).map_err(|e| Failure::Error(e.to_string()))?;
        let uid = pod.uid().unwrap_or_default();
        let mut nodes: Vec<Value> = self
            .nodes
            .state()
            .iter()
            .filter_map(|n| serde_json::to_value(&**n).ok())
            .collect();
        nodes.sort_by(|a, b| {
            let n = |v: &Value| {
                v.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            n(a).cmp(&n(b))
        });
        if nodes.is_empty() {
            return Err(Failure::Error("no nodes available to schedule pods".into()));
        }
        let ignored: HashSet<String> = self
            .cfg
            .extenders
            .iter()
            .flat_map(|e| e.managed_resources.iter())
            .filter(|r| r.ignored_by_scheduler)
            .map(|r| r.name.clone())
            .collect();
        let usage = self.usage(&self.pods.state(), &uid);
        let empty = NodeUsage::default();
        let mut statuses: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut feasible = Vec::new();
        for n in &nodes {
            let name = n
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            match filters::run(&pod_v, n, usage.get(&name).unwrap_or(&empty), &ignored) {
                Some(reasons) => {
                    statuses.insert(name, reasons);
                }
                None => feasible.push(n.clone()),
            }
        }
        for ext in &self.cfg.extenders {
            if feasible.is_empty() {
                break;
            }
            if ext.filter_verb.is_empty() || !ext.is_interested(&pod_v) {
                continue;
            }
            let sent: Vec<String> = feasible
                .iter()
                .filter_map(|n| n.pointer("/metadata/name").and_then(Value::as_str))
                .map(str::to_string)
                .collect();
            let result = ext
                .filter(&pod_v, &feasible)
                .await
                .and_then(|r| extender::kept_names(ext, &r, &sent).map(|kept| (r, kept)));
            let (result, kept) = match result {
                Ok(x) => x,
                Err(e) if ext.ignorable => {
                    tracing::warn!(extender = %ext.url_prefix, error = %e, "ignorable extender failed; skipped");
                    continue;
                }
                Err(e) => return Err(Failure::Error(e)),
            };
            let unresolvable = result.failed_and_unresolvable_nodes.unwrap_or_default();
            for (node, msg) in &unresolvable {
                statuses.entry(node.clone()).or_default().push(msg.clone());
            }
            for (node, msg) in result.failed_nodes.unwrap_or_default() {
                if !unresolvable.contains_key(&node) {
                    statuses.entry(node).or_default().push(msg);
                }
            }
            feasible.retain(|n| {
                n.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .is_some_and(|name| kept.iter().any(|k| k == name))
            });
        }
        let Some(host) = feasible
            .first()
            .and_then(|n| n.pointer("/metadata/name"))
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return Err(Failure::Unschedulable(filters::fit_error(
                nodes.len(),
                &statuses,
            )));
        };
        self.bind(pod, &pod_v, &host).await?;
        self.assumed
            .insert(uid, (host.clone(), filters::pod_requests(&pod_v)));
        let ns = pod.namespace().unwrap_or_default();
        tracing::info!(pod = %format!("{ns}/{}", pod.name_any()), node = %host, "scheduled");
        let msg = format!("Successfully assigned {ns}/{} to {host}", pod.name_any());
        self.events.record(pod, "Normal", "Scheduled", &msg).await;
        Ok(())
    }

    async fn bind(&self, pod: &Pod, pod_v: &Value, host: &str) -> Result<(), Failure> {
        let ns = pod.namespace().unwrap_or_default();
        let binder = self
            .cfg
            .extenders
            .iter()
            .find(|e| !e.bind_verb.is_empty() && e.is_interested(pod_v));
        let result = match binder {
            Some(ext) => {
                let args = extender::ExtenderBindingArgs {
                    pod_name: pod.name_any(),
                    pod_namespace: ns.clone(),
                    pod_uid: pod.uid().unwrap_or_default(),
                    node: host.to_string(),
                };
                ext.bind(&args).await
            }
            None => {
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
                let binding = json!({
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": pod.name_any(), "namespace": ns, "uid": pod.uid()},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": host},
                });
                pods.create_subresource::<Value, Value>(
                    "binding",
                    &pod.name_any(),
                    &PostParams::default(),
                    &binding,
                )
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
            }
        };
        result.map_err(|e| Failure::Error(format!("binding rejected: {e}")))
    }

    async fn record_failure(&mut self, pod: &Pod, f: &Failure) {
        let (reason, message) = match f {
            Failure::Unschedulable(m) => ("Unschedulable", m.as_str()),
            Failure::Error(m) => ("SchedulerError", m.as_str()),
        };
        let ns = pod.namespace().unwrap_or_default();
        tracing::info!(pod = %format!("{ns}/{}", pod.name_any()), reason, message, "pod not scheduled");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let patch = json!({"status": {"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": reason, "message": message,
            "lastProbeTime": null, "lastTransitionTime": now,
        }]}});
        if let Err(e) = pods
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            tracing::warn!(pod = %pod.name_any(), error = %e, "cannot update the PodScheduled condition");
        }
        self.events
            .record(pod, "Warning", "FailedScheduling", message)
            .await;
    }
}
