//! `hamictl`: decode HAMi annotations, explain placements (on a snapshot or a live
//! cluster), show GPU usage, simulate traces. Installed as `kubectl-hami` too, it is
//! the kubectl plugin `kubectl hami` (the program name comes from `argv[0]`).

mod decode;
mod explain;
mod live;
mod monitor;
mod snapshot;
pub mod style;
mod top;
pub mod usage;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use hami_server::args::ClientArgs;

pub use style::Style;

/// Inspect and explain hami-rs / HAMi GPU-sharing decisions.
#[derive(Debug, Parser)]
#[command(
    name = "hamictl",
    version,
    about,
    long_about = None,
    after_help = "Exit status: 0 done (explain: the pod fits), 1 error, 2 bad flags, \
                  3 explain: no node fits."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Decode an annotation value into JSON (exit 1 with the error on bad input).
    #[command(subcommand)]
    Decode(DecodeCommand),
    /// Explain where the scheduler would place a pod, and why every other node fails:
    /// `explain pod NAME` on a live cluster, `explain --snapshot --pod` offline.
    Explain(ExplainArgs),
    /// Show what is allocated on the cluster's GPUs, read from the API server.
    #[command(subcommand)]
    Top(TopCommand),
    /// Replay a GPU trace (Alibaba openb format) against a placement policy and report
    /// the unallocated GPU share, as in the FGD paper's experiments.
    Simulate(hami_sim::SimulateArgs),
}

#[derive(Debug, Subcommand)]
pub enum DecodeCommand {
    /// A node register value (`hami.io/node-nvidia-register`): JSON or the legacy
    /// `id,count,mem,core,type,numa,health[,index,mode]:` form; with `--vendor`, the
    /// way that vendor's inventory is read (`docs/vendors.md`).
    NodeRegister {
        /// The annotation value; for vendors whose devices come from node capacity
        /// (Cambricon, Metax GPU, Mthreads, Enflame GCU, Kunlun XPU, AWS Neuron), the
        /// capacity as `resource=count,…`.
        value: String,
        /// The vendor key or name: dcu, amd, mlu, ascend910b3, mr-v100, metax-sgpu,
        /// drs, xpu, neuron, vastai, biren, … (default: NVIDIA, JSON or legacy).
        #[arg(long)]
        vendor: Option<String>,
        /// Node name, for vendors whose device IDs are derived from it.
        #[arg(long, default_value = "node")]
        node: String,
    },
    /// A pod device string (`hami.io/vgpu-devices-allocated`): one array per container.
    PodDevices {
        /// The annotation value.
        value: String,
    },
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum OutputFormat {
    Json,
    Yaml,
    /// Aligned columns.
    #[default]
    Text,
    /// Aligned columns, with more of them.
    Wide,
}

/// How the scheduler is set up: the flags of hami-scheduler that change a placement,
/// with its defaults.
#[derive(Debug, Clone, Args)]
pub struct PlacementArgs {
    /// Default node policy: binpack, spread or frag (fragmentation-aware); a pod's
    /// `hami.io/node-scheduler-policy` overrides it.
    #[arg(long, default_value = "binpack")]
    pub node_policy: hami_core::policy::NodePolicy,
    /// Default GPU policy: binpack, spread, mutex, numa, topology-aware, frag or a
    /// comma chain (a pod's `hami.io/gpu-scheduler-policy` overrides it).
    #[arg(long, default_value = "spread")]
    pub gpu_policy: hami_core::policy::GpuPolicy,
    /// HAMi `device-config.yaml` (resource names, defaults, memory factor).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Which vendors are switched on (`--enable-ascend`, `--enable-iluvatar`), as on the
    /// scheduler.
    #[command(flatten)]
    pub vendors: hami_server::args::VendorArgs,
    /// An unbound pod's GPU assignment counts this long after its `hami.io/vgpu-time`,
    /// as in hami-scheduler (same flag, same default).
    #[arg(long, default_value = "2m", value_parser = hami_server::flags::parse_go_duration, value_name = "DURATION")]
    pub reservation_timeout: std::time::Duration,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ExplainArgs {
    #[command(subcommand)]
    pub target: Option<ExplainTarget>,
    /// Cluster snapshot: what `kubectl get nodes,pods -A -o json` prints (a v1 List,
    /// JSON or YAML). Nodes carry register annotations; pods with
    /// `hami.io/vgpu-node` + `hami.io/vgpu-devices-allocated` count as usage by
    /// hami-scheduler's rules (bound there and not terminated, or unbound within the
    /// reservation timeout).
    #[arg(long, required = true)]
    pub snapshot: Option<PathBuf>,
    /// The pod to place (a Pod manifest, JSON or YAML).
    #[arg(long, required = true)]
    pub pod: Option<PathBuf>,
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Judge the snapshot at this time (Unix seconds) instead of now: unbound pods'
    /// assignments expire relative to it.
    #[arg(long)]
    pub now: Option<i64>,
}

#[derive(Debug, Subcommand)]
pub enum ExplainTarget {
    /// A pod of a live cluster (or, with --what-if, a manifest), explained against the
    /// nodes and pods the API server holds now.
    Pod(ExplainPodArgs),
}

#[derive(Debug, Args)]
pub struct ExplainPodArgs {
    /// The pod's name.
    #[arg(required_unless_present = "what_if", conflicts_with = "what_if")]
    pub name: Option<String>,
    /// Explain this Pod manifest (JSON or YAML) instead of an existing pod: where it
    /// would go if it were created now.
    #[arg(long, value_name = "FILE")]
    pub what_if: Option<PathBuf>,
    /// Namespace (default: the kubeconfig context's, else `default`).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Debug, Subcommand)]
pub enum TopCommand {
    /// Per GPU: memory, compute and slots allocated, and the pods holding it; with
    /// --monitor, what they really use.
    Gpus(TopGpusArgs),
}

#[derive(Debug, Args)]
pub struct TopGpusArgs {
    /// Only this node's GPUs.
    #[arg(long)]
    pub node: Option<String>,
    /// A node's hami-vgpu-monitor metrics URL (`http://HOST:9394/metrics`), for the
    /// memory the pods really use and their SM utilisation; repeat per node.
    #[arg(long, value_name = "URL")]
    pub monitor: Vec<String>,
    /// Read this snapshot (`kubectl get nodes,pods -A -o json`) instead of the API
    /// server.
    #[arg(long)]
    pub snapshot: Option<PathBuf>,
    #[command(flatten)]
    pub client: ClientArgs,
    /// HAMi `device-config.yaml` (resource names).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// An unbound pod's GPU assignment counts this long after its `hami.io/vgpu-time`,
    /// as in hami-scheduler.
    #[arg(long, default_value = "2m", value_parser = hami_server::flags::parse_go_duration, value_name = "DURATION")]
    pub reservation_timeout: std::time::Duration,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// How a command that ran ends, for scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done; for explain: the pod fits.
    Done,
    /// Explain: no node fits.
    NoFit,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::NoFit => 3,
        }
    }
}

/// What a command printed and how it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub stdout: String,
    pub exit: Exit,
}

