//! Command line: every flag also reads an environment variable.

use std::path::PathBuf;

use clap::Args;
use hami_device_plugin::facts_file::FactsSourceKind;
use hami_device_plugin::vendor_args::{
    RootArgs, VendorBinary, VendorCli, VendorCommand, VendorServeArgs,
};

/// The Hygon DCU device plugin of hami-rs.
pub const BINARY: VendorBinary = VendorBinary {
    name: "hami-device-plugin-dcu",
    about: "Hygon DCU device plugin of hami-rs: shares DCUs between containers as HAMi does",
    long_about: "Hygon DCU device plugin of hami-rs, wire-compatible with HAMi.\n\n\
        Without a subcommand it serves the kubelet device plugin API on \
        <device-plugin-path>/hygon-dcunum.sock and registers hygon.com/dcunum, advertising \
        every DCU --split-count times. DCUs are the DRM nodes of --sysfs-root (class/drm) \
        whose PCI vendor is 0x1d94, healthy while their device files under --dev-root \
        exist; their SMI index, serial number, memory and model come from ROCm SMI \
        (--rocm-smi-lib, loaded at start-up: a missing library stops the plugin, naming \
        it), the CU count from the model, or all of them from a file (--facts-source=file \
        --dcu-facts) on nodes without it. It publishes them in the node annotation \
        hami.io/node-dcu-register (HAMi's legacy string) and answers \
        hami.io/node-handshake-dcu every --register-interval. On Allocate it gives each \
        container /dev/kfd, /dev/mkfd and its DCUs' DRM nodes; a container given part of \
        one DCU also gets a virtual DCU (CU masks, vdev and pipe ids in \
        <vgpu-dir>/dcu/<pod>_<container>_.../vdev0.conf, mounted at /etc/vdev/docker/, a \
        copy in <vdev-dir>/vdev<id>.conf for dcu-exporter, HYGONPATH at /opt/hygondriver); \
        every container gets /opt/hyhal read-only. It then sets hami.io/bind-phase and \
        releases the node lock once the pod's last container is done, and re-registers \
        when kubelet restarts.\n\n\
        `hami-device-plugin-dcu discover` prints the DCUs and the register annotation this \
        node would publish, as JSON, without contacting Kubernetes.",
};

/// The parsed command line.
pub type Cli = VendorCli<ServeArgs, NodeArgs>;
/// Its subcommands.
pub type Command = VendorCommand<NodeArgs>;

/// Where the node's DCUs are read from.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// Roots of sysfs (class/drm) and of the device nodes (kfd, mkfd, dri).
    #[command(flatten)]
    pub roots: RootArgs,

    /// Where the DCU facts the kernel does not expose come from: `library` (ROCm SMI,
    /// loaded at start-up) or `file` (--dcu-facts). Default: `file` when --dcu-facts is
    /// given, else `library`.
    #[arg(long, env = "FACTS_SOURCE", value_enum)]
    pub facts_source: Option<FactsSourceKind>,

    /// With --facts-source=file: the DCU facts by PCI address (JSON:
    /// {"0000:3d:00.0": {"index", "serial", "model", "memory_mib", "cu_count"}}), re-read
    /// on every discovery.
    #[arg(long, env = "DCU_FACTS", required_if_eq("facts_source", "file"))]
    pub dcu_facts: Option<PathBuf>,

    /// ROCm SMI, for each DCU's index, serial number, memory and device ID (a file name
    /// is looked up on the loader's path; Hygon's is /opt/hyhal/lib/librocm_smi64.so).
    #[arg(long, env = "ROCM_SMI_LIB", default_value = crate::lib_facts::ROCM_SMI_FILE)]
    pub rocm_smi_lib: PathBuf,

    /// Replicas advertised per DCU (HAMi's DCU plugin: 4).
    #[arg(long, env = "SPLIT_COUNT", default_value_t = crate::DEFAULT_SPLIT)]
    pub split_count: u32,
}

