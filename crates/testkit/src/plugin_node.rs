//! One node for device plugin tests: the API server emulator with the Node object, a
//! kubelet emulator in its own device-plugin directory, and pods as the HAMi scheduler
//! leaves them after Bind (bind annotations, the node lock taken), so a plugin's
//! Allocate finds them (`docs/device-plugin.md`).

use std::collections::BTreeMap;
use std::time::Duration;

use hami_core::annotations::NODE_LOCK;
use hami_core::codec::node_lock::{LockOwner, NodeLock, encode_node_lock};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::ApiServer;
use crate::kubelet::{Kubelet, KubeletOptions};

/// The namespace of [`PluginNode::scheduled`] pods.
pub const NAMESPACE: &str = "default";

/// A node, its API server and its kubelet.
pub struct PluginNode {
    pub name: String,
    pub api: ApiServer,
    pub client: kube::Client,
    pub kubelet: Kubelet,
}

impl std::fmt::Debug for PluginNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginNode")
            .field("name", &self.name)
            .field("api", &self.api)
            .field("kubelet", &self.kubelet)
            .finish_non_exhaustive()
    }
}

impl PluginNode {
    /// Starts the API server emulator, creates Node `name` and starts its kubelet.
    pub async fn start(name: &str) -> anyhow::Result<Self> {
        let api = ApiServer::start().await?;
        let client = kube::Client::try_from(kube::Config::new(api.url().parse()?))?;
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await?;
        let kubelet = Kubelet::start_with(KubeletOptions {
            node_name: Some(name.into()),
            ..Default::default()
        })
        .await?;
        Ok(PluginNode {
            name: name.into(),
            api,
            client,
            kubelet,
        })
    }

    /// The node's annotation `key` now.
    pub async fn node_annotation(&self, key: &str) -> kube::Result<Option<String>> {
        let node = Api::<Node>::all(self.client.clone())
            .get(&self.name)
            .await?;
        Ok(node.metadata.annotations.unwrap_or_default().remove(key))
    }

    /// Waits up to `wait` for the node's annotation `key` to satisfy `ok`; its last value
    /// as the error.
    pub async fn wait_node_annotation(
        &self,
        key: &str,
        wait: Duration,
        ok: impl Fn(&str) -> bool,
    ) -> Result<String, Option<String>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let value = self.node_annotation(key).await.ok().flatten();
            match value {
                Some(v) if ok(&v) => return Ok(v),
                v if tokio::time::Instant::now() >= deadline => return Err(v),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// The annotations of pod `name` in [`NAMESPACE`].
    pub async fn pod_annotations(&self, name: &str) -> kube::Result<BTreeMap<String, String>> {
        let pod = Api::<Pod>::namespaced(self.client.clone(), NAMESPACE)
            .get(name)
            .await?;
        Ok(pod.metadata.annotations.unwrap_or_default())
    }

    /// Creates pod `name` with `spec` (its `nodeName` set to this node) as the HAMi
    /// scheduler leaves it after Bind: `annotations` (the vendor's to-allocate and
    /// allocated keys) with the node, time and bind-phase `allocating` ones, and the node
    /// lock held by the pod.
    pub async fn scheduled(
        &self,
        name: &str,
        spec: Value,
        annotations: Value,
    ) -> anyhow::Result<Pod> {
        let mut spec = spec;
        spec["nodeName"] = json!(self.name);
        let mut ann = json!({
            "hami.io/vgpu-node": self.name,
            "hami.io/vgpu-time": "1767225600",
            "hami.io/bind-phase": "allocating",
            "hami.io/bind-time": "1767225601",
        });
        if let (Some(a), Some(extra)) = (ann.as_object_mut(), annotations.as_object()) {
            a.extend(extra.clone());
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NAMESPACE, "annotations": ann},
            "spec": spec,
        }))?;
        let pod = Api::<Pod>::namespaced(self.client.clone(), NAMESPACE)
            .create(&PostParams::default(), &pod)
            .await?;
        let lock = encode_node_lock(&NodeLock {
            acquired_at: chrono::Utc::now().fixed_offset(),
            owner: Some(LockOwner {
                namespace: NAMESPACE.into(),
                name: name.into(),
            }),
        });
        // As the scheduler takes it: against the node's resourceVersion.
        let nodes = Api::<Node>::all(self.client.clone());
        let rv = nodes.get(&self.name).await?.metadata.resource_version;
        nodes
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {
                    "annotations": {NODE_LOCK: lock},
                    "resourceVersion": rv,
                }})),
            )
            .await?;
        Ok(pod)
    }
}

/// Stops a device plugin a test runs as a task: cancels `shutdown` and waits up to `wait`
/// for `task`; an error says what went wrong (timed out, panicked, or the plugin's error).
pub async fn stop_plugin<E: std::fmt::Display>(
    shutdown: &tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Result<(), E>>,
    wait: Duration,
) -> Result<(), String> {
    shutdown.cancel();
    match tokio::time::timeout(wait, task).await {
        Err(_) => Err(format!("the plugin did not stop within {wait:?}")),
        Ok(Err(e)) => Err(format!("the plugin task failed: {e}")),
        Ok(Ok(Err(e))) => Err(format!("the plugin stopped with an error: {e}")),
        Ok(Ok(Ok(()))) => Ok(()),
    }
}
