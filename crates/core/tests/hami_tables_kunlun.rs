//! HAMi's Kunlunxin topology tests (Project-HAMi/HAMi `pkg/device/kunlun/topo_test.go`)
//! whose answer the fit shows — which XPUs of an 8-XPU board a request of 1, 2, 3, 4 or 8
//! gets — run against hami-rs's whole-XPU family (`kunlun`) on a node of eight XPUs,
//! `used` ones busy. The helpers' own tests (`TestParseUsage`, `TestAddidx`,
//! `TestGetvalue`, `TestCountbubble`, `TestCalcscore`, `TestCanMeet`, `TestDelta`,
//! `TestDevicepick*`, `TestParseInterconnection*`) test HAMi's internals, which hami-rs
//! does not have.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::hami::{Row, book_one, table_fit, table_node, table_reason, usage_of};
use common::{container, container_with, pod, registry};
use k8s_openapi::api::core::v1::Pod;

const KUNLUN: &str = "kunlun";
const IDS: [&str; 8] = ["x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"];

/// HAMi's `newDevices(usedMask...)`: eight XPUs, one slot each, `used` busy.
fn board(used: &[usize]) -> Vec<Row> {
    (0..8)
        .map(|i| {
            let r = Row::new(IDS[i], i as u32, 1, 98304, 100, KUNLUN);
            if used.contains(&i) {
                r.used(1, 98304, 100)
            } else {
                r
            }
        })
        .collect()
}

fn xpus(n: u32) -> Pod {
    pod(
        "p",
        vec![container("main", &[("kunlunxin.com/xpu", &n.to_string())])],
    )
}

/// The board indexes the pod got, sorted.
fn picked(used: &[usize], n: u32) -> Result<Vec<u32>, String> {
    let f = table_fit(&registry(), &table_node(KUNLUN, &board(used), ""), &xpus(n))
        .map_err(|e| e.render())?;
    let mut idx: Vec<u32> = f.devices[KUNLUN]
        .iter()
        .flatten()
        .map(|d| IDS.iter().position(|id| *id == d.uuid).unwrap() as u32)
        .collect();
    idx.sort();
    Ok(idx)
}

/// Every XPU but `keep` busy (HAMi's `onlyFree`).
fn only_free(keep: &[usize]) -> Vec<usize> {
    (0..8).filter(|i| !keep.contains(i)).collect()
}

