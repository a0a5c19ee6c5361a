//! Command line: every flag also reads an environment variable.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use hami_server::args::{AdminArgs, ClientArgs, DevicePluginAdminAddress, LogArgs};
use hami_server::flags::{DURATION_HELP, parse_go_duration};

/// The NVIDIA device plugin of hami-rs.
#[derive(Debug, Parser)]
#[command(
    name = "hami-device-plugin-nvidia",
    version,
    subcommand_negates_reqs = true,
    about = "NVIDIA device plugin of hami-rs: shares GPUs between containers as HAMi does",
    long_about = "NVIDIA device plugin of hami-rs, wire-compatible with HAMi.\n\n\
        Without a subcommand it serves the kubelet device plugin API on \
        <device-plugin-path>/nvidia-<resource>.sock and registers the resource named by \
        nvidia.resourceCountName (nvidia.com/gpu), advertising every GPU deviceSplitCount \
        times. It publishes the node's GPUs in the node annotation hami.io/node-nvidia-register \
        for the scheduler, and on Allocate gives each container exactly the GPU slice the \
        scheduler wrote into the pod's annotations (HAMi-core environment and mounts), then \
        sets hami.io/bind-phase and releases the node lock. It re-registers when kubelet \
        restarts. Health: NVML Xid/ECC events (DP_DISABLE_HEALTHCHECKS / \
        DP_ENABLE_HEALTHCHECKS) and a periodic probe; a change counts once it persists.\n\n\
        Settings come from HAMi's device-config.yaml (nvidia section) with per-node \
        overrides from config.json. `--backend fake` reads GPUs from a YAML/JSON file \
        instead of NVML, for clusters without GPUs.\n\n\
        `hami-device-plugin-nvidia discover` prints the GPUs the backend sees and the \
        register annotation this node would publish, as JSON, without contacting Kubernetes.",
    after_help = DURATION_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub serve: ServeArgs,

    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the GPUs the backend discovers and the register annotation as JSON, then exit.
    #[command(after_help = DURATION_HELP)]
    Discover(DiscoverArgs),
}

/// Where GPUs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// The NVIDIA driver's NVML library (libnvidia-ml.so.1).
    Nvml,
    /// A YAML/JSON device list (--fake-devices), re-read when it changes.
    Fake,
}

#[derive(Debug, Clone, Args)]
pub struct BackendArgs {
    /// GPU source.
    #[arg(long, env = "DEVICE_BACKEND", value_enum, default_value_t = BackendKind::Nvml)]
    pub backend: BackendKind,

    /// Device list for `--backend fake` (YAML or JSON: `devices: [{uuid, model, memory, numa, healthy}]`).
    #[arg(long, env = "FAKE_DEVICES", required_if_eq("backend", "fake"))]
    pub fake_devices: Option<PathBuf>,

    /// Path of libnvidia-ml.so.1 when it is not on the loader's path.
    #[arg(long, env = "NVML_LIB")]
    pub nvml_lib: Option<PathBuf>,

    /// How long a GPU must stay bad (or good again) before its health changes.
    #[arg(long, env = "HEALTH_HOLD", default_value = "10s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub health_hold: Duration,

    /// How long one critical Xid/ECC event keeps a GPU bad.
    #[arg(long, env = "HEALTH_WINDOW", default_value = "60s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub health_window: Duration,
}

#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// HAMi's device-config.yaml (its `nvidia` section: resourceCountName, deviceSplitCount,
    /// deviceMemoryScaling, deviceCoreScaling, libCudaLogLevel, disableCoreLimit, ...).
    /// Chart defaults when unset.
    #[arg(long, env = "CONFIG_FILE")]
    pub config_file: Option<PathBuf>,

    /// Per-node overrides (HAMi's config.json: {"nodeconfig":[{"name": <node>, ...}]}).
    /// A missing file means no overrides.
    #[arg(long, env = "NODE_CONFIG_FILE", default_value = "/config/config.json")]
    pub node_config_file: PathBuf,

    /// Host directory of HAMi-core: <hook>/vgpu/libvgpu.so, <hook>/vgpu/ld.so.preload and the
    /// per-container cache directories <hook>/vgpu/containers/<podUID>_<container>.
    #[arg(long, env = "HOOK_PATH", default_value = "/usr/local")]
    pub hook_path: PathBuf,

    /// Mount <hook>/vgpu/libvgpu.so.<VERSION> when that file exists (so a new library never
    /// replaces the one running containers use).
    #[arg(long, env = "LIBVGPU_VERSION")]
    pub libvgpu_version: Option<String>,
}

