//! The dashboard on the admin port and `hamictl` against the same cluster: the pending
//! pod's reasons are the ones /filter gave, the node hamictl and the dashboard name is
//! the one /filter chooses, and the per-GPU numbers agree.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::ffi::OsString;

use common::{Cluster, Knobs, chosen, gpu_pod, gpus, node_object};
use hami_server::test_support::{TestResponse, http_request, request};
use hamictl::{Exit, Style};
use hyper::StatusCode;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

async fn get(c: &Cluster, path: &str) -> TestResponse {
    http_request(c.ext.admin, request("GET", path, "").unwrap())
        .await
        .unwrap()
}

async fn get_json(c: &Cluster, path: &str) -> Value {
    let resp = get(c, path).await;
    assert_eq!(resp.status, StatusCode::OK, "{path}: {}", resp.text());
    serde_json::from_slice(&resp.body).unwrap()
}

/// `hamictl ARGS --kubeconfig K -o json` against the cluster: its JSON and exit.
async fn hamictl(kubeconfig: &std::path::Path, args: &[&str]) -> (Value, Exit) {
    let mut argv: Vec<OsString> = std::iter::once("hamictl")
        .chain(args.iter().copied())
        .map(OsString::from)
        .collect();
    argv.extend([
        "--kubeconfig".into(),
        kubeconfig.into(),
        "-o".into(),
        "json".into(),
    ]);
    let out = hamictl::run_from_async(argv, Style::PLAIN).await.unwrap();
    (serde_json::from_str(&out.stdout).unwrap(), out.exit)
}

/// The overview once `ready` accepts it: it is rebuilt at most once a second.
async fn overview_when(c: &Cluster, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..250 {
        let doc = get_json(c, "/api/v1/cluster").await;
        if ready(&doc) {
            return doc;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the overview never showed {what}");
}

fn kubeconfig(c: &Cluster) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        hami_testkit::emulator::kubeconfig(&c.server.url()),
    )
    .unwrap();
    file
}

