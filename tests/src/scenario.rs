//! The example pods of the demo, what each must get, and the checks that tell whether
//! it got it: placement, HAMi's annotations, the bind phase, the node lock, and the
//! exact environment and mounts of every container.

use std::collections::BTreeMap;
use std::time::Duration;

use hami_core::annotations as keys;
use hami_core::codec::{decode_node_lock, decode_pod_single_device};
use hami_testkit::fixture::GpuPod;
use hami_testkit::resources::NODES;
use serde_json::Value;

use crate::cluster::{DemoCluster, Settled};
use crate::report::{ClusterReport, MountReport, PodReport};
use crate::usage::UsageReport;

/// How long one pod may take to settle.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the nodes' vGPU monitors may take to report every running container.
pub const USAGE_TIMEOUT: Duration = Duration::from_secs(15);

/// How the pod must end up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Running,
    /// Never bound; kube-scheduler's message names this reason for the nodes.
    Unschedulable {
        reason: &'static str,
    },
}

/// Memory per GPU a container must get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mem {
    Mib(u32),
    /// Of the GPU it lands on (rounded down).
    Percent(u32),
}

/// What one container must get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wants {
    pub container: &'static str,
    /// Distinct GPUs.
    pub gpus: usize,
    pub mem: Mem,
    /// Percent of each GPU's compute.
    pub cores: u32,
}

/// An example pod and what it must get.
#[derive(Debug, Clone)]
pub struct Example {
    pub pod: GpuPod,
    /// One line for the report: what the example shows.
    pub about: &'static str,
    pub outcome: Outcome,
    /// Containers that must get GPUs; every other container must get none.
    pub wants: Vec<Wants>,
    /// Every GPU must have this in its model name.
    pub gpu_type: Option<&'static str>,
    /// Each container's GPUs must share one NUMA node.
    pub same_numa: bool,
}

impl Example {
    fn new(pod: GpuPod, about: &'static str) -> Self {
        Self {
            pod,
            about,
            outcome: Outcome::Running,
            wants: Vec::new(),
            gpu_type: None,
            same_numa: false,
        }
    }

    fn wants(mut self, container: &'static str, gpus: usize, mem: Mem, cores: u32) -> Self {
        self.wants.push(Wants {
            container,
            gpus,
            mem,
            cores,
        });
        self
    }

    pub fn name(&self) -> &str {
        &self.pod.name
    }
}

