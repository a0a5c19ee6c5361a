//! The DCU facts from ROCm SMI (`--facts-source=library`, the default;
//! `docs/device-plugin.md#vendor-libraries`): index, serial number, VRAM and device ID by
//! PCI address, the model and CU count from the device ID ([`crate::models`]), as
//! HAMi's DCU plugin reads them through dcu-dcgm.

use std::path::Path;

use hami_vendor_ffi::LibrarySpec;
use hami_vendor_ffi::rocm_smi::{self, RocmSmi};

use crate::facts::{DcuFacts, FactsError, FactsSource};
use crate::models;

/// How ROCm SMI is named in errors.
pub const ROCM_SMI: LibrarySpec = LibrarySpec {
    name: "ROCm SMI",
    flag: "--rocm-smi-lib",
    env: "ROCM_SMI_LIB",
};
/// ROCm SMI's default file (found on the loader's path; Hygon's is in /opt/hyhal/lib).
pub const ROCM_SMI_FILE: &str = rocm_smi::LIBRARY_FILE;

/// ROCm SMI, loaded and initialised.
#[derive(Debug)]
pub struct LibraryFacts {
    smi: RocmSmi,
}

impl LibraryFacts {
    /// Loads the library and runs `rsmi_init`; an absent library is an error naming its
    /// file and the flag that sets it.
    pub fn open(path: &Path) -> Result<Self, FactsError> {
        Ok(LibraryFacts {
            smi: RocmSmi::open(ROCM_SMI, path.as_os_str())
                .map_err(|e| FactsError::Source(e.to_string()))?,
        })
    }
}

impl FactsSource<DcuFacts> for LibraryFacts {
    fn name(&self) -> &str {
        "ROCm SMI"
    }

    /// ROCm SMI's device at `pci_address`. What SMI cannot tell is passed on as HAMi
    /// has it (serial `N/A`, memory 0, an unknown model empty), so the backend skips
    /// the DCU with its warning.
    fn facts(&self, pci_address: &str) -> Result<Option<DcuFacts>, FactsError> {
        let devices = self
            .smi
            .devices()
            .map_err(|e| FactsError::Source(e.to_string()))?;
        let Some(d) = devices
            .into_iter()
            .find(|d| d.pci_address.eq_ignore_ascii_case(pci_address))
        else {
            return Ok(None);
        };
        let model = d.device_id.and_then(models::model_name).unwrap_or_else(|| {
            tracing::warn!(pci = pci_address, device_id = ?d.device_id.map(|id| format!("{id:x}")), "DCU model unknown");
            ""
        });
        Ok(Some(DcuFacts {
            index: d.index,
            serial: d.serial.unwrap_or_else(|| "N/A".into()),
            model: model.into(),
            memory_mib: d.vram_bytes >> 20,
            cu_count: models::compute_units(model),
        }))
    }
}
