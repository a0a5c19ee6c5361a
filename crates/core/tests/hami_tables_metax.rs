//! HAMi's Metax tests (Project-HAMi/HAMi `pkg/device/metax/`), the cases whose answer
//! the fit shows, run against hami-rs on a node holding the table's devices.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::hami::{Row, table_fit, table_node};
use common::{container, pod, registry};

const GPU: &str = "Metax-GPU";
const IDS: [&str; 8] = [
    "node-metax-0",
    "node-metax-1",
    "node-metax-2",
    "node-metax-3",
    "node-metax-4",
    "node-metax-5",
    "node-metax-6",
    "node-metax-7",
];

// ---- device_multicontainer_test.go: Test_Fit_MultiContainerPodSpreadsOverCards ----

#[test]
fn multi_container_pod_spreads_over_cards() {
    let rows: Vec<Row> = (0..8)
        .map(|i| Row::new(IDS[i], i as u32, 1, 65536, 100, GPU))
        .collect();
    let n = table_node(GPU, &rows, "");
    let p = pod(
        "p",
        vec![
            container("a", &[("metax-tech.com/gpu", "1")]),
            container("b", &[("metax-tech.com/gpu", "1")]),
        ],
    );
    let f = table_fit(&registry(), &n, &p).unwrap();
    let (first, second) = (&f.devices[GPU][0][0], &f.devices[GPU][1][0]);
    assert_ne!(
        first.uuid, second.uuid,
        "both containers landed on {}",
        first.uuid
    );
}
