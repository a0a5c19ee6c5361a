//! The API client /bind's own calls use (node lock, Binding): one made on the thread
//! that answers kube-scheduler, so each call is driven where it is awaited.
//!
//! A `kube::Client` runs its request queue and its connections as tasks of the runtime
//! it was made on. The shared client is the main runtime's, so every call /bind made from
//! the HTTP thread crossed threads twice (request out, answer back): with three calls per
//! bind, six wake-ups of another thread on kube-scheduler's clock, each a wait for a core
//! on a busy machine (`docs/extender.md#where-a-cycles-time-goes`). A client made on the
//! HTTP thread's one-thread runtime has its tasks there too.

use std::sync::Mutex;
use std::thread::ThreadId;

use hami_core::sync::MutexExt;
use kube::{Client, Config};
use tokio::runtime::{Handle, RuntimeFlavor};

/// The shared client, and one per one-thread runtime that asked, made from `config`.
pub(crate) struct HotClient {
    shared: Client,
    config: Option<Config>,
    /// The client of the thread that asked last (the HTTP thread; a new one after the
    /// server restarted on a new thread: thread ids are never reused).
    local: Mutex<Option<(ThreadId, Client)>>,
}

impl HotClient {
    /// `config`: where the shared client connects; without it every caller gets the
    /// shared client.
    pub(crate) fn new(shared: Client, config: Option<Config>) -> Self {
        HotClient {
            shared,
            config,
            local: Mutex::default(),
        }
    }

    /// The client for the calling task: on a one-thread runtime (the HTTP thread), one
    /// made there; elsewhere the shared one, whose runtime the caller already shares.
    pub(crate) fn get(&self) -> Client {
        let Some(config) = &self.config else {
            return self.shared.clone();
        };
        let on_own_thread =
            Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::CurrentThread);
        if !on_own_thread {
            return self.shared.clone();
        }
        let me = std::thread::current().id();
        let mut local = self.local.lock_unpoisoned();
        if let Some((id, client)) = local.as_ref()
            && *id == me
        {
            return client.clone();
        }
        let client = Client::try_from(config.clone()).unwrap_or_else(|e| {
            // Kept for this thread: tried once, not at every call.
            tracing::warn!(error = %e, "cannot make an API client on the HTTP thread; /bind uses the shared one");
            self.shared.clone()
        });
        *local = Some((me, client.clone()));
        client
    }
}
