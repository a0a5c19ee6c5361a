//! The demo cluster: every component started, stoppable and restartable on its own.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hami_testkit::ApiServer;
use hami_testkit::fixture::{Check, GpuPod, WaitError, wait_for};
use hami_testkit::resources::{NODES, PODS};
use hami_testkit::scheduler::Scheduler;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, Config};
use serde_json::Value;

use crate::component::HarnessError;
use crate::extender::{ExtenderSetup, RunningExtender, scheduler_config, wait_ready};
use crate::node::EmulatedNode;
use crate::spec::ClusterSpec;
use crate::webhook::{self, RunningWebhook, WebhookSetup};

/// How long start-up waits (caches, registrations) may take.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a pod ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Bound and admitted by its node's kubelet.
    Running { node: String },
    /// Bound, then rejected by kubelet (e.g. `UnexpectedAdmissionError`).
    Failed {
        node: String,
        reason: String,
        message: String,
    },
    /// Not bound: the scheduler marked it `PodScheduled=False` with this reason.
    Unschedulable { reason: String, message: String },
}

/// An emulated cluster running our real webhook, extender and device plugins.
pub struct DemoCluster {
    spec: ClusterSpec,
    api: ApiServer,
    client: Client,
    webhook_setup: WebhookSetup,
    webhook: Option<RunningWebhook>,
    extender_setup: ExtenderSetup,
    extender: Option<RunningExtender>,
    scheduler: Option<Scheduler>,
    nodes: Vec<EmulatedNode>,
    dir: tempfile::TempDir,
}

/// A component's /metrics text from its admin address.
async fn metrics_of(component: &str, admin: SocketAddr) -> Result<String, HarnessError> {
    match crate::http::get(admin, "/metrics").await {
        Ok((200, body)) => Ok(body),
        Ok((code, body)) => Err(HarnessError::Setup(format!(
            "{component} /metrics answered {code}: {body}"
        ))),
        Err(e) => Err(HarnessError::Setup(e)),
    }
}

/// A `kube` client for `url`.
pub fn client_for(url: &str) -> Result<Client, HarnessError> {
    Client::try_from(config_for(url)?).map_err(HarnessError::kube("creating a client"))
}

/// The `kube` config of a client for `url`.
pub fn config_for(url: &str) -> Result<Config, HarnessError> {
    let uri = url
        .parse()
        .map_err(|e| HarnessError::Setup(format!("API server URL {url}: {e}")))?;
    Ok(Config::new(uri))
}

fn pod_condition<'a>(pod: &'a Value, ty: &str) -> Option<&'a Value> {
    pod.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// What a pod's status says, if it settled.
pub fn settled(pod: &Value) -> Check<Settled> {
    let node = str_at(pod, "/spec/nodeName").to_string();
    match str_at(pod, "/status/phase") {
        "Running" if !node.is_empty() => return Check::Done(Settled::Running { node }),
        "Failed" => {
            return Check::Done(Settled::Failed {
                node,
                reason: str_at(pod, "/status/reason").to_string(),
                message: str_at(pod, "/status/message").to_string(),
            });
        }
        _ => {}
    }
    let cond = pod_condition(pod, "PodScheduled");
    if let Some(c) = cond
        && node.is_empty()
        && str_at(c, "/status") == "False"
        && str_at(c, "/reason") == "Unschedulable"
    {
        return Check::Done(Settled::Unschedulable {
            reason: "Unschedulable".into(),
            message: str_at(c, "/message").to_string(),
        });
    }
    Check::NotYet(match cond {
        Some(c) => format!(
            "node {node:?}, phase {:?}, PodScheduled={} {}: {}",
            str_at(pod, "/status/phase"),
            str_at(c, "/status"),
            str_at(c, "/reason"),
            str_at(c, "/message")
        ),
        None => format!(
            "node {node:?}, phase {:?}, not yet tried by the scheduler",
            str_at(pod, "/status/phase")
        ),
    })
}

impl std::fmt::Debug for DemoCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoCluster")
            .field("api", &self.api.url())
            .field("nodes", &self.nodes)
            .field("webhook", &self.webhook_setup.addr)
            .field("extender", &self.extender_setup.addr)
            .finish_non_exhaustive()
    }
}

