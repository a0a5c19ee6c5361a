//! The traces bundled under `data/`: gzip read transparently, every variant the
//! simulator's documentation reports on is there (and nothing else), each loads.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Parser;
use hami_sim::data::{openb, repo_data_dir};
use hami_sim::{Experiment, SimulateArgs, run_simulate};

const NODES: &str =
    "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,4,V100M16\n";
const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n\
p0,4000,1024,1,500,\np1,4000,1024,1,1000,T4\np2,2000,0,0,0,\np3,4000,1024,2,1000,\n";

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hami-sim-data-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write_plain(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

fn write_gz(path: &Path, text: &str) {
    let file = std::fs::File::create(path).unwrap();
    let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    gz.write_all(text.as_bytes()).unwrap();
    gz.finish().unwrap();
}

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: SimulateArgs,
}

fn simulate(extra: &[&str]) -> anyhow::Result<String> {
    let mut v = vec!["hami-sim"];
    v.extend_from_slice(extra);
    run_simulate(&Cli::try_parse_from(v).unwrap().args)
}

#[test]
fn gzip_and_plain_csv_load_alike() {
    let d = tmpdir("alike");
    write_plain(&d.join("nodes.csv"), NODES);
    write_plain(&d.join("pods.csv"), PODS);
    write_gz(&d.join("nodes.csv.gz"), NODES);
    write_gz(&d.join("pods.csv.gz"), PODS);
    let plain = Experiment::load(&d.join("nodes.csv"), &d.join("pods.csv")).unwrap();
    let gz = Experiment::load(&d.join("nodes.csv.gz"), &d.join("pods.csv.gz")).unwrap();
    assert_eq!(plain.nodes, gz.nodes);
    assert_eq!(plain.pods, gz.pods);
    assert_eq!(gz.pods.len(), 4);
}

#[test]
fn a_gzipped_pod_list_names_the_trace_without_its_suffixes() {
    let d = tmpdir("name");
    write_gz(&d.join("nodes.csv.gz"), NODES);
    write_gz(&d.join("tiny.csv.gz"), PODS);
    let nodes = d.join("nodes.csv.gz").display().to_string();
    let pods = d.join("tiny.csv.gz").display().to_string();
    let out = simulate(&[
        "--nodes", &nodes, "--pods", &pods, "--seeds", "1", "-o", "json",
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["trace"], "tiny");
}

#[test]
fn a_corrupt_gzip_file_is_an_error_naming_it() {
    let d = tmpdir("corrupt");
    write_plain(&d.join("nodes.csv"), NODES);
    // Plain text under a `.gz` name, and a gzip stream cut short.
    write_plain(&d.join("notgz.csv.gz"), PODS);
    let mut cut = Vec::new();
    {
        let mut gz = flate2::write::GzEncoder::new(&mut cut, flate2::Compression::default());
        gz.write_all(PODS.as_bytes()).unwrap();
        gz.finish().unwrap();
    }
    cut.truncate(cut.len() / 2);
    std::fs::write(d.join("cut.csv.gz"), &cut).unwrap();
    let nodes = d.join("nodes.csv").display().to_string();
    for name in ["notgz.csv.gz", "cut.csv.gz"] {
        let pods = d.join(name).display().to_string();
        let err = simulate(&["--nodes", &nodes, "--pods", &pods, "--seeds", "1"])
            .unwrap_err()
            .to_string();
        assert!(err.contains(name), "{err}");
    }
}

/// Trace variants named in the first column of the documentation's tables whose
/// header starts with `| trace |`.
fn documented_variants() -> BTreeSet<String> {
    let doc = repo_data_dir().join("../docs/simulator.md");
    let text = std::fs::read_to_string(&doc).unwrap();
    let mut names = BTreeSet::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("| trace |") {
            in_table = true;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        let first = line.split('|').nth(1).unwrap_or("").trim();
        if in_table && !first.starts_with('-') {
            names.insert(first.to_string());
        }
    }
    names
}

fn bundled_variants() -> BTreeSet<String> {
    std::fs::read_dir(repo_data_dir().join("openb"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_prefix("openb_pod_list_")
                .and_then(|n| n.strip_suffix(".csv.gz"))
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn every_documented_trace_variant_is_bundled_and_nothing_else() {
    let documented = documented_variants();
    assert!(documented.contains("default"), "{documented:?}");
    assert_eq!(documented.len(), 17, "{documented:?}");
    assert_eq!(bundled_variants(), documented);
}

#[test]
fn every_bundled_trace_variant_loads() {
    let nodes = openb("openb_node_list_gpu_node.csv.gz");
    for variant in bundled_variants() {
        let pods = openb(&format!("openb_pod_list_{variant}.csv.gz"));
        let exp = Experiment::load(&nodes, &pods).unwrap_or_else(|e| panic!("{variant}: {e}"));
        assert_eq!(exp.nodes.len(), 1213, "{variant}");
        assert!(exp.pods.len() > 1000, "{variant}: {} pods", exp.pods.len());
    }
}
