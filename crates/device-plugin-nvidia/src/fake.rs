//! A GPU-less backend for demos and test clusters: devices come from a small YAML or JSON
//! file, re-read whenever it changes (edit `healthy: false` to fail a GPU).
//!
//! ```yaml
//! devices:
//!   - uuid: GPU-fake-0
//!     model: Tesla T4        # registered as NVIDIA-Tesla T4
//!     memory: 15360          # MiB
//!     numa: 0                # optional
//!     healthy: true          # optional, default true
//!     index: 0               # optional, default: position in the list
//!     used_memory: 2048      # optional, MiB in use (the monitor's host series), default 0
//!     utilization: 35        # optional, percent busy, default 0
//!     memory_utilization: 10 # optional, percent of memory bandwidth, default 0
//! ```
//! A bare list of devices is accepted as well.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hami_device_plugin::dir_watch::{DirWatcher, Subscription};
use hami_device_plugin::{BackendError, BackendEvent, DeviceBackend, PhysicalDevice};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::activity::{ActivitySource, GpuActivity};
use crate::nvml::device_type;

const NAME: &str = "fake";
/// Re-read period besides inotify (ConfigMap volumes swap symlinks, which some setups miss).
const POLL: Duration = Duration::from_secs(2);

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum FakeFile {
    Wrapped { devices: Vec<FakeDevice> },
    List(Vec<FakeDevice>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeDevice {
    uuid: String,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default = "default_model")]
    model: String,
    /// MiB.
    memory: u64,
    #[serde(default)]
    numa: Option<i32>,
    #[serde(default = "yes")]
    healthy: bool,
    /// MiB in use.
    #[serde(default)]
    used_memory: u64,
    /// Percent.
    #[serde(default)]
    utilization: u32,
    /// Percent.
    #[serde(default)]
    memory_utilization: u32,
}

fn default_model() -> String {
    "Fake GPU".into()
}

fn yes() -> bool {
    true
}

/// Why a device file was refused.
#[derive(Debug, thiserror::Error)]
pub enum FakeError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a device list (expected `devices: [{{uuid, memory, ...}}]`): {detail}")]
    Parse { path: PathBuf, detail: String },
    #[error("{path}: {detail}")]
    Invalid { path: PathBuf, detail: String },
}

/// Parses a device file's text.
pub fn parse_devices(text: &str, path: &Path) -> Result<Vec<PhysicalDevice>, FakeError> {
    Ok(parse_file(text, path)?
        .into_iter()
        .map(|(d, index)| PhysicalDevice {
            uuid: d.uuid,
            index,
            model: device_type(d.model.trim()),
            memory_mib: d.memory,
            numa: d.numa,
            healthy: d.healthy,
        })
        .collect())
}

/// The activity a device file declares (what NVML would measure).
pub fn parse_activity(text: &str, path: &Path) -> Result<Vec<GpuActivity>, FakeError> {
    let invalid = |detail: String| FakeError::Invalid {
        path: path.to_path_buf(),
        detail,
    };
    parse_file(text, path)?
        .into_iter()
        .map(|(d, index)| {
            if d.used_memory > d.memory {
                return Err(invalid(format!(
                    "device {}: used_memory {} MiB is more than its memory {} MiB",
                    d.uuid, d.used_memory, d.memory
                )));
            }
            if d.utilization > 100 || d.memory_utilization > 100 {
                return Err(invalid(format!(
                    "device {}: utilization and memory_utilization are percentages (0-100)",
                    d.uuid
                )));
            }
            Ok(GpuActivity {
                index,
                name: d.model.trim().to_string(),
                memory_used_bytes: Some(d.used_memory * 1024 * 1024),
                utilization: Some((d.utilization, d.memory_utilization)),
                uuid: d.uuid,
            })
        })
        .collect()
}

