//! Serve, register, and start over when kubelet restarts or our socket disappears.
//!
//! Order matters to kubelet: it dials the plugin back *inside* Register, so the socket is
//! served first. A kubelet restart deletes every socket in the directory and creates a new
//! `kubelet.sock`; both are seen through inotify on the directory, and compared by file
//! identity (inode plus change time: a re-created file can reuse the inode number).
//! Before registering again the old server is stopped, which ends its ListAndWatch streams,
//! so kubelet drops the old registration first.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hami_kubelet_api::v1beta1::RegisterRequest;
use hami_kubelet_api::v1beta1::device_plugin_server::DevicePluginServer;
use hami_kubelet_api::v1beta1::registration_client::RegistrationClient;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Interval;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::dir_watch::{DirWatcher, Subscription};
use crate::service::{PluginService, plugin_options};
use crate::shared::{PluginStatus, Shared};

/// How long Register may take (kubelet dials back with a 10 s deadline).
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopping server may take to finish in-flight calls.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Re-check period when inotify is unavailable.
const POLL_FALLBACK: Duration = Duration::from_secs(5);

/// Why serving could not go on.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error("cannot serve on {path}: {source}")]
    Serve { path: String, source: io::Error },
}

/// A file's identity: a re-created file differs even if it reuses the inode number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    ctime: i64,
    ctime_nsec: i64,
}

fn file_id(path: &Path) -> Option<FileId> {
    let m = std::fs::metadata(path).ok()?;
    Some(FileId {
        dev: m.dev(),
        ino: m.ino(),
        ctime: m.ctime(),
        ctime_nsec: m.ctime_nsec(),
    })
}

