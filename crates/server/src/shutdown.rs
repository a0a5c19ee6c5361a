//! Turning process signals into a cancellation token.

use tokio_util::sync::CancellationToken;

/// A token cancelled on SIGTERM (what kubelet sends) or SIGINT (Ctrl-C). Must be called
/// inside a tokio runtime.
///
/// The handlers are installed before this returns, not later in the spawned task: a
/// signal that arrives between start-up and the task's first poll would otherwise hit the
/// default action and kill the process instead of shutting it down cleanly (a script that
/// reads a binary's first line and then stops it would see a signal death).
pub fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    let signals = install();
    tokio::spawn(async move {
        signals.wait().await;
        tracing::info!("shutdown signal received");
        cancel.cancel();
    });
    token
}

#[cfg(unix)]
struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

#[cfg(unix)]
fn install() -> Signals {
    use tokio::signal::unix::{SignalKind, signal};
    let open = |kind: SignalKind, name: &str| match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, signal = name, "cannot listen for this signal; it will not stop the process cleanly");
            None
        }
    };
    Signals {
        term: open(SignalKind::terminate(), "SIGTERM"),
        int: open(SignalKind::interrupt(), "SIGINT"),
    }
}

#[cfg(unix)]
impl Signals {
    async fn wait(mut self) {
        async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            _ = recv(&mut self.term) => {}
            _ = recv(&mut self.int) => {}
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
fn install() -> Signals {
    Signals
}

#[cfg(not(unix))]
impl Signals {
    async fn wait(self) {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A signal sent right after the call (before the spawned task ever ran) cancels the
    /// token instead of killing the test process.
    #[tokio::test(flavor = "current_thread")]
    async fn a_signal_right_after_the_call_is_caught() {
        let token = shutdown_on_signals();
        // Raised through the kill command: no libc binding needed for one test.
        let pid = std::process::id().to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(status.success());
        tokio::time::timeout(std::time::Duration::from_secs(10), token.cancelled())
            .await
            .expect("the token is cancelled by SIGTERM");
    }
}
