//! HAMi's Ascend 910C module-pairing tests (Project-HAMi/HAMi `pkg/device/ascend/
//! device_910c_pairing_test.go`) run against hami-rs (`--enable-ascend`) on a node
//! holding the table's NPUs: NPUs `2k` and `2k + 1` form a module, and a request is
//! served by whole modules only (`docs/vendors.md#huawei-ascend`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::hami::{Row, table_fit, table_node, table_uuids};
use common::{container, pod};
use hami_core::config::{DeviceConfig, VendorSwitches};
use hami_core::vendor::VendorRegistry;
use k8s_openapi::api::core::v1::Pod;

const C: &str = "Ascend910C";
const IDS: [&str; 8] = [
    "dev-0", "dev-1", "dev-2", "dev-3", "dev-4", "dev-5", "dev-6", "dev-7",
];

fn registry() -> VendorRegistry {
    VendorRegistry::from_config(&DeviceConfig::default().with_switches(VendorSwitches {
        ascend: true,
        iluvatar: false,
    }))
}

/// The table's NPUs at these indexes, with `NetworkID` 0 or none.
fn npus(indexes: &[usize], network: bool) -> Vec<Row> {
    indexes
        .iter()
        .map(|&i| {
            let mut r = Row::new(IDS[i], i as u32, 1, 32000, 0, C);
            if network {
                r.custom_info
                    .insert("NetworkID".into(), serde_json::json!(0.0));
            }
            r
        })
        .collect()
}

fn ask(n: u32) -> Pod {
    pod(
        "p",
        vec![container(
            "main",
            &[("huawei.com/Ascend910C", &n.to_string())],
        )],
    )
}

fn fits(indexes: &[usize], network: bool, n: u32) -> Option<Vec<String>> {
    table_fit(
        &registry(),
        &table_node(C, &npus(indexes, network), ""),
        &ask(n),
    )
    .ok()
    .map(|f| table_uuids(&f, C))
}

#[test]
fn fit_partial_allocation_bug() {
    // TestAscend910C_FitPartialAllocationBug: one full module and three halves.
    assert_eq!(fits(&[0, 1, 2, 4, 6], true, 4), None);
}

#[test]
fn fit_exact_count_bypass_bug() {
    // TestAscend910C_FitExactCountBypassBug: two NPUs of two modules.
    assert_eq!(fits(&[0, 2], true, 2), None);
}

#[test]
fn fit_full_pair_succeeds() {
    // TestAscend910C_FitFullPairSucceeds
    let mut got = fits(&[0, 1], true, 2).unwrap();
    got.sort();
    assert_eq!(got, ["dev-0", "dev-1"]);
}

#[test]
fn fit_without_network_id_validates_pairing() {
    // TestAscend910C_FitWithoutNetworkID_ValidatesPairing
    assert_eq!(fits(&[0, 2], false, 2), None);
    assert_eq!(fits(&[0, 1], false, 2).map(|d| d.len()), Some(2));
}

#[test]
fn no_full_pairs_is_refused() {
    // TestComputeBestCombination910C_NoFullPairsReturnsEmpty (the Fit half).
    assert_eq!(fits(&[0, 2, 4, 6], false, 4), None);
}

// ---- Test_trimMemory (Ascend 310P with the chart's templates). The table is from the
// copy of HAMi's Ascend code Volcano carries (volcano-sh/volcano, Go package `hami`),
// not from HAMi's own tests. ----

#[test]
fn trim_memory_310p() {
    let v = registry().get("Ascend310P").unwrap().clone();
    let read = |mem: &str| {
        let c = container(
            "main",
            &[
                ("huawei.com/Ascend310P", "1"),
                ("huawei.com/Ascend310P-memory", mem),
            ],
        );
        v.container_request(&c, &Default::default())
    };
    for (asked, template) in [
        ("1", 3072),
        ("100", 3072),
        ("3071", 3072),
        ("3072", 3072),
        ("3073", 6144),
        ("6143", 6144),
        ("6144", 6144),
        ("6145", 12288),
        ("12288", 12288),
        ("12289", 21527),
        ("21527", 21527),
        ("21528", 21527),
        ("24576", 21527),
    ] {
        assert_eq!(read(asked).unwrap().unwrap().mem_mib, template, "{asked}");
    }
    // "test16": above the device, no template (HAMi answers 0); hami-rs refuses the
    // request naming the container.
    assert!(read("24577").is_err());
}
