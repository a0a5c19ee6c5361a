//! Placement cost: one pod over every node of a cluster with running pods.
//!
//! Scenarios from the issue: (a) 50 nodes × 8 GPUs, 1,000 pods; (b) 100 × 16, 5,000;
//! (c) 5,000 × 8, 50,000. Target for (b): ≤ 40 µs per pod on 2 cores. Each runs under
//! the default policies (binpack) and under the `frag` node and GPU policies, where
//! every node is fitted and every device scored through the fragmentation model.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use hami_core::accounting::DeviceCharge;
use hami_core::config::DeviceConfig;
use hami_core::engine::{PodPlan, SchedulerDefaults, place};
use hami_core::ledger::{Ledger, NodeInventory, PodRecord, VendorDevices};
use hami_core::model::DeviceInfo;
use hami_core::policy::{GpuPolicy, NodePolicy};
use hami_core::vendor::VendorRegistry;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Small deterministic generator so every run measures the same cluster.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

fn cluster(nodes: usize, gpus: usize, pods: usize) -> (Ledger, Vec<String>) {
    let mut ledger = Ledger::new();
    let mut names = Vec::with_capacity(nodes);
    for n in 0..nodes {
        let name = format!("node-{n:05}");
        let devices = (0..gpus)
            .map(|g| DeviceInfo {
                id: format!("GPU-{n:05}-{g:02}").into(),
                index: g as u32,
                count: 10,
                mem_mib: 81_920,
                cores: 100,
                dev_type: "NVIDIA-H100-80GB".into(),
                numa: (g * 2 / gpus) as i32,
                mode: "hami-core".into(),
                health: true,
                mig_profiles: vec![],
                custom_info: Default::default(),
            })
            .collect();
        ledger.set_node(
            &name,
            NodeInventory {
                vendors: vec![VendorDevices {
                    vendor: "NVIDIA".into(),
                    devices,
                }],
                ..Default::default()
            },
        );
        names.push(name);
    }
    let mut rng = Lcg(42);
    for p in 0..pods {
        let n = rng.next(nodes as u64) as usize;
        let g = rng.next(gpus as u64) as usize;
        ledger.apply_pod(PodRecord {
            uid: format!("pod-{p}").into(),
            namespace: "default".into(),
            name: format!("pod-{p}").into(),
            node: names[n].as_str().into(),
            charges: vec![DeviceCharge {
                uuid: format!("GPU-{n:05}-{g:02}").into(),
                vendor: "NVIDIA".into(),
                slots: 1,
                mem: 1024 * (1 + rng.next(4)),
                cores: 5 * rng.next(3),
            }],
        });
    }
    (ledger, names)
}

fn pod() -> Pod {
    let limits = [
        ("nvidia.com/gpu", "1"),
        ("nvidia.com/gpumem", "4096"),
        ("nvidia.com/gpucores", "10"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
    .collect();
    Pod {
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                resources: Some(ResourceRequirements {
                    limits: Some(limits),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn bench(c: &mut Criterion) {
    let registry = VendorRegistry::from_config(&DeviceConfig::default());
    let policies = [
        ("place_one_pod", SchedulerDefaults::default()),
        (
            "place_one_pod_frag",
            SchedulerDefaults {
                node_policy: NodePolicy::Frag,
                gpu_policy: GpuPolicy::parse_lenient("frag"),
            },
        ),
    ];
    let scenarios = [
        ("a_50x8_1k_pods", 50, 8, 1_000),
        ("b_100x16_5k_pods", 100, 16, 5_000),
        ("c_5000x8_50k_pods", 5_000, 8, 50_000),
    ];
    let clusters: Vec<_> = scenarios
        .iter()
        .map(|&(_, nodes, gpus, pods)| cluster(nodes, gpus, pods))
        .collect();
    for (group_name, defaults) in policies {
        let plan = PodPlan::new(&pod(), &registry, &defaults).expect("benchmark pod is valid");
        let mut group = c.benchmark_group(group_name);
        for (&(label, nodes, _, _), (ledger, names)) in scenarios.iter().zip(&clusters) {
            group.sample_size(if nodes >= 1_000 { 20 } else { 100 });
            group.bench_function(label, |b| {
                b.iter(|| {
                    let out = place(black_box(&plan), &registry, ledger, black_box(names));
                    black_box(out.chosen.is_some())
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
