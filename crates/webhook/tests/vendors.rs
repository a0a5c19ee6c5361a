#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Every device family's admission rules through the AdmissionReview entry point
//! (`docs/vendors.md#admission`): routing to our scheduler, HAMi's refusal texts, and the
//! resources and environment written back.

mod common;

use common::{container, patched, pod, review};
use hami_core::config::DeviceConfig;
use hami_core::vendor::VendorSwitches;
use hami_webhook::handler::{DEFAULT_BODY_LIMIT, Webhook};
use hami_webhook::metrics::{Metrics, Outcome};
use hami_webhook::rules::{RuleConfig, Rules};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

/// Rules with the chart's device config and the optional families switched as given.
fn rules(ascend: bool, iluvatar: bool) -> RuleConfig {
    RuleConfig {
        devices: DeviceConfig::default().with_switches(VendorSwitches { ascend, iluvatar }),
        ..RuleConfig::default()
    }
}

fn admit_with(cfg: RuleConfig, object: &Value) -> (Value, Outcome) {
    let mut registry = Registry::default();
    let webhook = Webhook::new(
        Rules::new(cfg),
        Metrics::register(&mut registry),
        DEFAULT_BODY_LIMIT,
    );
    let body = serde_json::to_vec(&review("admission.k8s.io/v1", "uid-1", object.clone())).unwrap();
    webhook.admit(&body).unwrap()
}

/// Admits with every family switched on.
fn admit(object: &Value) -> (Value, Outcome) {
    admit_with(rules(true, true), object)
}

fn assert_denied(resp: &Value, message: &str) {
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    assert_eq!(resp["response"]["status"]["code"], 400, "{resp}");
    assert_eq!(resp["response"]["status"]["message"], message, "{resp}");
}

fn one(limits: Value) -> Value {
    pod(vec![container("train", limits)])
}

fn with_annotations(mut p: Value, annotations: &[(&str, &str)]) -> Value {
    for (k, v) in annotations {
        p["metadata"]["annotations"][*k] = json!(v);
    }
    p
}

/// The first container's limit `name` after admission.
fn limit_after(original: &Value, resp: &Value, name: &str) -> Value {
    let p = patched(original, resp);
    let limit = p["spec"]["containers"][0]["resources"]["limits"][name].clone();
    assert_eq!(
        limit, p["spec"]["containers"][0]["resources"]["requests"][name],
        "limits and requests of {name} agree"
    );
    limit
}

#[test]
fn every_family_routes_its_pods_to_the_scheduler() {
    let cases = [
        json!({"hygon.com/dcunum": "1"}),
        json!({"amd.com/gpu": "1"}),
        json!({"amd.com/gpumem": "1024"}),
        json!({"cambricon.com/vmlu": "1"}),
        json!({"iluvatar.ai/BI-V150-vgpu": "1"}),
        json!({"huawei.com/Ascend910B3": "1"}),
        json!({"metax-tech.com/gpu": "1"}),
        json!({"metax-tech.com/sgpu": "1"}),
        json!({"mthreads.com/vgpu": "1"}),
        json!({"enflame.com/gcu": "1"}),
        json!({"enflame.com/drs-gcu": "3"}),
        json!({"enflame.com/gcu-memory": "20"}),
        json!({"enflame.com/gcu-core": "40"}),
        json!({"kunlunxin.com/xpu": "1"}),
        json!({"kunlunxin.com/vxpu": "1"}),
        json!({"aws.amazon.com/neuron": "1"}),
        json!({"aws.amazon.com/neuroncore": "2"}),
        json!({"vastaitech.com/va": "1"}),
        json!({"birentech.com/gpu": "1"}),
    ];
    for limits in cases {
        let original = one(limits.clone());
        let (resp, outcome) = admit(&original);
        assert_eq!(outcome, Outcome::Patched, "{limits}: {resp}");
        assert_eq!(
            patched(&original, &resp)["spec"]["schedulerName"],
            "hami-scheduler",
            "{limits}"
        );
    }
}

#[test]
fn switched_off_families_are_left_to_the_default_scheduler() {
    for limits in [
        json!({"huawei.com/Ascend910B3": "1"}),
        json!({"iluvatar.ai/BI-V150-vgpu": "1"}),
    ] {
        let (resp, outcome) = admit_with(rules(false, false), &one(limits.clone()));
        assert_eq!(outcome, Outcome::Allowed, "{limits}: {resp}");
        assert!(resp["response"].get("patch").is_none(), "{limits}");
    }
}

