//! hami-vendor-ffi: the vendor libraries hami-rs's device plugins read what the kernel's
//! files do not say from, loaded at run time with `dlopen` (`docs/device-plugin.md#vendor-libraries`):
//!
//! - [`amdsmi`]: AMD SMI (`libamd_smi.so`): each AMD GPU's PCI address, UUID and market name;
//! - [`libdrm_amdgpu`]: libdrm's amdgpu (`libdrm_amdgpu.so.1`): VRAM size and active CUs
//!   of a DRM render node;
//! - [`rocm_smi`]: ROCm SMI (`librocm_smi64.so`, Hygon's in `/opt/hyhal`): each DCU's
//!   index, PCI address, device ID, serial number and VRAM.
//!
//! This is the one crate of the workspace that may contain `unsafe` code, and only in
//! those three modules and the loader; everything they export is safe and returns typed
//! facts or an [`FfiError`] naming the library, the symbol or the status code.
//! With the `test-support` feature, [`testing`] builds fake libraries from C so tests
//! go through the same `dlopen` path without the hardware.

mod cstr;
pub(crate) mod error;
#[allow(unsafe_code)]
mod loader;

#[allow(unsafe_code)]
pub mod amdsmi;
#[allow(unsafe_code)]
pub mod libdrm_amdgpu;
#[allow(unsafe_code)]
pub mod rocm_smi;

#[cfg(feature = "test-support")]
pub mod testing;

pub use error::{FfiError, LibrarySpec};

/// A PCI address as sysfs names it (`0000:19:00.0`, lower-case hex) from its parts.
pub fn pci_address(domain: u64, bus: u64, device: u64, function: u64) -> String {
    format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}")
}
