//! What the extender's background work still owes when the bench reads its memory after
//! the filters: each placed pod's annotation write and its `FilteringSucceed` event are
//! sent after the /filter answer (`docs/extender.md#memory`). Counted from the emulator's
//! store, which is in the bench's process, so counting costs the extender nothing.

use std::time::{Duration, Instant};

use hami_core::annotations::VGPU_NODE;
use hami_testkit::Store;
use hami_testkit::resources::{EVENTS, PODS};
use hami_testkit::selectors::Selector;
use serde_json::Value;

use crate::bench::status_mib;

/// The background work left at one moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backlog {
    /// Pods filtered whose annotation write has not landed yet.
    pub unwritten: usize,
    /// Events in the emulator (all namespaces).
    pub events: usize,
    /// The extender's open file descriptors.
    pub fds: usize,
    /// Of which sockets: its API connections, its listeners and kube-scheduler's
    /// connection.
    pub sockets: usize,
}

impl Backlog {
    /// Counts it for the `filtered` pods (as created) of the extender `pid`.
    pub(crate) fn now(store: &Store, filtered: &[Value], pid: u32) -> Self {
        let unwritten = filtered
            .iter()
            .filter(|p| {
                let name = p["metadata"]["name"].as_str().unwrap_or_default();
                let written = store
                    .get(&PODS, Some("default"), name)
                    .is_ok_and(|pod| !pod["metadata"]["labels"][VGPU_NODE].is_null());
                !written
            })
            .count();
        let events = store
            .list_page(&EVENTS, None, &Selector::default(), None, Some(0), true)
            .rest;
        let (mut fds, mut sockets) = (0, 0);
        if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            for fd in dir.flatten() {
                fds += 1;
                let target = std::fs::read_link(fd.path()).unwrap_or_default();
                if target.to_string_lossy().starts_with("socket:") {
                    sockets += 1;
                }
            }
        }
        Backlog {
            unwritten,
            events,
            fds,
            sockets,
        }
    }
}

/// How long the event count must stay put, once short of what was due, for the rest to
/// count as dropped (the recorder drops events when its queue is full).
const EVENTS_STILL: Duration = Duration::from_millis(500);

/// Waits (polling) until every filtered pod is annotated and `events` events exist (or
/// the count has stopped growing: the rest were dropped), up to `limit`; how long that
/// took, and the extender's VmRSS and RssAnon then, in MiB.
pub(crate) async fn wait_drained(
    store: &Store,
    filtered: &[Value],
    pid: u32,
    events: usize,
    limit: Duration,
) -> anyhow::Result<Option<Drained>> {
    let start = Instant::now();
    let mut last = (usize::MAX, start);
    while start.elapsed() < limit {
        let left = Backlog::now(store, filtered, pid);
        if left.events != last.0 {
            last = (left.events, Instant::now());
        }
        let events_done = left.events >= events || last.1.elapsed() >= EVENTS_STILL;
        if left.unwritten == 0 && events_done {
            let [rss, anon] = status_mib(pid, ["VmRSS:", "RssAnon:"])?;
            let took = if left.events >= events {
                start.elapsed()
            } else {
                last.1 - start
            };
            return Ok(Some(Drained {
                took,
                rss,
                anon,
                events_missing: events.saturating_sub(left.events),
                sockets: left.sockets,
            }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(None)
}

/// The moment the background work was done.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Drained {
    /// From the start of the wait.
    pub took: Duration,
    /// VmRSS and RssAnon then, in MiB.
    pub rss: f64,
    pub anon: f64,
    /// Events due that never came (dropped).
    pub events_missing: usize,
    /// The extender's sockets then.
    pub sockets: usize,
}
