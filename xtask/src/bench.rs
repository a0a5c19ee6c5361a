//! `cargo xtask bench`: the real `hami-scheduler` binary against the API server emulator
//! with its caches pre-filled, `/filter` timed over loopback HTTP the way kube-scheduler
//! calls it (one keep-alive connection, one pod at a time, every node a candidate). The
//! `-scraped` scenario times /filter alone, while `/metrics` is scraped in a loop, and
//! while it is scraped at a fixed interval (as Prometheus does), in alternating blocks, and
//! reports the p99 differences (`docs/extender.md#measured`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use hami_testkit::resources::{NODES, PODS};
use hami_testkit::scale::{ScaleCluster, node_name, pending_pod};
use hami_testkit::{ApiServer, Options};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::bench_backlog::{Backlog, wait_drained};
use crate::image_env::image_env;

/// One cluster shape and the extender's policies.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    pub name: &'static str,
    pub nodes: usize,
    pub gpus_per_node: usize,
    pub pods: usize,
    /// `--node-scheduler-policy` and `--gpu-scheduler-policy`.
    pub policies: (&'static str, &'static str),
    /// Also time /filter while /metrics is scraped in a loop.
    pub scraped: bool,
    /// Drive whole scheduling cycles (filter, bind, the device plugin's release) instead
    /// of /filter alone (`bench_cycle.rs`).
    pub cycle: bool,
}

/// The chart's default policies.
const DEFAULT_POLICIES: (&str, &str) = ("binpack", "spread");

/// Node and GPU policy `frag` (`docs/extender.md#node-and-gpu-policy-frag`).
const FRAG_POLICIES: (&str, &str) = ("frag", "frag");

pub const SCENARIOS: [Scenario; 7] = [
    Scenario {
        name: "50x8-1k",
        nodes: 50,
        gpus_per_node: 8,
        pods: 1_000,
        policies: DEFAULT_POLICIES,
        scraped: false,
        cycle: false,
    },
    Scenario {
        name: "100x16-5k",
        nodes: 100,
        gpus_per_node: 16,
        pods: 5_000,
        policies: DEFAULT_POLICIES,
        scraped: false,
        cycle: false,
    },
    Scenario {
        name: "5000x8-50k",
        nodes: 5_000,
        gpus_per_node: 8,
        pods: 50_000,
        policies: DEFAULT_POLICIES,
        scraped: false,
        cycle: false,
    },
    Scenario {
        name: "5000x8-50k-scraped",
        nodes: 5_000,
        gpus_per_node: 8,
        pods: 50_000,
        policies: DEFAULT_POLICIES,
        scraped: true,
        cycle: false,
    },
    Scenario {
        name: "100x16-5k-frag",
        nodes: 100,
        gpus_per_node: 16,
        pods: 5_000,
        policies: FRAG_POLICIES,
        scraped: false,
        cycle: false,
    },
    Scenario {
        name: "5000x8-50k-frag",
        nodes: 5_000,
        gpus_per_node: 8,
        pods: 50_000,
        policies: FRAG_POLICIES,
        scraped: false,
        cycle: false,
    },
    Scenario {
        name: "100x16-5k-cycle",
        nodes: 100,
        gpus_per_node: 16,
        pods: 5_000,
        policies: DEFAULT_POLICIES,
        scraped: false,
        cycle: true,
    },
];

/// Names of the scenarios, for messages.
pub fn scenario_names() -> String {
    SCENARIOS.map(|s| s.name).join(", ")
}

impl Scenario {
    fn cluster(&self) -> ScaleCluster {
        ScaleCluster {
            nodes: self.nodes,
            gpus_per_node: self.gpus_per_node,
        }
    }
}

/// How long after the filters `rss_settled_mib` is read.
const SETTLE: Duration = Duration::from_secs(3);

/// How long after `SETTLE` the bench waits for the background writes to land before it
/// reports them as never drained.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct BenchArgs {
    pub requests: usize,
    pub warmup: usize,
    pub binary: PathBuf,
    /// `-scraped`: the time from one scrape's start to the next in the interval blocks.
    pub scrape_interval: Duration,
    /// `-scraped`: timed /filter calls in the interval blocks, all blocks together.
    pub interval_requests: usize,
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

