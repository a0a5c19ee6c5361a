//! `cargo xtask bench-monitor`: the real `hami-vgpu-monitor` binary on one node with
//! many containers (HAMi-core regions written the way HAMi-core writes them, sparse; the
//! pods in the API server emulator): the scan duration the monitor reports, `/metrics`
//! latency and size, and the process's RSS read from `/proc`. Targets for 1,000
//! containers x 4 GPUs (`docs/monitor.md`): scan <= 10 ms, scrape <= 20 ms, RSS <= 24 MiB.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use hami_core::shared_region::{ImageDevice, ImageMemory, ImageProc, RegionImage};
use hami_device_plugin_nvidia::workload::create_region;
use hami_testkit::resources::PODS;
use hami_testkit::{ApiServer, Options};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::bench::{free_port, get_status, percentile, rss_mib, spawn, stop, write_kubeconfig};

const NODE: &str = "bench-node";
const GIB: u64 = 1 << 30;

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct MonitorBenchArgs {
    pub containers: usize,
    pub devices: usize,
    pub scrapes: usize,
    pub binary: PathBuf,
}

fn uuid(d: usize) -> String {
    format!("GPU-{d:08x}-aaaa-bbbb-cccc-dddddddddddd")
}

fn region(i: usize, devices: usize) -> RegionImage {
    let used: Vec<(ImageMemory, u64)> = (0..devices)
        .map(|d| {
            let total = ((i * 7 + d) % 100) as u64 * (GIB / 100);
            (
                ImageMemory::total(total, total / 8, total / 16, total - total / 8 - total / 16),
                20,
            )
        })
        .collect();
    RegionImage {
        devices: (0..devices)
            .map(|d| ImageDevice::new(&uuid(d), 8 * GIB, 25))
            .collect(),
        procs: vec![ImageProc::live(1, 1000 + i as i32, &used)],
        priority: (i % 2) as i32,
        recent_kernel: 0,
        last_kernel_time: 1_800_000_000,
        ..RegionImage::v1(2)
    }
}

fn devices_file(path: &Path, devices: usize) -> anyhow::Result<()> {
    let mut text = String::from("devices:\n");
    for d in 0..devices {
        text.push_str(&format!(
            "  - {{uuid: {}, model: NVIDIA H100 80GB HBM3, memory: 81559, used_memory: 20000, utilization: 40}}\n",
            uuid(d)
        ));
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// GETs `path`: status, body size and the time to the last byte.
async fn fetch(port: u16, path: &str) -> anyhow::Result<(u16, String, Duration)> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = Request::get(path)
        .header(hyper::header::HOST, "localhost")
        .body(Full::new(Bytes::new()))?;
    let t = Instant::now();
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((
        status,
        String::from_utf8_lossy(&body).into_owned(),
        t.elapsed(),
    ))
}

fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Runs the benchmark; one JSON object of results.
pub async fn run(args: &MonitorBenchArgs) -> anyhow::Result<Value> {
    let server = ApiServer::start_with(Options {
        history_limit: 2_000,
        ..Options::default()
    })
    .await?;
    let dir = std::env::temp_dir().join(format!("hami-bench-monitor-{}", std::process::id()));
    let containers_dir = dir.join("vgpu").join("containers");
    std::fs::create_dir_all(&containers_dir)?;
    let fill = Instant::now();
    for i in 0..args.containers {
        let pod = server
            .store()
            .create(
                &PODS,
                Some("default"),
                json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("gpu-pod-{i:05}"), "namespace": "default"},
                    "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "cuda"}]},
                    "status": {"phase": "Running"},
                }),
            )
            .map_err(|e| anyhow::anyhow!("creating pod: {e:?}"))?;
        let uid = pod["metadata"]["uid"].as_str().context("pod without uid")?;
        let d = containers_dir.join(format!("{uid}_main"));
        std::fs::create_dir_all(&d)?;
        let file = std::fs::File::create(d.join("0b9e2c1a.cache"))?;
        create_region(&file, &region(i, args.devices))?;
    }
    let fill_secs = fill.elapsed().as_secs_f64();
    let kubeconfig = dir.join("kubeconfig");
    write_kubeconfig(&kubeconfig, &server.url())?;
    let devices = dir.join("devices.yaml");
    devices_file(&devices, args.devices)?;
    let port = free_port()?;
    let (mut child, pid) = spawn(
        &args.binary,
        &[
            format!("--node-name={NODE}"),
            format!("--hook-path={}", dir.join("vgpu").display()),
            format!("--metrics-bind-address=127.0.0.1:{port}"),
            "--backend=fake".into(),
            format!("--fake-devices={}", devices.display()),
            "--scan-interval=1s".into(),
            "--feedback-interval=1s".into(),
        ],
        &[],
        &kubeconfig,
    )?;

    let started = Instant::now();
    loop {
        if get_status(port, "/readyz").await == Some(200)
            && let Ok((200, text, _)) = fetch(port, "/metrics").await
            && gauge(&text, "hami_vgpu_monitor_containers") == Some(args.containers as f64)
        {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            bail!("hami-vgpu-monitor exited: {status}");
        }
        if started.elapsed() > Duration::from_secs(120) {
            bail!(
                "hami-vgpu-monitor did not report {} containers within 2 minutes",
                args.containers
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready_secs = started.elapsed().as_secs_f64();
    // Steady state: several scans and feedback rounds, then the scrapes.
    let mut scans = Vec::new();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let (_, text, _) = fetch(port, "/metrics").await?;
        if let Some(s) = gauge(&text, "hami_vgpu_monitor_scan_duration_seconds") {
            scans.push(Duration::from_secs_f64(s));
        }
    }
    scans.sort();
    let mut scrapes = Vec::with_capacity(args.scrapes);
    let mut bytes = 0;
    for _ in 0..args.scrapes {
        let (status, text, took) = fetch(port, "/metrics").await?;
        if status != 200 {
            bail!("/metrics answered {status}");
        }
        bytes = text.len();
        scrapes.push(took);
    }
    scrapes.sort();
    let (rss, hwm) = rss_mib(pid)?;
    stop(&mut child, pid).await;
    let _ = std::fs::remove_dir_all(&dir);
    let ms = |d: Option<&Duration>| d.map_or(0.0, |d| (d.as_secs_f64() * 1e5).round() / 100.0);
    Ok(json!({
        "containers": args.containers,
        "devices_per_container": args.devices,
        "scan_ms_p50": ms(scans.get(scans.len() / 2)),
        "scan_ms_max": ms(scans.last()),
        "scrape_ms_p50": (percentile(&scrapes, 0.50) / 10.0).round() / 100.0,
        "scrape_ms_p99": (percentile(&scrapes, 0.99) / 10.0).round() / 100.0,
        "scrape_bytes": bytes,
        "rss_mib": (rss * 10.0).round() / 10.0,
        "rss_peak_mib": (hwm * 10.0).round() / 10.0,
        "ready_secs": (ready_secs * 100.0).round() / 100.0,
        "fill_secs": (fill_secs * 100.0).round() / 100.0,
    }))
}
