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

/// An API server holding nodes n1, n2 and n3, and the first page (two nodes) of their list,
/// for the paginated-list tests.
async fn first_page_of_three_nodes() -> (ApiServer, serde_json::Value) {
    let server = ApiServer::start().await.unwrap();
    let (json, nodes) = ("application/json", "/api/v1/nodes");
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
    (server, first)
}

/// Every page of a paginated list reports the first page's resourceVersion, as the real
/// server's do: a client watching from it (kube-runtime's watcher starts at the last page's)
/// is sent the deletion of an object an earlier page listed. Reported at the live
/// resourceVersion, a deletion between two pages was never sent: the extender's pod relist
/// kept a deleted pod in its ledger for good (seed 5, `docs/architecture.md#chaos-run`).
#[tokio::test]
async fn later_pages_report_the_first_pages_resource_version() {
    let (server, first) = first_page_of_three_nodes().await;
    let json = "application/json";
    let nodes = "/api/v1/nodes";
    assert_eq!(first["items"][0]["metadata"]["name"], "n1");
    let rv = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    let q: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("continue", &token)
        .finish();
    // n1, on the first page, goes before the second page is read.
    let deleted = raw(&server, "DELETE", &format!("{nodes}/n1"), json, b"").await;
    assert_eq!(deleted.0, 200, "{:?}", deleted.1);
    assert!(server.store().resource_version() > rv.parse::<u64>().unwrap());
    let rest = raw(&server, "GET", &format!("{nodes}?limit=2&{q}"), json, b"")
        .await
        .1;
    assert_eq!(rest["items"][0]["metadata"]["name"], "n3");
    assert_eq!(
        rest["metadata"]["resourceVersion"].as_str(),
        Some(rv.as_str()),
        "a later page must carry the first page's resourceVersion, so a watch from it sends the deletion of n1"
    );
    // A continuation whose resourceVersion was compacted away is refused, as the real
    // server refuses it: the client lists afresh.
    server.store().compact();
    assert_status(
        &raw(&server, "GET", &format!("{nodes}?limit=2&{q}"), json, b"").await,
        410,
        "Expired",
    );
}

