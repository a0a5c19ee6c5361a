//! HAMi's per-node overrides (`/config/config.json`, chart
//! `devicePlugin.nodeConfiguration.config`, `docs/protocol.md#node-configuration`):
//!
//! ```json
//! {"nodeconfig": [{"name": "gpu-node-1", "devicesplitcount": 4, "devicememoryscaling": 1.5,
//!   "filterdevices": {"uuid": ["GPU-..."], "index": [3]}, "enablegetpreferredallocation": true}]}
//! ```
//!
//! Keys are matched case-insensitively, as Go's JSON decoder does (the chart writes them in
//! lower case, hand-written files often use `deviceSplitCount`).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// The overrides of one node; `None` leaves the device config's value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeConfig {
    pub name: String,
    pub operating_mode: Option<String>,
    pub device_memory_scaling: Option<f64>,
    pub device_core_scaling: Option<f64>,
    pub device_split_count: Option<u32>,
    pub pre_configured_device_memory: Option<u32>,
    pub lib_cuda_log_level: Option<String>,
    pub enable_numa_topology: Option<bool>,
    pub filter_uuids: Vec<String>,
    pub filter_indexes: Vec<u32>,
    pub enable_get_preferred_allocation: Option<bool>,
}

/// Why the file was refused.
#[derive(Debug, thiserror::Error)]
pub enum NodeConfigError {
    #[error("cannot read node config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("node config {path} is not JSON: {detail}")]
    Json { path: PathBuf, detail: String },
    #[error("node config {path}: entry for node {node}: {key} {detail}")]
    Field {
        path: PathBuf,
        node: String,
        key: &'static str,
        detail: String,
    },
}

/// The entry for `node` in the file at `path`. A missing file means no overrides.
pub fn load(path: &Path, node: &str) -> Result<Option<NodeConfig>, NodeConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(NodeConfigError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    parse(&text, path, node)
}

pub fn parse(text: &str, path: &Path, node: &str) -> Result<Option<NodeConfig>, NodeConfigError> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let json_err = |detail: String| NodeConfigError::Json {
        path: path.to_path_buf(),
        detail,
    };
    let root: Value = serde_json::from_str(text).map_err(|e| json_err(e.to_string()))?;
    let root = root
        .as_object()
        .ok_or_else(|| json_err("the top level must be an object".into()))?;
    let Some(entries) = get(root, "nodeconfig") else {
        return Ok(None);
    };
    let entries = entries
        .as_array()
        .ok_or_else(|| json_err("nodeconfig must be a list".into()))?;
    for entry in entries {
        let Some(obj) = entry.as_object() else {
            continue;
        };
        if get(obj, "name").and_then(Value::as_str) == Some(node) {
            return entry_config(obj, path, node).map(Some);
        }
    }
    Ok(None)
}

fn get<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v)
        .filter(|v| !v.is_null())
}

