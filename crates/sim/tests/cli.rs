//! `run_simulate` behaviour: listing, JSON shape, clear errors on bad input.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers

use std::io::Write;
use std::path::PathBuf;

use clap::Parser;
use hami_sim::{SimulateArgs, run_simulate};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: SimulateArgs,
}

fn args(extra: &[&str]) -> SimulateArgs {
    let mut v = vec!["hami-sim"];
    v.extend_from_slice(extra);
    Cli::try_parse_from(v).unwrap().args
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(text.as_bytes()).unwrap();
    p.display().to_string()
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hami-sim-test-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn lists_policies() {
    let out = run_simulate(&args(&["--list-policies"])).unwrap();
    let names: Vec<&str> = out.lines().collect();
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
        assert!(names.contains(&p), "{p} missing");
    }
}

#[test]
fn nodes_and_pods_are_required() {
    let v = vec!["hami-sim", "--policy", "fgd"];
    assert!(Cli::try_parse_from(v).is_err());
}

const NODES: &str =
    "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,4,V100M16\n";
const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n\
p0,4000,1024,1,500,\np1,4000,1024,1,1000,T4\np2,2000,0,0,0,\np3,4000,1024,2,1000,\np4,1000,10,1,250,V100M16|T4\n";

#[test]
fn json_shape_on_tiny_trace() {
    let d = tmpdir("json");
    let nodes = write(&d, "nodes.csv", NODES);
    let pods = write(&d, "pods.csv", PODS);
    let svg = d.join("curve.svg").display().to_string();
    for policy in [
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
        let out = run_simulate(&args(&[
            "--nodes",
            &nodes,
            "--pods",
            &pods,
            "--policy",
            policy,
            "--seeds",
            "1..3",
            "-o",
            "json",
            "--curve-out",
            &svg,
        ]))
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["policy"], policy);
        assert_eq!(v["trace"], "pods");
        assert_eq!(v["runs"].as_array().unwrap().len(), 3);
        for key in [
            "seed",
            "unallocated_pct_at_100",
            "unallocated_pct_at_130",
            "elapsed_ms",
        ] {
            assert!(v["runs"][0].get(key).is_some(), "{key}");
        }
        for key in [
            "mean_unallocated_pct_at_100",
            "sd_unallocated_pct_at_100",
            "mean_unallocated_pct_at_130",
        ] {
            assert!(v[key].is_number(), "{policy}: {key} = {}", v[key]);
        }
    }
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    let text = run_simulate(&args(&["--nodes", &nodes, "--pods", &pods, "--seeds", "7"])).unwrap();
    assert!(text.contains("fgd"));
}

#[test]
fn clear_errors_for_bad_input() {
    let d = tmpdir("bad");
    let nodes = write(&d, "nodes.csv", NODES);
    let pods = write(&d, "pods.csv", PODS);
    let missing = d.join("nope.csv").display().to_string();
    let err = run_simulate(&args(&["--nodes", &missing, "--pods", &pods]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("nope.csv"), "{err}");

    let garbage = write(
        &d,
        "garbage.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,1024,1,500\np1,lots,1,1,1\n",
    );
    let err = run_simulate(&args(&["--nodes", &nodes, "--pods", &garbage]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("garbage.csv:3") && err.contains("cpu_milli"),
        "{err}"
    );

    let short = write(
        &d,
        "short.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000\n",
    );
    let err = run_simulate(&args(&["--nodes", &nodes, "--pods", &short]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("short.csv:2"), "{err}");

    let nocol = write(&d, "nocol.csv", "sn,cpu\nn0,1\n");
    let err = run_simulate(&args(&["--nodes", &nocol, "--pods", &pods]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing column"), "{err}");

    let bin = write(&d, "bin.csv", "\u{0}\u{1}garbage");
    assert!(run_simulate(&args(&["--nodes", &bin, "--pods", &pods])).is_err());

    let err = run_simulate(&args(&[
        "--nodes", &nodes, "--pods", &pods, "--policy", "magic",
    ]))
    .unwrap_err()
    .to_string();
    assert!(err.contains("unknown policy"), "{err}");
    let err = run_simulate(&args(&[
        "--nodes", &nodes, "--pods", &pods, "--seeds", "9..1",
    ]))
    .unwrap_err()
    .to_string();
    assert!(err.contains("--seeds"), "{err}");
}

/// `hamictl simulate` shows the fragmentation rate and the failed-task histogram: a pod
/// asking more GPUs than any node has fails in every run and is listed with its shape.
#[test]
fn frag_rate_and_failed_tasks_are_reported() {
    let d = tmpdir("failed");
    // 10 GPUs: the pods' 11,750 milli stay under 1.3 × capacity, so none is dropped by tuning.
    let nodes = write(
        &d,
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,4,V100M16\n\
         n2,32000,65536,4,V100M16\n",
    );
    let pods = write(&d, "pods.csv", &format!("{PODS}p5,4000,1024,8,1000,\n"));
    let base = [
        "--nodes", &nodes, "--pods", &pods, "--seeds", "1..3", "--policy",
    ];
    let json = |policy: &str| {
        let mut a = base.to_vec();
        a.extend_from_slice(&[policy, "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&run_simulate(&args(&a)).unwrap()).unwrap();
        v
    };
    for policy in ["fgd", "hami-frag"] {
        let v = json(policy);
        let rate = v["mean_frag_rate_pct_at_100"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&rate), "{policy}: frag rate {rate}");
        let failed = v["failed_tasks"].as_array().unwrap();
        let eight = failed
            .iter()
            .find(|f| f["num_gpu"] == 8)
            .unwrap_or_else(|| panic!("{policy}: no 8-GPU entry in {failed:?}"));
        assert_eq!(eight["cpu_milli"], 4000);
        assert_eq!(eight["gpu_milli"], 1000);
        assert!(eight["mean_count"].as_f64().unwrap() >= 1.0, "{eight}");
    }
    let mut a = base.to_vec();
    a.push("hami-frag");
    let text = run_simulate(&args(&a)).unwrap();
    assert!(text.contains("frag rate@100 %"), "{text}");
    let failed_section = text
        .split("failed tasks up to arrived = 100%")
        .nth(1)
        .unwrap_or_else(|| panic!("no failed-task section in {text}"));
    assert!(
        failed_section.lines().any(|l| l.starts_with("hami-frag")
            && l.split_whitespace().nth(1) == Some("4000")
            && l.split_whitespace().nth(2) == Some("8")),
        "{failed_section}"
    );
}
