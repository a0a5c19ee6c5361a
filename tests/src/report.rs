//! What happened, read back from the cluster: per pod where it landed, the GPUs the
//! scheduler gave each container (from `hami.io/vgpu-devices-allocated`) and the
//! environment and mounts the device plugin's Allocate answered (from the kubelet
//! emulator); per GPU the usage summed over the pods' annotations, checked against the
//! GPU's capacity (no double booking).

use std::collections::BTreeMap;
use std::fmt::Write;

use hami_core::annotations as keys;
use hami_core::codec::{decode_node_register, decode_pod_single_device};
use hami_core::pod::is_terminal_phase;
use hami_testkit::resources::{NODES, PODS};
use hami_testkit::selectors::Selector;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use serde::Serialize;
use serde_json::Value;

use crate::cluster::DemoCluster;

/// One GPU a container holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceUse {
    pub uuid: String,
    /// MiB.
    pub usedmem: u32,
    /// Percent of the GPU's compute.
    pub usedcores: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MountReport {
    pub container_path: String,
    pub host_path: String,
    pub read_only: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerReport {
    pub name: String,
    /// The container's GPU limits as stored (after the webhook's defaults).
    pub limits: BTreeMap<String, String>,
    pub devices: Vec<DeviceUse>,
    /// The device IDs kubelet allocated (split replicas, `<uuid>-<i>`), by resource.
    pub kubelet_devices: BTreeMap<String, Vec<String>>,
    /// What Allocate answered (empty when the container got no device).
    pub env: BTreeMap<String, String>,
    pub mounts: Vec<MountReport>,
}

/// An Event about a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventReport {
    pub reason: String,
    pub source: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodReport {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub node: Option<String>,
    /// `Running`, `Failed`, `Pending`, ...
    pub phase: String,
    /// The status reason (`UnexpectedAdmissionError`), or for an unbound pod the
    /// `PodScheduled=False` reason (`Unschedulable`, `SchedulerError`).
    pub reason: Option<String>,
    pub message: Option<String>,
    /// The pod's `hami.io/*` and `nvidia.com/*` annotations.
    pub annotations: BTreeMap<String, String>,
    /// The pod's `hami.io/*` labels.
    pub labels: BTreeMap<String, String>,
    pub containers: Vec<ContainerReport>,
    /// Warning events (FailedScheduling, FilteringFailed, ...).
    pub warnings: Vec<EventReport>,
}

impl PodReport {
    pub fn container(&self, name: &str) -> Option<&ContainerReport> {
        self.containers.iter().find(|c| c.name == name)
    }
}

/// One GPU and what the pods' annotations take of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuReport {
    pub node: String,
    pub uuid: String,
    pub index: u32,
    pub model: String,
    pub numa: i32,
    pub healthy: bool,
    pub memory_mib: u32,
    pub cores: u32,
    /// Containers that may share it (split count).
    pub slots: u32,
    pub used_mem: u64,
    pub used_cores: u64,
    /// Containers holding it.
    pub shares: u32,
    /// `namespace/name` of the pods holding it.
    pub pods: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterReport {
    pub pods: Vec<PodReport>,
    pub gpus: Vec<GpuReport>,
    /// Broken invariants: over-committed or double-booked GPUs, devices that are not on
    /// the pod's node. Empty when all is well.
    pub violations: Vec<String>,
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn annotation<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

fn terminal(pod: &Value) -> bool {
    is_terminal_phase(Some(str_at(pod, "/status/phase")))
}

/// Names of the containers in annotation order: init containers, then app containers.
pub(crate) fn container_specs(pod: &Value) -> Vec<&Value> {
    let list = |key: &str| {
        pod.pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .map(|a| a.iter().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let mut out = list("initContainers");
    out.extend(list("containers"));
    out
}

/// The devices the pod holds per container, in annotation order.
pub(crate) fn allocated(pod: &Value) -> Result<Vec<Vec<DeviceUse>>, String> {
    let Some(value) = annotation(pod, keys::NVIDIA_DEVICES_ALLOCATED) else {
        return Ok(Vec::new());
    };
    let decoded = decode_pod_single_device(value)
        .map_err(|e| format!("{} is unreadable: {e}", keys::NVIDIA_DEVICES_ALLOCATED))?;
    Ok(decoded
        .into_iter()
        .map(|c| {
            c.into_iter()
                .map(|d| DeviceUse {
                    uuid: d.uuid,
                    usedmem: d.mem_mib,
                    usedcores: d.cores,
                })
                .collect()
        })
        .collect())
}

impl ClusterReport {
    /// Reads the pods named in `pods` (in that order) and every GPU's usage from all pods.
    pub async fn collect(cluster: &DemoCluster, pods: &[(String, String)]) -> Self {
        let store = cluster.api().store();
        let mut violations = Vec::new();
        let mut reports = Vec::new();
        for (ns, name) in pods {
            let Ok(pod) = store.get(&PODS, Some(ns), name) else {
                violations.push(format!("pod {ns}/{name} does not exist"));
                continue;
            };
            match pod_report(cluster, &pod).await {
                Ok(r) => reports.push(r),
                Err(e) => violations.push(format!("pod {ns}/{name}: {e}")),
            }
        }
        let (gpus, usage_violations) = gpu_usage(cluster);
        violations.extend(usage_violations);
        ClusterReport {
            pods: reports,
            gpus,
            violations,
        }
    }

    pub fn pod(&self, name: &str) -> Option<&PodReport> {
        self.pods.iter().find(|p| p.name == name)
    }

    pub fn gpu(&self, uuid: &str) -> Option<&GpuReport> {
        self.gpus.iter().find(|g| g.uuid == uuid)
    }
}

async fn pod_report(cluster: &DemoCluster, pod: &Value) -> Result<PodReport, String> {
    let name = str_at(pod, "/metadata/name").to_string();
    let namespace = str_at(pod, "/metadata/namespace").to_string();
    let uid = str_at(pod, "/metadata/uid").to_string();
    let node = Some(str_at(pod, "/spec/nodeName").to_string()).filter(|n| !n.is_empty());
    let phase = Some(str_at(pod, "/status/phase").to_string())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "Pending".into());
    let scheduled = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| str_at(c, "/type") == "PodScheduled" && str_at(c, "/status") == "False")
        });
    let nonempty = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
    let (reason, message) = match (nonempty(str_at(pod, "/status/reason")), scheduled) {
        (Some(r), _) => (Some(r), nonempty(str_at(pod, "/status/message"))),
        (None, Some(c)) if node.is_none() => (
            nonempty(str_at(c, "/reason")),
            nonempty(str_at(c, "/message")),
        ),
        _ => (None, None),
    };
    let ours = |field: &str, prefixes: &[&str]| -> BTreeMap<String, String> {
        pod.pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p)))
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    };
    let annotations = ours("annotations", &["hami.io/", "nvidia.com/"]);
    let labels = ours("labels", &["hami.io/"]);
    let devices = allocated(pod)?;
    let kubelet = node
        .as_deref()
        .and_then(|n| cluster.node(n))
        .map(|n| n.kubelet());
    let mut containers = Vec::new();
    for (i, c) in container_specs(pod).into_iter().enumerate() {
        let cname = str_at(c, "/name").to_string();
        let limits = c
            .pointer("/resources/limits")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| k.contains('/'))
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let mut env = BTreeMap::new();
        let mut mounts = Vec::new();
        let mut kubelet_devices = BTreeMap::new();
        let held = kubelet.and_then(|k| k.container_allocation(&uid, &cname));
        for (resource, allocation) in held.into_iter().flatten() {
            kubelet_devices.insert(resource, allocation.devices);
            env.extend(allocation.response.envs);
            mounts.extend(allocation.response.mounts.into_iter().map(|m| MountReport {
                container_path: m.container_path,
                host_path: m.host_path,
                read_only: m.read_only,
            }));
        }
        containers.push(ContainerReport {
            name: cname,
            limits,
            devices: devices.get(i).cloned().unwrap_or_default(),
            kubelet_devices,
            env,
            mounts,
        });
    }
    let warnings = warnings(cluster, &namespace, &name).await;
    Ok(PodReport {
        name,
        namespace,
        uid,
        node,
        phase,
        reason,
        message,
        annotations,
        labels,
        containers,
        warnings,
    })
}

