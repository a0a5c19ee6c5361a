//! AMD SMI (`amdsmi.h`, `libamd_smi.so`): the UUID and market name of each AMD GPU, by
//! PCI address, as HAMi's AMD plugin reads them (`docs/device-plugin.md#vendor-libraries`).
//!
//! Calls: `amdsmi_init(AMDSMI_INIT_AMD_GPUS)`, `amdsmi_get_socket_handles`,
//! `amdsmi_get_processor_handles`, `amdsmi_get_gpu_device_bdf`,
//! `amdsmi_get_gpu_device_uuid`, `amdsmi_get_gpu_asic_info`, and `amdsmi_shut_down` on
//! drop. Every call returns an `amdsmi_status_t` (0 = success).

use std::ffi::{OsStr, c_char, c_uint, c_void};
use std::ptr;
use std::sync::Mutex;

use crate::cstr::from_c_buf;
use crate::loader::Loaded;
use crate::{FfiError, LibrarySpec, pci_address};

/// The library's usual file name (ROCm installs it in `/opt/rocm/lib`).
pub const LIBRARY_FILE: &str = "libamd_smi.so";

/// `AMDSMI_INIT_AMD_GPUS`: initialise the GPU part only.
const INIT_AMD_GPUS: u64 = 1 << 1;

type Handle = *mut c_void;
type InitFn = unsafe extern "C" fn(u64) -> u32;
type ShutDownFn = unsafe extern "C" fn() -> u32;
type SocketHandlesFn = unsafe extern "C" fn(*mut u32, *mut Handle) -> u32;
type ProcessorHandlesFn = unsafe extern "C" fn(Handle, *mut u32, *mut Handle) -> u32;
/// `amdsmi_bdf_t` is a union of bit fields with a `uint64_t as_uint`: passed as a u64.
type BdfFn = unsafe extern "C" fn(Handle, *mut u64) -> u32;
type UuidFn = unsafe extern "C" fn(Handle, *mut c_uint, *mut c_char) -> u32;
type AsicInfoFn = unsafe extern "C" fn(Handle, *mut AsicInfo) -> u32;

/// Room for `amdsmi_asic_info_t`. Its layout changed between AMD SMI releases
/// (`market_name` grew from 64 to 256 bytes, fields were added), but `market_name` has
/// always been its first field; so the library writes into a buffer larger than any
/// release's struct, and only the name at offset 0 is read. `tests/abi.rs` compares
/// this with the C struct of the newest and the oldest layout.
#[repr(C, align(8))]
#[derive(Debug)]
pub struct AsicInfo {
    pub market_name: [u8; MARKET_NAME_MAX],
    pub rest: [u8; ASIC_INFO_SIZE - MARKET_NAME_MAX],
}

/// `AMDSMI_256_LENGTH`: the longest `market_name` of any release.
pub const MARKET_NAME_MAX: usize = 256;
/// The size reserved for `amdsmi_asic_info_t` (the newest is under 600 bytes).
pub const ASIC_INFO_SIZE: usize = 2048;
/// The UUID buffer: `AMDSMI_GPU_UUID_SIZE` is 38; more room costs nothing.
const UUID_BUFFER: usize = 128;

/// One GPU as AMD SMI reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmiGpu {
    /// `dddd:bb:dd.f`, lower-case hex, from `amdsmi_get_gpu_device_bdf`.
    pub pci_address: String,
    /// `amdsmi_get_gpu_device_uuid`; `None` when the call failed (logged).
    pub uuid: Option<String>,
    /// `amdsmi_get_gpu_asic_info().market_name`; `None` when the call failed or the
    /// name is empty (logged).
    pub market_name: Option<String>,
}

