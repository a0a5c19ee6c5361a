//! HAMi's AWS Neuron cordon tests for multi-device runs (Project-HAMi/HAMi
//! `pkg/device/awsneuron/device_cordon_test.go`, `TestFit_DeviceCordonMultiCardTopology`)
//! run against hami-rs: a ring of 16 Inferentia2 devices (the node type on the first, as
//! the node reports it) and a request of 4 whole devices. HAMi's rows leave `Count` at
//! 0 (its multi-device path never reads it); here each device has its one slot.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::hami::{Row, table_fit, table_node, table_reason, table_uuids};
use common::{container, pod, registry};
use k8s_openapi::api::core::v1::Pod;

const NEURON: &str = "AWSNeuron";
const IDS: [&str; 16] = [
    "dev-0", "dev-1", "dev-2", "dev-3", "dev-4", "dev-5", "dev-6", "dev-7", "dev-8", "dev-9",
    "dev-10", "dev-11", "dev-12", "dev-13", "dev-14", "dev-15",
];

/// HAMi's `newRingDevices`, with `used` devices busy.
fn ring(used: &[usize]) -> Vec<Row> {
    (0..16)
        .map(|i| {
            let mut r = Row::new(IDS[i], i as u32, 1, 0, 0, NEURON);
            if i == 0 {
                r.custom_info
                    .insert("AWSNodeType".into(), serde_json::json!("inf2"));
            }
            if used.contains(&i) {
                r.used(1, 0, 0)
            } else {
                r
            }
        })
        .collect()
}

fn four() -> Pod {
    pod(
        "p",
        vec![container("main", &[("aws.amazon.com/neuron", "4")])],
    )
}

#[test]
fn a_run_stepping_over_a_cordoned_device_is_rejected_the_next_run_wins() {
    let f = table_fit(
        &registry(),
        &table_node(NEURON, &ring(&[]), "dev-0"),
        &four(),
    )
    .unwrap();
    assert_eq!(
        table_uuids(&f, NEURON),
        ["dev-1", "dev-2", "dev-3", "dev-4"]
    );
}

#[test]
fn all_devices_cordoned_fails_with_card_cordoned_rather_than_numa_not_fit() {
    let all = IDS.join(",");
    let out = table_fit(&registry(), &table_node(NEURON, &ring(&[]), &all), &four());
    assert_eq!(table_reason(out), "16/16 CardCordoned");
}

#[test]
fn nothing_cordoned_still_reports_numa_not_fit_when_no_run_exists() {
    let out = table_fit(
        &registry(),
        &table_node(NEURON, &ring(&[3, 7, 11, 15]), ""),
        &four(),
    );
    // HAMi: "1/16 NumaNotFit" (its multi-device path checks no device); hami-rs also
    // names the busy devices (docs/vendors.md#deliberate-differences-from-hami).
    assert_eq!(
        table_reason(out),
        "1/16 NumaNotFit, 4/16 ExclusiveDeviceAllocateConflict"
    );
}
