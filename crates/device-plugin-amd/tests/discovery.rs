#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Discovery on a fake MI300X tree.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hami_device_plugin::DeviceBackend;
use hami_device_plugin_amd::{AmdBackend, AmdTree, FileFacts, Roots, fake_tree, sysfs};

/// The roots of the fake tree written under `dir` and a backend reading it.
fn tree(dir: &Path) -> (Roots, AmdBackend) {
    let roots = Roots {
        sysfs: dir.join("sys"),
        dev: dir.join("dev"),
    };
    let facts = Arc::new(FileFacts::new(dir.join("gpu-facts.json")));
    let backend = AmdBackend::new(AmdTree::new(roots.clone(), facts), Duration::from_secs(1));
    (roots, backend)
}

#[test]
fn kfd_and_amdgpu_sysfs_give_the_gpus_with_their_facts() {
    let dir = tempfile::tempdir().unwrap();
    fake_tree::write(dir.path(), &fake_tree::mi300x(2)).unwrap();
    let (roots, backend) = tree(dir.path());
    let gpus = sysfs::gpus(&roots.sysfs).unwrap();
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[0].pci_bdf, "0000:0c:00.0");
    assert_eq!(gpus[1].pci_bdf, "0000:22:00.0");
    assert_eq!((gpus[0].card, gpus[0].render, gpus[0].numa), (1, 128, 0));
    assert_eq!((gpus[1].card, gpus[1].render, gpus[1].numa), (2, 129, 1));
    assert_eq!(gpus[0].rocr_uuid, "GPU-1407000000000000");
    assert_eq!(gpus[0].compute_partition.as_deref(), Some("spx"));

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

/// An MI300X in CPX/NPS4: eight KFD nodes, the PCI device's DRM nodes are partition 0's,
/// `amdgpu_xcp_0..6` the others'; every partition is a device with its own address,
/// facts, ROCr UUID and DRM nodes, the GPU's NUMA node and partition modes. An
/// `amdgpu_xcp_*` device KFD does not know (unused in this mode) is not a device.
#[test]
fn cpx_partitions_are_devices_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut gpus = fake_tree::mi300x_partitioned(2, "CPX", "NPS4");
    assert_eq!(gpus.len(), 16);
    // The second GPU on NUMA 1.
    assert!(gpus[8..].iter().all(|g| g.numa == 1));
    gpus.truncate(12);
    fake_tree::write(dir.path(), &gpus).unwrap();
    let unused = dir.path().join("sys/devices/platform/amdgpu_xcp_20/drm");
    std::fs::create_dir_all(unused.join("card60")).unwrap();
    std::fs::create_dir_all(unused.join("renderD187")).unwrap();
    let (roots, backend) = tree(dir.path());
    let found = sysfs::gpus(&roots.sysfs).unwrap();
    type Row<'a> = (&'a str, u32, Option<&'a str>, u32, u32, i32);
    let summary: Vec<Row<'_>> = found
        .iter()
        .map(|g| {
            (
                g.address.as_str(),
                g.partition,
                g.platform.as_deref(),
                g.card,
                g.render,
                g.numa,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("0000:0c:00.0", 0, None, 1, 128, 0),
            ("0000:22:00.0", 0, None, 9, 136, 1),
            ("0000:0c:00.1", 1, Some("amdgpu_xcp_0"), 2, 129, 0),
            ("0000:0c:00.2", 2, Some("amdgpu_xcp_1"), 3, 130, 0),
            ("0000:0c:00.3", 3, Some("amdgpu_xcp_2"), 4, 131, 0),
            ("0000:0c:00.4", 4, Some("amdgpu_xcp_3"), 5, 132, 0),
            ("0000:0c:00.5", 5, Some("amdgpu_xcp_4"), 6, 133, 0),
            ("0000:0c:00.6", 6, Some("amdgpu_xcp_5"), 7, 134, 0),
            ("0000:0c:00.7", 7, Some("amdgpu_xcp_6"), 8, 135, 0),
            ("0000:22:00.1", 1, Some("amdgpu_xcp_7"), 10, 137, 1),
            ("0000:22:00.2", 2, Some("amdgpu_xcp_8"), 11, 138, 1),
            ("0000:22:00.3", 3, Some("amdgpu_xcp_9"), 12, 139, 1),
        ]
    );
    assert!(
        found
            .iter()
            .all(|g| g.compute_partition.as_deref() == Some("cpx")
                && g.memory_partition.as_deref() == Some("nps4"))
    );
    assert_eq!(found[0].pci_bdf, "0000:0c:00.0");
    assert_eq!(
        found[9].pci_bdf, "0000:22:00.0",
        "a partition names its GPU"
    );
    assert_eq!(found[2].rocr_uuid, "GPU-1407000000000100");
    assert_eq!(found[9].rocr_uuid, "GPU-1407000000000101");

    let devices = backend.discover().unwrap();
    assert_eq!(devices.len(), 12);
    assert_eq!(devices[2].uuid, "8eff74b5-0000-1000-8001-b56457add000");
    assert_eq!(devices[2].memory_mib, 196_288 / 8);
    assert_eq!(devices[2].index, 2);
    assert_eq!(devices[9].numa, Some(1));
    let catalog = backend.catalog();
    assert_eq!(catalog.get(&devices[2].uuid).unwrap().facts.cu_count, 38);
    assert!(devices.iter().all(|d| d.healthy));

    // One partition's render node gone: only that partition is unhealthy.
    std::fs::remove_file(roots.dev.join("dri/renderD131")).unwrap();
    let devices = backend.discover().unwrap();
    let bad: Vec<&str> = devices
        .iter()
        .filter(|d| !d.healthy)
        .map(|d| d.uuid.as_str())
        .collect();
    assert_eq!(bad, ["8eff74b5-0000-1000-8003-b56457add000"]);
}

/// DPX: two partitions of 152 CUs; a kernel that does not number partitions in KFD's
/// `location_id` gives both the GPU's address, so the second repeats the first's UUID
/// and is not registered rather than registered twice.
#[test]
fn dpx_partitions_and_unnumbered_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let gpus = fake_tree::mi300x_partitioned(1, "DPX", "NPS1");
    fake_tree::write(dir.path(), &gpus).unwrap();
    let (roots, backend) = tree(dir.path());
    let devices = backend.discover().unwrap();
    let ids: Vec<(&str, u64)> = devices
        .iter()
        .map(|d| (d.uuid.as_str(), d.memory_mib))
        .collect();
    assert_eq!(
        ids,
        [
            ("8eff74b5-0000-1000-8000-b56457add000", 98_144),
            ("8eff74b5-0000-1000-8001-b56457add000", 98_144)
        ]
    );
    assert_eq!(backend.catalog().get(ids[1].0).unwrap().facts.cu_count, 152);

    // Partition 1's KFD node without its number: same address as partition 0.
    let props = dir
        .path()
        .join("sys/class/kfd/kfd/topology/nodes/2/properties");
    let text = std::fs::read_to_string(&props).unwrap();
    let loc = (0x0c_u64 << 8) | 1;
    std::fs::write(
        &props,
        text.replace(
            &format!("location_id {loc}"),
            &format!("location_id {}", loc - 1),
        ),
    )
    .unwrap();
    let found = sysfs::gpus(&roots.sysfs).unwrap();
    assert_eq!(found[1].address, "0000:0c:00.0");
    let devices = backend.discover().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0].uuid, "8eff74b5-0000-1000-8000-b56457add000");
}
