#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A node for the plugin: the API server emulator (real `kube` client), the kubelet emulator
//! (real gRPC over unix sockets) and a scripted backend.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hami_device_plugin::{
    BackendError, BackendEvent, DeviceBackend, DeviceFilter, DirWatcher, Metrics, PhysicalDevice,
    Plugin, PluginConfig, PluginStatus, VendorSpec, VgpuHookSettings,
};
use hami_server::admin::Readiness;
use hami_server::supervise::{RestartPolicy, Supervisor};
use hami_testkit::ApiServer;
use hami_testkit::kubelet::{Kubelet, KubeletOptions};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const NODE: &str = "node-a";
pub const RESOURCE: &str = "nvidia.com/gpu";
pub const NS: &str = "default";
pub const WAIT: Duration = Duration::from_secs(15);

/// A backend whose devices the test chooses and whose events the test sends.
#[derive(Default)]
pub struct ScriptedBackend {
    pub devices: Vec<PhysicalDevice>,
    events: Mutex<Option<mpsc::Sender<BackendEvent>>>,
    /// How many times `watch` was called.
    pub watches: AtomicUsize,
}

impl ScriptedBackend {
    pub async fn send(&self, event: BackendEvent) {
        let tx = self.events.lock().unwrap().clone().expect("watch started");
        tx.send(event).await.unwrap();
    }

    /// What a watch thread that died does: its side of the channel closes.
    pub fn die(&self) {
        self.events.lock().unwrap().take();
    }
}

impl DeviceBackend for ScriptedBackend {
    fn name(&self) -> &str {
        "scripted"
    }

    fn discover(&self) -> Result<Vec<PhysicalDevice>, BackendError> {
        Ok(self.devices.clone())
    }

