#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The DCU plugin on an emulated node: API server emulator (real `kube` client), kubelet
//! emulator (real gRPC over unix sockets), a fake K100_AI tree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hami_device_plugin::{Metrics, Plugin, PluginStatus};
use hami_device_plugin_dcu::cli::{BINARY, Cli, ServeArgs};
use hami_device_plugin_dcu::{DcuHook, RESOURCE, fake_tree, run};
use hami_kubelet_api::v1beta1::{ContainerAllocateResponse, DeviceSpec, Mount};
use hami_testkit::plugin_node::{NAMESPACE as NS, PluginNode, stop_plugin};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const NODE: &str = "dcu-node";
const WAIT: Duration = Duration::from_secs(15);
const TO_ALLOCATE: &str = "hami.io/dcu-devices-to-allocate";
const ALLOCATED: &str = "hami.io/dcu-devices-allocated";
const REGISTER: &str = "hami.io/node-dcu-register";
const HANDSHAKE: &str = "hami.io/node-handshake-dcu";

struct DcuNode {
    node: PluginNode,
    tree: tempfile::TempDir,
    shutdown: CancellationToken,
    status: watch::Receiver<PluginStatus>,
    task: tokio::task::JoinHandle<Result<(), hami_device_plugin::PluginError>>,
}

/// The flags the binary would be given, on the emulator's directory and the fake tree.
fn serve_args(dir: &Path, tree: &Path) -> ServeArgs {
    let cli: Cli = BINARY
        .try_parse_from([
            "hami-device-plugin-dcu".to_string(),
            format!("--node-name={NODE}"),
            format!("--device-plugin-path={}", dir.display()),
            format!("--sysfs-root={}", tree.join("sys").display()),
            format!("--dev-root={}", tree.join("dev").display()),
            format!("--dcu-facts={}", tree.join("dcu-facts.json").display()),
            format!("--vgpu-dir={}", tree.join("vgpu").display()),
            format!("--vdev-dir={}", tree.join("etc-vdev").display()),
            format!("--hygon-path={}", tree.join("dtk").display()),
            format!("--hyhal-path={}", tree.join("hyhal").display()),
            "--register-interval=200ms".into(),
            "--health-interval=100ms".into(),
        ])
        .unwrap();
    cli.serve
}

/// Starts the plugin as the binary does (configuration, backend and hook from the
/// flags), on a tree `prepare` may change first.
async fn start_with(prepare: impl FnOnce(&Path)) -> DcuNode {
    let node = PluginNode::start(NODE).await.unwrap();
    let tree = tempfile::tempdir().unwrap();
    fake_tree::write(tree.path(), &fake_tree::k100_ai(2)).unwrap();
    prepare(tree.path());
    let args = serve_args(node.kubelet.dir(), tree.path());
    let backend = Arc::new(run::backend(&args.node, args.common.health_interval).unwrap());
    let hook = Arc::new(DcuHook::new(backend.catalog(), run::host_paths(&args)));
    let cfg = run::plugin_config(&args, NODE).unwrap();
    let plugin = Plugin::new(cfg, backend, node.client.clone(), Metrics::default())
        .unwrap()
        .with_hook(hook);
    let status = plugin.status();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(plugin.run(shutdown.clone()));
    DcuNode {
        node,
        tree,
        shutdown,
        status,
        task,
    }
}

impl DcuNode {
    async fn registered(&mut self, times: u64) {
        if let Err(last) = PluginStatus::wait_registered(&mut self.status, times, WAIT).await {
            panic!("not registered {times}x: {last:?}");
        }
    }

    async fn node_annotation(&self, key: &str) -> Option<String> {
        self.node.node_annotation(key).await.unwrap()
    }

    async fn wait_node_annotation(&self, key: &str, ok: impl Fn(&str) -> bool) -> String {
        self.node
            .wait_node_annotation(key, WAIT, ok)
            .await
            .unwrap_or_else(|last| panic!("{key}: {last:?}"))
    }

    async fn annotations(&self, pod: &str) -> BTreeMap<String, String> {
        self.node.pod_annotations(pod).await.unwrap()
    }

