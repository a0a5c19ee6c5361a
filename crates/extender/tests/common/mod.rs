#![allow(dead_code)]
//! A cluster for extender tests: the API server emulator, nodes with fake GPUs, the real
//! extender serving on 127.0.0.1, and calls shaped as kube-scheduler sends them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hami_core::codec::encode_node_register_json;
use hami_core::config::DeviceConfig;
use hami_core::engine::SchedulerDefaults;
use hami_core::model::DeviceInfo;
use hami_scheduler::leader::LeaseRef;
use hami_scheduler::run::{RunError, Service, serve_service};
use hami_scheduler::service::Settings;
use hami_scheduler::wire::{ExtenderBindingResult, ExtenderFilterResult};
use hami_server::supervise::RestartPolicy;
use hami_server::test_support::{http_request, request};
use hami_server::{CancellationToken, TlsConfig};
use hami_testkit::ApiServer;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, Config};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Knobs a test may turn.
#[derive(Debug, Clone)]
pub struct Knobs {
    pub node_lock_wait: Duration,
    pub node_lock_timeout: Duration,
    pub reservation_timeout: Duration,
    pub registry_interval: Duration,
    pub handshake_timeout: Duration,
    pub defaults: SchedulerDefaults,
    /// `--enable-ascend`, `--enable-iluvatar`.
    pub switches: hami_core::config::VendorSwitches,
    pub legacy_metrics: bool,
    pub restart: RestartPolicy,
    /// Run as with `--leader-elect` (other replicas may bind too).
    pub leader_elect: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            node_lock_wait: Duration::from_secs(5),
            node_lock_timeout: Duration::from_secs(300),
            reservation_timeout: Duration::from_secs(120),
            registry_interval: Duration::from_secs(15),
            handshake_timeout: Duration::from_secs(60),
            defaults: SchedulerDefaults::default(),
            switches: Default::default(),
            legacy_metrics: false,
            restart: RestartPolicy::default(),
            leader_elect: false,
        }
    }
}

pub struct Extender {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), RunError>>,
}

impl Extender {
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }

    /// How the service ended on its own (bounded wait).
    pub async fn ended(self) -> Result<(), RunError> {
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the extender did not stop")
            .unwrap()
    }

    /// `/readyz`: status and text.
    pub async fn readyz(&self) -> (u16, String) {
        let r = http_request(self.admin, request("GET", "/readyz", "").unwrap())
            .await
            .unwrap();
        (r.status.as_u16(), r.text())
    }

    /// Waits (bounded) until `/readyz` answers `status` with a text containing `text`.
    pub async fn wait_readyz(&self, status: u16, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (got, body) = self.readyz().await;
            if got == status && body.contains(text) {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "/readyz stayed {got} {body:?}, waiting for {status} {text:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

pub struct Cluster {
    pub server: ApiServer,
    pub client: Client,
    pub ext: Extender,
    pub knobs: Knobs,
}

pub fn gpu(id: &str, index: u32, mem: u32) -> DeviceInfo {
    DeviceInfo {
        id: id.into(),
        index,
        count: 10,
        mem_mib: mem,
        cores: 100,
        dev_type: "NVIDIA-Tesla T4".into(),
        numa: 0,
        mode: "hami-core".into(),
        health: true,
        mig_profiles: vec![],
        custom_info: Default::default(),
    }
}

/// `n` GPUs of `mem` MiB named `<node>-gpu<i>`.
pub fn gpus(node: &str, n: u32, mem: u32) -> Vec<DeviceInfo> {
    (0..n)
        .map(|i| gpu(&format!("{node}-gpu{i}"), i, mem))
        .collect()
}

pub fn node_object(name: &str, devices: &[DeviceInfo], allocatable: bool) -> Node {
    let mut status = json!({});
    if allocatable {
        status = json!({"allocatable": {"nvidia.com/gpu": (devices.len() * 10).to_string()},
                        "capacity": {"nvidia.com/gpu": (devices.len() * 10).to_string()}});
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"gpu": "on"},
                     "annotations": {"hami.io/node-nvidia-register": encode_node_register_json(devices)}},
        "status": status
    }))
    .unwrap()
}

/// The annotations HAMi's /filter leaves on a pod placed on `node` with `devices`
/// (`hami.io/vgpu-devices-allocated` syntax), decided now: without the bind mark, which
/// /bind then writes.
pub fn decided_by_hami(node: &str, devices: &str) -> Value {
    serde_json::json!({
        "hami.io/vgpu-node": node,
        "hami.io/vgpu-time": chrono::Utc::now().timestamp().to_string(),
        "hami.io/vgpu-devices-to-allocate": devices,
        "hami.io/vgpu-devices-allocated": devices,
    })
}