pub(crate) fn write_kubeconfig(path: &Path, url: &str) -> anyhow::Result<()> {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: emulator\n  cluster:\n    server: {url}\n\
         users:\n- name: emulator\n  user: {{}}\ncontexts:\n- name: emulator\n  context:\n    cluster: emulator\n    user: emulator\n\
         current-context: emulator\n"
    );
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Starts `binary` with `args` and `env` (warnings only on stderr) against the emulator
/// behind `kubeconfig`; the child (killed when dropped) and its pid.
pub(crate) fn spawn(
    binary: &Path,
    args: &[String],
    env: &[(String, String)],
    kubeconfig: &Path,
) -> anyhow::Result<(tokio::process::Child, u32)> {
    let child = tokio::process::Command::new(binary)
        .args(args)
        .arg("--log-level=warn")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let pid = child
        .id()
        .with_context(|| format!("{} exited at once", binary.display()))?;
    Ok((child, pid))
}

/// VmRSS and VmHWM of `pid`, in MiB.
pub(crate) fn rss_mib(pid: u32) -> anyhow::Result<(f64, f64)> {
    let [rss, hwm] = status_mib(pid, ["VmRSS:", "VmHWM:"])?;
    Ok((rss, hwm))
}

/// Fields of `/proc/<pid>/status` given in kB, in MiB (0 when missing).
pub(crate) fn status_mib<const N: usize>(pid: u32, names: [&str; N]) -> anyhow::Result<[f64; N]> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(names.map(|name| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    }))
}

pub(crate) async fn get_status(port: u16, path: &str) -> Option<u16> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    let req = Request::get(path)
        .header(hyper::header::HOST, "localhost")
        .body(Full::new(Bytes::new()))
        .ok()?;
    let resp = sender.send_request(req).await.ok()?;
    Some(resp.status().as_u16())
}

/// The scenario's `nodes` node names as a JSON list (every node a candidate).
pub(crate) fn candidates_json(nodes: usize) -> anyhow::Result<String> {
    let names: Vec<String> = (0..nodes).map(node_name).collect();
    Ok(serde_json::to_string(&names)?)
}

/// The ExtenderArgs kube-scheduler sends for `pod` (nodeCacheCapable: names only).
pub(crate) fn filter_body(pod: &Value, names_json: &str) -> Bytes {
    Bytes::from(format!(
        "{{\"Pod\":{pod},\"Nodes\":null,\"NodeNames\":{names_json}}}"
    ))
}

/// A keep-alive HTTP/1 connection to `127.0.0.1:port` (Nagle off).
pub(crate) async fn keep_alive(port: u16) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// Sends `req` once the connection is ready; the status and the whole body.
pub(crate) async fn round_trip(
    sender: &mut SendRequest<Full<Bytes>>,
    req: Request<Full<Bytes>>,
) -> anyhow::Result<(hyper::StatusCode, Bytes)> {
    sender.ready().await?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    Ok((status, resp.into_body().collect().await?.to_bytes()))
}

/// GET /healthz calls timed before the filters: the HTTP round trip alone.
const HEALTHZ_CALLS: usize = 500;

/// Times `n` GETs of `path` over one keep-alive connection, sorted.
async fn time_gets(port: u16, path: &'static str, n: usize) -> anyhow::Result<Vec<Duration>> {
    let mut sender = keep_alive(port).await?;
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let req = Request::get(path)
            .header(hyper::header::HOST, "localhost")
            .body(Full::new(Bytes::new()))?;
        let t = Instant::now();
        round_trip(&mut sender, req).await?;
        took.push(t.elapsed());
    }
    took.sort();
    Ok(took)
}

/// User and system CPU time of process `pid` so far, in seconds.
pub(crate) fn cpu_secs(pid: u32) -> anyhow::Result<f64> {
    stat_cpu_secs(&format!("/proc/{pid}/stat"))
}

/// User and system CPU time of the calling thread so far, in seconds.
fn thread_cpu_secs() -> anyhow::Result<f64> {
    stat_cpu_secs("/proc/thread-self/stat")
}

/// User and system CPU time in a `/proc/.../stat` file, in seconds.
fn stat_cpu_secs(path: &str) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(path)?;
    // Fields after the command name (which may hold spaces), from field 3 on.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .with_context(|| format!("unreadable {path}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 (indices 11 and 12 here), in clock ticks.
    Ok((ticks(11) + ticks(12)) / CLOCK_TICKS)
}

