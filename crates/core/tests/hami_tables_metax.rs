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

// ---- sdevice_test.go (Metax sGPU) ----

const SGPU: &str = "Metax-SGPU";

fn sgpu() -> std::sync::Arc<dyn hami_core::vendor::Vendor> {
    registry().get(SGPU).unwrap().clone()
}

fn limits(pairs: &[(&str, &str)]) -> k8s_openapi::api::core::v1::Container {
    container("c", pairs)
}

fn annotations(pairs: &[(&str, &str)]) -> hami_core::vendor::Annotations {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn sgpu_mutate_admission() {
    let v = sgpu();
    let admit = |l: &[(&str, &str)], a: &[(&str, &str)]| {
        v.mutate_admission(&mut limits(l), &annotations(a))
    };
    let one = [("metax-tech.com/sgpu", "1")];
    // "no sgpu resource"
    assert!(
        !admit(&[], &[("metax-tech.com/sgpu-qos-policy", "best-effort")])
            .unwrap()
            .uses
    );
    // "qos policy error"
    assert_eq!(
        admit(&one, &[("metax-tech.com/sgpu-qos-policy", "best-effortx")]).unwrap_err(),
        "metax-tech.com/sgpu-qos-policy must be set one of [best-effort, fixed-share, burst-share]"
    );
    // "no qos policy", "pod annotation nil" (HAMi also writes the default policy, which
    // hami-rs's fit assumes instead), "qos policy fit"
    assert!(admit(&one, &[]).unwrap().uses);
    assert!(
        admit(&one, &[("metax-tech.com/sgpu-qos-policy", "burst-share")])
            .unwrap()
            .uses
    );
    // "app class task must allocate single device"
    assert_eq!(
        admit(
            &[("metax-tech.com/sgpu", "2")],
            &[("metax-tech.com/sgpu-app-class", "online")]
        )
        .unwrap_err(),
        "app-class pod must request single device"
    );
    // "app class task verify error"
    assert_eq!(
        admit(&one, &[("metax-tech.com/sgpu-app-class", "oNLine")]).unwrap_err(),
        "metax-tech.com/sgpu-app-class must be set one of [online, offline]"
    );
    // "offline task with qos"
    assert_eq!(
        admit(
            &one,
            &[
                ("metax-tech.com/sgpu-app-class", "offline"),
                ("metax-tech.com/sgpu-qos-policy", "best-effortx")
            ]
        )
        .unwrap_err(),
        "metax-tech.com/sgpu-qos-policy must be set one of [best-effort, fixed-share, burst-share]"
    );
    // "online task with qos": the policy is not checked for online pods.
    assert!(
        admit(
            &one,
            &[
                ("metax-tech.com/sgpu-app-class", "online"),
                ("metax-tech.com/sgpu-qos-policy", "best-effortx")
            ]
        )
        .unwrap()
        .uses
    );
}

#[test]
fn sgpu_generate_resource_requests() {
    let v = sgpu();
    let read = |l: &[(&str, &str)]| {
        let r = v
            .container_request(&limits(l), &hami_core::vendor::Annotations::new())
            .unwrap()
            .unwrap();
        (r.count, r.dev_type, r.mem_mib, r.mem_percent, r.cores)
    };
    let s = SGPU.to_string();
    // "one full sgpu test", "two full sgpu test"
    assert_eq!(
        read(&[("metax-tech.com/sgpu", "1")]),
        (1, s.clone(), 0, Some(100), 100)
    );
    assert_eq!(
        read(&[("metax-tech.com/sgpu", "2")]),
        (2, s.clone(), 0, Some(100), 100)
    );
    // "one sgpu test set vcore"
    assert_eq!(
        read(&[("metax-tech.com/sgpu", "1"), ("metax-tech.com/vcore", "30")]),
        (1, s.clone(), 0, Some(100), 30)
    );
    // "one sgpu test set vmemory" (a bare number is GiB)
    assert_eq!(
        read(&[
            ("metax-tech.com/sgpu", "1"),
            ("metax-tech.com/vmemory", "16")
        ])
        .2,
        16 * 1024
    );
    // "... set vcore&vmemory", "... mem unit Mi", "... mem unit Gi"
    for (mem, mib) in [("16", 16 * 1024), ("1024Mi", 1024), ("16Gi", 16 * 1024)] {
        let (_, _, m, pct, cores) = read(&[
            ("metax-tech.com/sgpu", "1"),
            ("metax-tech.com/vcore", "60"),
            ("metax-tech.com/vmemory", mem),
        ]);
        assert_eq!((m, pct, cores), (mib, None, 60), "{mem}");
    }
}

#[test]
fn sgpu_get_devices() {
    // TestGetMetaxSDevices
    let v = sgpu();
    let decode = |value: Option<&str>| {
        let a: hami_core::vendor::Annotations = value
            .map(|v| ("metax-tech.com/node-gpu-devices".to_string(), v.to_string()))
            .into_iter()
            .collect();
        v.decode_inventory(&hami_core::vendor::NodeView::annotations_only("normal", &a))
    };
    // "test normal node"
    let got = decode(Some(
        r#"[{"uuid": "GPU-123", "model": "sgpu", "totalDevCount": 16, "totalCompute": 100, "bdf": "0000:44:00.0", "totalVRam" : 32768, "numa": 1, "healthy": true, "qosPolicy": "fixed-share"}]"#,
    ))
    .unwrap()
    .unwrap();
    let d = &got[0];
    assert_eq!(
        (&*d.id, d.count, d.cores, d.mem_mib, d.numa, d.health),
        ("GPU-123", 16, 100, 32768, 1, true)
    );
    assert_eq!(d.custom_str("QosPolicy"), Some("fixed-share"));
    // "test annotations nil": no devices.
    assert!(decode(None).is_none());
    // "test Unmarshal fail", "test devices len 0": no devices (an error naming the
    // value for the first).
    assert!(decode(Some("")).unwrap().is_err());
    assert!(decode(Some("[]")).unwrap().map_or(true, |d| d.is_empty()));
}

#[test]
fn sgpu_check_device_qos() {
    // TestCheckDeviceQos, through the fit: a best-effort pod on a device in use.
    let r = registry();
    let fits = |used: u32, policy: &str, cores: &str| {
        let mut row = Row::new("GPU-123", 0, 16, 32768, 100, SGPU).used(used, 0, 0);
        row.custom_info
            .insert("QosPolicy".into(), serde_json::json!(policy));
        let p = pod(
            "p",
            vec![container(
                "c",
                &[
                    ("metax-tech.com/sgpu", "1"),
                    ("metax-tech.com/vcore", cores),
                ],
            )],
        );
        table_fit(&r, &table_node(SGPU, &[row], ""), &p)
    };
    // "check no use device"
    assert!(fits(0, "burst-share", "50").is_ok());
    // "check request exclusive": the whole device is taken, the policy does not matter
    // (HAMi's qos check passes; the device in use then refuses the exclusive ask).
    assert!(
        fits(2, "burst-share", "100")
            .unwrap_err()
            .render()
            .contains("ExclusiveDeviceAllocateConflict")
    );
    // "check fail"
    assert_eq!(
        fits(2, "burst-share", "50").unwrap_err().render(),
        "1/1 CardNotFoundCustomFilterRule"
    );
    // "check pass"
    assert!(fits(2, "best-effort", "50").is_ok());
}
