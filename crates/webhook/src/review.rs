//! AdmissionReview on the wire (`admission.k8s.io/v1` and `v1beta1`, which share one
//! shape). Own types rather than kube's: the patch must go out as base64 with
//! `patchType: JSONPatch`, and the answer must carry the version that was asked.

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const V1: &str = "admission.k8s.io/v1";
pub const V1BETA1: &str = "admission.k8s.io/v1beta1";
const KIND: &str = "AdmissionReview";

/// Why a request body is not an AdmissionReview we can answer. These become HTTP
/// 400s: without a `uid` there is no review to answer in.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("body is not an AdmissionReview: {0}")]
    NotJson(serde_json::Error),
    #[error("unsupported AdmissionReview apiVersion {0:?}; expected {V1} or {V1BETA1}")]
    ApiVersion(String),
    #[error("kind is {0:?}, expected AdmissionReview")]
    Kind(String),
    #[error("AdmissionReview has no request")]
    NoRequest,
    #[error("AdmissionReview request has no uid")]
    NoUid,
}

#[derive(Debug, Deserialize)]
struct Envelope {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<AdmissionRequest>,
}

/// Group/version/kind as the API server writes it.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

/// The fields of `request` the webhook reads; the rest is ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct AdmissionRequest {
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub kind: Option<GroupVersionKind>,
    #[serde(default)]
    pub operation: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub object: Option<Value>,
    #[serde(rename = "dryRun", default)]
    pub dry_run: Option<bool>,
}

/// A review to answer: the request and the version to answer in.
#[derive(Debug, Clone)]
pub struct Review {
    pub api_version: String,
    pub request: AdmissionRequest,
}

impl Review {
    /// Parses a request body.
    pub fn parse(body: &[u8]) -> Result<Review, ReviewError> {
        let env: Envelope = serde_json::from_slice(body).map_err(ReviewError::NotJson)?;
        if env.api_version != V1 && env.api_version != V1BETA1 {
            return Err(ReviewError::ApiVersion(env.api_version));
        }
        if env.kind != KIND {
            return Err(ReviewError::Kind(env.kind));
        }
        let request = env.request.ok_or(ReviewError::NoRequest)?;
        if request.uid.trim().is_empty() {
            return Err(ReviewError::NoUid);
        }
        Ok(Review {
            api_version: env.api_version,
            request,
        })
    }

    /// "namespace/name" for logs; generated names are not known yet at CREATE.
    pub fn subject(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }

    /// The object's namespace.
    pub fn namespace(&self) -> &str {
        self.request.namespace.as_deref().unwrap_or("")
    }

    /// The object's name, or its `generateName` prefix (generated names are not known
    /// yet at CREATE).
    pub fn name(&self) -> &str {
        self.request
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .or_else(|| self.object_str("/metadata/generateName"))
            .unwrap_or("")
    }

    /// The object's UID (empty at CREATE: the API server assigns it after admission).
    pub fn object_uid(&self) -> &str {
        self.object_str("/metadata/uid").unwrap_or("")
    }

    fn object_str(&self, pointer: &str) -> Option<&str> {
        self.request
            .object
            .as_ref()
            .and_then(|o| o.pointer(pointer))
            .and_then(Value::as_str)
    }

    /// Allowed, with `patch` (JSON Patch operations) when non-empty.
    pub fn allow(&self, patch: Option<&json_patch::Patch>, warnings: Vec<String>) -> Value {
        let mut response = serde_json::json!({
            "uid": self.request.uid,
            "allowed": true,
        });
        if let Some(patch) = patch.filter(|p| !p.0.is_empty()) {
            // A Patch always serialises; the fallback keeps the type total.
            let raw = serde_json::to_vec(patch).unwrap_or_default();
            response["patchType"] = Value::from("JSONPatch");
            response["patch"] = Value::from(base64::engine::general_purpose::STANDARD.encode(raw));
        }
        if !warnings.is_empty() {
            response["warnings"] = Value::from(warnings);
        }
        self.wrap(response)
    }

    /// Refused with an HTTP-like `code` and a message the user sees in
    /// `kubectl` ("admission webhook ... denied the request: <message>").
    pub fn deny(&self, code: u16, reason: &str, message: &str) -> Value {
        self.wrap(serde_json::json!({
            "uid": self.request.uid,
            "allowed": false,
            "status": {
                "metadata": {},
                "status": "Failure",
                "reason": reason,
                "message": message,
                "code": code,
            },
        }))
    }

    fn wrap(&self, response: Value) -> Value {
        serde_json::json!({
            "apiVersion": self.api_version,
            "kind": KIND,
            "response": response,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_specific() {
        assert!(matches!(
            Review::parse(b"{nope"),
            Err(ReviewError::NotJson(_))
        ));
        assert!(matches!(
            Review::parse(br#"{"apiVersion":"v1","kind":"AdmissionReview"}"#),
            Err(ReviewError::ApiVersion(_))
        ));
        assert!(matches!(
            Review::parse(br#"{"apiVersion":"admission.k8s.io/v1","kind":"Pod"}"#),
            Err(ReviewError::Kind(_))
        ));
        assert!(matches!(
            Review::parse(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#),
            Err(ReviewError::NoRequest)
        ));
        assert!(matches!(
            Review::parse(
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":""}}"#
            ),
            Err(ReviewError::NoUid)
        ));
        assert!(matches!(
            Review::parse(b"[1,2,3]"),
            Err(ReviewError::NotJson(_))
        ));
    }

    #[test]
    fn answers_in_the_version_asked_with_base64_patch() {
        let r = Review::parse(
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u-1"}}"#,
        )
        .unwrap();
        let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}
        ]))
        .unwrap();
        let out = r.allow(Some(&patch), vec![]);
        assert_eq!(out["apiVersion"], V1BETA1);
        assert_eq!(out["kind"], "AdmissionReview");
        assert_eq!(out["response"]["uid"], "u-1");
        assert_eq!(out["response"]["allowed"], true);
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(out["response"]["patch"].as_str().unwrap())
            .unwrap();
        let back: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(back[0]["path"], "/spec/schedulerName");

        let empty = r.allow(Some(&json_patch::Patch(vec![])), vec![]);
        assert!(empty["response"].get("patch").is_none());
        assert!(empty["response"].get("patchType").is_none());

        let denied = r.deny(403, "Forbidden", "container c is privileged");
        assert_eq!(denied["response"]["allowed"], false);
        assert_eq!(denied["response"]["status"]["code"], 403);
        assert_eq!(
            denied["response"]["status"]["message"],
            "container c is privileged"
        );
    }
}
