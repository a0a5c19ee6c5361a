//! `cargo xtask <task>`: repository tasks that need more than a shell line.

mod bench;

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "hami-rs repository tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Benchmark /filter of the real hami-scheduler binary against the API server
    /// emulator with pre-filled caches. Prints one JSON object per scenario:
    /// scenario, nodes, gpus_per_node, pods, filter_p50_us, filter_p99_us, rss_mib, ...
    Bench {
        /// Scenarios to run (50x8-1k, 100x16-5k, 5000x8-50k); all when none given.
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.task {
        Task::Bench {
            scenarios,
            requests,
            warmup,
            binary,
        } => {
            let binary = match binary {
                Some(b) => b,
                None => build_release("hami-scheduler", "hami-scheduler")?,
            };
            let args = bench::BenchArgs {
                requests,
                warmup,
                binary,
            };
            let selected: Vec<_> = bench::SCENARIOS
                .iter()
                .filter(|s| scenarios.is_empty() || scenarios.iter().any(|n| n == s.name))
                .collect();
            if selected.is_empty() {
                bail!("no such scenario; choose from 50x8-1k, 100x16-5k, 5000x8-50k");
            }
            for s in selected {
                let line = bench::run_scenario(s, &args).await?;
                println!("{line}");
            }
            Ok(())
        }
    }
}
