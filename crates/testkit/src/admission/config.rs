//! Mutating webhook configurations (`admissionregistration.k8s.io/v1`) as stored,
//! and whether one of their webhooks applies to a request.

use serde::Deserialize;
use serde_json::Value;

use crate::resources::Resource;
use crate::selectors::LabelSelector;

/// Where a webhook is served.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClientConfig {
    pub url: Option<String>,
    pub service: Option<ServiceReference>,
    /// Base64 of the PEM CA bundle (JSON `[]byte`).
    pub ca_bundle: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceReference {
    pub namespace: String,
    pub name: String,
    pub path: Option<String>,
    pub port: Option<u16>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    #[serde(default)]
    pub operations: Vec<String>,
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub api_versions: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    pub scope: Option<String>,
}

/// One webhook of a `MutatingWebhookConfiguration`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    pub name: String,
    pub client_config: ClientConfig,
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// `Fail` (the v1 default) or `Ignore`.
    pub failure_policy: Option<String>,
    pub namespace_selector: Option<Value>,
    pub object_selector: Option<Value>,
    /// 1 to 30; 10 when unset.
    pub timeout_seconds: Option<u64>,
    #[serde(default)]
    pub admission_review_versions: Vec<String>,
    /// `Never` (default) or `IfNeeded`.
    pub reinvocation_policy: Option<String>,
    #[serde(default)]
    pub match_conditions: Vec<Value>,
    /// Name of the configuration the webhook belongs to, for logs.
    #[serde(skip)]
    pub configuration: String,
}

impl Webhook {
    pub fn fails_closed(&self) -> bool {
        self.failure_policy.as_deref() != Some("Ignore")
    }

    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout_seconds.unwrap_or(10).clamp(1, 30))
    }

    pub fn reinvoke_if_needed(&self) -> bool {
        self.reinvocation_policy.as_deref() == Some("IfNeeded")
    }

    /// The AdmissionReview version to send: the first of the webhook's list that
    /// the server speaks, as kube-apiserver picks it.
    pub fn review_version(&self) -> Option<&'static str> {
        self.admission_review_versions
            .iter()
            .find_map(|v| match v.as_str() {
                "v1" => Some("v1"),
                "v1beta1" => Some("v1beta1"),
                _ => None,
            })
    }
}

/// A webhook that could not be read from its configuration; it still counts, so
/// that a broken configuration fails requests instead of silently admitting them.
#[derive(Debug, Clone, PartialEq)]
pub struct Broken {
    pub configuration: String,
    pub name: String,
    pub error: String,
}

