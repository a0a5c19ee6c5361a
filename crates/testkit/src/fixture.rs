//! A cluster fixture for tests and the demo: GPU nodes registered the way HAMi's
//! NVIDIA device plugin registers them (capacity and allocatable `nvidia.com/gpu` =
//! GPUs × split count, the `hami.io/node-nvidia-register` annotation), pods asking
//! for GPUs with HAMi's resource names, and waits that end with an error naming what
//! was awaited.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use hami_testkit::fixture::{Cluster, GpuPod};
//! let cluster = Cluster::start().await?;
//! cluster.add_gpu_nodes(2, 4)?; // gpu-node-0 and gpu-node-1, 4 GPUs each
//! cluster.create_pod(&GpuPod::new("job").gpus(1).gpumem(4000)).await?;
//! let node = cluster.wait_pod_bound("default", "job", Duration::from_secs(30)).await?;
//! # let _ = node; Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hami_core::codec::encode_node_register_json;
use hami_core::model::DeviceInfo;
use serde_json::{Map, Value, json};

use crate::http::ApiServer;
use crate::resources;
use crate::status::ApiError;
use crate::store::Store;

/// HAMi's default NVIDIA resource names.
pub const GPU: &str = "nvidia.com/gpu";
pub const GPUMEM: &str = "nvidia.com/gpumem";
pub const GPUMEM_PERCENTAGE: &str = "nvidia.com/gpumem-percentage";
pub const GPUCORES: &str = "nvidia.com/gpucores";
/// The node annotation holding the device inventory.
pub const REGISTER_ANNOTATION: &str = "hami.io/node-nvidia-register";

/// A node with `gpus` identical NVIDIA GPUs (some possibly unhealthy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuNode {
    pub name: String,
    pub gpus: u32,
    /// Model as the plugin registers it (`NVIDIA-` prefixed NVML name).
    pub model: String,
    /// Memory per GPU in MiB.
    pub memory_mib: u32,
    /// `deviceSplitCount`: how many containers may share one GPU.
    pub split: u32,
    /// Compute per GPU in percent (`deviceCoreScaling` × 100).
    pub cores: u32,
    pub numa: i32,
    /// Indexes of GPUs registered unhealthy.
    pub unhealthy: Vec<u32>,
    pub labels: BTreeMap<String, String>,
}

impl GpuNode {
    /// A40-like defaults: 40960 MiB, split 10, 100 % cores, label `gpu=on` (the
    /// chart's device plugin node selector).
    pub fn new(name: &str, gpus: u32) -> Self {
        Self {
            name: name.to_string(),
            gpus,
            model: "NVIDIA-A40".into(),
            memory_mib: 40960,
            split: 10,
            cores: 100,
            numa: 0,
            unhealthy: Vec::new(),
            labels: BTreeMap::from([("gpu".to_string(), "on".to_string())]),
        }
    }

    pub fn model(mut self, model: &str) -> Self {
        self.model = model.to_string();
        self
    }

    pub fn memory_mib(mut self, mib: u32) -> Self {
        self.memory_mib = mib;
        self
    }

    pub fn split(mut self, split: u32) -> Self {
        self.split = split;
        self
    }

    pub fn cores(mut self, cores: u32) -> Self {
        self.cores = cores;
        self
    }

