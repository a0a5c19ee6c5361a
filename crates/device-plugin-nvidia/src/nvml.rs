//! The NVML backend: devices from `libnvidia-ml.so.1` (loaded at run time, so the binary
//! builds and starts on machines without a driver), NUMA from sysfs, health from NVML
//! events plus a periodic probe.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hami_device_plugin::{BackendError, BackendEvent, DeviceBackend, PhysicalDevice};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::activity::{ActivitySource, GpuActivity};
use crate::health::{HealthChecks, Monitor, Signal};

const NAME: &str = "nvml";
/// How often every GPU is probed (and the event wait times out).
const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// Health timing of the NVML backend.
#[derive(Debug, Clone, Copy)]
pub struct HealthTiming {
    /// A state must persist this long before the published health changes.
    pub hold: Duration,
    /// A counted event keeps the GPU bad this long.
    pub window: Duration,
}

pub struct NvmlBackend {
    nvml: Arc<Nvml>,
    sysfs: PathBuf,
    checks: HealthChecks,
    timing: HealthTiming,
}

impl std::fmt::Debug for NvmlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlBackend")
            .field("checks", &self.checks)
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

fn err(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

impl NvmlBackend {
    /// Loads NVML (from `lib`, or the default `libnvidia-ml.so.1`).
    pub fn init(
        lib: Option<&Path>,
        checks: HealthChecks,
        timing: HealthTiming,
    ) -> Result<Self, BackendError> {
        let nvml = match lib {
            Some(path) => Nvml::builder().lib_path(path.as_os_str()).init(),
            None => Nvml::init(),
        }
        .map_err(|e| BackendError::Init {
            backend: NAME.into(),
            detail: format!("{e} (is the NVIDIA driver installed and libnvidia-ml.so.1 visible to this container?)"),
        })?;
        Ok(NvmlBackend {
            nvml: Arc::new(nvml),
            sysfs: PathBuf::from("/sys/bus/pci/devices"),
            checks,
            timing,
        })
    }

    /// Driver and NVML versions, for the discovery report.
    pub fn versions(&self) -> (Option<String>, Option<String>) {
        (
            self.nvml.sys_driver_version().ok(),
            self.nvml.sys_nvml_version().ok(),
        )
    }

    fn describe(&self, dev: &Device<'_>, position: u32) -> Result<PhysicalDevice, String> {
        let uuid = dev.uuid().map_err(|e| err("uuid", e))?;
        let index = dev.index().unwrap_or(position);
        let name = dev.name().map_err(|e| err("name", e))?;
        let memory_mib = match dev.memory_info() {
            Ok(m) => m.total / (1024 * 1024),
            Err(e) => {
                tracing::warn!(%uuid, error = %e, "device memory not reported by NVML; preConfiguredDeviceMemory applies");
                0
            }
        };
        let numa = match dev.pci_info() {
            Ok(pci) => numa_node(&self.sysfs, &pci.bus_id),
            Err(e) => {
                tracing::warn!(%uuid, error = %e, "no PCI info; NUMA node 0 assumed");
                None
            }
        };
        Ok(PhysicalDevice {
            uuid,
            index,
            model: device_type(&name),
            memory_mib,
            numa,
            healthy: true,
        })
    }
}

/// `NVIDIA-<name>` unless the name already starts with `NVIDIA` (HAMi's register type).
pub fn device_type(name: &str) -> String {
    if name.starts_with("NVIDIA") {
        name.to_string()
    } else {
        format!("NVIDIA-{name}")
    }
}

/// sysfs spells the PCI address `dddd:bb:dd.f` in lower case; NVML's bus id has an
/// 8-digit domain (`00000000:3B:00.0`).
pub fn sysfs_pci_address(bus_id: &str) -> String {
    let bus_id = bus_id.trim().trim_end_matches('\0').to_ascii_lowercase();
    match bus_id.split_once(':') {
        Some((domain, rest)) => match u32::from_str_radix(domain, 16) {
            Ok(d) => format!("{d:04x}:{rest}"),
            Err(_) => bus_id,
        },
        None => bus_id,
    }
}

/// `/sys/bus/pci/devices/<addr>/numa_node`; negative (no NUMA) ⇒ 0, unreadable ⇒ `None`.
pub fn numa_node(sysfs: &Path, bus_id: &str) -> Option<i32> {
    let path = sysfs.join(sysfs_pci_address(bus_id)).join("numa_node");
    let text = std::fs::read_to_string(&path).ok()?;
    let n: i32 = text.trim().parse().ok()?;
    Some(n.max(0))
}

impl ActivitySource for NvmlBackend {
    fn activity(&self) -> Result<Vec<GpuActivity>, BackendError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| BackendError::Discovery {
                backend: NAME.into(),
                detail: err("device count", e),
            })?;
        let mut out = Vec::with_capacity(count as usize);
        for i in 0..count {
            let described = self.nvml.device_by_index(i).and_then(|dev| {
                let uuid = dev.uuid()?;
                let name = dev.name()?;
                Ok((dev, uuid, name))
            });
            let (dev, uuid, name) = match described {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(index = i, error = %e, "GPU not queryable; left out of the host series");
                    continue;
                }
            };
            let memory_used_bytes = match dev.memory_info() {
                Ok(m) => Some(m.used),
                Err(NvmlError::NotSupported) => None,
                Err(e) => {
                    tracing::debug!(%uuid, error = %e, "no memory information");
                    None
                }
            };
            let utilization = match dev.utilization_rates() {
                Ok(u) => Some((u.gpu, u.memory)),
                Err(e) => {
                    tracing::debug!(%uuid, error = %e, "no utilisation rates");
                    None
                }
            };
            out.push(GpuActivity {
                index: dev.index().unwrap_or(i),
                name,
                uuid,
                memory_used_bytes,
                utilization,
            });
        }
        Ok(out)
    }
}

