//! Supervised long-running tasks: a task that ends while the process is not shutting
//! down (it returned, failed or panicked) turns `/readyz` not ready with the reason and is
//! started again after a growing delay; a task that keeps failing makes the supervisor
//! give up, stop the others and report the failure, so the process exits non-zero and
//! its restart policy takes over.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::admin::{AdminState, MetricsPriority, Readiness, serve_admin_with};
use crate::listener::Relistener;
use crate::low_priority::LowPrioritySlot;
use crate::{Handler, TlsConfig};

/// When to restart and when to give up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Delay before the first restart; doubled after each failure up to `max_delay`.
    pub initial_delay: Duration,
    pub max_delay: Duration,
    /// Give up once a task failed this many times within `window`.
    pub max_failures: u32,
    pub window: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            max_failures: 5,
            window: Duration::from_secs(300),
        }
    }
}

/// The supervisor gave up on a task.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("task {task} failed {failures} times within {window:?}; last: {last}")]
pub struct GaveUp {
    pub task: String,
    pub failures: u32,
    pub window: Duration,
    pub last: String,
}

/// Runs named tasks under one restart policy until shutdown.
#[derive(Debug)]
pub struct Supervisor {
    readiness: Readiness,
    shutdown: CancellationToken,
    policy: RestartPolicy,
    tasks: JoinSet<Result<(), GaveUp>>,
}

impl Supervisor {
    /// Tasks run until `shutdown` is cancelled; giving up on one cancels it too.
    pub fn new(readiness: Readiness, shutdown: CancellationToken, policy: RestartPolicy) -> Self {
        Supervisor {
            readiness,
            shutdown,
            policy,
            tasks: JoinSet::new(),
        }
    }

    /// Starts `make(stop)` and keeps it running: `stop` is cancelled at shutdown, and the
    /// future must then return. Any other return is a failure.
    pub fn spawn<F, Fut, E>(&mut self, name: &str, make: F)
    where
        F: FnMut(CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let name = name.to_string();
        let readiness = self.readiness.clone();
        let shutdown = self.shutdown.clone();
        let policy = self.policy;
        self.tasks
            .spawn(keep_running(name, make, readiness, shutdown, policy));
    }

    /// Waits until every task has stopped after shutdown, or the first give-up (which
    /// stops the others first).
    pub async fn run(mut self) -> Result<(), GaveUp> {
        let mut result = Ok(());
        while let Some(done) = self.tasks.join_next().await {
            let outcome = match done {
                Ok(r) => r,
                // keep_running catches the task's own panics; this is the supervisor's.
                Err(e) => Err(GaveUp {
                    task: "supervisor".into(),
                    failures: 1,
                    window: Duration::ZERO,
                    last: e.to_string(),
                }),
            };
            if let Err(e) = outcome {
                tracing::error!(task = %e.task, error = %e, "giving up; stopping");
                self.shutdown.cancel();
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        result
    }
}

async fn keep_running<F, Fut, E>(
    name: String,
    mut make: F,
    readiness: Readiness,
    shutdown: CancellationToken,
    policy: RestartPolicy,
) -> Result<(), GaveUp>
where
    F: FnMut(CancellationToken) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Display + Send + 'static,
{
    let mut failures: Vec<Instant> = Vec::new();
    let mut delay = policy.initial_delay;
    loop {
        let stop = shutdown.child_token();
        let run = make(stop.clone());
        // Aborted with this task: a supervisor dropped unfinished (its process killed)
        // leaves nothing running behind it.
        let ended = AbortOnDropHandle::new(tokio::spawn(run)).await;
        // Whatever the run started and left behind (threads, child tasks holding `stop`)
        // ends with it, before a new run starts.
        stop.cancel();
        if shutdown.is_cancelled() {
            return Ok(());
        }
        let why = match ended {
            Ok(Ok(())) => "ended on its own".to_string(),
            Ok(Err(e)) => format!("failed: {e}"),
            Err(e) if e.is_panic() => format!("panicked: {}", panic_text(e.into_panic())),
            Err(e) => format!("was cancelled: {e}"),
        };
        let now = Instant::now();
        failures.retain(|t| now.duration_since(*t) < policy.window);
        failures.push(now);
        let count = failures.len() as u32;
        if count >= policy.max_failures {
            readiness.set_component(&name, Err(format!("{why}; gave up")));
            return Err(GaveUp {
                task: name,
                failures: count,
                window: policy.window,
                last: why,
            });
        }
        tracing::error!(task = %name, reason = %why, restart_in = ?delay, "task stopped unexpectedly; restarting");
        readiness.set_component(&name, Err(format!("{why}; restarting in {delay:?}")));
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(policy.max_delay);
        readiness.set_component(&name, Ok(()));
    }
}

/// Serves the admin routes (`/livez`, `/readyz`, `/metrics`) on `listener` as the
/// supervised task `admin server`.
pub fn supervise_admin(sup: &mut Supervisor, listener: Relistener, state: AdminState) {
    let priority = MetricsPriority::Normal;
    supervise_admin_with(sup, listener, state, None, TlsConfig::None, priority);
}

/// [`supervise_admin`] with `more` routes behind the admin ones (see
/// [`crate::admin::admin_handler_with`]), over `tls`, `/metrics` at `priority`. At
/// [`MetricsPriority::Lowest`] the thread that serves the scrapes is kept running by the
/// supervised task `metrics-serve thread` (its slot is returned, to watch it); a scrape
/// while it is down is served at normal priority (`docs/architecture.md#supervision`).
pub fn supervise_admin_with(
    sup: &mut Supervisor,
    listener: Relistener,
    state: AdminState,
    more: Option<Handler>,
    tls: TlsConfig,
    priority: MetricsPriority,
) -> Option<LowPrioritySlot> {
    let lowest = match priority {
        MetricsPriority::Normal => None,
        MetricsPriority::Lowest => {
            let slot = LowPrioritySlot::new("metrics-serve");
            let running = slot.clone();
            sup.spawn("metrics-serve thread", move |stop| {
                let running = running.clone();
                async move { running.run(stop).await }
            });
            Some(slot)
        }
    };
    let offload = lowest.clone();
    sup.spawn("admin server", move |stop| {
        let (state, more, tls, offload) =
            (state.clone(), more.clone(), tls.clone(), offload.clone());
        let listener = listener.tokio();
        async move {
            let listener = listener.map_err(|e| format!("listener: {e}"))?;
            serve_admin_with(listener, state, more, tls, offload, stop)
                .await
                .map_err(|e| e.to_string())
        }
    });
    lowest
}

/// The message of a panic payload (`panic!` with a literal or a formatted string).
pub fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn fast(max_failures: u32) -> RestartPolicy {
        RestartPolicy {
            initial_delay: Duration::from_millis(50),
            max_delay: Duration::from_millis(50),
            max_failures,
            window: Duration::from_secs(60),
        }
    }

    /// A supervisor reporting on a fresh readiness, with its shutdown token.
    fn supervisor(max_failures: u32) -> (Readiness, CancellationToken, Supervisor) {
        let readiness = Readiness::ready();
        let shutdown = CancellationToken::new();
        let sup = Supervisor::new(readiness.clone(), shutdown.clone(), fast(max_failures));
        (readiness, shutdown, sup)
    }

    /// After one restart: ready again, two starts, and a clean shutdown.
    async fn ends_restarted_once(
        readiness: &Readiness,
        starts: &AtomicU32,
        shutdown: CancellationToken,
        run: tokio::task::JoinHandle<Result<(), GaveUp>>,
    ) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(readiness.check(), Ok(()));
        assert_eq!(starts.load(Ordering::SeqCst), 2);
        shutdown.cancel();
        assert_eq!(run.await.unwrap(), Ok(()));
        assert_eq!(readiness.check(), Ok(()), "a clean shutdown is no failure");
    }

