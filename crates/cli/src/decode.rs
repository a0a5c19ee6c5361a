//! `hamictl decode …`

use anyhow::Context;
use hami_core::codec::{decode_node_register, decode_pod_single_device};
use serde_json::json;

pub fn node_register(value: &str) -> anyhow::Result<String> {
    let devices = decode_node_register(value).context("invalid node register annotation")?;
    let out: Vec<_> = devices
        .iter()
        .map(|d| {
            json!({
                "id": d.id,
                "index": d.index,
                "count": d.count,
                "devmem": d.mem_mib,
                "devcore": d.cores,
                "type": d.dev_type,
                "numa": d.numa,
                "mode": d.mode,
                "health": d.health,
            })
        })
        .collect();
    Ok(format!("{}\n", serde_json::to_string_pretty(&out)?))
}

pub fn pod_devices(value: &str) -> anyhow::Result<String> {
    let containers = decode_pod_single_device(value).context("invalid pod device annotation")?;
    Ok(format!("{}\n", serde_json::to_string_pretty(&containers)?))
}