impl DeviceBackend for NvmlBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn discover(&self) -> Result<Vec<PhysicalDevice>, BackendError> {
        let fail = |detail: String| BackendError::Discovery {
            backend: NAME.into(),
            detail,
        };
        let count = self
            .nvml
            .device_count()
            .map_err(|e| fail(err("device count", e)))?;
        let mut out = Vec::with_capacity(count as usize);
        for i in 0..count {
            let dev = self
                .nvml
                .device_by_index(i)
                .map_err(|e| fail(err(&format!("device {i}"), e)))?;
            out.push(
                self.describe(&dev, i)
                    .map_err(|e| fail(format!("device {i}: {e}")))?,
            );
        }
        Ok(out)
    }

    fn watch(
        &self,
        devices: &[PhysicalDevice],
        events: mpsc::Sender<BackendEvent>,
        shutdown: CancellationToken,
    ) -> Result<(), BackendError> {
        if !self.checks.enabled {
            tracing::info!(
                "NVML health checks disabled ({})",
                crate::health::ENV_DISABLE
            );
            // Nothing to report, but the channel stays open until shutdown: closed, it
            // would read as a dead watch.
            tokio::spawn(async move {
                shutdown.cancelled().await;
                drop(events);
            });
            return Ok(());
        }
        let nvml = self.nvml.clone();
        let checks = self.checks.clone();
        let monitor = Monitor::new(
            devices.iter().map(|d| d.uuid.clone()),
            self.timing.window,
            self.timing.hold,
        );
        std::thread::Builder::new()
            .name("nvml-health".into())
            .spawn(move || watch_thread(&nvml, &checks, monitor, &events, &shutdown))
            .map_err(|e| BackendError::Watch {
                backend: NAME.into(),
                detail: e.to_string(),
            })?;
        Ok(())
    }
}