fn entry_config(
    obj: &Map<String, Value>,
    path: &Path,
    node: &str,
) -> Result<NodeConfig, NodeConfigError> {
    let bad = |key: &'static str, detail: &str| NodeConfigError::Field {
        path: path.to_path_buf(),
        node: node.to_string(),
        key,
        detail: detail.to_string(),
    };
    let float = |key: &'static str| -> Result<Option<f64>, NodeConfigError> {
        get(obj, key)
            .map(|v| v.as_f64().ok_or_else(|| bad(key, "must be a number")))
            .transpose()
    };
    let uint = |key: &'static str| -> Result<Option<u32>, NodeConfigError> {
        get(obj, key)
            .map(|v| {
                v.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| bad(key, "must be a non-negative integer"))
            })
            .transpose()
    };
    let boolean = |key: &'static str| -> Result<Option<bool>, NodeConfigError> {
        get(obj, key)
            .map(|v| v.as_bool().ok_or_else(|| bad(key, "must be true or false")))
            .transpose()
    };
    let text = |key: &'static str| -> Result<Option<String>, NodeConfigError> {
        get(obj, key)
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                _ => Err(bad(key, "must be a string")),
            })
            .transpose()
    };
    let mut cfg = NodeConfig {
        name: node.to_string(),
        operating_mode: text("operatingmode")?,
        device_memory_scaling: float("devicememoryscaling")?,
        device_core_scaling: float("devicecorescaling")?,
        device_split_count: uint("devicesplitcount")?,
        pre_configured_device_memory: uint("preconfigureddevicememory")?,
        lib_cuda_log_level: text("libcudaloglevel")?,
        enable_numa_topology: boolean("enablenumatopology")?,
        enable_get_preferred_allocation: boolean("enablegetpreferredallocation")?,
        ..NodeConfig::default()
    };
    if let Some(filter) = get(obj, "filterdevices") {
        let filter = filter.as_object().ok_or_else(|| {
            bad(
                "filterdevices",
                "must be an object with uuid and index lists",
            )
        })?;
        if let Some(uuids) = get(filter, "uuid") {
            cfg.filter_uuids = uuids
                .as_array()
                .ok_or_else(|| bad("filterdevices", "uuid must be a list"))?
                .iter()
                .map(|u| {
                    u.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| bad("filterdevices", "uuid entries must be strings"))
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(indexes) = get(filter, "index") {
            cfg.filter_indexes = indexes
                .as_array()
                .ok_or_else(|| bad("filterdevices", "index must be a list"))?
                .iter()
                .map(|i| {
                    i.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            bad(
                                "filterdevices",
                                "index entries must be non-negative integers",
                            )
                        })
                })
                .collect::<Result<_, _>>()?;
        }
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHART: &str = r#"{"nodeconfig": [
        {"name": "other", "devicesplitcount": 2},
        {"name": "n1", "operatingmode": "hami-core", "devicememoryscaling": 1.5, "devicecorescaling": 2,
         "devicesplitcount": 4, "preconfigureddevicememory": 8192, "libcudaloglevel": 3,
         "enablenumatopology": true, "migstrategy": "none",
         "filterdevices": {"uuid": ["GPU-x"], "index": [3]}, "enablegetpreferredallocation": false}
    ]}"#;

    #[test]
    fn picks_this_nodes_entry() {
        let p = Path::new("config.json");
        let c = parse(CHART, p, "n1").unwrap().unwrap();
        assert_eq!(c.device_split_count, Some(4));
        assert_eq!(c.device_memory_scaling, Some(1.5));
        assert_eq!(c.device_core_scaling, Some(2.0));
        assert_eq!(c.pre_configured_device_memory, Some(8192));
        assert_eq!(c.lib_cuda_log_level.as_deref(), Some("3"));
        assert_eq!(c.enable_numa_topology, Some(true));
        assert_eq!(c.enable_get_preferred_allocation, Some(false));
        assert_eq!(c.filter_uuids, ["GPU-x"]);
        assert_eq!(c.filter_indexes, [3]);
        assert_eq!(c.operating_mode.as_deref(), Some("hami-core"));
        assert_eq!(parse(CHART, p, "nobody").unwrap(), None);
        assert_eq!(parse("", p, "n1").unwrap(), None);
        assert_eq!(parse("{}", p, "n1").unwrap(), None);
    }

    #[test]
    fn keys_are_case_insensitive_like_go() {
        let c = parse(
            r#"{"nodeConfig":[{"Name":"n1","deviceSplitCount":7}]}"#,
            Path::new("c"),
            "n1",
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.device_split_count, Some(7));
    }

    #[test]
    fn bad_values_name_the_key() {
        let p = Path::new("c.json");
        let e = parse(
            r#"{"nodeconfig":[{"name":"n1","devicesplitcount":-1}]}"#,
            p,
            "n1",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("devicesplitcount must be a non-negative integer"),
            "{e}"
        );
        let e = parse("{nodeconfig", p, "n1").unwrap_err();
        assert!(e.to_string().contains("is not JSON"), "{e}");
        let e = parse(
            r#"{"nodeconfig":[{"name":"n1","filterdevices":{"index":["a"]}}]}"#,
            p,
            "n1",
        )
        .unwrap_err();
        assert!(e.to_string().contains("filterdevices"), "{e}");
        assert_eq!(
            load(Path::new("/nonexistent/config.json"), "n1").unwrap(),
            None
        );
    }
}
