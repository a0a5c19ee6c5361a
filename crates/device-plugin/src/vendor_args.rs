//! The flags and start-up every vendor binary built on the framework shares
//! (`docs/device-plugin.md#vendor-hooks`): node name, kubelet directory, the fake-tree
//! roots, admin port, kubeconfig and the two intervals. A vendor flattens
//! [`VendorServeArgs`] into its own command line and adds what only it needs.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use hami_server::args::{AdminArgs, ClientArgs, DevicePluginAdminAddress};
use hami_server::flags::parse_go_duration;

use crate::config::{DeviceFilter, PluginConfig, VendorSpec, VgpuHookSettings};

/// Where the node's devices are read from: the kernel's files under a root, so tests
/// and the demo run the plugin on a fake tree.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct RootArgs {
    /// Root of sysfs.
    #[arg(long, env = "SYSFS_ROOT", default_value = "/sys")]
    pub sysfs_root: PathBuf,

    /// Root of the device nodes (kfd, dri/card*, dri/renderD*).
    #[arg(long, env = "DEV_ROOT", default_value = "/dev")]
    pub dev_root: PathBuf,
}

impl Default for RootArgs {
    fn default() -> Self {
        RootArgs {
            sysfs_root: "/sys".into(),
            dev_root: "/dev".into(),
        }
    }
}

/// Flags of the serving mode that every vendor binary has.
#[derive(Debug, Clone, Args)]
pub struct VendorServeArgs {
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

    #[command(flatten)]
    pub client: ClientArgs,

    /// How often the register annotation is checked against the node.
    #[arg(long, env = "REGISTER_INTERVAL", default_value = "30s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub register_interval: Duration,

    /// How often the devices are re-discovered (health: device nodes present).
    #[arg(long, env = "HEALTH_INTERVAL", default_value = "10s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub health_interval: Duration,
}

impl Default for VendorServeArgs {
    /// The values the flags default to (`discover` builds its configuration from them).
    fn default() -> Self {
        VendorServeArgs {
            node_name: None,
            device_plugin_path: "/var/lib/kubelet/device-plugins".into(),
            admin: AdminArgs::new(([0, 0, 0, 0], 9396).into()),
            client: ClientArgs::default(),
            register_interval: Duration::from_secs(30),
            health_interval: Duration::from_secs(10),
        }
    }
}

/// What differs between vendors in the framework configuration.
#[derive(Debug, Clone)]
pub struct VendorConfig {
    pub resource_name: String,
    pub socket_name: String,
    pub vendor: VendorSpec,
    pub split_count: u32,
    /// Host directory of the vendor's vGPU library (`HOST_HOOK_PATH`).
    pub hook_path: PathBuf,
}

impl VendorServeArgs {
    /// The node name, refused when empty.
    pub fn node(&self) -> Result<String, crate::ConfigError> {
        self.node_name
            .clone()
            .filter(|n| !n.trim().is_empty())
            .ok_or(crate::ConfigError::NoNodeName)
    }

    /// The framework configuration of a vendor plugin on `node`: no scaling, NUMA
    /// topology sent, no preferred allocation, no HAMi-core settings.
    pub fn plugin_config(&self, node: &str, vendor: VendorConfig) -> PluginConfig {
        PluginConfig {
            node_name: node.into(),
            resource_name: vendor.resource_name,
            plugin_dir: self.device_plugin_path.clone(),
            socket_name: vendor.socket_name,
            vendor: vendor.vendor,
            split_count: vendor.split_count,
            memory_scaling: 1.0,
            core_scaling: 1.0,
            preconfigured_memory: 0,
            numa_topology: true,
            preferred_allocation: false,
            operating_mode: String::new(),
            filter: DeviceFilter::default(),
            vgpu_hook: VgpuHookSettings {
                hook_path: vendor.hook_path,
                lib_cuda_log_level: String::new(),
                disable_core_limit: false,
                libvgpu_version: None,
            },
            register_interval: self.register_interval,
        }
    }
}

/// The command line of a vendor binary: its serving flags `S` (which flatten
/// [`VendorServeArgs`]), and `discover` with its node flags `N`.
#[derive(Debug, clap::Parser)]
#[command(
    version,
    subcommand_negates_reqs = true,
    after_help = hami_server::flags::DURATION_HELP
)]
pub struct VendorCli<S: Args, N: Args> {
    #[command(subcommand)]
    pub command: Option<VendorCommand<N>>,

