//! Mutating admission as kube-apiserver runs it on create: every matching webhook
//! of every `MutatingWebhookConfiguration` (configurations by name, webhooks in
//! order) gets an `AdmissionReview` over HTTPS, its base64 JSONPatch is applied,
//! a denial fails the request with the webhook's status, and a webhook that cannot
//! be called fails the request or is skipped as its `failurePolicy` says.
//! `reinvocationPolicy: IfNeeded` webhooks are called once more when a later
//! webhook changed the object.
//!
//! Limits: only CREATE is sent to webhooks (updates, deletes and connects are not
//! admitted); `matchConditions` (CEL) are not evaluated, so a webhook that has them
//! is called as if they all held (logged); there is no cluster DNS, so `service`
//! references resolve through [`Services`].

pub mod client;
pub mod config;

use base64::Engine;
use serde_json::{Value, json};

pub use client::Services;
use config::Webhook;

use crate::resources::{self, Resource};
use crate::selectors::Selector;
use crate::status::ApiError;
use crate::store::Store;

/// Who the emulator says sent the request (it has no authentication).
const USERNAME: &str = "system:admin";

/// A create request, as admission sees it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub resource: &'a Resource,
    pub namespace: Option<&'a str>,
    /// `fieldManager` of the request, passed on in `options`.
    pub field_manager: Option<&'a str>,
}

/// An admitted object and the warnings webhooks returned.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    pub object: Value,
    pub warnings: Vec<String>,
}

/// Runs mutating admission for a create of `object` (already defaulted).
pub async fn admit_create(
    store: &Store,
    services: &Services,
    req: Request<'_>,
    object: Value,
) -> Result<Admitted, ApiError> {
    let (configs, _) = store.list(
        &resources::MUTATING_WEBHOOK_CONFIGURATIONS,
        None,
        &Selector::default(),
    );
    let hooks = config::webhooks(configs);
    if hooks.is_empty() {
        return Ok(Admitted {
            object,
            warnings: Vec::new(),
        });
    }
    let namespace = match (req.resource.namespaced, req.namespace) {
        (true, Some(ns)) => Some(store.get(&resources::NAMESPACES, None, ns)?),
        _ => None,
    };
    let mut state = Admitted {
        object,
        warnings: Vec::new(),
    };
    // (webhook index, object version it saw) of IfNeeded webhooks, for reinvocation.
    let mut reinvocable = Vec::new();
    let mut version = 0usize;
    for (i, hook) in hooks.iter().enumerate() {
        let hook = match hook {
            Ok(h) => h,
            Err(b) => {
                return Err(ApiError::InternalError {
                    message: format!(
                        "Internal error occurred: failed calling webhook \"{}\" of {}: {}",
                        b.name, b.configuration, b.error
                    ),
                });
            }
        };
        let selected = config::selects(
            hook,
            "CREATE",
            req.resource,
            &state.object,
            namespace.as_ref(),
        )
        .map_err(|e| failed(hook, &e));
        match selected {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) if hook.fails_closed() => return Err(e),
            Err(e) => {
                tracing::warn!(webhook = %hook.name, error = %e, "webhook skipped (failurePolicy Ignore)");
                continue;
            }
        }
        if call_one(services, hook, &req, &mut state).await? {
            version += 1;
        }
        if hook.reinvoke_if_needed() {
            reinvocable.push((i, version));
        }
    }
    // Reinvoke (once) IfNeeded webhooks that saw an object a later webhook changed.
    for (i, seen) in reinvocable {
        if seen == version {
            continue;
        }
        if let Some(Ok(hook)) = hooks.get(i) {
            tracing::debug!(webhook = %hook.name, "reinvoking webhook: the object changed after it ran");
            call_one(services, hook, &req, &mut state).await?;
        }
    }
    Ok(state)
}

fn failed(hook: &Webhook, detail: &str) -> ApiError {
    ApiError::InternalError {
        message: format!(
            "Internal error occurred: failed calling webhook \"{}\": {detail}",
            hook.name
        ),
    }
}

/// Calls one webhook and applies its answer; true when it changed the object.
async fn call_one(
    services: &Services,
    hook: &Webhook,
    req: &Request<'_>,
    state: &mut Admitted,
) -> Result<bool, ApiError> {
    if !hook.match_conditions.is_empty() {
        tracing::warn!(webhook = %hook.name, "matchConditions are not evaluated by the emulator; calling the webhook");
    }
    match exchange(services, hook, req, &state.object).await {
        Ok(Answer::Allowed { patch, warnings }) => {
            state.warnings.extend(warnings);
            let Some(patch) = patch else {
                return Ok(false);
            };
            let before = state.object.clone();
            // json_patch applies all operations or none.
            if let Err(e) = json_patch::patch(&mut state.object, &patch) {
                return Err(failed(
                    hook,
                    &format!("JSON patch from the webhook does not apply: {e}"),
                ));
            }
            tracing::info!(webhook = %hook.name, operations = patch.0.len(), "webhook patched the object");
            Ok(state.object != before)
        }
        Ok(Answer::Denied(e)) => {
            tracing::info!(webhook = %hook.name, reason = %e, "webhook denied the request");
            Err(e)
        }
        Err(detail) if hook.fails_closed() => {
            tracing::warn!(webhook = %hook.name, error = %detail, "webhook call failed (failurePolicy Fail)");
            Err(failed(hook, &detail))
        }
        Err(detail) => {
            tracing::warn!(webhook = %hook.name, error = %detail, "webhook call failed; ignored (failurePolicy Ignore)");
            Ok(false)
        }
    }
}

