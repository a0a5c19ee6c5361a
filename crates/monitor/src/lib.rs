//! hami-vgpu-monitor: the node agent beside the NVIDIA device plugin, compatible with
//! HAMi's vGPUmonitor (`docs/monitor.md`).
//!
//! - [`scan`]: reads every container's HAMi-core cache file ([`cache_file`], decoded by
//!   `hami_core::shared_region`) and removes directories of pods gone from the node;
//! - [`pods`]: the watch of this node's pods that names the directories;
//! - [`metrics`]: HAMi's series from the last scan ([`snapshot`]);
//! - [`feedback`]: HAMi's priority feedback loop, the only write into the files;
//! - [`run`]: all of it supervised, behind `/metrics`, `/livez` and `/readyz`.

pub mod cache_file;
pub mod cli;
pub mod feedback;
pub mod metrics;
pub mod pods;
pub mod run;
pub mod scan;
pub mod snapshot;
pub mod warnings;
