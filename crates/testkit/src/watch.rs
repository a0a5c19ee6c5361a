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
use crate::table::{self, TableOptions};

/// How each event's object is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFormat {
    Object,
    /// One-row `Table`s; only the first event carries the column definitions.
    Table(TableOptions),
    Metadata(&'static str),
}

/// A parsed watch request.
#[derive(Debug, Clone)]
pub struct WatchRequest {
    pub resource: Resource,
    pub namespace: Option<String>,
    pub selector: Selector,
    /// None or 0: start with synthetic ADDED events for the current state.
    pub resource_version: Option<u64>,
    pub bookmarks: bool,
    /// `sendInitialEvents=true` (watch-list): the current state as ADDED events,
    /// then a BOOKMARK annotated `k8s.io/initial-events-end`.
    pub send_initial_events: bool,
    pub timeout: Duration,
    pub bookmark_interval: Duration,
    pub format: WatchFormat,
}

/// One `WatchEvent` line, `object` serialized in place (no copy of it first: every
/// write is sent to every watch).
fn line(kind: &str, object: &Value) -> Bytes {
    #[derive(serde::Serialize)]
    struct WatchEvent<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        object: &'a Value,
    }
    let mut v = serde_json::to_vec(&WatchEvent { kind, object }).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// Writes events in the request's format.
struct Writer<'a> {
    req: &'a WatchRequest,
    tx: &'a mpsc::Sender<Bytes>,
    headers_sent: bool,
}

impl Writer<'_> {
    /// False once the client has gone.
    async fn send(&mut self, kind: &str, object: &Value) -> bool {
        let object = match self.req.format {
            _ if kind == "BOOKMARK" || kind == "ERROR" => {
                return self.tx.send(line(kind, object)).await.is_ok();
            }
            WatchFormat::Object => return self.tx.send(line(kind, object)).await.is_ok(),
            WatchFormat::Metadata(v) => table::partial_metadata(object, v),
            WatchFormat::Table(opts) => {
                let rv = object.pointer("/metadata/resourceVersion").cloned();
                let meta = rv.map_or_else(|| json!({}), |rv| json!({"resourceVersion": rv}));
                let t = table::table(
                    &self.req.resource,
                    std::slice::from_ref(object),
                    meta,
                    opts,
                    !self.headers_sent,
                );
                self.headers_sent = true;
                t
            }
        };
        self.tx.send(line(kind, &object)).await.is_ok()
    }
}

fn bookmark(req: &WatchRequest, rv: u64, initial_end: bool) -> Value {
    let mut obj = json!({
        "kind": req.resource.kind,
        "apiVersion": req.resource.api_version(),
        "metadata": {"resourceVersion": rv.to_string()},
    });
    if initial_end {
        obj["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    obj
}

/// Runs one watch, writing lines into `tx` until the timeout, the client
/// going away, or the start version having expired (an ERROR event with a
/// 410 Status, which is how kube's watcher learns to re-list).
pub async fn run(store: Arc<Store>, req: WatchRequest, tx: mpsc::Sender<Bytes>) {
    let deadline = Instant::now() + req.timeout;
    let mut rv_rx = store.subscribe();
    let mut drop_rx = store.subscribe_drops();
    let ns = req.namespace.as_deref();
    let mut out = Writer {
        req: &req,
        tx: &tx,
        headers_sent: false,
    };
    let mut cursor = match req.resource_version {
        Some(rv) if rv > 0 && !req.send_initial_events => rv,
        _ => {
            let (items, rv) = store.list(&req.resource, ns, &req.selector);
            for item in &items {
                if !out.send("ADDED", item).await {
                    return;
                }
            }
            if req.send_initial_events && !out.send("BOOKMARK", &bookmark(&req, rv, true)).await {
                return;
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
                let _ = out.send("ERROR", &e.to_status()).await;
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
            if !out.send(kind, &ev.object).await {
                return;
            }
        }
        cursor = next;
        tokio::select! {
            _ = rv_rx.changed() => {}
            _ = tick.tick() => {
                if req.bookmarks && cursor != bookmarked {
                    if !out.send("BOOKMARK", &bookmark(&req, cursor, false)).await {
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
