//! A component of the cluster running as a task until its stop token is cancelled,
//! and the harness's error type.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long a stopping component may take to shut down gracefully before it is aborted.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Why the harness could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Kube { what: String, source: kube::Error },
    #[error(transparent)]
    Wait(#[from] hami_testkit::fixture::WaitError),
    #[error("{0}")]
    Setup(String),
    #[error("no node {0:?} in this cluster")]
    NoSuchNode(String),
}

impl HarnessError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| HarnessError::Io { what, source }
    }

    pub(crate) fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| HarnessError::Kube { what, source }
    }
}

/// One running component (webhook, extender, device plugin, node agent, ...).
#[derive(Debug)]
pub(crate) struct Running {
    name: String,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<(), String>>>,
}

impl Running {
    /// Spawns `run`, which must return once `stop` is cancelled.
    pub(crate) fn spawn<F, E>(name: impl Into<String>, stop: CancellationToken, run: F) -> Self
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        let name = name.into();
        let label = name.clone();
        let task = tokio::spawn(async move {
            let result = run.await.map_err(|e| e.to_string());
            if let Err(e) = &result {
                tracing::error!(component = %label, error = %e, "component stopped with an error");
            }
            result
        });
        Self {
            name,
            stop,
            task: Some(task),
        }
    }

    /// Whether the component ended (on its own or after a stop).
    pub(crate) fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops gracefully (aborting after a grace period); the component's own error, if
    /// it ended with one.
    pub(crate) async fn stop(mut self) -> Result<(), HarnessError> {
        self.stop.cancel();
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        let abort = task.abort_handle();
        match tokio::time::timeout(STOP_GRACE, task).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(HarnessError::Setup(format!("{} failed: {e}", self.name))),
            Ok(Err(join)) => Err(HarnessError::Setup(format!(
                "{} task failed: {join}",
                self.name
            ))),
            Err(_) => {
                abort.abort();
                Err(HarnessError::Setup(format!(
                    "{} did not stop within {STOP_GRACE:?}; aborted",
                    self.name
                )))
            }
        }
    }
}

impl Running {
    /// Ends the component at once, as `kill -9` ends a process: its task is aborted
    /// wherever it stands, and with it every task its supervisor runs (aborted when the
    /// supervisor is dropped) and the extender's `/filter`–`/bind` thread, whose runtime
    /// is shut down without draining: its connections and in-flight binds are dropped, and
    /// no bind of the killed instance goes on (`docs/extender.md#shutdown`). Then its stop
    /// token is cancelled, so what it spawned outside a supervisor (connections of a
    /// server on this runtime) ends too; those finish the request they are serving, as do
    /// writes it had already spawned (an annotation write, an event).
    pub(crate) async fn kill(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        self.stop.cancel();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
