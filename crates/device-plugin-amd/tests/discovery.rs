#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Discovery on a fake MI300X tree.

use std::sync::Arc;
use std::time::Duration;

use hami_device_plugin::DeviceBackend;
use hami_device_plugin_amd::{AmdBackend, AmdTree, FileFacts, Roots, fake_tree, sysfs};

#[test]
fn kfd_and_amdgpu_sysfs_give_the_gpus_with_their_facts() {
    let dir = tempfile::tempdir().unwrap();
    fake_tree::write(dir.path(), &fake_tree::mi300x(2)).unwrap();
    let roots = Roots {
        sysfs: dir.path().join("sys"),
        dev: dir.path().join("dev"),
    };
    let gpus = sysfs::gpus(&roots.sysfs).unwrap();
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[0].pci_bdf, "0000:0c:00.0");
    assert_eq!(gpus[1].pci_bdf, "0000:22:00.0");
    assert_eq!((gpus[0].card, gpus[0].render, gpus[0].numa), (1, 128, 0));
    assert_eq!((gpus[1].card, gpus[1].render, gpus[1].numa), (2, 129, 1));
    assert_eq!(gpus[0].rocr_uuid, "GPU-1407000000000000");
    assert_eq!(gpus[0].compute_partition.as_deref(), Some("spx"));

    let backend = AmdBackend::new(
        AmdTree::new(
            roots.clone(),
            Arc::new(FileFacts::new(dir.path().join("gpu-facts.json"))),
        ),
        Duration::from_secs(1),
    );
    let devices = backend.discover().unwrap();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[0].uuid, "8eff74b5-0000-1000-801b-b56457add000");
    assert_eq!(devices[0].model, "AMD Instinct MI300X");
    assert_eq!(devices[0].memory_mib, 196_288);
    assert!(devices.iter().all(|d| d.healthy));

    // A missing render node makes that GPU unhealthy; a GPU the library does not know
    // is not registered.
    std::fs::remove_file(roots.dev.join("dri/renderD129")).unwrap();
    std::fs::write(
        dir.path().join("gpu-facts.json"),
        r#"{"0000:22:00.0":{"uuid":"u2","market_name":"AMD Instinct MI300X","vram_mib":1,"cu_count":304}}"#,
    )
    .unwrap();
    let devices = backend.discover().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0].uuid, "u2");
    assert!(!devices[0].healthy);
}

#[test]
fn a_node_without_amdgpu_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = sysfs::gpus(dir.path()).unwrap_err().to_string();
    assert!(err.contains("module/amdgpu/drivers/pci:amdgpu"), "{err}");
    assert!(err.contains("amdgpu driver is not loaded"), "{err}");
}

#[test]
fn discover_prints_the_gpus_and_the_register_annotation() {
    let dir = tempfile::tempdir().unwrap();
    fake_tree::write(dir.path(), &fake_tree::mi300x(1)).unwrap();
    let args = hami_device_plugin_amd::cli::NodeArgs {
        roots: hami_device_plugin::vendor_args::RootArgs {
            sysfs_root: dir.path().join("sys"),
            dev_root: dir.path().join("dev"),
        },
        facts_source: None,
        gpu_facts: Some(dir.path().join("gpu-facts.json")),
        amd_smi_lib: "libamd_smi.so".into(),
        libdrm_amdgpu_lib: "libdrm_amdgpu.so.1".into(),
        split_count: 10,
    };
    let report = hami_device_plugin_amd::run::discover(&args).unwrap();
    assert_eq!(report["gpus"][0]["pciBDF"], "0000:0c:00.0");
    assert_eq!(report["gpus"][0]["rocrUUID"], "GPU-1407000000000000");
    assert_eq!(report["gpus"][0]["cuCount"], 304);
    assert_eq!(
        report["annotations"]["hami.io/node-amd-register"],
        r#"[{"id":"8eff74b5-0000-1000-801b-b56457add000","index":1,"count":10,"devmem":196288,"devcore":304,"type":"AMD Instinct MI300X","health":true,"custominfo":{"pciBDF":"0000:0c:00.0"}}]"#
    );
}
