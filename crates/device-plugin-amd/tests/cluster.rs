#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The AMD plugin on an emulated node: API server emulator (real `kube` client), kubelet
//! emulator (real gRPC over unix sockets), a fake MI300X tree.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hami_device_plugin::{Metrics, Plugin, PluginConfig, PluginStatus};
use hami_device_plugin_amd::cli::{BINARY, Cli};
use hami_device_plugin_amd::{AmdBackend, AmdHook, AmdTree, FileFacts, RESOURCE, Roots, fake_tree};
use hami_kubelet_api::v1beta1::{ContainerAllocateResponse, DeviceSpec};
use hami_testkit::plugin_node::{NAMESPACE as NS, PluginNode, stop_plugin};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const NODE: &str = "amd-node";
const WAIT: Duration = Duration::from_secs(15);
const TO_ALLOCATE: &str = "hami.io/amd-devices-to-allocate";
const GPU0: &str = "8eff74b5-0000-1000-801b-b56457add000";
const GPU1: &str = "8eff74b5-0000-1000-801b-b56457add001";
const MODEL: &str = "AMD Instinct MI300X";

struct Node_ {
    node: PluginNode,
    tree: tempfile::TempDir,
    shutdown: CancellationToken,
    status: watch::Receiver<PluginStatus>,
    task: tokio::task::JoinHandle<Result<(), hami_device_plugin::PluginError>>,
}

/// The configuration the binary builds from its flags, on the emulator's directory.
fn config(dir: &Path, hook: &Path) -> PluginConfig {
    let cli: Cli = BINARY
        .try_parse_from([
            "hami-device-plugin-amd".to_string(),
            format!("--node-name={NODE}"),
            format!("--device-plugin-path={}", dir.display()),
            format!("--hook-path={}", hook.display()),
            "--gpu-facts=unused.json".into(),
            "--register-interval=200ms".into(),
        ])
        .unwrap();
    hami_device_plugin_amd::run::plugin_config(&cli.serve, NODE).unwrap()
}

async fn start() -> Node_ {
    start_with(&fake_tree::mi300x(2)).await
}

async fn start_with(gpus: &[fake_tree::FakeGpu]) -> Node_ {
    let node = PluginNode::start(NODE).await.unwrap();
    let tree = tempfile::tempdir().unwrap();
    fake_tree::write(tree.path(), gpus).unwrap();
    let roots = Roots {
        sysfs: tree.path().join("sys"),
        dev: tree.path().join("dev"),
    };
    let backend = Arc::new(AmdBackend::new(
        AmdTree::new(
            roots.clone(),
            Arc::new(FileFacts::new(tree.path().join("gpu-facts.json"))),
        ),
        Duration::from_millis(100),
    ));
    let hook = Arc::new(AmdHook::new(
        backend.catalog(),
        tree.path().join("hook"),
        roots.dev.clone(),
    ));
    let plugin = Plugin::new(
        config(node.kubelet.dir(), &tree.path().join("hook")),
        backend,
        node.client.clone(),
        Metrics::default(),
    )
    .unwrap()
    .with_hook(hook);
    let status = plugin.status();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(plugin.run(shutdown.clone()));
    Node_ {
        node,
        tree,
        shutdown,
        status,
        task,
    }
}

impl Node_ {
    async fn registered(&mut self, times: u64) {
        if let Err(last) = PluginStatus::wait_registered(&mut self.status, times, WAIT).await {
            panic!("not registered {times}x: {last:?}");
        }
    }

    async fn node_annotation(&self, key: &str) -> Option<String> {
        self.node.node_annotation(key).await.unwrap()
    }

    async fn annotations(&self, pod: &str) -> BTreeMap<String, String> {
        self.node.pod_annotations(pod).await.unwrap()
    }

