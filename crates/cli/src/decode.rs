//! `hamictl decode …`

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use hami_core::codec::{decode_node_register, decode_pod_single_device};
use hami_core::config::{DeviceConfig, VendorSwitches};
use hami_core::model::DeviceInfo;
use hami_core::vendor::{InventorySource, NodeView, Vendor, VendorRegistry};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;

/// Decodes a register value: NVIDIA's forms without a vendor, else the way that vendor's
/// scheduler side reads it (`docs/vendors.md`).
pub fn node_register(value: &str, vendor: Option<&str>, node: &str) -> anyhow::Result<String> {
    let devices = match vendor {
        None => decode_node_register(value).context("invalid node register annotation")?,
        Some(name) => decode_for_vendor(name, value, node)?,
    };
    let out: Vec<_> = devices
        .iter()
        .map(|d| {
            let mut o = json!({
                "id": &*d.id,
                "index": d.index,
                "count": d.count,
                "devmem": d.mem_mib,
                "devcore": d.cores,
                "type": &*d.dev_type,
                "numa": d.numa,
                "mode": &*d.mode,
                "health": d.health,
            });
            if !d.custom_info.is_empty() {
                o["custominfo"] = json!(d.custom_info);
            }
            o
        })
        .collect();
    Ok(format!("{}\n", serde_json::to_string_pretty(&out)?))
}

/// Other names users know the families by.
const ALIASES: &[(&str, &str)] = &[
    ("hygon", "DCU"),
    ("cambricon", "MLU"),
    ("neuron", "AWSNeuron"),
    ("aws-neuron", "AWSNeuron"),
    // `enflame` is HAMi's key of the DRS family (`Enflame`); whole GCUs are `gcu`.
    ("enflame-gcu", "GCU"),
    ("enflame-drs", "Enflame"),
    ("drs", "Enflame"),
    ("kunlunxin", "kunlun"),
    ("metax", "Metax-GPU"),
    ("sgpu", "Metax-SGPU"),
    ("vxpu", "XPU"),
];

/// The vendor called `name` (its key, case-insensitively, or an alias) with the chart's
/// default names, every optional family switched on.
fn find_vendor(
    registry: &VendorRegistry,
    name: &str,
) -> anyhow::Result<std::sync::Arc<dyn Vendor>> {
    let key = ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(name))
        .map_or(name, |(_, key)| key);
    registry
        .vendors()
        .iter()
        .find(|v| v.common_word().eq_ignore_ascii_case(key))
        .cloned()
        .with_context(|| {
            let known: Vec<&str> = registry.vendors().iter().map(|v| v.common_word()).collect();
            format!("unknown vendor {name:?}; known: {}", known.join(", "))
        })
}

fn decode_for_vendor(name: &str, value: &str, node: &str) -> anyhow::Result<Vec<DeviceInfo>> {
    let cfg = DeviceConfig::default().with_switches(VendorSwitches {
        ascend: true,
        iluvatar: true,
    });
    let registry = VendorRegistry::from_config(&cfg);
    let vendor = find_vendor(&registry, name)?;
    let mut annotations = BTreeMap::new();
    let mut capacity = BTreeMap::new();
    match vendor.inventory_source() {
        InventorySource::Annotation(key) => {
            annotations.insert(key.to_string(), value.to_string());
        }
        // The devices come from node capacity: the value lists it, `resource=count,…`.
        InventorySource::Capacity(_) => {
            for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let Some((resource, count)) = pair.split_once('=') else {
                    bail!(
                        "{} devices come from node capacity: give it as resource=count pairs ({}), not {pair:?}",
                        vendor.common_word(),
                        vendor
                            .inventory_inputs()
                            .iter()
                            .map(|i| i.describe())
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                };
                capacity.insert(
                    resource.trim().to_string(),
                    Quantity(count.trim().to_string()),
                );
            }
        }
    }
    let view = NodeView {
        name: node,
        annotations: &annotations,
        capacity: Some(&capacity),
        labels: None,
    };
    match vendor.decode_inventory(&view) {
        None => Ok(Vec::new()),
        Some(r) => r.with_context(|| {
            format!(
                "invalid {} inventory ({})",
                vendor.common_word(),
                vendor.inventory_source().describe()
            )
        }),
    }
}

pub fn pod_devices(value: &str) -> anyhow::Result<String> {
    let containers = decode_pod_single_device(value).context("invalid pod device annotation")?;
    Ok(format!("{}\n", serde_json::to_string_pretty(&containers)?))
}
