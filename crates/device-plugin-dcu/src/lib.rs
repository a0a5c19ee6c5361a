//! hami-device-plugin-dcu: Hygon DCUs on the shared device plugin framework
//! (`docs/device-plugin.md`, `docs/vendors.md`).
//!
//! - [`sysfs`]: DCUs from the DRM nodes under `--dev-root` whose sysfs vendor is Hygon's;
//! - [`facts`]: what only ROCm SMI knows (SMI index, serial, memory, CUs, model);
//! - [`lib_facts`]: those facts from ROCm SMI, loaded at run time, with [`models`];
//! - [`backend`]: the framework's [`hami_device_plugin::DeviceBackend`];
//! - [`hook`]: the register string and the Allocate answer;
//! - [`vdev`]: virtual DCUs (CU masks, vdev and pipe ids, the `vdev*.conf` files).

pub mod backend;
pub mod cli;
pub mod facts;
pub mod fake_tree;
pub mod hook;
pub mod lib_facts;
pub mod models;
pub mod run;
pub mod sysfs;
pub mod vdev;

pub use backend::{Catalog, Dcu, DcuBackend, DcuTree, Roots};
pub use facts::{DcuFacts, FactsSource, FileFacts};
pub use hook::{DcuHook, HostPaths};

/// The resource DCUs are advertised as.
pub const RESOURCE: &str = "hygon.com/dcunum";
/// Replicas per DCU (the Go plugin's `Count`).
pub const DEFAULT_SPLIT: u32 = 4;
/// PCI vendor ID of Hygon's DCUs, as `/sys/class/drm/*/device/vendor` shows it.
pub const HYGON_VENDOR_ID: &str = "0x1d94";