    /// A pod as the HAMi scheduler leaves it after Bind, with the node lock taken.
    async fn scheduled(
        &self,
        name: &str,
        containers: Value,
        to_allocate: &str,
        extra: Value,
    ) -> Pod {
        let mut ann = json!({
            TO_ALLOCATE: to_allocate,
            "hami.io/amd-devices-allocated": to_allocate,
        });
        if let (Some(a), Some(e)) = (ann.as_object_mut(), extra.as_object()) {
            a.extend(e.clone());
        }
        self.node
            .scheduled(name, json!({"containers": containers}), ann)
            .await
            .unwrap()
    }
}

impl Node_ {
    /// Schedules pod `name` (no extra annotations) and has kubelet admit it.
    async fn admit(
        &self,
        name: &str,
        containers: Value,
        to_allocate: &str,
    ) -> Result<hami_testkit::kubelet::Admission, hami_testkit::kubelet::AdmitError> {
        let pod = self
            .scheduled(name, containers, to_allocate, json!({}))
            .await;
        self.node.kubelet.admit(&pod).await
    }

    /// Admits pod `name` of one container `container` with one GPU: that container's
    /// Allocate answer.
    async fn admit_one(
        &self,
        name: &str,
        container: &str,
        to_allocate: &str,
    ) -> ContainerAllocateResponse {
        let containers = json!([gpu_container(container, 1)]);
        let admitted = self.admit(name, containers, to_allocate).await.unwrap();
        admitted.get(container, RESOURCE).unwrap().response.clone()
    }

    /// Why kubelet refused pod `name` of one container with one GPU.
    async fn refused_one(&self, name: &str, to_allocate: &str) -> String {
        let containers = json!([gpu_container("c", 1)]);
        let refused = self.admit(name, containers, to_allocate).await;
        refused.unwrap_err().to_string()
    }

    /// Stops the plugin gracefully (it must end without error); the node stays up
    /// while the caller holds it.
    async fn stop(self) -> PluginNode {
        stop_plugin(&self.shutdown, self.task, WAIT).await.unwrap();
        self.node
    }
}

fn gpu_container(name: &str, gpus: u32) -> Value {
    json!({"name": name, "image": "rocm", "resources": {"limits": {RESOURCE: gpus.to_string()}}})
}

