//! Wiring: the pod watch, the scan loop, the feedback loop and the metrics server, each
//! supervised (restarted with backoff, `/readyz` saying why while it is down; the
//! process exits non-zero when one keeps failing).

use hami_core::sync::RwLockExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hami_device_plugin_nvidia::activity::ActivitySource;
use hami_server::CancellationToken;
use hami_server::admin::{AdminState, Readiness, serve_admin};
use hami_server::supervise::{GaveUp, RestartPolicy, Supervisor, panic_text};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::cli::Cli;
use crate::feedback;
use crate::metrics;
use crate::pods::{self, SharedPods};
use crate::scan::{ScanSettings, Scanner};
use crate::snapshot::{self, Snapshot, SnapshotReceiver, SnapshotSender};
use crate::warnings::Warnings;

/// Readiness reason until the first scan with the node's pods known.
const NOT_SCANNED: &str = "no scan of the container directories yet";
const WARN_EVERY: Duration = Duration::from_secs(600);

/// Everything the monitor needs besides its connections.
#[derive(Debug, Clone)]
pub struct Settings {
    pub node: String,
    pub scan: ScanSettings,
    pub scan_interval: Duration,
    /// None: no feedback loop.
    pub feedback_interval: Option<Duration>,
    pub legacy_metrics: bool,
    pub restart: RestartPolicy,
}

impl Settings {
    pub fn from_cli(cli: &Cli) -> Self {
        Settings {
            node: cli.node_name.clone(),
            scan: ScanSettings {
                containers_dir: cli.hook_path.join("containers"),
                resync_interval: cli.resync_interval,
                mig_apply_lock: cli.mig_apply_lock.clone(),
            },
            scan_interval: cli.scan_interval,
            feedback_interval: cli.feedback.then_some(cli.feedback_interval),
            legacy_metrics: cli.legacy_metrics,
            restart: RestartPolicy::default(),
        }
    }
}

/// Why the monitor could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("--node-name (NODE_NAME) must not be empty")]
    NoNodeName,
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Client(#[from] hami_k8s::client::ClientError),
    #[error(transparent)]
    Backend(#[from] hami_device_plugin::BackendError),
    #[error(transparent)]
    GaveUp(#[from] GaveUp),
}

/// A running monitor's handles, for tests and the demo.
#[derive(Debug, Clone)]
pub struct Handles {
    pub readiness: Readiness,
    pub snapshot: SnapshotReceiver,
    pub pods: SharedPods,
}

/// Runs with connections already made (tests pass emulators and a 127.0.0.1:0
/// listener) until `shutdown`, or until a task keeps failing.
pub async fn serve(
    settings: Settings,
    activity: Arc<dyn ActivitySource>,
    client: kube::Client,
    listener: std::net::TcpListener,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let (handles, supervisor) = start(settings, activity, client, listener, shutdown)?;
    drop(handles);
    supervisor.run().await.map_err(RunError::from)
}

/// Starts every task; the supervisor must then be run.
pub fn start(
    settings: Settings,
    activity: Arc<dyn ActivitySource>,
    client: kube::Client,
    listener: std::net::TcpListener,
    shutdown: CancellationToken,
) -> Result<(Handles, Supervisor), RunError> {
    if settings.node.trim().is_empty() {
        return Err(RunError::NoNodeName);
    }
    let address = listener
        .local_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    listener
        .set_nonblocking(true)
        .map_err(|source| RunError::Bind {
            address: address.clone(),
            source,
        })?;
    let readiness = Readiness::not_ready(NOT_SCANNED);
    let pods = SharedPods::default();
    let (tx, rx) = snapshot::channel();
    let mut registry = Registry::default();
    metrics::register(
        &mut registry,
        rx.clone(),
        pods.clone(),
        settings.node.clone(),
        settings.legacy_metrics,
    );
    hami_server::build_info::register_build_info(&mut registry);
    let admin = AdminState {
        readiness: readiness.clone(),
        registry: Arc::new(registry),
    };
    let mut sup = Supervisor::new(readiness.clone(), shutdown, settings.restart);

    let (c, n, p, r) = (
        client,
        settings.node.clone(),
        pods.clone(),
        readiness.clone(),
    );
    sup.spawn(pods::COMPONENT, move |stop| {
        pods::watch_pods(c.clone(), n.clone(), p.clone(), r.clone(), stop)
    });

    let (p, r, s, tx) = (
        pods.clone(),
        readiness.clone(),
        settings.clone(),
        Arc::new(tx),
    );
    sup.spawn("scan loop", move |stop| {
        scan_loop(
            s.clone(),
            p.clone(),
            activity.clone(),
            tx.clone(),
            r.clone(),
            stop,
        )
    });

    if let Some(every) = settings.feedback_interval {
        let (rx, lock) = (rx.clone(), settings.scan.mig_apply_lock.clone());
        sup.spawn("feedback loop", move |stop| {
            feedback_loop(rx.clone(), every, lock.clone(), stop)
        });
    }

    sup.spawn("metrics server", move |stop| {
        let admin = admin.clone();
        let listener = listener.try_clone().and_then(TcpListener::from_std);
        async move {
            let listener = listener.map_err(|e| format!("listener: {e}"))?;
            serve_admin(listener, admin, stop)
                .await
                .map_err(|e| e.to_string())
        }
    });
    tracing::info!(node = %settings.node, dir = %settings.scan.containers_dir.display(), metrics = %address, "hami-vgpu-monitor started");
    Ok((
        Handles {
            readiness,
            snapshot: rx,
            pods,
        },
        sup,
    ))
}

/// Scans every `every` until `stop`; publishes each result.
async fn scan_loop(
    settings: Settings,
    pods: SharedPods,
    activity: Arc<dyn ActivitySource>,
    tx: Arc<SnapshotSender>,
    readiness: Readiness,
    stop: CancellationToken,
) -> Result<(), String> {
    let mut scanner = Some(Scanner::new(settings.scan.clone()));
    let mut warnings = Some(Warnings::new(WARN_EVERY));
    let mut scans = tx.borrow().scans;
    let mut tick = tokio::time::interval(settings.scan_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = tick.tick() => {}
        }
        let (Some(mut sc), Some(mut w)) = (scanner.take(), warnings.take()) else {
            return Err("scanner state lost".into());
        };
        let (p, a) = (pods.clone(), activity.clone());
        let done = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let mut containers = Vec::new();
            let (stats, synced) = {
                let index = p.read_unpoisoned();
                (sc.scan(&index, &mut containers), index.synced())
            };
            let gpus = match a.activity() {
                Ok(g) => {
                    w.clear("activity");
                    g
                }
                Err(e) => {
                    if w.allow("activity", &e.to_string()) {
                        tracing::warn!(error = %e, "GPU activity unavailable; host series left out");
                    }
                    Vec::new()
                }
            };
            (sc, w, containers, stats, gpus, synced, started.elapsed())
        })
        .await;
        let (sc, w, containers, stats, gpus, synced, took) = match done {
            Ok(d) => d,
            Err(e) if e.is_panic() => {
                return Err(format!("scan panicked: {}", panic_text(e.into_panic())));
            }
            Err(e) => return Err(format!("scan task failed: {e}")),
        };
        scanner = Some(sc);
        warnings = Some(w);
        if stats.paused {
            tracing::debug!("MIG apply lock present; scan skipped");
            tx.send_modify(|s| {
                let mut next = Snapshot::clone(s);
                next.stats.paused = true;
                *s = Arc::new(next);
            });
            continue;
        }
        scans += 1;
        tracing::debug!(read = stats.read, skipped = stats.skipped, removed = stats.removed.len(), took = ?took, "scan done");
        tx.send_replace(Arc::new(Snapshot {
            containers,
            gpus,
            stats,
            scan_duration: took,
            scans,
        }));
        if synced {
            readiness.set_ready();
        }
    }
}