async fn warnings(cluster: &DemoCluster, namespace: &str, name: &str) -> Vec<EventReport> {
    let api: Api<Event> = Api::namespaced(cluster.client(), namespace);
    let params = ListParams::default().fields(&format!("involvedObject.name={name}"));
    let Ok(list) = api.list(&params).await else {
        return Vec::new();
    };
    let mut events: Vec<Event> = list
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .collect();
    events.sort_by_key(|e| {
        e.metadata
            .resource_version
            .as_deref()
            .and_then(|r| r.parse::<u64>().ok())
            .unwrap_or(0)
    });
    events
        .into_iter()
        .map(|e| EventReport {
            reason: e.reason.unwrap_or_default(),
            source: e
                .reporting_component
                .filter(|c| !c.is_empty())
                .or_else(|| e.source.and_then(|s| s.component))
                .unwrap_or_default(),
            message: e.message.unwrap_or_default(),
        })
        .collect()
}

/// Every registered GPU with the usage of every bound, non-terminated pod, and the
/// invariants that usage breaks. (An unbound pod's annotations are only a reservation,
/// which the extender drops when the pod is filtered again or its bind fails.)
pub(crate) fn gpu_usage(cluster: &DemoCluster) -> (Vec<GpuReport>, Vec<String>) {
    let store = cluster.api().store();
    let mut violations = Vec::new();
    let mut gpus: Vec<GpuReport> = Vec::new();
    let (nodes, _) = store.list(&NODES, None, &Selector::default());
    for node in &nodes {
        let name = str_at(node, "/metadata/name");
        let Some(register) = annotation(node, keys::NVIDIA_NODE_REGISTER) else {
            continue;
        };
        match decode_node_register(register) {
            Ok(devices) => gpus.extend(devices.into_iter().map(|d| GpuReport {
                node: name.to_string(),
                uuid: d.id.to_string(),
                index: d.index,
                model: d.dev_type.to_string(),
                numa: d.numa,
                healthy: d.health,
                memory_mib: d.mem_mib,
                cores: d.cores,
                slots: d.count,
                used_mem: 0,
                used_cores: 0,
                shares: 0,
                pods: Vec::new(),
            })),
            Err(e) => violations.push(format!("node {name}: register annotation: {e}")),
        }
    }
    gpus.sort_by(|a, b| a.node.cmp(&b.node).then(a.index.cmp(&b.index)));
    // (uuid) → whether an exclusive (all cores) share holds it.
    let mut exclusive: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let (pods, _) = store.list(&PODS, None, &Selector::default());
    for pod in pods.iter().filter(|p| !terminal(p)) {
        let id = format!(
            "{}/{}",
            str_at(pod, "/metadata/namespace"),
            str_at(pod, "/metadata/name")
        );
        let bound = str_at(pod, "/spec/nodeName");
        let Some(node) = annotation(pod, keys::VGPU_NODE).filter(|_| !bound.is_empty()) else {
            continue;
        };
        let containers = match allocated(pod) {
            Ok(c) => c,
            Err(e) => {
                violations.push(format!("pod {id}: {e}"));
                continue;
            }
        };
        if bound != node {
            violations.push(format!(
                "pod {id} is bound to {bound} but {} says {node}",
                keys::VGPU_NODE
            ));
        }
        for d in containers.iter().flatten() {
            let Some(g) = gpus.iter_mut().find(|g| g.uuid == d.uuid) else {
                violations.push(format!("pod {id} holds {} which no node registers", d.uuid));
                continue;
            };
            if g.node != node {
                violations.push(format!(
                    "pod {id} on {node} holds {} of node {}",
                    d.uuid, g.node
                ));
            }
            g.used_mem += u64::from(d.usedmem);
            g.used_cores += u64::from(d.usedcores);
            g.shares += 1;
            if !g.pods.contains(&id) {
                g.pods.push(id.clone());
            }
            if g.cores == 100 && d.usedcores == 100 {
                exclusive
                    .entry(g.uuid.clone())
                    .or_default()
                    .push(id.clone());
            }
        }
    }
    for g in &gpus {
        let at = format!("GPU {} ({} #{})", g.uuid, g.node, g.index);
        if g.used_mem > u64::from(g.memory_mib) {
            violations.push(format!(
                "{at}: {} MiB booked of {} MiB",
                g.used_mem, g.memory_mib
            ));
        }
        if g.used_cores > u64::from(g.cores) {
            violations.push(format!(
                "{at}: {}% compute booked of {}%",
                g.used_cores, g.cores
            ));
        }
        if g.shares > g.slots {
            violations.push(format!(
                "{at}: {} containers share {} slots",
                g.shares, g.slots
            ));
        }
        if exclusive.contains_key(&g.uuid) && g.shares > 1 {
            violations.push(format!(
                "{at}: held exclusively by {:?} yet shared by {} containers",
                exclusive[&g.uuid], g.shares
            ));
        }
    }
    (gpus, violations)
}

