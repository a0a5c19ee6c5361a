//! `hamictl`: decode HAMi annotations, explain placements, simulate traces.

mod decode;
mod explain;
mod snapshot;
pub mod usage;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Inspect and explain hami-rs / HAMi GPU-sharing decisions.
#[derive(Debug, Parser)]
#[command(name = "hamictl", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Decode an annotation value into JSON (exit 1 with the error on bad input).
    #[command(subcommand)]
    Decode(DecodeCommand),
    /// Explain where the scheduler would place a pod, and why every other node fails.
    Explain(ExplainArgs),
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
    #[default]
    Text,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Cluster snapshot: what `kubectl get nodes,pods -A -o json` prints (a v1 List,
    /// JSON or YAML). Nodes carry register annotations; pods with
    /// `hami.io/vgpu-node` + `hami.io/vgpu-devices-allocated` count as usage by
    /// hami-scheduler's rules (bound there and not terminated, or unbound within the
    /// reservation timeout).
    #[arg(long)]
    pub snapshot: PathBuf,
    /// The pod to place (a Pod manifest, JSON or YAML).
    #[arg(long)]
    pub pod: PathBuf,
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
    #[command(flatten)]
    pub vendors: hami_server::args::VendorArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// An unbound pod's GPU assignment counts this long after its `hami.io/vgpu-time`,
    /// as in hami-scheduler (same flag, same default).
    #[arg(long, default_value = "2m", value_parser = hami_server::flags::parse_go_duration, value_name = "DURATION")]
    pub reservation_timeout: std::time::Duration,
    /// Judge the snapshot at this time (Unix seconds) instead of now: unbound pods'
    /// assignments expire relative to it.
    #[arg(long)]
    pub now: Option<i64>,
}

/// Runs a command and returns what to print on stdout.
pub fn run(cli: &Cli) -> anyhow::Result<String> {
    match &cli.command {
        Command::Decode(DecodeCommand::NodeRegister {
            value,
            vendor,
            node,
        }) => decode::node_register(value, vendor.as_deref(), node),
        Command::Decode(DecodeCommand::PodDevices { value }) => decode::pod_devices(value),
        Command::Explain(args) => explain::run(args),
        Command::Simulate(args) => hami_sim::run_simulate(args),
    }
}
