//! `hamictl explain`: run the placement engine for one pod, on a snapshot (offline) or
//! on what the API server holds now, and say node by node why it fits or not.
//!
//! Usage is counted by hami-scheduler's rule ([`crate::usage`]) and the pod is placed by
//! its engine ([`hami_core::engine::place_explained`]): the reasons are the ones
//! FailedNodes gives for the same nodes and pods.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Context;
use hami_core::engine::{PodPlan, SchedulerDefaults, allocation_annotations, place_explained};
use hami_core::explain::Explanation;
use hami_core::holding::Expiry;
use hami_core::pod::{bound_node, pod_name};
use hami_core::vendor::VendorRegistry;
use hami_server::device_config::load_device_config;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde::Serialize;

use crate::snapshot::{load_pod, load_snapshot};
use crate::style::{Style, Tone, table};
use crate::usage::snapshot_usage;
use crate::{
    Exit, ExplainArgs, ExplainPodArgs, Outcome, OutputFormat, PlacementArgs, live, render_data,
};

/// `explain --snapshot S --pod P`.
pub fn run_snapshot(args: &ExplainArgs, style: Style) -> anyhow::Result<Outcome> {
    let (Some(snapshot), Some(pod)) = (&args.snapshot, &args.pod) else {
        anyhow::bail!("explain needs --snapshot and --pod, or `explain pod NAME`");
    };
    // The config first: a bad one is reported before anything else is read.
    let registry = registry(&args.placement)?;
    let snap = load_snapshot(snapshot)?;
    let pod = load_pod(pod)?;
    let warnings = snap
        .skipped
        .iter()
        .map(|s| format!("snapshot: skipped {s}"))
        .collect();
    explain(Inputs {
        registry: &registry,
        nodes: &snap.nodes,
        pods: &snap.pods,
        pod: &pod,
        placement: &args.placement,
        now: args.now.unwrap_or_else(unix_now),
        warnings,
        output: args.output,
        style,
        live: false,
    })
}

/// `explain pod NAME` / `explain pod --what-if FILE` against the API server.
pub fn run_live(args: &ExplainPodArgs, style: Style) -> anyhow::Result<Outcome> {
    let registry = registry(&args.placement)?;
    let manifest = args.what_if.as_deref().map(load_pod).transpose()?;
    live::block_on(async {
        let client = live::connect(&args.client).await?;
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        let pod = match (&manifest, &args.name) {
            (Some(m), _) => {
                let mut pod = m.clone();
                if args.namespace.is_some() || pod.metadata.namespace.is_none() {
                    pod.metadata.namespace = Some(namespace.clone());
                }
                pod
            }
            (None, Some(name)) => live::pod(&client, &namespace, name).await?,
            (None, None) => anyhow::bail!("explain pod needs a pod name or --what-if FILE"),
        };
        let (nodes, pods) = live::nodes_and_pods(&client).await?;
        explain(Inputs {
            registry: &registry,
            nodes: &nodes,
            pods: &pods,
            pod: &pod,
            placement: &args.placement,
            now: unix_now(),
            warnings: Vec::new(),
            output: args.output,
            style,
            live: true,
        })
    })?
}

fn registry(placement: &PlacementArgs) -> anyhow::Result<VendorRegistry> {
    let config = load_device_config(placement.config.as_deref())?
        .with_switches(placement.vendors.switches());
    Ok(VendorRegistry::from_config(&config))
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

struct Inputs<'a> {
    registry: &'a VendorRegistry,
    nodes: &'a [Node],
    pods: &'a [Pod],
    pod: &'a Pod,
    placement: &'a PlacementArgs,
    /// Unix seconds: when unbound decisions are judged, and the decision time written.
    now: i64,
    /// Printed on stderr before the answer.
    warnings: Vec<String>,
    output: OutputFormat,
    style: Style,
    /// Read from the API server: the pod's current state is worth showing.
    live: bool,
}

/// What `-o json|yaml` prints.
#[derive(Debug, Serialize)]
struct Report<'a> {
    pod: String,
    #[serde(flatten)]
    explanation: &'a Explanation,
    /// The annotations hami-scheduler would write for the chosen node.
    annotations: BTreeMap<String, String>,
}

