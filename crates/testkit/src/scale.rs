//! The objects of a large synthetic cluster, as `cargo xtask bench` fills the API server
//! emulator with them and the extender's memory test feeds them to its state directly:
//! nodes with N identical 80 GB GPUs (split 10 ways, allocatable CPU and memory), running
//! pods holding 4,000 MiB and 10 % of one GPU each (spread over nodes first, then GPUs),
//! and pending pods asking for one slice. One home, so both measure the same cluster.

use hami_core::codec::{encode_node_register_json, encode_pod_single_device};
use hami_core::model::{ContainerDevice, DeviceInfo};
use serde_json::{Value, json};

/// The shape of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScaleCluster {
    pub nodes: usize,
    pub gpus_per_node: usize,
}

/// UUID of GPU `gpu` of node `node`.
pub fn uuid(node: usize, gpu: usize) -> String {
    format!(
        "GPU-{node:08x}-{gpu:04x}-4a1c-9d2e-{:012x}",
        node * 64 + gpu
    )
}

/// Name of node `i`.
pub fn node_name(i: usize) -> String {
    format!("gpu-node-{i:05}")
}

impl ScaleCluster {
    /// Node `i` with its register annotation, allocatable GPUs, CPU and memory.
    pub fn node(&self, i: usize) -> Value {
        let gpus = self.gpus_per_node;
        let devices: Vec<DeviceInfo> = (0..gpus)
            .map(|g| DeviceInfo {
                id: uuid(i, g).into(),
                index: g as u32,
                count: 10,
                mem_mib: 81_920,
                cores: 100,
                dev_type: "NVIDIA-NVIDIA H100 80GB HBM3".into(),
                numa: (g * 2 / gpus.max(1)) as i32,
                mode: "hami-core".into(),
                health: true,
                mig_profiles: vec![],
                custom_info: Default::default(),
            })
            .collect();
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node_name(i), "labels": {"gpu": "on"},
                "annotations": {"hami.io/node-nvidia-register": encode_node_register_json(&devices)}},
            "status": {"allocatable": {"nvidia.com/gpu": (gpus * 10).to_string(),
                                       "cpu": "95500m", "memory": "753Gi"},
                       "capacity": {"nvidia.com/gpu": (gpus * 10).to_string(),
                                    "cpu": "96", "memory": "768Gi"}}
        })
    }

    /// Running pod `i`, bound where its annotations say (node `i % nodes`).
    pub fn running_pod(&self, i: usize) -> Value {
        let node = i % self.nodes.max(1);
        let gpu = (i / self.nodes.max(1)) % self.gpus_per_node.max(1);
        running_pod_on(i, node, gpu, 4_000)
    }
}

/// Running pod `i` holding `mem_mib` and 10 % of GPU `gpu` of node `node`.
pub fn running_pod_on(i: usize, node: usize, gpu: usize, mem_mib: u32) -> Value {
    let devices = encode_pod_single_device(&vec![vec![ContainerDevice {
        idx: 0,
        uuid: uuid(node, gpu),
        dev_type: "NVIDIA".into(),
        mem_mib,
        cores: 10,
        slots: 0,
    }]]);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("running-{i:06}"), "namespace": "default",
            "labels": {"hami.io/vgpu-node": node_name(node)},
            "annotations": {
                "hami.io/vgpu-node": node_name(node),
                "hami.io/vgpu-time": "1795000000",
                "hami.io/vgpu-devices-allocated": devices,
                "hami.io/vgpu-devices-to-allocate": ";",
                "hami.io/bind-phase": "success",
            }},
        "spec": {"nodeName": node_name(node), "schedulerName": "hami-scheduler",
            "containers": [{"name": "main", "image": "cuda", "resources": {
                "requests": {"cpu": "2", "memory": "8Gi"},
                "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": mem_mib.to_string(),
                           "nvidia.com/gpucores": "10"}}}]},
        "status": {"phase": "Running"}
    })
}

/// Pending pod `i`: one GPU slice of 1,000 MiB and 5 % compute, CPU and memory requests.
pub fn pending_pod(i: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("pending-{i:06}"), "namespace": "default"},
        "spec": {"schedulerName": "hami-scheduler",
            "containers": [{"name": "main", "image": "cuda", "resources": {
                "requests": {"cpu": "4", "memory": "16Gi"},
                "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "5"}}}]},
    })
}
