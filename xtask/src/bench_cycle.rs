//! The `-cycle` scenario of `cargo xtask bench`: whole scheduling cycles as kube-scheduler
//! drives them, one pod at a time over one keep-alive connection: POST /filter, POST
//! /bind (which waits for the pod's annotation write, takes the node lock, marks the pod
//! `allocating` and creates the Binding), then what the node's device plugin does at
//! Allocate (the pod marked `success`, the node lock released; done by the harness
//! straight in the emulator's store, its cost reported apart). Pods per second count
//! until the extender's cache has caught up with every write (the watch echo): a sentinel
//! pod created after the last cycle shows in its /metrics once its pod watch has
//! delivered every earlier event. Reports each step's client- and server-side time and
//! the emulator's own round trip for one pod write (`docs/extender.md#measured`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use bytes::Bytes;
use hami_core::annotations::{BIND_PHASE, NODE_LOCK};
use hami_testkit::Store;
use hami_testkit::resources::{NODES, PODS};
use hami_testkit::scale::{running_pod_on, uuid};
use http_body_util::Full;
use hyper::Request;
use hyper::client::conn::http1::SendRequest;
use serde_json::{Value, json};

use crate::bench::{
    BenchArgs, Scenario, candidates_json, filter_body, keep_alive, on_own_thread, percentile,
    result_line, round_trip, rss_mib, scrape_mean_us, start,
};

/// The sentinel pod's memory on the extra node's first GPU (MiB): what /metrics shows
/// once the extender has seen it.
const SENTINEL_MIB: u32 = 1_234;

/// Pod writes timed against the emulator alone.
const PROBE_WRITES: usize = 500;

/// One pod's cycle, ready to send.
struct Cycle {
    filter: Bytes,
    name: String,
    uid: String,
}

/// Step times of the timed cycles, each sorted.
struct Steps {
    filter: Vec<Duration>,
    bind: Vec<Duration>,
    /// The device plugin's part, played by the harness.
    release: Vec<Duration>,
    /// From the first timed cycle's start to the last one's end.
    wall: Duration,
}

/// Runs the scenario; the line of results.
pub async fn run(s: &Scenario, args: &BenchArgs) -> anyhow::Result<Value> {
    let total = args.warmup + args.requests;
    // One extra node, never a candidate: the sentinel's.
    let started = start(s, args, 1, total).await?;
    let store = started.server.store().clone();
    let names_json = candidates_json(s.nodes)?;
    let cycles = started
        .pending
        .iter()
        .map(|p| {
            let meta = |k: &str| p["metadata"][k].as_str().unwrap_or_default().to_string();
            Cycle {
                filter: filter_body(p, &names_json),
                name: meta("name"),
                uid: meta("uid"),
            }
        })
        .collect();
    let (http, admin, pid) = (started.http, started.admin, started.pid);
    let warmup = args.warmup;
    let driver_store = store.clone();
    let steps = on_own_thread(move || drive(http, driver_store, cycles, warmup)).await?;

    // The watch echo: every write above reached the extender's cache once the sentinel,
    // written after them, shows in its metrics.
    let echo_started = Instant::now();
    store
        .create(
            &PODS,
            Some("default"),
            running_pod_on(s.pods, s.nodes, 0, SENTINEL_MIB),
        )
        .map_err(|e| anyhow::anyhow!("creating the sentinel pod: {e:?}"))?;
    wait_for_sentinel(admin, &uuid(s.nodes, 0)).await?;
    let echo = echo_started.elapsed();

    let filter_server_us = scrape_mean_us(admin, "hami_scheduler_filter_duration_seconds").await;
    let bind_server_us = scrape_mean_us(admin, "hami_scheduler_bind_duration_seconds").await;
    let (rss, hwm) = rss_mib(pid)?;
    let probe_pod = started
        .pending
        .first()
        .and_then(|p| p["metadata"]["name"].as_str())
        .unwrap_or_default()
        .to_string();
    let api = started.server.addr().port();
    let writes = on_own_thread(move || time_pod_writes(api, probe_pod, PROBE_WRITES)).await?;
    let (rss_synced, sync_secs) = (started.rss_synced, started.sync_secs);
    started.stop().await;

    let n = steps.filter.len();
    let with_echo = steps.wall + echo;
    let mean = |v: &[Duration]| {
        (v.iter().map(Duration::as_secs_f64).sum::<f64>() / v.len().max(1) as f64 * 1e6).round()
    };
    let round = |us: f64| us.round();
    Ok(result_line(
        s,
        json!({
        "cycles": n,
        "pods_per_sec": (n as f64 / with_echo.as_secs_f64()).round(),
        "pods_per_sec_without_release": (n as f64
            / (with_echo.as_secs_f64() - steps.release.iter().map(Duration::as_secs_f64).sum::<f64>()))
            .round(),
        "echo_lag_ms": (echo.as_secs_f64() * 1e4).round() / 10.0,
        "filter_p50_us": round(percentile(&steps.filter, 0.50)),
        "filter_p99_us": round(percentile(&steps.filter, 0.99)),
        "filter_mean_us": mean(&steps.filter),
        "server_filter_mean_us": filter_server_us.map(f64::round),
        "bind_p50_us": round(percentile(&steps.bind, 0.50)),
        "bind_p99_us": round(percentile(&steps.bind, 0.99)),
        "bind_mean_us": mean(&steps.bind),
        "server_bind_mean_us": bind_server_us.map(f64::round),
        "release_mean_us": mean(&steps.release),
        "emulator_pod_write_p50_us": round(percentile(&writes, 0.50)),
        "emulator_pod_write_mean_us": mean(&writes),
        "rss_mib": (rss * 10.0).round() / 10.0,
        "rss_peak_mib": (hwm * 10.0).round() / 10.0,
        "rss_after_sync_mib": (rss_synced * 10.0).round() / 10.0,
        "cache_sync_secs": (sync_secs * 100.0).round() / 100.0,
        }),
    ))
}

