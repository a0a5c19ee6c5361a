//! Command line: HAMi's monitor flags and environment (`--metrics-bind-address`,
//! `--legacy-metrics`, `HOOK_PATH`, `NODE_NAME`, `HAMI_RESYNC_INTERVAL`, `KUBECONFIG`),
//! plus hami-rs settings; every flag also reads an environment variable.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};
use hami_device_plugin_nvidia::cli::BackendArgs;
use hami_server::args::{AdminArgs, ClientArgs, LogArgs, MonitorMetricsBindAddress};
use hami_server::flags::{DURATION_HELP, parse_go_duration};

#[derive(Debug, Clone, Parser)]
#[command(
    name = "hami-vgpu-monitor",
    version,
    about = "Node agent of hami-rs: per-container GPU usage from HAMi-core's shared regions, HAMi's monitor metrics and priority feedback",
    long_about = "Node agent of hami-rs, compatible with HAMi's vGPUmonitor.\n\n\
        Every --scan-interval it reads the cache file HAMi-core (libvgpu.so) keeps for each \
        container, <hook-path>/containers/<podUID>_<container>/*.cache, maps the directory \
        to its pod through a watch of the pods on --node-name, and serves HAMi's series on \
        --metrics-bind-address (/metrics; also /livez and /readyz): per container the memory \
        used and its limit, the context/module/buffer breakdown, SM utilisation and the time \
        since the last kernel; per GPU the memory in use and utilisation from NVML (or the \
        fake backend). --legacy-metrics adds HAMi's old metric names.\n\n\
        Every --feedback-interval it runs HAMi's priority feedback: a container whose GPU \
        runs a higher-priority task (nvidia.com/priority) that launched kernels recently has \
        its launches held back until that task is idle. Directories of pods that left the \
        node are removed once older than the resync interval. Nothing is scanned or written \
        while the MIG apply lock file exists.\n\n\
        The API server is found the standard way: in-cluster config, else KUBECONFIG.",
    after_help = DURATION_HELP
)]
pub struct Cli {
    /// This node's name (from the downward API).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,

    /// HAMi-core's directory as mounted here; container directories are read from
    /// <hook-path>/containers (HAMi's chart: /usr/local/vgpu).
    #[arg(long, env = "HOOK_PATH")]
    pub hook_path: PathBuf,

    /// `--metrics-bind-address`: /metrics, /livez, /readyz.
    #[command(flatten)]
    pub metrics: AdminArgs<MonitorMetricsBindAddress>,

    /// Also export HAMi's old metric names (HostGPUMemoryUsage, vGPU_device_memory_usage_in_bytes, ...).
    #[arg(long, env = "LEGACY_METRICS", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set)]
    pub legacy_metrics: bool,

    /// A container directory whose pod is no longer on this node is removed once its
    /// modification time is older than this (Go duration).
    #[arg(long, env = "HAMI_RESYNC_INTERVAL", default_value = "5m", value_parser = parse_go_duration, value_name = "DURATION")]
    pub resync_interval: Duration,

    /// How often the container directories are read.
    #[arg(long, env = "SCAN_INTERVAL", default_value = "5s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub scan_interval: Duration,

    /// How often the priority feedback runs.
    #[arg(long, env = "FEEDBACK_INTERVAL", default_value = "5s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub feedback_interval: Duration,

    /// Run the priority feedback (the only write into the cache files).
    #[arg(long, env = "FEEDBACK", default_value_t = true, num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set)]
    pub feedback: bool,

    /// While this file exists the device plugin is applying a MIG layout: nothing is
    /// scanned, removed or written.
    #[arg(
        long,
        env = "MIG_APPLY_LOCK",
        default_value = "/tmp/hami/hami-mig-apply.lock"
    )]
    pub mig_apply_lock: PathBuf,

    #[command(flatten)]
    pub client: ClientArgs,

    #[command(flatten)]
    pub backend: BackendArgs,

    #[command(flatten)]
    pub log: LogArgs,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent_and_defaults_follow_hami() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["m", "--node-name", "n1", "--hook-path", "/usr/local/vgpu"])
            .unwrap();
        assert_eq!(cli.metrics.address.port(), 9394);
        assert_eq!(cli.resync_interval, Duration::from_secs(300));
        assert_eq!(cli.scan_interval, Duration::from_secs(5));
        assert!(!cli.legacy_metrics && cli.feedback);
        let cli = Cli::try_parse_from([
            "m",
            "--node-name",
            "n1",
            "--hook-path",
            "/h",
            "--legacy-metrics",
            "--feedback=false",
            "--resync-interval",
            "1h30m",
        ])
        .unwrap();
        assert!(cli.legacy_metrics && !cli.feedback);
        assert_eq!(cli.resync_interval, Duration::from_secs(5400));
        let err = Cli::try_parse_from(["m", "--node-name", "n1"]).unwrap_err();
        assert!(err.to_string().contains("--hook-path"), "{err}");
        let err = Cli::try_parse_from([
            "m",
            "--node-name",
            "n",
            "--hook-path",
            "/h",
            "--resync-interval",
            "5",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("missing unit"), "{err}");
    }
}
