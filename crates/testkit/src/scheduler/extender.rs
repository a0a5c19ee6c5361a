//! The scheduler-extender protocol as kube-scheduler speaks it: JSON with Go's
//! field names (the structs in `k8s.io/kube-scheduler/extender/v1` carry no json
//! tags), `null` for absent lists, `POST <urlPrefix>/<verb>`, and a non-200 answer
//! being an error. Written from the Kubernetes documentation, independently of the
//! extender's own wire types, so that a field-name bug on either side shows up.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::httpclient;

/// `v1.NodeList` as Go encodes it (empty TypeMeta and ListMeta are omitted or `{}`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NodeList {
    #[serde(default)]
    pub metadata: Value,
    #[serde(default)]
    pub items: Vec<Value>,
}

/// What `filter` receives.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ExtenderArgs {
    #[serde(rename = "Pod")]
    pub pod: Value,
    /// Full node objects, when the extender is not `nodeCacheCapable`.
    #[serde(rename = "Nodes")]
    pub nodes: Option<NodeList>,
    /// Node names only, when it is.
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<String>>,
}

/// What `filter` answers.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct ExtenderFilterResult {
    #[serde(rename = "Nodes", default)]
    pub nodes: Option<NodeList>,
    #[serde(rename = "NodeNames", default)]
    pub node_names: Option<Vec<String>>,
    #[serde(rename = "FailedNodes", default)]
    pub failed_nodes: Option<BTreeMap<String, String>>,
    #[serde(rename = "FailedAndUnresolvableNodes", default)]
    pub failed_and_unresolvable_nodes: Option<BTreeMap<String, String>>,
    #[serde(rename = "Error", default)]
    pub error: Option<String>,
}

/// What `bind` receives.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ExtenderBindingArgs {
    #[serde(rename = "PodName")]
    pub pod_name: String,
    #[serde(rename = "PodNamespace")]
    pub pod_namespace: String,
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    #[serde(rename = "Node")]
    pub node: String,
}

/// What `bind` answers.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct ExtenderBindingResult {
    #[serde(rename = "Error", default)]
    pub error: Option<String>,
}

/// Go's `encoding/json` matches field names case-insensitively; so does this
/// decoder, renaming a top-level key that differs from `canonical` only in case
/// (and logging it, since the canonical spelling is what extenders should send).
fn canonical_keys(value: Value, canonical: &[&str]) -> Value {
    let Value::Object(m) = value else {
        return value;
    };
    let mut out = Map::new();
    for (k, v) in m {
        let key = canonical
            .iter()
            .find(|c| c.eq_ignore_ascii_case(&k))
            .map_or(k.clone(), |c| c.to_string());
        if key != k {
            tracing::warn!(sent = %k, canonical = %key, "extender answered a field in non-canonical case (Go accepts it)");
        }
        out.insert(key, v);
    }
    Value::Object(out)
}

/// An extender as a `KubeSchedulerConfiguration` describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtenderConfig {
    /// `http(s)://host:port/prefix`; verbs are appended after a `/`.
    pub url_prefix: String,
    /// Empty: the extender does not filter.
    pub filter_verb: String,
    /// Empty: pods are bound through the API server.
    pub bind_verb: String,
    /// Send node names instead of whole nodes.
    pub node_cache_capable: bool,
    /// Resources the extender handles; when any is set, only pods asking for one of
    /// them are sent to it.
    pub managed_resources: Vec<ManagedResource>,
    /// Failures of an ignorable extender are skipped instead of failing the pod.
    pub ignorable: bool,
    /// Per-call deadline (kube-scheduler's default: 30 s).
    pub http_timeout: Duration,
    /// PEM CA certificates trusted for an https `url_prefix`.
    pub ca_pem: Option<String>,
}

