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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hami_testkit::ApiServer;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::Api;

    use super::*;

    /// Reads namespace `default` with the client `hot` gives a new thread's one-thread
    /// runtime (the HTTP thread), and whether it was that thread's own client.
    fn read_on_new_http_thread(hot: Arc<HotClient>) -> (Result<String, String>, bool) {
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            let read = rt.block_on(async {
                let api: Api<Namespace> = Api::all(hot.get());
                api.get("default")
                    .await
                    .map(|n| n.metadata.name.unwrap_or_default())
                    .map_err(|e| e.to_string())
            });
            let own = hot
                .local
                .lock_unpoisoned()
                .as_ref()
                .is_some_and(|(id, _)| *id == std::thread::current().id());
            Ok::<_, String>((read, own))
        })
        .join()
        .map_err(|_| "the thread panicked".to_string())
        .and_then(|r| r)
        .unwrap_or_else(|e| (Err(e), false))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn each_http_thread_gets_a_working_client_of_its_own() {
        let server = ApiServer::start().await.unwrap();
        let config = Config::new(server.url().parse().unwrap());
        let shared = Client::try_from(config.clone()).unwrap();
        let hot = Arc::new(HotClient::new(shared, Some(config)));
        // The second thread comes after the first one's runtime ended (the server
        // restarted): the first thread's client, whose tasks died with that runtime,
        // must not be handed to it.
        for round in 0..2 {
            let (read, own) = tokio::task::spawn_blocking({
                let hot = hot.clone();
                move || read_on_new_http_thread(hot)
            })
            .await
            .unwrap();
            assert_eq!(read.as_deref(), Ok("default"), "round {round}");
            assert!(
                own,
                "round {round}: the thread used a client made elsewhere"
            );
        }
        // On the multi-thread runtime the shared client is used, and none is made.
        hot.local.lock_unpoisoned().take();
        let api: Api<Namespace> = Api::all(hot.get());
        assert!(api.get("default").await.is_ok());
        assert!(hot.local.lock_unpoisoned().is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn without_a_config_the_http_thread_uses_the_shared_client() {
        let server = ApiServer::start().await.unwrap();
        let shared = Client::try_from(Config::new(server.url().parse().unwrap())).unwrap();
        let hot = Arc::new(HotClient::new(shared, None));
        let (read, own) = tokio::task::spawn_blocking({
            let hot = hot.clone();
            move || read_on_new_http_thread(hot)
        })
        .await
        .unwrap();
        assert_eq!(read.as_deref(), Ok("default"));
        assert!(!own);
    }
}
