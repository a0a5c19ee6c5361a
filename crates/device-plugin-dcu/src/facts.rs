//! What the kernel's files do not say about a DCU (`docs/device-plugin.md#hygon-dcu`):
//! ROCm SMI's index, serial number, VRAM, model and CU count, by PCI address. Behind a
//! trait so tests and the demo read them from a file (`--dcu-facts`).

use std::path::{Path, PathBuf};

use hami_device_plugin::facts_file::{FactsError, FactsFile};
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

/// A source of the facts, keyed by PCI address.
pub trait FactsSource: Send + Sync + 'static {
    fn name(&self) -> &str;
    /// The facts of the DCU at `pci_bdf`; `None` when SMI does not know it.
    fn facts(&self, pci_bdf: &str) -> Result<Option<DcuFacts>, FactsError>;
}

/// Facts read from a JSON file `{"<pci bdf>": {"index", "serial", "model", "memory_mib",
/// "cu_count"}}`, re-read on every discovery.
#[derive(Debug, Clone)]
pub struct FileFacts {
    file: FactsFile,
}

impl FileFacts {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileFacts {
            file: FactsFile::new(path),
        }
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }
}

impl FactsSource for FileFacts {
    fn name(&self) -> &str {
        "file"
    }

    fn facts(&self, pci_bdf: &str) -> Result<Option<DcuFacts>, FactsError> {
        self.file.get(pci_bdf)
    }
}