    pub fn unhealthy(mut self, index: u32) -> Self {
        self.unhealthy.push(index);
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_string(), value.to_string());
        self
    }

    /// The UUID of GPU `index`: stable for a node name, shaped like NVML's.
    pub fn uuid(&self, index: u32) -> String {
        let h = |salt: u64| {
            format!("{}/{index}/{salt}", self.name)
                .bytes()
                .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                })
        };
        let hex = format!("{:016x}{:016x}", h(1), h(2));
        format!(
            "GPU-{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )
    }

    /// The devices as the plugin registers them.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        (0..self.gpus)
            .map(|i| DeviceInfo {
                id: self.uuid(i).into(),
                index: i,
                count: self.split,
                mem_mib: self.memory_mib,
                cores: self.cores,
                dev_type: self.model.clone().into(),
                numa: self.numa,
                mode: "hami-core".into(),
                health: !self.unhealthy.contains(&i),
                mig_profiles: Vec::new(),
                custom_info: Default::default(),
            })
            .collect()
    }

    /// The Node object: capacity counts every GPU's split replicas, allocatable only
    /// the healthy ones' (kubelet drops devices the plugin reports unhealthy).
    pub fn to_object(&self) -> Value {
        let healthy = self.gpus - self.unhealthy.iter().filter(|i| **i < self.gpus).count() as u32;
        let resources = |gpu: u32| {
            json!({
                "cpu": "32", "memory": "131072Mi", "pods": "110", "ephemeral-storage": "200Gi",
                GPU: (gpu * self.split).to_string(),
            })
        };
        let mut labels: Map<String, Value> = self
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        labels.insert("kubernetes.io/hostname".into(), self.name.clone().into());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {REGISTER_ANNOTATION: encode_node_register_json(&self.devices())},
            },
            "spec": {},
            "status": {
                "capacity": resources(self.gpus),
                "allocatable": resources(healthy),
                "conditions": [{
                    "type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": now(), "lastTransitionTime": now(),
                }],
                "addresses": [{"type": "Hostname", "address": self.name}],
                "nodeInfo": {
                    "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "6.8.0",
                    "osImage": "Ubuntu 24.04 LTS", "containerRuntimeVersion": "containerd://2.0.0",
                    "kubeletVersion": crate::discovery::GIT_VERSION, "kubeProxyVersion": "",
                    "operatingSystem": "linux", "architecture": "amd64",
                },
            },
        })
    }
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// One container of a [`GpuPod`], with HAMi's GPU limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuContainer {
    pub name: String,
    pub image: String,
    /// Limits by resource name, e.g. `nvidia.com/gpu` → `1`.
    pub limits: BTreeMap<String, String>,
    pub env: Vec<(String, String)>,
}

/// A pod asking for GPUs; the builder methods set limits on the last container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPod {
    pub name: String,
    pub namespace: String,
    /// None leaves it to the API server's default (and to the webhook).
    pub scheduler_name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub containers: Vec<GpuContainer>,
}

impl GpuPod {
    /// A pod in `default` with one container `main`.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            namespace: "default".into(),
            scheduler_name: None,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            containers: vec![GpuContainer {
                name: "main".into(),
                image: "nvidia/cuda:12.4.0-base-ubuntu22.04".into(),
                ..GpuContainer::default()
            }],
        }
    }

    fn limit(mut self, resource: &str, value: String) -> Self {
        if let Some(c) = self.containers.last_mut() {
            c.limits.insert(resource.to_string(), value);
        }
        self
    }

    /// `nvidia.com/gpu`: how many GPUs (shares) the container gets.
    pub fn gpus(self, n: u32) -> Self {
        self.limit(GPU, n.to_string())
    }

    /// `nvidia.com/gpumem`: MiB per GPU.
    pub fn gpumem(self, mib: u32) -> Self {
        self.limit(GPUMEM, mib.to_string())
    }

    /// `nvidia.com/gpumem-percentage`: percent of each GPU's memory.
    pub fn gpumem_percentage(self, pct: u32) -> Self {
        self.limit(GPUMEM_PERCENTAGE, pct.to_string())
    }

    /// `nvidia.com/gpucores`: percent of each GPU's compute.
    pub fn gpucores(self, pct: u32) -> Self {
        self.limit(GPUCORES, pct.to_string())
    }

    /// Any other limit (`cpu`, `memory`, another vendor's resource).
    pub fn resource(self, name: &str, value: &str) -> Self {
        self.limit(name, value.to_string())
    }

    pub fn env(mut self, name: &str, value: &str) -> Self {
        if let Some(c) = self.containers.last_mut() {
            c.env.push((name.to_string(), value.to_string()));
        }
        self
    }

    /// Adds another container; later builder calls apply to it.
    pub fn container(mut self, name: &str) -> Self {
        self.containers.push(GpuContainer {
            name: name.to_string(),
            image: "nvidia/cuda:12.4.0-base-ubuntu22.04".into(),
            ..GpuContainer::default()
        });
        self
    }

    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = ns.to_string();
        self
    }

    pub fn scheduler(mut self, name: &str) -> Self {
        self.scheduler_name = Some(name.to_string());
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_string(), value.to_string());
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.to_string(), value.to_string());
        self
    }

    /// The Pod object as a user would submit it.
    pub fn to_object(&self) -> Value {
        let containers: Vec<Value> = self
            .containers
            .iter()
            .map(|c| {
                let mut out =
                    json!({"name": c.name, "image": c.image, "command": ["sleep", "infinity"]});
                if !c.limits.is_empty() {
                    out["resources"] = json!({"limits": c.limits});
                }
                if !c.env.is_empty() {
                    out["env"] = c
                        .env
                        .iter()
                        .map(|(k, v)| json!({"name": k, "value": v}))
                        .collect();
                }
                out
            })
            .collect();
        let mut pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"containers": containers},
        });
        if !self.labels.is_empty() {
            pod["metadata"]["labels"] = json!(self.labels);
        }
        if !self.annotations.is_empty() {
            pod["metadata"]["annotations"] = json!(self.annotations);
        }
        if let Some(s) = &self.scheduler_name {
            pod["spec"]["schedulerName"] = s.clone().into();
        }
        pod
    }
}

