//! What a vendor provides: the devices of this node and news about their health.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One physical device as the vendor library reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhysicalDevice {
    /// Stable identifier (`GPU-…` for NVIDIA); allocations refer to it.
    pub uuid: String,
    /// Index of the device on the node (NVML index).
    pub index: u32,
    /// Device type as registered for the scheduler, e.g. `NVIDIA-Tesla T4`.
    pub model: String,
    /// Total memory in MiB, unscaled. 0 means the library could not tell.
    pub memory_mib: u64,
    /// NUMA node the device hangs off, when known.
    pub numa: Option<i32>,
    pub healthy: bool,
}

/// News from a backend's health watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendEvent {
    /// The published health of one device changed (the backend has already decided the
    /// change is real, e.g. after it persisted).
    Health {
        uuid: String,
        healthy: bool,
        reason: String,
    },
    /// A full new device list (a re-read inventory); replaces the previous one.
    Devices(Vec<PhysicalDevice>),
}

/// Why a backend could not answer.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{backend}: cannot initialise: {detail}")]
    Init { backend: String, detail: String },
    #[error("{backend}: device discovery failed: {detail}")]
    Discovery { backend: String, detail: String },
    #[error("{backend}: health watch failed: {detail}")]
    Watch { backend: String, detail: String },
}

/// A vendor's view of the node's devices.
pub trait DeviceBackend: Send + Sync + 'static {
    /// Short name for logs (`nvml`, `fake`).
    fn name(&self) -> &str;

    /// The devices present now, with their current health.
    fn discover(&self) -> Result<Vec<PhysicalDevice>, BackendError>;

    /// Starts watching `devices` (what `discover` returned) in the background, sending
    /// events until `shutdown` is cancelled. Must not block. `events` stays open until
    /// then, even when there is nothing to watch: the framework reads it closing early as
    /// the watch having died, and calls `watch` again.
    fn watch(
        &self,
        devices: &[PhysicalDevice],
        events: mpsc::Sender<BackendEvent>,
        shutdown: CancellationToken,
    ) -> Result<(), BackendError>;
}

/// The watch of a backend that re-reads the node's files: every `poll`, `rediscover`
/// gives the device list, which is sent when it differs from the last one. A failed
/// re-discovery keeps the last list (logged). Runs until `shutdown`.
pub fn spawn_rediscovery<F>(
    backend: &'static str,
    poll: std::time::Duration,
    devices: &[PhysicalDevice],
    events: mpsc::Sender<BackendEvent>,
    shutdown: CancellationToken,
    rediscover: F,
) where
    F: Fn() -> Result<Vec<PhysicalDevice>, BackendError> + Send + 'static,
{
    let mut last = devices.to_vec();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(poll) => {}
            }
            match rediscover() {
                Ok(now) => {
                    if now != last {
                        if events
                            .send(BackendEvent::Devices(now.clone()))
                            .await
                            .is_err()
                        {
                            return;
                        }
                        last = now;
                    }
                }
                Err(e) => {
                    tracing::warn!(backend, error = %e, "re-discovery failed; keeping the last device list")
                }
            }
        }
    });
}