/// `sysconf(_SC_CLK_TCK)` on Linux.
const CLOCK_TICKS: f64 = 100.0;

/// Sends each body to /filter over one keep-alive connection; latencies after `warmup`,
/// sorted.
async fn time_filters(
    port: u16,
    bodies: Vec<Bytes>,
    warmup: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut latencies: Vec<Duration> = filter_windows(port, bodies, warmup)
        .await?
        .into_iter()
        .map(|w| w.took)
        .collect();
    latencies.sort();
    Ok(latencies)
}

/// When a call (a /filter, a scrape) started and how long it took.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    took: Duration,
}

impl Window {
    fn end(&self) -> Instant {
        self.start + self.took
    }

    /// Whether the two calls ran at the same time, even for a moment.
    fn overlaps(&self, other: &Window) -> bool {
        self.start < other.end() && other.start < self.end()
    }
}

/// Sends each body to /filter over one keep-alive connection; the calls after `warmup`,
/// in order.
async fn filter_windows(
    port: u16,
    bodies: Vec<Bytes>,
    warmup: usize,
) -> anyhow::Result<Vec<Window>> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await?;
    stream.set_nodelay(true)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut windows = Vec::with_capacity(bodies.len());
    for (i, body) in bodies.into_iter().enumerate() {
        let req = Request::post("/filter")
            .header(hyper::header::HOST, "localhost")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))?;
        sender.ready().await?;
        let start = Instant::now();
        let resp = sender.send_request(req).await?;
        let bytes = resp.into_body().collect().await?.to_bytes();
        let took = start.elapsed();
        let answer: Value = serde_json::from_slice(&bytes)?;
        if answer["Error"] != "" || answer["NodeNames"].as_array().is_none_or(|a| a.len() != 1) {
            bail!("unexpected /filter answer: {answer}");
        }
        if i >= warmup {
            windows.push(Window { start, took });
        }
    }
    Ok(windows)
}

