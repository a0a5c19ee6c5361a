//! The built-in filters of kube-scheduler that matter for GPU pods, run before any
//! extender sees a node, with the reasons kube-scheduler reports: NodeUnschedulable,
//! TaintToleration, NodeAffinity (nodeSelector and required node affinity) and
//! NodeResourcesFit (managed resources with `ignoredByScheduler` are not checked).
//! Like the framework, a node's filters stop at the first plugin that rejects it.

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

use super::quantity::milli;

pub const UNSCHEDULABLE: &str = "node(s) were unschedulable";
pub const AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
pub const TOO_MANY_PODS: &str = "Too many pods";

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn arr<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn tolerates(tolerations: &[Value], key: &str, value: &str, effect: &str) -> bool {
    tolerations.iter().any(|t| {
        let t_effect = s(t, "/effect");
        if !t_effect.is_empty() && t_effect != effect {
            return false;
        }
        let t_key = s(t, "/key");
        match s(t, "/operator") {
            "Exists" => t_key.is_empty() || t_key == key,
            // Equal is the default operator.
            "" | "Equal" => t_key == key && s(t, "/value") == value,
            _ => false,
        }
    })
}

fn node_unschedulable(pod: &Value, node: &Value) -> Option<Vec<String>> {
    let cordoned = node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true);
    let tolerated = tolerates(
        arr(pod, "/spec/tolerations"),
        "node.kubernetes.io/unschedulable",
        "",
        "NoSchedule",
    );
    (cordoned && !tolerated).then(|| vec![UNSCHEDULABLE.to_string()])
}

fn taint_toleration(pod: &Value, node: &Value) -> Option<Vec<String>> {
    let tolerations = arr(pod, "/spec/tolerations");
    arr(node, "/spec/taints")
        .iter()
        .filter(|t| matches!(s(t, "/effect"), "NoSchedule" | "NoExecute"))
        .find(|t| !tolerates(tolerations, s(t, "/key"), s(t, "/value"), s(t, "/effect")))
        .map(|t| {
            vec![format!(
                "node(s) had untolerated taint {{{}: {}}}",
                s(t, "/key"),
                s(t, "/value")
            )]
        })
}

fn label<'a>(node: &'a Value, key: &str) -> Option<&'a str> {
    node.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

fn requirement_matches(req: &Value, lookup: &dyn Fn(&str) -> Option<String>) -> bool {
    let key = s(req, "/key");
    let values: Vec<&str> = arr(req, "/values")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let got = lookup(key);
    let int = |x: &str| x.parse::<i64>().ok();
    match s(req, "/operator") {
        "In" => got.is_some_and(|g| values.contains(&g.as_str())),
        "NotIn" => got.is_none_or(|g| !values.contains(&g.as_str())),
        "Exists" => got.is_some(),
        "DoesNotExist" => got.is_none(),
        "Gt" => {
            matches!((got.as_deref().and_then(int), values.first().and_then(|v| int(v))), (Some(g), Some(v)) if g > v)
        }
        "Lt" => {
            matches!((got.as_deref().and_then(int), values.first().and_then(|v| int(v))), (Some(g), Some(v)) if g < v)
        }
        _ => false,
    }
}

fn node_affinity(pod: &Value, node: &Value) -> Option<Vec<String>> {
    let selector_ok = pod
        .pointer("/spec/nodeSelector")
        .and_then(Value::as_object)
        .is_none_or(|sel| sel.iter().all(|(k, v)| label(node, k) == v.as_str()));
    let terms = arr(
        pod,
        "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms",
    );
    // Terms are ORed, requirements within a term ANDed; no terms: no constraint.
    let affinity_ok = terms.is_empty()
        || terms.iter().any(|term| {
            let by_label = |k: &str| label(node, k).map(str::to_string);
            let by_field =
                |k: &str| (k == "metadata.name").then(|| s(node, "/metadata/name").to_string());
            let exprs = arr(term, "/matchExpressions");
            let fields = arr(term, "/matchFields");
            !(exprs.is_empty() && fields.is_empty())
                && exprs.iter().all(|r| requirement_matches(r, &by_label))
                && fields.iter().all(|r| requirement_matches(r, &by_field))
        });
    (!(selector_ok && affinity_ok)).then(|| vec![AFFINITY.to_string()])
}

