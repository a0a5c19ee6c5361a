//! Discovery, OpenAPI, content negotiation (tables, metadata, YAML, protobuf
//! fallback), watch-list and pod defaulting, checked with the real `kube` client
//! where it has an API for them and over raw HTTP where it does not.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use hami_testkit::ApiServer;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope, verbs};
use kube::{Client, Config};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const KUBECTL_TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
const KUBECTL_DISCOVERY: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";

fn client(server: &ApiServer) -> Client {
    Client::try_from(Config::new(server.url().parse().unwrap())).unwrap()
}

/// One request; answers status, content type and body text.
async fn raw(
    server: &ApiServer,
    method: &str,
    path: &str,
    accept: &str,
    ctype: &str,
    body: &str,
) -> (u16, String, String) {
    let mut s = TcpStream::connect(server.addr()).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAccept: {accept}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    let code = text[9..12].parse().unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let ctype = head
        .lines()
        .find_map(|l| l.strip_prefix("content-type: "))
        .unwrap_or("")
        .to_string();
    (code, ctype, body.to_string())
}

async fn get_json(server: &ApiServer, path: &str, accept: &str) -> (u16, String, Value) {
    let (code, ctype, body) = raw(server, "GET", path, accept, "application/json", "").await;
    (
        code,
        ctype,
        serde_json::from_str(&body).unwrap_or(Value::Null),
    )
}

async fn seed(server: &ApiServer) {
    let nodes: Api<Node> = Api::all(client(server));
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "gpu-1", "labels": {"node-role.kubernetes.io/worker": ""}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "nodeInfo": {"kubeletVersion": "v1.36.0", "osImage": "x", "kernelVersion": "6",
                                "containerRuntimeVersion": "c", "machineID": "", "systemUUID": "",
                                "bootID": "", "kubeProxyVersion": "", "operatingSystem": "linux",
                                "architecture": "amd64"}}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(server), "default");
    for name in ["a", "b"] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
}

#[tokio::test]
async fn kube_discovery_legacy_and_aggregated() {
    let server = ApiServer::start().await.unwrap();
    for aggregated in [false, true] {
        let d = Discovery::new(client(&server));
        let d = if aggregated {
            d.run_aggregated().await.unwrap()
        } else {
            d.run().await.unwrap()
        };
        let (pods, caps) = d
            .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Pod"))
            .unwrap();
        assert_eq!(pods.plural, "pods");
        assert_eq!(caps.scope, Scope::Namespaced);
        assert!(caps.supports_operation(verbs::WATCH));
        assert!(caps.supports_operation(verbs::PATCH));
        let subs: Vec<&str> = caps
            .subresources
            .iter()
            .map(|(r, _)| r.plural.as_str())
            .collect();
        assert!(
            subs.contains(&"pods/binding") || subs.contains(&"binding"),
            "{subs:?}"
        );
        let (_, node_caps) = d
            .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Node"))
            .unwrap();
        assert_eq!(node_caps.scope, Scope::Cluster);
        let (lease, _) = d
            .resolve_gvk(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"))
            .unwrap();
        assert_eq!(lease.plural, "leases");
        assert!(
            d.resolve_gvk(&GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "MutatingWebhookConfiguration"
            ))
            .is_some()
        );
        assert!(d.get("apps").is_none(), "nothing unserved is advertised");
    }
}