/// Asks the benchmarked binary to shut down (SIGTERM, as kubelet does), killing it if it
/// does not exit within a few seconds.
pub(crate) async fn stop(child: &mut tokio::process::Child, pid: u32) {
    let _ = tokio::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await;
    if tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

/// What a scrape loop saw.
#[derive(Debug, Default)]
struct Scrapes {
    /// Each scrape, in order.
    windows: Vec<Window>,
    /// Size of the last page as sent (gzipped).
    bytes: usize,
    /// CPU time of the loop's thread: the client's share of the scrapes (the kernel's
    /// copy out of the socket included).
    client_cpu_secs: f64,
}

/// How a scrape loop paces its scrapes.
#[derive(Debug, Clone, Copy)]
enum Pace {
    /// The next scrape as soon as the last one is read.
    BackToBack,
    /// One scrape every this long (start to start; at once when a scrape took longer),
    /// the first after half of it, as a Prometheus server scrapes.
    Every(Duration),
}

/// GETs /metrics on `port` (one keep-alive connection) at `pace` until `stop`, asking
/// for gzip as Prometheus does.
async fn scrape_loop(port: u16, pace: Pace, stop: Arc<AtomicBool>) -> anyhow::Result<Scrapes> {
    let cpu_before = thread_cpu_secs()?;
    let stream = TcpStream::connect(("127.0.0.1", port)).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut seen = Scrapes::default();
    let mut next = match pace {
        Pace::BackToBack => Instant::now(),
        Pace::Every(interval) => Instant::now() + interval / 2,
    };
    loop {
        // Short sleeps, so a stop is seen soon after it is asked for.
        while !stop.load(Ordering::Acquire) && Instant::now() < next {
            let left = next.saturating_duration_since(Instant::now());
            tokio::time::sleep(left.min(Duration::from_millis(10))).await;
        }
        if stop.load(Ordering::Acquire) {
            break;
        }
        if let Pace::Every(interval) = pace {
            next += interval;
        }
        let req = Request::get("/metrics")
            .header(hyper::header::HOST, "localhost")
            .header(hyper::header::ACCEPT_ENCODING, "gzip")
            .body(Full::new(Bytes::new()))?;
        let start = Instant::now();
        sender.ready().await?;
        let mut body = sender.send_request(req).await?.into_body();
        // Counted and dropped as it arrives, not decoded: a Prometheus server decodes and
        // parses the page on a machine of its own, so the bench keeps the client's share
        // of the shared cores small (`docs/extender.md#measured`). The page is decoded
        // and checked once, untimed ([`check_page`]).
        let mut len = 0;
        while let Some(frame) = body.frame().await {
            len += frame?.data_ref().map_or(0, Bytes::len);
        }
        seen.windows.push(Window {
            start,
            took: start.elapsed(),
        });
        seen.bytes = len;
    }
    seen.client_cpu_secs = thread_cpu_secs()? - cpu_before;
    Ok(seen)
}

/// One GET of /metrics on a fresh connection, gzipped or not: the body as sent, and
/// whether it came gzipped.
async fn fetch_metrics(port: u16, gzip: bool) -> anyhow::Result<(Bytes, bool)> {
    let mut sender = keep_alive(port).await?;
    let mut req = Request::get("/metrics").header(hyper::header::HOST, "localhost");
    if gzip {
        req = req.header(hyper::header::ACCEPT_ENCODING, "gzip");
    }
    sender.ready().await?;
    let resp = sender
        .send_request(req.body(Full::new(Bytes::new()))?)
        .await?;
    let gzipped = resp
        .headers()
        .get(hyper::header::CONTENT_ENCODING)
        .is_some_and(|e| e == "gzip");
    Ok((resp.into_body().collect().await?.to_bytes(), gzipped))
}

/// Checks, untimed, that the gzipped page decodes to the plain one byte for byte; the
/// plain page's size, and whether the binary gzips at all (one built before it did
/// answers plain). The two are fetched one after the other, and a background write
/// landing in between changes the page, so a difference is retried a few times.
async fn check_page(port: u16) -> anyhow::Result<(usize, bool)> {
    let mut last = String::new();
    for _ in 0..5 {
        let (plain, _) = fetch_metrics(port, false).await?;
        let (gzipped, is_gzip) = fetch_metrics(port, true).await?;
        if !is_gzip {
            return Ok((plain.len(), false));
        }
        let mut decoded = Vec::with_capacity(plain.len());
        std::io::Read::read_to_end(
            &mut flate2::read::MultiGzDecoder::new(&gzipped[..]),
            &mut decoded,
        )
        .context("the gzipped /metrics page does not decode")?;
        if decoded == plain[..] {
            return Ok((plain.len(), true));
        }
        let at = decoded.iter().zip(plain.iter()).position(|(a, b)| a != b);
        last = format!(
            "the gzipped page ({} bytes decoded) differs from the plain one ({} bytes) at byte {at:?}",
            decoded.len(),
            plain.len()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    bail!("{last}")
}

/// Rounds of blocks of timed /filter calls: alone, with /metrics scraped back to back,
/// with /metrics scraped at a fixed interval.
const SCRAPED_ROUNDS: usize = 4;

/// /filter timed alone, while /metrics is scraped back to back and while it is scraped
/// every `interval`, in [`SCRAPED_ROUNDS`] rounds of one block each after `warmup`
/// untimed calls, so a change in the machine's load during the run weighs on all alike.
/// `bodies` holds the warm-up calls, then `2 × requests` for the blocks alone and back to
/// back, then the interval blocks' calls.
async fn alone_and_scraped(
    ports: (u16, u16),
    pid: u32,
    mut bodies: Vec<Bytes>,
    (warmup, requests): (usize, usize),
    interval: Duration,
) -> anyhow::Result<(Vec<Duration>, ScrapedRun)> {
    let (http, admin) = ports;
    let mut timed = bodies.split_off(warmup.min(bodies.len()));
    let paced = timed.split_off((2 * requests).min(timed.len()));
    on_own_thread(move || time_filters(http, bodies, warmup)).await?;
    let block = timed.len().div_ceil(2 * SCRAPED_ROUNDS).max(1);
    let paced_block = paced.len().div_ceil(SCRAPED_ROUNDS).max(1);
    let (mut blocks, mut paced_blocks) = (timed.chunks(block), paced.chunks(paced_block));
    let mut alone = vec![];
    let mut run = ScrapedRun::default();
    // The extender's CPU time and /filter calls: alone, back to back, at an interval.
    let mut cpu = [(0.0, 0); 3];
    for _ in 0..SCRAPED_ROUNDS {
        if let Some(chunk) = blocks.next() {
            let chunk = chunk.to_vec();
            let cpu_before = cpu_secs(pid)?;
            alone.extend(on_own_thread(move || time_filters(http, chunk, 0)).await?);
            cpu[0].0 += cpu_secs(pid)? - cpu_before;
        }
        for (mode, chunk) in [
            (Pace::BackToBack, blocks.next()),
            (Pace::Every(interval), paced_blocks.next()),
        ] {
            let Some(chunk) = chunk else { continue };
            let chunk = chunk.to_vec();
            let cpu_before = cpu_secs(pid)?;
            let stop_scraping = Arc::new(AtomicBool::new(false));
            let flag = stop_scraping.clone();
            let scraper = tokio::spawn(on_own_thread(move || scrape_loop(admin, mode, flag)));
            if let Pace::BackToBack = mode {
                // Let the first scrape start before the timed calls.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let filters = on_own_thread(move || filter_windows(http, chunk, 0)).await?;
            stop_scraping.store(true, Ordering::Release);
            let seen = scraper.await??;
            let extender_cpu = cpu_secs(pid)? - cpu_before;
            let half = match mode {
                Pace::BackToBack => {
                    cpu[1].0 += extender_cpu;
                    cpu[1].1 += filters.len();
                    &mut run.back_to_back
                }
                Pace::Every(_) => {
                    cpu[2].0 += extender_cpu;
                    cpu[2].1 += filters.len();
                    &mut run.paced
                }
            };
            half.add(&filters, &seen);
            run.page_bytes = seen.bytes;
        }
    }
    // What the filters cost alone, taken from each scraped half's CPU: the rest is what
    // its scrapes cost the extender.
    let per_filter = cpu[0].0 / alone.len().max(1) as f64;
    run.back_to_back.extender_cpu_secs = cpu[1].0 - per_filter * cpu[1].1 as f64;
    run.paced.extender_cpu_secs = cpu[2].0 - per_filter * cpu[2].1 as f64;
    alone.sort();
    run.back_to_back.finish();
    run.paced.finish();
    Ok((alone, run))
}

/// The scraped blocks of one pace.
#[derive(Debug, Default)]
struct ScrapedHalf {
    /// Every /filter latency in these blocks, sorted.
    all: Vec<Duration>,
    /// Those of the calls that ran while a scrape did (even for a moment), sorted.
    overlapping: Vec<Duration>,
    /// Those of the calls no scrape overlapped, sorted.
    between: Vec<Duration>,
    /// Scrape durations, sorted.
    scrapes: Vec<Duration>,
    /// The scrapes' CPU time in the extender (less what the filters cost alone).
    extender_cpu_secs: f64,
    /// The scrape client's CPU time.
    client_cpu_secs: f64,
}

impl ScrapedHalf {
    fn add(&mut self, filters: &[Window], seen: &Scrapes) {
        for f in filters {
            self.all.push(f.took);
            if seen.windows.iter().any(|s| s.overlaps(f)) {
                self.overlapping.push(f.took);
            } else {
                self.between.push(f.took);
            }
        }
        self.scrapes.extend(seen.windows.iter().map(|w| w.took));
        self.client_cpu_secs += seen.client_cpu_secs;
    }

    fn finish(&mut self) {
        self.all.sort();
        self.overlapping.sort();
        self.between.sort();
        self.scrapes.sort();
    }

    /// Per scrape, in ms, to a tenth.
    fn per_scrape_ms(&self, secs: f64) -> f64 {
        (secs / self.scrapes.len().max(1) as f64 * 1e4).round() / 10.0
    }
}

/// The scraped blocks of a `-scraped` run.
#[derive(Debug, Default)]
struct ScrapedRun {
    back_to_back: ScrapedHalf,
    /// Scraped at a fixed interval.
    paced: ScrapedHalf,
    /// Size of the last page as sent.
    page_bytes: usize,
}

/// Runs `f` on a thread and runtime of its own, so its timing does not share a runtime
/// with the emulator (the extender's writes and watches land in this process).
pub(crate) async fn on_own_thread<T: Send + 'static, F>(
    f: impl FnOnce() -> F + Send + 'static,
) -> anyhow::Result<T>
where
    F: std::future::Future<Output = anyhow::Result<T>>,
{
    tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(f())
    })
    .await?
}

/// Mean of a histogram on the admin port's /metrics, in µs.
pub(crate) async fn scrape_mean_us(port: u16, name: &str) -> Option<f64> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    let req = Request::get("/metrics")
        .header(hyper::header::HOST, "localhost")
        .body(Full::new(Bytes::new()))
        .ok()?;
    let body = sender
        .send_request(req)
        .await
        .ok()?
        .into_body()
        .collect()
        .await
        .ok()?
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    let value = |suffix: &str| -> Option<f64> {
        let key = format!("{name}_{suffix} ");
        text.lines()
            .find(|l| l.starts_with(&key))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    };
    let (sum, count) = (value("sum")?, value("count")?);
    (count > 0.0).then(|| sum / count * 1e6)
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)].as_secs_f64() * 1e6
}