#[test]
fn a_pod_mixing_families_is_routed_once_and_checked_by_each() {
    let original = pod(vec![
        container("cuda", json!({"nvidia.com/gpu": "1"})),
        container("npu", json!({"huawei.com/Ascend910C": "1"})),
    ]);
    let (resp, outcome) = admit(&original);
    assert_eq!(outcome, Outcome::Patched);
    let p = patched(&original, &resp);
    assert_eq!(p["spec"]["schedulerName"], "hami-scheduler");
    assert_eq!(
        p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"],
        "100"
    );
    assert_eq!(
        p["spec"]["containers"][1]["resources"]["limits"]["huawei.com/Ascend910C"],
        "2"
    );
}

#[test]
fn amd_counts_and_core_percentages_are_checked_with_hami_texts() {
    for cores in ["0", "101", "-3"] {
        let (resp, outcome) = admit(&one(json!({"amd.com/gpu": "1", "amd.com/gpucores": cores})));
        assert_denied(
            &resp,
            "amd.com/gpucores must be an integer percentage between 1 and 100",
        );
        assert_eq!(outcome, Outcome::Denied("invalid_resource"));
    }
    let (resp, _) = admit(&one(json!({"amd.com/gpu": "0", "amd.com/gpumem": "512"})));
    assert_denied(&resp, "amd.com/gpu must be a positive integer");
    let original = one(json!({"amd.com/gpu": "1", "amd.com/gpucores": "100"}));
    let (resp, outcome) = admit(&original);
    assert_eq!(outcome, Outcome::Patched, "{resp}");
}

#[test]
fn iluvatar_multi_gpu_cores_and_container_name() {
    let original = one(json!({"iluvatar.ai/MR-V100-vgpu": "2"}));
    let (resp, _) = admit(&original);
    assert_eq!(
        limit_after(&original, &resp, "iluvatar.ai/MR-V100.vCore"),
        "200"
    );
    let env = patched(&original, &resp)["spec"]["containers"][0]["env"].clone();
    assert_eq!(
        env,
        json!([{"name": "SOL_CONTINER_NAME", "value": "train"}])
    );

    // One GPU: no cores written.
    let original = one(json!({"iluvatar.ai/MR-V100-vgpu": "1"}));
    let (resp, _) = admit(&original);
    assert_eq!(
        limit_after(&original, &resp, "iluvatar.ai/MR-V100.vCore"),
        Value::Null
    );
}