    /// A pod with these containers as the HAMi scheduler leaves it after Bind.
    async fn scheduled(&self, name: &str, containers: Value, to_allocate: &str) -> Pod {
        self.scheduled_spec(name, json!({"containers": containers}), to_allocate)
            .await
    }

    /// [`Self::scheduled`] with the whole pod spec (init containers).
    async fn scheduled_spec(&self, name: &str, spec: Value, to_allocate: &str) -> Pod {
        let ann = json!({TO_ALLOCATE: to_allocate, ALLOCATED: to_allocate});
        self.node.scheduled(name, spec, ann).await.unwrap()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tree.path().join(rel)
    }

    /// Stops the plugin; the API server stays up while the caller holds the node.
    async fn stop(self) -> PluginNode {
        stop_plugin(&self.shutdown, self.task, WAIT).await.unwrap();
        self.node
    }
}

fn dcu_container(name: &str, dcus: u32) -> Value {
    json!({"name": name, "image": "dtk", "resources": {"limits": {RESOURCE: dcus.to_string()}}})
}

fn dev(container: &str, host: &Path, permissions: &str) -> DeviceSpec {
    DeviceSpec {
        container_path: container.into(),
        host_path: host.display().to_string(),
        permissions: permissions.into(),
    }
}

fn mount(container: &str, host: &Path, read_only: bool) -> Mount {
    Mount {
        container_path: container.into(),
        host_path: host.display().to_string(),
        read_only,
    }
}

/// `/dev/kfd`, `/dev/mkfd` and the DRM nodes of the DCUs with these card numbers.
fn devices(n: &DcuNode, cards: &[u32]) -> Vec<DeviceSpec> {
    let mut out = vec![
        dev("/dev/kfd", &n.path("dev/kfd"), "rwm"),
        dev("/dev/mkfd", &n.path("dev/mkfd"), "rwm"),
    ];
    for c in cards {
        out.push(dev(
            &format!("/dev/dri/card{c}"),
            &n.path(&format!("dev/dri/card{c}")),
            "rw",
        ));
        out.push(dev(
            &format!("/dev/dri/renderD{}", 127 + c),
            &n.path(&format!("dev/dri/renderD{}", 127 + c)),
            "rw",
        ));
    }
    out
}

