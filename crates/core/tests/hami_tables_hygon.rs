//! HAMi's Hygon DCU `TestDevices_Fit` (Project-HAMi/HAMi `pkg/device/hygon/
//! device_test.go`) run against hami-rs: the cases Cambricon's and Mthreads' tables share
//! (`common::hami::shared_fit_table`; memory in MiB, so no scaling). The file's other
//! cases (`Test_GetNodeDevices`, `Test_GenerateResourceRequests`, `Test_checkDCUtype`,
//! `Test_checkType`, `Test_PatchAnnotations`) are in `vendors.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::hami::{SharedTable, ask_in_units, shared_add_resource_usage, shared_fit_table};
use common::registry;
use k8s_openapi::api::core::v1::Pod;

/// One container asking `n` DCUs, `mem` MiB (0: none given), `cores` (`None`: none).
fn ask(n: u32, mem_mib: u32, cores: Option<u32>) -> Pod {
    ask_in_units(
        ["hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"],
        1,
        n,
        mem_mib,
        cores,
    )
}

#[test]
fn devices_fit() {
    let r = registry();
    shared_fit_table(&SharedTable {
        registry: &r,
        vendor: "DCU",
        scale: 1,
        ask: &ask,
        use_uuid: "hygon.com/use-gpuuuid",
        nouse_uuid: "hygon.com/nouse-gpuuuid",
    });
    // "fit success:  memory percentage": Hygon has no percentage resource.
}

#[test]
fn add_resource_usage() {
    // TestDevices_AddResourceUsage
    shared_add_resource_usage("DCU");
}
