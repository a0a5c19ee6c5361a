//! The monitor's series: HAMi's names, labels and units (`docs/monitor.md`), encoded at
//! scrape time from the last scan, with the constant label `zone="vGPU"` HAMi's monitor
//! adds to all but `hami_build_info`. `--legacy-metrics` adds HAMi's pre-2.8 names.

use hami_core::sync::RwLockExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hami_core::shared_region::DeviceUsage;
use hami_device_plugin_nvidia::activity::GpuActivity;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::pods::SharedPods;
use crate::scan::ContainerReading;
use crate::snapshot::SnapshotReceiver;

const ZONE: (&str, &str) = ("zone", "vGPU");
/// `vdevice_index` values (a region has at most 16 devices).
const INDEXES: [&str; 16] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15",
];

/// Registers the monitor's collector in `registry` (`hami_build_info` comes from
/// [`hami_server::build_info`]).
pub fn register(
    registry: &mut Registry,
    snapshot: SnapshotReceiver,
    pods: SharedPods,
    node: String,
    legacy: bool,
) {
    registry.register_collector(Box::new(MonitorCollector {
        snapshot,
        pods,
        node,
        legacy,
    }));
}

#[derive(Debug)]
struct MonitorCollector {
    snapshot: SnapshotReceiver,
    pods: SharedPods,
    node: String,
    legacy: bool,
}

/// One container device with a valid UUID: the rows of the per-container families.
struct Row<'a> {
    reading: &'a ContainerReading,
    index: &'static str,
    uuid: &'a str,
    device: &'a DeviceUsage,
}

fn rows(containers: &[ContainerReading]) -> Vec<Row<'_>> {
    let mut out = Vec::with_capacity(containers.len() * 2);
    for reading in containers {
        for (i, device) in reading.usage.devices.iter().enumerate() {
            let Some(uuid) = device.uuid.as_str() else {
                // Not written yet (or not UTF-8): HAMi skips it until the next scrape.
                continue;
            };
            out.push(Row {
                reading,
                index: INDEXES[i.min(INDEXES.len() - 1)],
                uuid,
                device,
            });
        }
    }
    out
}

fn labels<'a>(r: &Row<'a>) -> [(&'static str, &'a str); 6] {
    [
        ZONE,
        ("namespace", r.reading.pod.namespace.as_str()),
        ("pod", r.reading.pod.name.as_str()),
        ("container", &*r.reading.container),
        ("vdevice_index", r.index),
        ("device_uuid", r.uuid),
    ]
}

fn legacy_labels<'a>(r: &Row<'a>) -> [(&'static str, &'a str); 6] {
    [
        ZONE,
        ("podnamespace", r.reading.pod.namespace.as_str()),
        ("podname", r.reading.pod.name.as_str()),
        ("ctrname", &*r.reading.container),
        ("vdeviceid", r.index),
        ("deviceuuid", r.uuid),
    ]
}

type Encoded = Result<(), std::fmt::Error>;
/// A host series: name, help, whether it uses the legacy labels, its value.
type HostFamily<'a> = (&'a str, &'a str, bool, fn(&GpuActivity) -> Option<u64>);
/// A per-container series (no device): name, help, value.
type ContainerFamily<'a> = (&'a str, &'a str, fn(&ContainerReading) -> i64);

