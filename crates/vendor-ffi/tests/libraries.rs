#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The bindings against fake vendor libraries built from C (`fakes/*.c`) and loaded
//! with `dlopen`, as on a node: the facts they return, an absent library, a missing
//! function and failing status codes.

use std::ffi::OsStr;

use hami_vendor_ffi::amdsmi::AmdSmi;
use hami_vendor_ffi::libdrm_amdgpu::{DrmGpuInfo, LibDrmAmdgpu};
use hami_vendor_ffi::rocm_smi::{RocmSmi, RsmiDevice};
use hami_vendor_ffi::testing::{self, FakeDcu, FakeSmiGpu};
use hami_vendor_ffi::{FfiError, LibrarySpec};

const AMD_SMI: LibrarySpec = LibrarySpec {
    name: "AMD SMI",
    flag: "--amd-smi-lib",
    env: "AMD_SMI_LIB",
};
const LIBDRM: LibrarySpec = LibrarySpec {
    name: "libdrm_amdgpu",
    flag: "--libdrm-amdgpu-lib",
    env: "LIBDRM_AMDGPU_LIB",
};
const ROCM_SMI: LibrarySpec = LibrarySpec {
    name: "ROCm SMI",
    flag: "--rocm-smi-lib",
    env: "ROCM_SMI_LIB",
};

fn gpu(pci: &str, uuid: Option<&str>, name: Option<&str>) -> FakeSmiGpu {
    FakeSmiGpu {
        pci_address: pci.into(),
        uuid: uuid.map(Into::into),
        market_name: name.map(Into::into),
    }
}

#[test]
fn amd_smi_gives_every_gpu_with_its_uuid_and_market_name() {
    let dir = tempfile::tempdir().unwrap();
    let lib = testing::fake_amd_smi(
        dir.path(),
        &[
            gpu(
                "0000:0c:00.0",
                Some("8eff74b5-0000-1000-801b-b56457addd1b"),
                Some("AMD Instinct MI300X"),
            ),
            gpu("0001:de:1f.7", None, Some("AMD Instinct MI300X VF")),
            gpu("0000:22:00.0", Some("u-3"), None),
        ],
        0,
    )
    .unwrap();
    let smi = AmdSmi::open(AMD_SMI, lib.as_os_str()).unwrap();
    let gpus = smi.gpus().unwrap();
    assert_eq!(gpus.len(), 3);
    assert_eq!(gpus[0].pci_address, "0000:0c:00.0");
    assert_eq!(
        gpus[0].uuid.as_deref(),
        Some("8eff74b5-0000-1000-801b-b56457addd1b")
    );
    assert_eq!(gpus[0].market_name.as_deref(), Some("AMD Instinct MI300X"));
    // The bit fields of amdsmi_bdf_t, domain above 0 and every field at its maximum.
    assert_eq!(gpus[1].pci_address, "0001:de:1f.7");
    assert_eq!(gpus[1].uuid, None);
    assert_eq!(
        gpus[1].market_name.as_deref(),
        Some("AMD Instinct MI300X VF")
    );
    assert_eq!(gpus[2].market_name, None);
    // Asking again works (handles are per call).
    assert_eq!(smi.gpus().unwrap(), gpus);
}

#[test]
fn amd_smi_init_failure_names_the_status() {
    let dir = tempfile::tempdir().unwrap();
    let lib = testing::fake_amd_smi(dir.path(), &[], 34).unwrap();
    let err = AmdSmi::open(AMD_SMI, lib.as_os_str()).unwrap_err();
    assert!(matches!(err, FfiError::Status { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "AMD SMI: amdsmi_init failed: AMDSMI_STATUS_DRIVER_NOT_LOADED (34)"
    );
}

#[test]
fn an_absent_library_names_the_file_the_flag_and_the_env_var() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("libamd_smi.so");
    let err = AmdSmi::open(AMD_SMI, missing.as_os_str()).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, FfiError::Load { .. }), "{err:?}");
    assert!(text.starts_with("cannot load AMD SMI from "), "{text}");
    assert!(text.contains(&missing.display().to_string()), "{text}");
    assert!(text.contains("--amd-smi-lib (AMD_SMI_LIB)"), "{text}");
    // A bare file name goes to the loader's search path, and is named as given.
    let err = RocmSmi::open(ROCM_SMI, OsStr::new("librocm_smi64-absent.so")).unwrap_err();
    assert!(
        err.to_string().contains("librocm_smi64-absent.so")
            && err.to_string().contains("--rocm-smi-lib (ROCM_SMI_LIB)"),
        "{err}"
    );
    // A file that is not a library is refused the same way.
    let garbage = dir.path().join("libdrm_amdgpu.so.1");
    std::fs::write(&garbage, "not an ELF file").unwrap();
    let err = LibDrmAmdgpu::open(LIBDRM, garbage.as_os_str()).unwrap_err();
    assert!(matches!(err, FfiError::Load { .. }), "{err:?}");
}