    #[tokio::test]
    async fn failed_task_is_restarted_and_readiness_says_why_meanwhile() {
        let (readiness, shutdown, mut sup) = supervisor(10);
        let starts = Arc::new(AtomicU32::new(0));
        let counter = starts.clone();
        sup.spawn("scan loop", move |stop: CancellationToken| {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 0 {
                    return Err("disk on fire");
                }
                stop.cancelled().await;
                Ok(())
            }
        });
        let run = tokio::spawn(sup.run());
        tokio::time::sleep(Duration::from_millis(20)).await;
        let reason = readiness.check().unwrap_err();
        assert!(
            reason.contains("scan loop: failed: disk on fire; restarting in"),
            "{reason}"
        );
        ends_restarted_once(&readiness, &starts, shutdown, run).await;
    }

    #[tokio::test]
    async fn panics_count_and_the_supervisor_gives_up() {
        let (readiness, shutdown, mut sup) = supervisor(3);
        sup.spawn("feedback", |_stop: CancellationToken| async {
            if true {
                panic!("bad index");
            }
            Ok::<(), String>(())
        });
        sup.spawn("metrics", |stop: CancellationToken| async move {
            stop.cancelled().await;
            Ok::<(), String>(())
        });
        let err = sup.run().await.unwrap_err();
        assert_eq!((err.task.as_str(), err.failures), ("feedback", 3));
        assert!(err.last.contains("panicked: bad index"), "{err}");
        assert!(shutdown.is_cancelled(), "the other tasks are stopped");
        assert!(readiness.check().unwrap_err().contains("gave up"));
    }

    #[tokio::test]
    async fn a_panicking_task_is_named_restarted_and_its_leftovers_stopped() {
        let (readiness, shutdown, mut sup) = supervisor(10);
        let starts = Arc::new(AtomicU32::new(0));
        let (left_tx, mut left_rx) = tokio::sync::mpsc::channel::<()>(1);
        let counter = starts.clone();
        sup.spawn("health watch", move |stop: CancellationToken| {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let left = left_tx.clone();
            async move {
                if n == 0 {
                    // Something the run started that outlives it, as a watch thread does.
                    let child = stop.clone();
                    tokio::spawn(async move {
                        child.cancelled().await;
                        let _ = left.send(()).await;
                    });
                    panic!("index out of bounds");
                }
                stop.cancelled().await;
                Ok::<(), String>(())
            }
        });
        let run = tokio::spawn(sup.run());
        tokio::time::timeout(Duration::from_secs(5), left_rx.recv())
            .await
            .expect("the failed run's stop token is cancelled");
        let reason = readiness.check().unwrap_err();
        assert!(
            reason.contains("health watch: panicked: index out of bounds; restarting in"),
            "{reason}"
        );
        ends_restarted_once(&readiness, &starts, shutdown, run).await;
    }

    #[test]
    fn readiness_combines_main_and_components() {
        let r = Readiness::not_ready("pods not synced");
        r.set_component("scan", Err("boom".into()));
        assert_eq!(r.check(), Err("pods not synced; scan: boom".into()));
        r.set_ready();
        assert_eq!(r.check(), Err("scan: boom".into()));
        r.set_component("scan", Ok(()));
        assert_eq!(r.check(), Ok(()));
    }
}
