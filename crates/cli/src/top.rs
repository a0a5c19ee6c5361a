//! `hamictl top gpus`: per GPU what is allocated and to whom, counted by
//! hami-scheduler's rule ([`crate::usage`]) and shown as its dashboard shows it
//! ([`hami_core::view`]); with `--monitor`, what the pods really use.

use hami_core::holding::Expiry;
use hami_core::vendor::VendorRegistry;
use hami_core::view::{GpuView, node_gpus};
use hami_server::device_config::load_device_config;
use serde::Serialize;

use crate::monitor::{InUse, in_use};
use crate::snapshot::load_snapshot;
use crate::style::{Style, Tone, table};
use crate::usage::snapshot_usage;
use crate::{OutputFormat, TopGpusArgs, live, render_data};

/// One GPU as `-o json|yaml` prints it.
#[derive(Debug, Serialize)]
struct TopGpu {
    #[serde(flatten)]
    gpu: GpuView,
    /// What the monitors report, with --monitor.
    #[serde(skip_serializing_if = "Option::is_none")]
    in_use: Option<InUse>,
}

#[derive(Debug, Serialize)]
struct TopGpus {
    gpus: Vec<TopGpu>,
}

pub fn run(args: &TopGpusArgs, style: Style) -> anyhow::Result<String> {
    let config = load_device_config(args.config.as_deref())?;
    let registry = VendorRegistry::from_config(&config);
    let (nodes, pods, monitored, mut warnings) = match &args.snapshot {
        Some(path) => {
            let snap = load_snapshot(path)?;
            let monitored = if args.monitor.is_empty() {
                None
            } else {
                Some(live::block_on(in_use(&args.monitor))??)
            };
            let warnings = snap
                .skipped
                .iter()
                .map(|s| format!("snapshot: skipped {s}"))
                .collect();
            (snap.nodes, snap.pods, monitored, warnings)
        }
        None => live::block_on(async {
            let client = live::connect(&args.client).await?;
            let (nodes, pods) = live::nodes_and_pods(&client).await?;
            let monitored = if args.monitor.is_empty() {
                None
            } else {
                Some(in_use(&args.monitor).await?)
            };
            anyhow::Ok((nodes, pods, monitored, Vec::new()))
        })??,
    };
    let now = chrono::Utc::now().timestamp();
    let ttl = i64::try_from(args.reservation_timeout.as_secs()).unwrap_or(i64::MAX);
    let usage = snapshot_usage(&nodes, &pods, &registry, Expiry::new(now, ttl), None);
    warnings.extend(usage.warnings.iter().cloned());
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    if let Some(name) = &args.node
        && usage.ledger.node(name).is_none()
    {
        if usage.candidates.contains(name) {
            anyhow::bail!(
                "node {name} has no GPUs to show: {}",
                usage.unusable_reason(name)
            );
        }
        anyhow::bail!("node {name} not found");
    }
    let gpus: Vec<TopGpu> = usage
        .ledger
        .nodes()
        .filter(|n| args.node.as_ref().is_none_or(|want| want == n.name()))
        .flat_map(|n| node_gpus(n, &usage.ledger.pods_on(n.name())))
        .map(|gpu| TopGpu {
            in_use: monitored
                .as_ref()
                .map(|m| m.get(&gpu.uuid).copied().unwrap_or_default()),
            gpu,
        })
        .collect();
    match args.output {
        OutputFormat::Json | OutputFormat::Yaml => render_data(&TopGpus { gpus }, args.output),
        OutputFormat::Text => Ok(render_text(&gpus, false, style)),
        OutputFormat::Wide => Ok(render_text(&gpus, true, style)),
    }
}

fn percent(used: u64, total: u64) -> u64 {
    if total == 0 {
        0
    } else {
        (u128::from(used) * 100 / u128::from(total)) as u64
    }
}

fn render_text(gpus: &[TopGpu], wide: bool, style: Style) -> String {
    if gpus.is_empty() {
        return "No GPUs registered.\n".to_string();
    }
    let monitored = gpus.iter().any(|g| g.in_use.is_some());
    let mut header = vec!["NODE", "INDEX"];
    if wide {
        header.extend(["UUID", "NUMA", "STATE"]);
    }
    header.extend(["MODEL", "MEMORY(MiB)", "MEMORY%", "CORES(%)", "SLOTS"]);
    if monitored {
        header.extend(["IN-USE(MiB)", "SM%"]);
    }
    header.push("PODS");
    let rows: Vec<Vec<String>> = gpus
        .iter()
        .map(|t| {
            let g = &t.gpu;
            let mut row = vec![g.node.clone(), g.index.to_string()];
            if wide {
                let state = match (g.healthy, g.cordoned) {
                    (false, _) => style.paint(Tone::Bad, "unhealthy"),
                    (true, true) => style.paint(Tone::Warn, "cordoned"),
                    (true, false) => "healthy".to_string(),
                };
                row.extend([g.uuid.clone(), g.numa.to_string(), state]);
            }
            let mem_pct = format!("{}%", percent(g.memory_mib.used, g.memory_mib.total));
            let mem_pct = match Style::load_tone(g.memory_mib.used, g.memory_mib.total) {
                Some(tone) => style.paint(tone, &mem_pct),
                None => mem_pct,
            };
            row.extend([
                g.model.clone(),
                format!("{}/{}", g.memory_mib.used, g.memory_mib.total),
                mem_pct,
                format!("{}/{}", g.cores.used, g.cores.total),
                format!("{}/{}", g.slots.used, g.slots.total),
            ]);
            if monitored {
                let u = t.in_use.unwrap_or_default();
                row.extend([u.memory_mib.to_string(), u.utilization.to_string()]);
            }
            let pods: Vec<String> = g
                .pods
                .iter()
                .map(|p| {
                    let name = format!("{}/{}", p.namespace, p.name);
                    if wide {
                        format!("{name}({}MiB,{}%)", p.memory_mib, p.cores)
                    } else {
                        name
                    }
                })
                .collect();
            row.push(if pods.is_empty() {
                "<none>".to_string()
            } else {
                pods.join(",")
            });
            row
        })
        .collect();
    table(&header, &rows)
}
