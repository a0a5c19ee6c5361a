//! The HTTP side: `POST /mutate` (and `/webhook`, the path HAMi's chart uses).

use std::sync::Arc;
use std::time::Instant;

use hami_server::body::read_request_bounded;
use hami_server::{Handler, HttpResponse, handler_fn, respond};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use crate::metrics::{Metrics, Outcome};
use crate::patch::pod_patch;
use crate::review::{Review, ReviewError};
use crate::rules::{Rules, Verdict};

/// Paths the webhook answers on.
pub const PATHS: &[&str] = &["/mutate", "/webhook"];

/// kube-apiserver caps objects at 3 MiB; a review carries one object (two on
/// UPDATE), plus a little envelope.
pub const DEFAULT_BODY_LIMIT: usize = 7 * 1024 * 1024;

/// The webhook: rules, metrics and the body limit.
#[derive(Debug)]
pub struct Webhook {
    rules: Rules,
    metrics: Metrics,
    body_limit: usize,
}

impl Webhook {
    pub fn new(rules: Rules, metrics: Metrics, body_limit: usize) -> Self {
        Webhook {
            rules,
            metrics,
            body_limit,
        }
    }

    /// The webhook as a server handler.
    pub fn into_handler(self) -> Handler {
        let this = Arc::new(self);
        handler_fn(move |req| {
            let this = this.clone();
            async move { this.handle(req).await }
        })
    }

    async fn handle(&self, req: Request<Incoming>) -> HttpResponse {
        let path = req.uri().path();
        if !PATHS.contains(&path) {
            return respond::error_json(
                StatusCode::NOT_FOUND,
                &format!("no route {path}; admission reviews go to POST /mutate or /webhook"),
            );
        }
        if req.method() != Method::POST {
            return respond::error_json(
                StatusCode::METHOD_NOT_ALLOWED,
                "admission reviews must be sent with POST",
            );
        }
        let started = Instant::now();
        let body = match read_request_bounded(req, self.body_limit).await {
            Ok((_, body)) => body,
            Err(e) => {
                tracing::warn!(error = %e, "admission request body refused");
                self.metrics.observe(Outcome::BadRequest, started.elapsed());
                return e.to_response();
            }
        };
        let (response, outcome) = match self.admit(&body) {
            Ok((answer, outcome)) => (respond::json(StatusCode::OK, &answer), outcome),
            Err(e) => {
                tracing::warn!(error = %e, "malformed admission request");
                (
                    respond::error_json(StatusCode::BAD_REQUEST, &e.to_string()),
                    Outcome::BadRequest,
                )
            }
        };
        self.metrics.observe(outcome, started.elapsed());
        response
    }

    /// Answers one AdmissionReview body. Errors are bodies that are not a review at
    /// all; everything else is answered inside a review.
    pub fn admit(&self, body: &[u8]) -> Result<(Value, Outcome), ReviewError> {
        let review = Review::parse(body)?;
        let span = hami_server::pod_span!(
            "admission",
            review.namespace(),
            review.name(),
            review.object_uid()
        );
        Ok(span.in_scope(|| self.answer(&review)))
    }

    /// The answer to a parsed review.
    fn answer(&self, review: &Review) -> (Value, Outcome) {
        let subject = review.subject();
        let req = &review.request;
        if let Some(op) = req.operation.as_deref().filter(|op| *op != "CREATE") {
            tracing::debug!(pod = %subject, operation = op, "not a CREATE; admitted unchanged");
            return (review.allow(None, vec![]), Outcome::Skipped);
        }
        if let Some(kind) = req.kind.as_ref().filter(|k| k.kind != "Pod") {
            tracing::debug!(object = %subject, kind = %kind.kind, "not a Pod; admitted unchanged");
            return (review.allow(None, vec![]), Outcome::Skipped);
        }
        let Some(object) = req.object.clone() else {
            return self.refuse(
                review,
                400,
                "BadRequest",
                "invalid_object",
                "admission request carries no object",
            );
        };
        let mut pod: Pod = match serde_json::from_value(object) {
            Ok(p) => p,
            Err(e) => {
                let msg = format!("object is not a valid Pod: {e}");
                return self.refuse(review, 400, "BadRequest", "invalid_object", &msg);
            }
        };
        // A pod created with a namespace in the URL only: the review says which.
        if pod.metadata.namespace.as_deref().is_none_or(str::is_empty)
            && !review.namespace().is_empty()
        {
            pod.metadata.namespace = Some(review.namespace().to_string());
        }
        match self.rules.review(&pod) {
            Verdict::Skip { reason } => {
                tracing::info!(pod = %subject, result = "skipped", %reason, "admitted unchanged");
                (review.allow(None, vec![]), Outcome::Skipped)
            }
            Verdict::Deny(denial) => {
                let (code, reason) = denial.rule.status();
                tracing::info!(pod = %subject, result = "denied", rule = denial.rule.as_str(), reason = %denial.message, "denied");
                (
                    review.deny(code, reason, &denial.message),
                    Outcome::Denied(denial.rule.as_str()),
                )
            }
            Verdict::Admit {
                pod: mutated,
                managed,
                warnings,
            } => match pod_patch(&pod, &mutated) {
                Ok(patch) => {
                    let outcome = if patch.0.is_empty() {
                        Outcome::Allowed
                    } else {
                        Outcome::Patched
                    };
                    tracing::info!(pod = %subject, result = ?outcome, managed, operations = patch.0.len(), "admitted");
                    tracing::debug!(pod = %subject, patch = %serde_json::to_string(&patch).unwrap_or_default(), "patch");
                    (review.allow(Some(&patch), warnings), outcome)
                }
                Err(e) => {
                    let msg = format!("mutated pod could not be encoded: {e}");
                    self.refuse(review, 500, "InternalError", "internal", &msg)
                }
            },
        }
    }

    fn refuse(
        &self,
        review: &Review,
        code: u16,
        reason: &str,
        rule: &'static str,
        message: &str,
    ) -> (Value, Outcome) {
        tracing::info!(pod = %review.subject(), result = "denied", rule, reason = %message, "denied");
        (review.deny(code, reason, message), Outcome::Denied(rule))
    }
}