fn env(r: &ContainerAllocateResponse) -> BTreeMap<&str, &str> {
    r.envs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

fn dev(container: &str, host: &Path) -> DeviceSpec {
    DeviceSpec {
        container_path: container.into(),
        host_path: host.display().to_string(),
        permissions: "rw".into(),
    }
}

/// `/dev/kfd` and the DRM nodes `(card, renderD)` of each GPU, under `dev_root`.
fn gpu_devices(dev_root: &Path, gpus: &[(u32, u32)]) -> Vec<DeviceSpec> {
    let mut out = vec![dev("/dev/kfd", &dev_root.join("kfd"))];
    for (card, render) in gpus {
        for node in [format!("dri/card{card}"), format!("dri/renderD{render}")] {
            out.push(dev(&format!("/dev/{node}"), &dev_root.join(&node)));
        }
    }
    out
}

/// What container `name` of an admitted pod got: exactly this environment of a
/// container with GPUs, `/dev/kfd` and the DRM nodes `(card, renderD)` of its GPUs.
fn assert_gpu_container(
    n: &Node_,
    admitted: &hami_testkit::kubelet::Admission,
    name: &str,
    (cu_mask, visible, limit): (&str, &str, &str),
    drm: &[(u32, u32)],
) {
    let r = &admitted.get(name, RESOURCE).unwrap().response;
    assert_eq!(
        env(r),
        BTreeMap::from([
            ("HSA_CU_MASK", cu_mask),
            ("ROCR_VISIBLE_DEVICES", visible),
            ("HIP_DEVICE_MEMORY_LIMIT", limit),
            ("LD_AUDIT", "/usr/local/vgpu/libamvgpu.so"),
        ]),
        "container {name}"
    );
    assert_eq!(
        r.devices,
        gpu_devices(&n.tree.path().join("dev"), drm),
        "container {name}"
    );
}

#[tokio::test]
async fn registers_allocates_cu_masks_per_container_and_releases_after_the_last() {
    let mut n = start().await;
    n.registered(1).await;
    assert!(n.node.kubelet.wait_for_healthy(RESOURCE, 20, WAIT).await);

    // The register annotation: HAMi's AMD JSON entries.
    let deadline = tokio::time::Instant::now() + WAIT;
    let register = loop {
        if let Some(v) = n.node_annotation("hami.io/node-amd-register").await {
            break v;
        }
        assert!(tokio::time::Instant::now() < deadline, "never registered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let entries: Value = serde_json::from_str(&register).unwrap();
    assert_eq!(
        entries,
        json!([
            {"id": GPU0, "index": 1, "count": 10, "devmem": 196288, "devcore": 304,
             "type": MODEL, "health": true, "custominfo": {"pciBDF": "0000:0c:00.0"}},
            {"id": GPU1, "index": 2, "count": 10, "devmem": 196288, "devcore": 304,
             "type": MODEL, "numa": 1, "health": true, "custominfo": {"pciBDF": "0000:22:00.0"}},
        ])
    );
    assert_eq!(n.node_annotation("hami.io/node-handshake").await, None);

    // Two containers, one Allocate call each: the lock stays until the second.
    let value =
        format!("{GPU0},{MODEL},16384,76:{GPU1},{MODEL},16384,76:;{GPU0},{MODEL},8192,38:;");
    let admitted = n
        .admit(
            "train",
            json!([gpu_container("a", 2), gpu_container("b", 1)]),
            &value,
        )
        .await
        .unwrap();
    assert_gpu_container(
        &n,
        &admitted,
        "a",
        (
            "0:0-75;1:0-75",
            "GPU-1407000000000000,GPU-1407000000000001",
            "16384m",
        ),
        &[(1, 128), (2, 129)],
    );
    let a = &admitted.get("a", RESOURCE).unwrap().response;
    assert_eq!(a.mounts.len(), 1);
    assert_eq!(a.mounts[0].container_path, "/usr/local/vgpu/libamvgpu.so");
    assert_eq!(
        a.mounts[0].host_path,
        n.tree
            .path()
            .join("hook/vgpu/libamvgpu.so")
            .display()
            .to_string()
    );
    assert!(a.mounts[0].read_only);
    let b = &admitted.get("b", RESOURCE).unwrap().response;
    assert_eq!(env(b)["HSA_CU_MASK"], "0:76-113", "after container a's CUs");
    assert_eq!(env(b)["ROCR_VISIBLE_DEVICES"], "GPU-1407000000000000");
    assert_eq!(env(b)["HIP_DEVICE_MEMORY_LIMIT"], "8192m");

    let ann = n.annotations("train").await;
    assert_eq!(ann[TO_ALLOCATE], ";;");
    assert_eq!(
        ann["hami.io/amd-devices-allocated"], value,
        "the ledger is untouched"
    );
    assert_eq!(ann["hami.io/bind-phase"], "success");
    assert_eq!(
        ann["hami.io/amd-cu-allocated"],
        format!(r#"{{"{GPU0}":"0-113","{GPU1}":"0-75"}}"#)
    );
    assert_eq!(n.node_annotation("hami.io/mutex.lock").await, None);

    // The next pod's CUs are first-fit after what live pods hold.
    let value = format!("{GPU1},{MODEL},4096,10:;");
    let c = n.admit_one("infer", "c", &value).await;
    assert_eq!(env(&c)["HSA_CU_MASK"], "0:76-85");

    n.stop().await;
}

#[tokio::test]
async fn overlapping_cu_records_refuse_the_pod_and_kubelet_restart_re_registers() {
    let mut n = start().await;
    n.registered(1).await;
    assert!(n.node.kubelet.wait_for_healthy(RESOURCE, 20, WAIT).await);
    // Two live pods claim the same CUs: the node's record cannot be trusted.
    for name in ["old-1", "old-2"] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS,
                "annotations": {"hami.io/amd-cu-allocated": format!(r#"{{"{GPU0}":"0-9"}}"#)}},
            "spec": {"nodeName": NODE, "containers": [{"name": "x", "image": "rocm"}]},
        }))
        .unwrap();
        Api::<Pod>::namespaced(n.node.client.clone(), NS)
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
    }
    let value = format!("{GPU0},{MODEL},4096,10:;");
    let err = n.refused_one("new", &value).await;
    assert!(err.contains("CUs 0-9 are held by two pods"), "{err}");
    let ann = n.annotations("new").await;
    assert_eq!(ann["hami.io/bind-phase"], "failed");
    assert!(!ann.contains_key("hami.io/amd-cu-allocated"));
    assert_eq!(n.node_annotation("hami.io/mutex.lock").await, None);

    // kubelet restarts: the plugin registers again and its devices come back.
    n.node.kubelet.restart().await.unwrap();
    n.registered(2).await;
    assert!(n.node.kubelet.wait_for_healthy(RESOURCE, 20, WAIT).await);

    // A render node disappears: that GPU's replicas turn unhealthy.
    std::fs::remove_file(n.tree.path().join("dev/dri/renderD129")).unwrap();
    assert!(n.node.kubelet.wait_for_healthy(RESOURCE, 10, WAIT).await);

    let node = n.stop().await;
    assert!(
        !node.kubelet.dir().join("amd-gpu.sock").exists(),
        "socket removed on shutdown"
    );
}

/// An MI300X in CPX/NPS4 mode: eight partitions registered as devices of 38 CUs and an
/// eighth of the VRAM each; a container given two partitions gets their own DRM nodes,
/// ROCr UUIDs and CU masks counted within each partition, and a partition's CUs run out
/// on their own.
#[tokio::test]
async fn cpx_partitions_register_and_allocate_as_devices() {
    let mut n = start_with(&fake_tree::mi300x_partitioned(1, "CPX", "NPS4")).await;
    n.registered(1).await;
    assert!(n.node.kubelet.wait_for_healthy(RESOURCE, 80, WAIT).await);
    let register = n
        .node
        .wait_node_annotation("hami.io/node-amd-register", WAIT, |_| true)
        .await
        .unwrap();
    let entries: Value = serde_json::from_str(&register).unwrap();
    let part = |k: u32| format!("8eff74b5-0000-1000-80{k:02x}-b56457add000");
    let expected: Vec<Value> = (0..8)
        .map(|k| {
            json!({"id": part(k), "index": k + 1, "count": 10, "devmem": 24536,
                "devcore": 38, "type": MODEL, "health": true,
                "custominfo": {"pciBDF": format!("0000:0c:00.{k}")}})
        })
        .collect();
    assert_eq!(entries, Value::Array(expected));

    let (p1, p3) = (part(1), part(3));
    let value = format!("{p1},{MODEL},24536,38:{p3},{MODEL},8192,19:;");
    let admitted = n
        .admit("two-parts", json!([gpu_container("a", 2)]), &value)
        .await
        .unwrap();
    assert_gpu_container(
        &n,
        &admitted,
        "a",
        (
            "0:0-37;1:0-18",
            "GPU-1407000000000100,GPU-1407000000000300",
            "24536m",
        ),
        &[(2, 129), (4, 131)],
    );
    assert_eq!(
        n.annotations("two-parts").await["hami.io/amd-cu-allocated"],
        format!(r#"{{"{p1}":"0-37","{p3}":"0-18"}}"#)
    );

    // The rest of partition 3, then nothing left of it.
    let value = format!("{p3},{MODEL},8192,19:;");
    let b = n.admit_one("rest", "b", &value).await;
    assert_eq!(env(&b)["HSA_CU_MASK"], "0:19-37");
    assert_eq!(env(&b)["ROCR_VISIBLE_DEVICES"], "GPU-1407000000000300");
    let value = format!("{p3},{MODEL},1024,1:;");
    let err = n.refused_one("none-left", &value).await;
    assert!(
        err.contains(&format!("device {p3}: 1 CUs wanted, only 0 of 38 free")),
        "{err}"
    );
    assert_eq!(
        n.annotations("none-left").await["hami.io/bind-phase"],
        "failed"
    );

    n.stop().await;
}