/// The name of an `amdsmi_status_t`.
pub fn status_name(code: u32) -> &'static str {
    match code {
        0 => "AMDSMI_STATUS_SUCCESS",
        1 => "AMDSMI_STATUS_INVAL",
        2 => "AMDSMI_STATUS_NOT_SUPPORTED",
        3 => "AMDSMI_STATUS_NOT_YET_IMPLEMENTED",
        4 => "AMDSMI_STATUS_FAIL_LOAD_MODULE",
        5 => "AMDSMI_STATUS_FAIL_LOAD_SYMBOL",
        6 => "AMDSMI_STATUS_DRM_ERROR",
        7 => "AMDSMI_STATUS_API_FAILED",
        8 => "AMDSMI_STATUS_TIMEOUT",
        9 => "AMDSMI_STATUS_RETRY",
        10 => "AMDSMI_STATUS_NO_PERM",
        11 => "AMDSMI_STATUS_INTERRUPT",
        12 => "AMDSMI_STATUS_IO",
        13 => "AMDSMI_STATUS_ADDRESS_FAULT",
        14 => "AMDSMI_STATUS_FILE_ERROR",
        15 => "AMDSMI_STATUS_OUT_OF_RESOURCES",
        16 => "AMDSMI_STATUS_INTERNAL_EXCEPTION",
        17 => "AMDSMI_STATUS_INPUT_OUT_OF_BOUNDS",
        18 => "AMDSMI_STATUS_INIT_ERROR",
        19 => "AMDSMI_STATUS_REFCOUNT_OVERFLOW",
        30 => "AMDSMI_STATUS_BUSY",
        31 => "AMDSMI_STATUS_NOT_FOUND",
        32 => "AMDSMI_STATUS_NOT_INIT",
        33 => "AMDSMI_STATUS_NO_SLOT",
        34 => "AMDSMI_STATUS_DRIVER_NOT_LOADED",
        40 => "AMDSMI_STATUS_NO_DATA",
        41 => "AMDSMI_STATUS_INSUFFICIENT_SIZE",
        42 => "AMDSMI_STATUS_UNEXPECTED_SIZE",
        43 => "AMDSMI_STATUS_UNEXPECTED_DATA",
        52 => "AMDSMI_STATUS_FILE_NOT_FOUND",
        53 => "AMDSMI_STATUS_ARG_PTR_NULL",
        54 => "AMDSMI_STATUS_AMDGPU_RESTART_ERR",
        55 => "AMDSMI_STATUS_SETTING_UNAVAILABLE",
        56 => "AMDSMI_STATUS_CORRUPTED_EEPROM",
        0xFFFF_FFFE => "AMDSMI_STATUS_MAP_ERROR",
        0xFFFF_FFFF => "AMDSMI_STATUS_UNKNOWN_ERROR",
        _ => "unknown AMD SMI status",
    }
}

/// The PCI address in an `amdsmi_bdf_t`: function bits 0-2, device 3-7, bus 8-15,
/// domain 16-63 (the union's bit fields, low bits first as GCC and Clang lay them out
/// on x86-64 and arm64; `tests/abi.rs` checks it against C).
pub fn decode_bdf(as_uint: u64) -> String {
    pci_address(
        as_uint >> 16,
        (as_uint >> 8) & 0xff,
        (as_uint >> 3) & 0x1f,
        as_uint & 0x7,
    )
}

#[derive(Debug, Clone, Copy)]
struct Functions {
    shut_down: ShutDownFn,
    socket_handles: SocketHandlesFn,
    processor_handles: ProcessorHandlesFn,
    bdf: BdfFn,
    uuid: UuidFn,
    asic_info: AsicInfoFn,
}

/// AMD SMI, loaded and initialised; shut down when dropped.
#[derive(Debug)]
pub struct AmdSmi {
    functions: Functions,
    /// Serialises calls: the handles the library returns are only used within one call
    /// of [`AmdSmi::gpus`].
    calls: Mutex<()>,
    library: Loaded,
}

impl AmdSmi {
    /// Loads the library at `path`, checks it has every function used, and runs
    /// `amdsmi_init(AMDSMI_INIT_AMD_GPUS)`.
    pub fn open(spec: LibrarySpec, path: &OsStr) -> Result<AmdSmi, FfiError> {
        let library = Loaded::open(spec, path)?;
        // SAFETY: each type below is the C prototype of the named function in
        // amdsmi.h (status as uint32_t, handles as void*, amdsmi_bdf_t* as uint64_t*);
        // the pointers live in `functions`, dropped with `library`.
        let (init, functions) = unsafe {
            (
                library.function::<InitFn>("amdsmi_init")?,
                Functions {
                    shut_down: library.function("amdsmi_shut_down")?,
                    socket_handles: library.function("amdsmi_get_socket_handles")?,
                    processor_handles: library.function("amdsmi_get_processor_handles")?,
                    bdf: library.function("amdsmi_get_gpu_device_bdf")?,
                    uuid: library.function("amdsmi_get_gpu_device_uuid")?,
                    asic_info: library.function("amdsmi_get_gpu_asic_info")?,
                },
            )
        };
        // SAFETY: amdsmi_init takes the flags by value and has no other input.
        let status = unsafe { init(INIT_AMD_GPUS) };
        check(spec, "amdsmi_init", status)?;
        Ok(AmdSmi {
            functions,
            calls: Mutex::new(()),
            library,
        })
    }