/// One gauge family over `rows`; rows `value` answers None for are left out.
fn container_family<'r, T>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &'r [Row<'r>],
    labels: fn(&Row<'r>) -> [(&'static str, &'r str); 6],
    value: impl Fn(&Row<'r>) -> Option<T>,
) -> Encoded
where
    ConstGauge<T>: EncodeMetric,
{
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for r in rows {
        if let Some(v) = value(r) {
            ConstGauge::new(v).encode(metric.encode_family(&labels(r))?)?;
        }
    }
    Ok(())
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs() as i64
}

fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Collector for MonitorCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Encoded {
        let snap = self.snapshot.borrow().clone();
        self.encode_host(&mut encoder, &snap.gpus)?;
        let rows = rows(&snap.containers);
        let now = unix_now();
        let elapsed = |r: &Row<'_>| {
            let t = r.reading.usage.last_kernel_time;
            (t > 0).then(|| (now - t).max(0))
        };
        let e = &mut encoder;
        container_family(
            e,
            "hami_vgpu_memory_used_bytes",
            "vGPU device memory usage in bytes",
            &rows,
            labels,
            |r| Some(as_i64(r.device.used)),
        )?;
        container_family(
            e,
            "hami_vgpu_memory_limit_bytes",
            "vGPU device memory limit in bytes",
            &rows,
            labels,
            |r| Some(as_i64(r.device.limit)),
        )?;
        container_family(
            e,
            "hami_container_device_memory_bytes",
            "Container device memory usage in bytes",
            &rows,
            labels,
            |r| Some(as_i64(r.device.used)),
        )?;
        container_family(
            e,
            "hami_container_device_utilization_ratio",
            "Container device SM utilization ratio",
            &rows,
            labels,
            |r| Some(as_i64(r.device.sm_util)),
        )?;
        container_family(
            e,
            "hami_container_last_kernel_elapsed_seconds",
            "Seconds since last kernel execution in container",
            &rows,
            labels,
            elapsed,
        )?;
        container_family(
            e,
            "hami_vgpu_memory_context_bytes",
            "Container device memory context size in bytes",
            &rows,
            labels,
            |r| Some(as_i64(r.device.context)),
        )?;
        container_family(
            e,
            "hami_vgpu_memory_module_bytes",
            "Container device memory module size in bytes",
            &rows,
            labels,
            |r| Some(as_i64(r.device.module)),
        )?;
        container_family(
            e,
            "hami_vgpu_memory_buffer_bytes",
            "Container device memory buffer size in bytes",
            &rows,
            labels,
            |r| Some(as_i64(r.device.data)),
        )?;
        self.encode_priority(e, &snap.containers)?;
        self.encode_mig(e)?;
        if self.legacy {
            container_family(
                e,
                "vGPU_device_memory_usage_in_bytes",
                "vGPU device usage",
                &rows,
                legacy_labels,
                |r| Some(as_i64(r.device.used)),
            )?;
            container_family(
                e,
                "vGPU_device_memory_limit_in_bytes",
                "vGPU device limit",
                &rows,
                legacy_labels,
                |r| Some(as_i64(r.device.limit)),
            )?;
            self.encode_legacy_memory_desc(e, &rows)?;
            container_family(
                e,
                "Device_utilization_desc_of_container",
                "Container device utilization description",
                &rows,
                legacy_labels,
                |r| Some(as_i64(r.device.sm_util)),
            )?;
            container_family(
                e,
                "Device_last_kernel_of_container",
                "Container device last kernel description",
                &rows,
                legacy_labels,
                elapsed,
            )?;
        }
        self.encode_own(e, &snap)
    }
}

