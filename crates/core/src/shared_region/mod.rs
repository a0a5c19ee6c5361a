//! HAMi-core's shared region: the cache file `libvgpu.so` keeps per container (path in
//! `CUDA_DEVICE_MEMORY_SHARED_CACHE`), where every CUDA process of the container records
//! its memory and utilisation, and the node's monitor reads them and writes back the
//! priority feedback. Layout, version rules and field meanings: `docs/monitor.md`.
//!
//! - [`layout`]: byte offsets of the V0 and V1 layouts.
//! - [`RegionReader`]: reads a region from any [`RegionSource`] (a file, a byte slice)
//!   into a reused [`Usage`], validating every count and index and never returning a
//!   slot that was being written while it was read (the 1.2 `seqlock`).
//! - [`RegionImage`]: writes regions, for tests, benchmarks and the fake workload
//!   generator.

pub mod layout;
mod read;
mod write;

pub use layout::{Family, Layout, MAGIC, MAX_DEVICES, MAX_PROCS, V0, V1};
pub use read::{
    DeviceId, DeviceUsage, RegionError, RegionReader, RegionSource, Usage, Uuid40, Version, detect,
};
pub use write::{ImageDevice, ImageMemory, ImageProc, RegionImage, encode_slot};
