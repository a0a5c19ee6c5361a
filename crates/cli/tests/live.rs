//! `hamictl` (and `kubectl-hami`) on a live cluster: the real binaries against
//! kube-emulator (started from its own flags, `--load` and `--kubeconfig-out`, in this
//! process) holding the example snapshot's nodes and pods.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clap::Parser;
use hami_testkit::ApiServer;
use hami_testkit::emulator::{Cli as EmulatorCli, start};
use serde_json::Value;

const HAMICTL: &str = env!("CARGO_BIN_EXE_hamictl");
const KUBECTL_HAMI: &str = env!("CARGO_BIN_EXE_kubectl-hami");

fn example(name: &str) -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "..", "..", "examples", name]
        .iter()
        .collect()
}

/// kube-emulator with the example snapshot loaded, the example pod created (pending)
/// and a kubeconfig for it.
struct Live {
    _server: ApiServer,
    dir: tempfile::TempDir,
}

impl Live {
    async fn start(extra: &[(&str, &str)]) -> Live {
        let dir = tempfile::tempdir().unwrap();
        let namespace = dir.path().join("namespace.yaml");
        std::fs::write(
            &namespace,
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\n",
        )
        .unwrap();
        let mut load = vec![namespace, example("snapshot.json"), example("pod.yaml")];
        for (name, text) in extra {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            load.push(path);
        }
        let kubeconfig = dir.path().join("kubeconfig");
        let mut args: Vec<String> = vec!["kube-emulator".into()];
        for l in &load {
            args.push(format!("--load={}", l.display()));
        }
        args.push(format!("--kubeconfig-out={}", kubeconfig.display()));
        let cli = EmulatorCli::try_parse_from(args).unwrap();
        let server = start(&cli).await.unwrap();
        Live {
            _server: server,
            dir,
        }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Runs `bin ARGS --kubeconfig K` off the runtime that serves the emulator.
    async fn run(&self, bin: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .env_remove("NO_COLOR")
            .env_remove("CLICOLOR_FORCE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap()
    }

    async fn json(&self, args: &[&str]) -> (Value, Option<i32>) {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.run(HAMICTL, &all, &[]).await;
        let text = String::from_utf8_lossy(&out.stdout);
        let v = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "{args:?}: not JSON ({e}): {text}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (v, out.status.code())
    }
}

fn offline(args: &[&str]) -> Value {
    let out = Command::new(HAMICTL).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

const TOO_BIG: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: huge, namespace: ml}\n\
spec:\n  schedulerName: hami-scheduler\n  containers:\n  - name: main\n    image: cuda\n    \
resources: {limits: {nvidia.com/gpu: \"1\", nvidia.com/gpumem: \"100000\"}}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_pod_on_the_api_server_answers_as_on_its_snapshot() {
    let live = Live::start(&[]).await;
    let (v, code) = live.json(&["explain", "pod", "notebook", "-n", "ml"]).await;
    assert_eq!(code, Some(0), "{v}");
    let snap = example("snapshot.json");
    let pod = example("pod.yaml");
    let o = offline(&[
        "explain",
        "--snapshot",
        snap.to_str().unwrap(),
        "--pod",
        pod.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(v["pod"], "ml/notebook");
    for key in ["node", "containers", "failed_nodes", "scores"] {
        assert_eq!(v[key], o[key], "{key}");
    }
    assert_eq!(v["node"], "gpu-a100-1");
    assert_eq!(
        v["failed_nodes"]["gpu-t4-1"],
        "1/2 CardCordoned, 1/2 CardInsufficientMemory"
    );
    // The same as YAML.
    let yaml = live
        .run(
            HAMICTL,
            &["explain", "pod", "notebook", "-n", "ml", "-o", "yaml"],
            &[],
        )
        .await;
    let from_yaml: Value = serde_yaml_ng::from_slice(&yaml.stdout).unwrap();
    assert_eq!(from_yaml["failed_nodes"], v["failed_nodes"]);
    assert_eq!(from_yaml["node"], v["node"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_exit_status_tells_scripts_whether_the_pod_fits() {
    let live = Live::start(&[("huge.yaml", TOO_BIG)]).await;
    let (v, code) = live.json(&["explain", "pod", "huge", "-n", "ml"]).await;
    assert_eq!(code, Some(3), "no node fits: {v}");
    assert_eq!(v["node"], Value::Null);
    assert_eq!(
        v["failed_nodes"]["gpu-a100-2"],
        "4/4 CardInsufficientMemory"
    );
    assert_eq!(v["failed_nodes"]["cpu-1"], "node unregistered");

    // --what-if: a manifest that is not in the cluster.
    let manifest = live.dir.path().join("what-if.yaml");
    std::fs::write(&manifest, TOO_BIG.replace("huge", "maybe")).unwrap();
    let (w, code) = live
        .json(&["explain", "pod", "--what-if", manifest.to_str().unwrap()])
        .await;
    assert_eq!(code, Some(3));
    assert_eq!(w["pod"], "ml/maybe");
    assert_eq!(w["failed_nodes"], v["failed_nodes"]);

    let missing = live
        .run(HAMICTL, &["explain", "pod", "ghost", "-n", "ml"], &[])
        .await;
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("pod ml/ghost not found"), "{err}");

    let bad = live
        .run(
            HAMICTL,
            &["explain", "pod", "x", "--gpu-policy", "binpak"],
            &[],
        )
        .await;
    assert_eq!(bad.status.code(), Some(2));

    // Text: the reasons, aligned, no colour on a pipe.
    let text = live
        .run(HAMICTL, &["explain", "pod", "huge", "-n", "ml"], &[])
        .await;
    assert_eq!(text.status.code(), Some(3));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("no node fits"), "{text}");
    assert!(
        text.contains("now Pending, not bound to a node") || text.contains("not bound"),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "colour on a pipe: {text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_gpus_shows_allocations_and_their_pods() {
    let live = Live::start(&[]).await;
    let (v, code) = live.json(&["top", "gpus"]).await;
    assert_eq!(code, Some(0));
    let gpus = v["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 12, "{v}");
    let a100 = gpus.iter().find(|g| g["uuid"] == "GPU-a100-1-0").unwrap();
    assert_eq!(
        a100["memory_mib"],
        serde_json::json!({"used": 20000, "total": 40960})
    );
    assert_eq!(a100["pods"][0]["name"], "train-0");
    // The finished job holds nothing.
    assert!(
        gpus.iter()
            .flat_map(|g| g["pods"].as_array().unwrap())
            .all(|p| p["name"] != "old-job")
    );
    let snap = example("snapshot.json");
    let o = offline(&[
        "top",
        "gpus",
        "--snapshot",
        snap.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(
        o, v,
        "the API server and its snapshot give the same numbers"
    );

    let text = live
        .run(HAMICTL, &["top", "gpus", "--node", "gpu-t4-1"], &[])
        .await;
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("NODE"), "{text}");
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[1].contains("12000/15360") && lines[1].contains("ml/infer-0"),
        "{text}"
    );
    // Columns line up: every row puts MODEL where the header does.
    let col = lines[0].find("MODEL").unwrap();
    assert!(
        lines[1..].iter().all(|l| l[col..].starts_with("NVIDIA")),
        "{text}"
    );

    let wide = live.run(HAMICTL, &["top", "gpus", "-o", "wide"], &[]).await;
    let wide = String::from_utf8_lossy(&wide.stdout);
    assert!(
        wide.contains("UUID") && wide.contains("cordoned") && wide.contains("unhealthy"),
        "{wide}"
    );
    assert!(wide.contains("ml/train-0(20000MiB,50%)"), "{wide}");

    let colored = live
        .run(
            HAMICTL,
            &["top", "gpus", "-o", "wide"],
            &[("CLICOLOR_FORCE", "1")],
        )
        .await;
    assert!(String::from_utf8_lossy(&colored.stdout).contains("\u{1b}["));

    let unknown = live
        .run(HAMICTL, &["top", "gpus", "--node", "nope"], &[])
        .await;
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("node nope not found"));
    let cpu = live
        .run(HAMICTL, &["top", "gpus", "--node", "cpu-1"], &[])
        .await;
    assert_eq!(cpu.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&cpu.stderr)
            .contains("node cpu-1 has no GPUs to show: node unregistered")
    );
}

/// A vGPU monitor that answers one scrape with `text`.
fn fake_monitor(text: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
            line.clear();
        }
        let mut stream = stream;
        write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
            text.len()
        )
        .unwrap();
    });
    format!("http://{addr}/metrics")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_gpus_adds_what_the_monitors_report() {
    let live = Live::start(&[]).await;
    let url = fake_monitor(
        "# TYPE hami_vgpu_memory_used_bytes gauge\n\
         hami_vgpu_memory_used_bytes{namespace=\"ml\",pod=\"train-0\",container=\"main\",vdevice_index=\"0\",device_uuid=\"GPU-a100-1-0\"} 5242880000\n\
         # TYPE hami_container_device_utilization_ratio gauge\n\
         hami_container_device_utilization_ratio{namespace=\"ml\",pod=\"train-0\",container=\"main\",vdevice_index=\"0\",device_uuid=\"GPU-a100-1-0\"} 42\n\
         # EOF\n",
    );
    let out = live
        .run(
            HAMICTL,
            &["top", "gpus", "--node", "gpu-a100-1", "--monitor", &url],
            &[],
        )
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].contains("IN-USE(MiB)") && lines[0].contains("SM%"),
        "{text}"
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert!(row.windows(2).any(|w| w == ["5000", "42"]), "{text}");

    let bad = live
        .run(
            HAMICTL,
            &[
                "top",
                "gpus",
                "--monitor",
                "https://example.invalid/metrics",
            ],
            &[],
        )
        .await;
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("plain http://"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_hami_is_the_same_program_as_a_kubectl_plugin() {
    let live = Live::start(&[]).await;
    let help = Command::new(KUBECTL_HAMI).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("Usage: kubectl hami"), "{help}");
    let plugin = live
        .run(KUBECTL_HAMI, &["top", "gpus", "-o", "json"], &[])
        .await;
    let direct = live.run(HAMICTL, &["top", "gpus", "-o", "json"], &[]).await;
    assert!(plugin.status.success());
    assert_eq!(plugin.stdout, direct.stdout);
    // A link named kubectl-hami to hamictl is the plugin too (argv[0]).
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("kubectl-hami");
    std::os::unix::fs::symlink(Path::new(HAMICTL), &link).unwrap();
    let via_link = Command::new(&link).arg("--help").output().unwrap();
    assert!(String::from_utf8_lossy(&via_link.stdout).contains("Usage: kubectl hami"));
}
