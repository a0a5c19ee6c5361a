//! What a demo cluster is made of: nodes with fake GPUs, and the timings of the
//! emulated kube-scheduler and of the extender.

use std::collections::BTreeMap;
use std::time::Duration;

use hami_core::config::DeviceConfig;
use hami_testkit::fixture::GpuNode;

/// One fake GPU, as the fake backend's device file lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSpec {
    /// The NVML name (`Tesla T4`, `NVIDIA A100-SXM4-80GB`); the plugin registers it
    /// `NVIDIA-` prefixed unless it already starts with `NVIDIA`.
    pub model: String,
    pub memory_mib: u64,
    pub numa: i32,
}

/// Which device plugin a node runs, on which fake devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeVendor {
    /// `hami-device-plugin-nvidia` on its fake backend (the node's `gpus`).
    #[default]
    Nvidia,
    /// `hami-device-plugin-amd` on a fake MI300X sysfs/dev tree of this many GPUs.
    Amd { gpus: u32 },
    /// `hami-device-plugin-dcu` on a fake K100_AI sysfs/dev tree of this many DCUs.
    Dcu { cards: u32 },
}

/// One emulated node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    pub name: String,
    /// NVIDIA GPUs (empty on an AMD or DCU node: their devices are the vendor's tree).
    pub gpus: Vec<GpuSpec>,
    pub labels: BTreeMap<String, String>,
    pub vendor: NodeVendor,
}

impl NodeSpec {
    /// A node without GPUs yet, labelled `gpu=on` like the chart's device plugin
    /// node selector expects.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            gpus: Vec::new(),
            labels: BTreeMap::from([("gpu".to_string(), "on".to_string())]),
            vendor: NodeVendor::Nvidia,
        }
    }

    /// A node of `gpus` MI300X, labelled `amd=on` like the chart's AMD plugin node
    /// selector expects.
    pub fn amd(name: &str, gpus: u32) -> Self {
        Self::of_vendor(name, "amd", NodeVendor::Amd { gpus })
    }

    /// A node of `cards` K100_AI, labelled `dcu=on` like the chart's DCU plugin node
    /// selector expects.
    pub fn dcu(name: &str, cards: u32) -> Self {
        Self::of_vendor(name, "dcu", NodeVendor::Dcu { cards })
    }

    fn of_vendor(name: &str, selector: &str, vendor: NodeVendor) -> Self {
        Self {
            labels: BTreeMap::from([(selector.to_string(), "on".to_string())]),
            vendor,
            ..Self::new(name)
        }
    }

    /// The IDs its device plugin registers, in order.
    pub fn device_ids(&self) -> Vec<String> {
        match self.vendor {
            NodeVendor::Nvidia => (0..self.gpus.len()).map(|i| self.uuid(i)).collect(),
            NodeVendor::Amd { gpus } => hami_device_plugin_amd::fake_tree::mi300x(gpus)
                .into_iter()
                .map(|g| g.uuid)
                .collect(),
            NodeVendor::Dcu { cards } => hami_device_plugin_dcu::fake_tree::k100_ai(cards)
                .into_iter()
                .map(|d| d.id())
                .collect(),
        }
    }

    /// Adds one GPU per entry of `numa` (its NUMA node).
    pub fn gpus(mut self, model: &str, memory_mib: u64, numa: &[i32]) -> Self {
        for n in numa {
            self.gpus.push(GpuSpec {
                model: model.to_string(),
                memory_mib,
                numa: *n,
            });
        }
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_string(), value.to_string());
        self
    }

    /// The UUID of GPU `index`: NVML-shaped and stable for a node name.
    pub fn uuid(&self, index: usize) -> String {
        GpuNode::new(&self.name, 0).uuid(index as u32)
    }

    /// The fake backend's device file.
    pub fn device_file(&self) -> String {
        let mut out = String::from("devices:\n");
        for (i, g) in self.gpus.iter().enumerate() {
            out.push_str(&format!(
                "  - uuid: {}\n    index: {i}\n    model: {:?}\n    memory: {}\n    numa: {}\n",
                self.uuid(i),
                g.model,
                g.memory_mib,
                g.numa
            ));
        }
        out
    }
}

