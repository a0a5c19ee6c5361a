//! `hamictl explain`: run the placement engine on a snapshot, offline.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Context;
use hami_core::engine::{PodPlan, SchedulerDefaults, allocation_annotations, place};
use hami_core::holding::Expiry;
use hami_core::model::ContainerDevice;
use hami_core::pod::pod_name;
use hami_core::vendor::VendorRegistry;
use hami_server::device_config::load_device_config;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use crate::snapshot::{load_pod, load_snapshot};
use crate::usage::{SnapshotUsage, snapshot_usage};
use crate::{ExplainArgs, OutputFormat};

pub fn run(args: &ExplainArgs) -> anyhow::Result<String> {
    let config = load_device_config(args.config.as_deref())?.with_switches(args.vendors.switches());
    let registry = VendorRegistry::from_config(&config);
    let snap = load_snapshot(&args.snapshot)?;
    let pod = load_pod(&args.pod)?;
    let now = match args.now {
        Some(t) => t,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64),
    };
    let expiry = Expiry::new(
        now,
        i64::try_from(args.reservation_timeout.as_secs()).unwrap_or(i64::MAX),
    );
    let SnapshotUsage {
        ledger,
        candidates,
        warnings: usage_warnings,
    } = snapshot_usage(
        &snap.nodes,
        &snap.pods,
        &registry,
        expiry,
        pod.metadata.uid.as_deref(),
    );
    let warnings: Vec<String> = snap
        .skipped
        .iter()
        .map(|s| format!("snapshot: skipped {s}"))
        .chain(usage_warnings)
        .collect();

    let defaults = SchedulerDefaults {
        node_policy: args.node_policy,
        gpu_policy: args.gpu_policy.clone(),
    };
    let plan = PodPlan::new(&pod, &registry, &defaults)
        .with_context(|| format!("pod {} cannot be scheduled", pod_name(&pod)))?;
    for w in &warnings {
        eprintln!("warning: {w}");
    }

    let placement = if plan.is_empty() {
        None
    } else {
        Some(place(&plan, &registry, &ledger, &candidates))
    };

    let chosen = placement.as_ref().and_then(|p| p.chosen.as_ref());
    let containers: Vec<Vec<ContainerDevice>> = match chosen {
        None => Vec::new(),
        Some((_, fit)) => (0..plan.requests.containers.len())
            .map(|i| {
                fit.devices
                    .values()
                    .flat_map(|per_container| per_container.get(i).cloned().unwrap_or_default())
                    .collect()
            })
            .collect(),
    };
    let annotations = chosen
        .map(|(node, fit)| allocation_annotations(&registry, &plan, node, fit, now))
        .unwrap_or_default();
    let failed = placement
        .as_ref()
        .map(|p| p.failed.clone())
        .unwrap_or_default();
    let scores = placement
        .as_ref()
        .map(|p| p.scores.clone())
        .unwrap_or_default();

    match args.output {
        OutputFormat::Json => {
            let out = json!({
                "node": chosen.map(|(n, _)| n.clone()),
                "containers": containers,
                "annotations": annotations,
                "failed_nodes": failed,
                "scores": scores,
            });
            Ok(format!("{}\n", serde_json::to_string_pretty(&out)?))
        }
        OutputFormat::Text => Ok(render_text(TextReport {
            pod: &pod,
            plan: &plan,
            candidates: &candidates,
            chosen: chosen.map(|(n, _)| n.as_str()),
            containers: &containers,
            failed: &failed,
            scores: &scores,
        })),
    }
}

struct TextReport<'a> {
    pod: &'a Pod,
    plan: &'a PodPlan,
    candidates: &'a [String],
    chosen: Option<&'a str>,
    containers: &'a [Vec<ContainerDevice>],
    failed: &'a BTreeMap<String, String>,
    scores: &'a BTreeMap<String, f32>,
}

fn render_text(r: TextReport<'_>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "pod {}  (node policy {}, gpu policy {})",
        pod_name(r.pod),
        r.plan.node_policy,
        r.plan.gpu_policy.as_str()
    );
    for c in &r.plan.requests.containers {
        for (vendor, req) in &c.by_vendor {
            let mem = match (req.mem_mib, req.mem_percent) {
                (0, Some(percent)) => format!("{percent}% memory"),
                (mib, _) => format!("{mib} MiB"),
            };
            let _ = writeln!(
                s,
                "  container {:<20} {} x{} {}, {}% cores",
                c.name, vendor, req.count, mem, req.cores
            );
        }
    }
    if r.plan.is_empty() {
        let _ = writeln!(s, "the pod asks for no managed device: any node will do");
        return s;
    }
    let width = r
        .candidates
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(s, "\n{:<width$}  RESULT", "NODE");
    for n in r.candidates {
        let line = match (r.scores.get(n), r.failed.get(n)) {
            (Some(score), _) => {
                let mark = if Some(n.as_str()) == r.chosen {
                    "  <- chosen"
                } else {
                    ""
                };
                format!("fits, node score {score:.2}{mark}")
            }
            (None, Some(reason)) => format!("no: {reason}"),
            (None, None) => "not evaluated".to_string(),
        };
        let _ = writeln!(s, "{n:<width$}  {line}");
    }
    match r.chosen {
        None => {
            let _ = writeln!(
                s,
                "\nno node fits: {} of {} nodes do not meet the request",
                r.failed.len(),
                r.candidates.len()
            );
        }
        Some(node) => {
            let _ = writeln!(s, "\nplaced on {node}:");
            for (c, devs) in r.plan.requests.containers.iter().zip(r.containers) {
                if devs.is_empty() {
                    continue;
                }
                for d in devs {
                    let _ = writeln!(
                        s,
                        "  {:<20} {} (index {}) {} MiB, {}% cores",
                        c.name, d.uuid, d.idx, d.mem_mib, d.cores
                    );
                }
            }
        }
    }
    s
}
