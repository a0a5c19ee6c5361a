//! Command line: every flag also reads an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand};
use hami_server::args::{AdminArgs, ClientArgs, LogArgs, WebhookAdminAddress};

use crate::handler::DEFAULT_BODY_LIMIT;
use crate::rules::OwnedAnnotationPolicy;

/// The mutating admission webhook of hami-rs.
#[derive(Debug, Parser)]
#[command(
    name = "hami-webhook",
    version,
    about = "Mutating admission webhook of hami-rs: routes pods that ask for shared GPUs to hami-scheduler",
    long_about = "Mutating admission webhook of hami-rs.\n\n\
        Without a subcommand it serves AdmissionReview (admission.k8s.io/v1 and v1beta1) on \
        POST /mutate and POST /webhook over HTTPS. For every pod that asks for managed GPU \
        resources it sets spec.schedulerName, fills in HAMi's defaults (GPU count when only \
        memory/cores are asked, exclusive cores for whole-card requests, CUDA_TASK_PRIORITY, \
        GPU_CORE_UTILIZATION_POLICY), and refuses pods with privileged containers, a preset \
        spec.nodeName, invalid device quantities, scheduler-owned annotations \
        (hami.io/vgpu-node, hami.io/*-devices-allocated, hami.io/bind-phase, ...) or \
        device requests above their namespace's ResourceQuota (watched from the API server). \
        The certificate and key files are re-read when they change. An admin port serves \
        /livez, /readyz and /metrics.\n\n\
        `hami-webhook certgen` creates the CA and serving certificate, stores them in a \
        Secret and patches the caBundle of the MutatingWebhookConfiguration."
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
    /// Create the webhook's CA and serving certificate, store them in a Secret (kept if
    /// it already holds a valid one) and patch caBundle of every webhook in the
    /// MutatingWebhookConfiguration. Uses the in-cluster config, else KUBECONFIG.
    Certgen(CertgenArgs),
}

/// Flags of the serving mode.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address of the HTTPS admission endpoint.
    #[arg(long, env = "BIND_ADDRESS", default_value = "0.0.0.0:9443")]
    pub bind_address: SocketAddr,

    /// PEM certificate chain (leaf first); re-read when it changes.
    #[arg(long, env = "TLS_CERT_FILE", default_value = "/tls/tls.crt")]
    pub tls_cert_file: PathBuf,

    /// PEM private key; re-read when it changes.
    #[arg(long, env = "TLS_KEY_FILE", default_value = "/tls/tls.key")]
    pub tls_key_file: PathBuf,

    /// Serve plain HTTP instead of HTTPS (local experiments only: kube-apiserver calls
    /// webhooks over HTTPS).
    #[arg(long, env = "INSECURE_PLAIN_HTTP")]
    pub insecure_plain_http: bool,

    #[command(flatten)]
    pub admin: AdminArgs<WebhookAdminAddress>,

    /// Scheduler written into spec.schedulerName of pods that ask for managed devices.
    /// Empty leaves the field as it is.
    #[arg(long, env = "SCHEDULER_NAME", default_value = "hami-scheduler")]
    pub scheduler_name: String,

    /// HAMi-compatible device-config.yaml (resource names, defaults such as
    /// defaultGPUNum, gpuCorePolicy, overwriteEnv). Built-in chart defaults when unset.
    #[arg(long, env = "DEVICE_CONFIG_FILE")]
    pub device_config_file: Option<PathBuf>,

    #[command(flatten)]
    pub vendors: hami_server::args::VendorArgs,

    /// Take over pods whose spec.schedulerName is `default-scheduler` (what the API
    /// server fills in when a pod names none). Pods of other named schedulers are
    /// always left alone.
    #[arg(long, env = "FORCE_OVERWRITE_DEFAULT_SCHEDULER", default_value_t = true, action = ArgAction::Set)]
    pub force_overwrite_default_scheduler: bool,

    /// What to do with a pod that arrives with annotations only the scheduler writes
    /// (an attempt to pick its own GPUs): deny it, or strip them and admit it.
    #[arg(long, env = "SCHEDULER_OWNED_ANNOTATIONS", value_enum, default_value_t = OwnedAnnotationPolicy::Deny)]
    pub scheduler_owned_annotations: OwnedAnnotationPolicy,

    /// Refuse pods that ask for managed devices while any of their containers (init
    /// containers and sidecars included) is privileged.
    #[arg(long, env = "DENY_PRIVILEGED", default_value_t = true, action = ArgAction::Set)]
    pub deny_privileged: bool,

    /// Largest request body accepted, in bytes (larger ones get 413).
    #[arg(long, env = "MAX_BODY_BYTES", default_value_t = DEFAULT_BODY_LIMIT)]
    pub max_body_bytes: usize,

    /// Refuse pods that alone ask for more than their namespace's ResourceQuota on
    /// device memory or cores (`limits.nvidia.com/gpumem`, ...), as HAMi's webhook does.
    /// The webhook then watches resourcequotas (get, list, watch).
    #[arg(long, env = "QUOTA_CHECK", default_value_t = true, action = ArgAction::Set)]
    pub quota_check: bool,

    #[command(flatten)]
    pub client: ClientArgs,
}