/// The webhooks of every configuration, in the order kube-apiserver calls them
/// (configurations by name, webhooks in their listed order).
pub fn webhooks(mut configurations: Vec<Value>) -> Vec<Result<Webhook, Broken>> {
    let name_of = |c: &Value| {
        c.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    configurations.sort_by_key(name_of);
    let mut out = Vec::new();
    for c in configurations {
        let configuration = name_of(&c);
        let Some(hooks) = c.get("webhooks").and_then(Value::as_array) else {
            continue;
        };
        for (i, h) in hooks.iter().enumerate() {
            let name = h
                .get("name")
                .and_then(Value::as_str)
                .map_or_else(|| format!("webhooks[{i}]"), str::to_string);
            out.push(
                serde_json::from_value::<Webhook>(h.clone())
                    .map(|mut w| {
                        w.configuration = configuration.clone();
                        w
                    })
                    .map_err(|e| Broken {
                        configuration: configuration.clone(),
                        name,
                        error: format!("invalid webhook configuration: {e}"),
                    }),
            );
        }
    }
    out
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

/// Whether a rule covers `operation` on `res` (main resource when `sub` is "").
pub fn rule_matches(rule: &Rule, operation: &str, res: &Resource, sub: &str) -> bool {
    if !listed(&rule.operations, operation)
        || !listed(&rule.api_groups, res.group)
        || !listed(&rule.api_versions, res.version)
    {
        return false;
    }
    let scope_ok = match rule.scope.as_deref().unwrap_or("*") {
        "Namespaced" => res.namespaced,
        "Cluster" => !res.namespaced,
        _ => true,
    };
    scope_ok
        && rule.resources.iter().any(|r| {
            let (rr, rs) = r.split_once('/').unwrap_or((r.as_str(), ""));
            (rr == "*" || rr == res.plural) && (rs == "*" || rs == sub)
        })
}

/// Whether the webhook's rules and selectors select the request. `namespace` is
/// the namespace object of a namespaced request (None for cluster-scoped ones).
pub fn selects(
    hook: &Webhook,
    operation: &str,
    res: &Resource,
    object: &Value,
    namespace: Option<&Value>,
) -> Result<bool, String> {
    if !hook
        .rules
        .iter()
        .any(|r| rule_matches(r, operation, res, ""))
    {
        return Ok(false);
    }
    let ns_selector = LabelSelector::from_object(hook.namespace_selector.as_ref())
        .map_err(|e| format!("invalid namespaceSelector: {e}"))?;
    let ns_ok = match (res.id == crate::resources::NAMESPACES.id, namespace) {
        // A namespace is selected by its own labels.
        (true, _) => ns_selector.matches(object),
        (false, Some(ns)) => ns_selector.matches(ns),
        // Cluster-scoped objects are never excluded by a namespaceSelector.
        (false, None) => true,
    };
    let obj_selector = LabelSelector::from_object(hook.object_selector.as_ref())
        .map_err(|e| format!("invalid objectSelector: {e}"))?;
    Ok(ns_ok && obj_selector.matches(object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources;
    use serde_json::json;

    fn rule(resources: &[&str], ops: &[&str]) -> Rule {
        Rule {
            operations: ops.iter().map(|s| s.to_string()).collect(),
            api_groups: vec!["".into()],
            api_versions: vec!["v1".into()],
            resources: resources.iter().map(|s| s.to_string()).collect(),
            scope: None,
        }
    }

    #[test]
    fn resource_and_operation_matching() {
        let pods = &resources::PODS;
        assert!(rule_matches(
            &rule(&["pods"], &["CREATE"]),
            "CREATE",
            pods,
            ""
        ));
        assert!(rule_matches(&rule(&["*"], &["*"]), "CREATE", pods, ""));
        assert!(rule_matches(
            &rule(&["pods/*"], &["CREATE"]),
            "CREATE",
            pods,
            ""
        ));
        assert!(rule_matches(
            &rule(&["*/*"], &["CREATE"]),
            "CREATE",
            pods,
            "binding"
        ));
        assert!(!rule_matches(
            &rule(&["*"], &["CREATE"]),
            "CREATE",
            pods,
            "binding"
        ));
        assert!(!rule_matches(
            &rule(&["pods"], &["UPDATE"]),
            "CREATE",
            pods,
            ""
        ));
        assert!(!rule_matches(
            &rule(&["nodes"], &["CREATE"]),
            "CREATE",
            pods,
            ""
        ));
        let mut cluster_only = rule(&["*"], &["*"]);
        cluster_only.scope = Some("Cluster".into());
        assert!(!rule_matches(&cluster_only, "CREATE", pods, ""));
        assert!(rule_matches(&cluster_only, "CREATE", &resources::NODES, ""));
        let mut other_group = rule(&["leases"], &["*"]);
        other_group.api_groups = vec!["coordination.k8s.io".into()];
        assert!(!rule_matches(&other_group, "CREATE", pods, ""));
        assert!(rule_matches(&other_group, "CREATE", &resources::LEASES, ""));
    }

    #[test]
    fn parse_order_and_broken_entries() {
        let cfgs = vec![
            json!({"metadata": {"name": "b"}, "webhooks": [
                {"name": "b1.x", "clientConfig": {"url": "https://x"}, "admissionReviewVersions": ["v1beta1", "v1"]}
            ]}),
            json!({"metadata": {"name": "a"}, "webhooks": [
                {"name": "a1.x", "clientConfig": {"service": {"namespace": "n", "name": "s"}}, "timeoutSeconds": 99},
                {"name": "a2.x", "clientConfig": "garbage"}
            ]}),
        ];
        let hooks = webhooks(cfgs);
        assert_eq!(hooks.len(), 3);
        let a1 = hooks[0].as_ref().unwrap();
        assert_eq!(a1.name, "a1.x");
        assert_eq!(a1.configuration, "a");
        assert!(a1.fails_closed());
        assert_eq!(a1.timeout(), std::time::Duration::from_secs(30));
        assert_eq!(a1.review_version(), None);
        let broken = hooks[1].as_ref().unwrap_err();
        assert_eq!(broken.name, "a2.x");
        assert_eq!(hooks[2].as_ref().unwrap().review_version(), Some("v1beta1"));
    }

    #[test]
    fn selectors_on_namespace_and_object() {
        let hook: Webhook = serde_json::from_value(json!({
            "name": "w", "clientConfig": {},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]},
            "objectSelector": {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]}
        }))
        .unwrap();
        let pod = json!({"metadata": {"labels": {}}});
        let ignored_pod = json!({"metadata": {"labels": {"hami.io/webhook": "ignore"}}});
        let ns = json!({"metadata": {"labels": {}}});
        let ignored_ns = json!({"metadata": {"labels": {"hami.io/webhook": "ignore"}}});
        let s =
            |o: &Value, n: &Value| selects(&hook, "CREATE", &resources::PODS, o, Some(n)).unwrap();
        assert!(s(&pod, &ns));
        assert!(!s(&ignored_pod, &ns));
        assert!(!s(&pod, &ignored_ns));
        assert!(!selects(&hook, "CREATE", &resources::NODES, &pod, None).unwrap());
    }
}
