//! JSON merge patches of object metadata: every write HAMi's protocol makes to pods and
//! nodes is one (`docs/protocol.md`).

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use serde_json::{Map, Value, json};

/// A merge patch of `metadata.annotations` / `metadata.labels`, optionally guarded by a
/// resourceVersion (the API server then answers 409 Conflict if the object changed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetadataPatch {
    annotations: Map<String, Value>,
    labels: Map<String, Value>,
    resource_version: Option<String>,
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
        json!({ "metadata": meta })
    }
}

/// Applies `patch` to pod `namespace/name`; the answer carries the pod's metadata only
/// (the API server leaves the rest out, and nobody parses a whole pod for nothing).
pub async fn patch_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    patch: &MetadataPatch,
) -> Result<PartialObjectMeta<Pod>, kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    api.patch_metadata(
        name,
        &PatchParams::default(),
        &Patch::Merge(patch.to_json()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_body_sets_deletes_and_guards() {
        let p = MetadataPatch::new()
            .annotate("a", "1")
            .remove_annotation("b")
            .label("l", "x")
            .guarded_by("42");
        assert_eq!(
            p.to_json(),
            json!({"metadata": {
                "annotations": {"a": "1", "b": null},
                "labels": {"l": "x"},
                "resourceVersion": "42"
            }})
        );
        assert_eq!(MetadataPatch::new().to_json(), json!({"metadata": {}}));
    }
}