#[tokio::test]
async fn pagination_and_status_subresource() {
    let (server, first) = first_page_of_three_nodes().await;
    let json = "application/json";
    let nodes = "/api/v1/nodes";
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

#[tokio::test]
async fn injected_refusal_is_a_403_status_and_hooks_run_once_before_their_request() {
    let server = ApiServer::start().await.unwrap();
    server
        .faults()
        .set_error_rate("watch", 1.0, hami_testkit::Fault::Forbidden);
    let got = raw(
        &server,
        "GET",
        "/api/v1/pods?watch=1",
        "application/json",
        b"",
    )
    .await;
    assert_status(&got, 403, "Forbidden");
    server.faults().clear();

    let json = "application/json";
    let pods = "/api/v1/namespaces/default/pods";
    raw(&server, "POST", pods, json, br#"{"metadata":{"name":"a"}}"#).await;
    let store = server.store().clone();
    server.faults().before_next("patch", "/pods/a", move || {
        let pods = &hami_testkit::resources::PODS;
        let pre = hami_testkit::store::Preconditions::default();
        store.delete(pods, Some("default"), "a", &pre).unwrap();
    });
    // Not a patch of /pods/a: the hook waits.
    assert_eq!(
        raw(&server, "GET", &format!("{pods}/a"), json, b"").await.0,
        200
    );
    let patch = br#"{"metadata":{"labels":{"x":"y"}}}"#;
    let merge = "application/merge-patch+json";
    let gone = raw(&server, "PATCH", &format!("{pods}/a"), merge, patch).await;
    assert_status(&gone, 404, "NotFound");
    // Ran once: the next patch of a new `a` goes through.
    raw(&server, "POST", pods, json, br#"{"metadata":{"name":"a"}}"#).await;
    assert_eq!(
        raw(&server, "PATCH", &format!("{pods}/a"), merge, patch)
            .await
            .0,
        200
    );
}

/// POSTs `binding` to the Binding subresource of pod `item`.
async fn post_binding(server: &ApiServer, item: &str, binding: &str) -> (u16, Value) {
    let path = format!("{item}/binding");
    raw(
        server,
        "POST",
        &path,
        "application/json",
        binding.as_bytes(),
    )
    .await
}

/// Writes naming the UID of a pod that was deleted and re-created under the same name,
/// answered word for word as kube-apiserver answers them.
#[tokio::test]
async fn uid_preconditions_fail_as_kube_apiserver_fails_them() {
    let server = ApiServer::start().await.unwrap();
    let json = "application/json";
    let pods = "/api/v1/namespaces/default/pods";
    let created = raw(
        &server,
        "POST",
        pods,
        json,
        br#"{"metadata":{"name":"web-0"}}"#,
    )
    .await;
    let uid = created.1["metadata"]["uid"].as_str().unwrap().to_string();
    let rv = created.1["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let item = format!("{pods}/web-0");
    let dead = "0a7f3c5e-dead-4bee-8000-000000000001";

    // Merge and strategic patches: `metadata.uid` is immutable (422 Invalid).
    for ctype in [
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
    ] {
        let body = format!(r#"{{"metadata":{{"uid":"{dead}","annotations":{{"a":"b"}}}}}}"#);
        let got = raw(&server, "PATCH", &item, ctype, body.as_bytes()).await;
        assert_status(&got, 422, "Invalid");
        assert_eq!(
            got.1["message"],
            format!(
                "Pod \"web-0\" is invalid: metadata.uid: Invalid value: \"{dead}\": field is immutable"
            )
        );
        assert_eq!(
            got.1["details"],
            serde_json::json!({"name": "web-0", "kind": "Pod", "causes": [{
                "reason": "FieldValueInvalid",
                "message": format!("Invalid value: \"{dead}\": field is immutable"),
                "field": "metadata.uid"
            }]})
        );
    }
    // The status subresource too.
    let body = format!(r#"{{"metadata":{{"uid":"{dead}"}},"status":{{"phase":"Running"}}}}"#);
    let got = raw(
        &server,
        "PATCH",
        &format!("{item}/status"),
        "application/merge-patch+json",
        body.as_bytes(),
    )
    .await;
    assert_status(&got, 422, "Invalid");
    // The right UID is no obstacle.
    let body = format!(r#"{{"metadata":{{"uid":"{uid}","annotations":{{"a":"b"}}}}}}"#);
    let got = raw(
        &server,
        "PATCH",
        &item,
        "application/merge-patch+json",
        body.as_bytes(),
    )
    .await;
    assert_eq!(got.0, 200, "{}", got.1);

    // Updates: the body's UID is a storage precondition (409 Conflict).
    let storage = |what: &str, wanted: &str, stored: &str| {
        format!(
            "Operation cannot be fulfilled on pods \"web-0\": StorageError: invalid object, Code: 4, Key: /registry/pods/default/web-0, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {stored}"
        )
    };
    let body = format!(r#"{{"metadata":{{"name":"web-0","uid":"{dead}"}}}}"#);
    let got = raw(&server, "PUT", &item, json, body.as_bytes()).await;
    assert_status(&got, 409, "Conflict");
    assert_eq!(got.1["message"], storage("UID", dead, &uid));
    assert_eq!(
        got.1["details"],
        serde_json::json!({"name": "web-0", "kind": "pods"})
    );

    // Bindings: the same storage precondition, for the UID and the resourceVersion.
    let binding =
        format!(r#"{{"metadata":{{"name":"web-0","uid":"{dead}"}},"target":{{"name":"n1"}}}}"#);
    let got = post_binding(&server, &item, &binding).await;
    assert_status(&got, 409, "Conflict");
    assert_eq!(got.1["message"], storage("UID", dead, &uid));
    let current = raw(&server, "GET", &item, json, b"").await.1["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let binding = format!(
        r#"{{"metadata":{{"name":"web-0","uid":"{uid}","resourceVersion":"{rv}"}},"target":{{"name":"n1"}}}}"#
    );
    let got = post_binding(&server, &item, &binding).await;
    assert_status(&got, 409, "Conflict");
    assert_eq!(got.1["message"], storage("ResourceVersion", &rv, &current));

    // Deletes: `rest.BeforeDelete`'s wording, which names the kind.
    let body = format!(r#"{{"preconditions":{{"uid":"{dead}"}}}}"#);
    let got = raw(&server, "DELETE", &item, json, body.as_bytes()).await;
    assert_status(&got, 409, "Conflict");
    assert_eq!(
        got.1["message"],
        format!(
            "Operation cannot be fulfilled on Pod \"web-0\": the UID in the precondition ({dead}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        )
    );
    assert_eq!(
        got.1["details"],
        serde_json::json!({"name": "web-0", "kind": "Pod"})
    );
    let body = br#"{"preconditions":{"resourceVersion":"1"}}"#;
    let got = raw(&server, "DELETE", &item, json, body).await;
    assert_status(&got, 409, "Conflict");
    assert_eq!(
        got.1["message"],
        format!(
            "Operation cannot be fulfilled on Pod \"web-0\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({current}). The object might have been modified"
        )
    );
    // The right UID binds, then deletes.
    let binding =
        format!(r#"{{"metadata":{{"name":"web-0","uid":"{uid}"}},"target":{{"name":"n1"}}}}"#);
    let got = post_binding(&server, &item, &binding).await;
    assert_eq!(got.0, 201, "{}", got.1);
    let body = format!(r#"{{"preconditions":{{"uid":"{uid}"}},"gracePeriodSeconds":0}}"#);
    assert_eq!(
        raw(&server, "DELETE", &item, json, body.as_bytes()).await.0,
        200
    );
}
