//! The demo's AMD and DCU example pods: submitted through the real webhook and extender,
//! bound by the emulated kube-scheduler, allocated by the real AMD and DCU plugins. Each
//! container's devices, environment and mounts are checked against what the pod's
//! allocation annotations and the node's fake tree imply (`docs/device-plugin.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use hami_core::codec::decode_pod_single_device;
use hami_core::model::ContainerDevice;
use hami_core::vendor::Vendor;
use hami_device_plugin_amd::{cu, fake_tree as amd_tree, hook as amd};
use hami_device_plugin_dcu::{fake_tree as dcu_tree, hook as dcu, vdev};
use hami_testkit::fixture::GpuPod;
use hami_testkit::kubelet::ResourceAllocation;
use serde::Serialize;

use crate::cluster::{DemoCluster, Settled};
use crate::report::MountReport;
use crate::scenario::SETTLE_TIMEOUT;
use crate::spec::NodeVendor;

/// A vendor example pod.
#[derive(Debug, Clone)]
pub struct VendorExample {
    pub pod: GpuPod,
    pub about: &'static str,
}

/// The demo's AMD and DCU pods, in submission order.
pub fn vendor_examples() -> Vec<VendorExample> {
    vec![
        VendorExample {
            pod: GpuPod::new("amd-slice")
                .resource("amd.com/gpu", "1")
                .resource("amd.com/gpumem", "16384")
                .resource("amd.com/gpucores", "25"),
            about: "an MI300X slice: 16384 MiB and 25% of its CUs (HSA_CU_MASK)",
        },
        VendorExample {
            pod: GpuPod::new("dcu-partial")
                .resource("hygon.com/dcunum", "1")
                .resource("hygon.com/dcumem", "8192")
                .resource("hygon.com/dcucores", "50"),
            about: "part of a K100_AI: a virtual device (vdev conf) of 8192 MiB and 50% of its CUs",
        },
        VendorExample {
            pod: GpuPod::new("dcu-whole").resource("hygon.com/dcunum", "1"),
            about: "a whole K100_AI: its DRM nodes, no virtual device",
        },
    ]
}

/// What one container got from its vendor plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VendorContainerReport {
    pub name: String,
    /// `container path -> host path`.
    pub devices: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    pub mounts: Vec<MountReport>,
}

/// One vendor pod as it ended up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VendorPodReport {
    pub name: String,
    pub node: String,
    /// The vendor's allocated annotation (what the scheduler decided).
    pub allocated: String,
    pub containers: Vec<VendorContainerReport>,
}

/// What the vendor examples produced.
#[derive(Debug, Clone, Default, Serialize)]
pub struct VendorOutcome {
    pub pods: Vec<VendorPodReport>,
    /// `(pod, what is wrong)`.
    pub problems: Vec<(String, String)>,
}

impl VendorOutcome {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    pub fn render_text(&self) -> String {
        let mut out = String::from(
            "\nAMD and DCU pods (allocated by hami-device-plugin-amd / -dcu on fake trees)\n",
        );
        for p in &self.pods {
            let _ = writeln!(out, "  {} on {}: {}", p.name, p.node, p.allocated);
            for c in &p.containers {
                let _ = writeln!(out, "    container {}", c.name);
                for (k, v) in &c.env {
                    let _ = writeln!(out, "      env    {k}={v}");
                }
                for (cp, hp) in &c.devices {
                    let _ = writeln!(out, "      device {cp} <- {hp}");
                }
                for m in &c.mounts {
                    let ro = if m.read_only { " (ro)" } else { "" };
                    let _ = writeln!(
                        out,
                        "      mount  {} <- {}{ro}",
                        m.container_path, m.host_path
                    );
                }
            }
        }
        out
    }
}

/// Submits each example (each runs before the next is submitted), then checks what
/// their containers got.
pub async fn run(cluster: &DemoCluster, examples: &[VendorExample]) -> VendorOutcome {
    let mut submitted = Vec::new();
    let mut failed = Vec::new();
    for ex in examples {
        match submit(cluster, ex).await {
            Ok(()) => submitted.push(ex.clone()),
            Err(e) => failed.push((ex.pod.name.clone(), e)),
        }
    }
    let mut outcome = check(cluster, &submitted).await;
    outcome.problems.splice(0..0, failed);
    outcome
}

