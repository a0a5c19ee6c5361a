//! Command line: every flag also reads an environment variable.

use std::path::PathBuf;

use clap::Args;
use hami_device_plugin::facts_file::FactsSourceKind;
use hami_device_plugin::vendor_args::{
    RootArgs, VendorBinary, VendorCli, VendorCommand, VendorServeArgs,
};

/// The AMD device plugin of hami-rs.
pub const BINARY: VendorBinary = VendorBinary {
    name: "hami-device-plugin-amd",
    about: "AMD Instinct device plugin of hami-rs: shares GPUs between containers as HAMi does",
    long_about: "AMD Instinct device plugin of hami-rs, wire-compatible with HAMi.\n\n\
        Without a subcommand it serves the kubelet device plugin API on \
        <device-plugin-path>/amd-gpu.sock and registers amd.com/gpu, advertising every GPU \
        --split-count times. GPUs come from the KFD topology and amdgpu's PCI devices under \
        --sysfs-root; their UUID and market name from AMD SMI (--amd-smi-lib), their VRAM \
        and CU count from libdrm_amdgpu (--libdrm-amdgpu-lib) through the GPU's render \
        node, both loaded at start-up (a missing library stops the plugin, naming it), or \
        all four from a file (--facts-source=file --gpu-facts) on nodes without them. It \
        publishes them in the node annotation hami.io/node-amd-register (JSON) for the \
        scheduler, and on Allocate gives each container /dev/kfd, its GPUs' DRM nodes, \
        HSA_CU_MASK (a first-fit choice of free compute units, recorded in the pod's \
        hami.io/amd-cu-allocated), ROCR_VISIBLE_DEVICES, HIP_DEVICE_MEMORY_LIMIT and the \
        libamvgpu.so audit library, then sets hami.io/bind-phase and releases the node lock \
        once the pod's last container is done. It re-registers when kubelet restarts.\n\n\
        `hami-device-plugin-amd discover` prints the GPUs and the register annotation this \
        node would publish, as JSON, without contacting Kubernetes.",
};

/// The parsed command line.
pub type Cli = VendorCli<ServeArgs, NodeArgs>;
/// Its subcommands.
pub type Command = VendorCommand<NodeArgs>;

/// Where the node's GPUs are read from.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// Roots of sysfs (KFD topology, amdgpu's PCI devices) and of the device nodes.
    #[command(flatten)]
    pub roots: RootArgs,

    /// Where the GPU facts the kernel does not expose come from: `library` (AMD SMI and
    /// libdrm_amdgpu, loaded at start-up) or `file` (--gpu-facts). Default: `file` when
    /// --gpu-facts is given, else `library`.
    #[arg(long, env = "FACTS_SOURCE", value_enum)]
    pub facts_source: Option<FactsSourceKind>,

    /// With --facts-source=file: the GPU facts by PCI address (JSON:
    /// {"0000:0c:00.0": {"uuid", "market_name", "vram_mib", "cu_count"}}), re-read on
    /// every discovery.
    #[arg(long, env = "GPU_FACTS", required_if_eq("facts_source", "file"))]
    pub gpu_facts: Option<PathBuf>,

    /// AMD SMI, for each GPU's UUID and market name (a file name is looked up on the
    /// loader's path; ROCm installs it in /opt/rocm/lib).
    #[arg(long, env = "AMD_SMI_LIB", default_value = crate::lib_facts::AMD_SMI_FILE)]
    pub amd_smi_lib: PathBuf,

    /// libdrm's amdgpu library, for each GPU's VRAM and active CUs.
    #[arg(long, env = "LIBDRM_AMDGPU_LIB", default_value = crate::lib_facts::LIBDRM_AMDGPU_FILE)]
    pub libdrm_amdgpu_lib: PathBuf,

    /// Replicas advertised per GPU (HAMi's AMD plugin: 10).
    #[arg(long, env = "SPLIT_COUNT", default_value_t = crate::DEFAULT_SPLIT)]
    pub split_count: u32,
}

/// Flags of the serving mode.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: VendorServeArgs,

    /// Host directory holding vgpu/libamvgpu.so (HAMi's HOST_HOOK_PATH).
    #[arg(long, env = "HOST_HOOK_PATH", default_value = "/usr/local")]
    pub hook_path: PathBuf,

    #[command(flatten)]
    pub node: NodeArgs,
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
            "GPU_FACTS",
            "FACTS_SOURCE",
            "AMD_SMI_LIB",
            "LIBDRM_AMDGPU_LIB",
            "HOST_HOOK_PATH",
            "ADMIN_ADDRESS",
        ] {
            assert!(help.contains(&format!("[env: {env}")), "{env}: {help}");
        }
    }

    #[test]
    fn defaults_and_required_flags() {
        let cli = Cli::try_parse_from(["x", "--node-name=n1", "--gpu-facts=f.json"]).unwrap();
        let s = &cli.serve;
        assert_eq!(s.node.roots.sysfs_root, PathBuf::from("/sys"));
        assert_eq!(s.node.roots.dev_root, PathBuf::from("/dev"));
        assert_eq!(s.node.split_count, 10);
        assert_eq!(s.common.register_interval, Duration::from_secs(30));
        assert_eq!(s.hook_path, PathBuf::from("/usr/local"));
        let err = Cli::try_parse_from(["x", "--gpu-facts=f.json"]).unwrap_err();
        assert!(err.to_string().contains("--node-name"), "{err}");
        let cli =
            Cli::try_parse_from(["x", "discover", "--gpu-facts=f.json", "--sysfs-root=/t/sys"])
                .unwrap();
        assert!(
            matches!(cli.command, Some(Command::Discover(ref a)) if a.roots.sysfs_root == Path::new("/t/sys"))
        );
        // The facts file is required when it is the chosen source.
        assert!(Cli::try_parse_from(["x", "discover", "--facts-source=file"]).is_err());
    }

    #[test]
    fn the_libraries_are_the_default_source_with_their_usual_file_names() {
        let cli = Cli::try_parse_from(["x", "discover"]).unwrap();
        let Some(Command::Discover(a)) = cli.command else {
            panic!("not discover")
        };
        assert_eq!(a.facts_source, None);
        assert_eq!(a.gpu_facts, None);
        assert_eq!(a.amd_smi_lib, PathBuf::from("libamd_smi.so"));
        assert_eq!(a.libdrm_amdgpu_lib, PathBuf::from("libdrm_amdgpu.so.1"));
        let cli = Cli::try_parse_from([
            "x",
            "discover",
            "--facts-source=smi",
            "--amd-smi-lib=/opt/rocm/lib/libamd_smi.so",
        ])
        .unwrap();
        let Some(Command::Discover(a)) = cli.command else {
            panic!("not discover")
        };
        assert_eq!(a.facts_source, Some(FactsSourceKind::Library));
        assert_eq!(a.amd_smi_lib, PathBuf::from("/opt/rocm/lib/libamd_smi.so"));
    }
}
