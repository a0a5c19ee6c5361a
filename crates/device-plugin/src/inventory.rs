//! The node's devices as this plugin publishes them: to kubelet as split replicas, to the
//! scheduler as the register annotation.

use hami_core::model::DeviceInfo;
use hami_kubelet_api::v1beta1::{Device, NumaNode, TopologyInfo};

use crate::backend::PhysicalDevice;
use crate::config::PluginConfig;

/// Devices after the node's filter, sorted by index (then UUID), one entry per UUID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    devices: Vec<PhysicalDevice>,
}

impl Inventory {
    /// Keeps what the node may publish: not filtered out, with a known (or preconfigured)
    /// memory size, each UUID once.
    pub fn new(mut devices: Vec<PhysicalDevice>, cfg: &PluginConfig) -> Self {
        devices.sort_by(|a, b| a.index.cmp(&b.index).then_with(|| a.uuid.cmp(&b.uuid)));
        let mut kept: Vec<PhysicalDevice> = Vec::with_capacity(devices.len());
        for d in devices {
            if cfg.filter.excludes(&d) {
                tracing::info!(uuid = %d.uuid, index = d.index, "device excluded by filterdevices");
            } else if d.uuid.is_empty() {
                tracing::warn!(index = d.index, "device without UUID skipped");
            } else if d.memory_mib == 0 && cfg.preconfigured_memory == 0 {
                tracing::warn!(uuid = %d.uuid, "device memory unknown and preConfiguredDeviceMemory is 0: device skipped");
            } else if kept.iter().any(|k| k.uuid == d.uuid) {
                tracing::warn!(uuid = %d.uuid, "device reported twice; second entry skipped");
            } else {
                kept.push(d);
            }
        }
        Inventory { devices: kept }
    }

    pub fn devices(&self) -> &[PhysicalDevice] {
        &self.devices
    }

    pub fn get(&self, uuid: &str) -> Option<&PhysicalDevice> {
        self.devices.iter().find(|d| d.uuid == uuid)
    }

    /// Sets one device's health; returns whether anything changed.
    pub fn set_health(&mut self, uuid: &str, healthy: bool) -> bool {
        match self.devices.iter_mut().find(|d| d.uuid == uuid) {
            Some(d) if d.healthy != healthy => {
                d.healthy = healthy;
                true
            }
            _ => false,
        }
    }

    /// The register annotation's entries (`docs/protocol.md#node-register`).
    pub fn register_info(&self, cfg: &PluginConfig) -> Vec<DeviceInfo> {
        self.devices
            .iter()
            .map(|d| DeviceInfo {
                id: d.uuid.clone().into(),
                index: d.index,
                count: cfg.split_count,
                mem_mib: registered_memory(d.memory_mib, cfg),
                cores: scaled(100.0, cfg.core_scaling),
                dev_type: d.model.clone().into(),
                numa: d.numa.unwrap_or(0).max(0),
                mode: cfg.operating_mode.clone().into(),
                health: d.healthy,
                mig_profiles: Vec::new(),
                custom_info: Default::default(),
            })
            .collect()
    }

    /// What ListAndWatch sends: every device `split_count` times as `<uuid>-<i>`.
    pub fn plugin_devices(&self, cfg: &PluginConfig) -> Vec<Device> {
        let mut out = Vec::with_capacity(self.devices.len() * cfg.split_count as usize);
        for d in &self.devices {
            let health = if d.healthy {
                hami_kubelet_api::HEALTHY
            } else {
                hami_kubelet_api::UNHEALTHY
            };
            let topology = cfg.numa_topology.then(|| TopologyInfo {
                nodes: vec![NumaNode {
                    id: i64::from(d.numa.unwrap_or(0).max(0)),
                }],
            });
            for i in 0..cfg.split_count {
                out.push(Device {
                    id: replica_id(&d.uuid, i),
                    health: health.into(),
                    topology: topology.clone(),
                });
            }
        }
        out
    }

    /// The physical device behind replica ID `id`.
    pub fn device_of_replica(&self, id: &str, cfg: &PluginConfig) -> Option<&PhysicalDevice> {
        let (uuid, i) = id.rsplit_once('-')?;
        let i: u32 = i.parse().ok()?;
        (i < cfg.split_count).then_some(())?;
        self.get(uuid)
    }
}

/// `<uuid>-<i>`.
pub fn replica_id(uuid: &str, i: u32) -> String {
    format!("{uuid}-{i}")
}