/// The file's devices, checked, with their indexes.
fn parse_file(text: &str, path: &Path) -> Result<Vec<(FakeDevice, u32)>, FakeError> {
    let file: FakeFile = serde_yaml_ng::from_str(text).map_err(|e| FakeError::Parse {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    let list = match file {
        FakeFile::Wrapped { devices } | FakeFile::List(devices) => devices,
    };
    let invalid = |detail: String| FakeError::Invalid {
        path: path.to_path_buf(),
        detail,
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, mut d) in list.into_iter().enumerate() {
        let uuid = d.uuid.trim().to_string();
        if uuid.is_empty() || uuid.contains([',', ':', ';']) {
            return Err(invalid(format!(
                "device #{i}: uuid {uuid:?} is empty or contains , : or ;"
            )));
        }
        if !seen.insert(uuid.clone()) {
            return Err(invalid(format!("device #{i}: uuid {uuid} appears twice")));
        }
        if d.memory == 0 {
            return Err(invalid(format!("device {uuid}: memory must be > 0 MiB")));
        }
        let index = d.index.unwrap_or(i as u32);
        d.uuid = uuid;
        out.push((d, index));
    }
    Ok(out)
}

/// Reads and parses the device file.
pub fn read_devices(path: &Path) -> Result<Vec<PhysicalDevice>, FakeError> {
    parse_devices(&read_text(path)?, path)
}

fn read_text(path: &Path) -> Result<String, FakeError> {
    std::fs::read_to_string(path).map_err(|source| FakeError::Read {
        path: path.to_path_buf(),
        source,
    })
}

#[derive(Debug)]
pub struct FakeBackend {
    path: PathBuf,
}

impl FakeBackend {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FakeBackend { path: path.into() }
    }
}

impl ActivitySource for FakeBackend {
    fn activity(&self) -> Result<Vec<GpuActivity>, BackendError> {
        read_text(&self.path)
            .and_then(|text| parse_activity(&text, &self.path))
            .map_err(|e| BackendError::Discovery {
                backend: NAME.into(),
                detail: e.to_string(),
            })
    }
}

impl DeviceBackend for FakeBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn discover(&self) -> Result<Vec<PhysicalDevice>, BackendError> {
        read_devices(&self.path).map_err(|e| BackendError::Discovery {
            backend: NAME.into(),
            detail: e.to_string(),
        })
    }

    fn watch(
        &self,
        devices: &[PhysicalDevice],
        events: mpsc::Sender<BackendEvent>,
        shutdown: CancellationToken,
    ) -> Result<(), BackendError> {
        let (wake_tx, wake_rx) = mpsc::channel::<()>(1);
        let dir = self
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let file = self.path.clone();
        let watcher = DirWatcher::shared().subscribe(&dir, move |e| {
            if changes_file(e, &file) {
                let _ = wake_tx.try_send(());
            }
        });
        let watcher = match watcher {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, limit_reached = e.limit_reached(), "cannot watch the fake device file; re-reading it every {POLL:?}");
                None
            }
        };
        tokio::spawn(reload_loop(
            self.path.clone(),
            devices.to_vec(),
            events,
            wake_rx,
            watcher,
            shutdown,
        ));
        Ok(())
    }
}

/// Whether a directory event may have changed the device file. Reading the file is an
/// event too (inotify reports opens and closes): waking on those would re-read it in a
/// loop, each read waking the next.
fn changes_file(event: &notify::Event, file: &Path) -> bool {
    !matches!(event.kind, notify::EventKind::Access(_))
        && (event.paths.is_empty()
            || event
                .paths
                .iter()
                .any(|p| p == file || p.file_name() == file.file_name()))
}

