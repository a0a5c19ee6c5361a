//! What each GPU of the node is doing now: memory in use and utilisation, as NVML reports
//! them (or the fake backend's device file declares them). The vGPU monitor exports them
//! as HAMi's host series (`docs/monitor.md`).

use hami_device_plugin::BackendError;

/// One GPU's activity. A value the source cannot tell is `None` (HAMi leaves the series
/// out, e.g. memory on unified-memory GPUs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuActivity {
    pub uuid: String,
    pub index: u32,
    /// The NVML name (`Tesla T4`, `NVIDIA A100-SXM4-80GB`).
    pub name: String,
    pub memory_used_bytes: Option<u64>,
    /// (GPU busy, memory controller busy), percent.
    pub utilization: Option<(u32, u32)>,
}

/// A source of [`GpuActivity`].
pub trait ActivitySource: Send + Sync + 'static {
    /// Every GPU of the node, now. A GPU the source cannot query at all is left out
    /// (and logged by the source); an error means the source itself failed.
    fn activity(&self) -> Result<Vec<GpuActivity>, BackendError>;
}