impl MonitorCollector {
    fn encode_host(&self, encoder: &mut DescriptorEncoder, gpus: &[GpuActivity]) -> Encoded {
        let rows: Vec<(String, String)> = gpus
            .iter()
            .map(|g| (g.index.to_string(), format!("NVIDIA-{}", g.name)))
            .collect();
        let node = self.node.as_str();
        let mut families: Vec<HostFamily<'_>> = vec![
            (
                "hami_host_gpu_memory_used_bytes",
                "GPU device memory usage in bytes",
                false,
                |g| g.memory_used_bytes,
            ),
            (
                "hami_host_gpu_utilization_ratio",
                "GPU core utilization ratio (0-100)",
                false,
                |g| g.utilization.map(|u| u64::from(u.0)),
            ),
        ];
        if self.legacy {
            families.push(
                ("HostGPUMemoryUsage", "GPU device memory usage", true, |g| {
                    g.memory_used_bytes
                }),
            );
            families.push(("HostCoreUtilization", "GPU core utilization", true, |g| {
                g.utilization.map(|u| u64::from(u.0))
            }));
        }
        for (name, help, legacy, value) in families {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (g, (index, ty)) in gpus.iter().zip(&rows) {
                let Some(v) = value(g) else { continue };
                let l = if legacy {
                    [
                        ZONE,
                        ("nodeid", node),
                        ("deviceidx", index),
                        ("deviceuuid", g.uuid.as_str()),
                        ("devicetype", ty),
                    ]
                } else {
                    [
                        ZONE,
                        ("node", node),
                        ("device_index", index),
                        ("device_uuid", g.uuid.as_str()),
                        ("device_type", ty),
                    ]
                };
                ConstGauge::new(as_i64(v)).encode(metric.encode_family(&l)?)?;
            }
        }
        let mut metric = encoder.encode_descriptor(
            "hami_host_gpu_memory_controller_utilization_ratio",
            "GPU memory controller utilization ratio (0-100)",
            None,
            MetricType::Gauge,
        )?;
        for (g, (index, ty)) in gpus.iter().zip(&rows) {
            if let Some((_, mem)) = g.utilization {
                let l = [
                    ZONE,
                    ("device_index", index.as_str()),
                    ("device_uuid", g.uuid.as_str()),
                    ("device_type", ty.as_str()),
                ];
                ConstGauge::new(i64::from(mem)).encode(metric.encode_family(&l)?)?;
            }
        }
        Ok(())
    }

    /// `Device_memory_desc_of_container`: the breakdown as labels, `offset` the rest
    /// (computed with HAMi's unsigned wrap-around).
    fn encode_legacy_memory_desc(
        &self,
        encoder: &mut DescriptorEncoder,
        rows: &[Row<'_>],
    ) -> Encoded {
        let mut metric = encoder.encode_descriptor(
            "Device_memory_desc_of_container",
            "Container device memory description",
            None,
            MetricType::Gauge,
        )?;
        for r in rows {
            let d = r.device;
            let rest = d
                .used
                .wrapping_sub(d.context)
                .wrapping_sub(d.module)
                .wrapping_sub(d.data);
            let (ctx, module, data, rest) = (
                d.context.to_string(),
                d.module.to_string(),
                d.data.to_string(),
                rest.to_string(),
            );
            let base = legacy_labels(r);
            let l = [
                base[0],
                base[1],
                base[2],
                base[3],
                base[4],
                base[5],
                ("context", ctx.as_str()),
                ("module", module.as_str()),
                ("data", data.as_str()),
                ("offset", rest.as_str()),
            ];
            ConstGauge::new(as_i64(d.used)).encode(metric.encode_family(&l)?)?;
        }
        Ok(())
    }

    /// Per container: the priority the feedback loop works with and what it decided
    /// (hami-rs additions, for the throttling panels).
    fn encode_priority(
        &self,
        encoder: &mut DescriptorEncoder,
        containers: &[ContainerReading],
    ) -> Encoded {
        let families: [ContainerFamily<'_>; 3] = [
            (
                "hami_container_task_priority",
                "Task priority of the container (0 high, 1 low), from its shared region",
                |c| i64::from(c.usage.priority),
            ),
            (
                "hami_container_feedback_blocked",
                "1 while the priority feedback blocks the container's kernel launches (a higher-priority task is active on its GPU)",
                |c| i64::from(c.usage.recent_kernel < 0),
            ),
            (
                "hami_container_utilization_switch",
                "1 while the container's GPU is contended (HAMi-core's utilization_switch)",
                |c| i64::from(c.usage.utilization_switch != 0),
            ),
        ];
        for (name, help, value) in families {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for c in containers {
                let l = [
                    ZONE,
                    ("namespace", c.pod.namespace.as_str()),
                    ("pod", c.pod.name.as_str()),
                    ("container", &*c.container),
                ];
                ConstGauge::new(value(c)).encode(metric.encode_family(&l)?)?;
            }
        }
        Ok(())
    }

    fn encode_mig(&self, encoder: &mut DescriptorEncoder) -> Encoded {
        let pods = self.pods.read_unpoisoned();
        let mut rows = Vec::new();
        for (_, pod) in pods.iter() {
            for a in &pod.mig {
                let (Some(mig), Some(gi), Some(ci)) =
                    (&a.mig_uuid, a.gpu_instance_id, a.compute_instance_id)
                else {
                    continue;
                };
                let Some(container) = pod.containers.get(a.container_index as usize) else {
                    tracing::debug!(pod = %format!("{}/{}", pod.namespace, pod.name), index = a.container_index, "MIG allocation names no container of the pod");
                    continue;
                };
                rows.push((
                    pod.clone(),
                    container.clone(),
                    a.device_index.to_string(),
                    a.gpu_uuid.clone(),
                    mig.clone(),
                    a.profile.clone(),
                    gi.to_string(),
                    ci.to_string(),
                ));
            }
        }
        drop(pods);
        let mut metric = encoder.encode_descriptor(
            "hami_mig_device_info",
            "MIG runtime identity for a container allocation",
            None,
            MetricType::Gauge,
        )?;
        for (pod, container, index, gpu, mig, profile, gi, ci) in &rows {
            let l = [
                ZONE,
                ("namespace", pod.namespace.as_str()),
                ("pod", pod.name.as_str()),
                ("container", container.as_str()),
                ("vdevice_index", index.as_str()),
                ("device_uuid", gpu.as_str()),
                ("mig_uuid", mig.as_str()),
                ("profile", profile.as_str()),
                ("gpu_instance_id", gi.as_str()),
                ("compute_instance_id", ci.as_str()),
            ];
            ConstGauge::new(1i64).encode(metric.encode_family(&l)?)?;
        }
        if self.legacy {
            let mut metric = encoder.encode_descriptor(
                "MigInfo",
                "Mig device information for container",
                None,
                MetricType::Gauge,
            )?;
            for (pod, container, index, gpu, _, _, gi, _) in &rows {
                let l = [
                    ZONE,
                    ("podnamespace", pod.namespace.as_str()),
                    ("podname", pod.name.as_str()),
                    ("ctrname", container.as_str()),
                    ("vdeviceid", index.as_str()),
                    ("deviceuuid", gpu.as_str()),
                    ("instanceid", gi.as_str()),
                ];
                ConstGauge::new(1i64).encode(metric.encode_family(&l)?)?;
            }
        }
        Ok(())
    }

    /// The monitor's own health (hami-rs additions).
    fn encode_own(
        &self,
        encoder: &mut DescriptorEncoder,
        snap: &crate::snapshot::Snapshot,
    ) -> Encoded {
        let plain: [(&str, &str, i64); 4] = [
            (
                "hami_vgpu_monitor_containers",
                "Containers whose shared region the last scan read",
                snap.stats.read as i64,
            ),
            (
                "hami_vgpu_monitor_skipped_containers",
                "Container directories of this node's pods without a usable shared region at the last scan",
                snap.stats.skipped as i64,
            ),
            (
                "hami_vgpu_monitor_scans",
                "Scans completed since the monitor started",
                as_i64(snap.scans),
            ),
            (
                "hami_vgpu_monitor_paused",
                "1 while the MIG apply lock file exists (scans and feedback paused)",
                i64::from(snap.stats.paused),
            ),
        ];
        for (name, help, value) in plain {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(value).encode(metric.encode_family(&[ZONE])?)?;
        }
        let mut metric = encoder.encode_descriptor(
            "hami_vgpu_monitor_scan_duration_seconds",
            "Duration of the last scan of the containers directory",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(snap.scan_duration.as_secs_f64()).encode(metric.encode_family(&[ZONE])?)?;
        Ok(())
    }
}
