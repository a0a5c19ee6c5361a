//! Watch streams: newline-delimited `WatchEvent`s as the API server writes them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::resources::Resource;
use crate::selectors::Selector;
use crate::store::{EventType, Store};

/// A parsed watch request.
#[derive(Debug, Clone)]
pub struct WatchRequest {
    pub resource: Resource,
    pub namespace: Option<String>,
    pub selector: Selector,
    /// None or 0: start with synthetic ADDED events for the current state.
    pub resource_version: Option<u64>,
    pub bookmarks: bool,
    pub timeout: Duration,
    pub bookmark_interval: Duration,
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// Runs one watch, writing lines into `tx` until the timeout, the client
/// going away, or the start version having expired (an ERROR event with a
/// 410 Status, which is how kube's watcher learns to re-list).
pub async fn run(store: Arc<Store>, req: WatchRequest, tx: mpsc::Sender<Bytes>) {
    let deadline = Instant::now() + req.timeout;
    let mut rv_rx = store.subscribe();
    let mut drop_rx = store.subscribe_drops();
    let ns = req.namespace.as_deref();
    let mut cursor = match req.resource_version {
        Some(rv) if rv > 0 => rv,
        _ => {
            let (items, rv) = store.list(&req.resource, ns, &req.selector);
            for item in &items {
                if tx.send(line("ADDED", item)).await.is_err() {
                    return;
                }
            }
            rv
        }
    };
    let mut bookmarked = cursor;
    let mut tick = tokio::time::interval(req.bookmark_interval);
    tick.tick().await;
    loop {
        rv_rx.borrow_and_update();
        let (events, next) = match store.events_since(&req.resource, ns, cursor) {
            Ok(x) => x,
            Err(e) => {
                let _ = tx.send(line("ERROR", &e.to_status())).await;
                return;
            }
        };
        for ev in &events {
            let now = req.selector.matches(&ev.object);
            let before = ev
                .previous
                .as_ref()
                .is_some_and(|p| req.selector.matches(p));
            let kind = match (ev.kind, before, now) {
                (EventType::Added, _, true) => "ADDED",
                (EventType::Deleted, _, true) => "DELETED",
                (EventType::Modified, true, true) => "MODIFIED",
                (EventType::Modified, false, true) => "ADDED",
                (EventType::Modified, true, false) => "DELETED",
                _ => continue,
            };
            if tx.send(line(kind, &ev.object)).await.is_err() {
                return;
            }
        }
        cursor = next;
        tokio::select! {
            _ = rv_rx.changed() => {}
            _ = tick.tick() => {
                if req.bookmarks && cursor != bookmarked {
                    let obj = json!({
                        "kind": req.resource.kind,
                        "apiVersion": req.resource.api_version(),
                        "metadata": {"resourceVersion": cursor.to_string()},
                    });
                    if tx.send(line("BOOKMARK", &obj)).await.is_err() {
                        return;
                    }
                    bookmarked = cursor;
                }
            }
            () = tokio::time::sleep_until(deadline) => return,
            () = tx.closed() => return,
            _ = drop_rx.changed() => return,
        }
    }
}
