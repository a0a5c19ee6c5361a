//! Work that must never take CPU from request threads: the threads it runs on are put in
//! the kernel's `SCHED_IDLE` class, which runs only on CPU time no other thread wants and
//! is preempted at once when a normal thread wakes up (a thread merely at `nice 19` may
//! keep the CPU for its time slice first, a millisecond or more). Used for a `/metrics`
//! scrape: its page formatting ([`crate::admin::lower_encoding_priority`]) and its body
//! writes ([`LowPriorityRuntime`]) (`docs/extender.md#metrics`).
//!
//! A thread cannot come back from `SCHED_IDLE` without privileges, and a thread it starts
//! inherits it: whatever takes a lock a request thread waits for must not run on it.

use std::io;

use thread_priority::{
    NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
    set_thread_priority_and_policy, thread_native_id, thread_schedule_policy,
};
use tokio::runtime::Handle;

/// `nice 19`, where `SCHED_IDLE` cannot be had.
const LOWEST_NICE: i32 = 19;

/// Puts the calling thread at the lowest CPU priority for the rest of its life:
/// `SCHED_IDLE`, else `nice 19`; an error only when neither could be set.
pub fn lower_this_thread() -> io::Result<()> {
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    match set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle) {
        Ok(()) => Ok(()),
        // Linux applies a thread's own nice value to that thread only.
        Err(idle_error) => rustix::process::setpriority_process(None, LOWEST_NICE)
            .map_err(|e| io::Error::other(format!("SCHED_IDLE: {idle_error:?}; nice: {e}"))),
    }
}

/// Whether the calling thread runs in `SCHED_IDLE`.
pub fn this_thread_is_idle_class() -> bool {
    thread_schedule_policy()
        .is_ok_and(|p| p == ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle))
}

/// A thread at the lowest CPU priority ([`lower_this_thread`]) running a one-thread
/// runtime, until dropped (its tasks are then dropped with it).
#[derive(Debug)]
pub struct LowPriorityRuntime {
    handle: Handle,
    /// Dropped with `self`: ends the thread's runtime.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl LowPriorityRuntime {
    /// Starts the thread, named `name`.
    pub fn start(name: &str) -> io::Result<Self> {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = name.to_string();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if let Err(e) = lower_this_thread() {
                    tracing::warn!(%thread, error = %e, "cannot lower the thread's CPU priority; it runs at normal priority");
                }
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                let runtime = match runtime {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = handle_tx.send(Err(e));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(runtime.handle().clone()));
                // Until the sender is dropped (or sends).
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        let handle = handle_rx
            .recv()
            .map_err(|_| io::Error::other(format!("the thread {name} ended at its start")))??;
        Ok(LowPriorityRuntime {
            handle,
            _stop: stop,
        })
    }

    /// Where to spawn the low-priority work.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_on_the_runtime_run_at_the_lowest_priority_and_stop_with_it() {
        let runtime = LowPriorityRuntime::start("test-low-priority").unwrap();
        let on_it = runtime
            .handle()
            .spawn(async { this_thread_is_idle_class() });
        assert!(on_it.await.unwrap(), "the runtime's thread is SCHED_IDLE");
        assert!(!this_thread_is_idle_class(), "the caller's thread is not");

        let forever = runtime.handle().spawn(std::future::pending::<()>());
        drop(runtime);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), forever)
            .await
            .expect("the runtime's tasks end when it is dropped");
        assert!(ended.unwrap_err().is_cancelled());
    }
}
