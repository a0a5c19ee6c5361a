//! Opt-in checks on a machine with an NVIDIA GPU and driver (ignored by default):
//!
//! ```text
//! cargo test -p hami-device-plugin-nvidia --test nvml_gpu -- --ignored --nocapture
//! ```
//!
//! The NVML backend against the real driver, alone and behind the plugin on an emulated
//! node (kubelet and API server emulators in-process).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use hami_device_plugin::{DeviceBackend, Metrics, Plugin};
use hami_device_plugin_nvidia::health::HealthChecks;
use hami_device_plugin_nvidia::nvml::{HealthTiming, NvmlBackend};
use hami_testkit::ApiServer;
use hami_testkit::kubelet::{Kubelet, KubeletOptions};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

fn backend() -> NvmlBackend {
    // Logs of the health thread (event registration, probes) go to stderr.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_test_writer()
        .try_init();
    NvmlBackend::init(
        None,
        HealthChecks::default(),
        HealthTiming {
            hold: Duration::from_secs(10),
            window: Duration::from_secs(60),
        },
    )
    .expect("NVML available")
}

#[test]
#[ignore = "needs an NVIDIA GPU and driver"]
fn nvml_discovers_the_real_gpus() {
    let b = backend();
    let (driver, nvml) = b.versions();
    let devices = b.discover().unwrap();
    println!("driver {driver:?} nvml {nvml:?}");
    for d in &devices {
        println!("{d:?}");
    }
    assert!(!devices.is_empty());
    for d in &devices {
        assert!(
            d.uuid.starts_with("GPU-") && d.uuid.len() == 40,
            "{}",
            d.uuid
        );
        assert!(d.model.starts_with("NVIDIA"), "{}", d.model);
        assert!(d.memory_mib > 1024, "{}", d.memory_mib);
        assert!(d.numa.is_none_or(|n| n >= 0));
        assert!(d.healthy);
    }
    assert!(driver.is_some() && nvml.is_some());
}

#[tokio::test]
#[ignore = "needs an NVIDIA GPU and driver"]
async fn nvml_plugin_on_an_emulated_node_registers_allocates_and_stays_healthy() {
    let api = ApiServer::start().await.unwrap();
    let client = kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "gpu-node"}})).unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let kubelet = Kubelet::start_with(KubeletOptions {
        node_name: Some("gpu-node".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let hook = tempfile::tempdir().unwrap();
    let nvml = Arc::new(backend());
    let gpus = nvml.discover().unwrap();
    let cfg = hami_device_plugin::PluginConfig {
        node_name: "gpu-node".into(),
        resource_name: "nvidia.com/gpu".into(),
        plugin_dir: kubelet.dir().to_path_buf(),
        socket_name: "nvidia-gpu.sock".into(),
        vendor: hami_device_plugin::VendorSpec::nvidia(),
        split_count: 10,
        memory_scaling: 1.0,
        core_scaling: 1.0,
        preconfigured_memory: 0,
        numa_topology: true,
        preferred_allocation: true,
        operating_mode: "hami-core".into(),
        filter: Default::default(),
        vgpu_hook: hami_device_plugin::VgpuHookSettings {
            hook_path: hook.path().to_path_buf(),
            lib_cuda_log_level: "1".into(),
            disable_core_limit: false,
            libvgpu_version: None,
        },
        register_interval: Duration::from_secs(30),
    };
    cfg.validate().unwrap();
    let plugin = Plugin::new(cfg, nvml.clone(), client.clone(), Metrics::default()).unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(plugin.run(shutdown.clone()));
    assert!(
        kubelet
            .wait_for_healthy("nvidia.com/gpu", gpus.len() * 10, WAIT)
            .await
    );

    let first = &gpus[0];
    let value = format!("{},NVIDIA,2048,25:;", first.uuid);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "cuda", "namespace": "default", "annotations": {
            "hami.io/vgpu-node": "gpu-node", "hami.io/vgpu-time": "1",
            "hami.io/vgpu-devices-to-allocate": value, "hami.io/vgpu-devices-allocated": value,
            "hami.io/bind-phase": "allocating", "hami.io/bind-time": "1"}},
        "spec": {"nodeName": "gpu-node", "containers": [{"name": "c", "image": "cuda",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    }))
    .unwrap();
    let pod = Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    let admitted = kubelet.admit(&pod).await.unwrap();
    let got = admitted.get("c", "nvidia.com/gpu").unwrap();
    println!(
        "kubelet chose {:?}; envs {:?}",
        got.devices, got.response.envs
    );
    assert_eq!(got.devices, [format!("{}-0", first.uuid)]);
    assert_eq!(got.response.envs["NVIDIA_VISIBLE_DEVICES"], first.uuid);
    assert_eq!(got.response.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], "2048m");

    let annotation = Api::<Node>::all(client.clone())
        .get("gpu-node")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap()["hami.io/node-nvidia-register"]
        .clone();
    println!("hami.io/node-nvidia-register = {annotation}");
    assert_eq!(
        hami_core::codec::decode_node_register(&annotation)
            .unwrap()
            .len(),
        gpus.len()
    );

    // Let the health thread run a few probe rounds: a healthy GPU must stay healthy.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let state = kubelet.resource("nvidia.com/gpu").unwrap();
    assert!(state.unhealthy.is_empty(), "{:?}", state.unhealthy);
    shutdown.cancel();
    tokio::time::timeout(WAIT, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
