//! Builders shared by the integration tests.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(dead_code)]

pub mod hami;

use std::collections::BTreeMap;

use hami_core::config::DeviceConfig;
use hami_core::engine::{PodPlan, SchedulerDefaults};
use hami_core::ledger::{Ledger, NodeInventory, VendorDevices};
use hami_core::model::DeviceInfo;
use hami_core::vendor::VendorRegistry;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub fn registry() -> VendorRegistry {
    VendorRegistry::from_config(&DeviceConfig::default())
}

pub fn gpu(id: &str, index: u32, mem: u32) -> DeviceInfo {
    DeviceInfo {
        id: id.into(),
        index,
        count: 10,
        mem_mib: mem,
        cores: 100,
        dev_type: "NVIDIA-Tesla V100".into(),
        numa: 0,
        mode: "hami-core".into(),
        health: true,
        mig_profiles: vec![],
        custom_info: Default::default(),
    }
}

pub fn inventory(devices: Vec<DeviceInfo>) -> NodeInventory {
    NodeInventory {
        vendors: vec![VendorDevices {
            vendor: "NVIDIA".into(),
            devices,
        }],
        ..Default::default()
    }
}

/// A node with `n` V100s of `mem` MiB, UUIDs `<node>-gpu-<i>`.
pub fn add_node(ledger: &mut Ledger, name: &str, n: u32, mem: u32) {
    let devs = (0..n)
        .map(|i| gpu(&format!("{name}-gpu-{i}"), i, mem))
        .collect();
    ledger.set_node(name, inventory(devs));
}

pub fn container(name: &str, limits: &[(&str, &str)]) -> Container {
    let limits: BTreeMap<String, Quantity> = limits
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect();
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            limits: if limits.is_empty() {
                None
            } else {
                Some(limits)
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A container with these limits and requests (either may be empty: then absent).
pub fn container_with(name: &str, limits: &[(&str, &str)], requests: &[(&str, &str)]) -> Container {
    let list = |pairs: &[(&str, &str)]| {
        (!pairs.is_empty()).then(|| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect::<BTreeMap<_, _>>()
        })
    };
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            limits: list(limits),
            requests: list(requests),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn pod(name: &str, containers: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn with_annotations(mut p: Pod, annotations: &[(&str, &str)]) -> Pod {
    let a = p.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in annotations {
        a.insert(k.to_string(), v.to_string());
    }
    p
}

/// One container asking for `n` GPUs with `mem` MiB and `cores` % each.
pub fn gpu_pod(name: &str, n: u32, mem: u32, cores: u32) -> Pod {
    pod(
        name,
        vec![container(
            "main",
            &[
                ("nvidia.com/gpu", &n.to_string()),
                ("nvidia.com/gpumem", &mem.to_string()),
                ("nvidia.com/gpucores", &cores.to_string()),
            ],
        )],
    )
}

pub fn plan(p: &Pod) -> PodPlan {
    PodPlan::new(p, &registry(), &SchedulerDefaults::default()).unwrap()
}

pub fn names(ledger: &Ledger) -> Vec<String> {
    ledger.nodes().map(|n| n.name().to_string()).collect()
}
