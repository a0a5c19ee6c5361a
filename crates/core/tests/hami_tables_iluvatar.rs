//! HAMi's Iluvatar tests (Project-HAMi/HAMi `pkg/device/iluvatar/device_test.go`), the
//! fit and request cases, run against hami-rs (chip `MR-V100`, `--enable-iluvatar`).
//! A container asks for memory in units of 256 MiB, so `Test_Fit`'s MiB values are
//! multiplied by 4 to be expressible (every check compares them, the answers are the
//! same). The stored test is newer than v2.10: where it refuses a core value above 100
//! (`TestFit_CoresValidation`, `Test_GenerateResourceRequests_CoreLimitScales`) v2.10
//! clamps it to one card, as hami-rs does (docs/vendors.md#deliberate-differences-from-hami).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::hami::{Row, table_fit, table_node, table_reason, table_uuids};
use common::{container, pod, with_annotations};
use hami_core::config::{DeviceConfig, VendorSwitches};
use hami_core::model::{ContainerDeviceRequest, DeviceInfo};
use hami_core::vendor::{Annotations, DeviceConstraints, Vendor, VendorRegistry};
use k8s_openapi::api::core::v1::Pod;

const CHIP: &str = "MR-V100";
const COUNT: &str = "iluvatar.ai/MR-V100-vgpu";
const MEMORY: &str = "iluvatar.ai/MR-V100.vMem";
const CORE: &str = "iluvatar.ai/MR-V100.vCore";

fn registry() -> VendorRegistry {
    VendorRegistry::from_config(&DeviceConfig::default().with_switches(VendorSwitches {
        ascend: false,
        iluvatar: true,
    }))
}

fn iluvatar() -> std::sync::Arc<dyn Vendor> {
    registry().get(CHIP).unwrap().clone()
}

/// One container asking `n` GPUs, `mem_mib` MiB (a multiple of 256), `cores`.
fn ask(n: u32, mem_mib: u32, cores: i64) -> Pod {
    let (n, units, cores) = (
        n.to_string(),
        (mem_mib / 256).to_string(),
        cores.to_string(),
    );
    pod(
        "p",
        vec![container(
            "main",
            &[(COUNT, &n), (MEMORY, &units), (CORE, &cores)],
        )],
    )
}

fn gpu(id: &'static str, totalmem: u32) -> Row {
    Row::new(id, 0, 100, totalmem, 100, CHIP)
}

// ---- Test_Fit (MiB × 4), TestFit_MutexRejectsUsedDevice ----

#[test]
fn fit_table() {
    let r = registry();
    let fit = |rows: &[Row], p: &Pod| table_fit(&r, &table_node(CHIP, rows, ""), p);
    // "fit success"
    let f = fit(&[gpu("dev-0", 512), gpu("dev-1", 512)], &ask(1, 256, 50)).unwrap();
    assert_eq!(table_uuids(&f, CHIP), ["dev-1"]);
    // "fit fail: memory not enough"
    assert_eq!(
        table_reason(fit(&[gpu("dev-0", 512)], &ask(1, 2048, 50))),
        "1/1 CardInsufficientMemory"
    );
    // "fit fail: core not enough": the memory check comes first.
    assert_eq!(
        table_reason(fit(&[gpu("dev-0", 512).used(0, 0, 100)], &ask(1, 2048, 50))),
        "1/1 CardInsufficientMemory"
    );
    // "fit fail: type mismatch"
    let other = ContainerDeviceRequest {
        count: 1,
        dev_type: "OtherType".into(),
        mem_mib: 2048,
        mem_percent: None,
        cores: 50,
    };
    assert!(!iluvatar().type_matches(
        &DeviceInfo::default(),
        &other,
        &DeviceConstraints::default()
    ));
    // "mutex policy rejects used device" (Count 2) and TestFit_MutexRejectsUsedDevice
    // (Count 100).
    for count in [2, 100] {
        let mut used = gpu("dev-0", 512).used(1, 0, 0);
        used.count = count;
        let p = with_annotations(
            ask(1, 256, 50),
            &[("hami.io/gpu-scheduler-policy", "mutex")],
        );
        assert_eq!(
            table_reason(fit(&[used], &p)),
            "1/1 ExclusiveDeviceAllocateConflict"
        );
    }
    // "fit fail: CardNotHealth"
    let mut sick = gpu("dev-0", 512);
    sick.health = false;
    assert_eq!(
        table_reason(fit(&[sick], &ask(1, 256, 50))),
        "1/1 CardNotHealth"
    );
}

// ---- TestFit_CoresValidation ----

#[test]
fn fit_cores_validation() {
    let r = registry();
    let n = table_node(CHIP, &[Row::new("dev-0", 0, 10, 8000, 100, CHIP)], "");
    // "cores 0 / 50 / 100 is accepted" (1000 MiB: 4 units, 1024 MiB).
    for cores in [0, 50, 100] {
        assert!(table_fit(&r, &n, &ask(1, 1024, cores)).is_ok(), "{cores}");
    }
    // "negative cores -1 is rejected": refused naming the container.
    let err = iluvatar()
        .container_request(
            &ask(1, 1024, -1).spec.unwrap().containers[0],
            &Annotations::new(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("main"), "{err}");
}

// ---- Test_GenerateResourceRequests_MutatedMultiCard ----

#[test]
fn generate_resource_requests_mutated_multi_card() {
    let v = iluvatar();
    for count in [1u32, 2, 4, 8] {
        let mut c = container("demo", &[(COUNT, &count.to_string())]);
        v.mutate_admission(&mut c, &Annotations::new()).unwrap();
        let r = v
            .container_request(&c, &Annotations::new())
            .unwrap()
            .unwrap();
        assert_eq!(r.count, count);
        if count > 1 {
            // The admission's count × 100 is one whole card each once fitted.
            assert_eq!(r.cores.min(100), 100, "{count}");
        }
    }
}