/// Timings; the defaults are kube-scheduler's and the chart's.
#[derive(Debug, Clone)]
pub struct Timing {
    /// First retry delay of a pod that could not be scheduled.
    pub initial_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
    /// How long the extender's /bind waits for a node lock held by another pod.
    pub node_lock_wait: Duration,
    /// How often the extender checks node registrations and handshakes.
    pub registry_interval: Duration,
    /// How often each device plugin re-checks its node annotation.
    pub register_interval: Duration,
    /// How often each node's fake workload rewrites its containers' shared regions, and
    /// its vGPU monitor scans them (the chart's monitor: 5 s; short here so usage is
    /// reported as soon as the pods run).
    pub usage_interval: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            node_lock_wait: Duration::from_secs(20),
            registry_interval: Duration::from_secs(15),
            register_interval: Duration::from_secs(30),
            usage_interval: Duration::from_millis(100),
        }
    }
}

impl Timing {
    /// Shorter retries, for tests that restart components and wait for recovery.
    pub fn fast() -> Self {
        Self {
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(1),
            registry_interval: Duration::from_secs(2),
            register_interval: Duration::from_secs(5),
            ..Self::default()
        }
    }
}

/// A whole cluster.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub nodes: Vec<NodeSpec>,
    /// The kube-scheduler profile (and extender, and webhook target) name.
    pub scheduler_name: String,
    /// HAMi's `device-config.yaml`, shared by the webhook, the extender and the plugins.
    pub devices: DeviceConfig,
    pub timing: Timing,
    /// Whether each node runs the fake workload and the vGPU monitor (usage reporting);
    /// the chaos run leaves them out: its invariants are about placement, and 100 nodes'
    /// monitors would take the cores the components under test need.
    pub usage_reporting: bool,
}

impl ClusterSpec {
    pub fn new(nodes: Vec<NodeSpec>) -> Self {
        Self {
            nodes,
            scheduler_name: "hami-scheduler".into(),
            devices: DeviceConfig::default(),
            timing: Timing::default(),
            usage_reporting: true,
        }
    }

    /// The demo's three NVIDIA nodes: mixed models, sizes and NUMA layouts.
    pub fn demo() -> Self {
        Self::new(demo_nodes())
    }

    /// The demo's NVIDIA nodes plus [`vendor_nodes`]: what `cargo xtask demo` runs.
    pub fn demo_all_vendors() -> Self {
        let mut nodes = demo_nodes();
        nodes.extend(vendor_nodes());
        Self::new(nodes)
    }

    pub fn timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// 2 × A100 80GB (one per NUMA node), 4 × T4 16GB (two per NUMA node), 1 × H100 80GB.
pub fn demo_nodes() -> Vec<NodeSpec> {
    vec![
        NodeSpec::new("gpu-a100").gpus("NVIDIA A100-SXM4-80GB", 81920, &[0, 1]),
        NodeSpec::new("gpu-t4").gpus("Tesla T4", 15360, &[0, 0, 1, 1]),
        NodeSpec::new("gpu-h100").gpus("NVIDIA H100 80GB HBM3", 81559, &[0]),
    ]
}

/// 2 × AMD Instinct MI300X and 2 × Hygon K100_AI, each on its plugin's fake tree.
pub fn vendor_nodes() -> Vec<NodeSpec> {
    vec![NodeSpec::amd("amd-mi300x", 2), NodeSpec::dcu("dcu-k100", 2)]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn device_files_parse_with_the_fake_backend() {
        for node in demo_nodes() {
            let text = node.device_file();
            let devices = hami_device_plugin_nvidia::fake::parse_devices(
                &text,
                std::path::Path::new("devices.yaml"),
            )
            .unwrap();
            assert_eq!(devices.len(), node.gpus.len());
            for (i, d) in devices.iter().enumerate() {
                assert_eq!(d.uuid, node.uuid(i));
                assert_eq!(d.index as usize, i);
                assert_eq!(d.memory_mib, node.gpus[i].memory_mib);
                assert_eq!(d.numa, Some(node.gpus[i].numa));
            }
        }
        let uuids: std::collections::BTreeSet<String> = demo_nodes()
            .iter()
            .flat_map(|n| (0..n.gpus.len()).map(|i| n.uuid(i)).collect::<Vec<_>>())
            .collect();
        assert_eq!(uuids.len(), 7, "UUIDs are unique across the cluster");
    }
}