    #[command(flatten)]
    pub serve: S,

    #[command(flatten)]
    pub log: hami_server::args::LogArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum VendorCommand<N: Args> {
    /// Print the devices discovered and the register annotation as JSON, then exit.
    Discover(N),
}

/// A vendor binary's name and help texts.
#[derive(Debug, Clone, Copy)]
pub struct VendorBinary {
    pub name: &'static str,
    pub about: &'static str,
    pub long_about: &'static str,
}

impl VendorBinary {
    /// The binary's command line, with its name and help.
    pub fn command<S: Args, N: Args>(&self) -> clap::Command {
        use clap::CommandFactory;
        VendorCli::<S, N>::command()
            .name(self.name)
            .bin_name(self.name)
            .about(self.about)
            .long_about(self.long_about)
    }

    /// Parses `args` (the first is the binary's path).
    pub fn try_parse_from<S: Args, N: Args, I, T>(
        &self,
        args: I,
    ) -> Result<VendorCli<S, N>, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::FromArgMatches;
        let matches = self.command::<S, N>().try_get_matches_from(args)?;
        VendorCli::from_arg_matches(&matches)
    }

    /// The process's entry point: parses the command line (exiting with clap's message
    /// on a bad one), then [`run_command`].
    pub async fn main<S, N, R, RE, D, DE>(
        &self,
        run: impl FnOnce(S, hami_server::CancellationToken) -> R,
        discover: impl FnOnce(&N) -> Result<D, DE>,
    ) -> anyhow::Result<()>
    where
        S: Args,
        N: Args,
        R: std::future::Future<Output = Result<(), RE>>,
        RE: std::error::Error + Send + Sync + 'static,
        D: serde::Serialize,
        DE: std::error::Error + Send + Sync + 'static,
    {
        let cli = self
            .try_parse_from::<S, N, _, _>(std::env::args_os())
            .unwrap_or_else(|e| e.exit());
        let invocation = match cli.command {
            None => Invocation::Serve(cli.serve),
            Some(VendorCommand::Discover(args)) => Invocation::Discover(args),
        };
        run_command(self.name, &cli.log, invocation, run, discover).await
    }
}

/// What a plugin binary was asked to do.
#[derive(Debug)]
pub enum Invocation<S, N> {
    /// Serve (no subcommand).
    Serve(S),
    /// `discover`.
    Discover(N),
}

/// What every plugin binary does once its command line is parsed: sets up logging,
/// then serves until SIGTERM/SIGINT, or prints what `discover` returns as JSON.
pub async fn run_command<S, N, R, RE, D, DE>(
    binary: &str,
    log: &hami_server::args::LogArgs,
    invocation: Invocation<S, N>,
    run: impl FnOnce(S, hami_server::CancellationToken) -> R,
    discover: impl FnOnce(&N) -> Result<D, DE>,
) -> anyhow::Result<()>
where
    R: std::future::Future<Output = Result<(), RE>>,
    RE: std::error::Error + Send + Sync + 'static,
    D: serde::Serialize,
    DE: std::error::Error + Send + Sync + 'static,
{
    use anyhow::Context;
    // Ignored when already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    log.init_tracing()?;
    match invocation {
        Invocation::Serve(args) => {
            let shutdown = hami_server::shutdown::shutdown_on_signals();
            run(args, shutdown)
                .await
                .with_context(|| format!("{binary} failed"))
        }
        Invocation::Discover(args) => {
            let report = discover(&args).context("discovery failed")?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
    }
}

/// Why a vendor binary could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum VendorRunError {
    #[error("{0} is required")]
    Missing(&'static str),
    #[error(transparent)]
    Config(#[from] crate::ConfigError),
    #[error(transparent)]
    Spec(#[from] crate::VendorSpecError),
    #[error(transparent)]
    Backend(#[from] crate::BackendError),
    #[error(transparent)]
    Facts(#[from] crate::facts_file::FactsError),
    #[error(transparent)]
    Serve(#[from] crate::serving::ServeError),
}
