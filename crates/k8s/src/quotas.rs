//! The namespaces' ResourceQuota limits on device memory and cores, kept current by a
//! watch of every ResourceQuota (list, then watch; relist on 410 or a dropped
//! connection), as HAMi's scheduler keeps them from an informer
//! (`docs/protocol.md#resourcequota`). The scheduler extender and the webhook both read
//! them from here.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use futures::StreamExt;
use hami_core::quota::QuotaBook;
use hami_core::sync::RwLockExt;
use hami_core::vendor::VendorRegistry;
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;

use crate::watch::{WatchStopped, next_event};

/// The limits, shared between the watch that fills them and their readers. Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct QuotaCache {
    book: Arc<RwLock<QuotaBook>>,
    synced: Arc<AtomicBool>,
}

impl QuotaCache {
    /// An empty cache for the resources the registry's vendors track.
    pub fn new(registry: &VendorRegistry) -> Self {
        QuotaCache {
            book: Arc::new(RwLock::new(QuotaBook::new(registry))),
            synced: Arc::default(),
        }
    }

    /// The limits as they are now.
    pub fn read(&self) -> RwLockReadGuard<'_, QuotaBook> {
        self.book.read_unpoisoned()
    }

    /// Whether every ResourceQuota has been listed once.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Watches every ResourceQuota into the cache until `shutdown`; `on_synced` runs
    /// after each complete list. Limits that cannot be read are left out with a warning
    /// naming the object and the value. Ends with an error where no retry helps (the
    /// API server refuses the watch) or the stream ends, for its supervisor to restart.
    pub async fn watch(
        self,
        client: Client,
        on_synced: impl Fn() + Send,
        shutdown: CancellationToken,
    ) -> Result<(), WatchStopped> {
        let api: Api<ResourceQuota> = Api::all(client);
        let mut stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut listed: BTreeSet<(String, String)> = BTreeSet::new();
        while let Some(event) = next_event(&mut stream, &shutdown, "resourcequota").await? {
            match event {
                Event::Init => listed.clear(),
                Event::InitApply(q) => {
                    listed.insert(key(&q));
                    self.apply(&q);
                }
                Event::InitDone => {
                    self.book.write_unpoisoned().retain(&listed);
                    tracing::info!(quotas = listed.len(), "resourcequota cache synced");
                    listed = BTreeSet::new();
                    self.synced.store(true, Ordering::Release);
                    on_synced();
                }
                Event::Apply(q) => self.apply(&q),
                Event::Delete(q) => {
                    let (namespace, name) = key(&q);
                    self.book.write_unpoisoned().remove(&namespace, &name);
                }
            }
        }
        Ok(())
    }

    fn apply(&self, quota: &ResourceQuota) {
        let issues = self.book.write_unpoisoned().apply(quota);
        for issue in issues {
            tracing::warn!(error = %issue, "resourcequota limit not usable");
        }
    }
}

fn key(q: &ResourceQuota) -> (String, String) {
    (
        q.metadata.namespace.clone().unwrap_or_default(),
        q.metadata.name.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use hami_core::config::DeviceConfig;
    use hami_testkit::ApiServer;
    use kube::Config;
    use kube::api::{DeleteParams, PostParams};
    use serde_json::json;
    use std::time::{Duration, Instant};

    async fn until(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn follows_the_api_server() {
        let server = ApiServer::start().await.unwrap();
        let client = Client::try_from(Config::new(server.url().parse().unwrap())).unwrap();
        let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "default");
        let q = |mem: &str| -> ResourceQuota {
            serde_json::from_value(json!({
                "metadata": {"name": "gpu", "namespace": "default"},
                "spec": {"hard": {"limits.nvidia.com/gpumem": mem}},
            }))
            .unwrap()
        };
        quotas
            .create(&PostParams::default(), &q("4000"))
            .await
            .unwrap();
        let cache = QuotaCache::new(&VendorRegistry::from_config(&DeviceConfig::default()));
        let shutdown = CancellationToken::new();
        let synced = Arc::new(AtomicBool::new(false));
        let flag = synced.clone();
        let task = tokio::spawn(cache.clone().watch(
            client,
            move || flag.store(true, Ordering::Release),
            shutdown.clone(),
        ));
        until("never synced", || {
            cache.synced() && synced.load(Ordering::Acquire)
        })
        .await;
        assert_eq!(
            cache.read().limit("default", "nvidia.com/gpumem"),
            Some(4000)
        );
        quotas
            .delete("gpu", &DeleteParams::default())
            .await
            .unwrap();
        until("delete not seen", || {
            cache.read().limit("default", "nvidia.com/gpumem").is_none()
        })
        .await;
        shutdown.cancel();
        task.await.unwrap().unwrap();
    }
}
