//! Command line. Flag names follow HAMi's scheduler where the meaning is the same
//! (`--http_bind`, `--cert_file`, `--node-scheduler-policy`, …); every flag also reads an
//! environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};
use hami_core::policy::{GpuPolicy, NodePolicy};
use hami_server::args::{AdminArgs, ClientArgs, LogArgs, MetricsBindAddress};
use hami_server::flags::{DURATION_HELP, parse_go_duration, parse_listen_addr};

/// Default body limit: a nodeCacheCapable=false ExtenderArgs carries whole Node objects.
pub const DEFAULT_BODY_LIMIT: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "hami-scheduler",
    version,
    about = "Scheduler extender of hami-rs: places GPU-sharing pods for kube-scheduler (/filter, /bind)",
    long_about = "Scheduler extender of hami-rs, wire-compatible with HAMi.\n\n\
        kube-scheduler (profile --scheduler-name) calls POST /filter and POST /bind for pods \
        that ask for managed GPU resources. /filter picks the node and the GPUs with the \
        configured node and GPU policies, reserves them in an in-memory allocation ledger \
        fed by watches of nodes and pods, and writes HAMi's pod annotations \
        (hami.io/vgpu-node, hami.io/vgpu-devices-to-allocate, ...). /bind takes the node \
        lock (hami.io/mutex.lock), marks the pod bind-phase=allocating and creates the \
        Binding; the device plugin releases the lock after Allocate. Nodes whose device \
        plugin stops reporting (node handshake, allocatable GPUs) stop receiving pods and \
        come back on their own. The admin address serves /livez, /readyz (ready once the \
        node, pod and resourcequota caches have synced) and /metrics, and with --ui a read-only \
        dashboard (/ui) and its JSON API (/api/v1/...).\n\n\
        The API server is found the standard way: in-cluster config, else KUBECONFIG.",
    after_help = DURATION_HELP
)]
pub struct Cli {
    /// Address of the extender endpoint (/filter, /bind).
    #[arg(long = "http_bind", env = "HTTP_BIND", default_value = "127.0.0.1:8080", value_parser = parse_listen_addr)]
    pub http_bind: SocketAddr,

    /// PEM certificate for HTTPS (with --key_file); re-read when it changes. Plain HTTP
    /// when unset.
    #[arg(long = "cert_file", env = "CERT_FILE", requires = "key_file")]
    pub cert_file: Option<PathBuf>,

    /// PEM private key for HTTPS (with --cert_file).
    #[arg(long = "key_file", env = "KEY_FILE", requires = "cert_file")]
    pub key_file: Option<PathBuf>,

    /// kube-scheduler profile this extender serves; the source of its events.
    #[arg(long, env = "SCHEDULER_NAME", default_value = "hami-scheduler")]
    pub scheduler_name: String,

    /// Node policy when the pod sets none (hami.io/node-scheduler-policy):
    /// binpack (fill busy nodes), spread (prefer idle nodes) or frag (least fragmentation).
    #[arg(long, env = "NODE_SCHEDULER_POLICY", default_value = "binpack")]
    pub node_scheduler_policy: NodePolicy,

    /// GPU policy when the pod sets none (hami.io/gpu-scheduler-policy): binpack,
    /// spread, mutex, numa, topology-aware, frag, or a comma chain such as numa,binpack.
    #[arg(long, env = "GPU_SCHEDULER_POLICY", default_value = "spread")]
    pub gpu_scheduler_policy: GpuPolicy,

    /// HAMi-compatible device-config.yaml (resource names, memoryFactor, defaults).
    /// Built-in chart defaults when unset; an unreadable file is fatal.
    #[arg(long, env = "DEVICE_CONFIG_FILE")]
    pub device_config_file: Option<PathBuf>,

    #[command(flatten)]
    pub vendors: hami_server::args::VendorArgs,

    /// A node lock older than this is taken over (Go duration).
    #[arg(long, env = "HAMI_NODELOCK_EXPIRE", default_value = "5m", value_parser = parse_go_duration, value_name = "DURATION")]
    pub node_lock_timeout: Duration,