impl DemoCluster {
    /// Starts the API server emulator, the webhook (registered through a
    /// MutatingWebhookConfiguration), every node (kubelet emulator, device plugin, node
    /// agent), the extender and the kube-scheduler emulator, and waits until the extender
    /// knows every GPU.
    pub async fn start(spec: ClusterSpec) -> Result<Self, HarnessError> {
        crate::install_crypto();
        // Short prefix: unix socket paths are limited to 107 bytes.
        let dir = tempfile::Builder::new()
            .prefix("hami-demo-")
            .tempdir()
            .map_err(HarnessError::io("creating the work directory"))?;
        let api = ApiServer::start()
            .await
            .map_err(HarnessError::io("starting the API server emulator"))?;
        let client = client_for(&api.url())?;

        let webhook_dir = dir.path().join("webhook");
        std::fs::create_dir_all(&webhook_dir)
            .map_err(HarnessError::io("creating the webhook directory"))?;
        let (webhook_setup, listener) = WebhookSetup::prepare(
            &webhook_dir,
            &spec.scheduler_name,
            spec.devices.clone(),
            client.clone(),
        )
        .await?;
        api.register_service(
            webhook::NAMESPACE,
            webhook::SERVICE,
            webhook::SERVICE_PORT,
            webhook_setup.addr,
        );
        let webhook = webhook_setup.start(Some(listener)).await?;
        let config: MutatingWebhookConfiguration =
            serde_json::from_value(webhook_setup.configuration())
                .map_err(|e| HarnessError::Setup(format!("webhook configuration: {e}")))?;
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &config)
            .await
            .map_err(HarnessError::kube(
                "creating the MutatingWebhookConfiguration",
            ))?;

