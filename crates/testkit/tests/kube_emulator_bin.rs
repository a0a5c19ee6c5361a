//! The `kube-emulator` binary as scripts use it: load files, print the URL, write a
//! kubeconfig the kube client accepts, stop cleanly on SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

const BIN: &str = env!("CARGO_BIN_EXE_kube-emulator");

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kube-emulator-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts the binary and reads the URL from its first stdout line.
fn start(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line.trim().to_string())
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "kube-emulator did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn loads_files_writes_kubeconfig_and_stops_on_sigterm() {
    let dir = temp_dir("load");
    let yaml = dir.join("cluster.yaml");
    std::fs::write(
        &yaml,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n---\n\
         apiVersion: v1\nkind: List\nitems:\n\
         - {apiVersion: v1, kind: Node, metadata: {name: gpu-1}}\n\
         - {apiVersion: v1, kind: Node, metadata: {name: gpu-2}}\n",
    )
    .unwrap();
    let json = dir.join("pod.json");
    std::fs::write(
        &json,
        r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}"#,
    )
    .unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let (mut child, url) = start(&[
        "--load",
        yaml.to_str().unwrap(),
        "--load",
        json.to_str().unwrap(),
        "--kubeconfig-out",
        kubeconfig.to_str().unwrap(),
    ]);
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let kc = Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert_eq!(config.cluster_url.to_string().trim_end_matches('/'), url);
    let client = Client::try_from(config).unwrap();
    let nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(nodes, ["gpu-1", "gpu-2"]);
    let pod = Api::<Pod>::namespaced(client, "team-a")
        .get("p")
        .await
        .unwrap();
    assert_eq!(
        pod.spec.unwrap().scheduler_name.as_deref(),
        Some("default-scheduler")
    );

    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = wait_exit(&mut child);
    assert!(status.success(), "exit status {status:?}");
    let mut logs = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    assert!(logs.contains("loaded object"), "{logs}");
    assert!(logs.contains("kube-emulator stopping"), "{logs}");
}

#[test]
fn bad_files_fail_with_the_reason() {
    let dir = temp_dir("bad");
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["--load", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not served by the emulator"), "{err}");
    assert!(err.contains("bad.yaml"), "{err}");

    let out = Command::new(BIN)
        .args(["--load", dir.join("missing.yaml").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

#[test]
fn help_explains_every_flag_and_its_variable() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--listen",
        "KUBE_EMULATOR_LISTEN",
        "--load",
        "KUBE_EMULATOR_LOAD",
        "--kubeconfig-out",
        "KUBE_EMULATOR_KUBECONFIG_OUT",
        "--grace-scale",
        "--service-endpoint",
        "KUBE_EMULATOR_SERVICE_ENDPOINTS",
        "SIGTERM",
    ] {
        assert!(
            help.contains(needle),
            "{needle} missing from --help:\n{help}"
        );
    }
}

#[test]
fn listen_flag_and_environment_pick_the_port() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(BIN)
        .env("KUBE_EMULATOR_LISTEN", format!("127.0.0.1:{port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), format!("http://127.0.0.1:{port}"));
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert!(wait_exit(&mut child).success());
}
