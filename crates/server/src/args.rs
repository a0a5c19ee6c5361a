//! Flag groups the binaries flatten (`#[command(flatten)]`), so a flag that means the
//! same thing in every binary is declared, documented and parsed once.
//!
//! Flag names and environment variables are the ones each binary has always had (HAMi's
//! where HAMi has the flag; the Helm chart passes them). Where binaries name the same
//! thing differently, the group takes the naming as a type parameter ([`AdminNaming`]),
//! so no user-visible name changes. A binary that flattens a group sets its own `about`:
//! without one, clap shows the group's doc comment as the binary's description.

use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::flags::parse_listen_addr;
use crate::trace::{LogFormat, TraceError, init_tracing};

/// Logging: `--log-format` (`LOG_FORMAT`) and `--log-level` (`LOG_LEVEL`). Both are
/// global: they may also follow a subcommand.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct LogArgs {
    /// Log line format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// Log filter in RUST_LOG syntax (e.g. `info`, `hami_scheduler=debug,info`); RUST_LOG
    /// is used when unset.
    #[arg(long, env = "LOG_LEVEL", global = true)]
    pub log_level: Option<String>,
}

impl LogArgs {
    /// Installs the global logger these flags describe (see [`init_tracing`]).
    pub fn init_tracing(&self) -> Result<(), TraceError> {
        init_tracing(self.log_format, self.log_level.as_deref())
    }
}

/// How one binary names its admin listener flag. HAMi's scheduler calls it
/// `--metrics-bind-address`; the webhook and the device plugin `--admin-address`, each
/// with its own default port. The namings of the hami-rs binaries follow.
///
/// `DEFAULT` is text, not a `SocketAddr` computed from a port: clap's derive keeps a
/// `default_value_t` in a `static` of the generic `augment_args`, which every naming
/// would share.
pub trait AdminNaming {
    /// The long flag, without the leading dashes.
    const FLAG: &'static str;
    /// The environment variable read when the flag is absent.
    const ENV: &'static str;
    /// The address used when neither is given, as a flag value.
    const DEFAULT: &'static str;
}

macro_rules! admin_naming {
    ($(#[$doc:meta])* $name:ident: $flag:literal, $env:literal, $default:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name;

        impl AdminNaming for $name {
            const FLAG: &'static str = $flag;
            const ENV: &'static str = $env;
            const DEFAULT: &'static str = $default;
        }
    };
}

admin_naming!(
    /// hami-scheduler's: HAMi's scheduler flag, `--metrics-bind-address`
    /// (`METRICS_BIND_ADDRESS`), `:9395`.
    MetricsBindAddress: "metrics-bind-address", "METRICS_BIND_ADDRESS", ":9395"
);
admin_naming!(
    /// hami-webhook's: `--admin-address` (`ADMIN_ADDRESS`), `0.0.0.0:9444`.
    WebhookAdminAddress: "admin-address", "ADMIN_ADDRESS", "0.0.0.0:9444"
);
admin_naming!(
    /// hami-device-plugin-nvidia's: `--admin-address` (`ADMIN_ADDRESS`), `0.0.0.0:9396`.
    DevicePluginAdminAddress: "admin-address", "ADMIN_ADDRESS", "0.0.0.0:9396"
);
admin_naming!(
    /// hami-vgpu-monitor's: HAMi's monitor flag, `--metrics-bind-address`
    /// (`METRICS_BIND_ADDRESS`), `:9394`.
    MonitorMetricsBindAddress: "metrics-bind-address", "METRICS_BIND_ADDRESS", ":9394"
);

/// The admin listener ([`crate::admin`]: `/livez`, `/readyz`, `/metrics`), named by `N`.
#[derive(Args)]
pub struct AdminArgs<N: AdminNaming> {
    /// Admin address: /livez, /readyz, /metrics (plain HTTP). `HOST:PORT`, or `:PORT`
    /// for every interface.
    #[arg(
        long = N::FLAG,
        env = N::ENV,
        default_value = N::DEFAULT,
        value_parser = parse_listen_addr,
        value_name = "ADDRESS"
    )]
    pub address: SocketAddr,

    #[arg(skip)]
    naming: PhantomData<fn() -> N>,
}