#[test]
fn ascend_modules_templates_and_split_modes() {
    // 910C: one NPU becomes a module of two, with the whole memory.
    let original = one(json!({"huawei.com/Ascend910C": "1"}));
    let (resp, _) = admit(&original);
    assert_eq!(limit_after(&original, &resp, "huawei.com/Ascend910C"), "2");
    assert_eq!(
        limit_after(&original, &resp, "huawei.com/Ascend910C-memory"),
        "65536"
    );
    let (resp, _) = admit(&one(json!({"huawei.com/Ascend910C": "3"})));
    assert_denied(&resp, "Ascend910C device request must be 1 or 2*n, got 3");

    // A hard split rounds memory up to a template.
    let original =
        one(json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "10000"}));
    let (resp, _) = admit(&original);
    assert_eq!(
        limit_after(&original, &resp, "huawei.com/Ascend910B3-memory"),
        "16384"
    );
    let (resp, _) = admit(&one(
        json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "99999"}),
    ));
    assert_denied(&resp, "huawei.com/Ascend910B3-memory 99999 is invalid");
    let (resp, _) = admit(&one(
        json!({"huawei.com/Ascend910B3": "2", "huawei.com/Ascend910B3-memory": "10000"}),
    ));
    assert_denied(&resp, "vNPU nor supported for multiple devices");

    // Cores only with the soft split, which keeps the memory asked for.
    let cores = json!({"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "10000", "huawei.com/Ascend910B3-core": "30"});
    let (resp, _) = admit(&one(cores.clone()));
    assert_denied(
        &resp,
        "huawei.com/Ascend910B3-core is only supported in hami-core (soft split) mode: set the pod annotation huawei.com/vnpu-mode: hami-core",
    );
    let original = with_annotations(one(cores), &[("huawei.com/vnpu-mode", "hami-core")]);
    let (resp, outcome) = admit(&original);
    assert_eq!(outcome, Outcome::Patched, "{resp}");
    assert_eq!(
        limit_after(&original, &resp, "huawei.com/Ascend910B3-memory"),
        "10000"
    );
}

#[test]
fn ascend_overwrite_env_hides_npus_from_other_containers() {
    let mut cfg = rules(true, false);
    for chip in &mut cfg.devices.vnpus.configs {
        chip.overwrite_env = true;
    }
    let original = pod(vec![
        container("npu", json!({"huawei.com/Ascend910B3": "1"})),
        container("log", json!({"cpu": "1"})),
    ]);
    let (resp, _) = admit_with(cfg, &original);
    let p = patched(&original, &resp);
    assert_eq!(
        p["spec"]["containers"][1]["env"],
        json!([{"name": "ASCEND_VISIBLE_DEVICES", "value": ""}])
    );
    assert_eq!(p["spec"]["containers"][0]["env"], Value::Null);
}

#[test]
fn metax_sgpu_app_class_and_qos_policy_are_checked() {
    let sgpu = || one(json!({"metax-tech.com/sgpu": "1"}));
    let (resp, _) = admit(&with_annotations(
        sgpu(),
        &[("metax-tech.com/sgpu-app-class", "batch")],
    ));
    assert_denied(
        &resp,
        "metax-tech.com/sgpu-app-class must be set one of [online, offline]",
    );
    let (resp, _) = admit(&with_annotations(
        one(json!({"metax-tech.com/sgpu": "2"})),
        &[("metax-tech.com/sgpu-app-class", "online")],
    ));
    assert_denied(&resp, "app-class pod must request single device");
    let (resp, _) = admit(&with_annotations(
        sgpu(),
        &[("metax-tech.com/sgpu-qos-policy", "greedy")],
    ));
    assert_denied(
        &resp,
        "metax-tech.com/sgpu-qos-policy must be set one of [best-effort, fixed-share, burst-share]",
    );
    let (resp, outcome) = admit(&with_annotations(
        sgpu(),
        &[
            ("metax-tech.com/sgpu-app-class", "offline"),
            ("metax-tech.com/sgpu-qos-policy", "fixed-share"),
        ],
    ));
    assert_eq!(outcome, Outcome::Patched, "{resp}");
}

#[test]
fn mthreads_whole_gpus_and_memory_sizes() {
    let original = one(json!({"mthreads.com/vgpu": "2"}));
    let (resp, _) = admit(&original);
    assert_eq!(
        limit_after(&original, &resp, "mthreads.com/sgpu-core"),
        "32"
    );
    assert_eq!(
        limit_after(&original, &resp, "mthreads.com/sgpu-memory"),
        "192"
    );
    let (resp, _) = admit(&one(
        json!({"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "3"}),
    ));
    assert_denied(
        &resp,
        "sGPU memory request value is invalid, valid values are [2, 4, 8, 16, 32, 64, 96]",
    );
    let original = one(json!({"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "8"}));
    let (resp, _) = admit(&original);
    assert_eq!(
        limit_after(&original, &resp, "mthreads.com/sgpu-memory"),
        "8"
    );
}

#[test]
fn kunlun_vxpu_memory_is_rounded_to_its_size() {
    for (asked, size) in [("1000", "24576"), ("30000", "49152"), ("60000", "98304")] {
        let original = one(json!({"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": asked}));
        let (resp, _) = admit(&original);
        assert_eq!(
            limit_after(&original, &resp, "kunlunxin.com/vxpu-memory"),
            size,
            "{asked}"
        );
    }
}

#[test]
fn enflame_drs_slices_memory_and_compute_are_checked_with_hami_texts() {
    for (limits, message) in [
        (
            json!({"enflame.com/drs-gcu": "0"}),
            "enflame.com/drs-gcu must be greater than 0",
        ),
        (
            json!({"enflame.com/gcu-memory": "0", "enflame.com/gcu-core": "40"}),
            "enflame.com/gcu-memory must be greater than 0",
        ),
        (
            json!({"enflame.com/gcu-core": "101"}),
            "enflame.com/gcu-core must be in range (0,100]",
        ),
    ] {
        let (resp, outcome) = admit(&one(limits.clone()));
        assert_denied(&resp, message);
        assert_eq!(outcome, Outcome::Denied("invalid_resource"), "{limits}");
    }
    // Limits and requests of each resource asked agree after admission.
    let original = one(json!({"enflame.com/gcu-memory": "20", "enflame.com/gcu-core": "40"}));
    let (resp, _) = admit(&original);
    assert_eq!(
        limit_after(&original, &resp, "enflame.com/gcu-memory"),
        "20"
    );
    assert_eq!(limit_after(&original, &resp, "enflame.com/gcu-core"), "40");
    let original = one(json!({"enflame.com/drs-gcu": "3"}));
    let (resp, _) = admit(&original);
    assert_eq!(limit_after(&original, &resp, "enflame.com/drs-gcu"), "3");
}

#[test]
fn privileged_containers_are_refused_in_any_familys_pod() {
    let mut original = one(json!({"hygon.com/dcunum": "1"}));
    original["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    let (resp, outcome) = admit(&original);
    assert_eq!(outcome, Outcome::Denied("privileged"), "{resp}");
}