async fn reload_loop(
    path: PathBuf,
    mut last: Vec<PhysicalDevice>,
    events: mpsc::Sender<BackendEvent>,
    mut wake: mpsc::Receiver<()>,
    _watcher: Option<Subscription>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = wake.recv() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
        match read_devices(&path) {
            Ok(devices) if devices != last => {
                tracing::info!(path = %path.display(), devices = devices.len(), "fake device file changed");
                last = devices.clone();
                if events.send(BackendEvent::Devices(devices)).await.is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "fake device file unreadable; keeping the previous devices")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changes_of_the_device_file_wake_the_reload() {
        use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind};
        use notify::{Event, EventKind};
        let file = Path::new("/nodes/n1/devices.yaml");
        let on = |kind: EventKind, path: &str| Event::new(kind).add_path(PathBuf::from(path));
        assert!(changes_file(
            &on(EventKind::Modify(ModifyKind::Any), "/nodes/n1/devices.yaml"),
            file
        ));
        assert!(changes_file(
            &on(
                EventKind::Create(CreateKind::File),
                "/nodes/n1/devices.yaml"
            ),
            file
        ));
        // Reading it (our own reload) is no change.
        assert!(!changes_file(
            &on(
                EventKind::Access(AccessKind::Close(AccessMode::Read)),
                "/nodes/n1/devices.yaml"
            ),
            file
        ));
        assert!(!changes_file(
            &on(
                EventKind::Access(AccessKind::Open(AccessMode::Any)),
                "/nodes/n1/devices.yaml"
            ),
            file
        ));
        // Other files of the directory are not ours.
        assert!(!changes_file(
            &on(EventKind::Modify(ModifyKind::Any), "/nodes/n1/config.json"),
            file
        ));
        // An event without paths (a rescan) may be anything.
        assert!(changes_file(&Event::new(EventKind::Any), file));
    }

    #[test]
    fn yaml_json_and_defaults() {
        let p = Path::new("devices.yaml");
        let d = parse_devices(
            "devices:\n  - uuid: GPU-0\n    model: Tesla T4\n    memory: 15360\n    numa: 1\n  - uuid: GPU-1\n    memory: 100\n    healthy: false\n    index: 7\n",
            p,
        )
        .unwrap();
        assert_eq!(d[0].model, "NVIDIA-Tesla T4");
        assert_eq!((d[0].index, d[0].numa, d[0].healthy), (0, Some(1), true));
        assert_eq!(
            (d[1].index, d[1].model.as_str(), d[1].healthy),
            (7, "NVIDIA-Fake GPU", false)
        );
        let j = parse_devices(
            r#"[{"uuid":"GPU-9","model":"NVIDIA A100","memory":40960}]"#,
            p,
        )
        .unwrap();
        assert_eq!(j[0].model, "NVIDIA A100");
        let a = parse_activity(
            "- {uuid: GPU-0, model: Tesla T4, memory: 100, used_memory: 40, utilization: 35, memory_utilization: 9, index: 3}\n- {uuid: GPU-1, memory: 100}",
            p,
        )
        .unwrap();
        assert_eq!(a[0].memory_used_bytes, Some(40 << 20));
        assert_eq!(
            (a[0].index, a[0].name.as_str(), a[0].utilization),
            (3, "Tesla T4", Some((35, 9)))
        );
        assert_eq!(
            (a[1].memory_used_bytes, a[1].utilization),
            (Some(0), Some((0, 0)))
        );
    }

    #[test]
    fn bad_files_say_why() {
        let p = Path::new("d.yaml");
        let msg = |t: &str| parse_devices(t, p).unwrap_err().to_string();
        assert!(msg("devices: 3").contains("not a device list"));
        assert!(msg("- {uuid: a, memory: 1, colour: red}").contains("not a device list"));
        assert!(msg("- {uuid: a, memory: 1}\n- {uuid: a, memory: 1}").contains("appears twice"));
        assert!(msg("- {uuid: '', memory: 1}").contains("empty"));
        assert!(msg("- {uuid: 'a,b', memory: 1}").contains("contains"));
        assert!(msg("- {uuid: a, memory: 0}").contains("memory must be > 0"));
        let activity = |t: &str| parse_activity(t, p).unwrap_err().to_string();
        assert!(
            activity("- {uuid: a, memory: 1, used_memory: 2}").contains("more than its memory")
        );
        assert!(activity("- {uuid: a, memory: 1, utilization: 101}").contains("percentages"));
        assert!(
            read_devices(Path::new("/nonexistent/x.yaml"))
                .unwrap_err()
                .to_string()
                .contains("cannot read")
        );
    }
}
