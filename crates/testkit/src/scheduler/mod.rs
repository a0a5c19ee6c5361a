//! A minimal kube-scheduler for tests and the demo: it schedules the pods that name
//! it (`spec.schedulerName`) and have no node through the built-in filters that matter
//! for GPU pods ([`filters`]) and then the configured scheduler extenders over HTTP(S)
//! ([`extender`]), exactly as kube-scheduler calls them.
//!
//! As in kube-scheduler, the scheduling cycle (filter, choose a node, assume the pod
//! on it) runs one pod at a time, and the binding cycle runs asynchronously
//! ([`binding`]): up to [`SchedulerConfig::max_binds_in_flight`] binds at once, each in
//! its own task, the assumed pod counted on its node until its bind ends and the watch
//! shows it bound. A pod binds through the extender's `bind` verb when it has one, else
//! through `pods/binding`. A failed bind forgets the assumption and sends the pod back
//! to the queue with backoff, as a failed scheduling attempt does. Records `Scheduled` /
//! `FailedScheduling` events and the `PodScheduled=False` condition with
//! kube-scheduler's reasons and messages; retries failed pods with exponential backoff.
//!
//! Not emulated: scoring (among several feasible nodes the first by name wins,
//! where kube-scheduler would score them), extender `prioritize`/`preempt`,
//! preemption, and queueing hints (an unschedulable pod is retried when its
//! backoff expires, not when a node changes).

pub mod binding;
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
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use binding::{BindDone, Binder, Failure};
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
    /// Binding cycles running at once; the scheduling cycle waits for one to end when
    /// this many are in flight.
    pub max_binds_in_flight: usize,
}

impl SchedulerConfig {
    pub fn new(scheduler_name: &str) -> Self {
        Self {
            scheduler_name: scheduler_name.to_string(),
            extenders: Vec::new(),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            max_binds_in_flight: 16,
        }
    }

    pub fn with_extender(mut self, extender: ExtenderConfig) -> Self {
        self.extenders.push(extender);
        self
    }
}

/// A running scheduler; stops when dropped (its binds in flight with it).
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
        let binder = Arc::new(Binder::new(client, &config));
        let lp = Loop {
            cfg: config,
            nodes,
            pods,
            wake,
            backoff: HashMap::new(),
            assumed: HashMap::new(),
            requests: HashMap::new(),
            node_values: HashMap::new(),
            binder,
            binding: JoinSet::new(),
            in_flight: HashMap::new(),
        };
        Self {
            tasks: vec![watch_nodes, watch_pods, tokio::spawn(lp.run())],
        }
    }
}

struct Loop {
    cfg: SchedulerConfig,
    nodes: Store<Node>,
    pods: Store<Pod>,
    wake: Arc<Notify>,
    /// pod uid → (next attempt, attempts so far)
    backoff: HashMap<String, (Instant, u32)>,
    /// Pods assumed on a node: from the end of their scheduling cycle until their bind
    /// failed or the watch shows them bound. pod uid → (node, requests).
    assumed: HashMap<String, (String, BTreeMap<String, i128>)>,
    /// Each pod's effective requests (its spec's resources do not change): pod uid →
    /// requests, so a cycle does not serialise every pod of the cluster again.
    requests: HashMap<String, BTreeMap<String, i128>>,
    /// Each node as JSON, by name, with the resourceVersion it was encoded from.
    node_values: HashMap<String, (String, Value)>,
    /// Binds the pods and records the outcome (shared with the binding tasks).
    binder: Arc<Binder>,
    /// The binding cycles in flight; dropped (and aborted) with the loop.
    binding: JoinSet<BindDone>,
    /// Binding task → the pod it binds, to forget the pod should its task panic.
    in_flight: HashMap<tokio::task::Id, String>,
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
            let backoff_ends = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.wake.notified() => {}
                () = backoff_ends => {}
                Some(done) = self.binding.join_next_with_id(), if !self.binding.is_empty() => {
                    self.bind_ended(done);
                }
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

    /// A binding cycle ended: on failure the assumption is forgotten and the pod backs
    /// off before its next attempt (the binding task recorded why).
    fn bind_ended(&mut self, done: Result<(tokio::task::Id, BindDone), tokio::task::JoinError>) {
        let (uid, bound) = match done {
            Ok((id, done)) => {
                self.in_flight.remove(&id);
                (done.uid, done.bound)
            }
            Err(e) => {
                tracing::error!(error = %e, "a binding task ended abnormally; its pod is retried");
                match self.in_flight.remove(&e.id()) {
                    Some(uid) => (uid, false),
                    None => return,
                }
            }
        };
        if bound {
            self.backoff.remove(&uid);
        } else {
            self.assumed.remove(&uid);
            self.back_off(uid);
        }
    }