/// A pod asking each container for `limits` (one container per entry).
pub fn gpu_pod(name: &str, containers: &[Value], annotations: Value) -> Pod {
    let containers: Vec<Value> = containers
        .iter()
        .enumerate()
        .map(|(i, limits)| json!({"name": format!("c{i}"), "image": "cuda", "resources": {"limits": limits}}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"schedulerName": "hami-scheduler", "containers": containers}
    }))
    .unwrap()
}

pub async fn start_extender(client: Client, knobs: &Knobs) -> Extender {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let admin = admin_listener.local_addr().unwrap();
    let svc = Service {
        listener,
        admin_listener,
        tls: TlsConfig::None,
        devices: DeviceConfig::default().with_switches(knobs.switches),
        settings: Settings {
            scheduler_name: "hami-scheduler".into(),
            defaults: knobs.defaults.clone(),
            node_lock_timeout: knobs.node_lock_timeout,
            node_lock_wait: knobs.node_lock_wait,
            reservation_timeout: knobs.reservation_timeout,
            body_limit: 1024 * 1024,
            sync_wait: Duration::from_secs(10),
        },
        node_label_selector: None,
        registry_interval: knobs.registry_interval,
        handshake_timeout: knobs.handshake_timeout,
        leader_lease: knobs.leader_elect.then(|| LeaseRef {
            namespace: "kube-system".into(),
            name: "hami-scheduler".into(),
            identity: "hami-scheduler-0".into(),
        }),
        legacy_metrics: knobs.legacy_metrics,
        dedicated_http_thread: true,
        ui: true,
        admin_tls: TlsConfig::None,
        restart: knobs.restart,
    };
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve_service(svc, client, shutdown.clone()));
    let ext = Extender {
        addr,
        admin,
        shutdown,
        task,
    };
    wait_ready(&ext).await;
    ext
}