#[tokio::test]
async fn version_and_discovery_documents() {
    let server = ApiServer::start().await.unwrap();
    let (code, _, v) = get_json(&server, "/version", "application/json").await;
    assert_eq!(code, 200);
    assert_eq!(v["major"], "1");
    assert!(v["gitVersion"].as_str().unwrap().starts_with("v1."));

    let (_, ctype, legacy) = get_json(&server, "/api", "application/json").await;
    assert_eq!(ctype, "application/json");
    assert_eq!(legacy["kind"], "APIVersions");
    assert_eq!(legacy["versions"], json!(["v1"]));
    assert_eq!(
        legacy["serverAddressByClientCIDRs"][0]["serverAddress"],
        server.addr().to_string()
    );

    let (_, ctype, agg) = get_json(&server, "/apis", KUBECTL_DISCOVERY).await;
    assert_eq!(
        ctype,
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(agg["kind"], "APIGroupDiscoveryList");
    assert_eq!(agg["apiVersion"], "apidiscovery.k8s.io/v2");

    let (_, _, group) = get_json(&server, "/apis/coordination.k8s.io", "").await;
    assert_eq!(group["kind"], "APIGroup");
    assert_eq!(
        group["preferredVersion"]["groupVersion"],
        "coordination.k8s.io/v1"
    );

    let (_, _, list) = get_json(&server, "/api/v1", "application/json").await;
    let pods = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods")
        .unwrap();
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(pods["categories"], json!(["all"]));
    assert_eq!(pods["singularName"], "pod");

    for missing in [
        "/apis/apps",
        "/apis/apps/v1",
        "/api/v2",
        "/openapi/v3/apis/apps/v1",
    ] {
        let (code, _, body) = get_json(&server, missing, "application/json").await;
        assert_eq!(code, 404, "{missing}");
        assert_eq!(body["kind"], "Status", "{missing}");
    }

    let (code, _, idx) = get_json(&server, "/openapi/v3", "application/json").await;
    assert_eq!(code, 200);
    let url = idx["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    let (code, _, doc) = get_json(&server, url, "application/json").await;
    assert_eq!(code, 200);
    assert_eq!(doc["openapi"], "3.0.0");
    assert!(doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"].is_object());
}

#[tokio::test]
async fn tables_for_lists_items_and_include_object() {
    let server = ApiServer::start().await.unwrap();
    seed(&server).await;
    let (code, ctype, t) =
        get_json(&server, "/api/v1/namespaces/default/pods", KUBECTL_TABLE).await;
    assert_eq!(code, 200);
    assert_eq!(ctype, "application/json");
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        cols,
        [
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates"
        ]
    );
    assert_eq!(t["rows"].as_array().unwrap().len(), 2);
    assert_eq!(t["rows"][0]["cells"][0], "a");
    assert_eq!(t["rows"][0]["cells"][2], "Pending");
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(t["rows"][0]["object"]["metadata"]["labels"]["app"], "a");
    assert!(t["metadata"]["resourceVersion"].as_str().is_some());

    let (_, _, one) = get_json(
        &server,
        "/api/v1/nodes/gpu-1?includeObject=Object",
        "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
    )
    .await;
    assert_eq!(one["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(one["rows"][0]["cells"][1], "Ready");
    assert_eq!(one["rows"][0]["cells"][2], "worker");
    assert_eq!(one["rows"][0]["object"]["kind"], "Node");

    let (_, _, none) = get_json(
        &server,
        "/api/v1/namespaces/default/pods?includeObject=None&labelSelector=app%3Db",
        KUBECTL_TABLE,
    )
    .await;
    assert_eq!(none["rows"].as_array().unwrap().len(), 1);
    assert!(none["rows"][0].get("object").is_none());

    let (code, _, bad) = get_json(&server, "/api/v1/pods?includeObject=All", KUBECTL_TABLE).await;
    assert_eq!((code, bad["reason"].as_str()), (400, Some("BadRequest")));

    // Other resources get their own columns; errors stay Status bodies.
    let (_, _, ns) = get_json(&server, "/api/v1/namespaces", KUBECTL_TABLE).await;
    assert_eq!(ns["columnDefinitions"][1]["name"], "Status");
    let (code, _, missing) = get_json(&server, "/api/v1/nodes/nope", KUBECTL_TABLE).await;
    assert_eq!((code, missing["kind"].as_str()), (404, Some("Status")));
}

#[tokio::test]
async fn metadata_yaml_and_protobuf_negotiation() {
    let server = ApiServer::start().await.unwrap();
    seed(&server).await;
    // The kube client's metadata API asks for PartialObjectMetadataList.
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let metas = pods.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(metas.items.len(), 2);
    assert_eq!(metas.items[0].metadata.name.as_deref(), Some("a"));
    let meta = pods.get_metadata("b").await.unwrap();
    assert_eq!(meta.metadata.labels.unwrap()["app"], "b");

    let (code, ctype, _) = get_json(
        &server,
        "/api/v1/nodes/gpu-1",
        "application/vnd.kubernetes.protobuf, application/json",
    )
    .await;
    assert_eq!((code, ctype.as_str()), (200, "application/json"));
    let (code, _, body) = get_json(
        &server,
        "/api/v1/nodes/gpu-1",
        "application/vnd.kubernetes.protobuf",
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (406, Some("NotAcceptable"))
    );

    let (code, ctype, yaml) = raw(
        &server,
        "GET",
        "/api/v1/nodes/gpu-1",
        "application/yaml",
        "",
        "",
    )
    .await;
    assert_eq!((code, ctype.as_str()), (200, "application/yaml"));
    let node: Value = serde_yaml_ng::from_str(&yaml).unwrap();
    assert_eq!(node["metadata"]["name"], "gpu-1");

    let body = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: from-yaml\nspec:\n  containers:\n  - name: c\n    image: x:1\n";
    let (code, _, created) = raw(
        &server,
        "POST",
        "/api/v1/namespaces/default/pods",
        "application/json",
        "application/yaml",
        body,
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let created: Value = serde_json::from_str(&created).unwrap();
    assert_eq!(created["metadata"]["name"], "from-yaml");
    let (code, _, _) = raw(
        &server,
        "POST",
        "/api/v1/namespaces/default/pods",
        "application/json",
        "application/vnd.kubernetes.protobuf",
        "\u{1}",
    )
    .await;
    assert_eq!(code, 415);
}

/// Reads NDJSON watch lines until `n` arrived.
async fn watch_lines(server: &ApiServer, path: &str, accept: &str, n: usize) -> Vec<Value> {
    let mut s = TcpStream::connect(server.addr()).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut r = BufReader::new(s);
    let mut out = Vec::new();
    let read = async {
        let mut line = String::new();
        while out.len() < n {
            line.clear();
            if r.read_line(&mut line).await.unwrap() == 0 {
                break;
            }
            // Skip HTTP head and chunk-size lines; keep the JSON ones.
            if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(line.trim()) {
                out.push(v);
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("watch lines in time");
    out
}

#[tokio::test]
async fn table_watch_sends_headers_once() {
    let server = ApiServer::start().await.unwrap();
    seed(&server).await;
    let lines = watch_lines(
        &server,
        "/api/v1/namespaces/default/pods?watch=true",
        KUBECTL_TABLE,
        2,
    )
    .await;
    assert_eq!(lines[0]["type"], "ADDED");
    assert_eq!(lines[0]["object"]["kind"], "Table");
    assert!(lines[0]["object"]["columnDefinitions"].is_array());
    assert!(lines[1]["object"].get("columnDefinitions").is_none());
    assert_eq!(lines[1]["object"]["rows"][0]["cells"][0], "b");
}

#[tokio::test]
async fn watch_list_ends_initial_events_with_a_bookmark() {
    let server = ApiServer::start().await.unwrap();
    seed(&server).await;
    let lines = watch_lines(
        &server,
        "/api/v1/namespaces/default/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan",
        "application/json",
        3,
    )
    .await;
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "ADDED", "BOOKMARK"]);
    assert_eq!(
        lines[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let (code, _, body) = get_json(
        &server,
        "/api/v1/pods?watch=1&sendInitialEvents=true",
        "application/json",
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")));

    // The kube client's own watch still works beside it.
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    pods.delete("a", &Default::default()).await.unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(20), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(ev, WatchEvent::Deleted(p) if p.metadata.name.as_deref() == Some("a")));
}

#[tokio::test]
async fn delete_collection_and_unknown_subresources() {
    let server = ApiServer::start().await.unwrap();
    seed(&server).await;
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let gone = pods
        .delete_collection(&Default::default(), &ListParams::default().labels("app=a"))
        .await
        .unwrap();
    let names: Vec<String> = gone
        .left()
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(names, ["a"]);
    let left: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(left, ["b"]);
    let (code, _, _) = get_json(&server, "/api/v1/namespaces/default/pods/b/exec", "").await;
    assert_eq!(code, 404);
    let (code, _, _) = get_json(
        &server,
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/x/status",
        "",
    )
    .await;
    assert_eq!(code, 404);
    // Dry runs are refused rather than applied.
    let (code, _, _) = raw(
        &server,
        "DELETE",
        "/api/v1/namespaces/default/pods/b?dryRun=All",
        "",
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 400);
    assert!(pods.get_opt("b").await.unwrap().is_some());
    // Namespaces have no deletecollection, as on the real server.
    let (code, _, _) = raw(
        &server,
        "DELETE",
        "/api/v1/namespaces",
        "",
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 405);
}

#[tokio::test]
async fn pods_are_defaulted_like_the_api_server_does() {
    let server = ApiServer::start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "gpu"},
        "spec": {"containers": [{"name": "c", "image": "cuda:12",
                 "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1", "memory": "1Gi"}}}]}
    }))
    .unwrap();
    let got = pods.create(&PostParams::default(), &pod).await.unwrap();
    let spec = got.spec.unwrap();
    assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    let c = &spec.containers[0];
    let requests = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert_eq!(requests["nvidia.com/gpu"].0, "2");
    assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
    assert_eq!(got.status.unwrap().qos_class.as_deref(), Some("Guaranteed"));
}
