//! The Binding that places a pod on a node, as kube-scheduler (and an extender that binds
//! for it) creates it: it names the pod's UID, so the API server refuses it (409) when the
//! pod of that name is another one (`docs/protocol.md#uid-preconditions`).

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::patch::PodRef;

/// Binds `pod` to `node`.
pub async fn create_binding(
    client: &Client,
    pod: PodRef<'_>,
    node: &str,
) -> Result<(), kube::Error> {
    let binding = json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}
    });
    let pods: Api<Pod> = Api::namespaced(client.clone(), pod.namespace);
    pods.create_subresource::<_, serde_json::Value>(
        "binding",
        pod.name,
        &PostParams::default(),
        &binding,
    )
    .await
    .map(|_| ())
}
