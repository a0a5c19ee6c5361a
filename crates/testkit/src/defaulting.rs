//! Pod defaulting as kube-apiserver does it on create, before admission webhooks
//! see the pod: the `SetDefaults_*` functions of core/v1 (restart and DNS policy,
//! scheduler name, grace period, per-container termination message and image pull
//! policy, requests copied from limits), what the Priority and
//! DefaultTolerationSeconds admission plugins add, and the QoS class the pod
//! strategy computes. Webhooks and schedulers rely on these (HAMi's webhook takes
//! over pods whose `schedulerName` is `default-scheduler`).

use serde_json::{Map, Value, json};

fn obj_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let m = v.as_object_mut()?;
    let slot = m.entry(key).or_insert_with(|| json!({}));
    if slot.is_null() {
        *slot = json!({});
    }
    slot.as_object_mut()
}

fn set_default(m: &mut Map<String, Value>, key: &str, value: Value) {
    let missing = match m.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        _ => false,
    };
    if missing {
        m.insert(key.to_string(), value);
    }
}

/// `IfNotPresent` for a pinned tag or digest, `Always` for `:latest` or no tag.
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn container(c: &mut Value) {
    let image = c
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let Some(m) = c.as_object_mut() else { return };
    set_default(m, "terminationMessagePath", "/dev/termination-log".into());
    set_default(m, "terminationMessagePolicy", "File".into());
    if !image.is_empty() {
        set_default(m, "imagePullPolicy", pull_policy(&image).into());
    }
    let Some(res) = m.get_mut("resources").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(limits) = res.get("limits").and_then(Value::as_object).cloned() else {
        return;
    };
    let requests = res.entry("requests").or_insert_with(|| json!({}));
    if requests.is_null() {
        *requests = json!({});
    }
    if let Some(r) = requests.as_object_mut() {
        for (k, v) in limits {
            r.entry(k).or_insert(v);
        }
    }
}

fn containers_mut<'a>(spec: &'a mut Map<String, Value>, key: &str) -> Vec<&'a mut Value> {
    spec.get_mut(key)
        .and_then(Value::as_array_mut)
        .map(|a| a.iter_mut().collect())
        .unwrap_or_default()
}

/// The QoS class: `Guaranteed` when every container sets cpu and memory limits
/// equal to their requests, `BestEffort` when none sets any, else `Burstable`.
pub fn qos_class(pod: &Value) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    let lists = ["initContainers", "containers"];
    for list in lists {
        let Some(cs) = pod
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
        else {
            continue;
        };
        for c in cs {
            for res in ["cpu", "memory"] {
                let req = c.pointer(&format!("/resources/requests/{res}"));
                let lim = c.pointer(&format!("/resources/limits/{res}"));
                if req.is_some() || lim.is_some() {
                    any = true;
                }
                if lim.is_none() || req.is_some_and(|r| Some(r) != lim) {
                    guaranteed = false;
                }
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// Applies the create-time defaults to a pod in place. Idempotent, and a no-op for
/// anything that is not a JSON object with a `spec` object.
pub fn pod(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        return;
    }
    if let Some(spec) = obj_mut(obj, "spec") {
        set_default(spec, "restartPolicy", "Always".into());
        set_default(spec, "terminationGracePeriodSeconds", 30.into());
        set_default(spec, "dnsPolicy", "ClusterFirst".into());
        set_default(spec, "schedulerName", "default-scheduler".into());
        set_default(spec, "securityContext", json!({}));
        set_default(spec, "enableServiceLinks", true.into());
        set_default(spec, "priority", 0.into());
        set_default(spec, "preemptionPolicy", "PreemptLowerPriority".into());
        for key in ["initContainers", "containers"] {
            for c in containers_mut(spec, key) {
                container(c);
            }
        }
        let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
        if tolerations.is_null() {
            *tolerations = json!([]);
        }
        if let Some(ts) = tolerations.as_array_mut() {
            for key in [
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable",
            ] {
                let present = ts.iter().any(|t| {
                    t.get("key").and_then(Value::as_str) == Some(key)
                        && matches!(
                            t.get("effect").and_then(Value::as_str),
                            None | Some("" | "NoExecute")
                        )
                });
                if !present {
                    ts.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
                }
            }
        }
    }
    let qos = qos_class(obj);
    if let Some(status) = obj_mut(obj, "status") {
        set_default(status, "phase", "Pending".into());
        set_default(status, "qosClass", qos.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_what_the_api_server_fills() {
        let mut p = json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [
                {"name": "a", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1"}}},
                {"name": "b", "image": "busybox"}
            ], "schedulerName": ""}
        });
        pod(&mut p);
        assert_eq!(p["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(p["spec"]["restartPolicy"], "Always");
        assert_eq!(p["spec"]["terminationGracePeriodSeconds"], 30);
        let a = &p["spec"]["containers"][0];
        assert_eq!(a["resources"]["requests"]["nvidia.com/gpu"], "1");
        assert_eq!(a["imagePullPolicy"], "IfNotPresent");
        assert_eq!(p["spec"]["containers"][1]["imagePullPolicy"], "Always");
        assert_eq!(p["spec"]["tolerations"].as_array().unwrap().len(), 2);
        assert_eq!(p["status"]["qosClass"], "Burstable");
        assert_eq!(p["status"]["phase"], "Pending");
        let once = p.clone();
        pod(&mut p);
        assert_eq!(p, once, "idempotent");
    }

    #[test]
    fn keeps_what_is_set_and_skips_non_pods() {
        let mut p = json!({"spec": {"schedulerName": "hami-scheduler", "containers": [
            {"name": "a", "image": "x@sha256:00", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1"}}}
        ]}});
        pod(&mut p);
        assert_eq!(p["spec"]["schedulerName"], "hami-scheduler");
        assert_eq!(
            p["spec"]["containers"][0]["resources"]["requests"]["memory"],
            "1Gi"
        );
        assert_eq!(p["status"]["qosClass"], "Guaranteed");
        let mut garbage = json!({"spec": 5});
        pod(&mut garbage);
        assert_eq!(garbage, json!({"spec": 5}));
    }

    #[test]
    fn best_effort_without_cpu_or_memory() {
        let p = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
        assert_eq!(qos_class(&p), "BestEffort");
    }
}
