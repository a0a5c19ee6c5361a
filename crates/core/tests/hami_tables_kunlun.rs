//! HAMi's Kunlunxin topology tests (Project-HAMi/HAMi `pkg/device/kunlun/topo_test.go`)
//! whose answer the fit shows — which XPUs of an 8-XPU board a request of 1, 2, 3, 4 or 8
//! gets — run against hami-rs's whole-XPU family (`kunlun`) on a node of eight XPUs,
//! `used` ones busy. The helpers' own tests (`TestParseUsage`, `TestAddidx`,
//! `TestGetvalue`, `TestCountbubble`, `TestCalcscore`, `TestCanMeet`, `TestDelta`,
//! `TestDevicepick*`, `TestParseInterconnection*`) test HAMi's internals, which hami-rs
//! does not have.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::hami::{Row, table_fit, table_node, table_reason};
use common::{container, pod, registry};
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
