//! Label and field selectors with the API server's syntax
//! (k8s.io/apimachinery/pkg/labels and pkg/fields).

use serde_json::Value;

use crate::status::ApiError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelReq>);

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (f,g),h notin (i),j,!k`.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let bad =
            |why: &str| ApiError::bad_request(format!("unable to parse requirement: {why}: {s:?}"));
        let mut reqs = Vec::new();
        for part in split_top_level(s).map_err(|()| bad("unbalanced parentheses"))? {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let req = if let Some(key) = part.strip_prefix('!') {
                LabelReq::NotExists(valid_key(key.trim()).ok_or_else(|| bad("invalid key"))?)
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelReq::NotEq(
                    valid_key(k.trim()).ok_or_else(|| bad("invalid key"))?,
                    v.trim().to_string(),
                )
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                LabelReq::Eq(
                    valid_key(k.trim()).ok_or_else(|| bad("invalid key"))?,
                    v.trim().to_string(),
                )
            } else if let Some((k, set)) = split_set_op(part, " notin ") {
                LabelReq::NotIn(
                    valid_key(k).ok_or_else(|| bad("invalid key"))?,
                    parse_set(set).ok_or_else(|| bad("invalid set"))?,
                )
            } else if let Some((k, set)) = split_set_op(part, " in ") {
                LabelReq::In(
                    valid_key(k).ok_or_else(|| bad("invalid key"))?,
                    parse_set(set).ok_or_else(|| bad("invalid set"))?,
                )
            } else {
                LabelReq::Exists(valid_key(part).ok_or_else(|| bad("invalid key"))?)
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Converts a structured `metav1.LabelSelector` (`matchLabels` and
    /// `matchExpressions` with In, NotIn, Exists, DoesNotExist), as webhook
    /// configurations carry them. Absent or null selects everything.
    pub fn from_object(sel: Option<&Value>) -> Result<Self, String> {
        let Some(sel) = sel.filter(|v| !v.is_null()) else {
            return Ok(Self::default());
        };
        let mut reqs = Vec::new();
        if let Some(labels) = sel.get("matchLabels").filter(|v| !v.is_null()) {
            let labels = labels.as_object().ok_or("matchLabels must be a map")?;
            for (k, v) in labels {
                let v = v
                    .as_str()
                    .ok_or_else(|| format!("matchLabels[{k}] must be a string"))?;
                reqs.push(LabelReq::Eq(k.clone(), v.to_string()));
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").filter(|v| !v.is_null()) {
            let exprs = exprs.as_array().ok_or("matchExpressions must be a list")?;
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .filter(|k| !k.is_empty())
                    .ok_or("a matchExpression needs a key")?
                    .to_string();
                let values: Vec<String> = match e.get("values") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|v| v.as_str().map(str::to_string))
                        .collect::<Option<_>>()
                        .ok_or_else(|| format!("values of {key} must be strings"))?,
                    Some(_) => return Err(format!("values of {key} must be a list")),
                };
                let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
                reqs.push(match op {
                    "In" | "NotIn" if values.is_empty() => {
                        return Err(format!("{op} on {key} needs values"));
                    }
                    "Exists" | "DoesNotExist" if !values.is_empty() => {
                        return Err(format!("{op} on {key} takes no values"));
                    }
                    "In" => LabelReq::In(key, values),
                    "NotIn" => LabelReq::NotIn(key, values),
                    "Exists" => LabelReq::Exists(key),
                    "DoesNotExist" => LabelReq::NotExists(key),
                    other => {
                        return Err(format!("{other:?} is not a valid label selector operator"));
                    }
                });
            }
        }
        Ok(Self(reqs))
    }

    /// Whether `labels` (an object's `metadata.labels`, possibly absent) matches.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            // As in apimachinery: `!=` and `notin` match objects without the label.
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas that are not inside `( … )`.
fn split_top_level(s: &str) -> Result<Vec<&str>, ()> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(());
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(());
    }
    out.push(&s[start..]);
    Ok(out)
}

fn split_set_op<'a>(part: &'a str, op: &str) -> Option<(&'a str, &'a str)> {
    let i = part.find(op)?;
    Some((part[..i].trim(), part[i + op.len()..].trim()))
}

fn parse_set(set: &str) -> Option<Vec<String>> {
    let inner = set.strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_string()).collect())
}

/// Label keys: optional DNS prefix + `/` + name of `[A-Za-z0-9_.-]`.
fn valid_key(k: &str) -> Option<String> {
    let name = k.rsplit_once('/').map_or(k, |(_, n)| n);
    let ok = !name.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    ok.then(|| k.to_string())
}

/// A parsed field selector (`a=b`, `a==b`, `a!=b`, comma-separated).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// Field paths each resource supports, mirroring the API server's field label
/// conversion funcs; anything else is rejected as the real server does.
fn supported(plural: &str, field: &str) -> bool {
    if matches!(field, "metadata.name" | "metadata.namespace") {
        return true;
    }
    match plural {
        "pods" => matches!(
            field,
            "spec.nodeName"
                | "spec.restartPolicy"
                | "spec.schedulerName"
                | "spec.serviceAccountName"
                | "status.phase"
                | "status.podIP"
                | "status.nominatedNodeName"
        ),
        "nodes" => field == "spec.unschedulable",
        "events" => {
            field.starts_with("involvedObject.")
                || matches!(field, "reason" | "type" | "source" | "reportingComponent")
        }
        "namespaces" => field == "status.phase",
        "secrets" => field == "type",
        _ => false,
    }
}

impl FieldSelector {
    pub fn parse(plural: &str, s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, neg, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k, false, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let k = k.trim();
            if !supported(plural, k) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {k}"
                )));
            }
            reqs.push((k.to_string(), neg, v.trim().to_string()));
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, neg, v)| {
            // Events' `source` label selects on the reporting component.
            let path = if k == "source" {
                "source.component"
            } else {
                k.as_str()
            };
            let ptr = format!("/{}", path.replace('.', "/"));
            // Absent fields compare as "" (e.g. `spec.nodeName=` selects unbound pods).
            let actual = match obj.pointer(&ptr) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *v) != *neg
        })
    }
}

/// Label and field selector together.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selector {
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels}, "spec": {}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_operators() {
        let p = pod(json!({"app": "a", "tier": "web"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&p);
        assert!(m(""));
        assert!(m("app=a"));
        assert!(m("app==a,tier=web"));
        assert!(!m("app!=a"));
        assert!(m("missing!=x"));
        assert!(m("app in (a, b)"));
        assert!(!m("app notin (a,b)"));
        assert!(m("missing notin (a)"));
        assert!(m("tier"));
        assert!(!m("!tier"));
        assert!(m("!missing"));
        assert!(m("app in (a,b),tier"));
        assert!(LabelSelector::parse("app in (a").is_err());
        assert!(LabelSelector::parse("bad key=x").is_err());
    }

    #[test]
    fn structured_selectors() {
        let p = pod(json!({"app": "a", "hami.io/webhook": "ignore"}));
        let m = |v: Value| LabelSelector::from_object(Some(&v)).unwrap().matches(&p);
        assert!(m(json!({})));
        assert!(m(json!({"matchLabels": {"app": "a"}})));
        assert!(!m(
            json!({"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]})
        ));
        assert!(m(
            json!({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}, {"key": "app", "operator": "In", "values": ["a", "b"]}]})
        ));
        assert!(LabelSelector::from_object(None).unwrap().matches(&p));
        for bad in [
            json!({"matchExpressions": [{"key": "x", "operator": "In"}]}),
            json!({"matchExpressions": [{"key": "x", "operator": "Exists", "values": ["y"]}]}),
            json!({"matchExpressions": [{"key": "x", "operator": "Near"}]}),
            json!({"matchLabels": {"x": 1}}),
        ] {
            assert!(LabelSelector::from_object(Some(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selectors() {
        let p = pod(json!({}));
        let m = |s: &str| FieldSelector::parse("pods", s).unwrap().matches(&p);
        assert!(m("metadata.name=p,metadata.namespace=ns"));
        assert!(m("status.phase!=Pending"));
        assert!(m("spec.nodeName="));
        assert!(!m("spec.nodeName!="));
        assert!(FieldSelector::parse("pods", "spec.foo=x").is_err());
        assert!(FieldSelector::parse("pods", "nonsense").is_err());
        let ev = json!({"metadata": {"name": "e"}, "source": {"component": "kubelet"}, "involvedObject": {"uid": "u1"}});
        let e = |s: &str| FieldSelector::parse("events", s).unwrap().matches(&ev);
        assert!(e("source=kubelet,involvedObject.uid=u1"));
        assert!(!e("source=scheduler"));
    }
}