    /// How long /bind waits for a node locked by another pod before giving up (keep it
    /// under kube-scheduler's extender httpTimeout). 0 fails at once, as HAMi does.
    #[arg(long, env = "NODE_LOCK_WAIT", default_value = "20s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub node_lock_wait: Duration,

    /// A filtered pod that is still unbound after this long no longer holds its GPUs.
    #[arg(long, env = "RESERVATION_TIMEOUT", default_value = "2m", value_parser = parse_go_duration, value_name = "DURATION")]
    pub reservation_timeout: Duration,

    #[command(flatten)]
    pub admin: AdminArgs<MetricsBindAddress>,

    /// Also export HAMi's pre-2.8 metric names (GPUDeviceMemoryLimit, nodeGPUOverview,
    /// QuotaUsed, vGPUMemoryAllocated, ...) beside the hami_* ones.
    #[arg(long, env = "LEGACY_METRICS", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set)]
    pub legacy_metrics: bool,

    /// Serve the dashboard on the admin address: /ui (read-only web page) and its JSON
    /// API (/api/v1/cluster, /api/v1/nodes/NAME, /api/v1/pods/NS/NAME/explain).
    #[arg(long, env = "ENABLE_UI", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set)]
    pub ui: bool,

    /// Serve the admin address (probes, metrics, dashboard) over HTTPS with
    /// --cert_file/--key_file.
    #[arg(long, env = "ADMIN_TLS", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set, requires = "cert_file")]
    pub admin_tls: bool,

    /// Only nodes with these labels (`k=v,k2=v2`, any label selector) are considered.
    #[arg(long, env = "NODE_LABEL_SELECTOR")]
    pub node_label_selector: Option<String>,

    /// How often node registrations and handshakes are checked.
    #[arg(long, env = "REGISTRY_INTERVAL", default_value = "15s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub registry_interval: Duration,

    /// How long a node's device plugin has to answer a handshake request.
    #[arg(long, env = "HANDSHAKE_TIMEOUT", default_value = "60s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub handshake_timeout: Duration,

    /// Follow kube-scheduler's leader election: only the replica whose kube-scheduler
    /// holds the Lease writes node handshakes.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set)]
    pub leader_elect: bool,

    /// Name of kube-scheduler's Lease (default: the scheduler name).
    #[arg(long, env = "LEADER_ELECT_RESOURCE_NAME")]
    pub leader_elect_resource_name: Option<String>,

    /// Namespace of kube-scheduler's Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,

    /// This replica's identity (kube-scheduler's Lease holder starts with it).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    #[command(flatten)]
    pub client: ClientArgs,

    /// Largest request body accepted, in bytes.
    #[arg(long, env = "MAX_BODY_BYTES", default_value_t = DEFAULT_BODY_LIMIT)]
    pub max_body_bytes: usize,

    /// Threads for watches, API writes, events and the admin port (0: one per CPU, at
    /// most 2). /filter and /bind have a thread of their own besides these.
    #[arg(long, env = "WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,

    /// Threads that scan large clusters in parallel during /filter (0: one per CPU, at
    /// most 8; 1 disables the parallel scan).
    #[arg(long, env = "PLACEMENT_THREADS", default_value_t = 0)]
    pub placement_threads: usize,