/// Flags of the serving mode.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// This node's name (from the downward API).
    #[arg(long, env = "NODE_NAME", required = true)]
    pub node_name: Option<String>,

    /// Kubelet's device plugin directory (holds kubelet.sock).
    #[arg(
        long,
        env = "DEVICE_PLUGIN_PATH",
        default_value = "/var/lib/kubelet/device-plugins"
    )]
    pub device_plugin_path: PathBuf,

    #[command(flatten)]
    pub admin: AdminArgs<DevicePluginAdminAddress>,

    /// How often the node's register annotation is checked (it is also written at once
    /// whenever the GPUs change).
    #[arg(long, env = "REGISTER_INTERVAL", default_value = "30s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub register_interval: Duration,

    #[command(flatten)]
    pub client: ClientArgs,

    #[command(flatten)]
    pub backend: BackendArgs,

    #[command(flatten)]
    pub config: ConfigArgs,

    /// With `--backend fake`: write a HAMi-core shared region for every running container
    /// granted GPUs on this node (usage within the grant, varying over time), so the vGPU
    /// monitor has something to report on a cluster without GPUs.
    #[arg(long, env = "FAKE_WORKLOAD", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub fake_workload: bool,

    /// How often the fake workload's regions are updated.
    #[arg(long, env = "FAKE_WORKLOAD_INTERVAL", default_value = "5s", value_parser = parse_go_duration)]
    pub fake_workload_interval: Duration,
}

/// Flags of `discover`.
#[derive(Debug, Clone, Args)]
pub struct DiscoverArgs {
    /// Apply this node's entry of the node config (optional here).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,

    #[command(flatten)]
    pub backend: BackendArgs,

    #[command(flatten)]
    pub config: ConfigArgs,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The duration flags go through hami-server's Go-duration parser. A bare number
    /// other than 0 (`45`, once read here as seconds) is refused like HAMi's Go flags
    /// refuse it, with an error that says to write `45s`; the chart always renders a unit.
    #[test]
    fn durations() {
        let parse = |value: &str| {
            Cli::try_parse_from([
                "x",
                "--node-name=n1",
                &format!("--register-interval={value}"),
            ])
            .map(|cli| cli.serve.register_interval)
        };
        assert_eq!(parse("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        let e = parse("45").unwrap_err().to_string();
        assert!(e.contains("for seconds write 45s"), "{e}");
        for bad in ["s", "", "3d", "1..2s"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let cli = Cli::try_parse_from(["x", "discover", "--health-hold=2s", "--health-window=1m"])
            .unwrap();
        let Some(Command::Discover(d)) = cli.command else {
            panic!("discover expected");
        };
        assert_eq!(d.backend.health_hold, Duration::from_secs(2));
        assert_eq!(d.backend.health_window, Duration::from_secs(60));
        assert!(Cli::try_parse_from(["x", "discover", "--health-hold=10"]).is_err());
    }

    #[test]
    fn chart_rendered_args_parse() {
        // What deploy/helm/hami-rs renders for the device-plugin container (fake backend,
        // registerInterval set).
        let cli = Cli::try_parse_from([
            "hami-device-plugin-nvidia",
            "--node-name=n1",
            "--device-plugin-path=/var/lib/kubelet/device-plugins",
            "--config-file=/device-config/device-config.yaml",
            "--node-config-file=/node-config/config.json",
            "--hook-path=/usr/local",
            "--backend=fake",
            "--fake-devices=/fake-devices/devices.yaml",
            "--admin-address=0.0.0.0:9396",
            "--register-interval=45s",
            "--log-format=json",
        ])
        .unwrap();
        let s = &cli.serve;
        assert_eq!(s.admin.address, "0.0.0.0:9396".parse().unwrap());
        assert_eq!(s.register_interval, Duration::from_secs(45));
        assert_eq!(s.backend.backend, BackendKind::Fake);
        assert_eq!(
            s.config.config_file,
            Some(PathBuf::from("/device-config/device-config.yaml"))
        );
        assert_eq!(s.client.kubeconfig, None);
        assert_eq!(cli.log.log_format, hami_server::trace::LogFormat::Json);
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("--register-interval <DURATION>"), "{help}");
        assert!(
            help.contains("Only 0 may be written without a unit"),
            "{help}"
        );
    }

    #[test]
    fn node_name_is_required_to_serve_but_not_to_discover() {
        let err = Cli::try_parse_from(["x"]).unwrap_err();
        assert!(err.to_string().contains("--node-name"), "{err}");
        let cli = Cli::try_parse_from(["x", "--node-name", "n1"]).unwrap();
        assert_eq!(cli.serve.node_name.as_deref(), Some("n1"));
        assert_eq!(cli.serve.backend.backend, BackendKind::Nvml);
        assert_eq!(cli.serve.register_interval, Duration::from_secs(30));
        assert_eq!(cli.serve.admin.address, "0.0.0.0:9396".parse().unwrap());
        assert_eq!(cli.serve.config.hook_path, PathBuf::from("/usr/local"));
        let cli = Cli::try_parse_from([
            "x",
            "discover",
            "--backend",
            "fake",
            "--fake-devices",
            "d.yaml",
        ])
        .unwrap();
        assert!(matches!(cli.command, Some(Command::Discover(_))));
        let err = Cli::try_parse_from(["x", "discover", "--backend", "fake"]).unwrap_err();
        assert!(err.to_string().contains("--fake-devices"), "{err}");
    }
}
