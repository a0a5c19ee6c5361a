//! The Grafana dashboards in `deploy/grafana` query only series our components export:
//! every metric name in their queries is declared by a running vGPU monitor or the
//! extender of the demo cluster.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::Path;

use hami_e2e::{ClusterSpec, DemoCluster, Timing};
use serde_json::Value;

/// Every query string of a dashboard (`expr` of targets, `query` of variables).
fn queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "query", Value::String(q)) => out.push(q.clone()),
                    _ => queries(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

/// Names of our series in a query (identifiers starting with `hami_`).
fn series(query: &str) -> impl Iterator<Item = String> + '_ {
    query
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|t| t.starts_with("hami_"))
        .map(str::to_string)
}

/// Metric names a /metrics page declares (`# TYPE <name> <type>`).
fn declared(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn every_series_the_dashboards_query_is_exported() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana");
    let mut wanted: BTreeSet<(String, String)> = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()));
        assert!(
            doc["panels"].as_array().is_some_and(|p| !p.is_empty()),
            "{}: no panels",
            path.display()
        );
        let mut qs = Vec::new();
        queries(&doc, &mut qs);
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        wanted.extend(qs.iter().flat_map(|q| series(q)).map(|s| (file.clone(), s)));
    }
    assert!(
        !wanted.is_empty(),
        "no dashboard queries found in {}",
        dir.display()
    );

    let cluster = DemoCluster::start(ClusterSpec::demo().timing(Timing::fast()))
        .await
        .unwrap();
    let mut exported = declared(&cluster.extender_metrics().await.unwrap());
    for node in cluster.nodes() {
        let addr = node.monitor_addr().expect("every demo node runs a monitor");
        let (code, body) = hami_e2e::http::get(addr, "/metrics").await.unwrap();
        assert_eq!(code, 200, "{body}");
        exported.extend(declared(&body));
    }
    cluster.shutdown().await.unwrap();
    // The check itself can fail: these come from the monitor and the extender.
    assert!(
        exported.contains("hami_vgpu_memory_used_bytes")
            && exported.contains("hami_gpu_memory_allocated_bytes")
    );
    let missing: Vec<_> = wanted
        .iter()
        .filter(|(_, s)| !exported.contains(s))
        .collect();
    assert!(
        missing.is_empty(),
        "dashboard series nobody exports: {missing:?}"
    );
}
