//! The chaos run behind `cargo xtask chaos` and its CI-sized test: many pods of mixed
//! shapes submitted at a steady rate to a demo cluster of many nodes while API writes
//! fail, pods are deleted at every stage (and re-created under the same name), watches
//! drop and history is compacted, and the extender, the webhook, device plugins and
//! kubelets restart (gracefully and killed). Everything is drawn from one seed.
//!
//! The invariants are checked from the API server's objects, never from the extender's
//! memory: continuously, no GPU over its memory, compute or slots and no exclusive card
//! shared, every bound pod's annotations naming its node; after quiescence, no node lock
//! left, the extender's ledger equal to the bound pods' annotations (no reservation
//! left), kubelet's allocations equal to the scheduler's, and every pod Running or
//! Pending with a readable reason.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::time::{Duration, Instant};

use hami_core::annotations as keys;
use hami_testkit::Fault;
use hami_testkit::fixture::GpuPod;
use hami_testkit::kubelet::PluginCall;
use hami_testkit::resources::{NODES, PODS};
use hami_testkit::selectors::Selector;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng as StdRng;
use serde_json::{Value, json};

use crate::cluster::DemoCluster;
use crate::component::HarnessError;
use crate::report::{GpuReport, allocated, container_specs, gpu_usage};
use crate::spec::{ClusterSpec, NodeSpec, Timing};

/// The namespace of the chaos pods.
const NAMESPACE: &str = "default";
/// GPUs per node.
const GPUS_PER_NODE: usize = 8;
/// The verbs whose requests fail at `fault_rate`.
const FAULTED_VERBS: [&str; 4] = ["create", "patch", "update", "delete"];

/// How big and how hostile a run is.
#[derive(Debug, Clone)]
pub struct ChaosSpec {
    pub nodes: usize,
    pub pods: usize,
    pub seed: u64,
    /// Pods submitted per second.
    pub rate: f64,
    /// Share (0..=1) of API writes that fail.
    pub fault_rate: f64,
    /// Latency added to every API request.
    pub latency: Duration,
    /// Chaos events (deletions, restarts, watch drops) per second of submission.
    pub events_per_second: f64,
    /// How long the cluster may take to settle after the last pod and the last fault.
    pub quiesce_timeout: Duration,
}

impl ChaosSpec {
    /// The full run: 5,000 pods on 100 nodes × 8 GPUs.
    pub fn full(seed: u64) -> Self {
        Self {
            nodes: 100,
            pods: 5000,
            seed,
            rate: 100.0,
            fault_rate: 0.05,
            latency: Duration::from_millis(1),
            events_per_second: 2.0,
            quiesce_timeout: Duration::from_secs(180),
        }
    }

    /// The size CI runs on 2 cores: 1,000 pods on 20 nodes × 8 GPUs, same mix and chaos.
    pub fn ci(seed: u64) -> Self {
        Self {
            nodes: 20,
            pods: 1000,
            rate: 12.0,
            events_per_second: 0.5,
            quiesce_timeout: Duration::from_secs(120),
            ..Self::full(seed)
        }
    }

    /// The demo cluster: mixed models (A100, T4, H100, A10), four GPUs per NUMA node.
    pub fn cluster_spec(&self) -> ClusterSpec {
        const MODELS: [(&str, u64); 4] = [
            ("NVIDIA A100-SXM4-80GB", 81920),
            ("Tesla T4", 15360),
            ("NVIDIA H100 80GB HBM3", 81559),
            ("NVIDIA A10", 23028),
        ];
        let nodes = (0..self.nodes)
            .map(|i| {
                let (model, mib) = MODELS[i % MODELS.len()];
                NodeSpec::new(&format!("chaos-{i:03}")).gpus(model, mib, &[0, 0, 0, 0, 1, 1, 1, 1])
            })
            .collect();
        let mut spec = ClusterSpec::new(nodes).timing(Timing {
            max_backoff: Duration::from_secs(2),
            ..Timing::fast()
        });
        spec.usage_reporting = false;
        spec
    }
}

/// The GPU model names a pod may select (`nvidia.com/use-gputype`).
const TYPES: [&str; 4] = ["A100", "T4", "H100", "A10"];

/// Pod `i` of the run: the shape is drawn from `rng`.
fn draw_pod(rng: &mut StdRng, i: usize) -> (GpuPod, bool) {
    let name = format!("chaos-{i:05}");
    let mib = [500, 1000, 2000, 3000][rng.random_range(0..4)];
    let cores = [0, 10, 20, 30][rng.random_range(0..4)];
    let roll = rng.random_range(0..100);
    let mut init = false;
    let pod = match roll {
        0..=44 => GpuPod::new(&name).gpus(1).gpumem(mib).gpucores(cores),
        45..=59 => GpuPod::new(&name)
            .gpus(1)
            .gpumem_percentage([5, 10, 25][rng.random_range(0..3)])
            .gpucores(10),
        60..=62 => GpuPod::new(&name).gpus(1),
        63..=69 => GpuPod::new(&name).gpus(2).gpumem(mib).gpucores(cores),
        70..=76 => GpuPod::new(&name)
            .gpus(1)
            .gpumem(mib)
            .container("sidecar")
            .gpus(1)
            .gpumem(500)
            .container("proxy"),
        77..=83 => {
            init = true;
            GpuPod::new(&name).gpus(1).gpumem(mib)
        }
        84..=88 => GpuPod::new(&name)
            .gpus(2)
            .gpumem(1000)
            .annotation("nvidia.com/numa-bind", "true"),
        _ => GpuPod::new(&name).gpus(1).gpumem(mib).annotation(
            keys::NVIDIA_USE_GPUTYPE,
            TYPES[rng.random_range(0..TYPES.len())],
        ),
    };
    // Most pods spread over the nodes: with binpack, consecutive pods go to the same
    // node, whose lock (held from bind until kubelet's Allocate) serialises them, as in
    // HAMi; the rest keep the default binpack so both policies meet the chaos.
    let pod = if rng.random_bool(0.85) {
        pod.annotation(keys::NODE_SCHEDULER_POLICY, "spread")
    } else {
        pod
    };
    (pod, init)
}

