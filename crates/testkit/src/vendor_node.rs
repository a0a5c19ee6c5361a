//! Nodes of any device family, registered the way each family's device plugin registers
//! them (`docs/vendors.md`): register annotations (JSON or the legacy string), handshake
//! answers, and the capacity and allocatable kubelet reports. A node may carry several
//! families, as nodes mixing an NVIDIA GPU and an Ascend NPU do.
//!
//! ```
//! use hami_testkit::vendor_node::VendorNode;
//! let node = VendorNode::new("npu-1").ascend("Ascend910B3", 8, 65536).dcu(2, 65520);
//! let obj = node.to_object();
//! assert_eq!(obj["status"]["capacity"]["hygon.com/dcunum"], "8");
//! ```

use std::collections::BTreeMap;

use hami_core::codec::{encode_node_register_json, encode_node_register_legacy};
use hami_core::model::DeviceInfo;
use hami_core::vendor::{amd, ascend, enflame_drs, hygon};
use serde_json::{Map, Value, json};

/// What a handshake-answering plugin writes back (any value without `Requesting`).
const REPORTED: &str = "Reported 2026-01-01 00:00:00";

/// A node with devices of one or more families.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VendorNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Resource → quantity, for both capacity and allocatable.
    pub resources: BTreeMap<String, String>,
    /// Every device registered, by vendor key.
    pub devices: BTreeMap<String, Vec<DeviceInfo>>,
}