fn percent(used: u64, total: u32) -> u64 {
    if total == 0 {
        0
    } else {
        used * 100 / u64::from(total)
    }
}

impl ClusterReport {
    /// The report for people.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Pods");
        for p in &self.pods {
            render_pod(&mut out, p, &self.gpus);
        }
        let _ = writeln!(
            out,
            "\nGPU usage (from the pods' hami.io/vgpu-devices-allocated)"
        );
        let _ = writeln!(
            out,
            "  {:<9} {:>2}  {:<24} {:>4}  {:>19}  {:>9}  {:>6}  PODS",
            "NODE", "#", "MODEL", "NUMA", "MEMORY MiB", "CORES %", "SHARES"
        );
        for g in &self.gpus {
            let mem = format!(
                "{}/{} ({:>3}%)",
                g.used_mem,
                g.memory_mib,
                percent(g.used_mem, g.memory_mib)
            );
            let pods: Vec<&str> = g
                .pods
                .iter()
                .map(|p| p.split_once('/').map_or(p.as_str(), |(_, n)| n))
                .collect();
            let _ = writeln!(
                out,
                "  {:<9} {:>2}  {:<24} {:>4}  {:>19}  {:>9}  {:>6}  {}{}",
                g.node,
                g.index,
                g.model,
                g.numa,
                mem,
                format!("{}/{}", g.used_cores, g.cores),
                format!("{}/{}", g.shares, g.slots),
                if pods.is_empty() {
                    "-".to_string()
                } else {
                    pods.join(", ")
                },
                if g.healthy { "" } else { "  (unhealthy)" }
            );
        }
        if self.violations.is_empty() {
            let _ = writeln!(
                out,
                "\nNo GPU is over-committed: memory, compute and slots are within capacity, exclusive cards are not shared."
            );
        } else {
            let _ = writeln!(out, "\nVIOLATIONS");
            for v in &self.violations {
                let _ = writeln!(out, "  {v}");
            }
        }
        out
    }
}