/// Checks the examples' pods (already running) against their annotations.
pub async fn check(cluster: &DemoCluster, examples: &[VendorExample]) -> VendorOutcome {
    let mut outcome = VendorOutcome::default();
    for ex in examples {
        match check_pod(cluster, &ex.pod.namespace, &ex.pod.name) {
            Ok((report, problems)) => {
                outcome
                    .problems
                    .extend(problems.into_iter().map(|p| (ex.pod.name.clone(), p)));
                outcome.pods.push(report);
            }
            Err(e) => outcome.problems.push((ex.pod.name.clone(), e)),
        }
    }
    outcome
}

async fn submit(cluster: &DemoCluster, ex: &VendorExample) -> Result<(), String> {
    let (ns, name) = (&ex.pod.namespace, &ex.pod.name);
    cluster
        .create_pod(&ex.pod)
        .await
        .map_err(|e| format!("creating the pod failed: {e}"))?;
    match cluster
        .wait_settled(ns, name, SETTLE_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?
    {
        Settled::Running { .. } => Ok(()),
        other => Err(format!("must run, got {other:?}")),
    }
}

/// What pod `ns/name`'s containers got, and everything in it that differs from what its
/// allocation annotations and its node's tree imply.
fn check_pod(
    cluster: &DemoCluster,
    ns: &str,
    name: &str,
) -> Result<(VendorPodReport, Vec<String>), String> {
    let pod = cluster
        .pod(ns, name)
        .ok_or_else(|| format!("pod {ns}/{name} vanished"))?;
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_string();
    let emulated = cluster
        .node(&node)
        .ok_or_else(|| format!("bound to {node}, which the cluster does not have"))?;
    let dev_root = emulated
        .vendor_dev_root()
        .ok_or_else(|| format!("bound to {node}, which is not an AMD or DCU node"))?;
    let vendor = emulated.spec.vendor;
    let key = match vendor {
        NodeVendor::Amd { .. } => hami_core::vendor::amd::Amd::new(Default::default())
            .allocated_annotation()
            .to_string(),
        _ => hami_core::vendor::hygon::Hygon::new(Default::default())
            .allocated_annotation()
            .to_string(),
    };
    let ann = |k: &str| {
        pod.pointer(&format!("/metadata/annotations/{}", k.replace('/', "~1")))
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
    };
    let allocated = ann(&key).ok_or_else(|| format!("running without {key}"))?;
    let per_container =
        decode_pod_single_device(&allocated).map_err(|e| format!("{key}={allocated:?}: {e}"))?;
    let uid = pod
        .pointer("/metadata/uid")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let names: Vec<String> = pod
        .pointer("/spec/containers")
        .and_then(serde_json::Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get("name")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let (resource, _) = emulated.resource();
    let mut problems = Vec::new();
    let mut containers = Vec::new();
    for (i, cname) in names.iter().enumerate() {
        let devices = per_container.get(i).cloned().unwrap_or_default();
        let got = emulated
            .kubelet()
            .container_allocation(uid, cname)
            .and_then(|mut r| r.remove(resource));
        let Some(got) = got else {
            if !devices.is_empty() {
                problems.push(format!("container {cname}: no {resource} allocation"));
            }
            continue;
        };
        let report = container_report(cname, &got);
        let want = match vendor {
            NodeVendor::Amd { gpus } => ann(cu::CU_ALLOCATED)
                .ok_or_else(|| format!("no {}", cu::CU_ALLOCATED))
                .and_then(|v| cu::parse_annotation(name, &v).map_err(|e| e.to_string()))
                .and_then(|cus| amd_expected(&devices, &amd_tree::mi300x(gpus), &cus, &dev_root)),
            NodeVendor::Dcu { cards } => {
                dcu_expected(&devices, &dcu_tree::k100_ai(cards), &dev_root)
            }
            NodeVendor::Nvidia => Err("an NVIDIA node".into()),
        };
        match want {
            Ok(want) => compare(&report, &want, &mut problems),
            Err(e) => problems.push(format!("container {cname}: {e}")),
        }
        containers.push(report);
    }
    Ok((
        VendorPodReport {
            name: name.to_string(),
            node,
            allocated,
            containers,
        },
        problems,
    ))
}

fn container_report(name: &str, got: &ResourceAllocation) -> VendorContainerReport {
    VendorContainerReport {
        name: name.to_string(),
        devices: got
            .response
            .devices
            .iter()
            .map(|d| (d.container_path.clone(), d.host_path.clone()))
            .collect(),
        env: got
            .response
            .envs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        mounts: got
            .response
            .mounts
            .iter()
            .map(|m| MountReport {
                container_path: m.container_path.clone(),
                host_path: m.host_path.clone(),
                read_only: m.read_only,
            })
            .collect(),
    }
}

/// What a container must get.
struct Expected {
    env: BTreeMap<String, String>,
    /// `container path -> host path`.
    devices: BTreeMap<String, String>,
    /// Container paths of the mounts.
    mounts: BTreeSet<String>,
    /// What the mounted vdev directory's conf must say (a partial DCU).
    vdev: Option<VdevWant>,
}

/// Everything in `got` that differs from `want`.
fn compare(got: &VendorContainerReport, want: &Expected, problems: &mut Vec<String>) {
    let c = &got.name;
    if got.env != want.env {
        problems.push(format!(
            "container {c}: env {:?}, expected {:?}",
            got.env, want.env
        ));
    }
    if got.devices != want.devices {
        problems.push(format!(
            "container {c}: devices {:?}, expected {:?}",
            got.devices, want.devices
        ));
    }
    let mounts: BTreeSet<String> = got
        .mounts
        .iter()
        .map(|m| m.container_path.clone())
        .collect();
    if mounts != want.mounts || got.mounts.len() != want.mounts.len() {
        problems.push(format!(
            "container {c}: mounts {:?}, expected {:?}",
            got.mounts, want.mounts
        ));
    }
    if let Some(v) = &want.vdev {
        check_vdev(got, v, problems);
    }
}

fn host(root: &std::path::Path, rel: &str) -> String {
    root.join(rel).to_string_lossy().into_owned()
}

fn drm(dev_root: &std::path::Path, card: u32, render: u32) -> [(String, String); 2] {
    [
        (
            format!("/dev/dri/card{card}"),
            host(dev_root, &format!("dri/card{card}")),
        ),
        (
            format!("/dev/dri/renderD{render}"),
            host(dev_root, &format!("dri/renderD{render}")),
        ),
    ]
}

/// AMD: `/dev/kfd` and each GPU's DRM nodes; `HSA_CU_MASK` names the CUs
/// `hami.io/amd-cu-allocated` holds for each GPU (as many as the scheduler's cores),
/// `ROCR_VISIBLE_DEVICES` the GPUs' ROCr UUIDs, `HIP_DEVICE_MEMORY_LIMIT` the first
/// GPU's MiB, `LD_AUDIT` the mounted vGPU library.
fn amd_expected(
    devices: &[ContainerDevice],
    tree: &[amd_tree::FakeGpu],
    cus: &BTreeMap<String, BTreeSet<u32>>,
    dev_root: &std::path::Path,
) -> Result<Expected, String> {
    let mut devs = BTreeMap::from([("/dev/kfd".to_string(), host(dev_root, "kfd"))]);
    let (mut masks, mut visible) = (Vec::new(), Vec::new());
    for (i, d) in devices.iter().enumerate() {
        let g = tree
            .iter()
            .find(|g| g.uuid == d.uuid)
            .ok_or_else(|| format!("GPU {} is not in the node's tree", d.uuid))?;
        devs.extend(drm(dev_root, g.card, g.render));
        let held = cus.get(&d.uuid).cloned().unwrap_or_default();
        if held.len() != d.cores as usize {
            return Err(format!(
                "{} holds {} CUs of {}, the scheduler gave {}",
                cu::CU_ALLOCATED,
                held.len(),
                d.uuid,
                d.cores
            ));
        }
        masks.push(format!("{i}:{}", cu::format_list(&held)));
        visible.push(format!("GPU-{:016x}", g.unique_id));
    }
    let mut env = BTreeMap::new();
    let mut mounts = BTreeSet::new();
    if let Some(first) = devices.first() {
        env.insert(amd::ENV_CU_MASK.to_string(), masks.join(";"));
        env.insert(amd::ENV_VISIBLE.to_string(), visible.join(","));
        env.insert(
            amd::ENV_MEMORY_LIMIT.to_string(),
            format!("{}m", first.mem_mib),
        );
        env.insert(
            amd::ENV_LD_AUDIT.to_string(),
            amd::LIBAMVGPU_IN_CONTAINER.to_string(),
        );
        mounts.insert(amd::LIBAMVGPU_IN_CONTAINER.to_string());
    }
    Ok(Expected {
        env,
        devices: devs,
        mounts,
        vdev: None,
    })
}

/// What a partial card's vdev conf must say: CUs, MiB, PCI bus id.
struct VdevWant {
    cu_count: u32,
    mem_mib: u32,
    pci_bus_id: String,
}

/// DCU: `/dev/kfd`, `/dev/mkfd` and each card's DRM nodes, no environment, the hyhal
/// mount; a container with less than one card's memory also gets a virtual device (its
/// directory at `/etc/vdev/docker/` and the driver mount).
fn dcu_expected(
    devices: &[ContainerDevice],
    tree: &[dcu_tree::FakeDcu],
    dev_root: &std::path::Path,
) -> Result<Expected, String> {
    let mut devs = BTreeMap::from([
        ("/dev/kfd".to_string(), host(dev_root, "kfd")),
        ("/dev/mkfd".to_string(), host(dev_root, "mkfd")),
    ]);
    let mut cards = Vec::new();
    for d in devices {
        let c = tree
            .iter()
            .find(|c| c.id() == d.uuid)
            .ok_or_else(|| format!("DCU {} is not in the node's tree", d.uuid))?;
        devs.extend(drm(dev_root, c.card, c.render));
        cards.push(c);
    }
    let mut mounts = BTreeSet::from([dcu::HYHAL_IN_CONTAINER.to_string()]);
    let mut vdev = None;
    if let ([d], [c]) = (devices, cards.as_slice())
        && u64::from(d.mem_mib) < c.memory_mib
    {
        mounts.insert(dcu::VDEV_IN_CONTAINER.to_string());
        mounts.insert(dcu::HYGON_DRIVER_IN_CONTAINER.to_string());
        vdev = Some(VdevWant {
            cu_count: d.cores.min(100) * c.cu_count / 100,
            mem_mib: d.mem_mib,
            pci_bus_id: c.pci_bdf.to_uppercase(),
        });
    }
    Ok(Expected {
        env: BTreeMap::new(),
        devices: devs,
        mounts,
        vdev,
    })
}

/// The vdev conf in the mounted directory says what the scheduler decided.
fn check_vdev(got: &VendorContainerReport, want: &VdevWant, problems: &mut Vec<String>) {
    let c = &got.name;
    let Some(m) = got
        .mounts
        .iter()
        .find(|m| m.container_path == dcu::VDEV_IN_CONTAINER)
    else {
        return;
    };
    let conf = std::path::Path::new(&m.host_path).join(vdev::CONTAINER_CONF);
    match std::fs::read_to_string(&conf) {
        Ok(text) => {
            for line in [
                format!("PciBusId: {}", want.pci_bus_id),
                format!("cu_count: {}", want.cu_count),
                format!("mem: {} MiB", want.mem_mib),
            ] {
                if !text.lines().any(|l| l == line) {
                    problems.push(format!(
                        "container {c}: {} lacks {line:?}: {text:?}",
                        conf.display()
                    ));
                }
            }
        }
        Err(e) => problems.push(format!("container {c}: reading {}: {e}", conf.display())),
    }
}