enum Restart {
    Shutdown,
    Again(&'static str),
    /// The gRPC server ended by itself.
    Crashed,
}

/// Serves and keeps the plugin registered until `shutdown`.
pub(crate) async fn run(
    shared: Arc<Shared>,
    status: watch::Sender<PluginStatus>,
    shutdown: CancellationToken,
) -> Result<(), LifecycleError> {
    let (fs_tx, mut fs_rx) = mpsc::channel::<()>(1);
    // Kept alive for the whole loop; events only say "look again".
    let watcher = watch_directory(&shared.dir_watcher, &shared.cfg.plugin_dir, fs_tx.clone());
    // Without inotify the directory is checked on a timer, in this loop: a task of its
    // own could end unseen and leave a kubelet restart unnoticed.
    let mut poll = watcher.is_none().then(|| {
        let mut tick = tokio::time::interval(POLL_FALLBACK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick
    });
    let mut crashes = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        let stop = shutdown.child_token();
        let (server, ours) = start_server(&shared, stop.clone())?;
        let (outcome, server) = serve_until_restart(
            &shared,
            &status,
            &shutdown,
            server,
            ours,
            (&mut fs_rx, &mut poll),
        )
        .await;
        stop.cancel();
        status.send_modify(|s| s.registered = false);
        if let Some(server) = server {
            finish(server).await;
        }
        remove_if_ours(&shared.cfg.socket_path(), ours);
        match outcome {
            Restart::Shutdown => {
                tracing::info!("device plugin stopped");
                drop(watcher);
                return Ok(());
            }
            Restart::Again(why) => {
                tracing::info!(reason = why, "restarting the device plugin server");
                crashes.reset();
            }
            Restart::Crashed => {
                let wait = crashes.next_delay();
                tracing::warn!(restart_in = ?wait, "restarting the device plugin server after it stopped");
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

type Server = JoinHandle<Result<(), tonic::transport::Error>>;

async fn serve_until_restart(
    shared: &Shared,
    status: &watch::Sender<PluginStatus>,
    shutdown: &CancellationToken,
    mut server: Server,
    ours: Option<FileId>,
    (fs_rx, poll): (&mut mpsc::Receiver<()>, &mut Option<Interval>),
) -> (Restart, Option<Server>) {
    let cfg = &shared.cfg;
    let mut registered_with: Option<FileId> = None;
    let mut kubelet_seen = file_id(&cfg.kubelet_socket());
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
    let mut retry_at = Some(tokio::time::Instant::now());
    loop {
        let retry = async {
            match retry_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return (Restart::Shutdown, Some(server)),
            r = &mut server => {
                match r {
                    Ok(Ok(())) => tracing::warn!("device plugin server ended"),
                    Ok(Err(e)) => tracing::warn!(error = %e, "device plugin server failed"),
                    Err(e) => tracing::warn!(error = %e, "device plugin server task failed"),
                }
                return (Restart::Crashed, None);
            }
            _ = retry => {
                let kubelet = file_id(&cfg.kubelet_socket());
                match register(shared).await {
                    Ok(()) => {
                        registered_with = kubelet;
                        kubelet_seen = kubelet;
                        retry_at = None;
                        backoff.reset();
                        shared.metrics.registration(true);
                        status.send_modify(|s| {
                            s.registered = true;
                            s.registrations += 1;
                        });
                        tracing::info!(resource = %cfg.resource_name, endpoint = %cfg.socket_name, "registered with kubelet");
                    }
                    Err(e) => {
                        shared.metrics.registration(false);
                        let wait = backoff.next_delay();
                        tracing::warn!(error = %e, retry_in = ?wait, "registration with kubelet failed");
                        retry_at = Some(tokio::time::Instant::now() + wait);
                    }
                }
            }
            () = look_again(fs_rx, poll) => {
                if file_id(&cfg.socket_path()) != ours {
                    return (Restart::Again("our socket was removed or replaced"), Some(server));
                }
                let kubelet = file_id(&cfg.kubelet_socket());
                if kubelet == kubelet_seen {
                    continue;
                }
                kubelet_seen = kubelet;
                match (registered_with, kubelet) {
                    (Some(_), Some(_)) => {
                        return (Restart::Again("kubelet.sock was re-created (kubelet restarted)"), Some(server));
                    }
                    (Some(_), None) => {
                        tracing::info!("kubelet.sock disappeared; waiting for kubelet to come back");
                        registered_with = None;
                        retry_at = None;
                        status.send_modify(|s| s.registered = false);
                    }
                    // kubelet (re)appeared while we were not registered: try now.
                    (None, Some(_)) => retry_at = Some(tokio::time::Instant::now()),
                    (None, None) => {}
                }
            }
        }
    }
}

fn start_server(
    shared: &Arc<Shared>,
    stop: CancellationToken,
) -> Result<(Server, Option<FileId>), LifecycleError> {
    let path = shared.cfg.socket_path();
    let fail = |source| LifecycleError::Serve {
        path: path.display().to_string(),
        source,
    };
    // A socket left by a previous run would make bind fail.
    match std::fs::remove_file(&path) {
        Ok(()) => tracing::info!(path = %path.display(), "removed stale socket"),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e)),
    }
    let listener = tokio::net::UnixListener::bind(&path).map_err(fail)?;
    let ours = file_id(&path);
    let service = DevicePluginServer::new(PluginService {
        shared: shared.clone(),
        stop: stop.clone(),
    });
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                hami_kubelet_api::unix::incoming(listener),
                stop.cancelled_owned(),
            ),
    );
    tracing::info!(path = %path.display(), "serving the device plugin API");
    Ok((server, ours))
}

async fn finish(server: Server) {
    let abort = server.abort_handle();
    if tokio::time::timeout(STOP_GRACE, server).await.is_err() {
        tracing::warn!("device plugin server did not stop in time; aborting it");
        abort.abort();
    }
}

/// Removes our socket unless someone else's file took its place.
fn remove_if_ours(path: &Path, ours: Option<FileId>) {
    if ours.is_some() && file_id(path) == ours {
        let _ = std::fs::remove_file(path);
    }
}

async fn register(shared: &Shared) -> Result<(), String> {
    let cfg = &shared.cfg;
    let call = async {
        let channel = hami_kubelet_api::unix::connect(&cfg.kubelet_socket())
            .await
            .map_err(|e| format!("cannot reach {}: {e}", cfg.kubelet_socket().display()))?;
        RegistrationClient::new(channel)
            .register(RegisterRequest {
                version: hami_kubelet_api::VERSION.into(),
                endpoint: cfg.socket_name.clone(),
                resource_name: cfg.resource_name.clone(),
                options: Some(plugin_options(cfg)),
            })
            .await
            .map(|_| ())
            .map_err(|s| format!("kubelet refused the registration: {}", s.message()))
    };
    tokio::time::timeout(REGISTER_TIMEOUT, call)
        .await
        .map_err(|_| format!("kubelet did not answer Register within {REGISTER_TIMEOUT:?}"))?
}

/// inotify on the plugin directory; `None` (with a warning) when it cannot be set up.
fn watch_directory(watcher: &DirWatcher, dir: &Path, tx: mpsc::Sender<()>) -> Option<Subscription> {
    // A full channel already holds a wake-up.
    match watcher.subscribe(dir, move |_| {
        let _ = tx.try_send(());
    }) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, limit_reached = e.limit_reached(), "cannot watch the device plugin directory; checking it every {POLL_FALLBACK:?} instead");
            None
        }
    }
}

/// Resolves when the plugin directory may have changed: an inotify event, or the
/// fallback timer's tick when there is no inotify watch.
async fn look_again(fs_rx: &mut mpsc::Receiver<()>, poll: &mut Option<Interval>) {
    match poll {
        Some(tick) => {
            tick.tick().await;
        }
        // `run` holds a sender for as long as it reads here: the channel stays open.
        None => {
            if fs_rx.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOON: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn without_inotify_the_timer_says_look_again() {
        let (_tx, mut rx) = mpsc::channel(1);
        let mut poll = Some(tokio::time::interval(Duration::from_millis(10)));
        for _ in 0..3 {
            tokio::time::timeout(SOON, look_again(&mut rx, &mut poll))
                .await
                .expect("a tick with no directory event");
        }
    }

    #[tokio::test]
    async fn with_inotify_an_event_says_look_again_and_nothing_else_does() {
        let (tx, mut rx) = mpsc::channel(1);
        tx.try_send(()).unwrap();
        tokio::time::timeout(SOON, look_again(&mut rx, &mut None))
            .await
            .expect("the event");
        drop(tx);
        let quiet = Duration::from_millis(50);
        assert!(
            tokio::time::timeout(quiet, look_again(&mut rx, &mut None))
                .await
                .is_err(),
            "a closed channel is no reason to look again (and no busy loop)"
        );
    }
}
