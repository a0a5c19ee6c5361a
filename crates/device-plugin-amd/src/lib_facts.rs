//! The GPU facts from the vendor libraries (`--facts-source=library`, the default;
//! `docs/device-plugin.md#vendor-libraries`): AMD SMI's UUID and market name by PCI
//! address, libdrm's VRAM and active CUs through the GPU's render node, as HAMi's AMD
//! plugin reads them.

use std::path::{Path, PathBuf};

use hami_vendor_ffi::amdsmi::{self, AmdSmi};
use hami_vendor_ffi::libdrm_amdgpu::{self, LibDrmAmdgpu};
use hami_vendor_ffi::{FfiError, LibrarySpec};

use crate::backend::Roots;
use crate::facts::{FactsError, FactsSource, GpuFacts};
use crate::sysfs;

/// How AMD SMI is named in errors.
pub const AMD_SMI: LibrarySpec = LibrarySpec {
    name: "AMD SMI",
    flag: "--amd-smi-lib",
    env: "AMD_SMI_LIB",
};
/// How libdrm_amdgpu is named in errors.
pub const LIBDRM_AMDGPU: LibrarySpec = LibrarySpec {
    name: "libdrm_amdgpu",
    flag: "--libdrm-amdgpu-lib",
    env: "LIBDRM_AMDGPU_LIB",
};
/// AMD SMI's default file (found on the loader's path).
pub const AMD_SMI_FILE: &str = amdsmi::LIBRARY_FILE;
/// libdrm_amdgpu's default file (found on the loader's path).
pub const LIBDRM_AMDGPU_FILE: &str = libdrm_amdgpu::LIBRARY_FILE;

/// HAMi's type for a GPU AMD SMI gives no market name.
pub const FALLBACK_TYPE: &str = "amd-gpu";

/// AMD SMI and libdrm_amdgpu, loaded.
#[derive(Debug)]
pub struct LibraryFacts {
    smi: AmdSmi,
    drm: LibDrmAmdgpu,
    roots: Roots,
}

fn library_error(e: FfiError) -> FactsError {
    FactsError::Source(e.to_string())
}

impl LibraryFacts {
    /// Loads both libraries and initialises AMD SMI; an absent library is an error
    /// naming its file and the flag that sets it.
    pub fn open(amd_smi: &Path, libdrm: &Path, roots: Roots) -> Result<Self, FactsError> {
        Ok(LibraryFacts {
            smi: AmdSmi::open(AMD_SMI, amd_smi.as_os_str()).map_err(library_error)?,
            drm: LibDrmAmdgpu::open(LIBDRM_AMDGPU, libdrm.as_os_str()).map_err(library_error)?,
            roots,
        })
    }

    /// The render node of the GPU (or partition: `docs/device-plugin.md#amd-partitions`)
    /// at `pci_address`, as the kernel's tree names it.
    fn render_node(&self, pci_address: &str) -> Result<Option<PathBuf>, FactsError> {
        let gpus = sysfs::gpus(&self.roots.sysfs).map_err(|e| FactsError::Source(e.to_string()))?;
        Ok(gpus
            .iter()
            .find(|g| g.address.eq_ignore_ascii_case(pci_address))
            .map(|g| self.roots.dev.join(format!("dri/renderD{}", g.render))))
    }
}

impl FactsSource<GpuFacts> for LibraryFacts {
    fn name(&self) -> &str {
        "AMD SMI and libdrm_amdgpu"
    }

    /// AMD SMI's entry for `pci_address` with libdrm's VRAM and CUs. A GPU without an
    /// AMD SMI UUID is not registered (as in HAMi); one without a market name is
    /// registered as `amd-gpu` (HAMi's fallback); one libdrm cannot answer for is
    /// skipped with a warning, so one broken GPU does not hide the others.
    fn facts(&self, pci_address: &str) -> Result<Option<GpuFacts>, FactsError> {
        let gpus = self.smi.gpus().map_err(library_error)?;
        let Some(gpu) = gpus
            .into_iter()
            .find(|g| g.pci_address.eq_ignore_ascii_case(pci_address))
        else {
            return Ok(None);
        };
        let Some(uuid) = gpu.uuid else {
            tracing::warn!(
                pci = pci_address,
                "GPU without an AMD SMI UUID: not registered"
            );
            return Ok(None);
        };
        let Some(node) = self.render_node(pci_address)? else {
            tracing::warn!(
                pci = pci_address,
                "GPU without a render node: not registered"
            );
            return Ok(None);
        };
        let info = match self.drm.gpu_info(&node) {
            Ok(info) => info,
            Err(e) => {
                tracing::warn!(pci = pci_address, error = %e, "libdrm cannot tell the GPU's VRAM and CUs: not registered");
                return Ok(None);
            }
        };
        Ok(Some(GpuFacts {
            uuid,
            market_name: gpu.market_name.unwrap_or_else(|| FALLBACK_TYPE.into()),
            vram_mib: info.vram_bytes >> 20,
            cu_count: info.cu_active,
        }))
    }
}
