//! Per-container GPU use as each node's vGPU monitor reports it (scraped from its
//! `/metrics`, read from the HAMi-core shared regions the fake workload writes), next to
//! what the scheduler granted, checked: every granted device is reported, its limit is
//! the grant, and the memory in use stays within it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cluster::DemoCluster;
use crate::report::ClusterReport;

const MIB: u64 = 1024 * 1024;

/// One device of one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageRow {
    pub node: String,
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub vdevice_index: u32,
    pub uuid: String,
    /// What the scheduler granted (`hami.io/vgpu-devices-allocated`).
    pub granted_mib: u32,
    pub granted_cores: u32,
    /// `hami_vgpu_memory_limit_bytes`.
    pub limit_bytes: Option<u64>,
    /// `hami_vgpu_memory_used_bytes`.
    pub used_bytes: Option<u64>,
    /// `hami_container_device_utilization_ratio`, percent.
    pub utilization: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UsageReport {
    pub rows: Vec<UsageRow>,
    /// Broken checks; empty when all is well.
    pub problems: Vec<String>,
}

/// One sample of the text exposition: labels and value.
type Sample = (BTreeMap<String, String>, f64);

/// The samples of `name` in Prometheus/OpenMetrics text.
pub fn samples(text: &str, name: &str) -> Vec<Sample> {
    let prefix = format!("{name}{{");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (labels, value) = rest.rsplit_once("} ")?;
            Some((parse_labels(labels), value.trim().parse().ok()?))
        })
        .collect()
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, e)) = chars.next() {
                        value.push(match e {
                            'n' => '\n',
                            other => other,
                        });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').to_string(), value);
        rest = &after[end..];
    }
    out
}

fn lookup(samples: &[Sample], row: &UsageRow) -> Option<u64> {
    let index = row.vdevice_index.to_string();
    samples
        .iter()
        .find(|(l, _)| {
            let is = |k: &str, v: &str| l.get(k).map(String::as_str) == Some(v);
            is("namespace", &row.namespace)
                && is("pod", &row.pod)
                && is("container", &row.container)
                && is("vdevice_index", &index)
                && is("device_uuid", &row.uuid)
        })
        .map(|(_, v)| *v as u64)
}

impl UsageReport {
    /// Scrapes every node's monitor until it reports every device the scheduler granted
    /// to a running container of `report` (or `timeout` passes), then checks the numbers.
    pub async fn collect(cluster: &DemoCluster, report: &ClusterReport, timeout: Duration) -> Self {
        let mut rows = Vec::new();
        for p in report.pods.iter().filter(|p| p.phase == "Running") {
            let Some(node) = &p.node else { continue };
            for c in &p.containers {
                for (i, d) in c.devices.iter().enumerate() {
                    rows.push(UsageRow {
                        node: node.clone(),
                        namespace: p.namespace.clone(),
                        pod: p.name.clone(),
                        container: c.name.clone(),
                        vdevice_index: i as u32,
                        uuid: d.uuid.clone(),
                        granted_mib: d.usedmem,
                        granted_cores: d.usedcores,
                        limit_bytes: None,
                        used_bytes: None,
                        utilization: None,
                    });
                }
            }
        }
        let started = Instant::now();
        let deadline = started + timeout;
        let mut problems = Vec::new();
        loop {
            problems.clear();
            let mut scraped: BTreeMap<String, String> = BTreeMap::new();
            // AMD and DCU nodes run no vGPU monitor (it reads NVIDIA's shared regions).
            for n in cluster
                .nodes()
                .iter()
                .filter(|n| n.vendor_dev_root().is_none())
            {
                let Some(addr) = n.monitor_addr() else {
                    problems.push(format!("no vGPU monitor runs on {}", n.name()));
                    continue;
                };
                match crate::http::get(addr, "/metrics").await {
                    Ok((200, body)) => {
                        scraped.insert(n.name().to_string(), body);
                    }
                    Ok((code, body)) => problems.push(format!(
                        "monitor of {}: /metrics answered {code}: {body}",
                        n.name()
                    )),
                    Err(e) => problems.push(format!("monitor of {}: {e}", n.name())),
                }
            }
            for row in &mut rows {
                let text = scraped.get(&row.node).map_or("", String::as_str);
                row.used_bytes = lookup(&samples(text, "hami_vgpu_memory_used_bytes"), row);
                row.limit_bytes = lookup(&samples(text, "hami_vgpu_memory_limit_bytes"), row);
                row.utilization = lookup(
                    &samples(text, "hami_container_device_utilization_ratio"),
                    row,
                );
            }
            problems.extend(rows.iter().flat_map(check));
            if problems.is_empty() || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tracing::debug!(rows = rows.len(), took = ?started.elapsed(), "GPU use collected from the monitors");
        UsageReport { rows, problems }
    }

    /// The report for people.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\nGPU use per container (hami-vgpu-monitor on each node, from HAMi-core's shared regions; the fake workload writes them)"
        );
        let _ = writeln!(
            out,
            "  {:<15} {:<8} {:<9} {:>2}  {:<40}  {:>30}  {:>12}",
            "POD", "CONTAINER", "NODE", "#", "GPU", "USED / LIMIT MiB", "SM % / GRANT"
        );
        let mib = |b: Option<u64>| b.map_or("-".to_string(), |b| (b / MIB).to_string());
        for r in &self.rows {
            let cores = if r.granted_cores == 0 {
                "any".to_string()
            } else {
                r.granted_cores.to_string()
            };
            let _ = writeln!(
                out,
                "  {:<15} {:<8} {:<9} {:>2}  {:<40}  {:>30}  {:>12}",
                r.pod,
                r.container,
                r.node,
                r.vdevice_index,
                r.uuid,
                format!(
                    "{} / {} ({} granted)",
                    mib(r.used_bytes),
                    mib(r.limit_bytes),
                    r.granted_mib
                ),
                format!(
                    "{} / {cores}",
                    r.utilization.map_or("-".into(), |u| u.to_string())
                ),
            );
        }
        if self.problems.is_empty() {
            let _ = writeln!(
                out,
                "\nEvery granted GPU slice is reported: its limit is the grant and the memory in use stays within it."
            );
        } else {
            let _ = writeln!(out, "\nUSAGE PROBLEMS");
            for p in &self.problems {
                let _ = writeln!(out, "  {p}");
            }
        }
        out
    }
}

