//! What pods really use of their GPUs, as the nodes' hami-vgpu-monitor reports it
//! (`docs/monitor.md`): per container `hami_vgpu_memory_used_bytes` and
//! `hami_container_device_utilization_ratio`, summed per GPU.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;

const MIB: f64 = 1024.0 * 1024.0;
const TIMEOUT: Duration = Duration::from_secs(10);

/// What the containers on one GPU use, summed.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct InUse {
    /// Device memory the containers have allocated, MiB.
    pub memory_mib: u64,
    /// SM utilisation of the containers, percent of the GPU (summed, at most 100).
    pub utilization: u64,
}

/// Per GPU UUID, what the monitors at `urls` report.
pub async fn in_use(urls: &[String]) -> anyhow::Result<BTreeMap<String, InUse>> {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut out: BTreeMap<String, InUse> = BTreeMap::new();
    for url in urls {
        let uri: hyper::Uri = url
            .parse()
            .with_context(|| format!("--monitor {url} is not a URL"))?;
        if uri.scheme_str() != Some("http") {
            bail!("--monitor {url}: the monitor serves plain http:// URLs");
        }
        let resp = tokio::time::timeout(TIMEOUT, client.get(uri))
            .await
            .with_context(|| format!("monitor {url} did not answer within {TIMEOUT:?}"))?
            .with_context(|| format!("cannot reach monitor {url}"))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .with_context(|| format!("cannot read the answer of monitor {url}"))?
            .to_bytes();
        if !status.is_success() {
            bail!("monitor {url} answered {status}");
        }
        let text = String::from_utf8_lossy(&body);
        add_samples(&mut out, &text).with_context(|| format!("monitor {url}"))?;
    }
    for v in out.values_mut() {
        v.utilization = v.utilization.min(100);
    }
    Ok(out)
}

/// Adds the per-container samples of one monitor's metrics page to `out`.
fn add_samples(out: &mut BTreeMap<String, InUse>, text: &str) -> anyhow::Result<()> {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .context("the metrics page does not parse")?;
    for sample in &scrape.samples {
        let value = match sample.value {
            prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
            _ => continue,
        };
        let Some(uuid) = sample.labels.get("device_uuid") else {
            continue;
        };
        if !value.is_finite() || value < 0.0 {
            continue;
        }
        let entry = out.entry(uuid.to_string()).or_default();
        match sample.metric.as_str() {
            "hami_vgpu_memory_used_bytes" => entry.memory_mib += (value / MIB).round() as u64,
            "hami_container_device_utilization_ratio" => entry.utilization += value.round() as u64,
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_sum_per_gpu() {
        let text = "# HELP hami_vgpu_memory_used_bytes used\n\
            # TYPE hami_vgpu_memory_used_bytes gauge\n\
            hami_vgpu_memory_used_bytes{zone=\"vGPU\",namespace=\"a\",pod=\"p\",container=\"c\",vdevice_index=\"0\",device_uuid=\"GPU-1\"} 1048576000\n\
            hami_vgpu_memory_used_bytes{zone=\"vGPU\",namespace=\"a\",pod=\"q\",container=\"c\",vdevice_index=\"0\",device_uuid=\"GPU-1\"} 524288000\n\
            # TYPE hami_container_device_utilization_ratio gauge\n\
            hami_container_device_utilization_ratio{namespace=\"a\",pod=\"p\",container=\"c\",vdevice_index=\"0\",device_uuid=\"GPU-1\"} 70\n\
            hami_container_device_utilization_ratio{namespace=\"a\",pod=\"q\",container=\"c\",vdevice_index=\"0\",device_uuid=\"GPU-1\"} 50\n\
            hami_vgpu_memory_limit_bytes{device_uuid=\"GPU-1\"} 9999999999\n\
            # EOF\n";
        let mut out = BTreeMap::new();
        add_samples(&mut out, text).unwrap();
        assert_eq!(out["GPU-1"].memory_mib, 1500);
        assert_eq!(out["GPU-1"].utilization, 120);
    }
}
