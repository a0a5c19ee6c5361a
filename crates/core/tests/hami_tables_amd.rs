//! HAMi's AMD tests (Project-HAMi/HAMi `pkg/device/amd/device_test.go`,
//! `device_alloctype_test.go`), case by case, run against hami-rs on a node holding the
//! table's devices. The stored `device_test.go` is newer than v2.10: its cases for
//! features v2.10 does not have (RDNA work-group rounding, `gpumem-percentage`,
//! `numa-bind`, the Fit-time range check of cores) are not ported; the rest are.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::hami::{Row, table_fit, table_node, table_reason, table_uuids};
use common::{container, pod, registry, with_annotations};
use k8s_openapi::api::core::v1::Pod;

const AMD: &str = "AMD";

/// One container asking `n` GPUs, `mem` MiB (0: none given), `cores` percent (0: none).
fn ask(n: u32, mem: u32, cores: u32) -> Pod {
    let (n, mem_s, cores_s) = (n.to_string(), mem.to_string(), cores.to_string());
    let mut limits = vec![("amd.com/gpu", n.as_str())];
    if mem > 0 {
        limits.push(("amd.com/gpumem", &mem_s));
    }
    if cores > 0 {
        limits.push(("amd.com/gpucores", &cores_s));
    }
    pod("p", vec![container("main", &limits)])
}

fn gpu(id: &'static str, index: u32, count: u32, totalcore: u32) -> Row {
    Row::new(id, index, count, 1000, totalcore, AMD)
}

// ---- TestDevices_Fit ----

#[test]
fn allocate_two_whole_cards() {
    // "allocate two whole cards (memreq=0 uses totalmem; coresreq=0 uses totalcore when
    // whole mem)": the walk from the end takes the card with more slots first.
    let r = registry();
    let n = table_node(
        AMD,
        &[gpu("dev-0", 0, 2, 100), gpu("dev-1", 1, 12, 100)],
        "",
    );
    let f = table_fit(&r, &n, &ask(2, 0, 0)).unwrap();
    assert_eq!(table_uuids(&f, AMD), ["dev-1", "dev-0"]);
    let d = &f.devices[AMD][0][0];
    assert_eq!((d.mem_mib, d.cores), (1000, 100));
}

#[test]
fn core_percentage_maps_per_device() {
    // "core percentage maps per device"
    let r = registry();
    let n = table_node(AMD, &[gpu("dev-0", 0, 2, 10), gpu("dev-1", 1, 12, 100)], "");
    let f = table_fit(&r, &n, &ask(1, 500, 50)).unwrap();
    let d = &f.devices[AMD][0][0];
    assert_eq!((d.uuid.as_str(), d.mem_mib, d.cores), ("dev-1", 500, 50));
}

#[test]
fn retains_the_registered_product_type() {
    // "retains the registered product type in the allocation"; device_alloctype_test.go
    // Test_Fit_RegisteredProductTypePreserved.
    let r = registry();
    for product in ["AMD_Instinct_MI300X_VF", "AMD Instinct MI300X"] {
        let mut row = gpu("dev-0", 0, 2, 100);
        row.dev_type = product;
        let f = table_fit(&r, &table_node(AMD, &[row], ""), &ask(1, 100, 10)).unwrap();
        assert_eq!(f.devices[AMD][0][0].dev_type, product);
    }
}

#[test]
fn clamps_a_positive_percentage_to_at_least_one_cu() {
    // "clamps a positive percentage to at least one CU"
    let r = registry();
    let n = table_node(AMD, &[gpu("dev-0", 0, 2, 64)], "");
    let f = table_fit(&r, &n, &ask(1, 100, 1)).unwrap();
    assert_eq!(f.devices[AMD][0][0].cores, 1);
}