impl VendorNode {
    pub fn new(name: &str) -> Self {
        VendorNode {
            name: name.to_string(),
            ..VendorNode::default()
        }
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_string(), value.to_string());
        self
    }

    /// Any annotation (a register value, a cordon, a broken value for a test).
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.to_string(), value.to_string());
        self
    }

    /// A resource kubelet reports (capacity and allocatable alike).
    pub fn resource(mut self, name: &str, quantity: u64) -> Self {
        self.resources
            .insert(name.to_string(), quantity.to_string());
        self
    }

    fn register(mut self, vendor: &str, devices: Vec<DeviceInfo>) -> Self {
        self.devices
            .entry(vendor.to_string())
            .or_default()
            .extend(devices);
        self
    }

    /// `n` NVIDIA GPUs of `mem_mib` MiB, split 10 ways, as HAMi's NVIDIA plugin
    /// registers them (`hami.io/node-nvidia-register`).
    pub fn nvidia(self, n: u32, mem_mib: u32) -> Self {
        let name = self.name.clone();
        let devices: Vec<DeviceInfo> = (0..n)
            .map(|i| DeviceInfo {
                id: format!("GPU-{name}-{i}").into(),
                index: i,
                count: 10,
                mem_mib,
                cores: 100,
                dev_type: "NVIDIA-A40".into(),
                mode: "hami-core".into(),
                health: true,
                ..DeviceInfo::default()
            })
            .collect();
        let value = encode_node_register_json(&devices);
        self.annotation("hami.io/node-nvidia-register", &value)
            .resource("nvidia.com/gpu", u64::from(n) * 10)
            .register("NVIDIA", devices)
    }

    /// `n` Hygon DCUs of `mem_mib` MiB as the DCU plugin registers them: the legacy
    /// string, 4 slots each, and its handshake answer.
    pub fn dcu(self, n: u32, mem_mib: u32) -> Self {
        let name = self.name.clone();
        let devices: Vec<DeviceInfo> = (0..n)
            .map(|i| DeviceInfo {
                id: format!("DCU-{name}-{i}").into(),
                index: i,
                count: 4,
                mem_mib,
                cores: 100,
                dev_type: "DCU-K100_AI".into(),
                mode: "hami".into(),
                health: true,
                ..DeviceInfo::default()
            })
            .collect();
        let value = encode_node_register_legacy(&devices);
        self.annotation(hygon::REGISTER, &value)
            .annotation(hygon::HANDSHAKE, REPORTED)
            .resource("hygon.com/dcunum", u64::from(n) * 4)
            .register(hygon::DCU, devices)
    }

    /// `n` AMD GPUs of `mem_mib` MiB and `cus` compute units as HAMi's AMD plugin
    /// registers them (JSON, 10 slots, no handshake).
    pub fn amd(self, n: u32, mem_mib: u32, cus: u32) -> Self {
        let name = self.name.clone();
        let devices: Vec<DeviceInfo> = (0..n)
            .map(|i| {
                let mut d = DeviceInfo {
                    id: format!("{i:08x}-{name}-amd").into(),
                    index: i,
                    count: 10,
                    mem_mib,
                    cores: cus,
                    dev_type: "AMD Instinct MI300X VF".into(),
                    health: true,
                    ..DeviceInfo::default()
                };
                d.custom_info.insert(
                    "pciBDF".into(),
                    format!("0000:{:02x}:00.0", 0x19 + i).into(),
                );
                d
            })
            .collect();
        let value = encode_node_register_json(&devices);
        self.annotation(amd::REGISTER, &value)
            .resource("amd.com/gpu", u64::from(n) * 10)
            .register(amd::AMD, devices)
    }

    /// `n` Ascend NPUs of chip `common_word` (`Ascend910B3`, …) with `mem_mib` MiB, 4
    /// vNPUs each, as the Ascend plugin registers them (JSON with the 910 network group
    /// of each device, and its handshake answer).
    pub fn ascend(self, common_word: &str, n: u32, mem_mib: u32) -> Self {
        let name = self.name.clone();
        let devices: Vec<DeviceInfo> = (0..n)
            .map(|i| {
                let mut d = DeviceInfo {
                    id: format!("{common_word}-{name}-{i}").into(),
                    index: i,
                    count: 4,
                    mem_mib,
                    cores: 20,
                    dev_type: common_word.into(),
                    health: true,
                    ..DeviceInfo::default()
                };
                if common_word.starts_with("Ascend910") {
                    let network = if common_word == "Ascend910C" {
                        0
                    } else {
                        u32::from(i > 3)
                    };
                    d.custom_info
                        .insert(ascend::NETWORK_ID.into(), network.into());
                }
                d
            })
            .collect();
        let value = encode_node_register_json(&devices);
        self.annotation(&format!("hami.io/node-register-{common_word}"), &value)
            .annotation(&format!("hami.io/node-handshake-{common_word}"), REPORTED)
            .annotation(ascend::NODE_VNPU_CORE, "false")
            .resource(&format!("huawei.com/{common_word}"), u64::from(n) * 4)
            .register(common_word, devices)
    }

    /// `cards` Cambricon MLUs with `mem_units` memory units (256 MiB) each: the dynamic
    /// sMLU plugin only advertises resources, the scheduler derives the devices.
    pub fn mlu(self, cards: u32, mem_units: u32) -> Self {
        let name = self.name.clone();
        let devices: Vec<DeviceInfo> = (0..cards)
            .map(|i| DeviceInfo {
                id: format!("{name}-cambricon-mlu-{i}").into(),
                index: i,
                count: 100,
                mem_mib: mem_units * 256,
                cores: 100,
                dev_type: "MLU".into(),
                health: true,
                ..DeviceInfo::default()
            })
            .collect();
        self.resource("cambricon.com/vmlu", u64::from(cards) * 100)
            .resource("cambricon.com/mlu.smlu.vcore", u64::from(cards) * 100)
            .resource(
                "cambricon.com/mlu.smlu.vmemory",
                u64::from(cards) * u64::from(mem_units),
            )
            .register("MLU", devices)
    }

    /// `n` Enflame GCUs cut into `slices` DRS slices each, as Enflame's DRS plugin
    /// registers them: `enflame.com/gcu-drs-capacity` with the profile menu `1g.6gb`,
    /// `3g.20gb`, `6g.40gb` (ids 0, 1, 2), and the slices as `enflame.com/drs-gcu`.
    pub fn enflame_drs(self, n: u32, slices: u32) -> Self {
        let value = json!({
            "devices": (0..n)
                .map(|i| json!({"index": i.to_string(), "minor": i.to_string(), "capacity": slices}))
                .collect::<Vec<_>>(),
            "profiles": {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"},
        })
        .to_string();
        let name = self.name.clone();
        let devices: Vec<DeviceInfo> = (0..n)
            .map(|i| DeviceInfo {
                id: format!("{name}-enflame-drs-{i}").into(),
                index: i,
                count: slices,
                mem_mib: 40 * 1024,
                cores: 100,
                dev_type: enflame_drs::ENFLAME.into(),
                health: true,
                custom_info: BTreeMap::from([
                    ("minor".to_string(), json!(i.to_string())),
                    ("index".to_string(), json!(i.to_string())),
                    (
                        "profiles".to_string(),
                        json!({"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}),
                    ),
                    ("maxSlice".to_string(), json!(6)),
                ]),
                ..DeviceInfo::default()
            })
            .collect();
        self.annotation(enflame_drs::DRS_CAPACITY, &value)
            .resource("enflame.com/drs-gcu", u64::from(n) * u64::from(slices))
            .register(enflame_drs::ENFLAME, devices)
    }

    /// The Node object.
    pub fn to_object(&self) -> Value {
        let mut labels: Map<String, Value> = self
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        labels.insert("kubernetes.io/hostname".into(), self.name.clone().into());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        let mut resources: Map<String, Value> = self
            .resources
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        for (k, v) in [("cpu", "32"), ("memory", "131072Mi"), ("pods", "110")] {
            resources.insert(k.into(), v.into());
        }
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels, "annotations": self.annotations},
            "spec": {},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hami_core::config::{DeviceConfig, VendorSwitches};
    use hami_core::ledger::NodeInventory;
    use hami_core::vendor::VendorRegistry;
    use k8s_openapi::api::core::v1::Node;

    #[test]
    fn every_family_decodes_as_the_scheduler_reads_it() {
        let node = VendorNode::new("mixed")
            .nvidia(2, 40960)
            .dcu(2, 65520)
            .amd(1, 196288, 304)
            .ascend("Ascend910B3", 8, 65536)
            .mlu(2, 96)
            .enflame_drs(2, 6);
        let obj: Node = serde_json::from_value(node.to_object()).unwrap();
        let cfg = DeviceConfig::default().with_switches(VendorSwitches {
            ascend: true,
            iluvatar: false,
        });
        let registry = VendorRegistry::from_config(&cfg);
        let (inv, issues) =
            NodeInventory::from_node(&hami_core::vendor::NodeView::of(&obj), &registry);
        assert!(issues.is_empty(), "{issues:?}");
        for vd in &inv.vendors {
            assert_eq!(
                Some(&vd.devices),
                node.devices.get(&vd.vendor),
                "{}",
                vd.vendor
            );
        }
        let families: Vec<&str> = inv.vendors.iter().map(|v| v.vendor.as_str()).collect();
        assert_eq!(
            families,
            ["AMD", "Ascend910B3", "DCU", "Enflame", "MLU", "NVIDIA"]
        );
    }
}