#[test]
fn gragh_select_all_eight_available() {
    assert_eq!(picked(&[], 8).unwrap(), [0, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn gragh_select_eight_not_fully_available() {
    assert!(picked(&[0], 8).is_err());
}

#[test]
fn gragh_select_single_device() {
    // Both wings free: the left one is matched first, XPU 0.
    assert_eq!(picked(&[], 1).unwrap(), [0]);
}

#[test]
fn gragh_select_four_from_left_wing() {
    assert_eq!(picked(&[4, 5, 6, 7], 4).unwrap(), [0, 1, 2, 3]);
}

#[test]
fn interconnect_two_devices() {
    // TestInterconnect_TwoDevices: only an interconnected pair (i, i + 4) free.
    assert_eq!(picked(&only_free(&[0, 4]), 2).unwrap(), [0, 4]);
    // ..._ChoosesAmongMultipleCandidates: all free, two distinct XPUs.
    let two = picked(&[], 2).unwrap();
    assert_eq!(two.len(), 2);
    assert_ne!(two[0], two[1]);
}

#[test]
fn interconnect_four_devices() {
    // TestInterconnect_FourDevices: only one group of four free.
    assert_eq!(picked(&only_free(&[4, 5, 6, 7]), 4).unwrap(), [4, 5, 6, 7]);
}

#[test]
fn interconnect_unsupported_count() {
    // TestInterconnect_UnsupportedCount: three XPUs are never placed.
    let r = table_reason(table_fit(
        &registry(),
        &table_node(KUNLUN, &board(&[]), ""),
        &xpus(3),
    ));
    assert!(r.contains("NumaNotFit"), "{r}");
}

// ---- vdevice_test.go (Kunlunxin vXPU, `XPU`) ----

const XPU: &str = "XPU";

fn vxpu() -> std::sync::Arc<dyn hami_core::vendor::Vendor> {
    registry().get(XPU).unwrap().clone()
}

#[test]
fn vxpu_init_keys() {
    // Test_InitKunlunVDevice, Test_CommonWord
    let v = vxpu();
    assert_eq!(v.common_word(), "XPU");
    assert_eq!(
        v.to_allocate_annotation(),
        Some("hami.io/xpu-devices-to-allocate")
    );
    assert_eq!(v.allocated_annotation(), "hami.io/xpu-devices-allocated");
    assert_eq!(v.handshake_annotation(), Some("hami.io/node-handshake-xpu"));
}

#[test]
fn vxpu_trim_memory() {
    // Test_trimMemory, through the request reading (a request of 0 MiB is no memory).
    let v = vxpu();
    for (asked, size) in [
        ("24576", 24576),
        ("24577", 49152),
        ("49152", 49152),
        ("49153", 98304),
        ("200000", 98304),
    ] {
        let c = container_with(
            "c",
            &[
                ("kunlunxin.com/vxpu", "1"),
                ("kunlunxin.com/vxpu-memory", asked),
            ],
            &[],
        );
        let r = v
            .container_request(&c, &Default::default())
            .unwrap()
            .unwrap();
        assert_eq!(r.mem_mib, size, "{asked}");
    }
}

#[test]
fn vxpu_mutate_admission() {
    let v = vxpu();
    // "no vcount limit"
    assert!(
        !v.mutate_admission(&mut container_with("c", &[], &[]), &Default::default())
            .unwrap()
            .uses
    );
    // "vcount without vmemory"
    assert!(
        v.mutate_admission(
            &mut container_with("c", &[("kunlunxin.com/vxpu", "1")], &[]),
            &Default::default()
        )
        .unwrap()
        .uses
    );
    // "vcount with vmemory gets trimmed", "... and nil requests does not panic"
    let mut c = container_with(
        "c",
        &[
            ("kunlunxin.com/vxpu", "1"),
            ("kunlunxin.com/vxpu-memory", "30000"),
        ],
        &[],
    );
    assert!(
        v.mutate_admission(&mut c, &Default::default())
            .unwrap()
            .uses
    );
    let r = c.resources.unwrap();
    assert_eq!(r.limits.unwrap()["kunlunxin.com/vxpu-memory"].0, "49152");
    assert_eq!(r.requests.unwrap()["kunlunxin.com/vxpu-memory"].0, "49152");
}

#[test]
fn vxpu_get_node_devices() {
    let v = vxpu();
    let decode = |value: Option<&str>| {
        let a: hami_core::vendor::Annotations = value
            .map(|v| ("hami.io/node-register-xpu".to_string(), v.to_string()))
            .into_iter()
            .collect();
        v.decode_inventory(&hami_core::vendor::NodeView::annotations_only("n", &a))
    };
    // "annotation missing"
    assert!(decode(None).is_none());
    // "invalid json"
    assert!(decode(Some("not-json")).unwrap().is_err());
    // "empty device list": no device, the family out on the node.
    assert!(decode(Some("[]")).unwrap().map_or(true, |d| d.is_empty()));
    // "valid devices get vendor tagged"
    let got = decode(Some(
        r#"[{"id":"xpu-0","index":0,"count":1,"devmem":98304,"devcore":100,"type":"XPU","health":true}]"#,
    ))
    .unwrap()
    .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(&*got[0].dev_type, "XPU");
}

#[test]
fn vxpu_generate_resource_requests() {
    let v = vxpu();
    let read = |c| v.container_request(&c, &Default::default()).unwrap();
    // "no vcount requested"
    assert!(read(container_with("c", &[], &[])).is_none());
    // "vcount without memory defaults to full device"
    let r = read(container_with("c", &[("kunlunxin.com/vxpu", "1")], &[])).unwrap();
    assert_eq!((r.count, r.dev_type.as_str(), r.cores), (1, "XPU", 100));
    assert_eq!(r.memory_on(98304), 98304);
    // "vcount with memory from requests fallback"
    let r = read(container_with(
        "c",
        &[],
        &[
            ("kunlunxin.com/vxpu", "2"),
            ("kunlunxin.com/vxpu-memory", "24576"),
        ],
    ))
    .unwrap();
    assert_eq!((r.count, r.mem_mib, r.cores), (2, 24576, 25));
}

#[test]
fn vxpu_add_resource_usage() {
    // Test_KunlunVDevices_AddResourceUsage
    let row = Row::new("xpu-0", 0, 4, 98304, 100, XPU).used(1, 1000, 10);
    let mut ledger = table_node(XPU, &[row], "");
    book_one(&mut ledger, XPU, "xpu-0", 2000, 20);
    assert_eq!(usage_of(&ledger, 0), (2, 30, 3000));
}

#[test]
fn vxpu_fit_direct() {
    // Test_FitVXPU_direct, through the fit (one XPU of 98304 MiB, a vXPU of the size).
    let r = registry();
    let ask = |mem: &str| {
        pod(
            "p",
            vec![container(
                "main",
                &[
                    ("kunlunxin.com/vxpu", "1"),
                    ("kunlunxin.com/vxpu-memory", mem),
                ],
            )],
        )
    };
    let fits = |used: u32, usedmem: u64, mem: &str| {
        let row = Row::new("xpu-0", 0, 4, 98304, 100, XPU).used(used, usedmem, 0);
        table_fit(&r, &table_node(XPU, &[row], ""), &ask(mem)).is_ok()
    };
    // "would exceed total memory"
    assert!(!fits(1, 90000, "20000"));
    // "idle device always fits"
    assert!(fits(0, 0, "24576"));
    // "shared device with matching average memory"
    assert!(fits(2, 49152, "24576"));
    // "shared device with mismatched average memory"
    assert!(!fits(1, 49152, "24576"));
}
