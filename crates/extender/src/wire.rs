//! kube-scheduler's extender protocol (k8s.io/kube-scheduler/extender/v1). The Go types
//! carry no json tags, so the wire names are the Go field names; Go writes `null` for
//! empty maps, lists and pointers, and omits nothing.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Body of POST /filter. Node names borrow from the request body: a large cluster
/// sends thousands per call.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ExtenderArgs<'a> {
    /// The pod, reduced to what placement reads (see [`crate::slim`]).
    #[serde(rename = "Pod", default, deserialize_with = "crate::slim::slim_pod")]
    pub pod: Option<Pod>,
    /// Whole Node objects (a v1 NodeList), sent when `nodeCacheCapable` is false.
    #[serde(rename = "Nodes", default)]
    pub nodes: Option<NodeList>,
    /// Node names, sent when `nodeCacheCapable` is true.
    #[serde(rename = "NodeNames", default, borrow)]
    pub node_names: Option<Vec<Cow<'a, str>>>,
}

/// A v1 NodeList kept as raw JSON: only names are read, and the chosen node is echoed
/// back unchanged.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeList {
    #[serde(default, deserialize_with = "null_as_default")]
    pub items: Vec<Value>,
    #[serde(flatten)]
    pub rest: BTreeMap<String, Value>,
}

impl NodeList {
    /// `metadata.name` of each item (items without one are skipped).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.items
            .iter()
            .filter_map(|n| n.pointer("/metadata/name").and_then(Value::as_str))
    }
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Answer of POST /filter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderFilterResult {
    #[serde(rename = "Nodes")]
    pub nodes: Option<Value>,
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<String>>,
    /// Node → why the pod does not fit there.
    #[serde(rename = "FailedNodes")]
    pub failed_nodes: Option<BTreeMap<String, String>>,
    /// Like `FailedNodes`, but preemption cannot help either.
    #[serde(rename = "FailedAndUnresolvableNodes")]
    pub failed_and_unresolvable_nodes: Option<BTreeMap<String, String>>,
    #[serde(rename = "Error")]
    pub error: String,
}

impl ExtenderFilterResult {
    pub fn error(message: impl Into<String>) -> Self {
        ExtenderFilterResult {
            error: message.into(),
            ..Self::default()
        }
    }
}

/// Body of POST /bind.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct ExtenderBindingArgs {
    #[serde(rename = "PodName", default)]
    pub pod_name: String,
    #[serde(rename = "PodNamespace", default)]
    pub pod_namespace: String,
    #[serde(rename = "PodUID", default)]
    pub pod_uid: String,
    #[serde(rename = "Node", default)]
    pub node: String,
}

/// Answer of POST /bind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderBindingResult {
    #[serde(rename = "Error")]
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_field_names_and_nulls() {
        let text = json!({
            "Pod": {"metadata": {"name": "p", "uid": "u"}},
            "Nodes": null,
            "NodeNames": ["a", "b"]
        })
        .to_string();
        let args: ExtenderArgs = serde_json::from_str(&text).unwrap();
        assert_eq!(args.node_names.unwrap(), ["a", "b"]);
        assert!(args.nodes.is_none());
        assert_eq!(args.pod.unwrap().metadata.uid.as_deref(), Some("u"));

        let text = json!({
            "Pod": null,
            "Nodes": {"metadata": {}, "items": [{"metadata": {"name": "n1"}}, {"kind": "x"}]},
            "NodeNames": null
        })
        .to_string();
        let args: ExtenderArgs = serde_json::from_str(&text).unwrap();
        assert!(args.pod.is_none());
        assert_eq!(args.nodes.unwrap().names().collect::<Vec<_>>(), ["n1"]);
        let args: ExtenderArgs = serde_json::from_str(r#"{"Nodes": {"items": null}}"#).unwrap();
        assert!(args.pod.is_none());
        assert!(args.nodes.unwrap().items.is_empty());

        let out = serde_json::to_value(ExtenderFilterResult {
            node_names: Some(vec!["a".into()]),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            out,
            json!({"Nodes": null, "NodeNames": ["a"], "FailedNodes": null,
                   "FailedAndUnresolvableNodes": null, "Error": ""})
        );

        let b: ExtenderBindingArgs = serde_json::from_value(json!({
            "PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n"
        }))
        .unwrap();
        assert_eq!(b.pod_uid, "u");
        assert_eq!(
            serde_json::to_value(ExtenderBindingResult::default()).unwrap(),
            json!({"Error": ""})
        );
    }
}

#[cfg(test)]
mod slim_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_slim_pod_keeps_what_placement_reads() {
        let full = json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u",
                "annotations": {"hami.io/gpu-scheduler-policy": "binpack"},
                "labels": {"a": "b"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
                "creationTimestamp": null},
            "spec": {
                "nodeName": null,
                "schedulerName": "hami-scheduler",
                "volumes": [{"name": "v", "emptyDir": {}}],
                "initContainers": [{"name": "side", "image": "x", "restartPolicy": "Always",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                "containers": [{"name": "main", "image": "cuda", "env": [{"name": "A", "value": "1"}],
                    "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3000"},
                                  "requests": {"cpu": "1"}}}],
                "tolerations": [{"key": "k", "operator": "Exists"}]
            },
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
        });
        let text = json!({"Pod": full, "NodeNames": ["n"]}).to_string();
        let args: ExtenderArgs = serde_json::from_str(&text).unwrap();
        let pod = args.pod.unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("p"));
        assert_eq!(pod.metadata.uid.as_deref(), Some("u"));
        assert_eq!(
            pod.metadata.annotations.unwrap()["hami.io/gpu-scheduler-policy"],
            "binpack"
        );
        let spec = pod.spec.unwrap();
        assert_eq!(spec.containers[0].name, "main");
        let limits = spec.containers[0]
            .resources
            .as_ref()
            .unwrap()
            .limits
            .as_ref()
            .unwrap();
        assert_eq!(limits["nvidia.com/gpumem"].0, "3000");
        let init = spec.init_containers.as_ref().unwrap();
        assert_eq!(init[0].restart_policy.as_deref(), Some("Always"));
        // Whatever placement reads, it reads the same from the slim and the full pod.
        let full_pod: Pod = serde_json::from_value(full).unwrap();
        let reg = hami_core::vendor::VendorRegistry::from_config(&Default::default());
        let a = hami_core::request::PodRequests::from_pod(&full_pod, &reg).unwrap();
        let b = hami_core::request::PodRequests::from_pod(
            &Pod {
                spec: Some(spec),
                ..Default::default()
            },
            &reg,
        )
        .unwrap();
        assert_eq!(a, b);
    }
}
