//! ROCm SMI (`rocm_smi.h`, `librocm_smi64.so`; Hygon ships its own in `/opt/hyhal/lib`):
//! index, PCI address, device ID, serial number and VRAM of each DCU, as HAMi's DCU
//! plugin reads them through dcu-dcgm (`docs/device-plugin.md#vendor-libraries`).
//!
//! Calls: `rsmi_init(0)`, `rsmi_num_monitor_devices`, `rsmi_dev_pci_id_get`,
//! `rsmi_dev_id_get`, `rsmi_dev_serial_number_get`,
//! `rsmi_dev_memory_total_get(RSMI_MEM_TYPE_VRAM)`, and `rsmi_shut_down` on drop. Every
//! call returns an `rsmi_status_t` (0 = success).

use std::ffi::{OsStr, c_char};
use std::sync::Mutex;

use crate::cstr::from_c_buf;
use crate::loader::Loaded;
use crate::{FfiError, LibrarySpec, pci_address};

/// The library's usual file name.
pub const LIBRARY_FILE: &str = "librocm_smi64.so";

/// `RSMI_MEM_TYPE_VRAM`.
const MEM_TYPE_VRAM: u32 = 0;
/// Room for a serial number (ROCm SMI's own tools use 256 bytes at most).
const SERIAL_BUFFER: usize = 256;

type InitFn = unsafe extern "C" fn(u64) -> u32;
type ShutDownFn = unsafe extern "C" fn() -> u32;
type NumDevicesFn = unsafe extern "C" fn(*mut u32) -> u32;
type PciIdFn = unsafe extern "C" fn(u32, *mut u64) -> u32;
type DevIdFn = unsafe extern "C" fn(u32, *mut u16) -> u32;
type SerialFn = unsafe extern "C" fn(u32, *mut c_char, u32) -> u32;
/// `rsmi_memory_type_t` is a C enum: an int-sized value.
type MemoryTotalFn = unsafe extern "C" fn(u32, u32, *mut u64) -> u32;

/// One device as ROCm SMI reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RsmiDevice {
    /// ROCm SMI's device index (`dv_ind`, HAMi's `DvInd`).
    pub index: u32,
    /// `dddd:bb:dd.f`, lower-case hex, from `rsmi_dev_pci_id_get` (partition bits
    /// 28-31 dropped).
    pub pci_address: String,
    /// `rsmi_dev_id_get`, the PCI device ID (`0x6210` is a K100_AI); `None` when the
    /// call failed (logged).
    pub device_id: Option<u16>,
    /// `rsmi_dev_serial_number_get`; `None` when it failed or is empty (HAMi's `N/A`).
    pub serial: Option<String>,
    /// `rsmi_dev_memory_total_get(VRAM)`, bytes; 0 when the call failed (logged).
    pub vram_bytes: u64,
}

/// The name of an `rsmi_status_t`.
pub fn status_name(code: u32) -> &'static str {
    match code {
        0 => "RSMI_STATUS_SUCCESS",
        1 => "RSMI_STATUS_INVALID_ARGS",
        2 => "RSMI_STATUS_NOT_SUPPORTED",
        3 => "RSMI_STATUS_FILE_ERROR",
        4 => "RSMI_STATUS_PERMISSION",
        5 => "RSMI_STATUS_OUT_OF_RESOURCES",
        6 => "RSMI_STATUS_INTERNAL_EXCEPTION",
        7 => "RSMI_STATUS_INPUT_OUT_OF_BOUNDS",
        8 => "RSMI_STATUS_INIT_ERROR",
        9 => "RSMI_STATUS_NOT_YET_IMPLEMENTED",
        10 => "RSMI_STATUS_NOT_FOUND",
        11 => "RSMI_STATUS_INSUFFICIENT_SIZE",
        12 => "RSMI_STATUS_INTERRUPT",
        13 => "RSMI_STATUS_UNEXPECTED_SIZE",
        14 => "RSMI_STATUS_NO_DATA",
        15 => "RSMI_STATUS_UNEXPECTED_DATA",
        16 => "RSMI_STATUS_BUSY",
        17 => "RSMI_STATUS_REFCOUNT_OVERFLOW",
        18 => "RSMI_STATUS_SETTING_UNAVAILABLE",
        19 => "RSMI_STATUS_AMDGPU_RESTART_ERR",
        0xFFFF_FFFF => "RSMI_STATUS_UNKNOWN_ERROR",
        _ => "unknown ROCm SMI status",
    }
}

/// The PCI address in a ROCm SMI BDF ID: domain bits 32-63, bus 8-15, device 3-7,
/// function 0-2 (bits 28-31 carry a partition ID on newer releases and are dropped).
pub fn decode_bdfid(bdfid: u64) -> String {
    pci_address(
        bdfid >> 32,
        (bdfid >> 8) & 0xff,
        (bdfid >> 3) & 0x1f,
        bdfid & 0x7,
    )
}