/// POSTs `body` to `path` and parses the JSON answer.
async fn post(
    sender: &mut SendRequest<Full<Bytes>>,
    path: &str,
    body: Bytes,
) -> anyhow::Result<Value> {
    let req = Request::post(path)
        .header(hyper::header::HOST, "localhost")
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))?;
    let (_, bytes) = round_trip(sender, req).await?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// Runs every cycle in order, the first `warmup` untimed.
async fn drive(
    port: u16,
    store: Arc<Store>,
    cycles: Vec<Cycle>,
    warmup: usize,
) -> anyhow::Result<Steps> {
    let mut sender = keep_alive(port).await?;
    let timed = cycles.len().saturating_sub(warmup);
    let mut steps = Steps {
        filter: Vec::with_capacity(timed),
        bind: Vec::with_capacity(timed),
        release: Vec::with_capacity(timed),
        wall: Duration::ZERO,
    };
    let mut first = None;
    for (i, c) in cycles.into_iter().enumerate() {
        let t0 = Instant::now();
        if i == warmup {
            first = Some(t0);
        }
        let answer = post(&mut sender, "/filter", c.filter).await?;
        let node = match answer["NodeNames"].as_array().map(Vec::as_slice) {
            Some([Value::String(node)]) if answer["Error"] == "" => node.clone(),
            _ => bail!("unexpected /filter answer for {}: {answer}", c.name),
        };
        let t1 = Instant::now();
        let args =
            json!({"PodName": c.name, "PodNamespace": "default", "PodUID": c.uid, "Node": node});
        let answer = post(&mut sender, "/bind", Bytes::from(args.to_string())).await?;
        if answer["Error"] != "" {
            bail!("/bind of {} failed: {answer}", c.name);
        }
        let t2 = Instant::now();
        allocate(&store, &node, &c.name)?;
        let t3 = Instant::now();
        if i >= warmup {
            steps.filter.push(t1 - t0);
            steps.bind.push(t2 - t1);
            steps.release.push(t3 - t2);
        }
    }
    steps.wall = first.map_or(Duration::ZERO, |t| t.elapsed());
    steps.filter.sort();
    steps.bind.sort();
    steps.release.sort();
    Ok(steps)
}

/// What the device plugin writes at Allocate (`docs/protocol.md#node-lock`): the pod
/// `success`, the node lock released.
fn allocate(store: &Store, node: &str, pod: &str) -> anyhow::Result<()> {
    store
        .update_with(&PODS, Some("default"), pod, |cur| {
            let mut p = cur.clone();
            p["metadata"]["annotations"][BIND_PHASE] = json!("success");
            Ok(p)
        })
        .map_err(|e| anyhow::anyhow!("marking {pod} allocated: {e:?}"))?;
    store
        .update_with(&NODES, None, node, |cur| {
            let mut n = cur.clone();
            if let Some(a) = n
                .pointer_mut("/metadata/annotations")
                .and_then(Value::as_object_mut)
            {
                a.remove(NODE_LOCK);
            }
            Ok(n)
        })
        .map_err(|e| anyhow::anyhow!("releasing the lock of {node}: {e:?}"))?;
    Ok(())
}

/// Polls the extender's /metrics until GPU `gpu_uuid` shows the sentinel's memory.
async fn wait_for_sentinel(admin: u16, gpu_uuid: &str) -> anyhow::Result<()> {
    let want = f64::from(SENTINEL_MIB) * 1024.0 * 1024.0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sender = keep_alive(admin).await?;
    let label = format!("device_uuid=\"{gpu_uuid}\"");
    loop {
        let req = Request::get("/metrics")
            .header(hyper::header::HOST, "localhost")
            .body(Full::new(Bytes::new()))?;
        let (_, body) = round_trip(&mut sender, req).await?;
        let text = String::from_utf8_lossy(&body);
        let seen = text
            .lines()
            .filter(|l| l.starts_with("hami_gpu_memory_allocated_bytes{") && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .any(|v| v == want);
        if seen {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the extender did not show the sentinel pod within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Times `n` merge patches of one pod's annotation against the emulator alone (one
/// keep-alive connection), sorted: what one pod write costs the harness.
async fn time_pod_writes(api_port: u16, pod: String, n: usize) -> anyhow::Result<Vec<Duration>> {
    let mut sender = keep_alive(api_port).await?;
    let path = format!("/api/v1/namespaces/default/pods/{pod}");
    let mut took = Vec::with_capacity(n);
    for i in 0..n {
        let patch = json!({"metadata": {"annotations": {"bench.hami.io/probe": i.to_string()}}});
        let req = Request::patch(path.as_str())
            .header(hyper::header::HOST, "localhost")
            .header(hyper::header::CONTENT_TYPE, "application/merge-patch+json")
            .body(Full::new(Bytes::from(patch.to_string())))?;
        let t = Instant::now();
        let (status, _) = round_trip(&mut sender, req).await?;
        took.push(t.elapsed());
        if !status.is_success() {
            bail!("patching {pod}: HTTP {status}");
        }
    }
    took.sort();
    Ok(took)
}