/// The pod's object, with an init container (no GPU) when `init`.
fn pod_object(pod: &GpuPod, init: bool) -> Value {
    let mut object = pod.to_object();
    if init && let Some(spec) = object.get_mut("spec") {
        spec["initContainers"] = json!([{
            "name": "setup", "image": "busybox:1.36", "command": ["true"]
        }]);
    }
    object
}

/// What the run did and found.
#[derive(Debug, Clone, Default)]
pub struct ChaosSummary {
    pub seed: u64,
    pub nodes: usize,
    /// Pods created (re-creations under the same name included).
    pub pods: usize,
    /// Pods bound at the end.
    pub bound: usize,
    pub running: usize,
    /// Pending (Unschedulable) at the end.
    pub pending: usize,
    /// Failed at the end (kubelet refused them, e.g. a device plugin was gone).
    pub failed: usize,
    /// The Failed pods by `status.reason`, with one `status.message` of each reason.
    pub failed_reasons: BTreeMap<String, (usize, String)>,
    /// Deleted, by the stage the pod was in.
    pub deleted: BTreeMap<&'static str, usize>,
    /// Deleted between filter and bind and re-created at once under the same name.
    pub recreated: usize,
    /// Component restarts, by kind.
    pub restarts: BTreeMap<&'static str, usize>,
    /// Requests the API server failed on purpose.
    pub faults: usize,
    pub watch_drops: usize,
    pub compactions: usize,
    /// Creation to Running, over the pods that ran.
    pub p50_to_running: Duration,
    pub p99_to_running: Duration,
    /// Pods bound within 10 s of each extender restart after a kill.
    pub binds_after_kill: Vec<usize>,
    /// Each kill's throughput check: binds per second in the 10 s before the kill, and
    /// in the 10 s after the restart (None where the windows overlap other
    /// extender restarts or the end of submission, so they say nothing about the kill).
    pub recovery: Vec<Option<(f64, f64)>>,
    /// How long each extender restart or kill took until the new one was ready and knew
    /// every GPU.
    pub extender_restarts: Vec<Duration>,
    pub wall: Duration,
    pub violations: Vec<String>,
}

impl ChaosSummary {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "chaos seed {}: {} nodes × {GPUS_PER_NODE} GPUs, {} pods created in {:.1?}",
            self.seed, self.nodes, self.pods, self.wall
        );
        let _ = writeln!(
            out,
            "  end: {} bound ({} running), {} pending, {} failed",
            self.bound, self.running, self.pending, self.failed
        );
        for (reason, (n, message)) in &self.failed_reasons {
            let _ = writeln!(out, "    failed {n} × {reason}, e.g. {message:?}");
        }
        let _ = writeln!(
            out,
            "  deleted: {:?}; re-created under the same name: {}",
            self.deleted, self.recreated
        );
        let _ = writeln!(out, "  restarts: {:?}", self.restarts);
        let _ = writeln!(
            out,
            "  faults: {} failed requests, {} watch drops, {} compactions",
            self.faults, self.watch_drops, self.compactions
        );
        let _ = writeln!(
            out,
            "  time to Running: p50 {:.2?}, p99 {:.2?}; binds in the 10 s after each extender kill: {:?}",
            self.p50_to_running, self.p99_to_running, self.binds_after_kill
        );
        let recovery: Vec<String> = self
            .recovery
            .iter()
            .map(|r| match r {
                Some((before, after)) => format!("{before:.1}/s before, {after:.1}/s 5-10 s after"),
                None => "not measurable".into(),
            })
            .collect();
        let _ = writeln!(out, "  binds around each extender kill: {recovery:?}");
        let restarts: Vec<String> = self
            .extender_restarts
            .iter()
            .map(|d| format!("{:.1}s", d.as_secs_f64()))
            .collect();
        let _ = writeln!(out, "  extender restarts took: {restarts:?}");
        if self.violations.is_empty() {
            let _ = writeln!(out, "  violations: none");
        } else {
            let _ = writeln!(out, "  violations ({}):", self.violations.len());
            for v in self.violations.iter().take(50) {
                let _ = writeln!(out, "    - {v}");
            }
        }
        out
    }
}

/// One chaos event.
#[derive(Debug, Clone, Copy)]
enum Event {
    DeletePod,
    DeleteAndRecreate,
    DropWatches,
    Compact,
    RestartExtender,
    KillExtender,
    RestartWebhook,
    KillWebhook,
    RestartPlugin,
    RestartKubelet,
    /// The node's device plugin stops reporting; it comes back a few seconds later.
    SilencePlugin,
}