fn explain(inputs: Inputs<'_>) -> anyhow::Result<Outcome> {
    let Inputs {
        registry,
        nodes,
        pods,
        pod,
        placement,
        now,
        mut warnings,
        output,
        style,
        live,
    } = inputs;
    let expiry = Expiry::new(
        now,
        i64::try_from(placement.reservation_timeout.as_secs()).unwrap_or(i64::MAX),
    );
    // The pod's own holding does not count against it.
    let usage = snapshot_usage(nodes, pods, registry, expiry, pod.metadata.uid.as_deref());
    warnings.extend(usage.warnings.iter().cloned());
    let defaults = SchedulerDefaults {
        node_policy: placement.node_policy,
        gpu_policy: placement.gpu_policy.clone(),
    };
    let plan = PodPlan::new(pod, registry, &defaults)
        .with_context(|| format!("pod {} cannot be scheduled", pod_name(pod)))?;
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let placement = (!plan.is_empty()).then(|| {
        place_explained(&plan, registry, &usage.ledger, &usage.candidates, |n| {
            usage.unusable_reason(n)
        })
    });
    let explanation = placement
        .as_ref()
        .map(|p| Explanation::of(&plan, p))
        .unwrap_or_default();
    let annotations = placement
        .as_ref()
        .and_then(|p| p.chosen.as_ref())
        .map(|(node, fit)| allocation_annotations(registry, &plan, node, fit, now))
        .unwrap_or_default();
    let exit = if plan.is_empty() || explanation.fits() {
        Exit::Done
    } else {
        Exit::NoFit
    };
    let stdout = match output {
        OutputFormat::Json | OutputFormat::Yaml => render_data(
            &Report {
                pod: pod_name(pod),
                explanation: &explanation,
                annotations,
            },
            output,
        )?,
        OutputFormat::Text | OutputFormat::Wide => render_text(&TextReport {
            pod,
            plan: &plan,
            candidates: &usage.candidates,
            explanation: &explanation,
            style,
            live,
        }),
    };
    Ok(Outcome { stdout, exit })
}

struct TextReport<'a> {
    pod: &'a Pod,
    plan: &'a PodPlan,
    candidates: &'a [String],
    explanation: &'a Explanation,
    style: Style,
    live: bool,
}

fn render_text(r: &TextReport<'_>) -> String {
    let mut s = String::new();
    let style = r.style;
    let _ = writeln!(
        s,
        "pod {}  (node policy {}, gpu policy {})",
        style.paint(Tone::Strong, &pod_name(r.pod)),
        r.plan.node_policy,
        r.plan.gpu_policy.as_str()
    );
    if r.live {
        let phase = hami_core::pod::phase(r.pod).unwrap_or("without a phase");
        let _ = match (&r.pod.metadata.uid, bound_node(r.pod)) {
            (None, _) => writeln!(s, "  what if: not in the cluster"),
            (Some(_), Some(node)) => writeln!(
                s,
                "  now {phase} on {node}; where it would go if scheduled again:"
            ),
            (Some(_), None) => writeln!(s, "  now {phase}, not bound to a node"),
        };
    }
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
    let e = r.explanation;
    let rows: Vec<Vec<String>> = r
        .candidates
        .iter()
        .map(|n| {
            let result = match (e.scores.get(n), e.failed_nodes.get(n)) {
                (Some(score), _) if e.node.as_deref() == Some(n.as_str()) => style.paint(
                    Tone::Good,
                    &format!("fits, node score {score:.2}  <- chosen"),
                ),
                (Some(score), _) => format!("fits, node score {score:.2}"),
                (None, Some(reason)) => style.paint(Tone::Bad, &format!("no: {reason}")),
                (None, None) => "not evaluated".to_string(),
            };
            vec![n.clone(), result]
        })
        .collect();
    s.push('\n');
    s.push_str(&table(&["NODE", "RESULT"], &rows));
    match &e.node {
        None => {
            let _ = writeln!(
                s,
                "\n{}: {} of {} nodes do not meet the request",
                style.paint(Tone::Bad, "no node fits"),
                e.failed_nodes.len(),
                r.candidates.len()
            );
        }
        Some(node) => {
            let _ = writeln!(s, "\nplaced on {}:", style.paint(Tone::Strong, node));
            for (c, devs) in r.plan.requests.containers.iter().zip(&e.containers) {
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
