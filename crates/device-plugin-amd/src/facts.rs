//! What the kernel's files do not say about an AMD GPU (`docs/vendors.md#amd-device-plugin`):
//! AMD SMI's UUID and market name (by PCI address), libdrm's VRAM size and active CU
//! count (by DRM card). Behind a trait so tests and the demo read them from a file.

use serde::Deserialize;

/// The library facts of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuFacts {
    /// AMD SMI's device UUID: the ID registered for the scheduler.
    pub uuid: String,
    /// AMD SMI's market name (`AMD Instinct MI300X`), registered as the type.
    pub market_name: String,
    /// VRAM in MiB (libdrm `AMDGPU_INFO_MEMORY.vram_size / 2^20`).
    pub vram_mib: u64,
    /// Active compute units (libdrm `cu_active_number`).
    pub cu_count: u32,
}

pub use hami_device_plugin::facts_file::{FactsError, FactsSource};

/// Facts read from a JSON file `{"<pci bdf>": {"uuid", "market_name", "vram_mib",
/// "cu_count"}}`, re-read on every discovery.
pub type FileFacts = hami_device_plugin::facts_file::FactsFile;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_facts_by_pci_address_and_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("facts.json");
        std::fs::write(
            &path,
            r#"{"0000:19:00.0":{"uuid":"u1","market_name":"AMD Instinct MI300X","vram_mib":196288,"cu_count":304}}"#,
        )
        .unwrap();
        let f = FileFacts::new(&path);
        assert_eq!(
            FactsSource::<GpuFacts>::facts(&f, "0000:19:00.0")
                .unwrap()
                .unwrap()
                .cu_count,
            304
        );
        assert_eq!(
            FactsSource::<GpuFacts>::facts(&f, "0000:1a:00.0").unwrap(),
            None
        );
        std::fs::write(&path, "{").unwrap();
        assert!(
            FactsSource::<GpuFacts>::facts(&f, "0000:19:00.0")
                .unwrap_err()
                .to_string()
                .contains("malformed")
        );
        let missing = FileFacts::new(dir.path().join("none.json"));
        assert!(
            FactsSource::<GpuFacts>::facts(&missing, "x")
                .unwrap_err()
                .to_string()
                .contains("none.json")
        );
    }
}