fn render_pod(out: &mut String, p: &PodReport, gpus: &[GpuReport]) {
    let state = match (&p.node, p.phase.as_str()) {
        (Some(n), "Running") => format!("Running on {n}"),
        (Some(n), phase) => format!(
            "{phase} on {n}{}",
            p.reason
                .as_ref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ),
        (None, phase) => format!(
            "{phase}{}",
            p.reason
                .as_ref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
    };
    let _ = writeln!(out, "\n  {}  {state}", p.name);
    let user: Vec<String> = p
        .annotations
        .iter()
        .filter(|(k, _)| !hami_written(k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !user.is_empty() {
        let _ = writeln!(out, "    annotations: {}", user.join(", "));
    }
    for c in &p.containers {
        let asked: Vec<String> = c.limits.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let asked = if asked.is_empty() {
            "no GPU".to_string()
        } else {
            asked.join(" ")
        };
        let _ = writeln!(out, "    container {}: asked {asked}", c.name);
        for d in &c.devices {
            let at = gpus
                .iter()
                .find(|g| g.uuid == d.uuid)
                .map(|g| format!(" ({} #{}, {}, NUMA {})", g.node, g.index, g.model, g.numa))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "      GPU {}{at}: {} MiB, {}% compute",
                d.uuid, d.usedmem, d.usedcores
            );
        }
        for (resource, ids) in &c.kubelet_devices {
            let _ = writeln!(
                out,
                "      kubelet allocated {resource}: {}",
                ids.join(", ")
            );
        }
        if !c.env.is_empty() {
            let _ = writeln!(out, "      env from Allocate:");
        }
        for (k, v) in &c.env {
            let _ = writeln!(out, "        {k}={v}");
        }
        if !c.mounts.is_empty() {
            let mounts: Vec<String> = c
                .mounts
                .iter()
                .map(|m| {
                    format!(
                        "{}{}",
                        m.container_path,
                        if m.read_only { " (ro)" } else { "" }
                    )
                })
                .collect();
            let _ = writeln!(out, "        mounts: {}", mounts.join(", "));
        }
    }
    if p.node.is_none()
        && let Some(m) = &p.message
    {
        let _ = writeln!(out, "    why: {m}");
    }
    if p.phase == "Failed"
        && let Some(m) = &p.message
    {
        let _ = writeln!(out, "    why: {m}");
    }
    for w in p.warnings.iter().filter(|w| w.reason != "FailedScheduling") {
        let _ = writeln!(
            out,
            "    event {} from {}: {}",
            w.reason, w.source, w.message
        );
    }
}

/// Annotations the scheduler and the device plugin write (not the user's).
fn hami_written(key: &str) -> bool {
    [
        keys::VGPU_NODE,
        keys::VGPU_TIME,
        keys::NVIDIA_DEVICES_TO_ALLOCATE,
        keys::NVIDIA_DEVICES_ALLOCATED,
        keys::BIND_PHASE,
        keys::BIND_TIME,
    ]
    .contains(&key)
}