async fn wait_ready(ext: &Extender) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = http_request(ext.admin, request("GET", "/readyz", "").unwrap()).await;
        if r.is_ok_and(|r| r.status == 200) {
            return;
        }
        assert!(Instant::now() < deadline, "extender never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Cluster {
    /// Nodes `(name, devices)` with allocatable GPUs, and an extender over them.
    pub async fn start(nodes: &[(&str, Vec<DeviceInfo>)], knobs: Knobs) -> Cluster {
        let objects = nodes
            .iter()
            .map(|(name, devices)| node_object(name, devices, true));
        Cluster::start_on(objects, knobs).await
    }

    /// Nodes of any device family, and an extender over them.
    pub async fn start_vendor_nodes(
        nodes: &[hami_testkit::vendor_node::VendorNode],
        knobs: Knobs,
    ) -> Cluster {
        let objects = nodes
            .iter()
            .map(|node| serde_json::from_value(node.to_object()).unwrap());
        Cluster::start_on(objects, knobs).await
    }

    /// These Node objects in a fresh API server, and an extender over them.
    async fn start_on(nodes: impl Iterator<Item = Node>, knobs: Knobs) -> Cluster {
        let server = ApiServer::start().await.unwrap();
        let client = Client::try_from(Config::new(server.url().parse().unwrap())).unwrap();
        let api: Api<Node> = Api::all(client.clone());
        for node in nodes {
            api.create(&PostParams::default(), &node).await.unwrap();
        }
        let ext = start_extender(client.clone(), &knobs).await;
        Cluster {
            server,
            client,
            ext,
            knobs,
        }
    }

    /// A node annotation, if set.
    pub async fn node_annotation(&self, node: &str, key: &str) -> Option<String> {
        let api: Api<Node> = Api::all(self.client.clone());
        api.get(node)
            .await
            .unwrap()
            .metadata
            .annotations
            .and_then(|a| a.get(key).cloned())
    }

    /// Waits (bounded) for an event about node `node` with `reason`.
    pub async fn wait_node_event(&self, node: &str, reason: &str) -> Event {
        let api: Api<Event> = Api::all(self.client.clone());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let events = api.list(&ListParams::default()).await.unwrap().items;
            if let Some(e) = events.into_iter().find(|e| {
                e.involved_object.kind.as_deref() == Some("Node")
                    && e.involved_object.name.as_deref() == Some(node)
                    && e.reason.as_deref() == Some(reason)
            }) {
                return e;
            }
            assert!(
                Instant::now() < deadline,
                "no {reason} event for node {node}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the extender and starts a fresh one (empty memory) on the same cluster.
    pub async fn restart_extender(&mut self) {
        let fresh = start_extender(self.client.clone(), &self.knobs).await;
        let old = std::mem::replace(&mut self.ext, fresh);
        old.stop().await;
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    pub async fn node_names(&self) -> Vec<String> {
        let api: Api<Node> = Api::all(self.client.clone());
        let mut names: Vec<String> = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        names.sort();
        names
    }

    pub async fn create(&self, pod: &Pod) -> Pod {
        self.pods()
            .create(&PostParams::default(), pod)
            .await
            .unwrap()
    }

    /// kube-scheduler's filter call for the pod as stored, over `nodes` (all when None).
    pub async fn filter_on(&self, name: &str, nodes: Option<Vec<String>>) -> ExtenderFilterResult {
        let pod = self.pods().get(name).await.unwrap();
        let names = match nodes {
            Some(n) => n,
            None => self.node_names().await,
        };
        let body = json!({"Pod": pod, "Nodes": null, "NodeNames": names});
        self.post("/filter", body).await
    }

    pub async fn filter(&self, name: &str) -> ExtenderFilterResult {
        self.filter_on(name, None).await
    }

    pub async fn bind(&self, name: &str, node: &str) -> ExtenderBindingResult {
        let pod = self.pods().get(name).await.unwrap();
        let body = json!({
            "PodName": name, "PodNamespace": "default",
            "PodUID": pod.metadata.uid.unwrap(), "Node": node
        });
        self.post("/bind", body).await
    }

    pub async fn post<T: serde::de::DeserializeOwned>(&self, path: &str, body: Value) -> T {
        let resp = http_request(
            self.ext.addr,
            request("POST", path, body.to_string()).unwrap(),
        )
        .await
        .unwrap();
        assert_eq!(resp.status, 200, "{}", resp.text());
        serde_json::from_slice(&resp.body).unwrap()
    }

    /// Filter then bind, as kube-scheduler does; the chosen node.
    pub async fn schedule(&self, name: &str) -> String {
        let f = self.filter(name).await;
        assert_eq!(f.error, "", "filter error");
        let node = f
            .node_names
            .and_then(|n| n.into_iter().next())
            .unwrap_or_else(|| panic!("no node for {name}: {:?}", f.failed_nodes));
        let b = self.bind(name, &node).await;
        assert_eq!(b.error, "", "bind error for {name}");
        node
    }

    /// What the device plugin does after Allocate: bind-phase success, lock released.
    pub async fn finish_allocation(&self, name: &str, node: &str) {
        let pod = self.pods().get(name).await.unwrap();
        hami_k8s::patch::patch_pod(
            &self.client,
            hami_k8s::patch::PodRef::of(&pod),
            &hami_k8s::patch::MetadataPatch::new().annotate("hami.io/bind-phase", "success"),
        )
        .await
        .unwrap();
        hami_k8s::lock::release(&self.client, node, "default", name)
            .await
            .unwrap();
    }

    pub async fn annotations(&self, name: &str) -> BTreeMap<String, String> {
        self.pods()
            .get(name)
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default()
    }

    /// Waits (bounded) until the pod's annotations satisfy `f`.
    pub async fn wait_annotations(
        &self,
        name: &str,
        f: impl Fn(&BTreeMap<String, String>) -> bool,
    ) -> BTreeMap<String, String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let a = self.annotations(name).await;
            if f(&a) {
                return a;
            }
            assert!(
                Instant::now() < deadline,
                "pod {name} annotations never matched: {a:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn node_lock(&self, node: &str) -> Option<String> {
        let api: Api<Node> = Api::all(self.client.clone());
        api.get(node)
            .await
            .unwrap()
            .metadata
            .annotations
            .and_then(|a| a.get("hami.io/mutex.lock").cloned())
    }

    /// Reasons of the events about `pod`, waiting (bounded) until `reason` shows up.
    pub async fn wait_event(&self, pod: &str, reason: &str) -> Event {
        let api: Api<Event> = Api::namespaced(self.client.clone(), "default");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let events = api.list(&ListParams::default()).await.unwrap().items;
            if let Some(e) = events.into_iter().find(|e| {
                e.involved_object.name.as_deref() == Some(pod)
                    && e.reason.as_deref() == Some(reason)
            }) {
                return e;
            }
            assert!(Instant::now() < deadline, "no {reason} event for {pod}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn metrics(&self) -> String {
        http_request(self.ext.admin, request("GET", "/metrics", "").unwrap())
            .await
            .unwrap()
            .text()
    }

    /// `device uuid → allocated MiB` from the metrics.
    pub async fn allocated_mem(&self) -> BTreeMap<String, u64> {
        parse_allocated(&self.metrics().await)
    }

    /// Waits (bounded) until device `gpu` is counted with `mem` MiB allocated.
    pub async fn wait_allocated(&self, gpu: &str, mem: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.allocated_mem().await.get(gpu) != Some(&mem) {
            assert!(Instant::now() < deadline, "{gpu} never held {mem} MiB");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

pub fn parse_allocated(metrics: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("hami_gpu_memory_allocated_bytes{"))
    {
        let uuid = line
            .split("device_uuid=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap()
            .to_string();
        let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        out.insert(uuid, (value as u64) / (1024 * 1024));
    }
    out
}

pub fn chosen(f: &ExtenderFilterResult) -> Option<String> {
    f.node_names.as_ref().and_then(|n| n.first().cloned())
}