fn registered_memory(mib: u64, cfg: &PluginConfig) -> u32 {
    if mib == 0 {
        cfg.preconfigured_memory
    } else {
        let mib = u32::try_from(mib).unwrap_or(u32::MAX);
        scaled(f64::from(mib), cfg.memory_scaling)
    }
}

/// `value × factor` truncated as Go's int conversion does, saturating at u32::MAX.
fn scaled(value: f64, factor: f64) -> u32 {
    let v = (value * factor).trunc();
    if v >= f64::from(u32::MAX) {
        u32::MAX
    } else if v > 0.0 {
        v as u32
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_config;

    fn dev(uuid: &str, index: u32, mem: u64, numa: Option<i32>) -> PhysicalDevice {
        PhysicalDevice {
            uuid: uuid.into(),
            index,
            model: "NVIDIA-Tesla T4".into(),
            memory_mib: mem,
            numa,
            healthy: true,
        }
    }

    #[test]
    fn filter_sort_dedup_and_unknown_memory() {
        let mut cfg = test_config("n", std::path::Path::new("/tmp"));
        cfg.filter.uuids = vec!["GPU-x".into()];
        cfg.filter.indexes = vec![5];
        let inv = Inventory::new(
            vec![
                dev("GPU-b", 1, 100, None),
                dev("GPU-a", 0, 100, None),
                dev("GPU-x", 2, 100, None),
                dev("GPU-y", 5, 100, None),
                dev("GPU-a", 3, 100, None),
                dev("GPU-z", 4, 0, None),
            ],
            &cfg,
        );
        let ids: Vec<&str> = inv.devices().iter().map(|d| d.uuid.as_str()).collect();
        assert_eq!(ids, ["GPU-a", "GPU-b"]);

        cfg.preconfigured_memory = 2048;
        let inv = Inventory::new(vec![dev("GPU-z", 4, 0, None)], &cfg);
        assert_eq!(inv.register_info(&cfg)[0].mem_mib, 2048);
    }

    #[test]
    fn register_info_scales_like_hami() {
        let mut cfg = test_config("n", std::path::Path::new("/tmp"));
        cfg.split_count = 10;
        cfg.memory_scaling = 1.5;
        cfg.core_scaling = 2.0;
        let mut inv = Inventory::new(
            vec![
                dev("GPU-a", 0, 15360, Some(-1)),
                dev("GPU-b", 1, 15360, Some(1)),
            ],
            &cfg,
        );
        assert!(inv.set_health("GPU-b", false));
        assert!(!inv.set_health("GPU-b", false));
        let info = inv.register_info(&cfg);
        assert_eq!(info[0].count, 10);
        assert_eq!(info[0].mem_mib, 23040);
        assert_eq!(info[0].cores, 200);
        assert_eq!(info[0].numa, 0, "negative NUMA is 0");
        assert_eq!(&*info[0].mode, "hami-core");
        assert!(info[0].health && !info[1].health);
        assert_eq!(info[1].numa, 1);
        assert_eq!(
            hami_core::codec::encode_node_register_json(&info[..1]),
            r#"[{"id":"GPU-a","count":10,"devmem":23040,"devcore":200,"type":"NVIDIA-Tesla T4","mode":"hami-core","health":true}]"#
        );
    }

    #[test]
    fn replicas_carry_health_and_numa_when_enabled() {
        let mut cfg = test_config("n", std::path::Path::new("/tmp"));
        cfg.split_count = 2;
        let mut inv = Inventory::new(vec![dev("GPU-a-1", 0, 1, Some(1))], &cfg);
        inv.set_health("GPU-a-1", false);
        let devs = inv.plugin_devices(&cfg);
        assert_eq!(devs.len(), 2);
        assert_eq!(devs[1].id, "GPU-a-1-1");
        assert_eq!(devs[1].health, "Unhealthy");
        assert!(devs[0].topology.is_none());
        cfg.numa_topology = true;
        let devs = inv.plugin_devices(&cfg);
        assert_eq!(devs[0].topology.as_ref().unwrap().nodes[0].id, 1);

        assert_eq!(
            inv.device_of_replica("GPU-a-1-1", &cfg).unwrap().uuid,
            "GPU-a-1"
        );
        assert!(inv.device_of_replica("GPU-a-1-2", &cfg).is_none());
        assert!(inv.device_of_replica("GPU-a-1", &cfg).is_none());
        assert!(inv.device_of_replica("garbage", &cfg).is_none());
    }
}