impl<N: AdminNaming> AdminArgs<N> {
    /// The group with `address` (for callers that build flags without parsing).
    pub fn new(address: SocketAddr) -> Self {
        AdminArgs {
            address,
            naming: PhantomData,
        }
    }
}

// By hand: derives would ask the naming marker for Debug and Clone as well.
impl<N: AdminNaming> fmt::Debug for AdminArgs<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminArgs")
            .field("flag", &N::FLAG)
            .field("address", &self.address)
            .finish()
    }
}

impl<N: AdminNaming> Clone for AdminArgs<N> {
    fn clone(&self) -> Self {
        AdminArgs::new(self.address)
    }
}

/// The Kubernetes client: `--kubeconfig` (`KUBECONFIG`). The binaries have no QPS,
/// burst or timeout flags; the client's defaults apply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct ClientArgs {
    /// kubeconfig file; unset: in-cluster config, else KUBECONFIG / ~/.kube/config.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

/// HAMi's switches for the optional device families: `--enable-ascend`
/// (`ENABLE_ASCEND`) and `--enable-iluvatar` (`ENABLE_ILUVATAR`). Every other family of
/// the device config is always scheduled (`docs/vendors.md`). Like HAMi's Go flags, a
/// bare switch means true and `=false` is accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Args)]
pub struct VendorArgs {
    /// Schedule Huawei Ascend NPUs (the `vnpus` section of the device config).
    #[arg(long = "enable-ascend", env = "ENABLE_ASCEND", default_value_t = false,
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enable_ascend: bool,
    /// Schedule Iluvatar GPUs (the `iluvatars` section of the device config).
    #[arg(long = "enable-iluvatar", env = "ENABLE_ILUVATAR", default_value_t = false,
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enable_iluvatar: bool,
}