/// Flags of `certgen`.
#[derive(Debug, Clone, Args)]
pub struct CertgenArgs {
    /// Namespace of the webhook Service and of the Secret.
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: String,

    /// Name of the webhook Service; the certificate is valid for SVC, SVC.NS,
    /// SVC.NS.svc and SVC.NS.svc.cluster.local.
    #[arg(long, env = "SERVICE_NAME")]
    pub service_name: String,

    /// Secret (type kubernetes.io/tls) holding tls.crt, tls.key and ca.crt.
    #[arg(long, env = "SECRET_NAME")]
    pub secret_name: String,

    /// MutatingWebhookConfiguration whose webhooks get the CA as caBundle. Unset:
    /// only the Secret is written.
    #[arg(long, env = "WEBHOOK_CONFIG_NAME")]
    pub webhook_config_name: Option<String>,

    /// Validity of new certificates, in days.
    #[arg(long, env = "CERT_VALIDITY_DAYS", default_value_t = 3650)]
    pub validity_days: u32,

    /// A Secret whose certificate expires within this many days is renewed.
    #[arg(long, env = "CERT_RENEW_BEFORE_DAYS", default_value_t = 30)]
    pub renew_before_days: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use hami_server::trace::LogFormat;

    #[test]
    fn chart_rendered_args_parse() {
        // What deploy/helm/hami-rs renders for the webhook container.
        let cli = Cli::try_parse_from([
            "hami-webhook",
            "--bind-address=0.0.0.0:9443",
            "--tls-cert-file=/tls/tls.crt",
            "--tls-key-file=/tls/tls.key",
            "--admin-address=0.0.0.0:9444",
            "--scheduler-name=hami-scheduler",
            "--device-config-file=/device-config/device-config.yaml",
            "--force-overwrite-default-scheduler=true",
            "--scheduler-owned-annotations=deny",
            "--deny-privileged=false",
        ])
        .unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.serve.bind_address, "0.0.0.0:9443".parse().unwrap());
        assert_eq!(cli.serve.admin.address, "0.0.0.0:9444".parse().unwrap());
        assert_eq!(
            cli.serve.device_config_file,
            Some(PathBuf::from("/device-config/device-config.yaml"))
        );
        assert!(cli.serve.force_overwrite_default_scheduler);
        assert!(!cli.serve.deny_privileged);

        // And for the certgen jobs.
        let cli = Cli::try_parse_from([
            "hami-webhook",
            "certgen",
            "--namespace=kube-system",
            "--service-name=hami-webhook",
            "--secret-name=hami-webhook-tls",
            "--validity-days=3650",
            "--webhook-config-name=hami-webhook",
            "--log-format=json",
        ])
        .unwrap();
        let Some(Command::Certgen(args)) = cli.command else {
            panic!("certgen expected");
        };
        assert_eq!(args.namespace, "kube-system");
        assert_eq!(cli.log.log_format, LogFormat::Json);
    }

    #[test]
    fn defaults_and_admin_address_forms() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from(["hami-webhook"]).unwrap();
        assert_eq!(cli.serve.admin.address, "0.0.0.0:9444".parse().unwrap());
        assert_eq!(cli.log.log_format, LogFormat::Text);
        let cli = Cli::try_parse_from(["hami-webhook", "--admin-address=:9000"]).unwrap();
        assert_eq!(cli.serve.admin.address, "0.0.0.0:9000".parse().unwrap());
        assert!(Cli::try_parse_from(["hami-webhook", "--admin-address=nowhere"]).is_err());
        assert!(Cli::try_parse_from(["hami-webhook", "--metrics-bind-address=:1"]).is_err());
    }
}
