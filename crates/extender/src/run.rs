//! Wiring: caches, background rounds, the extender endpoint and the admin port, each a
//! supervised task (`hami_server::supervise`): one that stops while the process is not
//! shutting down turns `/readyz` not ready with the reason and is started again after a
//! growing delay (a watch starts with a relist); one that keeps failing stops the
//! process with an error, so Kubernetes restarts it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::Either;
use hami_core::config::DeviceConfig;
use hami_core::engine::SchedulerDefaults;
use hami_core::vendor::VendorRegistry;
use hami_k8s::events::Recorder;
use hami_k8s::lock::{LocalBinds, PEER_BIND_GRACE};
use hami_k8s::quotas::QuotaCache;
use hami_server::admin::{AdminState, MetricsPriority, Readiness};
use hami_server::device_config::load_device_config;
use hami_server::listener::{Relistener, TakeOverError};
use hami_server::supervise::{GaveUp, RestartPolicy, Supervisor, panic_text, supervise_admin_with};
use hami_server::{CancellationToken, TlsConfig, serve};
use kube::Client;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cli::Cli;
use crate::dashboard::Dashboard;
use crate::frag_workload::admin_routes;
use crate::housekeeping::{self, expire_reservations};
use crate::leader::{Leadership, LeaseRef, follow_lease};
use crate::metrics::Metrics;
use crate::service::{Extender, ExtenderParts, Settings};
use crate::state::SchedState;
use crate::watch::{NodeWatch, SyncTracker, watch_nodes, watch_pods};

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
    Client(#[from] hami_k8s::client::ClientError),
    #[error(transparent)]
    Tls(#[from] hami_server::tls::TlsError),
    #[error(transparent)]
    Listener(#[from] TakeOverError),
    #[error(transparent)]
    GaveUp(#[from] GaveUp),
}

/// Everything the service needs, with listeners already bound (tests pass
/// 127.0.0.1:0).
#[derive(Debug)]
pub struct Service {
    pub listener: TcpListener,
    pub admin_listener: TcpListener,
    pub tls: TlsConfig,
    pub devices: DeviceConfig,
    pub settings: Settings,
    pub node_label_selector: Option<String>,
    pub registry_interval: Duration,
    pub handshake_timeout: Duration,
    /// kube-scheduler's Lease to follow, when leader election is on.
    pub leader_lease: Option<LeaseRef>,
    /// Also export HAMi's pre-2.8 metric names (`--legacy-metrics`).
    pub legacy_metrics: bool,
    /// Answer /filter and /bind on a thread of their own (one-thread runtime), while
    /// watches, writes and events run on the calling runtime: kube-scheduler's calls never
    /// wait for background work or cross-thread hand-offs of the async runtime.
    pub dedicated_http_thread: bool,
    /// Serve the dashboard on the admin port (`--ui`).
    pub ui: bool,
    /// TLS of the admin port (`--admin-tls`: the extender's certificate).
    pub admin_tls: TlsConfig,
    /// When a background task that stopped is started again, and when the process gives
    /// up.
    pub restart: RestartPolicy,
}

impl Service {
    /// The flags' service, with listeners bound.
    pub async fn from_cli(cli: &Cli) -> Result<Self, RunError> {
        let devices = load_device_config(cli.device_config_file.as_deref())?
            .with_switches(cli.vendors.switches());
        let bind = |addr: std::net::SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| RunError::Bind {
                    address: addr.to_string(),
                    source,
                })
        };
        let tls = TlsConfig::from_optional(cli.cert_file.clone(), cli.key_file.clone())?;
        let admin_tls = if cli.admin_tls {
            tls.clone()
        } else {
            TlsConfig::None
        };
        let identity = cli
            .identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_default();
        let leader_lease = cli.leader_elect.then(|| LeaseRef {
            namespace: cli.leader_elect_resource_namespace.clone(),
            name: cli
                .leader_elect_resource_name
                .clone()
                .unwrap_or_else(|| cli.scheduler_name.clone()),
            identity,
        });
        Ok(Service {
            listener: bind(cli.http_bind).await?,
            admin_listener: bind(cli.admin.address).await?,
            tls,
            devices,
            settings: Settings {
                scheduler_name: cli.scheduler_name.clone(),
                defaults: SchedulerDefaults {
                    node_policy: cli.node_scheduler_policy,
                    gpu_policy: cli.gpu_scheduler_policy.clone(),
                },
                node_lock_timeout: cli.node_lock_timeout,
                node_lock_wait: cli.node_lock_wait,
                reservation_timeout: cli.reservation_timeout,
                body_limit: cli.max_body_bytes,
                sync_wait: Duration::from_secs(10),
            },
            node_label_selector: cli.node_label_selector.clone(),
            registry_interval: cli.registry_interval,
            handshake_timeout: cli.handshake_timeout,
            leader_lease,
            legacy_metrics: cli.legacy_metrics,
            dedicated_http_thread: true,
            ui: cli.ui,
            admin_tls,
            restart: RestartPolicy::default(),
        })
    }
}

/// Runs the service against `client` until `shutdown`, or until a task keeps failing.
pub async fn serve_service(
    svc: Service,
    client: Client,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    serve_connected(svc, client, None, shutdown).await
}

/// [`serve_service`] against the API server of `config`; /bind makes its own client
/// from it on the HTTP thread (`hot_client`).
pub async fn serve_service_at(
    svc: Service,
    config: kube::Config,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let client = hami_k8s::client::client_for(config.clone())?;
    serve_connected(svc, client, Some(config), shutdown).await
}

async fn serve_connected(
    svc: Service,
    client: Client,
    config: Option<kube::Config>,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let registry = VendorRegistry::from_config(&svc.devices);
    let ttl = i64::try_from(svc.settings.reservation_timeout.as_secs()).unwrap_or(i64::MAX);
    let state = Arc::new(Mutex::new(SchedState::new(registry.clone(), ttl)));
    let quotas = QuotaCache::new(&registry);
    let mut prom = Registry::default();
    let metrics = Metrics::register(&mut prom, state.clone(), quotas.clone(), svc.legacy_metrics);
    let instance = svc
        .leader_lease
        .as_ref()
        .map(|lease| lease.identity.clone())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| svc.settings.scheduler_name.clone());
    let events = Recorder::new(client.clone(), &svc.settings.scheduler_name, &instance);
    crate::metrics::register_event_drops(&mut prom, events.clone());
    let readiness = Readiness::not_ready("node, pod and resourcequota caches have not synced yet");
    let admin = AdminState {
        readiness: readiness.clone(),
        registry: Arc::new(prom),
    };
    if let TlsConfig::Files { cert, key } = &svc.tls {
        hami_server::tls::load_pair(cert, key, &hami_server::tls::provider())?;
    }
    let (changes, _) = watch::channel(0u64);
    let sync = SyncTracker::new(state.clone(), quotas.clone(), readiness.clone());
    let mut sup = Supervisor::new(readiness, shutdown.clone(), svc.restart);
    let writer = events.writer();
    sup.spawn("event writer", move |stop| writer.clone().run(stop));

    let leadership = match &svc.leader_lease {
        None => {
            metrics.set_leader(true);
            Leadership::always()
        }
        Some(lease) => {
            let l = Leadership::always();
            let (c, lease, follower, m) =
                (client.clone(), lease.clone(), l.clone(), metrics.clone());
            sup.spawn("leader lease watch", move |stop| {
                follow_lease(c.clone(), lease.clone(), follower.clone(), m.clone(), stop)
            });
            l
        }
    };
    let nodes = NodeWatch {
        client: client.clone(),
        state: state.clone(),
        label_selector: svc.node_label_selector.clone(),
        changes: changes.clone(),
        sync: sync.clone(),
        events: events.clone(),
    };
    sup.spawn("node watch", move |stop| watch_nodes(nodes.clone(), stop));
    let (c, st) = (client.clone(), state.clone());
    let pod_sync = sync.clone();
    sup.spawn("pod watch", move |stop| {
        watch_pods(c.clone(), st.clone(), pod_sync.clone(), stop)
    });
    let (c, q) = (client.clone(), quotas.clone());
    sup.spawn("resourcequota watch", move |stop| {
        let sync = sync.clone();
        q.clone().watch(c.clone(), move || sync.update(), stop)
    });
    let (st, m) = (state.clone(), metrics.clone());
    sup.spawn("reservation expiry", move |stop| {
        expire_reservations(st.clone(), m.clone(), stop)
    });
    let binds = match svc.leader_lease {
        None => LocalBinds::sole(),
        Some(_) => LocalBinds::with_peers(PEER_BIND_GRACE),
    };
    binds.stops_with(shutdown.clone());
    let sweep = housekeeping::LockSweep {
        client: client.clone(),
        state: state.clone(),
        binds: binds.clone(),
        leadership: leadership.clone(),
        lock_timeout: svc.settings.node_lock_timeout,
    };
    sup.spawn("stale node lock sweep", move |stop| sweep.clone().run(stop));
    let registry_round = housekeeping::Registry {
        state: state.clone(),
        registry,
        client: client.clone(),
        leadership,
        events: events.clone(),
        interval: svc.registry_interval,
        handshake_timeout: svc.handshake_timeout,
    };
    let feed = changes.clone();
    sup.spawn("node registry round", move |stop| {
        registry_round.clone().run(feed.subscribe(), stop)
    });

    let dashboard = svc.ui.then(|| {
        Arc::new(Dashboard::new(
            state.clone(),
            svc.settings.defaults.clone(),
            &svc.settings.scheduler_name,
            client.clone(),
        ))
        .into_handler()
    });
    let extender = Arc::new(Extender::new(
        ExtenderParts {
            state,
            quotas,
            client,
            config,
            events,
            metrics,
            node_changes: changes,
            binds,
        },
        svc.settings,
    ));
    let admin_routes = admin_routes(extender.state.clone(), dashboard);
    supervise_admin_with(
        &mut sup,
        Relistener::new(svc.admin_listener)?,
        admin,
        Some(admin_routes),
        svc.admin_tls,
        // A scrape of a large cluster's page must not take CPU from /filter
        // (`docs/extender.md#metrics`).
        MetricsPriority::Lowest,
    );
    let listener = Relistener::new(svc.listener)?;
    let (tls, own_thread) = (svc.tls, svc.dedicated_http_thread);
    let handler = extender.into_handler();
    sup.spawn("extender server", move |stop| {
        let (tls, handler) = (tls.clone(), handler.clone());
        let listener = if own_thread {
            listener.std().map(Either::Left)
        } else {
            listener.tokio().map(Either::Right)
        };
        async move {
            match listener.map_err(|e| format!("listener: {e}"))? {
                Either::Left(std) => serve_on_own_thread(std, tls, handler, stop).await,
                Either::Right(listener) => serve(listener, tls, handler, stop)
                    .await
                    .map_err(|e| e.to_string()),
            }
        }
    });
    sup.run().await?;
    Ok(())
}