    /// Handles the binding cycles that ended, without waiting.
    fn reap_binds(&mut self) {
        while let Some(done) = self.binding.try_join_next_with_id() {
            self.bind_ended(done);
        }
    }

    /// Schedules the pod's next attempt after its backoff; answers when that is.
    fn back_off(&mut self, uid: String) -> Instant {
        let attempts = self.backoff.get(&uid).map_or(0, |(_, a)| *a) + 1;
        let delay = self
            .cfg
            .initial_backoff
            .saturating_mul(1 << (attempts - 1).min(16))
            .min(self.cfg.max_backoff);
        let due = Instant::now() + delay;
        self.backoff.insert(uid, (due, attempts));
        due
    }

    /// One pass over the queue; answers when the next backoff ends.
    async fn cycle(&mut self) -> Option<Instant> {
        self.reap_binds();
        let pods = self.pods.state();
        let live: HashSet<String> = pods.iter().filter_map(|p| p.uid()).collect();
        // An assumed pod is done once the cache shows it bound (or gone).
        self.assumed.retain(|uid, _| {
            pods.iter()
                .find(|p| p.uid().as_deref() == Some(uid.as_str()))
                .is_some_and(|p| node_name(p).is_empty())
        });
        self.backoff.retain(|uid, _| live.contains(uid));
        self.requests.retain(|uid, _| live.contains(uid));
        self.binder.events.retain_pods(&live);
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
        let mut usage = self.usage(&pods);
        let mut next: Option<Instant> = None;
        for pod in queue {
            let uid = pod.uid().unwrap_or_default();
            let now = Instant::now();
            if let Some((due, _)) = self.backoff.get(&uid).filter(|(due, _)| *due > now) {
                next = Some(next.map_or(*due, |n| n.min(*due)));
                continue;
            }
            // The binding cycle is bounded: wait for a slot before assuming another pod.
            while self.binding.len() >= self.cfg.max_binds_in_flight.max(1) {
                match self.binding.join_next_with_id().await {
                    Some(done) => self.bind_ended(done),
                    None => break,
                }
            }
            self.reap_binds();
            match self.schedule_one(&pod, &usage).await {
                Ok((host, pod_v)) => {
                    let requests = filters::pod_requests(&pod_v);
                    usage.entry(host.clone()).or_default().add(&requests);
                    self.assumed.insert(uid.clone(), (host.clone(), requests));
                    let binder = self.binder.clone();
                    let task = self
                        .binding
                        .spawn(async move { binder.bind_cycle(pod, pod_v, host).await });
                    self.in_flight.insert(task.id(), uid);
                }
                Err(f) => {
                    let due = self.back_off(uid);
                    next = Some(next.map_or(due, |n| n.min(due)));
                    self.binder.record_failure(&pod, &f).await;
                }
            }
        }
        next
    }

    /// Per-node usage from the pods in the cache plus the assumed ones.
    fn usage(&mut self, pods: &[Arc<Pod>]) -> HashMap<String, NodeUsage> {
        let mut out: HashMap<String, NodeUsage> = HashMap::new();
        for p in pods {
            let node = node_name(p);
            if node.is_empty() || is_terminal(p) {
                continue;
            }
            let uid = p.uid().unwrap_or_default();
            let requests = self.requests.entry(uid).or_insert_with(|| {
                let v = serde_json::to_value(&**p).unwrap_or(Value::Null);
                filters::pod_requests(&v)
            });
            out.entry(node.to_string()).or_default().add(requests);
        }
        for (node, req) in self.assumed.values() {
            out.entry(node.clone()).or_default().add(req);
        }
        out
    }

    /// The nodes as JSON, sorted by name; each encoded again only when it changed.
    fn node_values(&mut self) -> Vec<Value> {
        let nodes = self.nodes.state();
        let names: HashSet<String> = nodes.iter().map(|n| n.name_any()).collect();
        self.node_values.retain(|name, _| names.contains(name));
        let mut out = Vec::with_capacity(nodes.len());
        for n in &nodes {
            let rv = n.resource_version().unwrap_or_default();
            let entry = self.node_values.entry(n.name_any()).or_default();
            if entry.0 != rv || entry.1.is_null() {
                *entry = (rv, serde_json::to_value(&**n).unwrap_or(Value::Null));
            }
            if !entry.1.is_null() {
                out.push(entry.1.clone());
            }
        }
        out.sort_by(|a, b| {
            let n = |v: &Value| {
                v.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            n(a).cmp(&n(b))
        });
        out
    }

    /// The scheduling cycle of one pod: the node it goes to, with the pod as JSON.
    async fn schedule_one(
        &mut self,
        pod: &Pod,
        usage: &HashMap<String, NodeUsage>,
    ) -> Result<(String, Value), Failure> {
        let pod_v = serde_json::to_value(pod).map_err(|e| Failure::Error(e.to_string()))?;
        let nodes = self.node_values();
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
        Ok((host, pod_v))
    }
}