impl Default for ExtenderConfig {
    fn default() -> Self {
        Self {
            url_prefix: String::new(),
            filter_verb: "filter".into(),
            bind_verb: "bind".into(),
            node_cache_capable: true,
            managed_resources: Vec::new(),
            ignorable: false,
            http_timeout: Duration::from_secs(30),
            ca_pem: None,
        }
    }
}

/// `managedResources[]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedResource {
    pub name: String,
    /// The built-in resource-fit filter skips this resource.
    pub ignored_by_scheduler: bool,
}

impl ExtenderConfig {
    /// `IsInterested`: every pod when no resource is managed, else pods whose
    /// containers (init included) request or limit one of them.
    pub fn is_interested(&self, pod: &Value) -> bool {
        if self.managed_resources.is_empty() {
            return true;
        }
        ["/spec/containers", "/spec/initContainers"]
            .iter()
            .filter_map(|p| pod.pointer(p).and_then(Value::as_array))
            .flatten()
            .any(|c| {
                ["requests", "limits"].iter().any(|kind| {
                    c.pointer(&format!("/resources/{kind}"))
                        .and_then(Value::as_object)
                        .is_some_and(|m| {
                            self.managed_resources
                                .iter()
                                .any(|r| m.contains_key(&r.name))
                        })
                })
            })
    }