/// Runs a feedback round every `every` over the last scan's containers.
async fn feedback_loop(
    snapshots: SnapshotReceiver,
    every: Duration,
    mig_apply_lock: std::path::PathBuf,
    stop: CancellationToken,
) -> Result<(), String> {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut warnings = Some(Warnings::new(WARN_EVERY));
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = tick.tick() => {}
        }
        let snap = snapshots.borrow().clone();
        if snap.containers.is_empty() {
            continue;
        }
        let Some(mut w) = warnings.take() else {
            return Err("feedback state lost".into());
        };
        let lock = mig_apply_lock.clone();
        let done = tokio::task::spawn_blocking(move || {
            let stats = if lock.exists() {
                None
            } else {
                Some(feedback::run_round(&snap.containers, &mut w))
            };
            (w, stats)
        })
        .await;
        match done {
            Ok((w, stats)) => {
                warnings = Some(w);
                if let Some(s) = stats {
                    tracing::debug!(
                        containers = s.containers,
                        writes = s.writes,
                        blocked = s.blocked,
                        errors = s.errors,
                        "feedback round"
                    );
                }
            }
            Err(e) if e.is_panic() => {
                return Err(format!(
                    "feedback round panicked: {}",
                    panic_text(e.into_panic())
                ));
            }
            Err(e) => return Err(format!("feedback task failed: {e}")),
        }
    }
}

/// Raises the soft limit of open files to the hard limit: each container's cache file
/// stays open between scans, and a node can run more containers than the usual soft
/// limit of 1024.
pub fn raise_open_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let from = limit.current;
        limit.current = limit.maximum;
        match setrlimit(Resource::Nofile, limit) {
            Ok(()) => tracing::debug!(?from, to = ?limit.current, "open file limit raised"),
            Err(e) => tracing::warn!(error = %e, "cannot raise the open file limit"),
        }
    }
}

/// Everything the flags name, connected, until `shutdown`.
pub async fn run(cli: Cli, shutdown: CancellationToken) -> Result<(), RunError> {
    let settings = Settings::from_cli(&cli);
    let selected = hami_device_plugin_nvidia::backends::Selected::build(&cli.backend)?;
    let client = hami_k8s::client::connect(cli.client.kubeconfig.as_deref()).await?;
    let address = cli.metrics.address;
    let listener = std::net::TcpListener::bind(address).map_err(|source| RunError::Bind {
        address: address.to_string(),
        source,
    })?;
    serve(settings, selected.activity(), client, listener, shutdown).await
}