    fn spec(&self) -> LibrarySpec {
        self.library.spec()
    }

    /// Every GPU of every socket. A GPU whose PCI address cannot be read is skipped with
    /// a warning (it cannot be matched with the kernel's view).
    pub fn gpus(&self) -> Result<Vec<SmiGpu>, FfiError> {
        let _serial = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let f = self.functions;
        let spec = self.spec();
        let sockets = handles(spec, "amdsmi_get_socket_handles", |count, out| {
            // SAFETY: `count` points to a u32 and `out` is null or has room for
            // `*count` handles, as amdsmi_get_socket_handles requires.
            unsafe { (f.socket_handles)(count, out) }
        })?;
        let mut gpus = Vec::new();
        for socket in sockets {
            let processors = handles(spec, "amdsmi_get_processor_handles", |count, out| {
                // SAFETY: as above; `socket` is a handle the library just returned.
                unsafe { (f.processor_handles)(socket, count, out) }
            })?;
            for p in processors {
                let mut bdf = 0u64;
                // SAFETY: `p` is a processor handle of this call; `bdf` is the 8-byte
                // union the function writes.
                let status = unsafe { (f.bdf)(p, &mut bdf) };
                if let Err(e) = check(spec, "amdsmi_get_gpu_device_bdf", status) {
                    tracing::warn!(error = %e, "AMD SMI GPU without a PCI address skipped");
                    continue;
                }
                let pci = decode_bdf(bdf);
                gpus.push(SmiGpu {
                    uuid: self.uuid(p).map_err(|e| tracing::warn!(pci = %pci, error = %e, "AMD SMI gives no UUID")).ok(),
                    market_name: self
                        .market_name(p)
                        .map_err(|e| tracing::warn!(pci = %pci, error = %e, "AMD SMI gives no market name"))
                        .ok()
                        .filter(|n| !n.is_empty()),
                    pci_address: pci,
                });
            }
        }
        Ok(gpus)
    }

    fn uuid(&self, p: Handle) -> Result<String, FfiError> {
        let mut buf = [0u8; UUID_BUFFER];
        let mut len = UUID_BUFFER as c_uint;
        // SAFETY: `buf` has `len` bytes; the function writes at most `len` of them.
        let status = unsafe { (self.functions.uuid)(p, &mut len, buf.as_mut_ptr().cast()) };
        check(self.spec(), "amdsmi_get_gpu_device_uuid", status)?;
        Ok(from_c_buf(&buf))
    }

    fn market_name(&self, p: Handle) -> Result<String, FfiError> {
        let mut info = AsicInfo {
            market_name: [0; MARKET_NAME_MAX],
            rest: [0; ASIC_INFO_SIZE - MARKET_NAME_MAX],
        };
        // SAFETY: `info` is larger than any release's amdsmi_asic_info_t and as
        // aligned (see AsicInfo).
        let status = unsafe { (self.functions.asic_info)(p, &mut info) };
        check(self.spec(), "amdsmi_get_gpu_asic_info", status)?;
        Ok(from_c_buf(&info.market_name))
    }
}

impl Drop for AmdSmi {
    fn drop(&mut self) {
        // SAFETY: amdsmi_shut_down takes nothing; the library is still loaded.
        let status = unsafe { (self.functions.shut_down)() };
        if let Err(e) = check(self.spec(), "amdsmi_shut_down", status) {
            tracing::warn!(error = %e, "AMD SMI did not shut down cleanly");
        }
    }
}

fn check(spec: LibrarySpec, call: &'static str, status: u32) -> Result<(), FfiError> {
    crate::error::check(spec, call, status, status_name)
}

/// The two-call pattern of AMD SMI's handle lists: ask the count with a null buffer,
/// then fill a buffer of that size (trimmed to what the second call reports).
fn handles(
    spec: LibrarySpec,
    call: &'static str,
    mut get: impl FnMut(*mut u32, *mut Handle) -> u32,
) -> Result<Vec<Handle>, FfiError> {
    let mut count = 0u32;
    check(spec, call, get(&mut count, ptr::null_mut()))?;
    let mut out = vec![ptr::null_mut(); count as usize];
    check(spec, call, get(&mut count, out.as_mut_ptr()))?;
    out.truncate(count as usize);
    Ok(out)
}
