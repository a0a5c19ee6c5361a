//! hami-device-plugin-amd: AMD Instinct GPUs on the shared device plugin framework
//! (`docs/device-plugin.md`, `docs/vendors.md#amd-device-plugin`).
//!
//! - [`sysfs`]: GPUs from KFD topology and amdgpu's PCI devices under `--sysfs-root`;
//! - [`facts`]: what only the vendor libraries know (UUID, market name, VRAM, CUs);
//! - [`lib_facts`]: those facts from AMD SMI and libdrm, loaded at run time;
//! - [`backend`]: the framework's [`hami_device_plugin::DeviceBackend`];
//! - [`hook`]: the register entries and the Allocate answer;
//! - [`cu`]: compute-unit bookkeeping for `HSA_CU_MASK`.

pub mod backend;
pub mod cli;
pub mod cu;
pub mod facts;
pub mod fake_tree;
pub mod hook;
pub mod lib_facts;
pub mod run;
pub mod sysfs;

pub use backend::{AmdBackend, AmdGpu, AmdTree, Catalog, Roots};
pub use facts::{FactsSource, FileFacts, GpuFacts};
pub use hook::AmdHook;

/// The resource AMD GPUs are advertised as.
pub const RESOURCE: &str = "amd.com/gpu";
/// Replicas per GPU (the Go plugin's `defaultSplitCount`).
pub const DEFAULT_SPLIT: u32 = 10;