/// What is wrong with one row.
fn check(r: &UsageRow) -> Vec<String> {
    let at = format!(
        "{}/{} container {} device {} ({})",
        r.namespace, r.pod, r.container, r.vdevice_index, r.uuid
    );
    let (Some(used), Some(limit)) = (r.used_bytes, r.limit_bytes) else {
        return vec![format!(
            "{at}: not reported by the vGPU monitor of {}",
            r.node
        )];
    };
    let mut p = Vec::new();
    let granted = u64::from(r.granted_mib) * MIB;
    if limit != granted {
        p.push(format!(
            "{at}: limit {limit} bytes, but {} MiB were granted",
            r.granted_mib
        ));
    }
    if used > limit {
        p.push(format!(
            "{at}: {used} bytes in use, over the limit of {limit}"
        ));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_parse_labels_with_escapes() {
        let text = "# HELP x y\nhami_vgpu_memory_used_bytes{zone=\"vGPU\",namespace=\"a\",pod=\"p\\\"q\",container=\"c\"} 42\nother{a=\"b\"} 1\n";
        let s = samples(text, "hami_vgpu_memory_used_bytes");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].0["pod"], "p\"q");
        assert_eq!(s[0].0["zone"], "vGPU");
        assert_eq!(s[0].1, 42.0);
    }

    #[test]
    fn rows_are_checked_against_the_grant() {
        let row = UsageRow {
            node: "n".into(),
            namespace: "default".into(),
            pod: "p".into(),
            container: "c".into(),
            vdevice_index: 0,
            uuid: "GPU-1".into(),
            granted_mib: 100,
            granted_cores: 0,
            limit_bytes: Some(100 * MIB),
            used_bytes: Some(50 * MIB),
            utilization: Some(3),
        };
        assert!(check(&row).is_empty());
        let over = UsageRow {
            used_bytes: Some(101 * MIB),
            ..row.clone()
        };
        assert!(check(&over)[0].contains("over the limit"));
        let wrong = UsageRow {
            limit_bytes: Some(99 * MIB),
            ..row.clone()
        };
        assert!(check(&wrong)[0].contains("100 MiB were granted"));
        let missing = UsageRow {
            used_bytes: None,
            ..row
        };
        assert!(check(&missing)[0].contains("not reported"));
    }
}