fn as_map(v: &Value) -> BTreeMap<String, Value> {
    v.as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// A cluster of two GPU nodes and one whose registration is garbage.
async fn cluster() -> Cluster {
    install_crypto();
    let c = Cluster::start(
        &[("n1", gpus("n1", 2, 16_000)), ("n2", gpus("n2", 1, 8_000))],
        Knobs::default(),
    )
    .await;
    let mut broken = node_object("broken", &gpus("broken", 1, 8_000), true);
    broken
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("hami.io/node-nvidia-register".into(), "{{garbage".into());
    Api::<Node>::all(c.client.clone())
        .create(&PostParams::default(), &broken)
        .await
        .unwrap();
    // The extender has seen the broken node once the dashboard lists it.
    overview_when(&c, "the broken node", |d| {
        d["nodes"].as_array().unwrap().len() == 3
    })
    .await;
    c
}

#[tokio::test]
async fn a_pending_pod_is_explained_with_the_reasons_filter_gave() {
    let c = cluster().await;
    let kc = kubeconfig(&c);
    c.create(&gpu_pod(
        "big",
        &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"})],
        json!({}),
    ))
    .await;
    let refused = c.filter("big").await;
    assert_eq!(refused.error, "");
    let failed = refused.failed_nodes.clone().unwrap();
    assert_eq!(failed["n1"], "2/2 CardInsufficientMemory");
    assert!(
        failed["broken"].starts_with("node unregistered: hami.io/node-nvidia-register is invalid"),
        "{failed:?}"
    );

    // The dashboard: the same reasons, node by node, and /filter's summary.
    let explained = get_json(&c, "/api/v1/pods/default/big/explain").await;
    let dashboard_failed: BTreeMap<String, String> =
        serde_json::from_value(explained["failed_nodes"].clone()).unwrap();
    assert_eq!(dashboard_failed, failed);
    assert_eq!(explained["node"], Value::Null);
    assert_eq!(explained["asks_for_devices"], true);
    let event = c.wait_event("big", "FilteringFailed").await;
    assert_eq!(
        explained["refused"]["summary"].as_str(),
        event.message.as_deref()
    );
    let overview = overview_when(&c, "the pending pod", |d| {
        !d["pending"].as_array().unwrap().is_empty()
    })
    .await;
    let pending = overview["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["name"], "big");
    assert_eq!(pending[0]["nodes"], 3);

    // hamictl, reading the API server: the same reasons, and exit status 3.
    let (out, exit) = hamictl(kc.path(), &["explain", "pod", "big", "-n", "default"]).await;
    assert_eq!(exit, Exit::NoFit);
    let hamictl_failed: BTreeMap<String, String> =
        serde_json::from_value(out["failed_nodes"].clone()).unwrap();
    assert_eq!(hamictl_failed, failed);
    assert_eq!(out["pod"], "default/big");

    // Deleted, the pod leaves the pending list.
    c.pods()
        .delete("big", &DeleteParams::default())
        .await
        .unwrap();
    overview_when(&c, "no pending pod after the delete", |d| {
        d["pending"].as_array().unwrap().is_empty()
    })
    .await;
}

#[tokio::test]
async fn hamictl_and_the_dashboard_name_the_node_filter_chooses() {
    let c = cluster().await;
    let kc = kubeconfig(&c);
    let limits =
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "6000", "nvidia.com/gpucores": "20"});
    c.create(&gpu_pod("first", std::slice::from_ref(&limits), json!({})))
        .await;
    let first = c.schedule("first").await;
    c.finish_allocation("first", &first).await;
    c.create(&gpu_pod("next", &[limits], json!({}))).await;

    let explained = get_json(&c, "/api/v1/pods/default/next/explain").await;
    let (out, exit) = hamictl(kc.path(), &["explain", "pod", "next"]).await;
    assert_eq!(exit, Exit::Done);
    assert_eq!(out["node"], explained["node"]);
    assert_eq!(as_map(&out["scores"]), as_map(&explained["scores"]));
    assert_eq!(
        as_map(&out["failed_nodes"]),
        as_map(&explained["failed_nodes"])
    );
    assert_eq!(out["containers"], explained["containers"]);
    // --what-if: the same pod as a manifest explains the same way.
    let manifest = tempfile::NamedTempFile::new().unwrap();
    let pod = c.pods().get("next").await.unwrap();
    std::fs::write(manifest.path(), serde_json::to_string(&pod).unwrap()).unwrap();
    let (what_if, _) = hamictl(
        kc.path(),
        &[
            "explain",
            "pod",
            "--what-if",
            manifest.path().to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(what_if["node"], out["node"]);

    let f = c.filter("next").await;
    assert_eq!(chosen(&f).as_deref(), explained["node"].as_str());
    // Placed, it is explained by where it holds its GPUs.
    let placed = get_json(&c, "/api/v1/pods/default/next/explain").await;
    assert_eq!(placed["holds_on"], explained["node"]);
    assert!(placed["failed_nodes"].as_object().unwrap().is_empty());
}

#[tokio::test]
async fn the_overview_the_node_page_and_hamictl_top_agree() {
    let c = cluster().await;
    let kc = kubeconfig(&c);
    for (name, mem, cores) in [("a", "4000", "30"), ("b", "6000", "50"), ("c", "7000", "0")] {
        c.create(&gpu_pod(
            name,
            &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": mem, "nvidia.com/gpucores": cores})],
            json!({}),
        ))
        .await;
        let node = c.schedule(name).await;
        c.finish_allocation(name, &node).await;
    }
    let overview = overview_when(&c, "three pods", |d| d["summary"]["slots"]["used"] == 3).await;
    let s = &overview["summary"];
    assert_eq!(s["nodes"], 2);
    assert_eq!(s["gpus"], 3);
    assert_eq!(s["memory_mib"], json!({"used": 17_000, "total": 40_000}));
    assert_eq!(s["cores"], json!({"used": 80, "total": 300}));
    assert_eq!(s["slots"]["used"], 3);
    let rows = overview["nodes"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["broken", "n1", "n2"]);
    assert!(
        rows[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("node unregistered")
    );
    let pods: u64 = rows.iter().map(|n| n["pods"].as_u64().unwrap()).sum();
    assert_eq!(pods, 3);

    // hamictl top gpus reads the API server; the dashboard the extender's ledger.
    let (top, exit) = hamictl(kc.path(), &["top", "gpus"]).await;
    assert_eq!(exit, Exit::Done);
    let mut from_nodes = Vec::new();
    for node in ["n1", "n2"] {
        let doc = get_json(&c, &format!("/api/v1/nodes/{node}")).await;
        assert_eq!(doc["name"], node);
        from_nodes.extend(doc["devices"].as_array().unwrap().iter().cloned());
    }
    assert_eq!(top["gpus"].as_array().unwrap(), &from_nodes);
    let on_gpus: usize = from_nodes
        .iter()
        .map(|g| g["pods"].as_array().unwrap().len())
        .sum();
    assert_eq!(on_gpus, 3);
    let (one, _) = hamictl(kc.path(), &["top", "gpus", "--node", "n2"]).await;
    assert!(
        one["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["node"] == "n2")
    );
}

#[tokio::test]
async fn the_dashboard_is_read_only_cached_and_locked_down() {
    let c = cluster().await;
    let page = get(&c, "/ui").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.text().contains("<script src=\"/ui/app.js\""));
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert_eq!(page.headers["x-content-type-options"], "nosniff");
    for (path, kind) in [
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ] {
        let asset = get(&c, path).await;
        assert_eq!(asset.status, StatusCode::OK, "{path}");
        assert!(
            asset.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind)
        );
    }

    let first = get(&c, "/api/v1/cluster").await;
    let etag = first.headers["etag"].to_str().unwrap().to_string();
    let mut again = request("GET", "/api/v1/cluster", "").unwrap();
    again
        .headers_mut()
        .insert("if-none-match", etag.parse().unwrap());
    let unchanged = http_request(c.ext.admin, again).await.unwrap();
    assert_eq!(unchanged.status, StatusCode::NOT_MODIFIED);
    assert!(unchanged.body.is_empty());

    let post = http_request(
        c.ext.admin,
        request("POST", "/api/v1/cluster", "{}").unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(
        get(&c, "/api/v1/nodes/nowhere").await.status,
        StatusCode::NOT_FOUND
    );
    let missing = get(&c, "/api/v1/pods/default/ghost/explain").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(
        missing.text().contains("default/ghost"),
        "{}",
        missing.text()
    );
    assert_eq!(
        get(&c, "/api/v1/elsewhere").await.status,
        StatusCode::NOT_FOUND
    );
    // The admin routes are still there.
    assert_eq!(get(&c, "/readyz").await.status, StatusCode::OK);
}
