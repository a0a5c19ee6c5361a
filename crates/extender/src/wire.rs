//! kube-scheduler's extender protocol (k8s.io/kube-scheduler/extender/v1). The Go types
//! carry no json tags, so the wire names are the Go field names; Go writes `null` for
//! empty maps, lists and pointers, and omits nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Body of POST /filter.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ExtenderArgs {
    #[serde(rename = "Pod", default)]
    pub pod: Option<Pod>,
    /// Whole Node objects (a v1 NodeList), sent when `nodeCacheCapable` is false.
    #[serde(rename = "Nodes", default)]
    pub nodes: Option<NodeList>,
    /// Node names, sent when `nodeCacheCapable` is true.
    #[serde(rename = "NodeNames", default)]
    pub node_names: Option<Vec<String>>,
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
    pub fn names(&self) -> Vec<String> {
        self.items
            .iter()
            .filter_map(|n| n.pointer("/metadata/name").and_then(Value::as_str))
            .map(str::to_string)
            .collect()
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
        let args: ExtenderArgs = serde_json::from_value(json!({
            "Pod": {"metadata": {"name": "p", "uid": "u"}},
            "Nodes": null,
            "NodeNames": ["a", "b"]
        }))
        .unwrap();
        assert_eq!(args.node_names.unwrap(), ["a", "b"]);
        assert!(args.nodes.is_none());
        assert_eq!(args.pod.unwrap().metadata.uid.as_deref(), Some("u"));

        let args: ExtenderArgs = serde_json::from_value(json!({
            "Pod": null,
            "Nodes": {"metadata": {}, "items": [{"metadata": {"name": "n1"}}, {"kind": "x"}]},
            "NodeNames": null
        }))
        .unwrap();
        assert!(args.pod.is_none());
        assert_eq!(args.nodes.unwrap().names(), ["n1"]);
        let args: ExtenderArgs = serde_json::from_value(json!({"Nodes": {"items": null}})).unwrap();
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
