//! `cargo xtask <task>`: repository tasks that need more than a shell line.

mod bench;
mod bench_backlog;
mod bench_cycle;
mod bench_monitor;
mod demo;
mod image_env;

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "hami-rs repository tasks"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Run the built-in demo cluster and print what happened to a set of example pods.
    #[command(
        long_about = "Run the built-in demo cluster and print what happened to a set of example pods.\n\n\
        Everything runs in this process, with no Kubernetes cluster and no GPU: the test kit's API \
        server emulator; the real hami-webhook over HTTPS, called by the emulator through a \
        MutatingWebhookConfiguration (failurePolicy Fail); the real hami-scheduler extender, called \
        by a kube-scheduler emulator configured like the Helm chart (filter, bind, nodeCacheCapable, \
        managed resources ignoredByScheduler); and three nodes (2 x A100 80GB, 4 x T4 16GB, \
        1 x H100 80GB, different NUMA layouts), each with a kubelet emulator, the real \
        hami-device-plugin-nvidia on fake GPUs, a node agent that admits bound pods (calling \
        the plugin's GetPreferredAllocation and Allocate) and sets their status, a fake workload \
        that writes HAMi-core shared regions for the running containers and the real \
        hami-vgpu-monitor reading them.\n\n\
        The example pods ask for slices by memory (MiB and percent) and compute, a whole card, two \
        GPUs, several containers, a GPU model, NUMA binding and per-pod policies, and one cannot \
        fit anywhere. They are submitted one at a time the way a user submits them. The report \
        shows where each pod landed, the GPUs (UUID, MiB, compute %) and the environment and \
        mounts each container got from Allocate, why the misfit stays Pending, per-GPU usage, and \
        per container the memory in use, its limit and the SM utilisation the monitors report next \
        to what the scheduler granted. \
        Every pod is checked against what it asked for (annotations, bind phase, node lock, exact \
        env and mounts), every GPU against its capacity and every container's reported use against \
        its grant (limit = grant, used <= limit): the exit status is 1 when anything \
        misbehaved."
    )]
    Demo {
        /// Print one JSON document instead of the text report: `ok`, `nodes`, `pods`
        /// (name, node, phase, reason, containers[{name, devices[{uuid, usedmem,
        /// usedcores}], env}]), `gpus` (per-GPU usage), `usage` (per container device: the
        /// monitors' used/limit bytes and utilisation next to the grant), `violations`,
        /// `problems`.
        #[arg(long, env = "HAMI_DEMO_JSON")]
        json: bool,
        /// Keep the demo cluster running after the report and print the URL of
        /// hami-scheduler's dashboard (and a kubeconfig for hamictl / kubectl), until
        /// Ctrl-C.
        #[arg(long, env = "HAMI_DEMO_UI")]
        ui: bool,
        /// Component logs on stderr (RUST_LOG syntax, e.g. `info` or
        /// `hami_scheduler=debug,warn`); RUST_LOG is used when unset, else `error`.
        #[arg(long, env = "HAMI_DEMO_LOG")]
        log_level: Option<String>,
    },
    /// Chaos at cluster scale on the demo cluster: pods of mixed shapes submitted at a
    /// steady rate while API writes fail, pods are deleted at every stage (and re-created
    /// under the same name), watches drop, history is compacted and every component
    /// restarts (gracefully and killed). Prints a summary; exit status 1 on any violation
    /// of the invariants, which are read from the API server's objects.
    Chaos {
        /// Pods to submit (the full run: 5,000).
        #[arg(long, default_value_t = 5_000)]
        pods: usize,
        /// Nodes of 8 GPUs each (default: one per 50 pods).
        #[arg(long)]
        nodes: Option<usize>,
        /// Seeds to run, one after the other (same seed, same draws).
        #[arg(long = "seed", default_values_t = [1u64])]
        seeds: Vec<u64>,
        /// Pods submitted per second.
        #[arg(long, default_value_t = 100.0)]
        rate: f64,
        /// Share (0 to 1) of API writes that fail.
        #[arg(long, default_value_t = 0.05)]
        fault_rate: f64,
        /// Chaos events (deletions, restarts, watch drops) per second of submission.
        #[arg(long, default_value_t = 2.0)]
        events_per_second: f64,
        /// Component logs on stderr (RUST_LOG syntax); RUST_LOG is used when unset, else
        /// `error`.
        #[arg(long, env = "HAMI_CHAOS_LOG")]
        log_level: Option<String>,
    },
    /// Benchmark /filter of the real hami-scheduler binary against the API server
    /// emulator with pre-filled caches. Prints one JSON object per scenario:
    /// scenario, nodes, gpus_per_node, pods, filter_p50_us, filter_p99_us, rss_mib, ...;
    /// the -scraped scenario also times /filter while /metrics is scraped in a loop
    /// (filter_p99_scraped_us, filter_p99_delta_us, scrapes, scrape_p50_ms, scrape_bytes)
    /// and while it is scraped at a fixed interval (filter_p99_overlapping_us: the calls
    /// that ran while a scrape did; filter_p99_overlap_delta_us).
    Bench {
        /// Scenarios to run (50x8-1k, 100x16-5k, 5000x8-50k, 5000x8-50k-scraped with /metrics
        /// scraped in a loop, 100x16-5k-frag, 5000x8-50k-frag with node and GPU policy
        /// frag, and 100x16-5k-cycle: whole scheduling cycles, filter, bind and the device
        /// plugin's release, reporting pods_per_sec); all when none given.
        #[arg(long = "scenario")]
        scenarios: Vec<String>,
        /// Timed /filter calls per scenario.
        #[arg(long, default_value_t = 2_000)]
        requests: usize,
        /// Untimed calls first.
        #[arg(long, default_value_t = 200)]
        warmup: usize,
        /// Use this hami-scheduler binary instead of building it in release mode.
        #[arg(long)]
        binary: Option<PathBuf>,
        /// -scraped: milliseconds from one scrape's start to the next in the interval
        /// blocks (Prometheus's scrape_interval).
        #[arg(long, default_value_t = 1_000)]
        scrape_interval_ms: u64,
        /// -scraped: timed /filter calls in the interval blocks, all together.
        #[arg(long, default_value_t = 12_000)]
        interval_requests: usize,
    },
    /// Rerun the simulator over every openb variant and seed and rewrite the result
    /// tables of docs/simulator.md (between its `sim-tables` markers) and
    /// docs/simulator-default.svg. Deterministic: a rerun writes the same tables.
    SimTables {
        /// Seeds: `A..B` (inclusive) or a comma list.
        #[arg(long, default_value = "42..51")]
        seeds: String,
        /// Worker threads (0: all cores).
        #[arg(long, default_value_t = 0)]
        threads: usize,
    },
    /// Benchmark the real hami-vgpu-monitor binary on one node with many containers
    /// (HAMi-core regions on disk, pods in the API server emulator). Prints one JSON
    /// object: scan_ms_p50/max (as the monitor reports its scans), scrape_ms_p50/p99 and
    /// scrape_bytes of /metrics, rss_mib and rss_peak_mib (from /proc).
    BenchMonitor {
        /// Containers on the node.
        #[arg(long, default_value_t = 1_000)]
        containers: usize,
        /// GPUs per container.
        #[arg(long, default_value_t = 4)]
        devices: usize,
        /// Timed scrapes of /metrics.
        #[arg(long, default_value_t = 50)]
        scrapes: usize,
        /// Use this hami-vgpu-monitor binary instead of building it in release mode.
        #[arg(long)]
        binary: Option<PathBuf>,
    },
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Builds a binary of the workspace in release mode; its path.
fn build_release(package: &str, bin: &str) -> anyhow::Result<PathBuf> {
    let root = workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&root)
        .args(["build", "--release", "--quiet", "-p", package, "--bin", bin])
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build --release -p {package} failed");
    }
    let target =
        std::env::var("CARGO_TARGET_DIR").map_or_else(|_| root.join("target"), PathBuf::from);
    Ok(target.join("release").join(bin))
}