    fn tls(&self) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
        match &self.ca_pem {
            Some(pem) => httpclient::tls_trusting(pem.as_bytes())
                .map(Some)
                .map_err(|e| format!("extender tlsConfig.caData: {e}")),
            None => Ok(None),
        }
    }

    /// `send`: POST the args to `<urlPrefix>/<verb>`, decode the answer.
    async fn send<A: Serialize>(&self, verb: &str, args: &A) -> Result<Value, String> {
        let url = format!("{}/{verb}", self.url_prefix.trim_end_matches('/'));
        let target = httpclient::parse_url(&url)?;
        let body = serde_json::to_vec(args).map_err(|e| e.to_string())?;
        let (status, bytes) =
            httpclient::post_json(&target, self.tls()?, body, self.http_timeout).await?;
        if status != 200 {
            return Err(format!(
                "failed {verb} with extender at URL {url}, code {status}"
            ));
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            format!("failed {verb} with extender at URL {url}: invalid JSON answer: {e}")
        })
    }

    /// Calls `filter` with the nodes that passed the built-in filters.
    pub async fn filter(
        &self,
        pod: &Value,
        nodes: &[Value],
    ) -> Result<ExtenderFilterResult, String> {
        let names = nodes
            .iter()
            .filter_map(|n| n.pointer("/metadata/name").and_then(Value::as_str))
            .map(str::to_string)
            .collect();
        let args = if self.node_cache_capable {
            ExtenderArgs {
                pod: pod.clone(),
                nodes: None,
                node_names: Some(names),
            }
        } else {
            ExtenderArgs {
                pod: pod.clone(),
                nodes: Some(NodeList {
                    metadata: Value::Object(Map::new()),
                    items: nodes.to_vec(),
                }),
                node_names: None,
            }
        };
        let raw = self.send(&self.filter_verb, &args).await?;
        let raw = canonical_keys(
            raw,
            &[
                "Nodes",
                "NodeNames",
                "FailedNodes",
                "FailedAndUnresolvableNodes",
                "Error",
            ],
        );
        let result: ExtenderFilterResult = serde_json::from_value(raw)
            .map_err(|e| format!("extender {} answered filter with {e}", self.url_prefix))?;
        if let Some(err) = result.error.as_deref().filter(|e| !e.is_empty()) {
            return Err(err.to_string());
        }
        Ok(result)
    }

    /// Calls `bind`.
    pub async fn bind(&self, args: &ExtenderBindingArgs) -> Result<(), String> {
        let raw = self.send(&self.bind_verb, args).await?;
        let result: ExtenderBindingResult = serde_json::from_value(canonical_keys(raw, &["Error"]))
            .map_err(|e| format!("extender {} answered bind with {e}", self.url_prefix))?;
        match result.error.filter(|e| !e.is_empty()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The names an extender's filter result keeps, as kube-scheduler reads them:
/// `NodeNames` when node-cache capable and present, else `Nodes`; a name the
/// scheduler did not send is an error.
pub fn kept_names(
    cfg: &ExtenderConfig,
    result: &ExtenderFilterResult,
    sent: &[String],
) -> Result<Vec<String>, String> {
    if cfg.node_cache_capable
        && let Some(names) = &result.node_names
    {
        if let Some(stray) = names.iter().find(|n| !sent.contains(n)) {
            return Err(format!(
                "extender {:?} claims a filtered node {stray:?} which is not found in the input node list",
                cfg.url_prefix
            ));
        }
        return Ok(names.clone());
    }
    Ok(result
        .nodes
        .as_ref()
        .map(|l| {
            l.items
                .iter()
                .filter_map(|n| n.pointer("/metadata/name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_field_names_and_nulls() {
        let args = ExtenderArgs {
            pod: json!({"metadata": {"name": "p"}}),
            nodes: None,
            node_names: Some(vec!["a".into()]),
        };
        assert_eq!(
            serde_json::to_value(&args).unwrap(),
            json!({"Pod": {"metadata": {"name": "p"}}, "Nodes": null, "NodeNames": ["a"]})
        );
        let bind = ExtenderBindingArgs {
            pod_name: "p".into(),
            pod_namespace: "ns".into(),
            pod_uid: "u".into(),
            node: "n".into(),
        };
        assert_eq!(
            serde_json::to_value(&bind).unwrap(),
            json!({"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n"})
        );
    }

    #[test]
    fn results_decode_like_go() {
        let raw = canonical_keys(
            json!({"nodenames": ["a"], "FailedNodes": {"b": "CardInsufficientMemory"}, "Error": ""}),
            &[
                "Nodes",
                "NodeNames",
                "FailedNodes",
                "FailedAndUnresolvableNodes",
                "Error",
            ],
        );
        let r: ExtenderFilterResult = serde_json::from_value(raw).unwrap();
        assert_eq!(r.node_names, Some(vec!["a".to_string()]));
        assert_eq!(r.failed_nodes.unwrap()["b"], "CardInsufficientMemory");
        let r: ExtenderFilterResult =
            serde_json::from_value(json!({"Nodes": null, "NodeNames": null, "FailedNodes": null}))
                .unwrap();
        assert_eq!(r, ExtenderFilterResult::default());
    }

    #[test]
    fn kept_names_follow_cache_capability() {
        let mut cfg = ExtenderConfig::default();
        let sent = vec!["a".to_string(), "b".to_string()];
        let r = ExtenderFilterResult {
            node_names: Some(vec!["b".into()]),
            nodes: Some(NodeList {
                metadata: Value::Null,
                items: vec![json!({"metadata": {"name": "a"}})],
            }),
            ..Default::default()
        };
        assert_eq!(kept_names(&cfg, &r, &sent).unwrap(), ["b"]);
        cfg.node_cache_capable = false;
        assert_eq!(kept_names(&cfg, &r, &sent).unwrap(), ["a"]);
        cfg.node_cache_capable = true;
        let stray = ExtenderFilterResult {
            node_names: Some(vec!["z".into()]),
            ..Default::default()
        };
        assert!(
            kept_names(&cfg, &stray, &sent)
                .unwrap_err()
                .contains("not found in the input node list")
        );
    }

    #[test]
    fn interest_in_managed_resources() {
        let cfg = ExtenderConfig {
            managed_resources: vec![ManagedResource {
                name: "nvidia.com/gpu".into(),
                ignored_by_scheduler: true,
            }],
            ..Default::default()
        };
        let gpu = json!({"spec": {"initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}], "containers": [{}]}});
        let cpu = json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}});
        assert!(cfg.is_interested(&gpu));
        assert!(!cfg.is_interested(&cpu));
        assert!(ExtenderConfig::default().is_interested(&cpu));
    }
}