/// The demo's pods, in submission order.
pub fn demo_examples() -> Vec<Example> {
    let mut two = GpuPod::new("two-containers");
    if let Some(first) = two.containers.first_mut() {
        first.name = "trainer".into();
    }
    let two = two
        .gpus(1)
        .gpumem(6000)
        .gpucores(40)
        .container("logger")
        .gpus(1)
        .gpumem(1000)
        .gpucores(10)
        .container("proxy");
    vec![
        Example::new(
            GpuPod::new("shared-4g").gpus(1).gpumem(4000).gpucores(25),
            "a slice of one GPU: 4000 MiB and 25% of its compute",
        )
        .wants("main", 1, Mem::Mib(4000), 25),
        Example::new(
            GpuPod::new("shared-8g").gpus(1).gpumem(8000),
            "8000 MiB of one GPU, compute not limited",
        )
        .wants("main", 1, Mem::Mib(8000), 0),
        Example::new(
            GpuPod::new("half-card")
                .gpus(1)
                .gpumem_percentage(50)
                .gpucores(50),
            "half of a GPU's memory (percentage) and half its compute",
        )
        .wants("main", 1, Mem::Percent(50), 50),
        Example::new(
            GpuPod::new("multi-gpu").gpus(2).gpumem(10000).gpucores(30),
            "two distinct GPUs of one node, 10000 MiB and 30% on each",
        )
        .wants("main", 2, Mem::Mib(10000), 30),
        Example::new(
            GpuPod::new("whole-card").gpus(1),
            "plain nvidia.com/gpu: 1; the webhook makes it exclusive (gpucores=100, all memory)",
        )
        .wants("main", 1, Mem::Percent(100), 100),
        Example::new(
            two,
            "three containers: two share GPUs, the proxy asks for none",
        )
        .wants("trainer", 1, Mem::Mib(6000), 40)
        .wants("logger", 1, Mem::Mib(1000), 10),
        Example {
            gpu_type: Some("T4"),
            ..Example::new(
                GpuPod::new("t4-only")
                    .gpus(1)
                    .gpumem(2000)
                    .annotation(keys::NVIDIA_USE_GPUTYPE, "T4"),
                "nvidia.com/use-gputype: T4 keeps it on a T4",
            )
            .wants("main", 1, Mem::Mib(2000), 0)
        },
        Example {
            same_numa: true,
            ..Example::new(
                GpuPod::new("numa-pair")
                    .gpus(2)
                    .gpumem(4000)
                    .annotation("nvidia.com/numa-bind", "true"),
                "nvidia.com/numa-bind: two GPUs on one NUMA node (only the T4 node has such a pair)",
            )
            .wants("main", 2, Mem::Mib(4000), 0)
        },
        Example::new(
            GpuPod::new("spread-pod")
                .gpus(1)
                .gpumem(1000)
                .annotation(keys::NODE_SCHEDULER_POLICY, "spread")
                .annotation(keys::GPU_SCHEDULER_POLICY, "binpack"),
            "node policy spread (least used node), GPU policy binpack (fullest GPU there)",
        )
        .wants("main", 1, Mem::Mib(1000), 0),
        Example {
            outcome: Outcome::Unschedulable {
                reason: "CardInsufficientMemory",
            },
            ..Example::new(
                GpuPod::new("too-big").gpus(1).gpumem(100_000),
                "100000 MiB on one GPU: no GPU is that large, so it stays Pending",
            )
        },
    ]
}

/// What a run of examples produced.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub report: ClusterReport,
    /// Per-container GPU use as the nodes' vGPU monitors report it (filled by [`run`]).
    pub usage: UsageReport,
    /// `(pod, what is wrong)`; empty when every example got what it must.
    pub problems: Vec<(String, String)>,
}

impl RunOutcome {
    pub fn ok(&self) -> bool {
        self.problems.is_empty() && self.report.violations.is_empty()
    }
}

/// Submits the examples one at a time (each settles before the next, so placements do
/// not depend on timing), then reads the report and checks every example, and what the
/// nodes' vGPU monitors report for their containers.
pub async fn run(cluster: &DemoCluster, examples: &[Example]) -> RunOutcome {
    let mut problems = Vec::new();
    for ex in examples {
        if let Err(e) = submit(cluster, ex).await {
            problems.push((ex.name().to_string(), e));
        }
    }
    let mut outcome = check(cluster, examples).await;
    problems.append(&mut outcome.problems);
    outcome.usage = UsageReport::collect(cluster, &outcome.report, USAGE_TIMEOUT).await;
    problems.extend(
        outcome
            .usage
            .problems
            .iter()
            .map(|p| ("gpu usage".to_string(), p.clone())),
    );
    outcome.problems = problems;
    outcome
}