    #[command(flatten)]
    pub log: LogArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hami_flag_names_parse() {
        let cli = Cli::try_parse_from([
            "hami-scheduler",
            "--http_bind=0.0.0.0:443",
            "--cert_file=/tls/tls.crt",
            "--key_file=/tls/tls.key",
            "--scheduler-name=hami-scheduler",
            "--node-scheduler-policy=spread",
            "--gpu-scheduler-policy=numa,binpack",
            "--node-lock-timeout=90s",
            "--metrics-bind-address=:9395",
            "--node-label-selector=gpu=on",
            "--leader-elect=true",
            "--legacy-metrics",
        ])
        .unwrap();
        assert!(cli.legacy_metrics);
        assert!(!Cli::try_parse_from(["x"]).unwrap().legacy_metrics);
        assert!(
            Cli::try_parse_from(["x", "--leader-elect"])
                .unwrap()
                .leader_elect
        );
        assert!(
            !Cli::try_parse_from(["x", "--leader-elect=false"])
                .unwrap()
                .leader_elect
        );
        assert!(!Cli::try_parse_from(["x"]).unwrap().leader_elect);
        let off = Cli::try_parse_from(["x"]).unwrap();
        assert!(!off.ui && !off.admin_tls, "the dashboard is off by default");
        assert!(Cli::try_parse_from(["x", "--ui"]).unwrap().ui);
        assert!(
            Cli::try_parse_from(["x", "--admin-tls"]).is_err(),
            "admin TLS needs a certificate"
        );
        assert_eq!(cli.http_bind.port(), 443);
        assert_eq!(cli.node_scheduler_policy, NodePolicy::Spread);
        assert_eq!(cli.node_lock_timeout, Duration::from_secs(90));
        assert_eq!(cli.admin.address.port(), 9395);
        assert!(cli.leader_elect);
    }

    #[test]
    fn bad_values_are_refused_with_a_reason() {
        let e = Cli::try_parse_from(["x", "--node-scheduler-policy=tight"]).unwrap_err();
        assert!(e.to_string().contains("binpack, spread or frag"), "{e}");
        let e = Cli::try_parse_from(["x", "--gpu-scheduler-policy=bogus"]).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        assert!(Cli::try_parse_from(["x", "--cert_file=/a"]).is_err());
        assert!(Cli::try_parse_from(["x", "--node-lock-timeout=5"]).is_err());
    }

    #[test]
    fn chart_rendered_args_parse() {
        // What deploy/helm/hami-rs renders for the extender container with its defaults.
        let cli = Cli::try_parse_from([
            "hami-scheduler",
            "--http_bind=127.0.0.1:8888",
            "--scheduler-name=hami-scheduler",
            "--node-scheduler-policy=binpack",
            "--gpu-scheduler-policy=spread",
            "--device-config-file=/device-config/device-config.yaml",
            "--node-lock-timeout=5m",
            "--metrics-bind-address=:9395",
            "--node-label-selector=gpu=on",
            "--leader-elect",
            "--leader-elect-resource-name=hami-scheduler",
            "--leader-elect-resource-namespace=kube-system",
        ])
        .unwrap();
        assert_eq!(cli.http_bind, "127.0.0.1:8888".parse().unwrap());
        assert_eq!(cli.node_scheduler_policy, NodePolicy::Binpack);
        assert_eq!(cli.gpu_scheduler_policy.as_str(), "spread");
        assert_eq!(
            cli.device_config_file,
            Some(PathBuf::from("/device-config/device-config.yaml"))
        );
        assert_eq!(cli.node_lock_timeout, Duration::from_secs(300));
        assert_eq!(cli.admin.address, "0.0.0.0:9395".parse().unwrap());
        assert_eq!(cli.leader_elect_resource_namespace, "kube-system");
        assert_eq!(cli.client.kubeconfig, None);
        assert_eq!(cli.log.log_level, None);
    }

    #[test]
    fn policies_parse_with_core_rules() {
        let cli = Cli::try_parse_from(["x", "--node-scheduler-policy=frag"]).unwrap();
        assert_eq!(cli.node_scheduler_policy, NodePolicy::Frag);
        let cli = Cli::try_parse_from(["x", "--gpu-scheduler-policy=frag"]).unwrap();
        assert_eq!(cli.gpu_scheduler_policy.as_str(), "frag");
        let e = Cli::try_parse_from(["x", "--gpu-scheduler-policy=numa,bogus"]).unwrap_err();
        assert!(e.to_string().contains("topology-aware"), "{e}");
    }

    #[test]
    fn help_states_the_duration_rule() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("--node-lock-timeout <DURATION>"), "{help}");
        assert!(
            help.contains("Only 0 may be written without a unit"),
            "{help}"
        );
        let e = Cli::try_parse_from(["x", "--reservation-timeout=45"]).unwrap_err();
        assert!(e.to_string().contains("for seconds write 45s"), "{e}");
    }
}