enum Answer {
    Allowed {
        patch: Option<json_patch::Patch>,
        warnings: Vec<String>,
    },
    Denied(ApiError),
}

/// A random version-4 UID for the review.
fn review_uid() -> String {
    use std::hash::{BuildHasher, RandomState};
    let s = RandomState::new();
    let a = s.hash_one(std::time::SystemTime::now());
    let b = s.hash_one(a);
    let x = (u128::from(a) << 64 | u128::from(b)) & !(0xf << 76) | (0x4 << 76);
    let h = format!("{x:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// The AdmissionReview kube-apiserver sends for a create.
pub fn review(version: &str, uid: &str, req: &Request<'_>, object: &Value) -> Value {
    let r = req.resource;
    let kind = json!({"group": r.group, "version": r.version, "kind": r.kind});
    let resource = json!({"group": r.group, "version": r.version, "resource": r.plural});
    let mut options = json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"});
    if let Some(fm) = req.field_manager.filter(|f| !f.is_empty()) {
        options["fieldManager"] = fm.into();
    }
    let mut request = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "operation": "CREATE",
        "userInfo": {"username": USERNAME, "groups": ["system:masters", "system:authenticated"]},
        "object": object,
        "oldObject": null,
        "dryRun": false,
        "options": options,
    });
    if let Some(name) = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        request["name"] = name.into();
    }
    if let Some(ns) = req.namespace.filter(|_| r.namespaced) {
        request["namespace"] = ns.into();
    }
    json!({
        "kind": "AdmissionReview",
        "apiVersion": format!("admission.k8s.io/{version}"),
        "request": request,
    })
}

async fn exchange(
    services: &Services,
    hook: &Webhook,
    req: &Request<'_>,
    object: &Value,
) -> Result<Answer, String> {
    let version = hook.review_version().ok_or_else(|| {
        format!(
            "webhook does not accept v1 or v1beta1 AdmissionReview (admissionReviewVersions: {:?})",
            hook.admission_review_versions
        )
    })?;
    let ep = client::endpoint(&hook.client_config, services, hook.timeout())?;
    let uid = review_uid();
    let body =
        serde_json::to_vec(&review(version, &uid, req, object)).map_err(|e| e.to_string())?;
    tracing::debug!(webhook = %hook.name, url = %ep.url, version, "calling webhook");
    let (status, bytes) = client::post(
        &ep,
        hook.client_config.ca_bundle.as_deref(),
        body,
        hook.timeout(),
    )
    .await?;
    if !(200..300).contains(&status) {
        return Err(format!(
            "failed to call webhook: the server responded with status {status}: {}",
            String::from_utf8_lossy(&bytes).trim()
        ));
    }
    parse_answer(version, &uid, &hook.name, &bytes)
}

/// Checks a webhook's AdmissionReview answer as kube-apiserver does.
fn parse_answer(version: &str, uid: &str, hook: &str, bytes: &[u8]) -> Result<Answer, String> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("received invalid webhook response: {e}"))?;
    let want = format!("admission.k8s.io/{version}");
    if version == "v1"
        && (v.get("apiVersion").and_then(Value::as_str) != Some(want.as_str())
            || v.get("kind").and_then(Value::as_str) != Some("AdmissionReview"))
    {
        return Err(format!(
            "expected webhook response of {want}, Kind=AdmissionReview, got {}, Kind={}",
            v.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
            v.get("kind").and_then(Value::as_str).unwrap_or("")
        ));
    }
    let resp = v
        .get("response")
        .filter(|r| r.is_object())
        .ok_or("webhook response was absent")?;
    let got_uid = resp.get("uid").and_then(Value::as_str).unwrap_or("");
    if version == "v1" && got_uid != uid {
        return Err(format!("expected response.uid={uid:?}, got {got_uid:?}"));
    }
    let warnings = resp
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if resp.get("allowed").and_then(Value::as_bool) != Some(true) {
        return Ok(Answer::Denied(denial(hook, resp.get("status"))));
    }
    let patch = match resp
        .get("patch")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
    {
        None => None,
        Some(b64) => {
            match resp.get("patchType").and_then(Value::as_str) {
                Some("JSONPatch") => {}
                None if version == "v1beta1" => {}
                None => {
                    return Err("webhook returned response.patch but not response.patchType".into());
                }
                Some(other) => {
                    return Err(format!(
                        "webhook returned invalid response.patchType of {other:?}"
                    ));
                }
            }
            let raw = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("webhook returned a patch that is not base64: {e}"))?;
            Some(
                serde_json::from_slice::<json_patch::Patch>(&raw)
                    .map_err(|e| format!("webhook returned an invalid JSON patch: {e}"))?,
            )
        }
    };
    Ok(Answer::Allowed { patch, warnings })
}