#[test]
fn a_library_without_a_function_used_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let lib = testing::fake_rocm_smi(dir.path(), &[], 0, true).unwrap();
    let err = RocmSmi::open(ROCM_SMI, lib.as_os_str()).unwrap_err();
    assert!(
        matches!(
            err,
            FfiError::Symbol {
                symbol: "rsmi_dev_serial_number_get",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("has no function rsmi_dev_serial_number_get"),
        "{err}"
    );
    // The AMD SMI library is not libdrm: the first missing function is named.
    let smi = testing::fake_amd_smi(dir.path(), &[], 0).unwrap();
    let err = LibDrmAmdgpu::open(LIBDRM, smi.as_os_str()).unwrap_err();
    assert!(
        err.to_string().contains("amdgpu_device_initialize"),
        "{err}"
    );
}

#[test]
fn libdrm_gives_vram_and_active_cus_of_a_render_node() {
    let dir = tempfile::tempdir().unwrap();
    let lib = testing::fake_libdrm_amdgpu(dir.path()).unwrap();
    let drm = LibDrmAmdgpu::open(LIBDRM, lib.as_os_str()).unwrap();
    let node = dir.path().join("renderD128");
    std::fs::write(&node, testing::drm_node(196_288, 304, None)).unwrap();
    assert_eq!(
        drm.gpu_info(&node).unwrap(),
        DrmGpuInfo {
            vram_bytes: 196_288 << 20,
            cu_active: 304
        }
    );
    // amdgpu_device_initialize failing with -EACCES.
    std::fs::write(&node, testing::drm_node(0, 0, Some(13))).unwrap();
    let err = drm.gpu_info(&node).unwrap_err().to_string();
    assert!(
        err.starts_with("libdrm_amdgpu: amdgpu_device_initialize failed: "),
        "{err}"
    );
    assert!(err.ends_with("(-13)"), "{err}");
    // A node that is not there.
    let err = drm.gpu_info(&dir.path().join("renderD200")).unwrap_err();
    assert!(matches!(err, FfiError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains("renderD200"), "{err}");
}

#[test]
fn rocm_smi_gives_every_dcu_and_tolerates_missing_fields() {
    let dir = tempfile::tempdir().unwrap();
    let lib = testing::fake_rocm_smi(
        dir.path(),
        &[
            FakeDcu {
                pci_address: "0000:3d:00.0".into(),
                device_id: 0x6210,
                serial: Some("SN0001".into()),
                vram_bytes: 65_520 << 20,
            },
            FakeDcu {
                pci_address: "0000:9f:00.0".into(),
                device_id: 0x54b7,
                serial: None,
                vram_bytes: 0,
            },
        ],
        0,
        false,
    )
    .unwrap();
    let smi = RocmSmi::open(ROCM_SMI, lib.as_os_str()).unwrap();
    assert_eq!(
        smi.devices().unwrap(),
        vec![
            RsmiDevice {
                index: 0,
                pci_address: "0000:3d:00.0".into(),
                device_id: Some(0x6210),
                serial: Some("SN0001".into()),
                vram_bytes: 65_520 << 20,
            },
            RsmiDevice {
                index: 1,
                pci_address: "0000:9f:00.0".into(),
                device_id: Some(0x54b7),
                serial: None,
                vram_bytes: 0,
            },
        ]
    );
}

#[test]
fn rocm_smi_init_failure_names_the_status() {
    let dir = tempfile::tempdir().unwrap();
    let lib = testing::fake_rocm_smi(dir.path(), &[], 8, false).unwrap();
    let err = RocmSmi::open(ROCM_SMI, lib.as_os_str()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "ROCm SMI: rsmi_init failed: RSMI_STATUS_INIT_ERROR (8)"
    );
}

#[test]
fn bdf_ids_decode_to_sysfs_pci_addresses() {
    assert_eq!(
        hami_vendor_ffi::rocm_smi::decode_bdfid(
            (0x1 << 32) | (0x3 << 28) | (0x3d << 8) | (2 << 3) | 1
        ),
        "0001:3d:02.1"
    );
    assert_eq!(hami_vendor_ffi::amdsmi::decode_bdf(0x1900), "0000:19:00.0");
}