#[test]
fn refusals() {
    let r = registry();
    // "insufficient memory"
    let n = table_node(AMD, &[gpu("dev-0", 0, 2, 100).used(0, 900, 0)], "");
    assert!(table_reason(table_fit(&r, &n, &ask(1, 500, 10))).contains("CardInsufficientMemory"));
    // "insufficient core"
    let n = table_node(AMD, &[gpu("dev-0", 0, 2, 10).used(0, 0, 9)], "");
    assert!(table_reason(table_fit(&r, &n, &ask(1, 100, 100))).contains("CardInsufficientCore"));
    // "uuid mismatch (use)"
    let n = table_node(AMD, &[gpu("dev-1", 0, 2, 100)], "");
    let p = with_annotations(ask(1, 100, 10), &[("amd.com/use-gpu-uuid", "dev-0")]);
    assert!(table_reason(table_fit(&r, &n, &p)).contains("CardUuidMismatch"));
    // "time slicing exhausted"
    let n = table_node(AMD, &[gpu("dev-0", 0, 2, 100).used(2, 0, 0)], "");
    assert!(table_reason(table_fit(&r, &n, &ask(1, 100, 10))).contains("CardTimeSlicingExhausted"));
    // "unhealthy device is rejected"
    let mut sick = gpu("dev-0", 0, 2, 100);
    sick.health = false;
    let n = table_node(AMD, &[sick], "");
    assert!(table_reason(table_fit(&r, &n, &ask(1, 100, 10))).contains("CardNotHealth"));
}

// ---- TestCheckAMDType (through the fit: a card the type lists exclude is refused) ----

#[test]
fn check_amd_type() {
    let r = registry();
    let cases: &[(&str, &str, &str, bool)] = &[
        ("no annotations", "", "", true),
        ("matching use type", "amd.com/use-gputype", "MI300", true),
        (
            "non-matching use type",
            "amd.com/use-gputype",
            "MI250",
            false,
        ),
        (
            "matching nouse type excludes card",
            "amd.com/nouse-gputype",
            "MI300",
            false,
        ),
        (
            "non-matching nouse type keeps card",
            "amd.com/nouse-gputype",
            "MI250",
            true,
        ),
        (
            "empty nouse annotation keeps card",
            "amd.com/nouse-gputype",
            "",
            true,
        ),
        (
            "empty use annotation keeps card",
            "amd.com/use-gputype",
            "",
            true,
        ),
        (
            "whitespace-only nouse annotation keeps card",
            "amd.com/nouse-gputype",
            "   ",
            true,
        ),
        (
            "whitespace-only use annotation keeps card",
            "amd.com/use-gputype",
            "   ",
            true,
        ),
        (
            "nouse with trailing comma only excludes named type",
            "amd.com/nouse-gputype",
            "MI250,",
            true,
        ),
        (
            "nouse with leading comma only excludes named type",
            "amd.com/nouse-gputype",
            ",MI250",
            true,
        ),
        (
            "nouse with only commas keeps card",
            "amd.com/nouse-gputype",
            ", ",
            true,
        ),
        // HAMi: "use with only commas rejects card". hami-rs reads a list naming no type
        // as no list, whatever the key (docs/vendors.md#deliberate-differences-from-hami).
        ("use with only commas", "amd.com/use-gputype", ", ", true),
    ];
    for (name, key, value, fits) in cases {
        let mut row = gpu("dev-0", 0, 2, 100);
        row.dev_type = "AMD MI300X";
        let n = table_node(AMD, &[row], "");
        let p = if key.is_empty() {
            ask(1, 100, 10)
        } else {
            with_annotations(ask(1, 100, 10), &[(key, value)])
        };
        assert_eq!(table_fit(&r, &n, &p).is_ok(), *fits, "{name}");
    }
    // "nouse with blank member still excludes named type" and "use with trailing comma
    // matches named type only" on an MI250X.
    for (name, key, value, fits) in [
        (
            "nouse with blank member",
            "amd.com/nouse-gputype",
            " MI250 , ",
            false,
        ),
        (
            "use with trailing comma",
            "amd.com/use-gputype",
            "MI300,",
            false,
        ),
    ] {
        let mut row = gpu("dev-0", 0, 2, 100);
        row.dev_type = "AMD MI250X";
        let n = table_node(AMD, &[row], "");
        let p = with_annotations(ask(1, 100, 10), &[(key, value)]);
        assert_eq!(table_fit(&r, &n, &p).is_ok(), fits, "{name}");
    }
}