impl VendorArgs {
    /// The switches as the vendor registry reads them.
    pub fn switches(&self) -> hami_core::config::VendorSwitches {
        hami_core::config::VendorSwitches {
            ascend: self.enable_ascend,
            iluvatar: self.enable_iluvatar,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser, Subcommand};

    #[derive(Debug, Parser)]
    struct Vendors {
        #[command(flatten)]
        vendors: VendorArgs,
    }

    #[test]
    fn vendor_switches_parse_like_go_bool_flags() {
        let v = |args: &[&str]| {
            Vendors::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
                .map(|p| p.vendors.switches())
        };
        let s = v(&[]).unwrap();
        assert!(!s.ascend && !s.iluvatar);
        let s = v(&["--enable-ascend", "--enable-iluvatar=true"]).unwrap();
        assert!(s.ascend && s.iluvatar);
        assert!(!v(&["--enable-ascend=false"]).unwrap().ascend);
        assert!(v(&["--enable-ascend=maybe"]).is_err());
    }

    type Admin = WebhookAdminAddress;

    /// A binary with the groups and no subcommand.
    #[derive(Debug, Parser)]
    struct Flat {
        #[command(flatten)]
        log: LogArgs,
        #[command(flatten)]
        admin: AdminArgs<MetricsBindAddress>,
        #[command(flatten)]
        client: ClientArgs,
    }

    /// A binary with the groups and a subcommand.
    #[derive(Debug, Parser)]
    struct WithSub {
        #[command(subcommand)]
        command: Option<Sub>,
        #[command(flatten)]
        log: LogArgs,
        #[command(flatten)]
        admin: AdminArgs<Admin>,
    }

    /// The device plugin's naming alone.
    #[derive(Debug, Parser)]
    struct Plugin {
        #[command(flatten)]
        admin: AdminArgs<DevicePluginAdminAddress>,
    }

    #[derive(Debug, Subcommand)]
    enum Sub {
        Run,
    }

    #[test]
    fn groups_are_consistent_clap_definitions() {
        Flat::command().debug_assert();
        WithSub::command().debug_assert();
        Plugin::command().debug_assert();
    }

    #[test]
    fn defaults() {
        let f = Flat::try_parse_from(["x"]).unwrap();
        assert_eq!(f.log.log_format, LogFormat::Text);
        assert_eq!(f.log.log_level, None);
        assert_eq!(f.admin.address, "0.0.0.0:9395".parse().unwrap());
        assert_eq!(f.client.kubeconfig, None);
        // Each naming keeps its own default within one process.
        let w = WithSub::try_parse_from(["x"]).unwrap();
        assert_eq!(w.admin.address, "0.0.0.0:9444".parse().unwrap());
        let p = Plugin::try_parse_from(["x"]).unwrap();
        assert_eq!(p.admin.address, "0.0.0.0:9396".parse().unwrap());
        let f = Flat::try_parse_from(["x"]).unwrap();
        assert_eq!(f.admin.address, "0.0.0.0:9395".parse().unwrap());
    }

    #[test]
    fn each_naming_has_its_own_flag() {
        let f = Flat::try_parse_from([
            "x",
            "--metrics-bind-address=127.0.0.1:1",
            "--log-format=json",
            "--log-level=hami=debug,info",
            "--kubeconfig=/k/config",
        ])
        .unwrap();
        assert_eq!(f.admin.address, "127.0.0.1:1".parse().unwrap());
        assert_eq!(f.log.log_format, LogFormat::Json);
        assert_eq!(f.log.log_level.as_deref(), Some("hami=debug,info"));
        assert_eq!(f.client.kubeconfig, Some(PathBuf::from("/k/config")));
        let e = Flat::try_parse_from(["x", "--admin-address=127.0.0.1:1"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument, "{e}");

        let w = WithSub::try_parse_from(["x", "--admin-address", ":7"]).unwrap();
        assert_eq!(w.admin.address, "0.0.0.0:7".parse().unwrap());
        assert!(WithSub::try_parse_from(["x", "--metrics-bind-address=:7"]).is_err());
    }

    #[test]
    fn log_flags_may_follow_a_subcommand() {
        let w = WithSub::try_parse_from(["x", "run", "--log-format", "json"]).unwrap();
        assert!(matches!(w.command, Some(Sub::Run)));
        assert_eq!(w.log.log_format, LogFormat::Json);
    }

    #[test]
    fn bad_values_name_the_flag_and_the_value() {
        let e = Flat::try_parse_from(["x", "--metrics-bind-address=nowhere"]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("--metrics-bind-address"), "{text}");
        assert!(
            text.contains("invalid listen address \"nowhere\""),
            "{text}"
        );
        let e = Flat::try_parse_from(["x", "--log-format=xml"]).unwrap_err();
        assert!(e.to_string().contains("xml"), "{e}");
    }

    #[test]
    fn help_shows_each_naming_and_its_environment_variable() {
        let help = Flat::command().render_long_help().to_string();
        assert!(help.contains("--metrics-bind-address <ADDRESS>"), "{help}");
        assert!(help.contains("[env: METRICS_BIND_ADDRESS=]"), "{help}");
        assert!(help.contains("[default: :9395]"), "{help}");
        assert!(
            help.starts_with("A binary with the groups and no subcommand"),
            "{help}"
        );
        assert!(help.contains("[env: LOG_FORMAT=]"), "{help}");
        assert!(help.contains("[env: KUBECONFIG"), "{help}");
        let help = WithSub::command().render_long_help().to_string();
        assert!(help.contains("--admin-address <ADDRESS>"), "{help}");
        assert!(help.contains("[default: 0.0.0.0:9444]"), "{help}");
    }

    #[test]
    fn admin_args_built_without_parsing() {
        let a = AdminArgs::<Admin>::new("127.0.0.1:0".parse().unwrap());
        let b = a.clone();
        assert_eq!(b.address, a.address);
        assert!(format!("{a:?}").contains("admin-address"));
    }
}