/// The emulator filled with a scenario's cluster and the benchmarked binary synced
/// against it.
pub(crate) struct Started {
    pub server: ApiServer,
    pub child: tokio::process::Child,
    pub pid: u32,
    /// The extender's /filter and /bind port, and its admin port.
    pub http: u16,
    pub admin: u16,
    dir: PathBuf,
    /// The pending pods, as created (with their UIDs).
    pub pending: Vec<Value>,
    pub fill_secs: f64,
    pub sync_secs: f64,
    pub rss_synced: f64,
    pub rss_anon_synced: f64,
    pub rss_file_synced: f64,
}

impl Started {
    /// Stops the binary and removes its files.
    pub async fn stop(mut self) {
        stop(&mut self.child, self.pid).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Fills the emulator with the scenario's nodes and running pods (and `extra_nodes` more
/// nodes no pending pod is offered), creates `pending` pending pods, starts the binary
/// and waits until it is ready.
pub(crate) async fn start(
    s: &Scenario,
    args: &BenchArgs,
    extra_nodes: usize,
    pending: usize,
) -> anyhow::Result<Started> {
    let server = ApiServer::start_with(Options {
        history_limit: 2_000,
        ..Options::default()
    })
    .await?;
    let store = server.store();
    let fill = Instant::now();
    let cluster = s.cluster();
    for i in 0..s.nodes + extra_nodes {
        store
            .create(&NODES, None, cluster.node(i))
            .map_err(|e| anyhow::anyhow!("creating node: {e:?}"))?;
    }
    for i in 0..s.pods {
        store
            .create(&PODS, Some("default"), cluster.running_pod(i))
            .map_err(|e| anyhow::anyhow!("creating pod: {e:?}"))?;
    }
    let mut created = Vec::with_capacity(pending);
    for i in 0..pending {
        let p = store
            .create(&PODS, Some("default"), pending_pod(i))
            .map_err(|e| anyhow::anyhow!("creating pod: {e:?}"))?;
        created.push(p);
    }
    let fill_secs = fill.elapsed().as_secs_f64();

    let dir = std::env::temp_dir().join(format!("hami-bench-{}-{}", std::process::id(), s.name));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    write_kubeconfig(&kubeconfig, &server.url())?;
    let (http, admin) = (free_port()?, free_port()?);
    let (mut child, pid) = spawn(
        &args.binary,
        &[
            format!("--http_bind=127.0.0.1:{http}"),
            format!("--metrics-bind-address=127.0.0.1:{admin}"),
            format!("--node-scheduler-policy={}", s.policies.0),
            format!("--gpu-scheduler-policy={}", s.policies.1),
        ],
        // As the image runs it (the allocator's settings among them).
        &image_env(&crate::workspace_root(), "hami-scheduler")?,
        &kubeconfig,
    )?;

    let started = Instant::now();
    loop {
        if get_status(admin, "/readyz").await == Some(200) {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            bail!("hami-scheduler exited during sync: {status}");
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("hami-scheduler did not sync within 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sync_secs = started.elapsed().as_secs_f64();
    // Anonymous memory (the heap, stacks) apart from the binary's mapped pages.
    let [rss_synced, rss_anon_synced, rss_file_synced] =
        status_mib(pid, ["VmRSS:", "RssAnon:", "RssFile:"])?;
    Ok(Started {
        server,
        child,
        pid,
        http,
        admin,
        dir,
        pending: created,
        fill_secs,
        sync_secs,
        rss_synced,
        rss_anon_synced,
        rss_file_synced,
    })
}

/// The line of results: the scenario's shape and policies, then `results`' fields.
pub(crate) fn result_line(s: &Scenario, results: Value) -> Value {
    let mut line = json!({
        "scenario": s.name,
        "node_policy": s.policies.0,
        "gpu_policy": s.policies.1,
        "nodes": s.nodes,
        "gpus_per_node": s.gpus_per_node,
        "pods": s.pods,
    });
    if let (Some(line), Value::Object(results)) = (line.as_object_mut(), results) {
        line.extend(results);
    }
    line
}

/// Runs one scenario; the line of results.
pub async fn run_scenario(s: &Scenario, args: &BenchArgs) -> anyhow::Result<Value> {
    if s.cycle {
        return crate::bench_cycle::run(s, args).await;
    }
    let phases = if s.scraped { 2 } else { 1 };
    let paced = if s.scraped { args.interval_requests } else { 0 };
    let calls = args.warmup + args.requests * phases + paced;
    let run = start(s, args, 0, calls).await?;
    let (http, admin, pid) = (run.http, run.admin, run.pid);
    let pending = &run.pending;

    let names_json = candidates_json(s.nodes)?;
    let bodies: Vec<Bytes> = pending
        .iter()
        .map(|pod| filter_body(pod, &names_json))
        .collect();
    let warmup = args.warmup;
    let healthz = on_own_thread(move || time_gets(http, "/healthz", HEALTHZ_CALLS)).await?;
    let events_before = Backlog::now(run.server.store(), &[], pid).events;
    let cpu_before = [cpu_secs(pid)?, cpu_secs(std::process::id())?];
    let (latencies, scraped) = if s.scraped {
        let counts = (warmup, args.requests);
        let interval = args.scrape_interval;
        let (alone, with) = alone_and_scraped((http, admin), pid, bodies, counts, interval).await?;
        (alone, Some(with))
    } else {
        (
            on_own_thread(move || time_filters(http, bodies, warmup)).await?,
            None,
        )
    };
    let cpu_after = [cpu_secs(pid)?, cpu_secs(std::process::id())?];
    // CPU per /filter call (timed and warm-up alike), background writes and watch
    // events included: the extender's, and the harness's (emulator and client); with
    // `-scraped`, the scrapes' CPU too.
    let per_call = |i: usize| (cpu_after[i] - cpu_before[i]) / calls as f64 * 1e6;
    let [rss, hwm, rss_anon] = status_mib(pid, ["VmRSS:", "VmHWM:", "RssAnon:"])?;
    let filters_done = Instant::now();
    // What the background still owed at that moment, and the memory once it owes nothing.
    let store = run.server.store();
    let backlog = Backlog::now(store, pending, pid);
    let events_due = events_before + calls;
    let drained = wait_drained(store, pending, pid, events_due, SETTLE).await?;
    // The allocator gives freed memory back to the system only after a delay (mimalloc:
    // 1 s) and on its next call: the same process a moment later, idle but for its
    // watches and housekeeping (`docs/extender.md#memory`).
    tokio::time::sleep(SETTLE.saturating_sub(filters_done.elapsed())).await;
    let [rss_settled] = status_mib(pid, ["VmRSS:"])?;
    let drained = match drained {
        Some(d) => Some(d),
        None => wait_drained(store, pending, pid, events_due, DRAIN_LIMIT).await?,
    };
    let server_mean_us = scrape_mean_us(admin, "hami_scheduler_filter_duration_seconds").await;
    // Untimed, after the memory figures: the page served gzipped is the plain page.
    let checked_page = if s.scraped {
        Some(check_page(admin).await?)
    } else {
        None
    };
    let (fill_secs, sync_secs, rss_synced) = (run.fill_secs, run.sync_secs, run.rss_synced);
    let (rss_anon_synced, rss_file_synced) = (run.rss_anon_synced, run.rss_file_synced);
    run.stop().await;
    let mean =
        latencies.iter().map(Duration::as_secs_f64).sum::<f64>() / latencies.len().max(1) as f64;
    let scrape_report = scraped.map(|run| {
        let p99 = percentile(&latencies, 0.99);
        let us = |sorted: &[Duration], p: f64| percentile(sorted, p).round();
        let max_us = |sorted: &[Duration]| {
            sorted
                .last()
                .map_or(0.0, |d| (d.as_secs_f64() * 1e6).round())
        };
        let ms = |sorted: &[Duration], p: f64| (percentile(sorted, p) / 100.0).round() / 10.0;
        let (b2b, paced) = (&run.back_to_back, &run.paced);
        json!({
            "filter_p50_scraped_us": us(&b2b.all, 0.50),
            "filter_p99_scraped_us": us(&b2b.all, 0.99),
            "filter_max_scraped_us": max_us(&b2b.all),
            "filter_p99_delta_us": (percentile(&b2b.all, 0.99) - p99).round(),
            "scrapes": b2b.scrapes.len(),
            "scrape_p50_ms": ms(&b2b.scrapes, 0.50),
            "scrape_max_ms": ms(&b2b.scrapes, 1.0),
            "scrape_bytes": run.page_bytes,
            "scrape_plain_bytes": checked_page.map(|(len, _)| len),
            "scrape_gzip_checked": checked_page.is_some_and(|(_, gzip)| gzip),
            "scrape_extender_cpu_ms": b2b.per_scrape_ms(b2b.extender_cpu_secs),
            "scrape_client_cpu_ms": b2b.per_scrape_ms(b2b.client_cpu_secs),
            "interval_ms": args.scrape_interval.as_millis() as u64,
            "interval_scrapes": paced.scrapes.len(),
            "interval_scrape_p50_ms": ms(&paced.scrapes, 0.50),
            "interval_scrape_max_ms": ms(&paced.scrapes, 1.0),
            "interval_scrape_extender_cpu_ms": paced.per_scrape_ms(paced.extender_cpu_secs),
            "filter_overlapping": paced.overlapping.len(),
            "filter_p50_overlapping_us": us(&paced.overlapping, 0.50),
            "filter_p99_overlapping_us": us(&paced.overlapping, 0.99),
            "filter_max_overlapping_us": max_us(&paced.overlapping),
            "filter_between": paced.between.len(),
            "filter_p99_between_us": us(&paced.between, 0.99),
            "filter_p99_overlap_delta_us": (percentile(&paced.overlapping, 0.99) - p99).round(),
        })
    });
    let mut line = result_line(
        s,
        json!({
            "requests": latencies.len(),
            "filter_p50_us": percentile(&latencies, 0.50).round(),
            "filter_p99_us": percentile(&latencies, 0.99).round(),
            "filter_mean_us": (mean * 1e6).round(),
            "filter_max_us": latencies.last().map_or(0.0, |d| (d.as_secs_f64() * 1e6).round()),
            "server_filter_mean_us": server_mean_us.map(f64::round),
            "healthz_p50_us": percentile(&healthz, 0.50).round(),
            "extender_cpu_us_per_filter": per_call(0).round(),
            "harness_cpu_us_per_filter": per_call(1).round(),
            "rss_mib": (rss * 10.0).round() / 10.0,
            "rss_anon_mib": (rss_anon * 10.0).round() / 10.0,
            "rss_settled_mib": (rss_settled * 10.0).round() / 10.0,
            "backlog_unwritten": backlog.unwritten,
            "backlog_events": events_due.saturating_sub(backlog.events),
            "extender_fds": backlog.fds,
            "extender_sockets": backlog.sockets,
            "drain_ms": drained.map(|d| d.took.as_millis() as u64),
            "rss_drained_mib": drained.map(|d| (d.rss * 10.0).round() / 10.0),
            "rss_anon_drained_mib": drained.map(|d| (d.anon * 10.0).round() / 10.0),
            "events_dropped": drained.map(|d| d.events_missing),
            "extender_sockets_drained": drained.map(|d| d.sockets),
            "rss_peak_mib": (hwm * 10.0).round() / 10.0,
            "rss_after_sync_mib": (rss_synced * 10.0).round() / 10.0,
            "rss_anon_after_sync_mib": (rss_anon_synced * 10.0).round() / 10.0,
            "rss_file_after_sync_mib": (rss_file_synced * 10.0).round() / 10.0,
            "cache_sync_secs": (sync_secs * 100.0).round() / 100.0,
            "fill_secs": (fill_secs * 100.0).round() / 100.0,
        }),
    );
    if let (Some(extra), Some(obj)) = (scrape_report, line.as_object_mut())
        && let Some(extra) = extra.as_object()
    {
        obj.extend(extra.clone());
    }
    Ok(line)
}
