//! The serving mode: admission endpoint, admin port and (with TLS) the check of the
//! served certificate's validity, each a supervised task until shutdown: one that stops
//! unexpectedly turns `/readyz` not ready with the reason and is started again with
//! backoff; one that keeps failing stops the process with an error.

use std::sync::Arc;
use std::time::Duration;

use hami_core::config::DeviceConfig;
use hami_k8s::quotas::QuotaCache;
use hami_server::admin::{AdminState, Readiness};
use hami_server::certcheck::watch_certificate;
use hami_server::device_config::load_device_config;
use hami_server::listener::{Relistener, TakeOverError};
use hami_server::supervise::{GaveUp, RestartPolicy, Supervisor, supervise_admin};
use hami_server::{CancellationToken, TlsConfig, serve};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::cli::ServeArgs;
use crate::handler::Webhook;
use crate::metrics::Metrics;
use crate::rules::{RuleConfig, Rules};

/// Why the service could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    DeviceConfig(#[from] hami_server::device_config::DeviceConfigError),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] hami_server::tls::TlsError),
    #[error(transparent)]
    Client(#[from] hami_k8s::client::ClientError),
    #[error(transparent)]
    Listener(#[from] TakeOverError),
    #[error(transparent)]
    GaveUp(#[from] GaveUp),
}

/// How often the served certificate's validity is checked.
pub const CERTIFICATE_CHECK: Duration = Duration::from_secs(30);

/// The rule configuration the flags describe.
pub fn rule_config(args: &ServeArgs, devices: DeviceConfig) -> RuleConfig {
    RuleConfig {
        scheduler_name: args.scheduler_name.trim().to_string(),
        overwrite_default_scheduler: args.force_overwrite_default_scheduler,
        owned_annotations: args.scheduler_owned_annotations,
        deny_privileged: args.deny_privileged,
        devices,
    }
}

/// Everything the service needs, already bound: tests pass 127.0.0.1:0 listeners.
pub struct Service {
    pub listener: TcpListener,
    pub admin_listener: TcpListener,
    pub tls: TlsConfig,
    pub rules: RuleConfig,
    pub body_limit: usize,
    /// How often the served certificate's validity is checked ([`CERTIFICATE_CHECK`]).
    pub certificate_check: Duration,
    /// When a task that stopped is started again, and when the process gives up.
    pub restart: RestartPolicy,
    /// Where to watch ResourceQuotas from, for the quota rule; `None`: no quota rule.
    pub quota_client: Option<kube::Client>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("listener", &self.listener)
            .field("tls", &self.tls)
            .field("rules", &self.rules)
            .field("quota_check", &self.quota_client.is_some())
            .finish_non_exhaustive()
    }
}

/// Serves until `shutdown` is cancelled, or until a task keeps failing.
pub async fn serve_service(svc: Service, shutdown: CancellationToken) -> Result<(), RunError> {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let mut rules = Rules::new(svc.rules);
    let quota_watch = svc.quota_client.map(|client| {
        let quotas = QuotaCache::new(rules.registry());
        crate::metrics::register_quota_state(&mut registry, quotas.clone());
        (client, quotas)
    });
    if let Some((_, quotas)) = &quota_watch {
        rules = rules.with_quotas(quotas.clone());
    }
    let readiness = Readiness::not_ready("loading TLS certificate");
    let admin = AdminState {
        readiness: readiness.clone(),
        registry: Arc::new(registry),
    };
    if let TlsConfig::Files { cert, key } = &svc.tls {
        // Refuse to start (and to report ready) with an unusable pair.
        hami_server::tls::load_pair(cert, key, &hami_server::tls::provider())?;
    }
    let webhook = Webhook::new(rules, metrics, svc.body_limit);
    let mut sup = Supervisor::new(readiness.clone(), shutdown, svc.restart);
    supervise_admin(&mut sup, Relistener::new(svc.admin_listener)?, admin);
    if let Some((client, quotas)) = quota_watch {
        // Until listed, the scheduler alone enforces quotas (readiness does not wait:
        // the webhook must keep admitting pods).
        sup.spawn("resourcequota watch", move |stop| {
            quotas.clone().watch(client.clone(), || {}, stop)
        });
    }
    let listener = Relistener::new(svc.listener)?;
    let (tls, handler) = (svc.tls.clone(), webhook.into_handler());
    sup.spawn("webhook server", move |stop| {
        let (tls, handler) = (tls.clone(), handler.clone());
        let listener = listener.tokio();
        async move {
            let listener = listener.map_err(|e| format!("listener: {e}"))?;
            serve(listener, tls, handler, stop)
                .await
                .map_err(|e| e.to_string())
        }
    });
    if let TlsConfig::Files { cert, key } = svc.tls {
        let (r, every) = (readiness.clone(), svc.certificate_check);
        sup.spawn("certificate check", move |stop| {
            watch_certificate(cert.clone(), key.clone(), r.clone(), every, stop)
        });
    }
    readiness.set_ready();
    sup.run().await?;
    Ok(())
}

/// Binds the flags' addresses and serves until `shutdown`.
pub async fn run(args: ServeArgs, shutdown: CancellationToken) -> Result<(), RunError> {
    let devices = load_device_config(args.device_config_file.as_deref())?
        .with_switches(args.vendors.switches());
    let rules = rule_config(&args, devices);
    let tls = if args.insecure_plain_http {
        tracing::warn!("serving plain HTTP: kube-apiserver will not call this endpoint");
        TlsConfig::None
    } else {
        TlsConfig::Files {
            cert: args.tls_cert_file.clone(),
            key: args.tls_key_file.clone(),
        }
    };
    let bind = |addr: std::net::SocketAddr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|source| RunError::Bind {
                address: addr.to_string(),
                source,
            })
    };
    let quota_client = if args.quota_check {
        Some(hami_k8s::client::connect(args.client.kubeconfig.as_deref()).await?)
    } else {
        None
    };
    let listener = bind(args.bind_address).await?;
    let admin_listener = bind(args.admin.address).await?;
    tracing::info!(
        scheduler = %rules.scheduler_name,
        overwrite_default_scheduler = rules.overwrite_default_scheduler,
        owned_annotations = ?rules.owned_annotations,
        deny_privileged = rules.deny_privileged,
        quota_check = args.quota_check,
        admin = %args.admin.address,
        "hami-webhook starting"
    );
    serve_service(
        Service {
            listener,
            admin_listener,
            tls,
            rules,
            body_limit: args.max_body_bytes,
            certificate_check: CERTIFICATE_CHECK,
            restart: RestartPolicy::default(),
            quota_client,
        },
        shutdown,
    )
    .await
}
