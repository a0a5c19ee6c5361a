//! What the kernel's files do not say about a DCU (`docs/device-plugin.md#hygon-dcu`):
//! ROCm SMI's index, serial number, VRAM, model and CU count, by PCI address. Behind a
//! trait so tests and the demo read them from a file (`--dcu-facts`).

use serde::Deserialize;

/// The SMI facts of one DCU.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DcuFacts {
    /// ROCm SMI's device index (`DvInd`): the registered index and the `device_id` of
    /// the vdev files.
    pub index: u32,
    /// `rsmi_dev_serial_number_get`: the registered ID is `DCU-<serial>`.
    pub serial: String,
    /// The model name of HAMi's type table (`K100_AI`); registered as `DCU-<model>`.
    pub model: String,
    /// `rsmi_dev_memory_total_get(VRAM) / 2^20`; a DCU reporting 0 is not registered.
    pub memory_mib: u64,
    /// Compute units (HAMi's per-model table: K100_AI 120, Z100 60).
    pub cu_count: u32,
}

pub use hami_device_plugin::facts_file::{FactsError, FactsSource};

/// Facts read from a JSON file `{"<pci bdf>": {"index", "serial", "model", "memory_mib",
/// "cu_count"}}`, re-read on every discovery.
pub type FileFacts = hami_device_plugin::facts_file::FactsFile;