/// Creates the example's pod and waits until it settles as the example expects; the
/// problem otherwise.
pub async fn submit(cluster: &DemoCluster, ex: &Example) -> Result<Settled, String> {
    cluster
        .create_pod(&ex.pod)
        .await
        .map_err(|e| format!("creating the pod failed: {e}"))?;
    let settled = cluster
        .wait_settled(&ex.pod.namespace, ex.name(), SETTLE_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(pod = %ex.name(), ?settled, "example settled");
    if matches(ex, &settled) {
        Ok(settled)
    } else {
        Err(format!("expected {}, got {settled:?}", expected_state(ex)))
    }
}

/// Reads the report for the examples' pods (already created and settled) and checks
/// each against what it must get.
pub async fn check(cluster: &DemoCluster, examples: &[Example]) -> RunOutcome {
    // The extender's FilteringFailed event is written in the background; give it a moment
    // so the report can show it.
    for ex in examples {
        if matches!(ex.outcome, Outcome::Unschedulable { .. }) {
            let _ = wait_warning(cluster, &ex.pod.namespace, ex.name(), "FilteringFailed").await;
        }
    }
    let names: Vec<(String, String)> = examples
        .iter()
        .map(|e| (e.pod.namespace.clone(), e.name().to_string()))
        .collect();
    let report = ClusterReport::collect(cluster, &names).await;
    let mut problems = Vec::new();
    for ex in examples {
        match report.pod(ex.name()) {
            Some(p) => problems.extend(
                verify(cluster, ex, p, &report)
                    .into_iter()
                    .map(|m| (ex.name().to_string(), m)),
            ),
            None => problems.push((ex.name().to_string(), "missing from the report".into())),
        }
    }
    RunOutcome {
        report,
        usage: UsageReport::default(),
        problems,
    }
}

/// Waits (bounded) for a Warning event with `reason` about the pod.
pub async fn wait_warning(
    cluster: &DemoCluster,
    namespace: &str,
    name: &str,
    reason: &str,
) -> Result<String, hami_testkit::fixture::WaitError> {
    let what = format!("a {reason} event about {namespace}/{name}");
    hami_testkit::fixture::poll_until(&what, Duration::from_secs(10), || async {
        let api: kube::Api<k8s_openapi::api::core::v1::Event> =
            kube::Api::namespaced(cluster.client(), namespace);
        let params =
            kube::api::ListParams::default().fields(&format!("involvedObject.name={name}"));
        api.list(&params)
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .and_then(|e| e.message)
    })
    .await
}

/// Everything wrong with how `pod` turned out against `ex`; empty when all is right.
pub fn verify(
    cluster: &DemoCluster,
    ex: &Example,
    pod: &PodReport,
    report: &ClusterReport,
) -> Vec<String> {
    let mut p = Vec::new();
    match &ex.outcome {
        Outcome::Unschedulable { reason } => verify_unschedulable(cluster, pod, reason, &mut p),
        Outcome::Running => verify_running(cluster, ex, pod, report, &mut p),
    }
    p
}

fn verify_unschedulable(cluster: &DemoCluster, pod: &PodReport, reason: &str, p: &mut Vec<String>) {
    if let Some(node) = &pod.node {
        p.push(format!("must stay unbound, but is bound to {node}"));
    }
    if pod.reason.as_deref() != Some("Unschedulable") {
        p.push(format!(
            "PodScheduled reason is {:?}, not Unschedulable",
            pod.reason
        ));
    }
    let msg = pod.message.clone().unwrap_or_default();
    let prefix = format!("0/{} nodes are available:", cluster.spec().nodes.len());
    if !msg.starts_with(&prefix) || !msg.contains(reason) {
        p.push(format!(
            "scheduler message {msg:?} does not start with {prefix:?} and name {reason}"
        ));
    }
    for key in [
        keys::VGPU_NODE,
        keys::NVIDIA_DEVICES_ALLOCATED,
        keys::BIND_PHASE,
    ] {
        if let Some(v) = pod.annotations.get(key) {
            p.push(format!("an unschedulable pod carries {key}={v}"));
        }
    }
}

fn verify_running(
    cluster: &DemoCluster,
    ex: &Example,
    pod: &PodReport,
    report: &ClusterReport,
    p: &mut Vec<String>,
) {
    let Some(node) = pod.node.clone().filter(|_| pod.phase == "Running") else {
        p.push(format!(
            "must run, but is {} on {:?} ({:?}: {:?})",
            pod.phase, pod.node, pod.reason, pod.message
        ));
        return;
    };
    let ann = |k: &str| pod.annotations.get(k).map(String::as_str);
    if ann(keys::VGPU_NODE) != Some(node.as_str()) {
        p.push(format!(
            "{} is {:?}, the pod runs on {node}",
            keys::VGPU_NODE,
            ann(keys::VGPU_NODE)
        ));
    }
    if pod.labels.get(keys::VGPU_NODE) != Some(&node) {
        p.push(format!(
            "label {} is {:?}, the pod runs on {node}",
            keys::VGPU_NODE,
            pod.labels.get(keys::VGPU_NODE)
        ));
    }
    for key in [keys::VGPU_TIME, keys::BIND_TIME] {
        if ann(key).and_then(|t| t.parse::<i64>().ok()).is_none() {
            p.push(format!("{key} is {:?}, not Unix seconds", ann(key)));
        }
    }
    if ann(keys::BIND_PHASE) != Some("success") {
        p.push(format!(
            "{} is {:?}, not success",
            keys::BIND_PHASE,
            ann(keys::BIND_PHASE)
        ));
    }
    match ann(keys::NVIDIA_DEVICES_TO_ALLOCATE).map(decode_pod_single_device) {
        Some(Ok(left)) if left.iter().all(Vec::is_empty) => {}
        other => p.push(format!(
            "{} is not emptied by Allocate: {other:?}",
            keys::NVIDIA_DEVICES_TO_ALLOCATE
        )),
    }
    if ann(keys::NVIDIA_DEVICES_ALLOCATED).is_none() {
        p.push(format!("{} is missing", keys::NVIDIA_DEVICES_ALLOCATED));
    }
    if let Some(owner) = lock_owner(cluster, &node)
        && owner == (pod.namespace.clone(), pod.name.clone())
    {
        p.push(format!("node {node}'s lock is still held by the pod"));
    }
    let Some(emulated) = cluster.node(&node) else {
        p.push(format!("runs on {node}, which is not an emulated node"));
        return;
    };
    let hook = emulated.hook_path.display().to_string();
    let log_level = cluster.spec().devices.nvidia.lib_cuda_log_level.clone();
    for c in &pod.containers {
        let at = format!("container {}", c.name);
        let Some(w) = ex.wants.iter().find(|w| w.container == c.name) else {
            if !c.devices.is_empty() || !c.env.is_empty() {
                p.push(format!(
                    "{at} asked for no GPU but holds {:?} with env {:?}",
                    c.devices, c.env
                ));
            }
            continue;
        };
        if c.devices.len() != w.gpus {
            p.push(format!("{at}: {} GPUs, wants {}", c.devices.len(), w.gpus));
        }
        let mut uuids: Vec<&str> = Vec::new();
        for d in &c.devices {
            if uuids.contains(&d.uuid.as_str()) {
                p.push(format!("{at}: GPU {} given twice", d.uuid));
            }
            uuids.push(&d.uuid);
            let Some(g) = report.gpu(&d.uuid) else {
                p.push(format!("{at}: GPU {} is not registered", d.uuid));
                continue;
            };
            if g.node != node {
                p.push(format!("{at}: GPU {} is on {}, not {node}", d.uuid, g.node));
            }
            let mem = match w.mem {
                Mem::Mib(m) => m,
                Mem::Percent(pct) => g.memory_mib * pct / 100,
            };
            if d.usedmem != mem || d.usedcores != w.cores {
                p.push(format!(
                    "{at}: GPU {} gives {} MiB / {}%, wants {mem} MiB / {}%",
                    d.uuid, d.usedmem, d.usedcores, w.cores
                ));
            }
            if let Some(t) = ex.gpu_type
                && !g.model.to_lowercase().contains(&t.to_lowercase())
            {
                p.push(format!("{at}: GPU {} is a {}, wants {t}", d.uuid, g.model));
            }
        }
        // Kubelet's accounting agrees with the scheduler's: the replicas it allocated
        // (`<uuid>-<i>`, chosen through GetPreferredAllocation) are of exactly these GPUs.
        let resource = &cluster.spec().devices.nvidia.resource_count_name;
        let mut replica_gpus: Vec<&str> = c
            .kubelet_devices
            .get(resource)
            .map(|ids| {
                ids.iter()
                    .map(|id| id.rsplit_once('-').map_or(id.as_str(), |(u, _)| u))
                    .collect()
            })
            .unwrap_or_default();
        replica_gpus.sort_unstable();
        let mut annotated = uuids.clone();
        annotated.sort_unstable();
        if replica_gpus != annotated {
            p.push(format!(
                "{at}: kubelet allocated replicas {:?}, the scheduler annotated {annotated:?}",
                c.kubelet_devices.get(resource)
            ));
        }
        if ex.same_numa {
            let numas: Vec<i32> = uuids
                .iter()
                .filter_map(|u| report.gpu(u).map(|g| g.numa))
                .collect();
            if numas.windows(2).any(|w| w[0] != w[1]) {
                p.push(format!("{at}: GPUs span NUMA nodes {numas:?}"));
            }
        }
        // The environment HAMi-core reads, exactly.
        let mut want: BTreeMap<String, String> = BTreeMap::new();
        want.insert("NVIDIA_VISIBLE_DEVICES".into(), uuids.join(","));
        for (i, d) in c.devices.iter().enumerate() {
            want.insert(
                format!("CUDA_DEVICE_MEMORY_LIMIT_{i}"),
                format!("{}m", d.usedmem),
            );
        }
        if let Some(first) = c.devices.first() {
            want.insert("CUDA_DEVICE_SM_LIMIT".into(), first.usedcores.to_string());
        }
        if !log_level.is_empty() {
            want.insert("LIBCUDA_LOG_LEVEL".into(), log_level.clone());
        }
        let cache = c
            .env
            .get("CUDA_DEVICE_MEMORY_SHARED_CACHE")
            .cloned()
            .unwrap_or_default();
        let cache_ok = cache
            .strip_prefix(&format!("{hook}/vgpu/"))
            .and_then(|rest| rest.strip_suffix(".cache"))
            .is_some_and(|id| id.len() == 36 && !id.contains('/'));
        if !cache_ok {
            p.push(format!(
                "{at}: CUDA_DEVICE_MEMORY_SHARED_CACHE={cache:?} is not {hook}/vgpu/<uuid>.cache"
            ));
        }
        want.insert("CUDA_DEVICE_MEMORY_SHARED_CACHE".into(), cache);
        if c.env != want {
            p.push(format!("{at}: env {:?}, wants {want:?}", c.env));
        }
        let mount = |container: &str, host: String, read_only: bool| MountReport {
            container_path: container.to_string(),
            host_path: host,
            read_only,
        };
        let want_mounts = vec![
            mount(
                &format!("{hook}/vgpu/libvgpu.so"),
                format!("{hook}/vgpu/libvgpu.so"),
                true,
            ),
            mount(
                &format!("{hook}/vgpu"),
                format!("{hook}/vgpu/containers/{}_{}", pod.uid, c.name),
                false,
            ),
            mount("/tmp/vgpulock", "/tmp/vgpulock".into(), false),
            mount(
                "/etc/ld.so.preload",
                format!("{hook}/vgpu/ld.so.preload"),
                true,
            ),
        ];
        if c.mounts != want_mounts {
            p.push(format!(
                "{at}: mounts {:?}, wants {want_mounts:?}",
                c.mounts
            ));
        }
    }
    for w in &ex.wants {
        if pod.container(w.container).is_none() {
            p.push(format!("container {} is missing", w.container));
        }
    }
}

/// `(namespace, name)` of the pod holding `node`'s lock, if any.
pub fn lock_owner(cluster: &DemoCluster, node: &str) -> Option<(String, String)> {
    let n: Value = cluster.api().store().get(&NODES, None, node).ok()?;
    let value = n
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(keys::NODE_LOCK))
        .and_then(Value::as_str)?;
    match decode_node_lock(value) {
        Ok(lock) => lock.owner.map(|o| (o.namespace, o.name)),
        Err(_) => Some((String::new(), format!("unreadable lock {value:?}"))),
    }
}

/// The settled state a demo run expects for `ex`, for messages.
pub fn expected_state(ex: &Example) -> &'static str {
    match ex.outcome {
        Outcome::Running => "Running",
        Outcome::Unschedulable { .. } => "Pending (Unschedulable)",
    }
}

/// Whether a settled state matches the example's outcome.
pub fn matches(ex: &Example, s: &Settled) -> bool {
    matches!(
        (&ex.outcome, s),
        (Outcome::Running, Settled::Running { .. })
            | (Outcome::Unschedulable { .. }, Settled::Unschedulable { .. })
    )
}
