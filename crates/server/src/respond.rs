//! Small response builders, so handlers never assemble headers by hand.

use bytes::Bytes;
use hyper::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderValue, VARY};
use hyper::{Response, StatusCode};
use serde::Serialize;

use crate::chunked::ChunkedBody;
use crate::serve::HttpResponse;

const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";

/// A response with `body` and the given content type.
pub fn bytes(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> HttpResponse {
    let mut resp = Response::new(ChunkedBody::from(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// A response sent as `chunks` in order, with the given content type and, where they
/// are compressed, content encoding (the answer then differs by `Accept-Encoding`).
pub fn chunks(
    status: StatusCode,
    content_type: &'static str,
    content_encoding: Option<&'static str>,
    chunks: Vec<Bytes>,
) -> HttpResponse {
    let mut resp = Response::new(ChunkedBody::new(chunks));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(VARY, HeaderValue::from_static("accept-encoding"));
    if let Some(encoding) = content_encoding {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(encoding));
    }
    resp
}

/// A plain-text response.
pub fn text(status: StatusCode, msg: impl Into<String>) -> HttpResponse {
    let mut body = msg.into();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    bytes(status, TEXT, body)
}

/// `value` serialised as JSON. A value that cannot be serialised is a bug in the
/// caller; it answers 500 with the reason rather than a half-written body.
pub fn json<T: Serialize + ?Sized>(status: StatusCode, value: &T) -> HttpResponse {
    match serde_json::to_vec(value) {
        Ok(body) => bytes(status, JSON, body),
        Err(e) => error_json(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("response could not be encoded as JSON: {e}"),
        ),
    }
}

/// `{"error": "<message>"}` with `status`.
pub fn error_json(status: StatusCode, message: &str) -> HttpResponse {
    let body = serde_json::json!({ "error": message }).to_string();
    bytes(status, JSON, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body_of(resp: HttpResponse) -> String {
        let collected = resp.into_body().collect().await;
        match collected {
            Ok(c) => String::from_utf8_lossy(&c.to_bytes()).into_owned(),
            Err(never) => match never {},
        }
    }

    #[tokio::test]
    async fn json_sets_type_and_status() {
        let resp = json(StatusCode::CREATED, &serde_json::json!({"a": 1}));
        assert_eq!(resp.status(), StatusCode::CREATED);
        assert_eq!(resp.headers()[CONTENT_TYPE], JSON);
        assert_eq!(body_of(resp).await, r#"{"a":1}"#);
    }

    #[tokio::test]
    async fn error_json_escapes_message() {
        let resp = error_json(StatusCode::BAD_REQUEST, "bad \"thing\"");
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        let v: serde_json::Value = serde_json::from_str(&body_of(resp).await).unwrap_or_default();
        assert_eq!(v["error"], "bad \"thing\"");
    }

    #[tokio::test]
    async fn text_ends_with_newline() {
        let resp = text(StatusCode::OK, "ok");
        assert_eq!(body_of(resp).await, "ok\n");
    }
}