#[derive(Debug, Clone, Copy)]
struct Functions {
    shut_down: ShutDownFn,
    num_devices: NumDevicesFn,
    pci_id: PciIdFn,
    dev_id: DevIdFn,
    serial: SerialFn,
    memory_total: MemoryTotalFn,
}

/// ROCm SMI, loaded and initialised; shut down when dropped.
#[derive(Debug)]
pub struct RocmSmi {
    functions: Functions,
    calls: Mutex<()>,
    library: Loaded,
}

impl RocmSmi {
    /// Loads the library at `path`, checks it has every function used, and runs
    /// `rsmi_init(0)`.
    pub fn open(spec: LibrarySpec, path: &OsStr) -> Result<RocmSmi, FfiError> {
        let library = Loaded::open(spec, path)?;
        // SAFETY: each type is the C prototype in rocm_smi.h (status as uint32_t,
        // rsmi_memory_type_t as a 32-bit enum); the pointers live next to `library`.
        let (init, functions) = unsafe {
            (
                library.function::<InitFn>("rsmi_init")?,
                Functions {
                    shut_down: library.function("rsmi_shut_down")?,
                    num_devices: library.function("rsmi_num_monitor_devices")?,
                    pci_id: library.function("rsmi_dev_pci_id_get")?,
                    dev_id: library.function("rsmi_dev_id_get")?,
                    serial: library.function("rsmi_dev_serial_number_get")?,
                    memory_total: library.function("rsmi_dev_memory_total_get")?,
                },
            )
        };
        // SAFETY: rsmi_init takes its flags by value.
        let status = unsafe { init(0) };
        check(spec, "rsmi_init", status)?;
        Ok(RocmSmi {
            functions,
            calls: Mutex::new(()),
            library,
        })
    }

    /// Every device ROCm SMI monitors. A device whose PCI address cannot be read is
    /// skipped with a warning; other failed fields are `None`/0 (logged).
    pub fn devices(&self) -> Result<Vec<RsmiDevice>, FfiError> {
        let _serial = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let spec = self.library.spec();
        let f = self.functions;
        let mut count = 0u32;
        // SAFETY: `count` is a valid u32 to write.
        check(spec, "rsmi_num_monitor_devices", unsafe {
            (f.num_devices)(&mut count)
        })?;
        let mut out = Vec::new();
        for index in 0..count {
            let mut bdfid = 0u64;
            // SAFETY: `index` is below the device count; `bdfid` is a valid u64.
            let status = unsafe { (f.pci_id)(index, &mut bdfid) };
            if let Err(e) = check(spec, "rsmi_dev_pci_id_get", status) {
                tracing::warn!(index, error = %e, "ROCm SMI device without a PCI address skipped");
                continue;
            }
            let pci = decode_bdfid(bdfid);
            let mut id = 0u16;
            // SAFETY: as above, `id` is a valid u16.
            let status = unsafe { (f.dev_id)(index, &mut id) };
            let device_id = check(spec, "rsmi_dev_id_get", status)
                .map_err(|e| tracing::warn!(pci = %pci, error = %e, "ROCm SMI gives no device ID"))
                .ok()
                .map(|()| id);
            let mut buf = [0u8; SERIAL_BUFFER];
            // SAFETY: `buf` has SERIAL_BUFFER bytes, the length passed.
            let status =
                unsafe { (f.serial)(index, buf.as_mut_ptr().cast(), SERIAL_BUFFER as u32) };
            let serial = check(spec, "rsmi_dev_serial_number_get", status)
                .map_err(
                    |e| tracing::warn!(pci = %pci, error = %e, "ROCm SMI gives no serial number"),
                )
                .ok()
                .map(|()| from_c_buf(&buf))
                .filter(|s| !s.is_empty());
            let mut total = 0u64;
            // SAFETY: `total` is a valid u64; VRAM is a valid rsmi_memory_type_t.
            let status = unsafe { (f.memory_total)(index, MEM_TYPE_VRAM, &mut total) };
            let vram_bytes = match check(spec, "rsmi_dev_memory_total_get", status) {
                Ok(()) => total,
                Err(e) => {
                    tracing::warn!(pci = %pci, error = %e, "ROCm SMI gives no VRAM size");
                    0
                }
            };
            out.push(RsmiDevice {
                index,
                pci_address: pci,
                device_id,
                serial,
                vram_bytes,
            });
        }
        Ok(out)
    }
}

impl Drop for RocmSmi {
    fn drop(&mut self) {
        // SAFETY: rsmi_shut_down takes nothing; the library is still loaded.
        let status = unsafe { (self.functions.shut_down)() };
        if let Err(e) = check(self.library.spec(), "rsmi_shut_down", status) {
            tracing::warn!(error = %e, "ROCm SMI did not shut down cleanly");
        }
    }
}

fn check(spec: LibrarySpec, call: &'static str, status: u32) -> Result<(), FfiError> {
    crate::error::check(spec, call, status, status_name)
}
