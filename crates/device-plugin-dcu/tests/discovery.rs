#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Discovery on a fake K100_AI tree.

use std::sync::Arc;
use std::time::Duration;

use hami_device_plugin::DeviceBackend;
use hami_device_plugin_dcu::{DcuBackend, DcuTree, FileFacts, Roots, fake_tree, sysfs};
use hami_server::test_support::LogCapture;
use hami_server::trace::{LogFormat, subscriber};

fn roots(dir: &std::path::Path) -> Roots {
    Roots {
        sysfs: dir.join("sys"),
        dev: dir.join("dev"),
    }
}

fn backend(dir: &std::path::Path) -> DcuBackend {
    DcuBackend::new(
        DcuTree::new(
            roots(dir),
            Arc::new(FileFacts::new(dir.join("dcu-facts.json"))),
        ),
        Duration::from_secs(1),
    )
}

#[test]
fn hygon_drm_nodes_joined_with_smi_facts() {
    let dir = tempfile::tempdir().unwrap();
    fake_tree::write(dir.path(), &fake_tree::k100_ai(2)).unwrap();
    let r = roots(dir.path());
    let found = sysfs::dcus(&r.sysfs).unwrap();
    // card0 is the BMC's display (vendor 0x1a03): not a DCU.
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].pci_bdf, "0000:3d:00.0");
    assert_eq!(
        (found[0].card.as_str(), found[0].render.as_str()),
        ("card1", "renderD128")
    );
    assert_eq!(
        (found[1].card.as_str(), found[1].render.as_str()),
        ("card2", "renderD129")
    );
    assert_eq!((found[0].numa, found[1].numa), (Some(0), Some(1)));

    let devices = backend(dir.path()).discover().unwrap();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[0].uuid, "DCU-SN0001");
    assert_eq!(devices[0].model, "DCU-K100_AI");
    assert_eq!(devices[0].memory_mib, 65_520);
    assert_eq!((devices[0].index, devices[1].index), (0, 1));
    assert!(devices.iter().all(|d| d.healthy));

    // A missing render node makes that DCU unhealthy.
    std::fs::remove_file(dir.path().join("dev/dri/renderD129")).unwrap();
    let devices = backend(dir.path()).discover().unwrap();
    assert!(devices[0].healthy && !devices[1].healthy);
}

#[test]
fn garbage_and_missing_vendor_files_skip_the_node_and_smi_gaps_skip_the_dcu() {
    let dir = tempfile::tempdir().unwrap();
    fake_tree::write(dir.path(), &fake_tree::k100_ai(3)).unwrap();
    let sys = dir.path().join("sys/devices/pci0000:00");
    // DCU 0: vendor file garbage (not Hygon's); DCU 1: vendor file gone.
    std::fs::write(sys.join("0000:3d:00.0/vendor"), "\u{0}\u{7f}garbage").unwrap();
    std::fs::remove_file(sys.join("0000:40:00.0/vendor")).unwrap();
    let r = roots(dir.path());
    let capture = LogCapture::default();
    let dispatch = subscriber(LogFormat::Json, Some("info"), capture.clone()).unwrap();
    let found = tracing::dispatcher::with_default(&dispatch, || sysfs::dcus(&r.sysfs).unwrap());
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].pci_bdf, "0000:43:00.0");
    // The missing vendor file is a logged skip naming the path.
    let skipped = capture.json_logged("DRM node skipped: its PCI vendor cannot be read");
    let paths: Vec<String> = skipped
        .iter()
        .map(|l| l["path"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        paths
            .iter()
            .any(|p| p.ends_with("class/drm/card2/device/vendor")),
        "{:?}",
        capture.lines()
    );

    // SMI facts: an entry without a serial number is not registered; garbage facts
    // are a clear error naming the file.
    let facts = dir.path().join("dcu-facts.json");
    std::fs::write(
        &facts,
        r#"{"0000:43:00.0":{"index":2,"serial":"N/A","model":"K100_AI","memory_mib":65520,"cu_count":120}}"#,
    )
    .unwrap();
    assert!(backend(dir.path()).discover().unwrap().is_empty());
    std::fs::write(&facts, "{not json").unwrap();
    let err = backend(dir.path()).discover().unwrap_err().to_string();
    assert!(
        err.contains("dcu-facts.json") && err.contains("malformed"),
        "{err}"
    );

    // No DRM at all: a clear error naming the directory.
    let empty = tempfile::tempdir().unwrap();
    let err = sysfs::dcus(&empty.path().join("sys"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("sys/class/drm"), "{err}");
}

#[test]
fn a_dcu_without_its_render_node_in_sysfs_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    fake_tree::write(dir.path(), &fake_tree::k100_ai(2)).unwrap();
    std::fs::remove_dir_all(dir.path().join("sys/class/drm/renderD128")).unwrap();
    let r = roots(dir.path());
    let found = sysfs::dcus(&r.sysfs).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].pci_bdf, "0000:40:00.0");
}

#[test]
fn discover_prints_the_dcus_and_the_register_string() {
    let dir = tempfile::tempdir().unwrap();
    fake_tree::write(dir.path(), &fake_tree::k100_ai(2)).unwrap();
    let args = hami_device_plugin_dcu::cli::NodeArgs {
        roots: hami_device_plugin::vendor_args::RootArgs {
            sysfs_root: dir.path().join("sys"),
            dev_root: dir.path().join("dev"),
        },
        facts_source: None,
        dcu_facts: Some(dir.path().join("dcu-facts.json")),
        rocm_smi_lib: "librocm_smi64.so".into(),
        split_count: 4,
    };
    let report = hami_device_plugin_dcu::run::discover(&args).unwrap();
    assert_eq!(report["dcus"][1]["pciBDF"], "0000:40:00.0");
    assert_eq!(report["dcus"][1]["card"], "card2");
    assert_eq!(report["dcus"][1]["cuCount"], 120);
    let register = report["annotations"]["hami.io/node-dcu-register"]
        .as_str()
        .unwrap();
    assert_eq!(
        register,
        "DCU-SN0001,4,65520,100,DCU-K100_AI,0,true,0,hami:DCU-SN0002,4,65520,100,DCU-K100_AI,0,true,1,hami:"
    );
    // Exactly what the scheduler side decodes.
    let decoded = hami_core::codec::decode_node_register_legacy(register).unwrap();
    assert_eq!(decoded.len(), 2);
    assert_eq!(&*decoded[1].id, "DCU-SN0002");
    assert_eq!(decoded[1].index, 1);
    assert_eq!(decoded[1].count, 4);
    assert_eq!(decoded[1].mem_mib, 65_520);
    assert_eq!(decoded[1].cores, 100);
    assert_eq!(&*decoded[1].dev_type, "DCU-K100_AI");
    assert_eq!(&*decoded[1].mode, "hami");
    assert!(decoded[1].health);
}
