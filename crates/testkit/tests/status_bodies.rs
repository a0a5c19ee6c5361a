//! Error paths over raw HTTP: every failure is a `Status` body with the
//! API server's reason and code, and bad input never takes the server down.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hami_testkit::{ApiServer, Options};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn raw(
    server: &ApiServer,
    method: &str,
    path: &str,
    ctype: &str,
    body: &[u8],
) -> (u16, Value) {
    let mut s = TcpStream::connect(server.addr()).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    let code = text[9..12].parse().unwrap();
    let (_, body) = text.split_once("\r\n\r\n").unwrap();
    (code, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn assert_status(got: &(u16, Value), code: u16, reason: &str) {
    assert_eq!(got.0, code, "{:?}", got.1);
    assert_eq!(got.1["kind"], "Status");
    assert_eq!(got.1["apiVersion"], "v1");
    assert_eq!(got.1["status"], "Failure");
    assert_eq!(got.1["reason"], reason);
    assert_eq!(got.1["code"], code);
    assert!(got.1["message"].as_str().is_some_and(|m| !m.is_empty()));
}

#[tokio::test]
async fn failures_are_status_bodies() {
    let server = ApiServer::start_with(Options {
        max_body_bytes: 1024,
        ..Options::default()
    })
    .await
    .unwrap();
    let pods = "/api/v1/namespaces/default/pods";
    let json = "application/json";
    assert_status(
        &raw(&server, "POST", pods, json, b"{not json").await,
        400,
        "BadRequest",
    );
    assert_status(
        &raw(&server, "POST", pods, json, b"[1,2]").await,
        400,
        "BadRequest",
    );
    assert_status(
        &raw(&server, "POST", pods, json, br#"{"metadata":{}}"#).await,
        422,
        "Invalid",
    );
    assert_status(
        &raw(
            &server,
            "POST",
            pods,
            json,
            br#"{"kind":"Node","metadata":{"name":"a"}}"#,
        )
        .await,
        400,
        "BadRequest",
    );
    assert_status(
        &raw(&server, "POST", pods, json, &vec![b' '; 4096]).await,
        413,
        "RequestEntityTooLarge",
    );
    assert_status(
        &raw(&server, "GET", "/api/v1/widgets", json, b"").await,
        404,
        "NotFound",
    );
    assert_status(
        &raw(&server, "GET", &format!("{pods}/nope"), json, b"").await,
        404,
        "NotFound",
    );
    assert_status(
        &raw(
            &server,
            "GET",
            &format!("{pods}?watch=1&resourceVersion=abc"),
            json,
            b"",
        )
        .await,
        400,
        "BadRequest",
    );

    let created = raw(&server, "POST", pods, json, br#"{"metadata":{"name":"a"}}"#).await;
    assert_eq!(created.0, 201);
    assert_eq!(created.1["metadata"]["namespace"], "default");
    let item = format!("{pods}/a");
    assert_status(
        &raw(
            &server,
            "PATCH",
            &item,
            "application/apply-patch+yaml",
            b"{}",
        )
        .await,
        415,
        "UnsupportedMediaType",
    );
    assert_status(
        &raw(
            &server,
            "PATCH",
            &item,
            "application/merge-patch+json",
            b"[",
        )
        .await,
        400,
        "BadRequest",
    );
    let bad_test = br#"[{"op":"test","path":"/metadata/name","value":"b"}]"#;
    assert_status(
        &raw(
            &server,
            "PATCH",
            &item,
            "application/json-patch+json",
            bad_test,
        )
        .await,
        422,
        "Invalid",
    );
    assert_status(
        &raw(&server, "PUT", &item, json, br#"{"metadata":{"name":"b"}}"#).await,
        400,
        "BadRequest",
    );
    assert_status(
        &raw(
            &server,
            "POST",
            &format!("{item}/binding"),
            json,
            br#"{"metadata":{"name":"a"}}"#,
        )
        .await,
        422,
        "Invalid",
    );

    // DeleteOptions preconditions are honoured.
    let stale = br#"{"preconditions":{"resourceVersion":"1"}}"#;
    assert_status(
        &raw(&server, "DELETE", &item, json, stale).await,
        409,
        "Conflict",
    );
    assert_eq!(raw(&server, "DELETE", &item, json, b"").await.0, 200);

    // Legacy namespaced `bindings` collection binds too.
    raw(&server, "POST", pods, json, br#"{"metadata":{"name":"c"}}"#).await;
    let binding = br#"{"metadata":{"name":"c"},"target":{"name":"n1"}}"#;
    assert_eq!(
        raw(
            &server,
            "POST",
            "/api/v1/namespaces/default/bindings",
            json,
            binding
        )
        .await
        .0,
        201
    );
    assert_status(
        &raw(
            &server,
            "POST",
            "/api/v1/namespaces/default/bindings",
            json,
            binding,
        )
        .await,
        409,
        "Conflict",
    );
}

#[tokio::test]
async fn pagination_and_status_subresource() {
    let server = ApiServer::start().await.unwrap();
    let json = "application/json";
    let nodes = "/api/v1/nodes";
    for n in ["n1", "n2", "n3"] {
        raw(
            &server,
            "POST",
            nodes,
            json,
            format!(r#"{{"metadata":{{"name":"{n}"}}}}"#).as_bytes(),
        )
        .await;
    }
    let first = raw(&server, "GET", &format!("{nodes}?limit=2"), json, b"")
        .await
        .1;
    assert_eq!(first["kind"], "NodeList");
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    let q: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("continue", &token)
        .finish();
    let rest = raw(&server, "GET", &format!("{nodes}?limit=2&{q}"), json, b"")
        .await
        .1;
    assert_eq!(rest["items"][0]["metadata"]["name"], "n3");
    assert!(rest["metadata"].get("continue").is_none());

    // The status subresource changes only `.status`.
    let patch = br#"{"status":{"capacity":{"nvidia.com/gpu":"4"}},"spec":{"unschedulable":true}}"#;
    let out = raw(
        &server,
        "PATCH",
        "/api/v1/nodes/n1/status",
        "application/merge-patch+json",
        patch,
    )
    .await;
    assert_eq!(out.0, 200);
    assert_eq!(out.1["status"]["capacity"]["nvidia.com/gpu"], "4");
    assert!(out.1["spec"].get("unschedulable").is_none());
}

#[tokio::test]
async fn injected_timeout_is_a_504_status() {
    let server = ApiServer::start().await.unwrap();
    let f = hami_testkit::Fault::Timeout(std::time::Duration::from_millis(20));
    server.faults().set_error_rate("list", 1.0, f);
    let got = raw(&server, "GET", "/api/v1/nodes", "application/json", b"").await;
    assert_status(&got, 504, "Timeout");
    assert_eq!(server.faults().requests()[0].verb, "list");
}