/// A pod's effective requests: the larger of the app containers' sum and any one
/// init container, per resource (milli-units).
pub fn pod_requests(pod: &Value) -> BTreeMap<String, i128> {
    let mut sum: BTreeMap<String, i128> = BTreeMap::new();
    for c in arr(pod, "/spec/containers") {
        if let Some(req) = c.pointer("/resources/requests").and_then(Value::as_object) {
            for (k, v) in req {
                *sum.entry(k.clone()).or_default() += v.as_str().and_then(milli).unwrap_or(0);
            }
        }
    }
    for c in arr(pod, "/spec/initContainers") {
        if let Some(req) = c.pointer("/resources/requests").and_then(Value::as_object) {
            for (k, v) in req {
                let q = v.as_str().and_then(milli).unwrap_or(0);
                let e = sum.entry(k.clone()).or_default();
                *e = (*e).max(q);
            }
        }
    }
    sum
}

/// What is already placed on a node: summed requests and the pod count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeUsage {
    pub requested: BTreeMap<String, i128>,
    pub pods: i128,
}

impl NodeUsage {
    pub fn add(&mut self, requests: &BTreeMap<String, i128>) {
        self.pods += 1;
        for (k, v) in requests {
            *self.requested.entry(k.clone()).or_default() += v;
        }
    }
}

fn resources_fit(
    pod: &Value,
    node: &Value,
    usage: &NodeUsage,
    ignored: &HashSet<String>,
) -> Option<Vec<String>> {
    let allocatable = |r: &str| {
        node.pointer("/status/allocatable")
            .and_then(|a| a.get(r))
            .and_then(Value::as_str)
            .and_then(milli)
            .unwrap_or(0)
    };
    let mut reasons = Vec::new();
    if usage.pods * 1000 + 1000 > allocatable("pods") {
        reasons.push(TOO_MANY_PODS.to_string());
    }
    for (res, want) in pod_requests(pod) {
        if want <= 0 || ignored.contains(&res) || res == "pods" {
            continue;
        }
        let used = usage.requested.get(&res).copied().unwrap_or(0);
        if want > allocatable(&res) - used {
            reasons.push(format!("Insufficient {res}"));
        }
    }
    (!reasons.is_empty()).then_some(reasons)
}

/// The reasons `node` cannot take `pod`, from the first rejecting filter; None when
/// it passes them all.
pub fn run(
    pod: &Value,
    node: &Value,
    usage: &NodeUsage,
    ignored: &HashSet<String>,
) -> Option<Vec<String>> {
    node_unschedulable(pod, node)
        .or_else(|| taint_toleration(pod, node))
        .or_else(|| node_affinity(pod, node))
        .or_else(|| resources_fit(pod, node, usage, ignored))
}

