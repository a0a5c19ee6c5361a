#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The DCU facts from ROCm SMI (`--facts-source=library`), through the real `dlopen`
//! path: a fake ROCm SMI built from C answers for a fake K100_AI tree, and the node
//! registers exactly what it registers from the facts file.

use std::path::{Path, PathBuf};
use std::process::Command;

use hami_device_plugin::facts_file::FactsSourceKind;
use hami_device_plugin::vendor_args::RootArgs;
use hami_device_plugin_dcu::cli::NodeArgs;
use hami_device_plugin_dcu::fake_tree;
use hami_vendor_ffi::testing::{self, FakeDcu};

fn args(root: &Path, source: Option<FactsSourceKind>, smi: PathBuf) -> NodeArgs {
    NodeArgs {
        roots: RootArgs {
            sysfs_root: root.join("sys"),
            dev_root: root.join("dev"),
        },
        facts_source: source,
        dcu_facts: None,
        rocm_smi_lib: smi,
        split_count: 4,
    }
}

/// ROCm SMI's view of the fake tree's DCUs (K100_AI is PCI device 0x6210).
fn smi_dcus(dcus: &[fake_tree::FakeDcu]) -> Vec<FakeDcu> {
    dcus.iter()
        .map(|d| FakeDcu {
            pci_address: d.pci_bdf.clone(),
            device_id: 0x6210,
            serial: Some(d.serial.clone()),
            vram_bytes: d.memory_mib << 20,
        })
        .collect()
}

#[test]
fn rocm_smi_gives_what_the_facts_file_gives() {
    let node = tempfile::tempdir().unwrap();
    let dcus = fake_tree::k100_ai(2);
    fake_tree::write(node.path(), &dcus).unwrap();
    let libs = tempfile::tempdir().unwrap();
    let smi = testing::fake_rocm_smi(libs.path(), &smi_dcus(&dcus), 0, false).unwrap();
    let from_library =
        hami_device_plugin_dcu::run::discover(&args(node.path(), None, smi)).unwrap();
    let mut file = args(node.path(), Some(FactsSourceKind::File), "".into());
    file.dcu_facts = Some(node.path().join("dcu-facts.json"));
    let from_file = hami_device_plugin_dcu::run::discover(&file).unwrap();
    assert_eq!(from_library, from_file);
    assert_eq!(
        from_library["annotations"]["hami.io/node-dcu-register"],
        "DCU-SN0001,4,65520,100,DCU-K100_AI,0,true,0,hami:DCU-SN0002,4,65520,100,DCU-K100_AI,0,true,1,hami:"
    );
}

#[test]
fn dcus_rocm_smi_cannot_describe_are_not_registered() {
    let node = tempfile::tempdir().unwrap();
    let dcus = fake_tree::k100_ai(3);
    fake_tree::write(node.path(), &dcus).unwrap();
    let mut smi = smi_dcus(&dcus);
    smi[0].serial = None; // HAMi's N/A
    smi[1].device_id = 0x1234; // a model HAMi's table does not know
    let libs = tempfile::tempdir().unwrap();
    let lib = testing::fake_rocm_smi(libs.path(), &smi, 0, false).unwrap();
    let report = hami_device_plugin_dcu::run::discover(&args(
        node.path(),
        Some(FactsSourceKind::Library),
        lib,
    ))
    .unwrap();
    let registered = report["dcus"].as_array().unwrap();
    assert_eq!(registered.len(), 1, "{report}");
    assert_eq!(registered[0]["id"], "DCU-SN0003");
    assert_eq!(registered[0]["index"], 2);
    assert_eq!(registered[0]["cuCount"], 120);
}

#[test]
fn a_missing_library_is_a_start_up_error_naming_it() {
    let node = tempfile::tempdir().unwrap();
    fake_tree::write(node.path(), &fake_tree::k100_ai(1)).unwrap();
    let missing = node.path().join("librocm_smi64.so");
    let out = Command::new(env!("CARGO_BIN_EXE_hami-device-plugin-dcu"))
        .arg("discover")
        .arg(format!(
            "--sysfs-root={}",
            node.path().join("sys").display()
        ))
        .arg(format!("--dev-root={}", node.path().join("dev").display()))
        .arg(format!("--rocm-smi-lib={}", missing.display()))
        .env_remove("DCU_FACTS")
        .env_remove("FACTS_SOURCE")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot load ROCm SMI from {}", missing.display())),
        "{stderr}"
    );
    assert!(stderr.contains("--rocm-smi-lib (ROCM_SMI_LIB)"), "{stderr}");
    // A facts file named with --facts-source=library is refused, not ignored.
    let out = Command::new(env!("CARGO_BIN_EXE_hami-device-plugin-dcu"))
        .arg("discover")
        .arg("--facts-source=library")
        .arg(format!(
            "--dcu-facts={}",
            node.path().join("dcu-facts.json").display()
        ))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is not read with --facts-source=library"),
        "{stderr}"
    );
}
