//! Work that must never take CPU from request threads: the threads it runs on are put in
//! the kernel's `SCHED_IDLE` class, which runs only on CPU time no other thread wants and
//! is preempted at once when a normal thread wakes up (a thread merely at `nice 19` may
//! keep the CPU for its time slice first, a millisecond or more). Used for a `/metrics`
//! scrape: its page formatting ([`crate::admin::lower_encoding_priority`]) and its body
//! writes ([`LowPriorityRuntime`]) (`docs/extender.md#metrics`). The runtime's thread is
//! kept running by a supervised task ([`LowPrioritySlot::run`],
//! `docs/architecture.md#supervision`).
//!
//! A thread cannot come back from `SCHED_IDLE` without privileges, and a thread it starts
//! inherits it: whatever takes a lock a request thread waits for must not run on it.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use hami_core::sync::{MutexExt, RwLockExt};

use thread_priority::{
    NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
    set_thread_priority_and_policy, thread_native_id, thread_schedule_policy,
};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

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
/// runtime, until shut down or dropped (its tasks are then dropped with it).
#[derive(Debug)]
pub struct LowPriorityRuntime {
    name: String,
    handle: Handle,
    /// Dropped (taken, or with `self`) to end the thread's runtime.
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    /// Cancelled when the thread has ended, however it ended.
    ended: CancellationToken,
    /// Set by the thread when its runtime returned (it did not panic).
    returned: Arc<AtomicBool>,
}

impl LowPriorityRuntime {
    /// Starts the thread, named `name`.
    pub fn start(name: &str) -> io::Result<Self> {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let ended = CancellationToken::new();
        let returned = Arc::new(AtomicBool::new(false));
        let thread = name.to_string();
        let (on_end, returns) = (ended.clone().drop_guard(), returned.clone());
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // Cancels `ended` when the thread ends, by a panic too.
                let _on_end = on_end;
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
                drop(runtime);
                returns.store(true, Ordering::Release);
            })?;
        let handle = handle_rx
            .recv()
            .map_err(|_| io::Error::other(format!("the thread {name} ended at its start")))??;
        Ok(LowPriorityRuntime {
            name: name.to_string(),
            handle,
            stop: Mutex::new(Some(stop)),
            ended,
            returned,
        })
    }

    /// Where to spawn the low-priority work.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// The thread's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Ends the runtime now, with the tasks on it, as dropping the last owner does.
    pub fn shut_down(&self) {
        drop(self.stop.lock_unpoisoned().take());
    }

    /// Resolves once the thread has ended: why.
    pub async fn ended(&self) -> &'static str {
        self.ended.cancelled().await;
        if self.returned.load(Ordering::Acquire) {
            "its runtime was shut down"
        } else {
            "it panicked"
        }
    }
}

/// The [`LowPriorityRuntime`] that the supervised task [`LowPrioritySlot::run`] keeps
/// running, shared with whoever hands it work (`serve::Offload`): none while that task
/// is down, and work then runs where it is (`docs/architecture.md#supervision`).
#[derive(Debug, Clone)]
pub struct LowPrioritySlot {
    name: String,
    current: Arc<RwLock<Option<Arc<LowPriorityRuntime>>>>,
}

impl LowPrioritySlot {
    /// An empty slot for a thread named `name`.
    pub fn new(name: &str) -> Self {
        LowPrioritySlot {
            name: name.to_string(),
            current: Arc::default(),
        }
    }

    /// The thread's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The runtime now running, if one is. Holding it keeps it running (until it is shut
    /// down) after the slot let go of it.
    pub fn current(&self) -> Option<Arc<LowPriorityRuntime>> {
        self.current.read_unpoisoned().clone()
    }

    /// The supervised task: starts a runtime and offers it until `stop` is cancelled
    /// (`Ok`); an error when it cannot start or its thread ends before, so that the
    /// supervisor reports it and starts another. The slot is empty again when this
    /// returns; the runtime lives on while work on it holds it.
    pub async fn run(&self, stop: CancellationToken) -> Result<(), String> {
        let runtime = LowPriorityRuntime::start(&self.name)
            .map_err(|e| format!("cannot start the thread {}: {e}", self.name))?;
        let runtime = Arc::new(runtime);
        *self.current.write_unpoisoned() = Some(runtime.clone());
        let outcome = tokio::select! {
            () = stop.cancelled() => Ok(()),
            why = runtime.ended() => Err(format!("the thread {} ended: {why}", self.name)),
        };
        *self.current.write_unpoisoned() = None;
        outcome
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

    #[tokio::test]
    async fn a_slot_offers_its_runtime_until_stopped_and_reports_a_thread_that_ended() {
        let slot = LowPrioritySlot::new("test-slot");
        assert!(slot.current().is_none());
        let stop = CancellationToken::new();
        let run = tokio::spawn({
            let (slot, stop) = (slot.clone(), stop.clone());
            async move { slot.run(stop).await }
        });
        let first = wait_for_runtime(&slot).await;
        first.shut_down();
        assert_eq!(
            run.await.unwrap(),
            Err("the thread test-slot ended: its runtime was shut down".into())
        );
        assert!(slot.current().is_none(), "no runtime offered once it ended");

        let run = tokio::spawn({
            let (slot, stop) = (slot.clone(), stop.clone());
            async move { slot.run(stop).await }
        });
        let second = wait_for_runtime(&slot).await;
        let on_it = second.handle().spawn(async { this_thread_is_idle_class() });
        assert!(on_it.await.unwrap(), "a new thread at the lowest priority");
        stop.cancel();
        assert_eq!(run.await.unwrap(), Ok(()));
        assert!(slot.current().is_none());
        // Held by someone (a connection served on it), it runs on until let go.
        let still = second.handle().spawn(async { 1 });
        assert_eq!(still.await.unwrap(), 1);
        drop(second);
    }

    /// The runtime `slot` offers, once it offers one.
    async fn wait_for_runtime(slot: &LowPrioritySlot) -> Arc<LowPriorityRuntime> {
        for _ in 0..1000 {
            if let Some(runtime) = slot.current() {
                return runtime;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("no runtime offered");
    }
}
