//! kube-scheduler's binding cycle: run in its own task once the scheduling cycle
//! assumed the pod on a node, so a slow bind (the extender waiting for the node's
//! lock) never holds up scheduling the next pod. Binds through the first interested
//! extender with a `bind` verb, else through `pods/binding`; records `Scheduled` on
//! success, and on failure the `PodScheduled=False` condition and a
//! `FailedScheduling` event (the scheduling loop forgets the assumption and backs the
//! pod off).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::SchedulerConfig;
use super::events::Recorder;
use super::extender::{self, ExtenderConfig};

/// Why a scheduling attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No node fits: reason `Unschedulable`.
    Unschedulable(String),
    /// Anything else (an extender error, a failed bind): reason `SchedulerError`.
    Error(String),
}

/// How a binding cycle ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindDone {
    pub uid: String,
    pub bound: bool,
}

/// What binding cycles and failed attempts need, shared by the scheduling loop and
/// its binding tasks.
pub struct Binder {
    client: Client,
    extenders: Vec<ExtenderConfig>,
    pub(super) events: Recorder,
}

impl std::fmt::Debug for Binder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binder")
            .field("extenders", &self.extenders.len())
            .field("events", &self.events)
            .finish()
    }
}

impl Binder {
    pub fn new(client: Client, cfg: &SchedulerConfig) -> Self {
        Self {
            events: Recorder::new(client.clone(), &cfg.scheduler_name),
            client,
            extenders: cfg.extenders.clone(),
        }
    }

    /// The binding cycle of `pod`, assumed on `host`.
    pub async fn bind_cycle(
        self: Arc<Self>,
        pod: Arc<Pod>,
        pod_v: Value,
        host: String,
    ) -> BindDone {
        let uid = pod.uid().unwrap_or_default();
        let ns = pod.namespace().unwrap_or_default();
        match self.bind(&pod, &pod_v, &host).await {
            Ok(()) => {
                tracing::info!(pod = %format!("{ns}/{}", pod.name_any()), node = %host, "scheduled");
                let msg = format!("Successfully assigned {ns}/{} to {host}", pod.name_any());
                self.events.record(&pod, "Normal", "Scheduled", &msg).await;
                BindDone { uid, bound: true }
            }
            Err(f) => {
                self.record_failure(&pod, &f).await;
                BindDone { uid, bound: false }
            }
        }
    }

    async fn bind(&self, pod: &Pod, pod_v: &Value, host: &str) -> Result<(), Failure> {
        let ns = pod.namespace().unwrap_or_default();
        let binder = self
            .extenders
            .iter()
            .find(|e| !e.bind_verb.is_empty() && e.is_interested(pod_v));
        let result = match binder {
            Some(ext) => {
                let args = extender::ExtenderBindingArgs {
                    pod_name: pod.name_any(),
                    pod_namespace: ns.clone(),
                    pod_uid: pod.uid().unwrap_or_default(),
                    node: host.to_string(),
                };
                ext.bind(&args).await
            }
            None => {
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
                let binding = json!({
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": pod.name_any(), "namespace": ns, "uid": pod.uid()},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": host},
                });
                pods.create_subresource::<Value, Value>(
                    "binding",
                    &pod.name_any(),
                    &PostParams::default(),
                    &binding,
                )
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
            }
        };
        result.map_err(|e| Failure::Error(format!("binding rejected: {e}")))
    }

    /// The `PodScheduled=False` condition and a `FailedScheduling` event.
    pub async fn record_failure(&self, pod: &Pod, f: &Failure) {
        let (reason, message) = match f {
            Failure::Unschedulable(m) => ("Unschedulable", m.as_str()),
            Failure::Error(m) => ("SchedulerError", m.as_str()),
        };
        let ns = pod.namespace().unwrap_or_default();
        tracing::info!(pod = %format!("{ns}/{}", pod.name_any()), reason, message, "pod not scheduled");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let patch = json!({"status": {"conditions": [{
            "type": "PodScheduled", "status": "False", "reason": reason, "message": message,
            "lastProbeTime": null, "lastTransitionTime": now,
        }]}});
        if let Err(e) = pods
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            tracing::warn!(pod = %pod.name_any(), error = %e, "cannot update the PodScheduled condition");
        }
        self.events
            .record(pod, "Warning", "FailedScheduling", message)
            .await;
    }
}
