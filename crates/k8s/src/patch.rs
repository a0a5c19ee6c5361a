//! JSON merge patches of object metadata: every write HAMi's protocol makes to pods and
//! nodes is one (`docs/protocol.md`). Every pod write names the pod's UID, so a write
//! meant for a deleted pod never lands on a successor of the same name
//! (`docs/protocol.md#uid-preconditions`).

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use serde_json::{Map, Value, json};

/// A merge patch of `metadata.annotations` / `metadata.labels`, optionally guarded by a
/// resourceVersion (the API server then answers 409 Conflict if the object changed) and
/// by a UID (422 Invalid if the object of that name is another one).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetadataPatch {
    annotations: Map<String, Value>,
    labels: Map<String, Value>,
    resource_version: Option<String>,
    uid: Option<String>,
}

impl MetadataPatch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn annotate(mut self, key: &str, value: impl Into<String>) -> Self {
        self.annotations
            .insert(key.to_string(), Value::String(value.into()));
        self
    }

    /// `null` in a merge patch deletes the key.
    pub fn remove_annotation(mut self, key: &str) -> Self {
        self.annotations.insert(key.to_string(), Value::Null);
        self
    }

    pub fn label(mut self, key: &str, value: impl Into<String>) -> Self {
        self.labels
            .insert(key.to_string(), Value::String(value.into()));
        self
    }

    pub fn remove_label(mut self, key: &str) -> Self {
        self.labels.insert(key.to_string(), Value::Null);
        self
    }

    /// Only apply the patch to this version of the object.
    pub fn guarded_by(mut self, resource_version: impl Into<String>) -> Self {
        self.resource_version = Some(resource_version.into());
        self
    }

    /// Only apply the patch to the object with this UID. `metadata.uid` is immutable, so
    /// a merge patch naming another UID than the stored object's is refused (kube-apiserver
    /// answers 422 Invalid, `metadata.uid: ... field is immutable`): how kubelet guards
    /// its pod status patches.
    pub fn for_uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = Some(uid.into());
        self
    }

    /// The patch body.
    pub fn to_json(&self) -> Value {
        let mut meta = Map::new();
        if !self.annotations.is_empty() {
            meta.insert(
                "annotations".into(),
                Value::Object(self.annotations.clone()),
            );
        }
        if !self.labels.is_empty() {
            meta.insert("labels".into(), Value::Object(self.labels.clone()));
        }
        if let Some(rv) = &self.resource_version {
            meta.insert("resourceVersion".into(), Value::String(rv.clone()));
        }
        if let Some(uid) = &self.uid {
            meta.insert("uid".into(), Value::String(uid.clone()));
        }
        json!({ "metadata": meta })
    }
}

/// A pod as a write must name it: the UID is the instance the caller decided for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodRef<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

impl<'a> PodRef<'a> {
    pub fn new(namespace: &'a str, name: &'a str, uid: &'a str) -> Self {
        PodRef {
            namespace,
            name,
            uid,
        }
    }

    /// The pod an object read from the API server is.
    pub fn of(pod: &'a Pod) -> Self {
        let m = &pod.metadata;
        PodRef::new(
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
            m.uid.as_deref().unwrap_or_default(),
        )
    }
}

/// Applies `patch` to pod `pod.namespace/pod.name` if it still is the pod with `pod.uid`
/// (else the API server refuses it: see [`is_replaced`]); the answer carries the pod's
/// metadata only (the API server leaves the rest out, and nobody parses a whole pod for
/// nothing). An empty UID guards nothing, so it is refused here, before any request.
pub async fn patch_pod(
    client: &Client,
    pod: PodRef<'_>,
    patch: &MetadataPatch,
) -> Result<PartialObjectMeta<Pod>, kube::Error> {
    if pod.uid.is_empty() {
        return Err(kube::Error::Api(
            kube::core::Status::failure(
                &format!(
                    "pod {}/{}: a write needs the pod's UID as its precondition",
                    pod.namespace, pod.name
                ),
                "BadRequest",
            )
            .with_code(400)
            .boxed(),
        ));
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), pod.namespace);
    let guarded = patch.clone().for_uid(pod.uid);
    api.patch_metadata(
        pod.name,
        &PatchParams::default(),
        &Patch::Merge(guarded.to_json()),
    )
    .await
}

/// Applies `patch` to node `name`; the answer carries the node's metadata only.
pub async fn patch_node(
    client: &Client,
    name: &str,
    patch: &MetadataPatch,
) -> Result<PartialObjectMeta<Node>, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    api.patch_metadata(
        name,
        &PatchParams::default(),
        &Patch::Merge(patch.to_json()),
    )
    .await
}

/// Whether the API server refused a write because the object changed (409).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Whether the object does not exist (404).
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether the API server refused a UID-guarded write because the object of that name is
/// another one now (the one meant was deleted, and maybe re-created under the same
/// name): 422 on `metadata.uid` for a patch, 409 with a failed UID precondition for an
/// update, a Binding or a delete.
pub fn is_replaced(e: &kube::Error) -> bool {
    let kube::Error::Api(s) = e else {
        return false;
    };
    match s.code {
        422 => s
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid")),
        409 => {
            s.message
                .contains("Precondition failed: UID in precondition")
                || s.message.contains("the UID in the precondition")
        }
        _ => false,
    }
}

/// Whether the pod meant is gone: not found, or replaced by another of the same name.
pub fn is_gone(e: &kube::Error) -> bool {
    is_not_found(e) || is_replaced(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_body_sets_deletes_and_guards() {
        let p = MetadataPatch::new()
            .annotate("a", "1")
            .remove_annotation("b")
            .label("l", "x")
            .guarded_by("42")
            .for_uid("u-1");
        assert_eq!(
            p.to_json(),
            json!({"metadata": {
                "annotations": {"a": "1", "b": null},
                "labels": {"l": "x"},
                "resourceVersion": "42",
                "uid": "u-1"
            }})
        );
        assert_eq!(MetadataPatch::new().to_json(), json!({"metadata": {}}));
    }
}
