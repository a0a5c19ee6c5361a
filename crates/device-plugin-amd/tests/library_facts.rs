#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The GPU facts from AMD SMI and libdrm_amdgpu (`--facts-source=library`), through the
//! real `dlopen` path: fake libraries built from C answer for a fake MI300X tree, and the
//! node registers exactly what it registers from the facts file.

use std::path::{Path, PathBuf};
use std::process::Command;

use hami_device_plugin::facts_file::FactsSourceKind;
use hami_device_plugin::vendor_args::RootArgs;
use hami_device_plugin_amd::cli::NodeArgs;
use hami_device_plugin_amd::fake_tree::{self, FakeGpu};
use hami_vendor_ffi::testing::{self, FakeSmiGpu};

struct Node {
    dir: tempfile::TempDir,
    gpus: Vec<FakeGpu>,
}

/// A fake MI300X tree whose render nodes hold what the fake libdrm answers.
fn node(n: u32) -> Node {
    node_of(fake_tree::mi300x(n))
}

/// The fake tree of `gpus` (GPUs or partitions), render nodes answering for libdrm.
fn node_of(gpus: Vec<FakeGpu>) -> Node {
    let dir = tempfile::tempdir().unwrap();
    fake_tree::write(dir.path(), &gpus).unwrap();
    for g in &gpus {
        std::fs::write(
            dir.path().join(format!("dev/dri/renderD{}", g.render)),
            testing::drm_node(g.vram_mib, g.cu_count, None),
        )
        .unwrap();
    }
    Node { dir, gpus }
}

fn smi_gpus(gpus: &[FakeGpu]) -> Vec<FakeSmiGpu> {
    gpus.iter()
        .map(|g| FakeSmiGpu {
            // A partition's own BDF (its GPU's with the partition as function).
            pci_address: g.address(),
            uuid: Some(g.uuid.clone()),
            market_name: Some(g.market_name.clone()),
        })
        .collect()
}

fn args(root: &Path, source: Option<FactsSourceKind>, smi: PathBuf, drm: PathBuf) -> NodeArgs {
    NodeArgs {
        roots: RootArgs {
            sysfs_root: root.join("sys"),
            dev_root: root.join("dev"),
        },
        facts_source: source,
        gpu_facts: None,
        amd_smi_lib: smi,
        libdrm_amdgpu_lib: drm,
        split_count: 10,
    }
}

/// `discover` with the fake libraries answering for `n`'s devices, checked equal to
/// `discover` with the facts file.
fn libraries_as_file(n: &Node) -> serde_json::Value {
    let libs = tempfile::tempdir().unwrap();
    let smi = testing::fake_amd_smi(libs.path(), &smi_gpus(&n.gpus), 0).unwrap();
    let drm = testing::fake_libdrm_amdgpu(libs.path()).unwrap();
    let from_libraries =
        hami_device_plugin_amd::run::discover(&args(n.dir.path(), None, smi, drm)).unwrap();
    let mut file = args(
        n.dir.path(),
        Some(FactsSourceKind::File),
        "".into(),
        "".into(),
    );
    file.gpu_facts = Some(n.dir.path().join("gpu-facts.json"));
    let from_file = hami_device_plugin_amd::run::discover(&file).unwrap();
    assert_eq!(from_libraries, from_file);
    from_libraries
}

#[test]
fn the_libraries_give_what_the_facts_file_gives() {
    let n = node(2);
    let from_libraries = libraries_as_file(&n);
    assert_eq!(from_libraries["gpus"][1]["uuid"], n.gpus[1].uuid);
    assert_eq!(from_libraries["gpus"][1]["vramMiB"], 196_288);
    assert_eq!(from_libraries["gpus"][1]["cuCount"], 304);
}

/// An MI300X in CPX mode: AMD SMI names each partition by its own BDF and libdrm answers
/// on the partition's own render node, so every partition gets its own facts, the same
/// the facts file gives (`docs/device-plugin.md#amd-partitions`).
#[test]
fn cpx_partitions_get_their_own_library_facts() {
    let n = node_of(fake_tree::mi300x_partitioned(1, "CPX", "NPS4"));
    let from_libraries = libraries_as_file(&n);
    let gpus = from_libraries["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8, "{from_libraries}");
    let p3 = gpus
        .iter()
        .find(|g| g["address"] == "0000:0c:00.3")
        .unwrap();
    assert_eq!(p3["uuid"], n.gpus[3].uuid);
    assert_eq!(p3["renderD"], 131);
    assert_eq!(p3["vramMiB"], 196_288 / 8);
    assert_eq!(p3["cuCount"], 38);
}

#[test]
fn gpus_the_libraries_cannot_describe_are_left_out_or_get_hamis_fallback_type() {
    let n = node(3);
    let libs = tempfile::tempdir().unwrap();
    let mut smi_gpus = smi_gpus(&n.gpus);
    smi_gpus[0].market_name = None; // registered as amd-gpu
    smi_gpus[1].uuid = None; // not registered
    let smi = testing::fake_amd_smi(libs.path(), &smi_gpus, 0).unwrap();
    let drm = testing::fake_libdrm_amdgpu(libs.path()).unwrap();
    // libdrm refuses the third GPU (EACCES): not registered, the others are.
    std::fs::write(
        n.dir
            .path()
            .join(format!("dev/dri/renderD{}", n.gpus[2].render)),
        testing::drm_node(0, 0, Some(13)),
    )
    .unwrap();
    let report = hami_device_plugin_amd::run::discover(&args(
        n.dir.path(),
        Some(FactsSourceKind::Library),
        smi,
        drm,
    ))
    .unwrap();
    let gpus = report["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 1, "{report}");
    assert_eq!(gpus[0]["pciBDF"], n.gpus[0].pci_bdf);
    assert_eq!(gpus[0]["marketName"], "amd-gpu");
}

#[test]
fn a_missing_library_is_a_start_up_error_naming_it() {
    let n = node(1);
    let libs = tempfile::tempdir().unwrap();
    let drm = testing::fake_libdrm_amdgpu(libs.path()).unwrap();
    let missing = libs.path().join("libamd_smi.so");
    let err =
        hami_device_plugin_amd::run::discover(&args(n.dir.path(), None, missing.clone(), drm))
            .unwrap_err()
            .to_string();
    assert!(
        err.contains(&format!("cannot load AMD SMI from {}", missing.display())),
        "{err}"
    );
    assert!(err.contains("--amd-smi-lib (AMD_SMI_LIB)"), "{err}");

    // The binary: non-zero exit, the library named on stderr.
    let discover = |extra: &[String]| {
        Command::new(env!("CARGO_BIN_EXE_hami-device-plugin-amd"))
            .arg("discover")
            .arg(format!(
                "--sysfs-root={}",
                n.dir.path().join("sys").display()
            ))
            .arg(format!("--dev-root={}", n.dir.path().join("dev").display()))
            .arg(format!("--amd-smi-lib={}", missing.display()))
            .args(extra)
            .env_remove("GPU_FACTS")
            .env_remove("FACTS_SOURCE")
            .output()
            .unwrap()
    };
    let out = discover(&[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot load AMD SMI from"), "{stderr}");
    assert!(stderr.contains("--amd-smi-lib (AMD_SMI_LIB)"), "{stderr}");

    // With the facts file chosen, no library is loaded.
    let out = discover(&[
        "--facts-source=file".into(),
        format!(
            "--gpu-facts={}",
            n.dir.path().join("gpu-facts.json").display()
        ),
    ]);
    assert!(out.status.success(), "{out:?}");
}