/// kube-scheduler's `FitError` text: `0/N nodes are available: ` and the reason
/// histogram, sorted (`1 node(s) were unschedulable, 2 Insufficient cpu.`).
pub fn fit_error(total_nodes: usize, statuses: &BTreeMap<String, Vec<String>>) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for reasons in statuses.values() {
        for r in reasons {
            *counts.entry(r.as_str()).or_default() += 1;
        }
    }
    let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    let mut msg = format!("0/{total_nodes} nodes are available:");
    if !parts.is_empty() {
        msg.push_str(&format!(" {}.", parts.join(", ")));
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(extra: Value) -> Value {
        let mut n = json!({
            "metadata": {"name": "n1", "labels": {"gpu": "a100", "zone": "1"}},
            "spec": {},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "2", "nvidia.com/gpu": "10"}}
        });
        json_patch::merge(&mut n, &extra);
        n
    }

    fn pod(extra: Value) -> Value {
        let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}}}
        ]}});
        json_patch::merge(&mut p, &extra);
        p
    }

    fn check(p: &Value, n: &Value) -> Option<Vec<String>> {
        let ignored: HashSet<String> = ["nvidia.com/gpumem".to_string()].into();
        run(p, n, &NodeUsage::default(), &ignored)
    }

    #[test]
    fn cordoned_tainted_and_selected() {
        assert_eq!(check(&pod(json!({})), &node(json!({}))), None);
        let cordoned = node(json!({"spec": {"unschedulable": true}}));
        assert_eq!(
            check(&pod(json!({})), &cordoned),
            Some(vec![UNSCHEDULABLE.into()])
        );
        let tolerant = pod(
            json!({"spec": {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}}),
        );
        assert_eq!(check(&tolerant, &cordoned), None);
        let tainted = node(
            json!({"spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}, {"key": "soft", "effect": "PreferNoSchedule"}]}}),
        );
        assert_eq!(
            check(&pod(json!({})), &tainted),
            Some(vec!["node(s) had untolerated taint {dedicated: ml}".into()])
        );
        let ok = pod(json!({"spec": {"tolerations": [{"key": "dedicated", "value": "ml"}]}}));
        assert_eq!(check(&ok, &tainted), None);
        let wrong_value = pod(
            json!({"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web"}]}}),
        );
        assert!(check(&wrong_value, &tainted).is_some());
        let selected = pod(json!({"spec": {"nodeSelector": {"gpu": "v100"}}}));
        assert_eq!(
            check(&selected, &node(json!({}))),
            Some(vec![AFFINITY.into()])
        );
        let matching = pod(json!({"spec": {"nodeSelector": {"gpu": "a100"}}}));
        assert_eq!(check(&matching, &node(json!({}))), None);
    }

    #[test]
    fn required_node_affinity() {
        let aff = |terms: Value| {
            pod(
                json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}}),
            )
        };
        let n = node(json!({}));
        assert_eq!(
            check(
                &aff(
                    json!([{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100", "h100"]}]}])
                ),
                &n
            ),
            None
        );
        assert!(check(&aff(json!([{"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["a100"]}]}])), &n).is_some());
        assert_eq!(
            check(
                &aff(
                    json!([{"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["0"]}]}])
                ),
                &n
            ),
            None
        );
        assert!(check(&aff(json!([{"matchExpressions": [{"key": "zone", "operator": "Lt", "values": ["1"]}]}])), &n).is_some());
        assert_eq!(
            check(
                &aff(
                    json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}])
                ),
                &n
            ),
            None
        );
        // Terms are ORed.
        assert_eq!(
            check(
                &aff(json!([
                    {"matchExpressions": [{"key": "missing", "operator": "Exists"}]},
                    {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
                ])),
                &n
            ),
            None
        );
    }

    #[test]
    fn resource_fit_skips_ignored_resources() {
        let big = pod(
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "5", "memory": "1Gi", "nvidia.com/gpu": "11", "nvidia.com/gpumem": "999999"}}}]}}),
        );
        assert_eq!(
            check(&big, &node(json!({}))),
            Some(vec![
                "Insufficient cpu".into(),
                "Insufficient nvidia.com/gpu".into()
            ])
        );
        let mut usage = NodeUsage::default();
        usage.add(&pod_requests(&pod(json!({}))));
        usage.add(&pod_requests(&pod(json!({}))));
        let ignored: HashSet<String> = ["nvidia.com/gpumem".to_string()].into();
        assert_eq!(
            run(&pod(json!({})), &node(json!({})), &usage, &ignored),
            Some(vec![TOO_MANY_PODS.into()])
        );
        // Not ignored, an extended resource the node lacks is insufficient.
        let none = HashSet::new();
        assert_eq!(
            run(
                &pod(json!({})),
                &node(json!({})),
                &NodeUsage::default(),
                &none
            ),
            Some(vec!["Insufficient nvidia.com/gpumem".into()])
        );
        let init = pod(
            json!({"spec": {"initContainers": [{"name": "i", "resources": {"requests": {"cpu": "3"}}}]}}),
        );
        assert_eq!(pod_requests(&init)["cpu"], 3000);
    }

    #[test]
    fn fit_error_text() {
        let mut st = BTreeMap::new();
        st.insert("a".to_string(), vec![UNSCHEDULABLE.to_string()]);
        st.insert("b".to_string(), vec!["Insufficient cpu".to_string()]);
        st.insert("c".to_string(), vec!["Insufficient cpu".to_string()]);
        assert_eq!(
            fit_error(3, &st),
            "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu."
        );
        assert_eq!(fit_error(0, &BTreeMap::new()), "0/0 nodes are available:");
    }
}
