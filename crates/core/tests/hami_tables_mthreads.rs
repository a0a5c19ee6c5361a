//! HAMi's Mthreads tests (Project-HAMi/HAMi `pkg/device/mthreads/device_test.go`), case
//! by case, run against hami-rs. A container asks for memory in units of 512 MiB, so
//! `TestDevices_Fit`'s MiB values are multiplied by 8 to be expressible (the cases it
//! shares with Cambricon's table run from `common::hami::shared_fit_table`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::hami::{
    Row, SharedTable, ask_in_units, facts, shared_add_resource_usage, shared_fit_table, table_fit,
    table_node, type_check,
};
use common::{container_with, registry};
use hami_core::model::ContainerDevice;
use hami_core::vendor::{AllocationContext, Annotations, DeviceConstraints, NodeView, Vendor};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

const MT: &str = "Mthreads";
const COUNT: &str = "mthreads.com/vgpu";
const MEMORY: &str = "mthreads.com/sgpu-memory";
const CORE: &str = "mthreads.com/sgpu-core";

fn mthreads() -> std::sync::Arc<dyn Vendor> {
    registry().get(MT).unwrap().clone()
}

/// One container asking `n` GPUs, `mem_mib` MiB (a multiple of 512; 0: none given),
/// `cores` (`None`: none given).
fn ask(n: u32, mem_mib: u32, cores: Option<u32>) -> Pod {
    ask_in_units([COUNT, MEMORY, CORE], 512, n, mem_mib, cores)
}

// ---- Test_MutateAdmission ----

#[test]
fn mutate_admission() {
    let v = mthreads();
    let admit = |limits: &[(&str, &str)]| {
        v.mutate_admission(&mut container_with("c", limits, &[]), &Annotations::new())
    };
    // "set to resources limit": several GPUs are taken whole.
    assert!(
        admit(&[(COUNT, "2"), (MEMORY, "2"), (CORE, "1")])
            .unwrap()
            .uses
    );
    // "don't set to count limit"
    assert!(!admit(&[(MEMORY, "2"), (CORE, "1")]).unwrap().uses);
    // "don't set to memory limit", "count less than one" (one GPU, 2 units)
    assert!(admit(&[(COUNT, "1"), (CORE, "1")]).unwrap().uses);
    assert!(
        admit(&[(COUNT, "1"), (MEMORY, "2"), (CORE, "1")])
            .unwrap()
            .uses
    );
    // "memory no exist legalMemoryslices": HAMi answers found with an error, the pod
    // is refused; hami-rs refuses it with the sizes it accepts.
    assert!(admit(&[(COUNT, "1"), (MEMORY, "3"), (CORE, "1")]).is_err());
}

// ---- Test_GetNodeDevices ----

#[test]
fn get_node_devices() {
    // "get node device"
    let a = Annotations::new();
    let cap = BTreeMap::from([
        (MEMORY.to_string(), Quantity("1".into())),
        (CORE.to_string(), Quantity("1".into())),
    ]);
    let view = NodeView {
        name: "test",
        annotations: &a,
        capacity: Some(&cap),
        labels: None,
    };
    let got = mthreads().decode_inventory(&view).unwrap().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        facts(&got[0]),
        (0, "test-mthreads-0", 100, 8192, 16, MT, 0, true)
    );
}

// ---- Test_PatchAnnotations ----

#[test]
fn patch_annotations() {
    let v = mthreads();
    let devices = vec![vec![ContainerDevice {
        idx: 0,
        uuid: "test1".into(),
        dev_type: MT.into(),
        mem_mib: 1000,
        cores: 1,
        slots: 0,
    }]];
    assert_eq!(
        hami_core::codec::encode_pod_single_device(&devices),
        "test1,Mthreads,1000,1:;"
    );
    assert_eq!(
        v.allocated_annotation(),
        "hami.io/mthreads-vgpu-devices-allocated"
    );
    let extra: BTreeMap<String, String> = v
        .extra_annotations(&AllocationContext {
            node: "",
            devices: &devices,
            requests: &[None],
            node_devices: &[],
            container_names: &["c"],
            constraints: &DeviceConstraints::default(),
            now_unix: 0,
        })
        .into_iter()
        .collect();
    assert_eq!(extra["mthreads.com/gpu-index"], "0");
    assert_eq!(extra["mthreads.com/predicate-node"], "");
}

// ---- Test_checkType ----

#[test]
fn check_type() {
    type_check(mthreads().as_ref(), MT, "test111");
}

// ---- Test_checkUUID (through the fit) ----

#[test]
fn check_uuid() {
    let r = registry();
    let cases: &[(&str, &str, &str, &'static str, bool)] = &[
        ("no annos", "", "", "test1", true),
        (
            "use id the same as device id",
            "mthreads.ai/use-gpuuuid",
            "test1",
            "test1",
            true,
        ),
        (
            "use id the different from device id",
            "mthreads.ai/use-gpuuuid",
            "test1",
            "test2",
            false,
        ),
        (
            "no use id the same as device id",
            "mthreads.ai/nouse-gpuuuid",
            "test1",
            "test1",
            false,
        ),
        (
            "no use id the different from device id",
            "mthreads.ai/nouse-gpuuuid",
            "test1",
            "test2",
            true,
        ),
    ];
    for (name, key, value, id, fits) in cases {
        let n = table_node(MT, &[Row::new(id, 0, 100, 8192, 100, MT)], "");
        let mut p = ask(1, 512, Some(10));
        if !key.is_empty() {
            p = common::with_annotations(p, &[(key, value)]);
        }
        assert_eq!(table_fit(&r, &n, &p).is_ok(), *fits, "{name}");
    }
}

// ---- Test_GenerateResourceRequests ----

#[test]
fn generate_resource_requests() {
    let v = mthreads();
    let read = |c: &Container| v.container_request(c, &Annotations::new()).unwrap();
    // "all resources set to limit and request"
    let r = read(&container_with(
        "c",
        &[(COUNT, "1"), (MEMORY, "1000"), (CORE, "1")],
        &[(COUNT, "1"), (MEMORY, "1000"), (CORE, "1")],
    ))
    .unwrap();
    assert_eq!(
        (r.count, r.mem_mib, r.mem_percent, r.cores),
        (1, 512000, None, 1)
    );
    // "all resources don't set to limit,count don't set to request"
    assert!(read(&container_with("c", &[], &[(MEMORY, "1000"), (CORE, "1")])).is_none());
    // "all resources don't set to limit,cores and memory don't set to request"
    let r = read(&container_with("c", &[], &[(COUNT, "1")])).unwrap();
    assert_eq!(
        (r.count, r.mem_mib, r.mem_percent, r.cores),
        (1, 0, Some(100), 0)
    );
}

// ---- Test_CustomFilterRule ----
// HAMi keeps every container of a pod on the device an earlier container got; hami-rs
// does not (docs/vendors.md#deliberate-differences-from-hami), so both of its cases
// ("allocate device", "don't allocate device") answer "fits".

// ---- TestDevices_Fit (MiB × 8) ----

#[test]
fn devices_fit() {
    let r = registry();
    shared_fit_table(&SharedTable {
        registry: &r,
        vendor: MT,
        scale: 8,
        ask: &ask,
        use_uuid: "mthreads.ai/use-gpuuuid",
        nouse_uuid: "mthreads.ai/nouse-gpuuuid",
    });
    // "fit success:  memory percentage": Mthreads has no percentage resource.
}

// ---- TestDevices_AddResourceUsage ----

#[test]
fn add_resource_usage() {
    shared_add_resource_usage(MT);
}
