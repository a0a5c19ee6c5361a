//! `discover`: what this node would publish, without Kubernetes. Meant for checking a GPU
//! machine (`hami-device-plugin-nvidia discover`) and the fake device file.

use std::path::Path;
use std::time::Duration;

use hami_core::codec::encode_node_register_json;
use hami_device_plugin::Inventory;
use serde::Serialize;

use crate::backends::Selected;
use crate::cli::DiscoverArgs;
use crate::run::RunError;
use crate::settings;

/// Only used to complete the configuration; discovery serves nothing.
const DEFAULT_PLUGIN_DIR: &str = "/var/lib/kubelet/device-plugins";

#[derive(Debug, Serialize)]
pub struct Report {
    pub backend: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml_version: Option<String>,
    pub resource_name: String,
    pub split_count: u32,
    /// Every device the backend reports, before the node's filter.
    pub devices: Vec<DeviceReport>,
    /// `hami.io/node-nvidia-register` as this node would write it.
    pub register_annotation: String,
    /// Replica IDs kubelet would see.
    pub kubelet_devices: usize,
}

#[derive(Debug, Serialize)]
pub struct DeviceReport {
    pub uuid: String,
    pub index: u32,
    #[serde(rename = "type")]
    pub model: String,
    pub memory_mib: u64,
    pub numa: Option<i32>,
    pub healthy: bool,
}

pub fn discover(args: &DiscoverArgs) -> Result<Report, RunError> {
    let node = args.node_name.as_deref().filter(|n| !n.trim().is_empty());
    let loaded = settings::load(&args.config, node)?;
    let cfg = settings::plugin_config(
        &loaded,
        &args.config,
        node.unwrap_or("discover"),
        Path::new(DEFAULT_PLUGIN_DIR),
        Duration::from_secs(30),
    )?;
    let selected = Selected::build(&args.backend)?;
    let devices = selected.backend().discover()?;
    let (backend, (driver_version, nvml_version)) = match &selected {
        Selected::Nvml(b) => ("nvml", b.versions()),
        Selected::Fake(_) => ("fake", (None, None)),
    };
    let inventory = Inventory::new(devices.clone(), &cfg);
    Ok(Report {
        backend,
        driver_version,
        nvml_version,
        resource_name: cfg.resource_name.clone(),
        split_count: cfg.split_count,
        devices: devices
            .into_iter()
            .map(|d| DeviceReport {
                uuid: d.uuid,
                index: d.index,
                model: d.model,
                memory_mib: d.memory_mib,
                numa: d.numa,
                healthy: d.healthy,
            })
            .collect(),
        register_annotation: encode_node_register_json(&inventory.register_info(&cfg)),
        kubelet_devices: inventory.plugin_devices(&cfg).len(),
    })
}