/// A wait that ran out of time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("timed out after {waited:?} waiting for {what}{}", last.as_ref().map(|l| format!(" (last seen: {l})")).unwrap_or_default())]
pub struct WaitError {
    pub what: String,
    pub waited: Duration,
    /// What the condition last reported, when it says.
    pub last: Option<String>,
}

/// What a wait condition answers each time it is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check<T> {
    Done(T),
    /// Not yet; the text says what was seen, for the timeout message.
    NotYet(String),
}

impl<T> From<Option<T>> for Check<T> {
    fn from(o: Option<T>) -> Self {
        match o {
            Some(t) => Check::Done(t),
            None => Check::NotYet(String::new()),
        }
    }
}

/// Waits until `check` (run against the store on every change, so no polling
/// interval delays it) is done, or fails after `timeout` naming `what`.
pub async fn wait_for<T, C>(
    store: &Store,
    what: &str,
    timeout: Duration,
    mut check: impl FnMut(&Store) -> C,
) -> Result<T, WaitError>
where
    C: Into<Check<T>>,
{
    let mut changes = store.subscribe();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last: String;
    loop {
        changes.borrow_and_update();
        match check(store).into() {
            Check::Done(t) => return Ok(t),
            Check::NotYet(seen) => last = seen,
        }
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    // The store is gone; nothing will change any more.
                    tokio::time::sleep_until(deadline).await;
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                // One last look: the change may have landed with the deadline.
                if let Check::Done(t) = check(store).into() {
                    return Ok(t);
                }
                return Err(WaitError {
                    what: what.to_string(),
                    waited: timeout,
                    last: (!last.is_empty()).then_some(last),
                });
            }
        }
    }
}

