//! Every device family through the real extender on the emulated cluster: a mixed
//! cluster (NVIDIA, Ascend 910B, Hygon DCU, Cambricon MLU, AMD, Enflame DRS) where each pod lands on
//! the node with its family and gets HAMi's annotations byte for byte; a pod asking
//! for two families; the vendors' locks; a broken registration taking out only that
//! vendor on that node (`docs/vendors.md`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{Cluster, Knobs, gpu_pod};
use hami_core::config::VendorSwitches;
use hami_testkit::vendor_node::VendorNode;
use serde_json::json;

fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn ascend_on() -> Knobs {
    Knobs {
        switches: VendorSwitches {
            ascend: true,
            iluvatar: false,
        },
        ..Knobs::default()
    }
}

fn mixed_nodes() -> Vec<VendorNode> {
    vec![
        VendorNode::new("nv").nvidia(2, 40960),
        VendorNode::new("npu").ascend("Ascend910B3", 8, 65536),
        VendorNode::new("dcu").dcu(2, 65520),
        VendorNode::new("mlu").mlu(2, 96),
        VendorNode::new("amd").amd(2, 196288, 304),
        VendorNode::new("gcu").enflame_drs(2, 6),
    ]
}

#[tokio::test]
async fn each_family_lands_on_its_node_with_hamis_annotations() {
    install_crypto();
    let c = Cluster::start_vendor_nodes(&mixed_nodes(), ascend_on()).await;

    // NVIDIA: unchanged.
    c.create(&gpu_pod(
        "nv-pod",
        &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"})],
        json!({}),
    ))
    .await;
    assert_eq!(c.schedule("nv-pod").await, "nv");
    let a = c
        .wait_annotations("nv-pod", |a| {
            a.contains_key("hami.io/vgpu-devices-allocated")
        })
        .await;
    // Two equal GPUs: the last registered is taken, as HAMi does
    // (docs/protocol.md#gpu-policies).
    assert_eq!(
        a["hami.io/vgpu-devices-allocated"],
        "GPU-nv-1,NVIDIA,4000,30:;"
    );
    assert!(
        c.node_lock("nv")
            .await
            .unwrap()
            .ends_with(",default,nv-pod")
    );

    // Ascend 910B3: memory rounded up to the 16 GiB template, the runtime info the
    // Ascend plugin reads, the shared lock.
    c.create(&gpu_pod(
        "npu-pod",
        &[json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "10000"})],
        json!({}),
    ))
    .await;
    assert_eq!(c.schedule("npu-pod").await, "npu");
    let a = c
        .wait_annotations("npu-pod", |a| {
            a.contains_key("hami.io/Ascend910B3-devices-allocated")
        })
        .await;
    let dev = a["hami.io/Ascend910B3-devices-allocated"].clone();
    assert!(dev.starts_with("Ascend910B3-npu-"), "{dev}");
    assert!(dev.ends_with(",Ascend910B3,16384,0:;"), "{dev}");
    assert_eq!(a["hami.io/Ascend910B3-devices-to-allocate"], dev);
    let uuid = dev.split(',').next().unwrap();
    assert_eq!(
        a["huawei.com/Ascend910B3"],
        format!(r#"[{{"UUID":"{uuid}","temp":"vir05_1c_16g","memory":16384}}]"#)
    );
    assert!(a["predicate-time"].parse::<i64>().is_ok());
    assert!(
        c.node_lock("npu")
            .await
            .unwrap()
            .ends_with(",default,npu-pod")
    );

    // Hygon DCU.
    c.create(&gpu_pod(
        "dcu-pod",
        &[json!({"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000", "hygon.com/dcucores": "30"})],
        json!({}),
    ))
    .await;
    assert_eq!(c.schedule("dcu-pod").await, "dcu");
    let a = c
        .wait_annotations("dcu-pod", |a| {
            a.contains_key("hami.io/dcu-devices-allocated")
        })
        .await;
    let dev = &a["hami.io/dcu-devices-allocated"];
    assert!(
        dev.starts_with("DCU-dcu-") && dev.ends_with(",DCU,2000,30:;"),
        "{dev}"
    );
    assert_eq!(&a["hami.io/dcu-devices-to-allocate"], dev);

    // Cambricon: its own time-stamp lock, not the shared one, and the sMLU profile.
    c.create(&gpu_pod(
        "mlu-pod",
        &[json!({"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "4", "cambricon.com/mlu.smlu.vcore": "20"})],
        json!({}),
    ))
    .await;
    assert_eq!(c.schedule("mlu-pod").await, "mlu");
    let a = c
        .wait_annotations("mlu-pod", |a| {
            a.contains_key("hami.io/cambricon-mlu-devices-allocated")
        })
        .await;
    let dev = &a["hami.io/cambricon-mlu-devices-allocated"];
    assert!(
        dev.starts_with("mlu-cambricon-mlu-") && dev.ends_with(",MLU,1024,20:;"),
        "{dev}"
    );
    let idx = dev.split(',').next().unwrap().rsplit('-').next().unwrap();
    assert_eq!(a["CAMBRICON_DSMLU_PROFILE"], format!("{idx}_20_4"));
    assert_eq!(a["CAMBRICON_DSMLU_ASSIGNED"], "false");
    assert_eq!(c.node_lock("mlu").await, None);
    let stamp = c
        .node_annotation("mlu", "cambricon.com/dsmlu.lock")
        .await
        .unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(&stamp).is_ok(),
        "{stamp}"
    );

    // AMD: compute units and the card model in the device string.
    c.create(&gpu_pod(
        "amd-pod",
        &[json!({"amd.com/gpu": "1", "amd.com/gpumem": "16384", "amd.com/gpucores": "25"})],
        json!({}),
    ))
    .await;
    assert_eq!(c.schedule("amd-pod").await, "amd");
    let a = c
        .wait_annotations("amd-pod", |a| {
            a.contains_key("hami.io/amd-devices-allocated")
        })
        .await;
    let dev = &a["hami.io/amd-devices-allocated"];
    assert!(
        dev.ends_with("-amd-amd,AMD Instinct MI300X VF,16384,76:;"),
        "{dev}"
    );
    assert_eq!(&a["hami.io/amd-devices-to-allocate"], dev);
    // Metrics show AMD compute in percent of the card (76 of 304 units: 25).
    let m = c.metrics().await;
    assert!(
        m.lines()
            .any(|l| l.starts_with("hami_gpu_core_allocated_ratio{")
                && l.contains("device_type=\"AMD Instinct MI300X VF\"")
                && l.ends_with(" 25")),
        "{m}"
    );

    // Enflame DRS: a 3-slice profile on one GCU, no lock, the annotations Enflame's
    // DRS plugin reads.
    c.create(&gpu_pod(
        "drs-pod",
        &[json!({"enflame.com/drs-gcu": "3"})],
        json!({}),
    ))
    .await;
    assert_eq!(c.schedule("drs-pod").await, "gcu");
    let a = c
        .wait_annotations("drs-pod", |a| {
            a.contains_key("hami.io/enflame-vgpu-devices-allocated")
        })
        .await;
    assert_eq!(
        a["hami.io/enflame-vgpu-devices-allocated"],
        "gcu-enflame-drs-1,Enflame,20480,50,3:;"
    );
    assert!(!a.contains_key("hami.io/enflame-vgpu-devices-to-allocate"));
    assert_eq!(
        a["assigned-containers"],
        r#"{"c0":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}}"#
    );
    assert_eq!(a["enflame.com/gcu-assigned"], "false");
    assert_eq!(a["enflame.com/gcu-assigned-index"], "1");
    assert_eq!(a["enflame.com/gcu-assigned-id"], "1");
    assert_eq!(a["enflame.com/gcu-assigned-minor"], "1");
    assert_eq!(a["enflame.com/gcu-request-size"], "3");
    assert!(a["enflame.com/gcu-assigned-time"].parse::<i64>().is_ok());
    assert_eq!(c.node_lock("gcu").await, None);

    // A family no node has: every node says so.
    c.create(&gpu_pod(
        "nowhere",
        &[json!({"hygon.com/dcunum": "3"})],
        json!({}),
    ))
    .await;
    let f = c.filter("nowhere").await;
    let failed = f.failed_nodes.unwrap();
    assert_eq!(failed["nv"], "NodeInsufficientDevice");
    assert_eq!(failed["dcu"], "NodeInsufficientDevice");
}

#[tokio::test]
async fn a_pod_asking_two_families_lands_on_the_node_with_both() {
    install_crypto();
    let nodes = vec![
        VendorNode::new("a-nv").nvidia(2, 40960),
        VendorNode::new("b-both")
            .nvidia(1, 40960)
            .ascend("Ascend910B3", 4, 65536),
    ];
    let c = Cluster::start_vendor_nodes(&nodes, ascend_on()).await;
    c.create(&gpu_pod(
        "both",
        &[
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
            json!({"huawei.com/Ascend910B3": "1"}),
        ],
        json!({}),
    ))
    .await;
    assert_eq!(c.schedule("both").await, "b-both");
    let a = c
        .wait_annotations("both", |a| {
            a.contains_key("hami.io/vgpu-devices-allocated")
                && a.contains_key("hami.io/Ascend910B3-devices-allocated")
        })
        .await;
    assert_eq!(
        a["hami.io/vgpu-devices-allocated"],
        "GPU-b-both-0,NVIDIA,1000,0:;;"
    );
    let npu = &a["hami.io/Ascend910B3-devices-allocated"];
    assert!(
        npu.starts_with(";Ascend910B3-b-both-") && npu.ends_with(",Ascend910B3,65536,0:;"),
        "{npu}"
    );
    // One shared lock for both families.
    assert!(
        c.node_lock("b-both")
            .await
            .unwrap()
            .ends_with(",default,both")
    );
}

#[tokio::test]
async fn a_broken_registration_takes_out_only_that_vendor_on_that_node() {
    install_crypto();
    let knobs = Knobs {
        registry_interval: Duration::from_millis(200),
        ..Knobs::default()
    };
    let nodes = vec![
        VendorNode::new("bad")
            .nvidia(1, 40960)
            .dcu(1, 65520)
            .annotation("hami.io/node-dcu-register", "not a register value"),
    ];
    let c = Cluster::start_vendor_nodes(&nodes, knobs).await;
    c.create(&gpu_pod(
        "dcu-pod",
        &[json!({"hygon.com/dcunum": "1"})],
        json!({}),
    ))
    .await;
    let f = c.filter("dcu-pod").await;
    let why = &f.failed_nodes.unwrap()["bad"];
    assert!(
        why.starts_with("DCU devices unavailable: hami.io/node-dcu-register is invalid:"),
        "{why}"
    );
    let ev = c.wait_node_event("bad", "InvalidDeviceRegistration").await;
    assert!(
        ev.message
            .unwrap()
            .starts_with("DCU devices are not scheduled")
    );
    // The node's NVIDIA GPUs are untouched.
    c.create(&gpu_pod(
        "nv-pod",
        &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"})],
        json!({}),
    ))
    .await;
    assert_eq!(c.schedule("nv-pod").await, "bad");
}

#[tokio::test]
async fn a_family_judged_by_node_capacity_is_out_while_kubelet_reports_none() {
    install_crypto();
    let knobs = Knobs {
        registry_interval: Duration::from_millis(200),
        ..Knobs::default()
    };
    // AMD's plugin registered its cards, but kubelet reports no amd.com/gpu: the plugin
    // is gone (docs/vendors.md#health).
    let nodes = vec![
        VendorNode::new("gone")
            .nvidia(1, 40960)
            .amd(1, 196288, 304)
            .resource("amd.com/gpu", 0),
    ];
    let c = Cluster::start_vendor_nodes(&nodes, knobs).await;
    let ev = c.wait_node_event("gone", "DevicePluginNotReporting").await;
    assert_eq!(
        ev.message.unwrap(),
        "AMD devices are not scheduled: device plugin not reporting: capacity amd.com/gpu is 0"
    );
    c.create(&gpu_pod(
        "amd-pod",
        &[json!({"amd.com/gpu": "1"})],
        json!({}),
    ))
    .await;
    let f = c.filter("amd-pod").await;
    assert_eq!(
        f.failed_nodes.unwrap()["gone"],
        "AMD devices unavailable: device plugin not reporting: capacity amd.com/gpu is 0"
    );
    // The node's NVIDIA GPUs are untouched.
    c.create(&gpu_pod(
        "nv-pod",
        &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"})],
        json!({}),
    ))
    .await;
    assert_eq!(c.schedule("nv-pod").await, "gone");
}