impl Outcome {
    fn done(stdout: String) -> Self {
        Outcome {
            stdout,
            exit: Exit::Done,
        }
    }
}

/// Runs a command; `style` says whether to colour text output.
pub fn run(cli: &Cli, style: Style) -> anyhow::Result<Outcome> {
    match &cli.command {
        Command::Decode(DecodeCommand::NodeRegister {
            value,
            vendor,
            node,
        }) => decode::node_register(value, vendor.as_deref(), node).map(Outcome::done),
        Command::Decode(DecodeCommand::PodDevices { value }) => {
            decode::pod_devices(value).map(Outcome::done)
        }
        Command::Explain(args) => match &args.target {
            Some(ExplainTarget::Pod(pod)) => explain::run_live(pod, style),
            None => explain::run_snapshot(args, style),
        },
        Command::Top(TopCommand::Gpus(args)) => top::run(args, style).map(Outcome::done),
        Command::Simulate(args) => hami_sim::run_simulate(args).map(Outcome::done),
    }
}

/// `value` as `-o yaml` asks, else as pretty JSON; ends with a newline.
pub(crate) fn render_data<T: serde::Serialize>(
    value: &T,
    output: OutputFormat,
) -> anyhow::Result<String> {
    Ok(match output {
        OutputFormat::Yaml => serde_yaml_ng::to_string(value)?,
        OutputFormat::Json | OutputFormat::Text | OutputFormat::Wide => {
            format!("{}\n", serde_json::to_string_pretty(value)?)
        }
    })
}

/// The program name `argv[0]` asks for: `kubectl hami` when installed as a kubectl
/// plugin (`kubectl-hami`, by link or by name), else `hamictl`.
pub fn program_name(argv0: Option<&OsString>) -> &'static str {
    let file = argv0
        .map(std::path::Path::new)
        .and_then(|p| p.file_stem())
        .and_then(|s| s.to_str());
    match file {
        Some(name) if name.starts_with("kubectl-") => "kubectl hami",
        _ => "hamictl",
    }
}

/// The command line of `args` (with `argv[0]` first), named as [`program_name`] says.
pub fn parse(args: Vec<OsString>) -> Result<Cli, clap::Error> {
    let name = program_name(args.first());
    let command = Cli::command().name(name).bin_name(name);
    let matches = command.try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

/// [`parse`] and [`run`] for a caller already inside an async runtime (a test, a program
/// embedding hamictl): the live commands start a runtime of their own, which cannot
/// nest in the caller's, so the command runs on a thread of its own.
pub async fn run_from_async(args: Vec<OsString>, style: Style) -> anyhow::Result<Outcome> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let outcome = parse(args)
            .map_err(anyhow::Error::from)
            .and_then(|cli| run(&cli, style));
        let _ = answer.send(outcome);
    });
    answered
        .await
        .map_err(|_| anyhow::anyhow!("hamictl's thread ended without an answer"))?
}

/// The whole program: parse, run, print, exit with the status scripts read.
pub fn main_with(args: Vec<OsString>) -> ExitCode {
    let cli = match parse(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let style = Style::for_stdout();
    match run(&cli, style) {
        Ok(out) => {
            print!("{}", out.stdout);
            ExitCode::from(out.exit.code())
        }
        Err(e) => {
            eprintln!("hamictl: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[tokio::test]
    async fn run_from_async_answers_inside_a_runtime_and_reports_bad_flags() {
        let out = run_from_async(
            argv(&["hamictl", "decode", "pod-devices", ""]),
            Style::PLAIN,
        )
        .await
        .unwrap();
        assert_eq!(out.exit, Exit::Done);
        let bad = run_from_async(argv(&["hamictl", "top", "nothing"]), Style::PLAIN)
            .await
            .unwrap_err();
        assert!(
            bad.to_string()
                .contains("unrecognized subcommand 'nothing'"),
            "{bad}"
        );
    }
}