/// Serves `handler` on a new thread with a one-thread runtime; resolves when it stops.
///
/// `stop` stops it gracefully: open connections finish their requests (binds waiting for
/// a node lock end at once, `docs/extender.md#shutdown`). Dropping the returned future
/// before it resolved (the process's task aborted, as the test harness's `kill -9`
/// does) kills it: the runtime is shut down where it stands, every connection and
/// in-flight bind dropped without draining, so the killed process writes nothing more.
async fn serve_on_own_thread(
    listener: std::net::TcpListener,
    tls: TlsConfig,
    handler: hami_server::Handler,
    stop: CancellationToken,
) -> Result<(), String> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let kill = CancellationToken::new();
    let _kill_when_dropped = kill.clone().drop_guard();
    let spawned = std::thread::Builder::new()
        .name("extender-http".into())
        .spawn(move || {
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start the HTTP runtime: {e}"))?;
                let served = rt.block_on(async move {
                    let listener =
                        TcpListener::from_std(listener).map_err(|e| format!("listener: {e}"))?;
                    tokio::select! {
                        served = serve(listener, tls, handler, stop) => {
                            served.map_err(|e| e.to_string()).map(|()| false)
                        }
                        () = kill.cancelled() => Ok(true),
                    }
                });
                if let Ok(true) = served {
                    // Not waiting for anything: a killed process waits for nothing.
                    rt.shutdown_background();
                    tracing::warn!("the HTTP thread was killed; its connections and binds dropped where they stood");
                }
                served.map(|_| ())
            }));
            let result =
                run.unwrap_or_else(|p| Err(format!("the HTTP thread panicked: {}", panic_text(p))));
            let _ = done_tx.send(result);
        });
    if let Err(e) = spawned {
        return Err(format!("cannot start the HTTP thread: {e}"));
    }
    done_rx
        .await
        .unwrap_or_else(|_| Err("the HTTP thread stopped without an answer".into()))
}

/// Parses nothing, binds the flags' addresses, connects, and serves until `shutdown`.
pub async fn run(cli: Cli, shutdown: CancellationToken) -> Result<(), RunError> {
    let svc = Service::from_cli(&cli).await?;
    let config = hami_k8s::client::config(cli.client.kubeconfig.as_deref()).await?;
    tracing::info!(
        scheduler = %svc.settings.scheduler_name,
        node_policy = %svc.settings.defaults.node_policy,
        gpu_policy = %svc.settings.defaults.gpu_policy.as_str(),
        http = %cli.http_bind,
        admin = %cli.admin.address,
        ui = cli.ui,
        leader_elect = cli.leader_elect,
        "hami-scheduler starting"
    );
    serve_service_at(svc, config, shutdown).await
}