/// Blocks in NVML's event wait (bounded by the probe interval) until shutdown.
fn watch_thread(
    nvml: &Nvml,
    checks: &HealthChecks,
    mut monitor: Monitor,
    events: &mpsc::Sender<BackendEvent>,
    shutdown: &CancellationToken,
) {
    let kinds = EventTypes::CRITICAL_XID_ERROR
        | EventTypes::DOUBLE_BIT_ECC_ERROR
        | EventTypes::SINGLE_BIT_ECC_ERROR;
    let mut set = match nvml.create_event_set() {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot create an NVML event set; only probing GPU health");
            None
        }
    };
    let uuids: Vec<String> = monitor.uuids().map(str::to_string).collect();
    for uuid in &uuids {
        let Some(s) = set.take() else { break };
        let registered = nvml
            .device_by_uuid(uuid.as_str())
            .map_err(|e| e.to_string())
            .and_then(|d| d.register_events(kinds, s).map_err(|e| e.to_string()));
        match registered {
            Ok(s) => set = Some(s),
            Err(e) => {
                tracing::warn!(%uuid, error = %e, "cannot watch NVML events; only probing GPU health");
                set = nvml.create_event_set().ok();
            }
        }
    }
    let send = |uuid: String, healthy: bool, reason: String| {
        if events
            .blocking_send(BackendEvent::Health {
                uuid,
                healthy,
                reason,
            })
            .is_err()
        {
            tracing::debug!("health event receiver gone");
        }
    };
    let mut next_probe = Instant::now();
    while !shutdown.is_cancelled() {
        match &set {
            Some(s) => match s.wait(PROBE_INTERVAL.as_millis() as u32) {
                Ok(event) => {
                    let uuid = event.device.uuid().unwrap_or_default();
                    let xid = match event.event_data {
                        Some(XidError::Value(x)) => Some(x),
                        _ => None,
                    };
                    let counted = if event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                        checks.counts(xid)
                    } else {
                        event.event_type.contains(EventTypes::DOUBLE_BIT_ECC_ERROR)
                    };
                    tracing::info!(%uuid, ?xid, kind = ?event.event_type, counted, "NVML event");
                    if counted
                        && let Some(h) = monitor.signal(&uuid, Signal::Critical, Instant::now())
                    {
                        send(
                            uuid,
                            h,
                            format!("critical NVML event {:?} (xid {xid:?})", event.event_type),
                        );
                    }
                }
                Err(NvmlError::Timeout) => {}
                Err(e) => {
                    // HAMi marks every GPU unhealthy here; a failing wait counts against all
                    // of them, and persistence decides.
                    tracing::warn!(error = %e, "NVML event wait failed");
                    for uuid in &uuids {
                        if let Some(h) = monitor.signal(uuid, Signal::Critical, Instant::now()) {
                            send(uuid.clone(), h, format!("NVML event wait failed: {e}"));
                        }
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            },
            None => std::thread::sleep(PROBE_INTERVAL),
        }
        let now = Instant::now();
        if now >= next_probe {
            next_probe = now + PROBE_INTERVAL;
            for uuid in &uuids {
                let ok = nvml
                    .device_by_uuid(uuid.as_str())
                    .and_then(|d| d.memory_info().map(|_| ()))
                    .is_ok();
                let signal = if ok {
                    Signal::ProbeOk
                } else {
                    Signal::ProbeFailed
                };
                if let Some(h) = monitor.signal(uuid, signal, now) {
                    send(
                        uuid.clone(),
                        h,
                        if ok {
                            "probe succeeds again".into()
                        } else {
                            "NVML probe keeps failing".into()
                        },
                    );
                }
            }
            for (uuid, h) in monitor.tick(now) {
                send(uuid, h, "health persisted".into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_and_pci_address_follow_hami() {
        assert_eq!(device_type("Tesla T4"), "NVIDIA-Tesla T4");
        assert_eq!(
            device_type("NVIDIA A100-SXM4-40GB"),
            "NVIDIA A100-SXM4-40GB"
        );
        assert_eq!(sysfs_pci_address("00000000:3B:00.0"), "0000:3b:00.0");
        assert_eq!(sysfs_pci_address("00000001:AF:00.0\0"), "0001:af:00.0");
        assert_eq!(sysfs_pci_address("garbage"), "garbage");
    }

    #[test]
    fn numa_from_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("0000:3b:00.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("numa_node"), "1\n").unwrap();
        assert_eq!(numa_node(dir.path(), "00000000:3B:00.0"), Some(1));
        std::fs::write(dev.join("numa_node"), "-1\n").unwrap();
        assert_eq!(numa_node(dir.path(), "00000000:3B:00.0"), Some(0));
        assert_eq!(numa_node(dir.path(), "00000000:AF:00.0"), None);
    }

    #[test]
    fn init_without_a_driver_is_a_clear_error() {
        let missing = Path::new("/nonexistent/libnvidia-ml.so.1");
        let e = NvmlBackend::init(
            Some(missing),
            HealthChecks::default(),
            HealthTiming {
                hold: Duration::ZERO,
                window: Duration::ZERO,
            },
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("nvml: cannot initialise"), "{e}");
    }
}