/// Component logs on stderr: `log_level`, else RUST_LOG, else errors only.
fn init_logs(log_level: Option<String>) -> anyhow::Result<()> {
    let filter = log_level
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "error".into());
    hami_server::trace::init_tracing(hami_server::trace::LogFormat::Text, Some(&filter))
        .context("setting up logs")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.task {
        Task::Demo {
            json,
            ui,
            log_level,
        } => {
            init_logs(log_level)?;
            if demo::run(json, ui).await? {
                Ok(())
            } else {
                std::process::exit(1);
            }
        }
        Task::Chaos {
            pods,
            nodes,
            seeds,
            rate,
            fault_rate,
            events_per_second,
            log_level,
        } => {
            init_logs(log_level)?;
            let mut ok = true;
            for seed in seeds {
                let spec = hami_e2e::chaos::ChaosSpec {
                    pods,
                    nodes: nodes.unwrap_or_else(|| pods.div_ceil(50).max(1)),
                    rate,
                    fault_rate,
                    events_per_second,
                    ..hami_e2e::chaos::ChaosSpec::full(seed)
                };
                let summary = hami_e2e::chaos::run(&spec).await?;
                print!("{}", summary.render_text());
                ok &= summary.ok();
            }
            if ok {
                Ok(())
            } else {
                std::process::exit(1);
            }
        }
        Task::Bench {
            scenarios,
            requests,
            warmup,
            binary,
            scrape_interval_ms,
            interval_requests,
        } => {
            let binary = match binary {
                Some(b) => b,
                None => build_release("hami-scheduler", "hami-scheduler")?,
            };
            let args = bench::BenchArgs {
                requests,
                warmup,
                binary,
                scrape_interval: std::time::Duration::from_millis(scrape_interval_ms),
                interval_requests,
            };
            let selected: Vec<_> = bench::SCENARIOS
                .iter()
                .filter(|s| scenarios.is_empty() || scenarios.iter().any(|n| n == s.name))
                .collect();
            if selected.is_empty() {
                bail!("no such scenario; choose from {}", bench::scenario_names());
            }
            for s in selected {
                let line = bench::run_scenario(s, &args).await?;
                println!("{line}");
            }
            Ok(())
        }
        Task::SimTables { seeds, threads } => {
            let binary = build_release("hami-sim", "sim-tables")?;
            let root = workspace_root();
            let status = Command::new(binary)
                .current_dir(&root)
                .arg(format!("--seeds={seeds}"))
                .arg(format!("--threads={threads}"))
                .status()
                .context("running sim-tables")?;
            if !status.success() {
                bail!("sim-tables failed");
            }
            Ok(())
        }
        Task::BenchMonitor {
            containers,
            devices,
            scrapes,
            binary,
        } => {
            if !(1..=16).contains(&devices) {
                bail!("--devices must be 1 to 16 (a HAMi-core region holds 16)");
            }
            let binary = match binary {
                Some(b) => b,
                None => build_release("hami-vgpu-monitor", "hami-vgpu-monitor")?,
            };
            let args = bench_monitor::MonitorBenchArgs {
                containers,
                devices,
                scrapes,
                binary,
            };
            println!("{}", bench_monitor::run(&args).await?);
            Ok(())
        }
    }
}
