//! hami-device-plugin-nvidia: the NVIDIA device plugin of hami-rs.
//!
//! The vendor-neutral work (kubelet API, registration, Allocate protocol, node inventory)
//! lives in `hami-device-plugin`; this crate adds the GPU sources — [`nvml`] (the driver's
//! NVML library, with Xid/ECC health) and [`fake`] (a YAML/JSON device list for clusters
//! without GPUs) — and HAMi-compatible settings ([`settings`]: `device-config.yaml` plus the
//! per-node [`node_config`]). [`activity`] reports what each GPU is doing, for the vGPU
//! monitor, and [`workload`] writes HAMi-core shared regions for fake GPUs.

pub mod activity;
pub mod backends;
pub mod cli;
pub mod discover;
pub mod fake;
pub mod health;
pub mod node_config;
pub mod nvml;
pub mod run;
pub mod settings;
pub mod workload;