/// Polls an async `check` every 20 ms until it answers Some, or fails after
/// `timeout` naming `what`; for conditions outside the store (another process,
/// a kubelet emulator's record).
pub async fn poll_until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
) -> Result<T, WaitError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(t) = check().await {
            return Ok(t);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(WaitError {
                what: what.to_string(),
                waited: timeout,
                last: None,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pod_condition<'a>(pod: &'a Value, ty: &str) -> Option<&'a Value> {
    pod.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
}

/// An emulated cluster: the API server, GPU nodes, pods and waits.
#[derive(Debug)]
pub struct Cluster {
    server: ApiServer,
}

impl Cluster {
    /// A fresh emulator with default options.
    pub async fn start() -> std::io::Result<Self> {
        Ok(Self::with_server(ApiServer::start().await?))
    }

    pub fn with_server(server: ApiServer) -> Self {
        Self { server }
    }

    pub fn server(&self) -> &ApiServer {
        &self.server
    }

    pub fn store(&self) -> &Arc<Store> {
        self.server.store()
    }

    /// A `kube` client for the emulator.
    pub fn client(&self) -> Result<kube::Client, kube::Error> {
        let url = self
            .server
            .url()
            .parse::<hyper::Uri>()
            .map_err(|e| kube::Error::Service(Box::new(e)))?;
        kube::Client::try_from(kube::Config::new(url))
    }

    /// Creates one GPU node.
    pub fn add_node(&self, node: &GpuNode) -> Result<Value, ApiError> {
        self.store()
            .create(&resources::NODES, None, node.to_object())
    }

    /// Creates a node of any device family ([`crate::vendor_node::VendorNode`]).
    pub fn add_vendor_node(
        &self,
        node: &crate::vendor_node::VendorNode,
    ) -> Result<Value, ApiError> {
        self.store()
            .create(&resources::NODES, None, node.to_object())
    }

    /// Creates `n` nodes `gpu-node-0` … with `gpus_per_node` default GPUs each.
    pub fn add_gpu_nodes(&self, n: usize, gpus_per_node: u32) -> Result<Vec<GpuNode>, ApiError> {
        let nodes: Vec<GpuNode> = (0..n)
            .map(|i| GpuNode::new(&format!("gpu-node-{i}"), gpus_per_node))
            .collect();
        for node in &nodes {
            self.add_node(node)?;
        }
        Ok(nodes)
    }

    /// Creates a namespace (with labels) if it does not exist.
    pub fn add_namespace(&self, name: &str, labels: &[(&str, &str)]) -> Result<Value, ApiError> {
        let labels: Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(*v)))
            .collect();
        match self.store().create(
            &resources::NAMESPACES,
            None,
            json!({"metadata": {"name": name, "labels": labels}}),
        ) {
            Err(ApiError::AlreadyExists { .. }) => {
                self.store().get(&resources::NAMESPACES, None, name)
            }
            other => other,
        }
    }

    /// Creates a pod over HTTP, so it goes through defaulting and the admission
    /// webhooks as `kubectl create` would.
    pub async fn create_pod(&self, pod: &GpuPod) -> Result<Value, kube::Error> {
        let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
            self.client()?,
            &pod.namespace,
            &kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        );
        let obj: kube::api::DynamicObject =
            serde_json::from_value(pod.to_object()).map_err(kube::Error::SerdeError)?;
        let created = api.create(&kube::api::PostParams::default(), &obj).await?;
        serde_json::to_value(created).map_err(kube::Error::SerdeError)
    }

    /// The pod, if it exists.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.store()
            .get(&resources::PODS, Some(namespace), name)
            .ok()
    }

    /// Waits on the store; see [`wait_for`].
    pub async fn wait_for<T, C>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl FnMut(&Store) -> C,
    ) -> Result<T, WaitError>
    where
        C: Into<Check<T>>,
    {
        wait_for(self.store(), what, timeout, check).await
    }

    /// Waits until the pod is bound; answers its node.
    pub async fn wait_pod_bound(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<String, WaitError> {
        let what = format!("pod {namespace}/{name} to be bound to a node");
        self.wait_for(&what, timeout, |s| {
            let pod = s.get(&resources::PODS, Some(namespace), name).ok();
            match pod
                .as_ref()
                .and_then(|p| p.pointer("/spec/nodeName"))
                .and_then(Value::as_str)
            {
                Some(n) if !n.is_empty() => Check::Done(n.to_string()),
                _ => Check::NotYet(
                    match pod.as_ref().and_then(|p| pod_condition(p, "PodScheduled")) {
                        Some(c) => format!(
                            "PodScheduled={} {}: {}",
                            c.get("status").and_then(Value::as_str).unwrap_or(""),
                            c.get("reason").and_then(Value::as_str).unwrap_or(""),
                            c.get("message").and_then(Value::as_str).unwrap_or("")
                        ),
                        None if pod.is_none() => "no such pod".into(),
                        None => "pending, not yet tried by a scheduler".into(),
                    },
                ),
            }
        })
        .await
    }

    /// Waits until a scheduler marked the pod `PodScheduled=False`; answers the
    /// condition's `(reason, message)`.
    pub async fn wait_pod_unschedulable(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<(String, String), WaitError> {
        let what = format!("pod {namespace}/{name} to be marked PodScheduled=False");
        self.wait_for(&what, timeout, |s| {
            let pod = s.get(&resources::PODS, Some(namespace), name).ok()?;
            let c = pod_condition(&pod, "PodScheduled")?;
            (c.get("status").and_then(Value::as_str) == Some("False")).then(|| {
                let f = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                (f("reason"), f("message"))
            })
        })
        .await
    }

    /// The events about an object, oldest first.
    pub fn events_for(&self, namespace: &str, name: &str) -> Vec<Value> {
        let (mut evs, _) = self.store().list(
            &resources::EVENTS,
            Some(namespace),
            &crate::selectors::Selector {
                fields: crate::selectors::FieldSelector::parse(
                    "events",
                    &format!("involvedObject.name={name}"),
                )
                .unwrap_or_default(),
                ..Default::default()
            },
        );
        evs.sort_by_key(|e| {
            e.pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|r| r.parse::<u64>().ok())
                .unwrap_or(0)
        });
        evs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hami_core::codec::decode_node_register;

    #[test]
    fn node_objects_register_devices_like_the_plugin() {
        let n = GpuNode::new("n1", 3)
            .split(4)
            .memory_mib(24576)
            .unhealthy(2);
        let obj = n.to_object();
        assert_eq!(obj["status"]["capacity"][GPU], "12");
        assert_eq!(obj["status"]["allocatable"][GPU], "8");
        let reg = obj["metadata"]["annotations"][REGISTER_ANNOTATION]
            .as_str()
            .unwrap();
        let devices = decode_node_register(reg).unwrap();
        assert_eq!(devices.len(), 3);
        assert_eq!(devices[0].count, 4);
        assert_eq!(devices[0].mem_mib, 24576);
        assert!(devices[0].health && !devices[2].health);
        assert!(devices[1].id.starts_with("GPU-") && devices[1].id.len() == 40);
        assert_ne!(devices[0].id, devices[1].id);
        assert_eq!(n.uuid(1), GpuNode::new("n1", 3).uuid(1), "stable");
        assert_ne!(n.uuid(0), GpuNode::new("n2", 3).uuid(0));
        assert_eq!(obj["metadata"]["labels"]["gpu"], "on");
    }

    #[test]
    fn pod_objects_carry_hami_limits() {
        let p = GpuPod::new("p")
            .gpus(2)
            .gpumem(3000)
            .gpucores(30)
            .container("side")
            .gpumem_percentage(50)
            .resource("cpu", "1")
            .namespace("team")
            .scheduler("hami-scheduler")
            .label("app", "x")
            .env("A", "1");
        let o = p.to_object();
        assert_eq!(o["metadata"]["namespace"], "team");
        assert_eq!(o["spec"]["schedulerName"], "hami-scheduler");
        let main = &o["spec"]["containers"][0]["resources"]["limits"];
        assert_eq!(main[GPU], "2");
        assert_eq!(main[GPUMEM], "3000");
        assert_eq!(main[GPUCORES], "30");
        let side = &o["spec"]["containers"][1];
        assert_eq!(side["resources"]["limits"][GPUMEM_PERCENTAGE], "50");
        assert_eq!(side["resources"]["limits"]["cpu"], "1");
        assert_eq!(side["env"][0]["name"], "A");
        assert!(
            GpuPod::new("q").to_object()["spec"]
                .get("schedulerName")
                .is_none()
        );
    }

    #[tokio::test]
    async fn waits_end_on_change_or_with_a_named_timeout() {
        let store = Arc::new(Store::default());
        let s2 = store.clone();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            s2.create(
                &resources::NODES,
                None,
                json!({"metadata": {"name": "late"}}),
            )
            .unwrap();
        });
        let got = wait_for(&store, "node late", Duration::from_secs(30), |s| {
            s.get(&resources::NODES, None, "late").ok().map(|_| 7)
        })
        .await
        .unwrap();
        assert_eq!(got, 7);
        writer.await.unwrap();
        let err = wait_for(
            &store,
            "node never",
            Duration::from_millis(100),
            |s| match s.get(&resources::NODES, None, "never") {
                Ok(_) => Check::Done(()),
                Err(e) => Check::NotYet(e.to_string()),
            },
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "timed out after 100ms waiting for node never (last seen: nodes \"never\" not found)"
        );
        let err = poll_until("nothing", Duration::from_millis(50), || async {
            None::<()>
        })
        .await
        .unwrap_err();
        assert_eq!(err.what, "nothing");
    }
}
