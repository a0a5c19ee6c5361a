//! `hamictl` end to end: the real binary on hand-written inputs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn hamictl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hamictl"))
        .args(args)
        .output()
        .expect("hamictl runs")
}

fn example(name: &str) -> String {
    let p: PathBuf = [env!("CARGO_MANIFEST_DIR"), "..", "..", "examples", name]
        .iter()
        .collect();
    p.to_string_lossy().into_owned()
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "hamictl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

#[test]
fn decode_node_register_json_and_legacy() {
    let v = json_of(&hamictl(&[
        "decode",
        "node-register",
        r#"[{"id":"GPU-0","count":5,"devmem":8192,"devcore":100,"type":"NVIDIA-Tesla P4","numa":0,"health":true,"index":0}]"#,
    ]));
    assert_eq!(v[0]["id"], "GPU-0");
    assert_eq!(v[0]["count"], 5);
    assert_eq!(v[0]["devmem"], 8192);
    assert_eq!(v[0]["health"], true);
    let keys: Vec<&str> = v[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut expected = vec![
        "id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health",
    ];
    expected.sort();
    let mut keys_sorted = keys.clone();
    keys_sorted.sort();
    assert_eq!(keys_sorted, expected);

    let v = json_of(&hamictl(&[
        "decode",
        "node-register",
        "GPU-ebe7,10,7680,100,NVIDIA-Tesla P4,0,true,0,hami-core:",
    ]));
    assert_eq!(v[0]["id"], "GPU-ebe7");
    assert_eq!(v[0]["mode"], "hami-core");
}

#[test]
fn decode_rejects_garbage_with_exit_1() {
    let out = hamictl(&["decode", "node-register", "no separator here"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("node annotation missing device separator"),
        "{err}"
    );

    let out = hamictl(&["decode", "pod-devices", "GPU-1,NVIDIA,abc,3:;"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn decode_pod_devices_keeps_containers() {
    let v = json_of(&hamictl(&[
        "decode",
        "pod-devices",
        "GPU-a,NVIDIA,500,3:;;GPU-b,NVIDIA,1000,0:GPU-c,NVIDIA,1000,0:;",
    ]));
    let containers = v.as_array().unwrap();
    assert_eq!(containers.len(), 4, "{v}");
    assert_eq!(containers[0][0]["uuid"], "GPU-a");
    assert_eq!(containers[0][0]["usedmem"], 500);
    assert_eq!(containers[0][0]["usedcores"], 3);
    assert_eq!(containers[0][0]["type"], "NVIDIA");
    assert!(containers[1].as_array().unwrap().is_empty());
    assert_eq!(containers[2].as_array().unwrap().len(), 2);
}

#[test]
fn explain_example_snapshot_as_json() {
    let v = json_of(&hamictl(&[
        "explain",
        "--snapshot",
        &example("snapshot.json"),
        "--pod",
        &example("pod.yaml"),
        "-o",
        "json",
    ]));
    // Binpack on nodes: the A100 node is the fullest that fits (train-0 holds 20000 MiB).
    assert_eq!(v["node"], "gpu-a100-1", "{v}");
    // GPU binpack: the used A100 (GPU 0) is the fullest card with room.
    assert_eq!(v["containers"][0][0]["uuid"], "GPU-a100-1-0");
    assert_eq!(v["containers"][0][0]["usedmem"], 8000);
    assert_eq!(v["containers"][0][0]["usedcores"], 30);
    assert_eq!(
        v["annotations"]["hami.io/vgpu-devices-allocated"],
        "GPU-a100-1-0,NVIDIA,8000,30:;"
    );
    assert_eq!(v["annotations"]["hami.io/vgpu-node"], "gpu-a100-1");
    assert!(
        v["annotations"]["hami.io/vgpu-time"]
            .as_str()
            .unwrap()
            .parse::<i64>()
            .is_ok()
    );
    assert_eq!(v["failed_nodes"]["cpu-1"], "node unregistered");
    // T4: GPU 0 has 3360 MiB left, GPU 1 is cordoned.
    assert_eq!(
        v["failed_nodes"]["gpu-t4-1"],
        "1/2 CardCordoned, 1/2 CardInsufficientMemory"
    );
    // V100: GPU 0 has 2768 MiB left (memory is checked before cores), GPU 1 is unhealthy.
    assert_eq!(
        v["failed_nodes"]["gpu-v100-1"],
        "1/2 CardInsufficientMemory, 1/2 CardNotHealth"
    );
    // Both A100 nodes fit; binpack took the fuller one.
    let s1 = v["scores"]["gpu-a100-1"].as_f64().unwrap();
    let s2 = v["scores"]["gpu-a100-2"].as_f64().unwrap();
    assert!(s1 > s2, "{s1} <= {s2}");
}

#[test]
fn explain_text_names_the_reasons() {
    let out = hamictl(&[
        "explain",
        "--snapshot",
        &example("snapshot.json"),
        "--pod",
        &example("pod.yaml"),
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("<- chosen"), "{text}");
    assert!(text.contains("CardCordoned"), "{text}");
    assert!(text.contains("placed on gpu-a100-1"), "{text}");
}

#[test]
fn explain_reports_bad_files_clearly() {
    let dir = std::env::temp_dir().join(format!("hamictl-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let garbage = dir.join("garbage.json");
    std::fs::write(&garbage, "{{{ not json: [").unwrap();
    let out = hamictl(&[
        "explain",
        "--snapshot",
        garbage.to_str().unwrap(),
        "--pod",
        &example("pod.yaml"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("neither JSON"));

    let out = hamictl(&[
        "explain",
        "--snapshot",
        "/nonexistent.json",
        "--pod",
        &example("pod.yaml"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));

    let bad_pod = dir.join("pod.yaml");
    std::fs::write(
        &bad_pod,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - name: c\n    resources:\n      limits:\n        nvidia.com/gpu: \"1\"\n        nvidia.com/gpumem: 16Gi\n",
    )
    .unwrap();
    let out = hamictl(&[
        "explain",
        "--snapshot",
        &example("snapshot.json"),
        "--pod",
        bad_pod.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("16Gi") && err.contains("plain non-negative integer"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn explain_reads_the_device_config_as_the_services_do() {
    let dir = tempfile::tempdir().unwrap();
    let explain = |config: &str| {
        hamictl(&[
            "explain",
            "--snapshot",
            &example("snapshot.json"),
            "--pod",
            &example("pod.yaml"),
            "--config",
            config,
            "-o",
            "json",
        ])
    };
    let missing = dir.path().join("missing.yaml");
    let out = explain(missing.to_str().unwrap());
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot read device config {}", missing.display())),
        "{err}"
    );

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "nvidia:\n  memoryFactor: 0\n").unwrap();
    let out = explain(bad.to_str().unwrap());
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("device config {}: ", bad.display())) && err.contains("memoryFactor"),
        "{err}"
    );

    let partial = dir.path().join("partial.yaml");
    std::fs::write(&partial, "nvidia:\n  deviceSplitCount: 10\n").unwrap();
    let v = json_of(&explain(partial.to_str().unwrap()));
    assert!(v["failed_nodes"].is_object(), "{v}");
}

#[test]
fn explain_rejects_unknown_policy_flags() {
    let out = hamictl(&[
        "explain",
        "--snapshot",
        &example("snapshot.json"),
        "--pod",
        &example("pod.yaml"),
        "--gpu-policy",
        "binpak",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("binpak"));
}

#[test]
fn simulate_lists_policies_and_replays_a_small_trace() {
    let out = hamictl(&["simulate", "--list-policies"]);
    assert!(out.status.success());
    let names = String::from_utf8_lossy(&out.stdout);
    for p in [
        "random",
        "dotprod",
        "clustering",
        "packing",
        "bestfit",
        "fgd",
        "hami-binpack",
        "hami-spread",
        "hami-frag",
    ] {
        assert!(names.lines().any(|l| l == p), "{p} missing from {names}");
    }

    let dir = std::env::temp_dir().join(format!("hamictl-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let nodes = dir.join("nodes.csv");
    let pods = dir.join("pods.csv");
    std::fs::write(
        &nodes,
        "sn,cpu_milli,memory_mib,gpu,model\nnode-0,64000,262144,2,T4\nnode-1,64000,262144,4,V100M32\n",
    )
    .unwrap();
    std::fs::write(
        &pods,
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np-0,4000,1000,1,500,\np-1,8000,2000,1,1000,V100M32\np-2,4000,1000,2,1000,\np-3,2000,1000,1,250,T4\n",
    )
    .unwrap();
    let v = json_of(&hamictl(&[
        "simulate",
        "--nodes",
        nodes.to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
        "--policy",
        "hami-binpack",
        "--seeds",
        "1..3",
        "-o",
        "json",
    ]));
    assert_eq!(v["policy"], "hami-binpack");
    assert_eq!(v["runs"].as_array().unwrap().len(), 3);
    for run in v["runs"].as_array().unwrap() {
        let u = run["unallocated_pct_at_130"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&u), "{run}");
    }
    assert!(v["mean_unallocated_pct_at_100"].is_number());

    let out = hamictl(&[
        "simulate",
        "--nodes",
        "/nonexistent.csv",
        "--pods",
        pods.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    std::fs::remove_dir_all(&dir).ok();
}

/// Unbound pods count only within the reservation timeout of their decision, as in
/// hami-scheduler; `--now` and `--reservation-timeout` set the judgement.
#[test]
fn explain_counts_unbound_pods_until_their_reservation_expires() {
    let mut snapshot: Value =
        serde_json::from_str(&std::fs::read_to_string(example("snapshot.json")).unwrap()).unwrap();
    let all_of_a100_2: String = (0..4)
        .map(|i| format!("GPU-a100-2-{i},NVIDIA,40000,10:"))
        .collect::<String>()
        + ";";
    snapshot["items"].as_array_mut().unwrap().push(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "waiting", "namespace": "ml", "uid": "u-waiting", "annotations": {
            "hami.io/vgpu-node": "gpu-a100-2",
            "hami.io/vgpu-time": "1800000000",
            "hami.io/vgpu-devices-allocated": all_of_a100_2,
        }},
        "spec": {"schedulerName": "hami-scheduler", "containers": [{"name": "main", "image": "cuda"}]},
        "status": {"phase": "Pending"}
    }));
    let dir = std::env::temp_dir().join(format!("hamictl-expiry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("snapshot.json");
    std::fs::write(&path, snapshot.to_string()).unwrap();
    let pod = example("pod.yaml");
    let explain = |extra: &[&str]| {
        let mut args = vec![
            "explain",
            "--snapshot",
            path.to_str().unwrap(),
            "--pod",
            &pod,
            "-o",
            "json",
        ];
        args.extend_from_slice(extra);
        json_of(&hamictl(&args))
    };
    let held = explain(&["--now", "1800000010"]);
    assert_eq!(
        held["failed_nodes"]["gpu-a100-2"], "4/4 CardInsufficientMemory",
        "{held}"
    );
    let expired = explain(&["--now", "1800000120"]);
    assert!(expired["scores"]["gpu-a100-2"].is_number(), "{expired}");
    let short = explain(&["--now", "1800000010", "--reservation-timeout", "5s"]);
    assert!(short["scores"]["gpu-a100-2"].is_number(), "{short}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn decode_node_register_for_other_vendors() {
    // Hygon DCU: the legacy string its plugin writes.
    let v = json_of(&hamictl(&[
        "decode",
        "node-register",
        "--vendor",
        "dcu",
        "DCU-0,4,16384,100,DCU-Z100,0,true,0,hami-core:",
    ]));
    assert_eq!(v[0]["id"], "DCU-0");
    assert_eq!(v[0]["count"], 4);
    assert_eq!(v[0]["devmem"], 16384);
    assert_eq!(v[0]["type"], "DCU-Z100");

    // AMD: JSON, compute units as cores.
    let v = json_of(&hamictl(&[
        "decode",
        "node-register",
        "--vendor",
        "AMD",
        r#"[{"id":"0c3a-amd","count":4,"devmem":196608,"devcore":304,"type":"MI300X","numa":0,"health":true,"index":0}]"#,
    ]));
    assert_eq!(v[0]["devcore"], 304);
    assert_eq!(v[0]["type"], "MI300X");

    // Cambricon: devices from node capacity, IDs from the node name.
    let v = json_of(&hamictl(&[
        "decode",
        "node-register",
        "--vendor",
        "cambricon",
        "--node",
        "mlu-1",
        "cambricon.com/mlu.smlu.vcore=200,cambricon.com/mlu.smlu.vmemory=192",
    ]));
    let ids: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["mlu-1-cambricon-mlu-0", "mlu-1-cambricon-mlu-1"]);
    assert_eq!(v[1]["devmem"], 96 * 256);

    // Ascend needs no switch here: every family is decodable.
    let v = json_of(&hamictl(&[
        "decode",
        "node-register",
        "--vendor",
        "ascend910b3",
        r#"[{"id":"npu-0","count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,"customInfo":{"NetworkID":1}}]"#,
    ]));
    assert_eq!(v[0]["type"], "Ascend910B3");

    // Enflame DRS: the capacity annotation of its DRS plugin, one device per GCU.
    let v = json_of(&hamictl(&[
        "decode",
        "node-register",
        "--vendor",
        "enflame",
        "--node",
        "gcu-1",
        r#"{"devices":[{"index":"0","minor":"0","capacity":6}],"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}"#,
    ]));
    assert_eq!(v[0]["id"], "gcu-1-enflame-drs-0");
    assert_eq!(v[0]["count"], 6);
    assert_eq!(v[0]["devmem"], 40 * 1024);
    assert_eq!(v[0]["type"], "Enflame");
    assert_eq!(v[0]["custominfo"]["profiles"]["3g.20gb"], "1");
}

#[test]
fn decode_names_the_vendor_and_input_when_it_fails() {
    let out = hamictl(&["decode", "node-register", "--vendor", "dcu", "DCU-0,4"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid DCU inventory (hami.io/node-dcu-register)"),
        "{err}"
    );

    let out = hamictl(&["decode", "node-register", "--vendor", "mlu", "200"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("MLU devices come from node capacity: give it as resource=count pairs"),
        "{err}"
    );

    let out = hamictl(&["decode", "node-register", "--vendor", "voodoo", "x"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown vendor \"voodoo\"") && err.contains("DCU") && err.contains("MLU"),
        "{err}"
    );
}

/// A node of a mixed-vendor snapshot.
fn node(name: &str, annotations: Value, capacity: Value) -> Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": name, "annotations": annotations },
        "status": { "capacity": capacity.clone(), "allocatable": capacity }
    })
}

fn pod_asking(name: &str, containers: &[Value]) -> Value {
    let containers: Vec<Value> = containers
        .iter()
        .enumerate()
        .map(|(i, limits)| {
            serde_json::json!({
                "name": format!("c{i}"),
                "image": "busybox",
                "resources": { "limits": limits }
            })
        })
        .collect();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": "default", "uid": format!("uid-{name}") },
        "spec": { "schedulerName": "hami-scheduler", "containers": containers }
    })
}

#[test]
fn explain_places_pods_on_a_mixed_vendor_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let nvidia = r#"[{"id":"GPU-nv-0","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4","health":true}]"#;
    let dcu = "DCU-dcu-0,4,16384,100,DCU-Z100,0,true,0,hami-core:";
    let npu = r#"[{"id":"npu-0","count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true}]"#;
    let snapshot = serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            node("nv-1", serde_json::json!({"hami.io/node-nvidia-register": nvidia}), serde_json::json!({"nvidia.com/gpu": "10"})),
            node("dcu-1", serde_json::json!({"hami.io/node-dcu-register": dcu}), serde_json::json!({})),
            node("both-1", serde_json::json!({"hami.io/node-nvidia-register": nvidia.replace("GPU-nv", "GPU-both"), "hami.io/node-dcu-register": dcu.replace("DCU-dcu", "DCU-both")}), serde_json::json!({"nvidia.com/gpu": "10"})),
            node("mlu-1", serde_json::json!({}), serde_json::json!({"cambricon.com/mlu.smlu.vcore": "200", "cambricon.com/mlu.smlu.vmemory": "192"})),
            node("npu-1", serde_json::json!({"hami.io/node-register-Ascend910B3": npu}), serde_json::json!({})),
            node("broken-1", serde_json::json!({"hami.io/node-dcu-register": "garbage", "hami.io/node-nvidia-register": nvidia.replace("GPU-nv", "GPU-broken")}), serde_json::json!({})),
        ]
    });
    let snap_path = dir.path().join("snapshot.json");
    std::fs::write(&snap_path, serde_json::to_vec(&snapshot).unwrap()).unwrap();
    let explain = |name: &str, containers: &[Value], extra: &[&str]| {
        let pod_path = dir.path().join(format!("{name}.json"));
        std::fs::write(
            &pod_path,
            serde_json::to_vec(&pod_asking(name, containers)).unwrap(),
        )
        .unwrap();
        let mut args = vec![
            "explain",
            "--snapshot",
            snap_path.to_str().unwrap(),
            "--pod",
            pod_path.to_str().unwrap(),
            "--now",
            "1700000000",
            "-o",
            "json",
        ];
        args.extend_from_slice(extra);
        hamictl(&args)
    };

    // A DCU pod: either DCU node, binpack ties to the first name; the broken node's DCU
    // register takes only its DCUs out.
    let out = explain(
        "dcu",
        &[serde_json::json!({"hygon.com/dcunum": "1", "hygon.com/dcumem": "2048"})],
        &[],
    );
    let v = json_of(&out);
    assert_eq!(v["node"], "both-1", "{v}");
    assert_eq!(
        v["annotations"]["hami.io/dcu-devices-allocated"],
        "DCU-both-0,DCU,2048,100:;"
    );
    assert_eq!(
        v["annotations"]["hami.io/dcu-devices-to-allocate"],
        "DCU-both-0,DCU,2048,100:;"
    );
    assert!(v["failed_nodes"]["broken-1"].is_string(), "{v}");
    assert!(v["failed_nodes"]["nv-1"].is_string(), "{v}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("node broken-1: hami.io/node-dcu-register"),
        "{err}"
    );

    // NVIDIA and DCU in one pod: only the node with both.
    let v = json_of(&explain(
        "mixed",
        &[
            serde_json::json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
            serde_json::json!({"hygon.com/dcunum": "1"}),
        ],
        &[],
    ));
    assert_eq!(v["node"], "both-1", "{v}");
    assert_eq!(
        v["annotations"]["hami.io/vgpu-devices-allocated"],
        "GPU-both-0,NVIDIA,1000,0:;;"
    );
    assert_eq!(
        v["annotations"]["hami.io/dcu-devices-allocated"],
        ";DCU-both-0,DCU,16384,100:;"
    );

    // Cambricon from node capacity, with its profile annotation.
    let v = json_of(&explain(
        "mlu",
        &[serde_json::json!({"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "4"})],
        &[],
    ));
    assert_eq!(v["node"], "mlu-1", "{v}");
    // Two equal MLUs: the last registered is taken, as HAMi's walk does.
    assert_eq!(v["annotations"]["CAMBRICON_DSMLU_PROFILE"], "1_100_4");

    // Ascend only with --enable-ascend, as on the scheduler.
    let npu_pod = [
        serde_json::json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "10000"}),
    ];
    let v = json_of(&explain("npu", &npu_pod, &[]));
    assert!(v["node"].is_null(), "{v}");
    let v = json_of(&explain("npu", &npu_pod, &["--enable-ascend"]));
    assert_eq!(v["node"], "npu-1", "{v}");
    assert_eq!(
        v["annotations"]["hami.io/Ascend910B3-devices-allocated"],
        "npu-0,Ascend910B3,16384,0:;"
    );
    assert_eq!(
        v["annotations"]["huawei.com/Ascend910B3"],
        r#"[{"UUID":"npu-0","temp":"vir05_1c_16g","memory":16384}]"#
    );
    assert_eq!(v["annotations"]["predicate-time"], "1700000000");
}