/// The error a denial becomes: the webhook's status, with at least code 400 and
/// the message prefixed as kube-apiserver does.
fn denial(hook: &str, status: Option<&Value>) -> ApiError {
    let s = |k: &str| {
        status
            .and_then(|st| st.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let code = status
        .and_then(|st| st.get("code"))
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    let denied = format!("admission webhook \"{hook}\" denied the request");
    let (message, reason) = (s("message"), s("reason"));
    let message = if !message.is_empty() {
        format!("{denied}: {message}")
    } else if !reason.is_empty() {
        format!("{denied}: {reason}")
    } else {
        format!("{denied} without explanation")
    };
    ApiError::Other {
        code,
        reason,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(v: Value) -> Result<Answer, String> {
        parse_answer("v1", "u1", "w.example", &serde_json::to_vec(&v).unwrap())
    }

    #[test]
    fn review_shape() {
        let req = Request {
            resource: &resources::PODS,
            namespace: Some("team-a"),
            field_manager: Some("kubectl-create"),
        };
        let obj = json!({"metadata": {"generateName": "job-"}});
        let r = review("v1", "u1", &req, &obj);
        assert_eq!(r["apiVersion"], "admission.k8s.io/v1");
        let q = &r["request"];
        assert_eq!(q["uid"], "u1");
        assert_eq!(
            q["kind"],
            json!({"group": "", "version": "v1", "kind": "Pod"})
        );
        assert_eq!(q["resource"]["resource"], "pods");
        assert_eq!(q["requestKind"], q["kind"]);
        assert_eq!(q["namespace"], "team-a");
        assert!(q.get("name").is_none());
        assert_eq!(q["operation"], "CREATE");
        assert_eq!(q["dryRun"], false);
        assert_eq!(q["options"]["fieldManager"], "kubectl-create");
        assert_eq!(q["object"], obj);
        assert!(q["oldObject"].is_null());
    }

    #[test]
    fn answers_are_checked_like_the_api_server() {
        let ok = |resp: Value| json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp});
        assert!(matches!(
            answer(ok(json!({"uid": "u1", "allowed": true}))),
            Ok(Answer::Allowed { patch: None, .. })
        ));
        let e = answer(ok(json!({"uid": "other", "allowed": true})))
            .err()
            .unwrap();
        assert!(e.contains("expected response.uid"), "{e}");
        let e = answer(json!({"apiVersion": "v1", "kind": "AdmissionReview", "response": {}}))
            .err()
            .unwrap();
        assert!(
            e.contains("expected webhook response of admission.k8s.io/v1"),
            "{e}"
        );
        let e = answer(ok(json!({"uid": "u1", "allowed": true, "patch": "W10="})))
            .err()
            .unwrap();
        assert!(e.contains("not response.patchType"), "{e}");
        let e = answer(ok(
            json!({"uid": "u1", "allowed": true, "patch": "!!", "patchType": "JSONPatch"}),
        ))
        .err()
        .unwrap();
        assert!(e.contains("not base64"), "{e}");
        assert!(answer(ok(json!({"uid": "u1"}))).is_ok_and(|a| matches!(a, Answer::Denied(_))));
        assert!(parse_answer("v1", "u1", "w", b"not json").is_err());
        let b64 = base64::engine::general_purpose::STANDARD
            .encode(r#"[{"op":"add","path":"/x","value":1}]"#);
        match answer(ok(
            json!({"uid": "u1", "allowed": true, "patch": b64, "patchType": "JSONPatch", "warnings": ["w1"]}),
        )) {
            Ok(Answer::Allowed {
                patch: Some(p),
                warnings,
            }) => {
                assert_eq!(p.0.len(), 1);
                assert_eq!(warnings, ["w1"]);
            }
            _ => panic!("expected a patch"),
        }
    }

    #[test]
    fn denials_keep_the_status_and_prefix_the_message() {
        let e = denial(
            "w.example",
            Some(&json!({"code": 403, "reason": "Forbidden", "message": "privileged"})),
        );
        assert_eq!(e.code(), 403);
        assert_eq!(e.reason(), "Forbidden");
        assert_eq!(
            e.to_string(),
            "admission webhook \"w.example\" denied the request: privileged"
        );
        let e = denial("w", Some(&json!({"code": 200})));
        assert_eq!(e.code(), 400);
        assert_eq!(
            e.to_string(),
            "admission webhook \"w\" denied the request without explanation"
        );
        assert_eq!(e.to_status().get("reason"), None);
    }
}
