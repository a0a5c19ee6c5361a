//! The last scan's results, shared by the scan loop (writer), the feedback loop and the
//! metrics (readers).

use std::sync::Arc;
use std::time::Duration;

use hami_device_plugin_nvidia::activity::GpuActivity;
use tokio::sync::watch;

use crate::scan::{ContainerReading, ScanStats};

/// What the node looked like at the last scan.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Containers of pods on this node with a readable region.
    pub containers: Vec<ContainerReading>,
    /// The node's GPUs (NVML or the fake backend).
    pub gpus: Vec<GpuActivity>,
    pub stats: ScanStats,
    /// How long the scan took.
    pub scan_duration: Duration,
    /// Scans completed since start (0: none yet).
    pub scans: u64,
}

/// Publishes snapshots; readers see the latest.
pub type SnapshotSender = watch::Sender<Arc<Snapshot>>;
pub type SnapshotReceiver = watch::Receiver<Arc<Snapshot>>;

pub fn channel() -> (SnapshotSender, SnapshotReceiver) {
    watch::channel(Arc::new(Snapshot::default()))
}
