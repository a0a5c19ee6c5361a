//! `hamictl simulate` arguments and driver. The CLI crate mounts
//! [`SimulateArgs`] and prints whatever [`run_simulate`] returns.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rayon::prelude::*;
use serde::Serialize;

use crate::error::SimError;
use crate::metrics::{mean_sd, median};
use crate::policy::POLICY_NAMES;
use crate::svg::{Series, plot};
use crate::{Experiment, SeedRun};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

/// Replay a GPU trace against the placement policies (FGD paper methodology).
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// Node list CSV (sn, cpu_milli, memory_mib, gpu, model); `.csv.gz` is read as gzip.
    #[arg(long, value_name = "CSV", required_unless_present = "list_policies")]
    pub nodes: Option<PathBuf>,
    /// Pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec]); `.csv.gz` is read as gzip.
    #[arg(long, value_name = "CSV", required_unless_present = "list_policies")]
    pub pods: Option<PathBuf>,
    /// Policy name, a comma list, or `all` (see --list-policies).
    #[arg(long, default_value = "fgd")]
    pub policy: String,
    /// Seeds: `A..B` (inclusive) or a comma list.
    #[arg(long, default_value = "42..51")]
    pub seeds: String,
    /// Total GPU request of the arrival stream as a multiple of capacity.
    #[arg(long, default_value_t = 1.3)]
    pub tune: f64,
    /// Tasks per GPU (HAMi slots); 20 never binds on openb (min share 50 milli).
    #[arg(long, default_value_t = 20)]
    pub slots: u16,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub output: OutputFormat,
    /// Print the policy names, one per line, and exit.
    #[arg(long)]
    pub list_policies: bool,
    /// Write an SVG plot of the median unallocated-vs-arrived curves.
    #[arg(long, value_name = "FILE")]
    pub curve_out: Option<PathBuf>,
    /// Golden arrival order (replaces the seeded stream).
    #[arg(long, value_name = "FILE", requires = "replay_ranks")]
    pub replay_arrivals: Option<PathBuf>,
    /// Golden node ranks (with --replay-arrivals).
    #[arg(long, value_name = "FILE", requires = "replay_arrivals")]
    pub replay_ranks: Option<PathBuf>,
    /// Worker threads across runs (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// The trace's name for reports: the pod list's file stem, with `x.csv` and