fn conf(
    pci: &str,
    masks: [&str; 2],
    cus: u32,
    mem: u32,
    device: u32,
    vdev: u32,
    pipe: u32,
) -> String {
    format!(
        "PciBusId: {pci}\ncu_mask: 0x{}\ncu_mask: 0x{}\ncu_count: {cus}\nmem: {mem} MiB\ndevice_id: {device}\nvdev_id: {vdev}\npipe_id: {pipe}\nenable: 1\n",
        masks[0], masks[1]
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn registers_the_legacy_string_and_reports_the_handshake_every_round() {
    let mut n = start_with(|_| {}).await;
    n.registered(1).await;
    assert!(n.node.kubelet.wait_for_healthy(RESOURCE, 8, WAIT).await);
    let register = n.wait_node_annotation(REGISTER, |_| true).await;
    assert_eq!(
        register,
        "DCU-SN0001,4,65520,100,DCU-K100_AI,0,true,0,hami:DCU-SN0002,4,65520,100,DCU-K100_AI,0,true,1,hami:"
    );
    let first = n
        .wait_node_annotation(HANDSHAKE, |v| v.starts_with("Reported "))
        .await;
    // The scheduler asks; the next round answers, even though kubelet vouches.
    hami_k8s::patch::patch_node(
        &n.node.client,
        NODE,
        &hami_k8s::patch::MetadataPatch::new()
            .annotate(HANDSHAKE, "Requesting_2026-01-01 00:00:00"),
    )
    .await
    .unwrap();
    let answered = n
        .wait_node_annotation(HANDSHAKE, |v| v.starts_with("Reported "))
        .await;
    assert!(!answered.contains("Requesting"), "{first} then {answered}");
    let node = n.stop().await;
    // Stopping publishes every DCU unhealthy.
    let withdrawn = node.node_annotation(REGISTER).await.unwrap().unwrap();
    assert!(
        withdrawn.contains(",false,0,hami:") && !withdrawn.contains(",true,"),
        "{withdrawn}"
    );
}

#[tokio::test]
async fn whole_and_partial_cards_container_by_container() {
    let mut n = start_with(|_| {}).await;
    n.registered(1).await;
    assert!(n.node.kubelet.wait_for_healthy(RESOURCE, 8, WAIT).await);
    // a: both DCUs whole; b: 4 GiB and 30% of DCU 1 (a vdev); an init container before them.
    let value = "DCU-SN0001,DCU,65520,100:DCU-SN0002,DCU,65520,100:;DCU-SN0002,DCU,4096,30:;";
    let value = format!(";{value}");
    let spec = json!({
        "initContainers": [{"name": "init", "image": "busybox"}],
        "containers": [dcu_container("a", 2), dcu_container("b", 1)],
    });
    let pod = n.scheduled_spec("train", spec, &value).await;
    let uid = pod.metadata.uid.clone().unwrap();
    let admitted = n.node.kubelet.admit(&pod).await.unwrap();
    let hyhal = mount("/opt/hyhal", &n.path("hyhal"), true);

    let a = &admitted.get("a", RESOURCE).unwrap().response;
    assert_eq!(
        *a,
        ContainerAllocateResponse {
            devices: devices(&n, &[1, 2]),
            mounts: vec![hyhal.clone()],
            ..Default::default()
        },
        "whole cards: no vdev, no environment"
    );

    let b = &admitted.get("b", RESOURCE).unwrap().response;
    // 30% of 120 CUs = 36, the lowest ones of DCU 1 (SMI index 1, the second card).
    let dir = n.path(&format!(
        "vgpu/dcu/{uid}_b_1_0_0_0000000fffffffff_0000000000000000"
    ));
    assert_eq!(b.devices, devices(&n, &[2]));
    assert!(b.envs.is_empty());
    assert_eq!(
        b.mounts,
        [
            mount("/etc/vdev/docker/", &dir, false),
            mount("/opt/hygondriver", &n.path("dtk"), false),
            hyhal.clone(),
        ]
    );
    let masks = ["0000000fffffffff", "0000000000000000"];
    assert_eq!(
        read(&dir.join("vdev0.conf")),
        conf("0000:40:00.0", masks, 36, 4096, 0, 0, 0)
    );
    assert_eq!(
        read(&n.path("etc-vdev/vdev0.conf")),
        conf("0000:40:00.0", masks, 36, 4096, 1, 0, 0)
    );

    let ann = n.annotations("train").await;
    assert_eq!(ann[TO_ALLOCATE], ";;;");
    assert_eq!(ann[ALLOCATED], value, "the ledger is untouched");
    assert_eq!(ann["hami.io/bind-phase"], "success");
    assert_eq!(n.node_annotation("hami.io/mutex.lock").await, None);

    // The next vdev on DCU 1 takes the next CUs (36..71, across both masks), vdev id 1
    // and pipe id 1.
    let pod = n
        .scheduled(
            "infer",
            json!([dcu_container("c", 1)]),
            "DCU-SN0002,DCU,8192,30:;",
        )
        .await;
    let uid2 = pod.metadata.uid.clone().unwrap();
    let admitted = n.node.kubelet.admit(&pod).await.unwrap();
    let c = &admitted.get("c", RESOURCE).unwrap().response;
    let dir2 = n.path(&format!(
        "vgpu/dcu/{uid2}_c_1_1_1_fffffff000000000_00000000000000ff"
    ));
    assert_eq!(c.mounts[0], mount("/etc/vdev/docker/", &dir2, false));
    assert_eq!(
        read(&n.path("etc-vdev/vdev1.conf")),
        conf(
            "0000:40:00.0",
            ["fffffff000000000", "00000000000000ff"],
            36,
            8192,
            1,
            1,
            1
        )
    );

    // 40% more of DCU 1 does not fit in the 48 CUs left: refused, nothing written.
    let pod = n
        .scheduled(
            "big",
            json!([dcu_container("d", 1)]),
            "DCU-SN0002,DCU,4096,50:;",
        )
        .await;
    let err = n.node.kubelet.admit(&pod).await.unwrap_err().to_string();
    assert!(
        err.contains("48 compute units free, the container needs 60"),
        "{err}"
    );
    assert_eq!(n.annotations("big").await["hami.io/bind-phase"], "failed");
    assert!(!n.path("etc-vdev/vdev2.conf").exists());
    assert_eq!(n.node_annotation("hami.io/mutex.lock").await, None);
    n.stop().await;
}

#[tokio::test]
async fn restart_rebuilds_vdevs_from_their_directories_and_removes_orphans() {
    // Before the plugin starts: an orphan vdev whose pod is gone (vdev 1) and a
    // directory that is not a vdev; once it serves, a live pod's vdev (DCU 0, vdev 0,
    // pipe 0, CUs 0..11) — its pod is created on the API server the plugin talks to.
    let live_dir = |uid: &str| format!("{uid}_main_0_0_0_0000000000000fff_0000000000000000");
    let orphan_dir =
        "9f3c0000-dead-4bad-8bad-000000000000_main_0_1_1_000000000000f000_0000000000000000";
    let mut n = start_with(|tree| {
        let dcu = tree.join("vgpu/dcu");
        std::fs::create_dir_all(dcu.join(orphan_dir)).unwrap();
        std::fs::create_dir_all(dcu.join("lost+found")).unwrap();
        std::fs::create_dir_all(tree.join("etc-vdev")).unwrap();
        std::fs::write(tree.join("etc-vdev/vdev1.conf"), "vdev_id: 1\n").unwrap();
    })
    .await;
    let running: Pod = serde_json::from_value(json!({
        "metadata": {"name": "running", "namespace": NS},
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "dtk"}]},
    }))
    .unwrap();
    let running = Api::<Pod>::namespaced(n.node.client.clone(), NS)
        .create(&PostParams::default(), &running)
        .await
        .unwrap();
    let running_dir = n
        .path("vgpu/dcu")
        .join(live_dir(running.metadata.uid.as_deref().unwrap()));
    std::fs::create_dir_all(&running_dir).unwrap();
    n.registered(1).await;
    assert!(n.node.kubelet.wait_for_healthy(RESOURCE, 8, WAIT).await);

    let pod = n
        .scheduled(
            "next",
            json!([dcu_container("c", 1)]),
            "DCU-SN0001,DCU,2048,10:;",
        )
        .await;
    let uid = pod.metadata.uid.clone().unwrap();
    let admitted = n.node.kubelet.admit(&pod).await.unwrap();
    let c = &admitted.get("c", RESOURCE).unwrap().response;
    // 12 CUs after the live pod's 0..11; pipe 1 (pipe 0 is the live pod's); vdev 1, free
    // again once the orphan is gone.
    let dir = n.path(&format!(
        "vgpu/dcu/{uid}_c_0_1_1_0000000000fff000_0000000000000000"
    ));
    assert_eq!(c.mounts[0], mount("/etc/vdev/docker/", &dir, false));
    assert_eq!(
        read(&n.path("etc-vdev/vdev1.conf")),
        conf(
            "0000:3D:00.0",
            ["0000000000fff000", "0000000000000000"],
            12,
            2048,
            0,
            1,
            1
        )
    );
    assert!(running_dir.exists(), "the live pod's vdev stays");
    assert!(
        !n.path("vgpu/dcu").join(orphan_dir).exists(),
        "orphan removed"
    );
    assert!(
        n.path("vgpu/dcu/lost+found").exists(),
        "foreign directories are left alone"
    );

    // kubelet restarts: the plugin registers again and its devices come back.
    n.node.kubelet.restart().await.unwrap();
    n.registered(2).await;
    assert!(n.node.kubelet.wait_for_healthy(RESOURCE, 8, WAIT).await);
    // A render node disappears: that DCU's replicas turn unhealthy.
    std::fs::remove_file(n.path("dev/dri/renderD129")).unwrap();
    assert!(n.node.kubelet.wait_for_healthy(RESOURCE, 4, WAIT).await);
    let socket = n.node.kubelet.dir().join("hygon-dcunum.sock");
    n.stop().await;
    assert!(!socket.exists(), "socket removed on shutdown");
}