    fn watch(
        &self,
        _: &[PhysicalDevice],
        events: mpsc::Sender<BackendEvent>,
        _: CancellationToken,
    ) -> Result<(), BackendError> {
        *self.events.lock().unwrap() = Some(events);
        self.watches.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

pub fn gpu(uuid: &str, index: u32, memory_mib: u64, numa: i32) -> PhysicalDevice {
    PhysicalDevice {
        uuid: uuid.into(),
        index,
        model: "NVIDIA-Tesla T4".into(),
        memory_mib,
        numa: Some(numa),
        healthy: true,
    }
}

pub struct Cluster {
    pub api: ApiServer,
    pub client: kube::Client,
    pub kubelet: Kubelet,
    pub backend: Arc<ScriptedBackend>,
    pub hook: tempfile::TempDir,
    pub shutdown: CancellationToken,
    pub status: watch::Receiver<PluginStatus>,
    pub task: Option<JoinHandle<Result<(), hami_device_plugin::PluginError>>>,
    pub cfg: PluginConfig,
    /// The readiness the plugin's supervisor reports on.
    pub readiness: Readiness,
}

pub fn config(dir: &Path, hook: &Path) -> PluginConfig {
    PluginConfig {
        node_name: NODE.into(),
        resource_name: RESOURCE.into(),
        plugin_dir: dir.to_path_buf(),
        socket_name: "nvidia-gpu.sock".into(),
        vendor: VendorSpec::nvidia(),
        split_count: 4,
        memory_scaling: 1.0,
        core_scaling: 1.0,
        preconfigured_memory: 0,
        numa_topology: false,
        preferred_allocation: true,
        operating_mode: "hami-core".into(),
        filter: DeviceFilter::default(),
        vgpu_hook: VgpuHookSettings {
            hook_path: hook.to_path_buf(),
            lib_cuda_log_level: "1".into(),
            disable_core_limit: false,
            libvgpu_version: None,
        },
        register_interval: Duration::from_secs(30),
    }
}

impl Cluster {
    /// Two T4s (GPU-a on NUMA 0, GPU-b on NUMA 1), split 4 ways, node `node-a`.
    pub async fn start() -> Cluster {
        Self::start_with(
            |_| {},
            vec![gpu("GPU-a", 0, 15360, 0), gpu("GPU-b", 1, 15360, 1)],
            json!({}),
        )
        .await
    }

    pub async fn start_with(
        tweak: impl FnOnce(&mut PluginConfig),
        devices: Vec<PhysicalDevice>,
        node_status: Value,
    ) -> Cluster {
        Self::start_supervised(tweak, devices, node_status, RestartPolicy::default()).await
    }

    /// [`Cluster::start`], with tasks restarted fast and never given up on.
    pub async fn start_patient() -> Cluster {
        let patient = RestartPolicy {
            initial_delay: Duration::from_millis(50),
            max_delay: Duration::from_millis(200),
            max_failures: 1_000,
            window: Duration::from_secs(60),
        };
        Self::start_supervised(
            |_| {},
            vec![gpu("GPU-a", 0, 15360, 0), gpu("GPU-b", 1, 15360, 1)],
            json!({}),
            patient,
        )
        .await
    }

    /// [`Cluster::start_with`], the plugin's tasks supervised under `policy`.
    pub async fn start_supervised(
        tweak: impl FnOnce(&mut PluginConfig),
        devices: Vec<PhysicalDevice>,
        node_status: Value,
        policy: RestartPolicy,
    ) -> Cluster {
        Self::start_watching(tweak, devices, node_status, policy, None).await
    }

    /// [`Cluster::start`], the plugin directory watched through `watcher`.
    pub async fn start_with_dir_watcher(watcher: DirWatcher) -> Cluster {
        Self::start_watching(
            |_| {},
            vec![gpu("GPU-a", 0, 15360, 0), gpu("GPU-b", 1, 15360, 1)],
            json!({}),
            RestartPolicy::default(),
            Some(watcher),
        )
        .await
    }

    async fn start_watching(
        tweak: impl FnOnce(&mut PluginConfig),
        devices: Vec<PhysicalDevice>,
        node_status: Value,
        policy: RestartPolicy,
        watcher: Option<DirWatcher>,
    ) -> Cluster {
        let api = ApiServer::start().await.unwrap();
        let client = kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap();
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": NODE, "labels": {"gpu": "on"}},
            "status": node_status,
        }))
        .unwrap();
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
        let kubelet = Kubelet::start_with(KubeletOptions {
            node_name: Some(NODE.into()),
            ..Default::default()
        })
        .await
        .unwrap();
        let hook = tempfile::tempdir().unwrap();
        let mut cfg = config(kubelet.dir(), hook.path());
        tweak(&mut cfg);
        let backend = Arc::new(ScriptedBackend {
            devices,
            ..Default::default()
        });
        let plugin = Plugin::new(
            cfg.clone(),
            backend.clone(),
            client.clone(),
            Metrics::default(),
        )
        .unwrap();
        let plugin = match watcher {
            Some(w) => plugin.with_dir_watcher(w),
            None => plugin,
        };
        let status = plugin.status();
        let shutdown = CancellationToken::new();
        let readiness = Readiness::ready();
        let mut sup = Supervisor::new(readiness.clone(), shutdown.clone(), policy);
        plugin.supervise(&mut sup);
        let task = tokio::spawn(async move { sup.run().await.map_err(Into::into) });
        Cluster {
            api,
            client,
            kubelet,
            backend,
            hook,
            shutdown,
            status,
            task: Some(task),
            cfg,
            readiness,
        }
    }

    pub async fn wait_registered(&mut self, times: u64) {
        if let Err(last) = PluginStatus::wait_registered(&mut self.status, times, WAIT).await {
            panic!("plugin did not register {times} time(s): {last:?}");
        }
    }

    /// Waits until the readiness the supervisor reports on satisfies `cond`.
    pub async fn wait_readiness(
        &self,
        cond: impl Fn(&Result<(), String>) -> bool,
    ) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let r = self.readiness.check();
            if cond(&r) {
                return r;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "readiness stayed {r:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Registered and kubelet sees `healthy` healthy replicas.
    pub async fn ready(&mut self, healthy: usize) {
        self.wait_registered(1).await;
        assert!(
            self.kubelet.wait_for_healthy(RESOURCE, healthy, WAIT).await,
            "kubelet state: {:?}",
            self.kubelet.resource(RESOURCE)
        );
    }

    pub async fn node(&self) -> Node {
        Api::<Node>::all(self.client.clone())
            .get(NODE)
            .await
            .unwrap()
    }

    pub async fn node_annotation(&self, key: &str) -> Option<String> {
        self.node()
            .await
            .metadata
            .annotations
            .unwrap_or_default()
            .get(key)
            .cloned()
    }

    /// Waits until the node annotation `key` satisfies `cond`.
    pub async fn wait_node_annotation(
        &self,
        key: &str,
        cond: impl Fn(Option<&str>) -> bool,
    ) -> Option<String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let v = self.node_annotation(key).await;
            if cond(v.as_deref()) {
                return v;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "node annotation {key} stayed {v:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn pod(&self, name: &str) -> Pod {
        Api::<Pod>::namespaced(self.client.clone(), NS)
            .get(name)
            .await
            .unwrap()
    }

    pub async fn pod_annotations(&self, name: &str) -> BTreeMap<String, String> {
        self.pod(name)
            .await
            .metadata
            .annotations
            .unwrap_or_default()
    }

    /// Creates a pod as the scheduler leaves it after Bind: bound to the node, with
    /// `to_allocate` in both device annotations, bind-phase allocating, and (when `lock`)
    /// the node lock taken for it.
    pub async fn scheduled_pod(
        &self,
        name: &str,
        containers: Value,
        init: Value,
        to_allocate: &str,
        lock: bool,
    ) -> Pod {
        let pod = json!({
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {"hami.io/vgpu-node": NODE},
                "annotations": {
                    "hami.io/vgpu-node": NODE,
                    "hami.io/vgpu-time": "1767225600",
                    "hami.io/vgpu-devices-to-allocate": to_allocate,
                    "hami.io/vgpu-devices-allocated": to_allocate,
                    "hami.io/bind-phase": "allocating",
                    "hami.io/bind-time": "1767225601",
                }
            },
            "spec": {"nodeName": NODE, "containers": containers, "initContainers": init},
        });
        let pod = self.create_pod(pod).await;
        if lock {
            hami_k8s::lock::try_acquire(
                &self.client,
                NODE,
                NS,
                name,
                hami_k8s::lock::DEFAULT_LOCK_TIMEOUT,
            )
            .await
            .unwrap();
        }
        pod
    }

    pub async fn create_pod(&self, pod: Value) -> Pod {
        let pod: Pod = serde_json::from_value(pod).unwrap();
        Api::<Pod>::namespaced(self.client.clone(), NS)
            .create(&PostParams::default(), &pod)
            .await
            .unwrap()
    }

    pub async fn lock_value(&self) -> Option<String> {
        self.node_annotation("hami.io/mutex.lock").await
    }

    pub fn hook_path(&self) -> PathBuf {
        self.hook.path().to_path_buf()
    }

    /// Stops the plugin and waits for `run` to return.
    pub async fn stop(&mut self) {
        self.shutdown.cancel();
        let task = self.task.take().unwrap();
        tokio::time::timeout(WAIT, task)
            .await
            .expect("plugin did not stop in time")
            .unwrap()
            .unwrap();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A container asking for `gpus` of our resource (plus HAMi's memory/cores resources,
/// which are not device plugin resources and kubelet must ignore).
pub fn gpu_container(name: &str, gpus: u32) -> Value {
    json!({
        "name": name,
        "image": "cuda",
        "resources": {"limits": {RESOURCE: gpus.to_string(), "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}}
    })
}

pub fn plain_container(name: &str) -> Value {
    json!({"name": name, "image": "busybox"})
}