fn draw_event(rng: &mut StdRng) -> Event {
    match rng.random_range(0..100) {
        0..=34 => Event::DeletePod,
        35..=54 => Event::DeleteAndRecreate,
        55..=64 => Event::DropWatches,
        65..=69 => Event::Compact,
        70..=73 => Event::RestartExtender,
        74..=77 => Event::KillExtender,
        78..=80 => Event::RestartWebhook,
        81..=83 => Event::KillWebhook,
        84..=89 => Event::RestartPlugin,
        90..=94 => Event::RestartKubelet,
        _ => Event::SilencePlugin,
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The stage a pod is in, for deletions.
fn stage(pod: &Value) -> &'static str {
    let bound = !str_at(pod, "/spec/nodeName").is_empty();
    let filtered = pod
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(keys::VGPU_NODE))
        .is_some();
    match (bound, str_at(pod, "/status/phase")) {
        (true, "Running") => "running",
        (true, _) => "during allocate",
        (false, _) if filtered => "between filter and bind",
        (false, _) => "before filter",
    }
}

/// Tracks every pod created: when, and when it was first seen Running.
#[derive(Default)]
struct Tracker {
    /// uid → (created, running after)
    pods: HashMap<String, (Instant, Option<Duration>)>,
    /// Bind times seen (uid → when first seen bound).
    bound_at: HashMap<String, Instant>,
    /// Every pod's name by UID, deleted pods included (for the Allocate log).
    names: HashMap<String, String>,
}

impl Tracker {
    fn observe(&mut self, pods: &[Value]) {
        let now = Instant::now();
        for p in pods {
            let uid = str_at(p, "/metadata/uid");
            if !str_at(p, "/spec/nodeName").is_empty() {
                self.bound_at.entry(uid.to_string()).or_insert(now);
            }
            if str_at(p, "/status/phase") == "Running"
                && let Some((created, ran)) = self.pods.get_mut(uid)
                && ran.is_none()
            {
                *ran = Some(now.duration_since(*created));
            }
        }
    }

    /// `name (uid)`, or the UID alone for a pod this run did not create.
    fn describe(&self, uid: &str) -> String {
        match self.names.get(uid) {
            Some(name) => format!("{name} ({uid})"),
            None => format!("? ({uid})"),
        }
    }

    fn binds_between(&self, from: Instant, to: Instant) -> usize {
        self.bound_at
            .values()
            .filter(|t| **t >= from && **t < to)
            .count()
    }
}

/// The running chaos: the cluster, the seeded draws and what was seen.
struct Run<'a> {
    spec: &'a ChaosSpec,
    cluster: DemoCluster,
    rng: StdRng,
    tracker: Tracker,
    summary: ChaosSummary,
    /// Nodes whose plugin is silenced, with when it comes back.
    silenced: Vec<(String, Instant)>,
    /// Each killed extender: when it was killed and when it was back.
    kill_restarts: Vec<(Instant, Instant)>,
    /// Each graceful extender restart: when it began and ended.
    restarts: Vec<(Instant, Instant)>,
    /// When the last pod was submitted.
    submitted_at: Option<Instant>,
}

/// Runs the chaos and answers its summary (its violations included); an error only when
/// the harness itself cannot run (the cluster does not start).
pub async fn run(spec: &ChaosSpec) -> Result<ChaosSummary, HarnessError> {
    let started = Instant::now();
    let cluster = DemoCluster::start(spec.cluster_spec()).await?;
    let mut run = Run {
        spec,
        cluster,
        rng: StdRng::seed_from_u64(spec.seed),
        tracker: Tracker::default(),
        summary: ChaosSummary {
            seed: spec.seed,
            nodes: spec.nodes,
            ..ChaosSummary::default()
        },
        silenced: Vec::new(),
        kill_restarts: Vec::new(),
        restarts: Vec::new(),
        submitted_at: None,
    };
    run.faults_on();
    run.submit_all().await;
    run.cluster.api().faults().clear();
    run.bring_all_back().await?;
    run.quiesce().await;
    run.final_checks().await;
    run.summarise();
    run.summary.wall = started.elapsed();
    let summary = run.summary.clone();
    if let Err(e) = run.cluster.shutdown().await {
        tracing::warn!(error = %e, "chaos: shutdown reported an error");
    }
    Ok(summary)
}