/// Flags of the serving mode.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: VendorServeArgs,

    #[command(flatten)]
    pub node: NodeArgs,

    /// Host vGPU directory; virtual DCUs get a directory under <vgpu-dir>/dcu.
    #[arg(long, env = "VGPU_DIR", default_value = "/usr/local/vgpu")]
    pub vgpu_dir: PathBuf,

    /// dcu-exporter's directory of vdev files.
    #[arg(long, env = "VDEV_DIR", default_value = "/etc/vdev")]
    pub vdev_dir: PathBuf,

    /// The DCU toolkit on the host, mounted at /opt/hygondriver in containers with a
    /// virtual DCU.
    #[arg(long, env = "HYGONPATH", default_value = "/opt/dtk")]
    pub hygon_path: PathBuf,

    /// Hygon's hardware abstraction layer on the host, mounted read-only at /opt/hyhal.
    #[arg(long, env = "HYHAL_PATH", default_value = "/opt/hyhal")]
    pub hyhal_path: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::path::Path;
    use std::time::Duration;

    #[test]
    fn cli_is_consistent_and_help_names_the_env_vars() {
        BINARY.command::<ServeArgs, NodeArgs>().debug_assert();
        let help = BINARY
            .command::<ServeArgs, NodeArgs>()
            .render_long_help()
            .to_string();
        for env in [
            "NODE_NAME",
            "SYSFS_ROOT",
            "DEV_ROOT",
            "DCU_FACTS",
            "FACTS_SOURCE",
            "ROCM_SMI_LIB",
            "VGPU_DIR",
            "VDEV_DIR",
            "HYGONPATH",
            "HYHAL_PATH",
            "ADMIN_ADDRESS",
            "REGISTER_INTERVAL",
        ] {
            assert!(help.contains(&format!("[env: {env}")), "{env}: {help}");
        }
    }

    #[test]
    fn defaults_and_required_flags() {
        let cli = Cli::try_parse_from(["x", "--node-name=n1", "--dcu-facts=f.json"]).unwrap();
        let s = &cli.serve;
        assert_eq!(s.node.roots.sysfs_root, PathBuf::from("/sys"));
        assert_eq!(s.node.roots.dev_root, PathBuf::from("/dev"));
        assert_eq!(s.node.split_count, 4);
        assert_eq!(s.common.register_interval, Duration::from_secs(30));
        assert_eq!(s.vgpu_dir, PathBuf::from("/usr/local/vgpu"));
        assert_eq!(s.vdev_dir, PathBuf::from("/etc/vdev"));
        assert_eq!(s.hygon_path, PathBuf::from("/opt/dtk"));
        assert_eq!(s.hyhal_path, PathBuf::from("/opt/hyhal"));
        let err = Cli::try_parse_from(["x", "--dcu-facts=f.json"]).unwrap_err();
        assert!(err.to_string().contains("--node-name"), "{err}");
        let cli = Cli::try_parse_from(["x", "discover", "--dcu-facts=f.json", "--dev-root=/t/dev"])
            .unwrap();
        assert!(
            matches!(cli.command, Some(Command::Discover(ref a)) if a.roots.dev_root == Path::new("/t/dev"))
        );
        // The facts file is required when it is the chosen source.
        assert!(Cli::try_parse_from(["x", "discover", "--facts-source=file"]).is_err());
    }

    #[test]
    fn rocm_smi_is_the_default_source() {
        let cli = Cli::try_parse_from(["x", "discover"]).unwrap();
        let Some(Command::Discover(a)) = cli.command else {
            panic!("not discover")
        };
        assert_eq!((a.facts_source, a.dcu_facts), (None, None));
        assert_eq!(a.rocm_smi_lib, PathBuf::from("librocm_smi64.so"));
        let cli = Cli::try_parse_from([
            "x",
            "discover",
            "--facts-source=library",
            "--rocm-smi-lib=/opt/hyhal/lib/librocm_smi64.so",
        ])
        .unwrap();
        let Some(Command::Discover(a)) = cli.command else {
            panic!("not discover")
        };
        assert_eq!(a.facts_source, Some(FactsSourceKind::Library));
        assert_eq!(
            a.rocm_smi_lib,
            PathBuf::from("/opt/hyhal/lib/librocm_smi64.so")
        );
    }
}