/// `x.csv.gz` naming the same trace.
fn trace_name(pods: &Path) -> String {
    let plain = if pods.extension().is_some_and(|e| e == "gz") {
        pods.with_extension("")
    } else {
        pods.to_path_buf()
    };
    plain.file_stem().map_or_else(
        || pods.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

/// Parses `A..B` (inclusive) or `a,b,c`.
pub fn parse_seeds(s: &str) -> Result<Vec<u64>, SimError> {
    let bad = || SimError::BadSeeds(s.to_string());
    let s = s.trim();
    if let Some((a, b)) = s.split_once("..") {
        let a: u64 = a.trim().parse().map_err(|_| bad())?;
        let b: u64 = b
            .trim()
            .trim_start_matches('=')
            .parse()
            .map_err(|_| bad())?;
        if b < a || b - a > 100_000 {
            return Err(bad());
        }
        return Ok((a..=b).collect());
    }
    let seeds = s
        .split(',')
        .map(|p| p.trim().parse::<u64>().map_err(|_| bad()))
        .collect::<Result<Vec<_>, _>>()?;
    if seeds.is_empty() {
        Err(bad())
    } else {
        Ok(seeds)
    }
}

fn parse_policies(s: &str) -> Result<Vec<String>, SimError> {
    if s.trim() == "all" {
        return Ok(POLICY_NAMES.iter().map(|p| p.to_string()).collect());
    }
    // Policies are separated by `;` when a tuning spec (which uses commas) is given.
    let sep = if s.contains(';') || s.contains('=') {
        ';'
    } else {
        ','
    };
    s.split(sep)
        .map(|p| {
            let p = p.trim();
            if POLICY_NAMES.contains(&p)
                || p.starts_with("hami-frag:")
                || p.starts_with("engine-frag:")
            {
                Ok(p.to_string())
            } else {
                Err(SimError::UnknownPolicy(p.to_string()))
            }
        })
        .collect()
}

#[derive(Debug, Serialize)]
struct RunJson {
    seed: u64,
    unallocated_pct_at_100: f64,
    unallocated_pct_at_130: f64,
    frag_rate_pct_at_100: f64,
    elapsed_ms: f64,
}

/// Failed tasks of one shape, averaged over the runs.
#[derive(Debug, Serialize)]
struct FailedJson {
    cpu_milli: i64,
    num_gpu: u32,
    gpu_milli: i32,
    spec: String,
    /// Mean failures per run up to arrived = 100%.
    mean_count_at_100: f64,
    /// Mean failures per run over the whole run.
    mean_count: f64,
    /// Mean failed GPU per run up to arrived = 100%, in GPUs.
    mean_gpus_at_100: f64,
}

/// The failed-task histogram over `runs`, largest failed GPU demand at x = 100 first.
fn failed_histogram(runs: &[SeedRun]) -> Vec<FailedJson> {
    let n = runs.len().max(1) as f64;
    let mut sum: BTreeMap<(i64, u32, i32, &str), (usize, usize)> = BTreeMap::new();
    for f in runs.iter().flat_map(|r| &r.failed) {
        let e = sum
            .entry((f.cpu_milli, f.num_gpu, f.gpu_milli, f.spec.as_str()))
            .or_default();
        e.0 += f.count_at_100;
        e.1 += f.count;
    }
    let mut out: Vec<FailedJson> = sum
        .into_iter()
        .map(
            |((cpu_milli, num_gpu, gpu_milli, spec), (at_100, all))| FailedJson {
                cpu_milli,
                num_gpu,
                gpu_milli,
                spec: spec.to_string(),
                mean_count_at_100: at_100 as f64 / n,
                mean_count: all as f64 / n,
                mean_gpus_at_100: at_100 as f64 * f64::from(num_gpu) * f64::from(gpu_milli)
                    / 1000.0
                    / n,
            },
        )
        .collect();
    out.sort_by(|a, b| {
        b.mean_gpus_at_100
            .total_cmp(&a.mean_gpus_at_100)
            .then(b.mean_count.total_cmp(&a.mean_count))
    });
    out
}

#[derive(Debug, Serialize)]
struct PolicyJson {
    policy: String,
    trace: String,
    runs: Vec<RunJson>,
    mean_unallocated_pct_at_100: f64,
    sd_unallocated_pct_at_100: f64,
    mean_unallocated_pct_at_130: f64,
    sd_unallocated_pct_at_130: f64,
    /// Mean over seeds of the fragmentation rate (100·F / idle GPU) at x = 100.
    mean_frag_rate_pct_at_100: f64,
    /// Median over seeds of the unallocated % at x = 0..=130.
    median_curve: Vec<Option<f64>>,
    /// The failed-task histogram, mean per run.
    failed_tasks: Vec<FailedJson>,
}

/// Failed-task shapes shown per policy in text output.
pub const FAILED_SHOWN: usize = 8;

/// Curve points shown in text output (`docs/simulator.md#events-and-curves`).
pub const CURVE_POINTS: &[usize] = &[85, 90, 92, 94, 95, 96, 100, 110, 120, 130];

/// Rounds to 2 places the way every report of the simulator shows numbers.
pub(crate) fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Runs the command and returns exactly the text to print.
pub fn run_simulate(args: &SimulateArgs) -> anyhow::Result<String> {
    if args.list_policies {
        return Ok(POLICY_NAMES.iter().map(|p| format!("{p}\n")).collect());
    }
    let nodes = args.nodes.as_ref().context("--nodes is required")?;
    let pods = args.pods.as_ref().context("--pods is required")?;
    if !(args.tune.is_finite() && args.tune > 0.0) {
        return Err(
            SimError::Invalid(format!("--tune must be positive, got {}", args.tune)).into(),
        );
    }
    if args.slots == 0 {
        return Err(SimError::Invalid("--slots must be at least 1".to_string()).into());
    }
    let policies = parse_policies(&args.policy)?;
    let seeds = parse_seeds(&args.seeds)?;
    let mut exp = Experiment::load(nodes, pods)?;
    let replay = match (&args.replay_arrivals, &args.replay_ranks) {
        (Some(a), Some(r)) => Some(exp.load_replay(a, r)?),
        _ => None,
    };
    let seeds = if replay.is_some() {
        seeds.into_iter().take(1).collect()
    } else {
        seeds
    };
    let trace = trace_name(pods);

    let jobs: Vec<(String, u64)> = policies
        .iter()
        .flat_map(|p| seeds.iter().map(move |&s| (p.clone(), s)))
        .collect();
    let run_one = |(policy, seed): &(String, u64)| -> Result<SeedRun, SimError> {
        match &replay {
            Some((arr, ranks)) => exp.run_arrivals(policy, *seed, arr, ranks, args.slots),
            None => exp.run_seed(policy, *seed, args.tune, args.slots),
        }
    };
    let threads = args.threads.unwrap_or(0);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("building thread pool")?;
    let results: Vec<SeedRun> =
        pool.install(|| jobs.par_iter().map(run_one).collect::<Result<Vec<_>, _>>())?;

    let mut reports = Vec::new();
    for (pi, policy) in policies.iter().enumerate() {
        let runs = &results[pi * seeds.len()..(pi + 1) * seeds.len()];
        let at100: Vec<f64> = runs.iter().map(|r| r.curve.unalloc_at(100)).collect();
        let at130: Vec<f64> = runs.iter().map(|r| r.curve.unalloc_at(130)).collect();
        let (m100, sd100) = mean_sd(&at100);
        let (m130, sd130) = mean_sd(&at130);
        let rate100: Vec<f64> = runs.iter().map(|r| r.curve.frag_rate_at(100)).collect();
        let (rate100, _) = mean_sd(&rate100);
        let median_curve = (0..=crate::metrics::MAX_X)
            .map(|x| {
                let m = median(
                    &runs
                        .iter()
                        .map(|r| r.curve.unalloc_at(x))
                        .collect::<Vec<_>>(),
                );
                m.is_finite().then_some(r2(m))
            })
            .collect();
        reports.push(PolicyJson {
            policy: policy.clone(),
            trace: trace.clone(),
            runs: runs
                .iter()
                .map(|r| RunJson {
                    seed: r.seed,
                    unallocated_pct_at_100: r.curve.unalloc_at(100),
                    unallocated_pct_at_130: r.curve.unalloc_at(130),
                    frag_rate_pct_at_100: r2(r.curve.frag_rate_at(100)),
                    elapsed_ms: r2(r.output.elapsed_ms),
                })
                .collect(),
            mean_unallocated_pct_at_100: r2(m100),
            sd_unallocated_pct_at_100: r2(sd100),
            mean_unallocated_pct_at_130: r2(m130),
            sd_unallocated_pct_at_130: r2(sd130),
            mean_frag_rate_pct_at_100: r2(rate100),
            median_curve,
            failed_tasks: failed_histogram(runs),
        });
    }

    if let Some(path) = &args.curve_out {
        let series: Vec<Series> = reports
            .iter()
            .map(|r| Series {
                label: r.policy.clone(),
                ys: r
                    .median_curve
                    .iter()
                    .map(|y| y.unwrap_or(f64::NAN))
                    .collect(),
            })
            .collect();
        let svg = plot(
            &format!(
                "{trace}: unallocated GPU % (median of {} seeds)",
                seeds.len()
            ),
            &series,
            75,
            130,
        );
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    }

    match args.output {
        OutputFormat::Json => {
            let mut s = if reports.len() == 1 {
                serde_json::to_string_pretty(&reports[0])?
            } else {
                serde_json::to_string_pretty(&reports)?
            };
            s.push('\n');
            Ok(s)
        }
        OutputFormat::Text => Ok(text_report(&trace, &reports)),
    }
}

fn text_report(trace: &str, reports: &[PolicyJson]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "trace: {trace}");
    let _ = writeln!(
        out,
        "{:<14} {:>17} {:>17} {:>15} {:>12}",
        "policy", "unalloc@100 %", "unalloc@130 %", "frag rate@100 %", "ms/run"
    );
    for r in reports {
        let ms = r.runs.iter().map(|x| x.elapsed_ms).sum::<f64>() / r.runs.len().max(1) as f64;
        let _ = writeln!(
            out,
            "{:<14} {:>9.2} ± {:<5.2} {:>9.2} ± {:<5.2} {:>15.2} {:>12.0}",
            r.policy,
            r.mean_unallocated_pct_at_100,
            r.sd_unallocated_pct_at_100,
            r.mean_unallocated_pct_at_130,
            r.sd_unallocated_pct_at_130,
            r.mean_frag_rate_pct_at_100,
            ms
        );
    }
    let _ = writeln!(out, "\nmedian unallocated GPU % by arrived %:");
    let _ = write!(out, "{:<14}", "policy");
    for x in CURVE_POINTS {
        let _ = write!(out, " {x:>6}");
    }
    out.push('\n');
    for r in reports {
        let _ = write!(out, "{:<14}", r.policy);
        for &x in CURVE_POINTS {
            match r.median_curve.get(x).copied().flatten() {
                Some(v) => {
                    let _ = write!(out, " {v:>6.2}");
                }
                None => {
                    let _ = write!(out, " {:>6}", "-");
                }
            }
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "\nfailed tasks up to arrived = 100% (mean per run; the {FAILED_SHOWN} shapes losing most GPU):"
    );
    let _ = writeln!(
        out,
        "{:<14} {:>8} {:>5} {:>6} {:<22} {:>8} {:>8} {:>10}",
        "policy", "cpu", "gpus", "milli", "spec", "@100", "@130", "GPUs@100"
    );
    for r in reports {
        if r.failed_tasks.is_empty() {
            let _ = writeln!(out, "{:<14} (none)", r.policy);
        }
        for f in r.failed_tasks.iter().take(FAILED_SHOWN) {
            let spec = if f.spec.is_empty() { "any" } else { &f.spec };
            let _ = writeln!(
                out,
                "{:<14} {:>8} {:>5} {:>6} {:<22} {:>8.1} {:>8.1} {:>10.2}",
                r.policy,
                f.cpu_milli,
                f.num_gpu,
                f.gpu_milli,
                spec,
                f.mean_count_at_100,
                f.mean_count,
                f.mean_gpus_at_100
            );
        }
    }
    if reports.iter().any(|r| r.runs.len() > 1) {
        let _ = writeln!(out, "\nper seed (unalloc@100 / @130 / ms):");
        for r in reports {
            let cells: Vec<String> = r
                .runs
                .iter()
                .map(|x| {
                    format!(
                        "{}:{:.2}/{:.2}/{:.0}",
                        x.seed, x.unallocated_pct_at_100, x.unallocated_pct_at_130, x.elapsed_ms
                    )
                })
                .collect();
            let _ = writeln!(out, "{:<14} {}", r.policy, cells.join(" "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_syntax() {
        assert_eq!(parse_seeds("42..51").map(|v| v.len()).ok(), Some(10));
        assert_eq!(parse_seeds("1,3, 5").ok(), Some(vec![1, 3, 5]));
        assert!(parse_seeds("5..1").is_err());
        assert!(parse_seeds("x").is_err());
    }
}
