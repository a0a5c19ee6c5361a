//! The NVIDIA plugin with the fake backend on an emulated node: kubelet emulator over unix
//! sockets, API server emulator over HTTP, admin port over TCP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Duration;

use hami_device_plugin_nvidia::cli::{BackendArgs, BackendKind, ConfigArgs, ServeArgs};
use hami_device_plugin_nvidia::fake::FakeBackend;
use hami_device_plugin_nvidia::run::{plugin_config, serve};
use hami_server::args::{AdminArgs, ClientArgs};
use hami_testkit::ApiServer;
use hami_testkit::kubelet::{Kubelet, KubeletOptions};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const NODE: &str = "gpu-node-1";
const WAIT: Duration = Duration::from_secs(15);

const DEVICES: &str = "devices:
  - uuid: GPU-fake-0
    model: Tesla T4
    memory: 15360
    numa: 0
  - uuid: GPU-fake-1
    model: Tesla T4
    memory: 15360
    numa: 1
";

async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    (code, body)
}

async fn node_annotation(client: &kube::Client, key: &str) -> Option<String> {
    Api::<Node>::all(client.clone())
        .get(NODE)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default()
        .get(key)
        .cloned()
}

async fn wait_annotation(client: &kube::Client, key: &str, cond: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = node_annotation(client, key).await.filter(|v| cond(v)) {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{key} never matched"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn serve_args(dir: &Path, files: &Path) -> ServeArgs {
    ServeArgs {
        node_name: Some(NODE.into()),
        device_plugin_path: dir.to_path_buf(),
        admin: AdminArgs::new("127.0.0.1:0".parse().unwrap()),
        register_interval: Duration::from_secs(30),
        client: ClientArgs::default(),
        backend: BackendArgs {
            backend: BackendKind::Fake,
            fake_devices: Some(files.join("devices.yaml")),
            nvml_lib: None,
            health_hold: Duration::from_secs(10),
            health_window: Duration::from_secs(60),
        },
        config: ConfigArgs {
            config_file: Some(files.join("device-config.yaml")),
            node_config_file: files.join("config.json"),
            hook_path: files.join("hook"),
            libvgpu_version: None,
        },
        fake_workload: false,
        fake_workload_interval: Duration::from_secs(5),
    }
}

#[tokio::test]
async fn fake_gpus_register_publish_flip_health_and_allocate() {
    let files = tempfile::tempdir().unwrap();
    std::fs::write(files.path().join("devices.yaml"), DEVICES).unwrap();
    std::fs::write(
        files.path().join("device-config.yaml"),
        "nvidia:\n  resourceCountName: nvidia.com/gpu\n  deviceSplitCount: 10\n  libCudaLogLevel: '1'\n",
    )
    .unwrap();
    std::fs::write(
        files.path().join("config.json"),
        format!(r#"{{"nodeconfig":[{{"name":"{NODE}","devicesplitcount":3}}]}}"#),
    )
    .unwrap();

    let api = ApiServer::start().await.unwrap();
    let client = kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": NODE}})).unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let kubelet = Kubelet::start_with(KubeletOptions {
        node_name: Some(NODE.into()),
        ..Default::default()
    })
    .await
    .unwrap();

    let args = serve_args(kubelet.dir(), files.path());
    let cfg = plugin_config(&args).unwrap();
    assert_eq!(cfg.split_count, 3, "node override wins");
    let backend = std::sync::Arc::new(FakeBackend::new(files.path().join("devices.yaml")));
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_addr = admin.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve(cfg, backend, client.clone(), admin, shutdown.clone()));

    assert!(kubelet.wait_for_healthy("nvidia.com/gpu", 6, WAIT).await);
    let v = wait_annotation(&client, "hami.io/node-nvidia-register", |_| true).await;
    assert_eq!(
        v,
        r#"[{"id":"GPU-fake-0","count":3,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4","mode":"hami-core","health":true},{"id":"GPU-fake-1","index":1,"count":3,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4","numa":1,"mode":"hami-core","health":true}]"#
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    while http_get(admin_addr, "/readyz").await.0 != 200 {
        assert!(tokio::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, metrics) = http_get(admin_addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        metrics.contains(r#"hami_device_plugin_registrations_total{result="ok"} 1"#),
        "{metrics}"
    );

    // Flip a GPU's health in the file.
    std::fs::write(
        files.path().join("devices.yaml"),
        DEVICES.replacen("numa: 1\n", "numa: 1\n    healthy: false\n", 1),
    )
    .unwrap();
    assert!(
        kubelet
            .wait_until(WAIT, |k| k.resource("nvidia.com/gpu").is_some_and(|r| r
                .unhealthy
                .len()
                == 3
                && r.healthy.len() == 3))
            .await
    );
    let v = wait_annotation(&client, "hami.io/node-nvidia-register", |v| {
        !v.ends_with(r#""health":true}]"#)
    })
    .await;
    let devs = hami_core::codec::decode_node_register(&v).unwrap();
    assert!(devs[0].health && !devs[1].health);

    // A pod the scheduler placed on GPU-fake-0.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "train", "namespace": "default", "annotations": {
            "hami.io/vgpu-node": NODE,
            "hami.io/vgpu-time": "1767225600",
            "hami.io/vgpu-devices-to-allocate": "GPU-fake-0,NVIDIA,4096,25:;",
            "hami.io/vgpu-devices-allocated": "GPU-fake-0,NVIDIA,4096,25:;",
            "hami.io/bind-phase": "allocating",
            "hami.io/bind-time": "1767225601",
        }},
        "spec": {"nodeName": NODE, "containers": [{"name": "cuda", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }))
    .unwrap();
    let pod = Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    let admitted = kubelet.admit(&pod).await.unwrap();
    let got = admitted.get("cuda", "nvidia.com/gpu").unwrap();
    assert_eq!(got.devices, ["GPU-fake-0-0"]);
    let envs = &got.response.envs;
    assert_eq!(envs["NVIDIA_VISIBLE_DEVICES"], "GPU-fake-0");
    assert_eq!(envs["CUDA_DEVICE_MEMORY_LIMIT_0"], "4096m");
    assert_eq!(envs["CUDA_DEVICE_SM_LIMIT"], "25");
    let hook = files.path().join("hook").display().to_string();
    assert!(envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"].starts_with(&format!("{hook}/vgpu/")));
    let pod = Api::<Pod>::namespaced(client.clone(), "default")
        .get("train")
        .await
        .unwrap();
    assert_eq!(
        pod.metadata.annotations.unwrap()["hami.io/bind-phase"],
        "success"
    );

    shutdown.cancel();
    tokio::time::timeout(WAIT, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!kubelet.dir().join("nvidia-gpu.sock").exists());
}

#[test]
fn the_binary_discovers_fake_gpus_and_refuses_to_serve_without_a_node_name() {
    let files = tempfile::tempdir().unwrap();
    std::fs::write(files.path().join("devices.yaml"), DEVICES).unwrap();
    let bin = env!("CARGO_BIN_EXE_hami-device-plugin-nvidia");
    let out = std::process::Command::new(bin)
        .args(["discover", "--backend", "fake", "--fake-devices"])
        .arg(files.path().join("devices.yaml"))
        .arg("--node-config-file")
        .arg(files.path().join("none.json"))
        .env_remove("NODE_NAME")
        .env_remove("CONFIG_FILE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["backend"], "fake");
    assert_eq!(report["split_count"], 10);
    assert_eq!(report["kubelet_devices"], 20);
    assert_eq!(report["devices"][1]["uuid"], "GPU-fake-1");
    assert_eq!(report["devices"][1]["type"], "NVIDIA-Tesla T4");
    let register =
        hami_core::codec::decode_node_register(report["register_annotation"].as_str().unwrap())
            .unwrap();
    assert_eq!(register.len(), 2);

    let out = std::process::Command::new(bin)
        .env_remove("NODE_NAME")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--node-name"));

    let out = std::process::Command::new(bin)
        .args([
            "discover",
            "--backend",
            "nvml",
            "--nvml-lib",
            "/nonexistent/libnvidia-ml.so.1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nvml: cannot initialise"), "{err}");
}
