//! libdrm's amdgpu library (`amdgpu.h`, `libdrm_amdgpu.so.1`): VRAM size and active
//! compute units of one GPU, asked through its DRM render node as HAMi's AMD plugin
//! does (`docs/device-plugin.md#vendor-libraries`).
//!
//! Calls: `amdgpu_device_initialize(fd)`, `amdgpu_query_info(AMDGPU_INFO_DEV_INFO)` for
//! `drm_amdgpu_info_device.cu_active_number`, `amdgpu_query_info(AMDGPU_INFO_MEMORY)`
//! for `drm_amdgpu_memory_info.vram.total_heap_size`, `amdgpu_device_deinitialize`.
//! They return 0 or a negative errno. The structs are the kernel's UAPI
//! (`amdgpu_drm.h`), which only ever grows at the end; the kernel copies
//! `min(size, its size)` bytes, so a prefix of `drm_amdgpu_info_device` is enough.

use std::ffi::{OsStr, c_int, c_uint, c_void};
use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::loader::Loaded;
use crate::{FfiError, LibrarySpec};

/// The library's usual file name.
pub const LIBRARY_FILE: &str = "libdrm_amdgpu.so.1";

/// `AMDGPU_INFO_DEV_INFO`.
pub const INFO_DEV_INFO: c_uint = 0x16;
/// `AMDGPU_INFO_MEMORY`.
pub const INFO_MEMORY: c_uint = 0x19;

type DeviceHandle = *mut c_void;
type InitializeFn = unsafe extern "C" fn(c_int, *mut u32, *mut u32, *mut DeviceHandle) -> c_int;
type DeinitializeFn = unsafe extern "C" fn(DeviceHandle) -> c_int;
type QueryInfoFn = unsafe extern "C" fn(DeviceHandle, c_uint, c_uint, *mut c_void) -> c_int;

/// The head of `struct drm_amdgpu_info_device`, up to the CU fields.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct InfoDeviceHead {
    pub device_id: u32,
    pub chip_rev: u32,
    pub external_rev: u32,
    pub pci_rev: u32,
    pub family: u32,
    pub num_shader_engines: u32,
    pub num_shader_arrays_per_engine: u32,
    pub gpu_counter_freq: u32,
    pub max_engine_clock: u64,
    pub max_memory_clock: u64,
    pub cu_active_number: u32,
    pub cu_ao_mask: u32,
}

/// `struct drm_amdgpu_heap_info`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct HeapInfo {
    pub total_heap_size: u64,
    pub usable_heap_size: u64,
    pub heap_usage: u64,
    pub max_allocation: u64,
}

/// `struct drm_amdgpu_memory_info`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryInfo {
    pub vram: HeapInfo,
    pub cpu_accessible_vram: HeapInfo,
    pub gtt: HeapInfo,
}

/// The UAPI structs `amdgpu_query_info` fills here: `#[repr(C)]`, integers only, so
/// any bytes the kernel writes are a valid value.
trait UapiStruct: Default {}
impl UapiStruct for InfoDeviceHead {}
impl UapiStruct for MemoryInfo {}

/// What libdrm says about one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrmGpuInfo {
    /// `drm_amdgpu_memory_info.vram.total_heap_size`, bytes.
    pub vram_bytes: u64,
    /// `drm_amdgpu_info_device.cu_active_number`.
    pub cu_active: u32,
}

#[derive(Debug, Clone, Copy)]
struct Functions {
    initialize: InitializeFn,
    deinitialize: DeinitializeFn,
    query_info: QueryInfoFn,
}

/// libdrm_amdgpu, loaded.
#[derive(Debug)]
pub struct LibDrmAmdgpu {
    functions: Functions,
    library: Loaded,
}

/// A device handle, deinitialised on drop.
#[derive(Debug)]
struct Device<'a> {
    lib: &'a LibDrmAmdgpu,
    handle: DeviceHandle,
}

impl Drop for Device<'_> {
    fn drop(&mut self) {
        // SAFETY: `handle` came from amdgpu_device_initialize and is released once.
        let rc = unsafe { (self.lib.functions.deinitialize)(self.handle) };
        if rc != 0 {
            tracing::warn!(rc, "amdgpu_device_deinitialize failed");
        }
    }
}

impl LibDrmAmdgpu {
    /// Loads the library at `path` and checks it has every function used.
    pub fn open(spec: LibrarySpec, path: &OsStr) -> Result<LibDrmAmdgpu, FfiError> {
        let library = Loaded::open(spec, path)?;
        // SAFETY: each type is the C prototype in amdgpu.h (amdgpu_device_handle is a
        // pointer); the pointers live next to `library`.
        let functions = unsafe {
            Functions {
                initialize: library.function("amdgpu_device_initialize")?,
                deinitialize: library.function("amdgpu_device_deinitialize")?,
                query_info: library.function("amdgpu_query_info")?,
            }
        };
        Ok(LibDrmAmdgpu { functions, library })
    }

    fn error(&self, call: &'static str, rc: c_int) -> FfiError {
        let errno = std::io::Error::from_raw_os_error(rc.saturating_neg());
        FfiError::Status {
            library: self.library.spec().name,
            call,
            status: format!("{errno} ({rc})"),
        }
    }

    /// `amdgpu_query_info(info_id)` into a `T`.
    fn query<T: UapiStruct>(
        &self,
        device: &Device<'_>,
        info_id: c_uint,
        call: &'static str,
    ) -> Result<T, FfiError> {
        let mut value = T::default();
        // SAFETY: `T` is a plain C struct of the kernel's UAPI (see UapiStruct) and the
        // size passed is its size; the kernel (through libdrm) writes at most that many
        // bytes.
        let rc = unsafe {
            (self.functions.query_info)(
                device.handle,
                info_id,
                size_of::<T>() as c_uint,
                (&raw mut value).cast(),
            )
        };
        if rc != 0 {
            return Err(self.error(call, rc));
        }
        Ok(value)
    }

    /// VRAM and active CUs of the GPU behind the DRM node `node` (its render node).
    pub fn gpu_info(&self, node: &Path) -> Result<DrmGpuInfo, FfiError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(node)
            .map_err(|source| FfiError::Open {
                library: self.library.spec().name,
                path: node.to_path_buf(),
                source,
            })?;
        let (mut major, mut minor) = (0u32, 0u32);
        let mut handle: DeviceHandle = std::ptr::null_mut();
        // SAFETY: the fd is open for the whole call (libdrm keeps its own duplicate);
        // the out-pointers are valid locals.
        let rc = unsafe {
            (self.functions.initialize)(file.as_raw_fd(), &mut major, &mut minor, &mut handle)
        };
        if rc != 0 {
            return Err(self.error("amdgpu_device_initialize", rc));
        }
        if handle.is_null() {
            return Err(FfiError::Unexpected {
                library: self.library.spec().name,
                call: "amdgpu_device_initialize",
                what: "no device handle".into(),
            });
        }
        let device = Device { lib: self, handle };
        let dev: InfoDeviceHead = self.query(
            &device,
            INFO_DEV_INFO,
            "amdgpu_query_info(AMDGPU_INFO_DEV_INFO)",
        )?;
        let mem: MemoryInfo = self.query(
            &device,
            INFO_MEMORY,
            "amdgpu_query_info(AMDGPU_INFO_MEMORY)",
        )?;
        drop(device);
        Ok(DrmGpuInfo {
            vram_bytes: mem.vram.total_heap_size,
            cu_active: dev.cu_active_number,
        })
    }
}