impl Run<'_> {
    fn faults_on(&self) {
        let faults = self.cluster.api().faults();
        faults.set_latency(self.spec.latency);
        for (i, verb) in FAULTED_VERBS.iter().enumerate() {
            let fault = match i % 3 {
                0 => Fault::InternalError,
                1 => Fault::Conflict,
                _ => Fault::Timeout(Duration::from_millis(100)),
            };
            faults.set_error_rate(verb, self.spec.fault_rate, fault);
        }
    }

    /// Submits every pod at the steady rate, with chaos events in between and the
    /// invariants checked as it goes.
    async fn submit_all(&mut self) {
        let start = Instant::now();
        let period = Duration::from_secs_f64(1.0 / self.spec.rate.max(1e-3));
        let event_period = Duration::from_secs_f64(1.0 / self.spec.events_per_second.max(1e-3));
        let mut next_event = start + event_period;
        // Chaos events happen over the submission window however long creating the pods
        // takes: as many as the window holds at the rate asked.
        let events = (self.spec.pods as f64 / self.spec.rate.max(1e-3)
            * self.spec.events_per_second.max(0.0))
        .ceil() as usize;
        let mut events_done = 0;
        let mut next_check = start;
        let mut pending: Vec<(GpuPod, bool)> = Vec::new();
        let mut submitted = 0;
        while submitted < self.spec.pods || !pending.is_empty() || events_done < events {
            let now = Instant::now();
            while submitted < self.spec.pods && start + period * submitted as u32 <= now {
                let drawn = draw_pod(&mut self.rng, submitted);
                pending.push(drawn);
                submitted += 1;
            }
            if submitted == self.spec.pods && pending.is_empty() && self.submitted_at.is_none() {
                self.submitted_at = Some(now);
            }
            // Creation fails while the webhook is down (failurePolicy Fail) or when the
            // write is failed on purpose: such pods are tried again on the next tick. On a
            // loaded machine creating is slower than the rate asked: a time budget per
            // tick keeps the chaos events and the continuous checks going meanwhile (one
            // round of creating everything due once took 9 minutes of a 5,000-pod run).
            let budget = Instant::now() + CREATE_BUDGET;
            let mut retry = Vec::new();
            let mut due = std::mem::take(&mut pending).into_iter();
            for (pod, init) in due.by_ref() {
                if !self.create(&pod, init).await {
                    retry.push((pod, init));
                }
                if Instant::now() >= budget {
                    break;
                }
            }
            retry.extend(due);
            pending = retry;
            // Events follow the pods: when creating falls behind the rate, event k waits
            // for its share of the pods, so the chaos spans the whole submission.
            let placed = submitted - pending.len();
            if now >= next_event
                && events_done < events
                && placed * events >= events_done * self.spec.pods
            {
                let event = draw_event(&mut self.rng);
                self.chaos(event).await;
                events_done += 1;
                next_event += event_period;
            }
            self.revive_silenced(false).await;
            self.extender_alive().await;
            if now >= next_check {
                self.check_now();
                tracing::info!(
                    submitted,
                    created = self.summary.pods,
                    waiting = pending.len(),
                    running = self
                        .tracker
                        .pods
                        .values()
                        .filter(|(_, r)| r.is_some())
                        .count(),
                    "chaos: progress"
                );
                next_check = now + Duration::from_millis(250);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn create(&mut self, pod: &GpuPod, init: bool) -> bool {
        let object: Pod = match serde_json::from_value(pod_object(pod, init)) {
            Ok(p) => p,
            Err(e) => {
                self.summary
                    .violations
                    .push(format!("pod {} does not build: {e}", pod.name));
                return true;
            }
        };
        let api = Api::<Pod>::namespaced(self.cluster.client(), NAMESPACE);
        match api.create(&PostParams::default(), &object).await {
            Ok(created) => {
                if let Some(uid) = created.metadata.uid {
                    self.tracker.names.insert(uid.clone(), pod.name.clone());
                    self.tracker.pods.insert(uid, (Instant::now(), None));
                }
                self.summary.pods += 1;
                true
            }
            Err(kube::Error::Api(e)) if e.code == 409 && e.reason == "AlreadyExists" => {
                // A create that timed out may have landed.
                true
            }
            Err(e) => {
                tracing::debug!(pod = %pod.name, error = %e, "chaos: create failed; retrying");
                false
            }
        }
    }

    fn pods(&self) -> Vec<Value> {
        self.cluster
            .api()
            .store()
            .list(&PODS, Some(NAMESPACE), &Selector::default())
            .0
    }

    /// A random pod in the stage `want` (any stage when None).
    fn pick(&mut self, want: Option<&str>) -> Option<Value> {
        let pods: Vec<Value> = self
            .pods()
            .into_iter()
            .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none())
            .filter(|p| want.is_none_or(|w| stage(p) == w))
            .collect();
        if pods.is_empty() {
            return None;
        }
        let i = self.rng.random_range(0..pods.len());
        pods.into_iter().nth(i)
    }

    async fn chaos(&mut self, event: Event) {
        tracing::info!(?event, "chaos event");
        let node = format!("chaos-{:03}", self.rng.random_range(0..self.spec.nodes));
        match event {
            Event::DeletePod => {
                let stages = [
                    "before filter",
                    "between filter and bind",
                    "during allocate",
                    "running",
                ];
                let want = stages[self.rng.random_range(0..stages.len())];
                if let Some(pod) = self.pick(Some(want)).or_else(|| self.pick(None)) {
                    self.delete(&pod, false).await;
                }
            }
            Event::DeleteAndRecreate => {
                let pod = self
                    .pick(Some("between filter and bind"))
                    .or_else(|| self.pick(Some("before filter")));
                if let Some(pod) = pod {
                    self.delete(&pod, true).await;
                }
            }
            Event::DropWatches => {
                self.cluster.api().store().drop_watches();
                self.summary.watch_drops += 1;
            }
            Event::Compact => {
                self.cluster.api().store().compact();
                self.cluster.api().store().drop_watches();
                self.summary.compactions += 1;
            }
            Event::RestartExtender => {
                let began = Instant::now();
                let r = self.cluster.restart_extender().await;
                self.count("extender (graceful)", r);
                self.restarts.push((began, Instant::now()));
                self.summary.extender_restarts.push(began.elapsed());
            }
            Event::KillExtender => {
                let killed = Instant::now();
                self.cluster.kill_extender().await;
                let r = self.cluster.start_extender().await;
                self.count("extender (killed)", r);
                self.kill_restarts.push((killed, Instant::now()));
                self.summary.extender_restarts.push(killed.elapsed());
            }
            Event::RestartWebhook => {
                let r = self.cluster.restart_webhook().await;
                self.count("webhook (graceful)", r);
            }
            Event::KillWebhook => {
                self.cluster.kill_webhook().await;
                let r = self.cluster.start_webhook().await;
                self.count("webhook (killed)", r);
            }
            Event::RestartPlugin if !self.is_silenced(&node) => {
                let r = self.cluster.restart_device_plugin(&node).await;
                self.count("device plugin", r);
            }
            Event::RestartKubelet if !self.is_silenced(&node) => {
                let r = self.cluster.restart_kubelet(&node).await;
                self.count("kubelet", r);
            }
            Event::RestartPlugin | Event::RestartKubelet => {}
            Event::SilencePlugin => {
                if !self.is_silenced(&node) {
                    match self.cluster.stop_device_plugin(&node).await {
                        Ok(()) => {
                            let back = Instant::now()
                                + Duration::from_millis(self.rng.random_range(1000..5000));
                            self.silenced.push((node, back));
                            *self
                                .summary
                                .restarts
                                .entry("device plugin silenced")
                                .or_default() += 1;
                        }
                        Err(e) => self
                            .summary
                            .violations
                            .push(format!("stopping the device plugin of {node}: {e}")),
                    }
                }
            }
        }
    }

    fn is_silenced(&self, node: &str) -> bool {
        self.silenced.iter().any(|(n, _)| n == node)
    }

    /// Counts a restart, or its failure as a violation.
    fn count(&mut self, what: &'static str, result: Result<(), HarnessError>) {
        match result {
            Ok(()) => *self.summary.restarts.entry(what).or_default() += 1,
            Err(e) => self
                .summary
                .violations
                .push(format!("restarting the {what}: {e}")),
        }
    }

    /// Brings silenced device plugins back (all of them when `all`).
    async fn revive_silenced(&mut self, all: bool) {
        let now = Instant::now();
        let (due, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.silenced)
            .into_iter()
            .partition(|(_, back)| all || *back <= now);
        self.silenced = wait;
        for (node, _) in due {
            if let Err(e) = self.cluster.start_device_plugin(&node).await {
                self.summary
                    .violations
                    .push(format!("starting the device plugin of {node} again: {e}"));
            }
        }
    }

    /// Deletes the pod (its UID as the precondition); re-creates it at once under the
    /// same name when `recreate`, as a StatefulSet does.
    async fn delete(&mut self, pod: &Value, recreate: bool) {
        let name = str_at(pod, "/metadata/name").to_string();
        let uid = str_at(pod, "/metadata/uid").to_string();
        let at = stage(pod);
        let api = Api::<Pod>::namespaced(self.cluster.client(), NAMESPACE);
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        for _ in 0..5 {
            match api.delete(&name, &params).await {
                Ok(_) => {
                    *self.summary.deleted.entry(at).or_default() += 1;
                    break;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => return,
                Err(e) => tracing::debug!(pod = %name, error = %e, "chaos: delete failed"),
            }
        }
        if !recreate {
            return;
        }
        // The successor gets the name once the old pod is gone (its kubelet finishes the
        // deletion of a bound pod); an unbound pod goes at once.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.cluster.pod(NAMESPACE, &name).is_none() {
                let init = self.rng.random_bool(0.5);
                let (mut successor, _) = draw_pod(&mut self.rng, 0);
                successor.name = name.clone();
                for _ in 0..10 {
                    if self.create(&successor, init).await {
                        self.summary.recreated += 1;
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The continuous invariants, from the API server's objects.
    fn check_now(&mut self) {
        let pods = self.pods();
        self.tracker.observe(&pods);
        let (_, violations) = gpu_usage(&self.cluster);
        for v in violations {
            if !self.summary.violations.contains(&v) {
                tracing::error!(violation = %v, "chaos: invariant broken");
                self.summary.violations.push(v);
            }
        }
    }

    /// Every component running again: silenced device plugins, and any component whose
    /// restart failed part way (a plugin that did not register in time is left running,
    /// one that could not be started is started here).
    async fn bring_all_back(&mut self) -> Result<(), HarnessError> {
        self.revive_silenced(true).await;
        let stopped: Vec<String> = self
            .cluster
            .nodes()
            .iter()
            .filter(|n| n.plugin_status().is_none())
            .map(|n| n.name().to_string())
            .collect();
        for node in stopped {
            tracing::warn!(%node, "chaos: the device plugin is not running at the end; starting it");
            if let Err(e) = self.cluster.start_device_plugin(&node).await {
                self.summary.violations.push(format!(
                    "starting the device plugin of {node} at the end: {e}"
                ));
            }
        }
        self.cluster.start_webhook().await?;
        self.extender_alive().await;
        self.cluster.start_extender().await?;
        Ok(())
    }

    /// An extender that ended by itself (its supervisor gave up on a task) is a violation
    /// naming its error; it is started again, as Kubernetes restarts the container.
    async fn extender_alive(&mut self) {
        let Some(why) = self.cluster.extender_exited().await else {
            return;
        };
        tracing::error!(error = %why, "chaos: the extender stopped by itself");
        self.summary
            .violations
            .push(format!("the extender stopped by itself: {why}"));
        let began = Instant::now();
        let r = self.cluster.start_extender().await;
        self.count("extender (after it stopped)", r);
        self.restarts.push((began, Instant::now()));
    }

    /// Waits until every pod is Running, Failed or Pending as Unschedulable, and stays
    /// so; a pod still in between at the deadline is a violation.
    async fn quiesce(&mut self) {
        let deadline = Instant::now() + self.spec.quiesce_timeout;
        let mut calm_since: Option<Instant> = None;
        loop {
            self.check_now();
            self.extender_alive().await;
            let unsettled: Vec<String> = self
                .pods()
                .iter()
                .filter_map(|p| {
                    unsettled(p).map(|why| format!("{}: {why}", str_at(p, "/metadata/name")))
                })
                .collect();
            let now = Instant::now();
            if unsettled.is_empty() {
                // Pending pods are retried at the scheduler's longest backoff: settled
                // means no change for a few of those.
                let since = *calm_since.get_or_insert(now);
                if now.duration_since(since) >= Duration::from_secs(5) {
                    return;
                }
            } else {
                calm_since = None;
            }
            tracing::info!(unsettled = unsettled.len(), "chaos: waiting for quiescence");
            if now > deadline {
                for u in unsettled.iter().take(20) {
                    self.summary.violations.push(format!(
                        "not settled after {:?}: {u}",
                        self.spec.quiesce_timeout
                    ));
                }
                if unsettled.len() > 20 {
                    self.summary
                        .violations
                        .push(format!("... and {} more not settled", unsettled.len() - 20));
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The invariants that hold only once everything settled.
    async fn final_checks(&mut self) {
        let (nodes, _) = self
            .cluster
            .api()
            .store()
            .list(&NODES, None, &Selector::default());
        for n in &nodes {
            if let Some(lock) = n
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(keys::NODE_LOCK))
            {
                self.summary.violations.push(format!(
                    "node {} still locked after quiescence: {lock}",
                    str_at(n, "/metadata/name")
                ));
            }
        }
        self.ledger_matches().await;
        self.no_reservation_left().await;
        for p in self.pods() {
            if let Err(v) = self.kubelet_agrees(&p) {
                self.summary.violations.push(v);
            }
        }
        self.allocates_matched();
    }

    /// Every Allocate the device plugins answered went to the pod kubelet admitted: the
    /// plugin picks the pod from the API server (kubelet does not name it), and its
    /// answer's per-container directory names the pod it chose. Checked over the whole
    /// run, deleted pods included.
    fn allocates_matched(&mut self) {
        for node in self.cluster.nodes() {
            for call in node.kubelet().calls() {
                let PluginCall::Allocate {
                    pod_uid,
                    container,
                    devices,
                    result: Ok(response),
                    ..
                } = call
                else {
                    continue;
                };
                let Some((uid, chosen)) =
                    plugin_choice(response.mounts.iter().map(|m| m.host_path.as_str()))
                else {
                    continue;
                };
                if uid != pod_uid || chosen != container {
                    self.summary.violations.push(format!(
                        "node {}: kubelet's Allocate of {devices:?} for pod {} container {container} was answered for pod {} container {chosen}",
                        node.name(),
                        self.tracker.describe(&pod_uid),
                        self.tracker.describe(&uid),
                    ));
                }
            }
        }
    }

    /// The extender's ledger (its metrics) equals the bound pods' annotations, GPU by GPU:
    /// no reservation of a deleted or unbound pod is left.
    async fn ledger_matches(&mut self) {
        let (gpus, _) = gpu_usage(&self.cluster);
        let want: BTreeMap<String, u64> =
            gpus.iter().map(|g| (g.uuid.clone(), g.used_mem)).collect();
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut got = BTreeMap::new();
        while Instant::now() < deadline {
            got = match self.cluster.extender_metrics().await {
                Ok(text) => ledger_mib(&text),
                Err(_) => BTreeMap::new(),
            };
            if got == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let ledger_pods = match self.cluster.extender_metrics().await {
            Ok(text) => ledger_pods(&text),
            Err(e) => {
                tracing::warn!(error = %e, "chaos: the extender's metrics cannot be read");
                BTreeMap::new()
            }
        };
        let differing: Vec<&GpuReport> = gpus
            .iter()
            .filter(|g| got.get(&g.uuid) != Some(&g.used_mem))
            .collect();
        let none = Vec::new();
        for g in differing.iter().take(20) {
            self.summary.violations.push(format!(
                "the extender's ledger differs from the bound pods' annotations after quiescence on {} ({}): annotations {} MiB by {:?}, ledger {:?} MiB by {:?}",
                g.uuid,
                g.node,
                g.used_mem,
                g.pods,
                got.get(&g.uuid),
                ledger_pods.get(&g.uuid).unwrap_or(&none),
            ));
        }
        if differing.len() > 20 {
            self.summary.violations.push(format!(
                "... and the ledger differs on {} more GPUs",
                differing.len() - 20
            ));
        }
        let unknown: Vec<&String> = got.keys().filter(|u| !want.contains_key(*u)).collect();
        if !unknown.is_empty() {
            self.summary.violations.push(format!(
                "the extender's ledger has GPUs no node registers after quiescence: {unknown:?}"
            ));
        }
    }

    /// The extender's `hami_scheduler_reservations` gauge reads 0: no pod holds GPUs
    /// while unbound once everything settled.
    async fn no_reservation_left(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut last = None;
        while Instant::now() < deadline {
            last = self
                .cluster
                .extender_metrics()
                .await
                .ok()
                .and_then(|text| reservations(&text));
            if last == Some(0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.summary.violations.push(format!(
            "reservations left after quiescence: hami_scheduler_reservations is {last:?}, not 0"
        ));
    }

    /// Kubelet's allocation of a running pod is of exactly the GPUs the scheduler wrote.
    fn kubelet_agrees(&self, pod: &Value) -> Result<(), String> {
        if str_at(pod, "/status/phase") != "Running" {
            return Ok(());
        }
        let name = str_at(pod, "/metadata/name");
        let uid = str_at(pod, "/metadata/uid");
        let node = str_at(pod, "/spec/nodeName");
        let Some(n) = self.cluster.node(node) else {
            return Err(format!(
                "pod {name} runs on {node}, which is not an emulated node"
            ));
        };
        let resource = &self.cluster.spec().devices.nvidia.resource_count_name;
        let devices = allocated(pod).map_err(|e| format!("pod {name}: {e}"))?;
        for (i, spec) in container_specs(pod).into_iter().enumerate() {
            let c = str_at(spec, "/name");
            let mut annotated: Vec<&str> = devices
                .get(i)
                .map(|d| d.iter().map(|d| d.uuid.as_str()).collect())
                .unwrap_or_default();
            annotated.sort_unstable();
            let held = n.kubelet().container_allocation(uid, c);
            let held = held.as_ref();
            let mut replicas: Vec<String> = held
                .and_then(|h| h.get(resource).map(|a| a.devices.clone()))
                .unwrap_or_default()
                .into_iter()
                .map(|id| {
                    id.rsplit_once('-')
                        .map_or(id.clone(), |(u, _)| u.to_string())
                })
                .collect();
            replicas.sort_unstable();
            if replicas != annotated {
                let answered = held
                    .and_then(|h| h.get(resource))
                    .and_then(|a| {
                        plugin_choice(a.response.mounts.iter().map(|m| m.host_path.as_str()))
                    })
                    .map_or_else(
                        || "nobody".to_string(),
                        |(uid, c)| format!("pod {} container {c}", self.tracker.describe(&uid)),
                    );
                return Err(format!(
                    "pod {name} container {c}: kubelet allocated GPUs {replicas:?}, the scheduler annotated {annotated:?}; the device plugin answered that Allocate for {answered}"
                ));
            }
        }
        Ok(())
    }

    fn summarise(&mut self) {
        let pods = self.pods();
        self.tracker.observe(&pods);
        for p in &pods {
            let bound = !str_at(p, "/spec/nodeName").is_empty();
            match str_at(p, "/status/phase") {
                "Running" => self.summary.running += 1,
                "Failed" => {
                    self.summary.failed += 1;
                    let entry = self
                        .summary
                        .failed_reasons
                        .entry(str_at(p, "/status/reason").to_string())
                        .or_insert_with(|| (0, str_at(p, "/status/message").to_string()));
                    entry.0 += 1;
                }
                _ if !bound => self.summary.pending += 1,
                _ => {}
            }
            if bound {
                self.summary.bound += 1;
            }
        }
        let mut times: Vec<Duration> = self.tracker.pods.values().filter_map(|(_, r)| *r).collect();
        times.sort_unstable();
        let pct = |q: f64| {
            times
                .get(((times.len() as f64 * q).ceil() as usize).saturating_sub(1))
                .copied()
                .unwrap_or_default()
        };
        self.summary.p50_to_running = pct(0.50);
        self.summary.p99_to_running = pct(0.99);
        self.summary.faults = self
            .cluster
            .api()
            .faults()
            .requests()
            .iter()
            .filter(|r| {
                FAULTED_VERBS.contains(&r.verb.as_str()) && matches!(r.code, 500 | 409 | 504)
            })
            .count();
        self.summary.binds_after_kill = self
            .kill_restarts
            .iter()
            .map(|(_, t)| self.tracker.binds_between(*t, *t + Duration::from_secs(10)))
            .collect();
        self.summary.recovery = self
            .kill_restarts
            .iter()
            .map(|(killed, back)| self.recovery(*killed, *back))
            .collect();
        for (i, r) in self.summary.recovery.iter().enumerate() {
            if let Some((before, after)) = r
                && !recovered(*before, *after)
            {
                self.summary.violations.push(format!(
                    "scheduling throughput not back within {RECOVERY:?} of extender kill {}: {before:.1} binds/s in the {RECOVERY:?} before the kill, {after:.1}/s in the {RECOVERY:?} after the restart",
                    i + 1
                ));
            }
        }
    }

    /// Binds per second in the [`RECOVERY`] before the kill at `killed` and from
    /// in the [`RECOVERY`] after the restart at `back`; None where another
    /// extender restart or kill falls in those windows, or submission ended before them.
    fn recovery(&self, killed: Instant, back: Instant) -> Option<(f64, f64)> {
        let from = killed.checked_sub(RECOVERY)?;
        let to = back + RECOVERY;
        let others = self
            .kill_restarts
            .iter()
            .chain(&self.restarts)
            .filter(|(k, b)| (*k, *b) != (killed, back));
        let overlaps = others.clone().any(|(k, b)| *k < to && *b > from);
        let submitting = self.submitted_at.is_none_or(|end| end >= to);
        if overlaps || !submitting {
            return None;
        }
        let per_s = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
        let before = per_s(self.tracker.binds_between(from, killed), RECOVERY);
        // The whole window after the restart, catch-up included: the backlog of the
        // downtime is bound there first, and once it is gone the rate is only the arrival
        // rate, which can fall below half the rate before the kill (whose window held no
        // backlog) with nothing wrong. A stuck extender (locks waited out, 1-2 binds/s)
        // fails this all the same.
        let after = per_s(self.tracker.binds_between(back, to), RECOVERY);
        Some((before, after))
    }
}

/// How long one tick of the submission loop may spend creating pods.
const CREATE_BUDGET: Duration = Duration::from_millis(200);

/// How soon after a killed extender's restart scheduling must be at full speed again.
const RECOVERY: Duration = Duration::from_secs(10);

/// Full throughput again: at least half the bind rate of before the kill (pods arrive
/// at a steady rate and chaos keeps going, so the rates are noisy), unless so few pods
/// were bound before that the comparison says nothing.
fn recovered(before: f64, after: f64) -> bool {
    before < 1.0 || after >= before / 2.0
}

/// The `hami_scheduler_reservations` gauge in a /metrics text.
fn reservations(metrics: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("hami_scheduler_reservations "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// Why a pod has not settled; None when it is Running, Failed, or Pending with a
/// readable `PodScheduled=False` reason.
fn unsettled(pod: &Value) -> Option<String> {
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return Some("still terminating".into());
    }
    let bound = !str_at(pod, "/spec/nodeName").is_empty();
    match str_at(pod, "/status/phase") {
        "Running" | "Failed" => return None,
        _ if bound => return Some("bound but not running".into()),
        _ => {}
    }
    let condition = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"))
        });
    match condition {
        Some(c)
            if str_at(c, "/status") == "False"
                && str_at(c, "/reason") == "Unschedulable"
                && !str_at(c, "/message").is_empty() =>
        {
            None
        }
        Some(c) => Some(format!(
            "pending: PodScheduled={} {}: {}",
            str_at(c, "/status"),
            str_at(c, "/reason"),
            str_at(c, "/message")
        )),
        None => Some("pending, not tried by the scheduler".into()),
    }
}

/// The pod and container a device plugin's Allocate answer was for: the last part of
/// its per-container directory, `<hook>/vgpu/containers/<pod UID>_<container>`
/// (`docs/device-plugin.md`). None for an answer without one.
fn plugin_choice<'a>(host_paths: impl IntoIterator<Item = &'a str>) -> Option<(String, String)> {
    host_paths.into_iter().find_map(|path| {
        let (_, dir) = path.rsplit_once("/vgpu/containers/")?;
        let (uid, container) = dir.trim_end_matches('/').split_once('_')?;
        Some((uid.to_string(), container.to_string()))
    })
}

/// The pods holding each GPU according to the extender's metrics (`namespace/name`).
fn ledger_pods(metrics: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (labels, _) in crate::usage::samples(metrics, "hami_vgpu_memory_allocated_bytes") {
        let (Some(uuid), Some(ns), Some(pod)) = (
            labels.get("device_uuid"),
            labels.get("namespace"),
            labels.get("pod"),
        ) else {
            continue;
        };
        let id = format!("{ns}/{pod}");
        let pods = out.entry(uuid.clone()).or_default();
        if !pods.contains(&id) {
            pods.push(id);
        }
    }
    out
}

/// MiB allocated per GPU according to the extender's metrics.
fn ledger_mib(metrics: &str) -> BTreeMap<String, u64> {
    crate::usage::samples(metrics, "hami_gpu_memory_allocated_bytes")
        .into_iter()
        .filter_map(|(labels, value)| {
            let uuid = labels.get("device_uuid")?.clone();
            Some((uuid, value as u64 / (1024 * 1024)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugins_choice_is_read_from_the_container_directory() {
        let paths = [
            "/usr/local/vgpu/libvgpu.so",
            "/tmp/hook/vgpu/containers/0b5e-41d2-9a6c_main/",
        ];
        assert_eq!(
            plugin_choice(paths),
            Some(("0b5e-41d2-9a6c".to_string(), "main".to_string()))
        );
        assert_eq!(plugin_choice(["/usr/local/vgpu/libvgpu.so"]), None);
    }

    #[test]
    fn the_summary_says_why_pods_failed() {
        let mut summary = ChaosSummary {
            failed: 3,
            ..ChaosSummary::default()
        };
        summary.failed_reasons.insert(
            "UnexpectedAdmissionError".into(),
            (
                3,
                "Allocate failed due to no healthy devices present".into(),
            ),
        );
        let text = summary.render_text();
        assert!(text.contains("0 pending, 3 failed\n"), "{text}");
        assert!(
            text.contains(
                "    failed 3 × UnexpectedAdmissionError, e.g. \"Allocate failed due to no healthy devices present\""
            ),
            "{text}"
        );
    }

    #[test]
    fn the_ledger_names_the_pods_of_each_gpu() {
        let metrics = "\
hami_vgpu_memory_allocated_bytes{zone=\"vGPU\",namespace=\"default\",node=\"n1\",pod=\"a\",container_index=\"0\",device_uuid=\"g1\"} 1048576
hami_vgpu_memory_allocated_bytes{zone=\"vGPU\",namespace=\"default\",node=\"n1\",pod=\"a\",container_index=\"1\",device_uuid=\"g1\"} 1048576
hami_vgpu_memory_allocated_bytes{zone=\"vGPU\",namespace=\"default\",node=\"n1\",pod=\"b\",container_index=\"0\",device_uuid=\"g2\"} 1048576
";
        let pods = ledger_pods(metrics);
        assert_eq!(pods["g1"], ["default/a"]);
        assert_eq!(pods["g2"], ["default/b"]);
    }
}