        let (extender_setup, ext_listener) = ExtenderSetup::prepare(&spec).await?;
        let mut cluster = DemoCluster {
            spec: spec.clone(),
            api,
            client: client.clone(),
            webhook_setup,
            webhook: Some(webhook),
            extender_setup,
            extender: None,
            scheduler: None,
            nodes: Vec::new(),
            dir,
        };
        for node in &spec.nodes {
            let mut n = EmulatedNode::create(&spec, node, cluster.dir.path(), &client).await?;
            n.start_agent(&cluster.new_client()?);
            n.start_plugin(&cluster.new_client()?).await?;
            if spec.usage_reporting && n.vendor_plugin.is_none() {
                n.start_workload(&cluster.new_client()?, spec.timing.usage_interval);
                n.start_monitor(&cluster.new_client()?, spec.timing.usage_interval)?;
            }
            cluster.nodes.push(n);
        }
        cluster.wait_nodes_allocatable().await?;
        let ext = cluster
            .extender_setup
            .start(cluster.api_config()?, Some(ext_listener))
            .await?;
        cluster.extender = Some(ext);
        cluster.wait_extender_knows_gpus().await?;
        cluster.start_scheduler()?;
        tracing::info!(nodes = cluster.nodes.len(), api = %cluster.api.url(), "demo cluster running");
        Ok(cluster)
    }

    /// A fresh client (its own connections), as each component has in a real cluster.
    fn new_client(&self) -> Result<Client, HarnessError> {
        client_for(&self.api.url())
    }

    /// Where `new_client`'s clients connect.
    fn api_config(&self) -> Result<Config, HarnessError> {
        config_for(&self.api.url())
    }

    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    pub fn api(&self) -> &ApiServer {
        &self.api
    }

    /// A client for the API server emulator.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    pub fn nodes(&self) -> &[EmulatedNode] {
        &self.nodes
    }

    pub fn node(&self, name: &str) -> Option<&EmulatedNode> {
        self.nodes.iter().find(|n| n.name() == name)
    }

    fn node_mut(&mut self, name: &str) -> Result<&mut EmulatedNode, HarnessError> {
        self.nodes
            .iter_mut()
            .find(|n| n.name() == name)
            .ok_or_else(|| HarnessError::NoSuchNode(name.to_string()))
    }

    /// The extender's address (what kube-scheduler's configuration points at).
    pub fn extender_addr(&self) -> SocketAddr {
        self.extender_setup.addr
    }

    /// The extender's admin address (/readyz, /metrics), while it runs.
    pub fn extender_admin(&self) -> Option<SocketAddr> {
        self.extender.as_ref().map(|e| e.admin)
    }

    /// Submits a pod the way a user does: a create through the API server, so it passes
    /// the admission webhook.
    pub async fn create_pod(&self, pod: &GpuPod) -> Result<Pod, kube::Error> {
        let object: Pod =
            serde_json::from_value(pod.to_object()).map_err(kube::Error::SerdeError)?;
        Api::<Pod>::namespaced(self.client.clone(), &pod.namespace)
            .create(&PostParams::default(), &object)
            .await
    }

    /// The pod as stored, if it exists.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.api.store().get(&PODS, Some(namespace), name).ok()
    }

    /// Waits until the pod runs, fails, or is marked unschedulable.
    pub async fn wait_settled(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<Settled, WaitError> {
        let what = format!("pod {namespace}/{name} to run, fail or be unschedulable");
        wait_for(self.api.store(), &what, timeout, |s| {
            match s.get(&PODS, Some(namespace), name) {
                Ok(pod) => settled(&pod),
                Err(e) => Check::NotYet(e.to_string()),
            }
        })
        .await
    }

    /// Waits until the pod runs (a transient `Unschedulable`, e.g. while a component
    /// restarts, is waited out); answers its node.
    pub async fn wait_running(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<String, WaitError> {
        let what = format!("pod {namespace}/{name} to run");
        wait_for(self.api.store(), &what, timeout, |s| {
            let pod = match s.get(&PODS, Some(namespace), name) {
                Ok(p) => p,
                Err(e) => return Check::NotYet(e.to_string()),
            };
            match settled(&pod) {
                Check::Done(Settled::Running { node }) => Check::Done(node),
                Check::Done(other) => Check::NotYet(format!("{other:?}")),
                Check::NotYet(seen) => Check::NotYet(seen),
            }
        })
        .await
    }

    /// Deletes a pod and waits until it is gone (its kubelet finishes the deletion).
    pub async fn delete_pod(&self, namespace: &str, name: &str) -> Result<(), HarnessError> {
        Api::<Pod>::namespaced(self.client.clone(), namespace)
            .delete(name, &DeleteParams::default())
            .await
            .map_err(HarnessError::kube(format!(
                "deleting pod {namespace}/{name}"
            )))?;
        let what = format!("pod {namespace}/{name} to be gone");
        wait_for(self.api.store(), &what, START_TIMEOUT, |s| {
            match s.get(&PODS, Some(namespace), name) {
                Err(_) => Check::Done(()),
                Ok(p) => Check::NotYet(format!(
                    "still there (deletionTimestamp {:?})",
                    str_at(&p, "/metadata/deletionTimestamp")
                )),
            }
        })
        .await?;
        Ok(())
    }

    /// The extender's /metrics text.
    pub async fn extender_metrics(&self) -> Result<String, HarnessError> {
        let admin = self
            .extender_admin()
            .ok_or_else(|| HarnessError::Setup("the extender is stopped".into()))?;
        metrics_of("extender", admin).await
    }

    /// The webhook's /metrics text.
    pub async fn webhook_metrics(&self) -> Result<String, HarnessError> {
        let admin = self
            .webhook
            .as_ref()
            .map(|w| w.admin)
            .ok_or_else(|| HarnessError::Setup("the webhook is stopped".into()))?;
        metrics_of("webhook", admin).await
    }

    async fn wait_nodes_allocatable(&self) -> Result<(), HarnessError> {
        for node in &self.nodes {
            let (resource, count) = node.resource();
            let want = count.to_string();
            let what = format!(
                "node {} to report {want} allocatable {resource}",
                node.name()
            );
            wait_for(self.api.store(), &what, START_TIMEOUT, |s| {
                let n = s.get(&NODES, None, node.name()).ok()?;
                let got = n
                    .pointer("/status/allocatable")
                    .and_then(|a| a.get(resource))
                    .and_then(Value::as_str)?;
                (got == want).then_some(())
            })
            .await?;
        }
        Ok(())
    }

    /// Waits until the extender's ledger holds every GPU of every node with a running
    /// device plugin (its per-GPU metrics list them).
    pub async fn wait_extender_knows_gpus(&self) -> Result<(), HarnessError> {
        let uuids: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.plugin.is_some())
            .flat_map(|n| n.spec.device_ids())
            .collect();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let metrics = self.extender_metrics().await.unwrap_or_default();
            let missing: Vec<&String> = uuids
                .iter()
                .filter(|u| {
                    !metrics.lines().any(|l| {
                        l.starts_with("hami_gpu_memory_limit_bytes{")
                            && l.contains(&format!("device_uuid=\"{u}\""))
                    })
                })
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(HarnessError::Setup(format!(
                    "the extender does not know GPUs {missing:?} after {START_TIMEOUT:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // --- Components, one at a time ---

    /// Stops the webhook: pod creation fails (failurePolicy Fail) until it is back.
    pub async fn stop_webhook(&mut self) -> Result<(), HarnessError> {
        match self.webhook.take() {
            Some(w) => w.running.stop().await,
            None => Ok(()),
        }
    }

    /// Starts the webhook again on its Service's address.
    pub async fn start_webhook(&mut self) -> Result<(), HarnessError> {
        if self.webhook.is_none() {
            self.webhook = Some(self.webhook_setup.start(None).await?);
        }
        Ok(())
    }

    /// Stops the webhook and starts it again, even when it had to be aborted.
    pub async fn restart_webhook(&mut self) -> Result<(), HarnessError> {
        let stopped = self.stop_webhook().await;
        let started = self.start_webhook().await;
        stopped.and(started)
    }

    /// Stops the extender: kube-scheduler's calls fail (`SchedulerError`) and pods wait.
    pub async fn stop_extender(&mut self) -> Result<(), HarnessError> {
        match self.extender.take() {
            Some(e) => e.running.stop().await,
            None => Ok(()),
        }
    }

    /// Starts a fresh extender on the same address; it rebuilds its ledger from the
    /// pods' annotations and is ready once its caches synced.
    /// One that stopped on its own (its supervisor gave up) is started afresh, as
    /// Kubernetes restarts the container; one slow to become ready is kept running (as a
    /// starting process is) and the delay answered as an error.
    pub async fn start_extender(&mut self) -> Result<(), HarnessError> {
        if self
            .extender
            .as_ref()
            .is_some_and(|e| !e.running.is_finished())
        {
            return Ok(());
        }
        // One that ended by itself goes first: it may still hold the address.
        self.extender = None;
        let config = self.api_config()?;
        let ext = self.extender_setup.spawn(config, None).await?;
        let ready = wait_ready(&ext).await;
        self.extender = Some(ext);
        ready?;
        self.wait_extender_knows_gpus().await
    }

    /// Whether the extender was started and ended without being stopped (its supervisor
    /// gave up on a task, or it failed): the error it ended with. The harness's
    /// [`DemoCluster::start_extender`] replaces it.
    pub async fn extender_exited(&mut self) -> Option<String> {
        if !self.extender.as_ref()?.running.is_finished() {
            return None;
        }
        let ext = self.extender.take()?;
        Some(match ext.running.stop().await {
            Ok(()) => "it ended without an error".to_string(),
            Err(e) => e.to_string(),
        })
    }

    /// Stops the extender and starts a fresh one; the fresh one is started even when the
    /// old one had to be aborted (the first error is answered).
    pub async fn restart_extender(&mut self) -> Result<(), HarnessError> {
        let stopped = self.stop_extender().await;
        let started = self.start_extender().await;
        stopped.and(started)
    }

    /// Kills the extender the way `kill -9` does: no graceful shutdown, whatever it was
    /// doing (a bind holding a node lock, a patch in flight) is dropped where it stands.
    pub async fn kill_extender(&mut self) {
        if let Some(e) = self.extender.take() {
            e.running.kill().await;
        }
    }

    /// Kills the webhook (see [`DemoCluster::kill_extender`]).
    pub async fn kill_webhook(&mut self) {
        if let Some(w) = self.webhook.take() {
            w.running.kill().await;
        }
    }

    fn start_scheduler(&mut self) -> Result<(), HarnessError> {
        let cfg = scheduler_config(&self.spec, self.extender_setup.addr);
        self.scheduler = Some(Scheduler::start(self.new_client()?, cfg));
        Ok(())
    }

    /// Restarts the kube-scheduler emulator (fresh caches, backoffs forgotten).
    pub fn restart_scheduler(&mut self) -> Result<(), HarnessError> {
        self.scheduler = None;
        self.start_scheduler()
    }

    /// Stops a node's device plugin (it marks its GPUs unhealthy on the way out).
    pub async fn stop_device_plugin(&mut self, node: &str) -> Result<(), HarnessError> {
        self.node_mut(node)?.stop_plugin().await
    }

    /// Starts a node's device plugin and waits until it registered and published.
    pub async fn start_device_plugin(&mut self, node: &str) -> Result<(), HarnessError> {
        let client = self.new_client()?;
        self.node_mut(node)?.start_plugin(&client).await
    }

    /// Stops a node's device plugin and starts it again, even when it had to be aborted.
    pub async fn restart_device_plugin(&mut self, node: &str) -> Result<(), HarnessError> {
        let stopped = self.stop_device_plugin(node).await;
        let started = self.start_device_plugin(node).await;
        stopped.and(started)
    }

    /// Restarts a node's kubelet emulator (it keeps its checkpoint) and waits until the
    /// device plugin noticed and registered again.
    pub async fn restart_kubelet(&mut self, node: &str) -> Result<(), HarnessError> {
        let n = self.node_mut(node)?;
        let before = n.plugin_status().map_or(0, |s| s.registrations);
        n.kubelet.restart().await.map_err(HarnessError::io(format!(
            "restarting the kubelet of {node}"
        )))?;
        if n.plugin.is_some() {
            n.wait_plugin_registrations(before + 1, START_TIMEOUT)
                .await?;
        }
        Ok(())
    }

    /// Restarts a node's agent (it relists the node's pods).
    pub async fn restart_agent(&mut self, node: &str) -> Result<(), HarnessError> {
        let client = self.new_client()?;
        let n = self.node_mut(node)?;
        n.stop_agent().await?;
        n.start_agent(&client);
        Ok(())
    }

    /// The work directory (device plugin sockets, hook paths, certificates).
    pub fn work_dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Stops everything, reporting the first component that failed.
    pub async fn shutdown(mut self) -> Result<(), HarnessError> {
        self.scheduler = None;
        let mut result = self.stop_extender().await;
        result = result.and(self.stop_webhook().await);
        for n in &mut self.nodes {
            result = result.and(n.stop().await);
        }
        result
    }
}
