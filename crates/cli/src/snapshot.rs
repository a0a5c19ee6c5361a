//! Reading `kubectl get … -o json|yaml` output and Pod manifests.

use std::path::Path;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::Value;

/// The nodes and pods of a cluster snapshot.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    /// Items that were skipped, with why (printed as warnings).
    pub skipped: Vec<String>,
}

/// Parses JSON, or YAML when the text is not JSON.
fn parse_document(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    match serde_json::from_str::<Value>(&text) {
        Ok(v) => Ok(v),
        Err(json_err) => serde_yaml_ng::from_str::<Value>(&text).map_err(|yaml_err| {
            anyhow::anyhow!(
                "{} is neither JSON ({json_err}) nor YAML ({yaml_err})",
                path.display()
            )
        }),
    }
}

pub fn load_snapshot(path: &Path) -> anyhow::Result<Snapshot> {
    let doc = parse_document(path)?;
    let items = match doc.get("kind").and_then(Value::as_str) {
        Some("List") | Some("NodeList") | Some("PodList") => doc
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        Some("Node") | Some("Pod") => vec![doc],
        other => bail!(
            "{}: expected a v1 List (kubectl get nodes,pods -A -o json), got kind {:?}",
            path.display(),
            other
        ),
    };
    let mut snap = Snapshot::default();
    for (i, item) in items.into_iter().enumerate() {
        let kind = item
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        match kind.as_str() {
            "Node" => match serde_json::from_value::<Node>(item) {
                Ok(n) => snap.nodes.push(n),
                Err(e) => snap.skipped.push(format!("item {i} (Node): {e}")),
            },
            "Pod" => match serde_json::from_value::<Pod>(item) {
                Ok(p) => snap.pods.push(p),
                Err(e) => snap.skipped.push(format!("item {i} (Pod): {e}")),
            },
            other => snap
                .skipped
                .push(format!("item {i}: kind {other:?} is neither Node nor Pod")),
        }
    }
    Ok(snap)
}

pub fn load_pod(path: &Path) -> anyhow::Result<Pod> {
    let doc = parse_document(path)?;
    match doc.get("kind").and_then(Value::as_str) {
        Some("Pod") | None => {}
        Some(other) => bail!(
            "{}: expected a Pod manifest, got kind {other}",
            path.display()
        ),
    }
    serde_json::from_value(doc).with_context(|| format!("{}: not a valid Pod", path.display()))
}
