//! Request parsing from Pod specs (`docs/protocol.md#resources-and-requests`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use hami_core::config::DeviceConfig;
use hami_core::request::{ContainerKind, PodRequests, RequestError};
use hami_core::vendor::VendorRegistry;
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn first_request(limits: &[(&str, &str)]) -> Option<hami_core::model::ContainerDeviceRequest> {
    let p = pod("p", vec![container("c", limits)]);
    let r = PodRequests::from_pod(&p, &registry()).unwrap();
    r.containers[0].by_vendor.get("NVIDIA").cloned()
}

#[test]
fn count_is_required_and_must_be_positive() {
    assert!(first_request(&[("nvidia.com/gpumem", "100")]).is_none());
    assert!(first_request(&[("nvidia.com/gpu", "0")]).is_none());
    let r = first_request(&[("nvidia.com/gpu", "2"), ("nvidia.com/gpumem", "100")]).unwrap();
    assert_eq!(
        (r.count, r.mem_mib, r.dev_type.as_str()),
        (2, 100, "NVIDIA")
    );
}

#[test]
fn unset_memory_means_whole_card_unless_default_memory() {
    let r = first_request(&[("nvidia.com/gpu", "1")]).unwrap();
    assert_eq!((r.mem_mib, r.mem_percent, r.cores), (0, Some(100), 0));

    let mut cfg = DeviceConfig::default();
    cfg.nvidia.default_memory = 2048;
    cfg.nvidia.default_cores = 15;
    let reg = VendorRegistry::from_config(&cfg);
    let p = pod("p", vec![container("c", &[("nvidia.com/gpu", "1")])]);
    let r = PodRequests::from_pod(&p, &reg).unwrap().containers[0].by_vendor["NVIDIA"].clone();
    assert_eq!((r.mem_mib, r.mem_percent, r.cores), (2048, None, 15));
}

#[test]
fn memory_percentage_sentinel_and_clamping() {
    let pct = |v: &str| {
        first_request(&[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem-percentage", v)])
            .unwrap()
            .mem_percent
    };
    assert_eq!(pct("30"), Some(30));
    assert_eq!(pct("101"), Some(100));
    assert_eq!(pct("100000"), Some(100));
    // <= 0 is "unset", and unset with no memory means the whole card.
    assert_eq!(pct("0"), Some(100));
    assert_eq!(pct("-5"), Some(100));
    let r = first_request(&[
        ("nvidia.com/gpu", "1"),
        ("nvidia.com/gpumem", "500"),
        ("nvidia.com/gpumem-percentage", "0"),
    ])
    .unwrap();
    assert_eq!((r.mem_mib, r.mem_percent), (500, None));
}

#[test]
fn memory_factor_multiplies_and_bounds() {
    let mut cfg = DeviceConfig::default();
    cfg.nvidia.memory_factor = 1024;
    let reg = VendorRegistry::from_config(&cfg);
    let p = pod(
        "p",
        vec![container(
            "c",
            &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "3")],
        )],
    );
    let r = PodRequests::from_pod(&p, &reg).unwrap();
    assert_eq!(r.containers[0].by_vendor["NVIDIA"].mem_mib, 3072);
    let huge = pod(
        "p",
        vec![container(
            "c",
            &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "2097152")],
        )],
    );
    assert!(matches!(
        PodRequests::from_pod(&huge, &reg),
        Err(RequestError::TooLarge { .. })
    ));
}

#[test]
fn byte_units_are_refused_with_the_container_named() {
    for bad in ["16Gi", "16.0Gi", "1.5", "3k"] {
        let p = pod(
            "p",
            vec![container(
                "trainer",
                &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", bad)],
            )],
        );
        let err = PodRequests::from_pod(&p, &registry()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("trainer") && msg.contains("nvidia.com/gpumem") && msg.contains(bad),
            "{msg}"
        );
    }
}

#[test]
fn limits_win_over_requests() {
    let mut c = container(
        "c",
        &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "700")],
    );
    let res = c
        .resources
        .get_or_insert_with(ResourceRequirements::default);
    res.requests = Some(
        [
            ("nvidia.com/gpumem".to_string(), Quantity("300".into())),
            ("nvidia.com/gpucores".to_string(), Quantity("40".into())),
        ]
        .into(),
    );
    let p = pod("p", vec![c]);
    let r =
        PodRequests::from_pod(&p, &registry()).unwrap().containers[0].by_vendor["NVIDIA"].clone();
    // memory from limits, cores from requests (absent in limits)
    assert_eq!((r.mem_mib, r.cores), (700, 40));
}

#[test]
fn custom_resource_names_from_config() {
    let cfg = DeviceConfig::from_yaml("nvidia:\n  resourceCountName: example.com/vgpu\n  resourceMemoryName: example.com/vgpu-mem\n").unwrap();
    let reg = VendorRegistry::from_config(&cfg);
    let p = pod(
        "p",
        vec![container(
            "c",
            &[("example.com/vgpu", "1"), ("example.com/vgpu-mem", "64")],
        )],
    );
    let r = PodRequests::from_pod(&p, &reg).unwrap();
    assert_eq!(r.containers[0].by_vendor["NVIDIA"].mem_mib, 64);
    let std = pod("p", vec![container("c", &[("nvidia.com/gpu", "1")])]);
    assert!(PodRequests::from_pod(&std, &reg).unwrap().is_empty());
}

#[test]
fn init_containers_come_first_with_their_kind() {
    let mut p = pod("p", vec![container("app", &[("nvidia.com/gpu", "1")])]);
    let mut sidecar = container("side", &[]);
    sidecar.restart_policy = Some("Always".into());
    p.spec.as_mut().unwrap().init_containers =
        Some(vec![container("init", &[("nvidia.com/gpu", "1")]), sidecar]);
    let r = PodRequests::from_pod(&p, &registry()).unwrap();
    let kinds: Vec<_> = r
        .containers
        .iter()
        .map(|c| (c.name.as_str(), c.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("init", ContainerKind::Init),
            ("side", ContainerKind::Sidecar),
            ("app", ContainerKind::App)
        ]
    );
    assert_eq!(r.init_count(), 2);
    assert_eq!(r.vendors(), vec!["NVIDIA"]);
}
