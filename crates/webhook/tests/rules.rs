#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Every admission rule, through the AdmissionReview entry point: the response shape,
//! the deny messages, and the patch applied back to the original pod.

mod common;

use common::{container, decoded_patch, patched, pod, review};
use hami_core::config::DeviceConfig;
use hami_webhook::handler::{DEFAULT_BODY_LIMIT, Webhook};
use hami_webhook::metrics::{Metrics, Outcome};
use hami_webhook::rules::{OwnedAnnotationPolicy, RuleConfig, Rules};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

fn webhook(cfg: RuleConfig) -> Webhook {
    let mut registry = Registry::default();
    Webhook::new(
        Rules::new(cfg),
        Metrics::register(&mut registry),
        DEFAULT_BODY_LIMIT,
    )
}

fn with_nvidia(yaml: &str) -> RuleConfig {
    RuleConfig {
        devices: DeviceConfig::from_yaml(yaml).unwrap(),
        ..RuleConfig::default()
    }
}

/// Sends `object` as a v1 review; returns the response and outcome.
fn admit_with(cfg: RuleConfig, object: &Value) -> (Value, Outcome) {
    let body = serde_json::to_vec(&review("admission.k8s.io/v1", "uid-1", object.clone())).unwrap();
    webhook(cfg).admit(&body).unwrap()
}

fn admit(object: &Value) -> (Value, Outcome) {
    admit_with(RuleConfig::default(), object)
}

fn assert_denied(resp: &Value, code: u64, message: &str) {
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    assert_eq!(resp["response"]["uid"], "uid-1");
    assert_eq!(resp["response"]["status"]["code"], code, "{resp}");
    assert_eq!(resp["response"]["status"]["message"], message, "{resp}");
    assert!(resp["response"].get("patch").is_none());
}

fn assert_unchanged(resp: &Value) {
    assert_eq!(resp["response"]["allowed"], true, "{resp}");
    assert!(resp["response"].get("patch").is_none(), "{resp}");
}

/// Sets limits and requests of container `i` (path into `pod`).
fn set_res(expected: &mut Value, path: &str, name: &str, value: &str) {
    for side in ["limits", "requests"] {
        expected
            .pointer_mut(&format!("{path}/resources/{side}"))
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert(name.to_string(), json!(value));
    }
}

fn set_scheduler(expected: &mut Value, name: &str) {
    expected["spec"]["schedulerName"] = json!(name);
}

#[test]
fn whole_gpu_gets_scheduler_and_exclusive_cores() {
    let original = pod(vec![container("train", json!({"nvidia.com/gpu": "1"}))]);
    let (resp, outcome) = admit(&original);
    assert_eq!(outcome, Outcome::Patched);
    assert_eq!(resp["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(resp["kind"], "AdmissionReview");
    assert_eq!(resp["response"]["uid"], "uid-1");
    assert_eq!(resp["response"]["allowed"], true);

    let mut expected = original.clone();
    set_scheduler(&mut expected, "hami-scheduler");
    set_res(
        &mut expected,
        "/spec/containers/0",
        "nvidia.com/gpucores",
        "100",
    );
    assert_eq!(patched(&original, &resp), expected);
    // Fields the typed Pod does not know are not in the patch.
    let ops = serde_json::to_string(&decoded_patch(&resp).unwrap()).unwrap();
    assert!(!ops.contains("futureField"), "{ops}");
    assert!(!ops.contains("managedFields"), "{ops}");
}

#[test]
fn v1beta1_is_answered_in_v1beta1() {
    let original = pod(vec![container("train", json!({"nvidia.com/gpu": "1"}))]);
    let body = serde_json::to_vec(&review(
        "admission.k8s.io/v1beta1",
        "beta-uid",
        original.clone(),
    ))
    .unwrap();
    let (resp, _) = webhook(RuleConfig::default()).admit(&body).unwrap();
    assert_eq!(resp["apiVersion"], "admission.k8s.io/v1beta1");
    assert_eq!(resp["response"]["uid"], "beta-uid");
    assert_eq!(
        patched(&original, &resp)["spec"]["schedulerName"],
        "hami-scheduler"
    );
}

#[test]
fn memory_only_gets_default_gpu_count_but_stays_shared() {
    let original = pod(vec![container(
        "infer",
        json!({"nvidia.com/gpumem": "3000"}),
    )]);
    let (resp, _) = admit(&original);
    let mut expected = original.clone();
    set_scheduler(&mut expected, "hami-scheduler");
    set_res(&mut expected, "/spec/containers/0", "nvidia.com/gpu", "1");
    assert_eq!(patched(&original, &resp), expected);

    // defaultGPUNum from the device config.
    let (resp, _) = admit_with(with_nvidia("nvidia:\n  defaultGPUNum: 2\n"), &original);
    let mut expected = original.clone();
    set_scheduler(&mut expected, "hami-scheduler");
    set_res(&mut expected, "/spec/containers/0", "nvidia.com/gpu", "2");
    assert_eq!(patched(&original, &resp), expected);
}

#[test]
fn full_memory_percentage_is_exclusive_half_is_not() {
    let full = pod(vec![container(
        "a",
        json!({"nvidia.com/gpumem-percentage": "100"}),
    )]);
    let (resp, _) = admit(&full);
    let mut expected = full.clone();
    set_scheduler(&mut expected, "hami-scheduler");
    set_res(&mut expected, "/spec/containers/0", "nvidia.com/gpu", "1");
    set_res(
        &mut expected,
        "/spec/containers/0",
        "nvidia.com/gpucores",
        "100",
    );
    assert_eq!(patched(&full, &resp), expected);

    let half = pod(vec![container(
        "a",
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}),
    )]);
    let (resp, _) = admit(&half);
    let mut expected = half.clone();
    set_scheduler(&mut expected, "hami-scheduler");
    assert_eq!(patched(&half, &resp), expected);

    // Cores given explicitly are kept.
    let cores = pod(vec![container(
        "a",
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"}),
    )]);
    let (resp, _) = admit(&cores);
    let mut expected = cores.clone();
    set_scheduler(&mut expected, "hami-scheduler");
    assert_eq!(patched(&cores, &resp), expected);

    // With a default memory slice a plain GPU request is not a whole card.
    let plain = pod(vec![container("a", json!({"nvidia.com/gpu": "1"}))]);
    let (resp, _) = admit_with(with_nvidia("nvidia:\n  defaultMemory: 4096\n"), &plain);
    let mut expected = plain.clone();
    set_scheduler(&mut expected, "hami-scheduler");
    assert_eq!(patched(&plain, &resp), expected);
}

#[test]
fn invalid_values_are_denied_naming_container_and_resource() {
    let cases = [
        (
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}),
            "container train: resource nvidia.com/gpumem-percentage=150 is outside 0-100 (a percentage of one GPU)",
        ),
        (
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "-5"}),
            "container train: resource nvidia.com/gpumem-percentage=-5 is outside 0-100 (a percentage of one GPU)",
        ),
        (
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "120"}),
            "container train: resource nvidia.com/gpucores=120 is outside 0-100 (a percentage of one GPU)",
        ),
        (
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16Gi"}),
            "container train: resource nvidia.com/gpumem=\"16Gi\" must be a plain non-negative integer (no unit suffix)",
        ),
        (
            json!({"nvidia.com/gpu": "1.5"}),
            "container train: resource nvidia.com/gpu=\"1.5\" must be a plain non-negative integer (no unit suffix)",
        ),
        (
            json!({"nvidia.com/gpu": "1", "nvidia.com/priority": "high"}),
            "container train: resource nvidia.com/priority=\"high\" must be a plain non-negative integer (no unit suffix)",
        ),
        (
            json!({"nvidia.com/gpu": "0", "nvidia.com/gpumem": "1000"}),
            "container train: asks for nvidia.com/gpumem but nvidia.com/gpu is 0; ask for at least one GPU or drop nvidia.com/gpumem",
        ),
        (
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "99999999999"}),
            "container train: resource nvidia.com/gpumem=99999999999 is too large (at most 2147483647)",
        ),
    ];
    for (limits, message) in cases {
        let (resp, outcome) = admit(&pod(vec![container("train", limits)]));
        assert_denied(&resp, 400, message);
        assert_eq!(outcome, Outcome::Denied("invalid_resource"));
    }

    let (resp, _) = admit_with(
        with_nvidia("nvidia:\n  defaultGPUNum: 0\n"),
        &pod(vec![container(
            "train",
            json!({"nvidia.com/gpucores": "20"}),
        )]),
    );
    assert_denied(
        &resp,
        400,
        "container train: asks for nvidia.com/gpucores without nvidia.com/gpu, and defaultGPUNum is 0 so none can be assumed; set nvidia.com/gpu",
    );
}

#[test]
fn priority_and_core_policy_env() {
    let original = pod(vec![
        container(
            "train",
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50", "nvidia.com/priority": "1"}),
        ),
        container("logger", json!({"cpu": "100m"})),
    ]);
    let (resp, _) = admit_with(with_nvidia("nvidia:\n  gpuCorePolicy: force\n"), &original);
    let mut expected = original.clone();
    set_scheduler(&mut expected, "hami-scheduler");
    expected["spec"]["containers"][0]["env"] = json!([
        {"name": "CUDA_TASK_PRIORITY", "value": "1"},
        {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"}
    ]);
    assert_eq!(patched(&original, &resp), expected);

    // An existing value is replaced, not duplicated.
    let mut with_env = original.clone();
    with_env["spec"]["containers"][0]["env"] =
        json!([{"name": "CUDA_TASK_PRIORITY", "value": "0"}, {"name": "OTHER", "value": "x"}]);
    let (resp, _) = admit(&with_env);
    let mut expected = with_env.clone();
    set_scheduler(&mut expected, "hami-scheduler");
    expected["spec"]["containers"][0]["env"][0]["value"] = json!("1");
    assert_eq!(patched(&with_env, &resp), expected);
}

#[test]
fn overwrite_env_hides_gpus_from_containers_without_them() {
    let original = pod(vec![
        container(
            "train",
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"}),
        ),
        container("sidecar", json!({"cpu": "100m"})),
    ]);
    let (resp, _) = admit_with(with_nvidia("nvidia:\n  overwriteEnv: true\n"), &original);
    let mut expected = original.clone();
    set_scheduler(&mut expected, "hami-scheduler");
    expected["spec"]["containers"][1]["env"] =
        json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]);
    assert_eq!(patched(&original, &resp), expected);

    // A pod without GPUs: only the env, scheduler untouched.
    let plain = pod(vec![container("web", json!({"cpu": "1"}))]);
    let (resp, _) = admit_with(with_nvidia("nvidia:\n  overwriteEnv: true\n"), &plain);
    let mut expected = plain.clone();
    expected["spec"]["containers"][0]["env"] =
        json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]);
    assert_eq!(patched(&plain, &resp), expected);
}

#[test]
fn init_containers_are_handled_too() {
    let mut original = pod(vec![container("app", json!({"cpu": "1"}))]);
    original["spec"]["initContainers"] =
        json!([container("warmup", json!({"nvidia.com/gpumem": "2000"}))]);
    let (resp, _) = admit(&original);
    let mut expected = original.clone();
    set_scheduler(&mut expected, "hami-scheduler");
    set_res(
        &mut expected,
        "/spec/initContainers/0",
        "nvidia.com/gpu",
        "1",
    );
    assert_eq!(patched(&original, &resp), expected);
}

#[test]
fn runtime_class_is_set_when_configured() {
    let original = pod(vec![container(
        "a",
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "10"}),
    )]);
    let (resp, _) = admit_with(
        with_nvidia("nvidia:\n  runtimeClassName: nvidia\n"),
        &original,
    );
    let mut expected = original.clone();
    set_scheduler(&mut expected, "hami-scheduler");
    expected["spec"]["runtimeClassName"] = json!("nvidia");
    assert_eq!(patched(&original, &resp), expected);
}

#[test]
fn privileged_container_is_denied_when_pod_asks_for_gpus() {
    let mut original = pod(vec![container("train", json!({"nvidia.com/gpu": "1"}))]);
    let mut sidecar = container("mesh-init", json!({"cpu": "10m"}));
    sidecar["securityContext"] = json!({"privileged": true});
    sidecar["restartPolicy"] = json!("Always");
    original["spec"]["initContainers"] = json!([sidecar]);
    let (resp, outcome) = admit(&original);
    assert_denied(
        &resp,
        403,
        "container mesh-init is privileged; a pod asking for shared GPUs must not run privileged containers (they see every GPU on the node)",
    );
    assert_eq!(outcome, Outcome::Denied("privileged"));

    // Switch off: admitted.
    let cfg = RuleConfig {
        deny_privileged: false,
        ..RuleConfig::default()
    };
    let (resp, _) = admit_with(cfg, &original);
    assert_eq!(resp["response"]["allowed"], true);

    // A privileged pod without GPUs is none of our business.
    let mut plain = pod(vec![container("net", json!({"cpu": "1"}))]);
    plain["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    let (resp, outcome) = admit(&plain);
    assert_unchanged(&resp);
    assert_eq!(outcome, Outcome::Allowed);
}

#[test]
fn preset_node_name_is_denied_for_gpu_pods() {
    let mut original = pod(vec![container("train", json!({"nvidia.com/gpu": "1"}))]);
    original["spec"]["nodeName"] = json!("gpu-node-3");
    let (resp, outcome) = admit(&original);
    assert_denied(
        &resp,
        403,
        "pod has node assigned (spec.nodeName=gpu-node-3); pods asking for shared GPUs must be placed by hami-scheduler",
    );
    assert_eq!(outcome, Outcome::Denied("node_name"));

    let mut plain = pod(vec![container("web", json!({"cpu": "1"}))]);
    plain["spec"]["nodeName"] = json!("node-1");
    assert_unchanged(&admit(&plain).0);
}

#[test]
fn other_schedulers_are_left_alone() {
    let mut original = pod(vec![container("train", json!({"nvidia.com/gpu": "1"}))]);
    original["spec"]["schedulerName"] = json!("volcano");
    let (resp, outcome) = admit(&original);
    assert_unchanged(&resp);
    assert_eq!(outcome, Outcome::Skipped);

    // default-scheduler is taken over unless switched off.
    let default = pod(vec![container("train", json!({"nvidia.com/gpu": "1"}))]);
    let cfg = RuleConfig {
        overwrite_default_scheduler: false,
        ..RuleConfig::default()
    };
    let (resp, outcome) = admit_with(cfg, &default);
    assert_unchanged(&resp);
    assert_eq!(outcome, Outcome::Skipped);

    // A pod already naming our scheduler is processed.
    let mut ours = pod(vec![container("train", json!({"nvidia.com/gpu": "1"}))]);
    ours["spec"]["schedulerName"] = json!("hami-scheduler");
    let (resp, _) = admit(&ours);
    let mut expected = ours.clone();
    set_res(
        &mut expected,
        "/spec/containers/0",
        "nvidia.com/gpucores",
        "100",
    );
    assert_eq!(patched(&ours, &resp), expected);
}

#[test]
fn forged_scheduler_annotations_are_denied() {
    let mut original = pod(vec![container("train", json!({"nvidia.com/gpu": "1"}))]);
    original["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] =
        json!("GPU-0,NVIDIA,1000,10:;");
    original["metadata"]["annotations"]["hami.io/vgpu-node"] = json!("gpu-node-1");
    let (resp, outcome) = admit(&original);
    assert_denied(
        &resp,
        403,
        "pod sets annotation hami.io/vgpu-devices-allocated, annotation hami.io/vgpu-node which only hami-scheduler may write; remove them from the pod (or its template)",
    );
    assert_eq!(outcome, Outcome::Denied("scheduler_owned_annotations"));

    // Also for pods of other schedulers: the device plugin trusts these keys on any pod.
    let mut foreign = pod(vec![container("x", json!({"nvidia.com/gpu": "1"}))]);
    foreign["spec"]["schedulerName"] = json!("volcano");
    foreign["metadata"]["annotations"]["hami.io/bind-phase"] = json!("allocating");
    assert_eq!(admit(&foreign).0["response"]["allowed"], false);

    // The scheduler's node label counts as well; other vendors' keys too.
    let mut label = pod(vec![container("x", json!({"cpu": "1"}))]);
    label["metadata"]["labels"]["hami.io/vgpu-node"] = json!("n1");
    label["metadata"]["annotations"]["hami.io/dcu-devices-to-allocate"] = json!("x");
    assert_denied(
        &admit(&label).0,
        403,
        "pod sets annotation hami.io/dcu-devices-to-allocate, label hami.io/vgpu-node which only hami-scheduler may write; remove them from the pod (or its template)",
    );
}

#[test]
fn forged_scheduler_annotations_are_stripped_when_configured() {
    let mut original = pod(vec![container("train", json!({"nvidia.com/gpu": "1"}))]);
    original["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"] =
        json!("GPU-0,NVIDIA,1000,10:;");
    original["metadata"]["annotations"]["hami.io/bind-time"] = json!("1700000000");
    let cfg = RuleConfig {
        owned_annotations: OwnedAnnotationPolicy::Strip,
        ..RuleConfig::default()
    };
    let (resp, outcome) = admit_with(cfg.clone(), &original);
    assert_eq!(outcome, Outcome::Patched);
    assert_eq!(
        resp["response"]["warnings"],
        json!([
            "removed annotation hami.io/bind-time, annotation hami.io/vgpu-devices-to-allocate (written only by hami-scheduler)"
        ])
    );
    let mut expected = original.clone();
    let ann = expected["metadata"]["annotations"].as_object_mut().unwrap();
    ann.remove("hami.io/vgpu-devices-to-allocate");
    ann.remove("hami.io/bind-time");
    set_scheduler(&mut expected, "hami-scheduler");
    set_res(
        &mut expected,
        "/spec/containers/0",
        "nvidia.com/gpucores",
        "100",
    );
    assert_eq!(patched(&original, &resp), expected);

    // Stripped on a foreign scheduler's pod too, nothing else changed.
    let mut foreign = original.clone();
    foreign["spec"]["schedulerName"] = json!("volcano");
    let (resp, _) = admit_with(cfg, &foreign);
    let mut expected = foreign.clone();
    let ann = expected["metadata"]["annotations"].as_object_mut().unwrap();
    ann.remove("hami.io/vgpu-devices-to-allocate");
    ann.remove("hami.io/bind-time");
    assert_eq!(patched(&foreign, &resp), expected);
}

#[test]
fn user_facing_hami_annotations_are_fine() {
    let mut original = pod(vec![container("train", json!({"nvidia.com/gpu": "1"}))]);
    original["metadata"]["annotations"]["hami.io/gpu-scheduler-policy"] = json!("binpack");
    original["metadata"]["annotations"]["hami.io/node-scheduler-policy"] = json!("spread");
    let (resp, _) = admit(&original);
    assert_eq!(resp["response"]["allowed"], true);
}

#[test]
fn no_containers_and_bad_objects_are_denied_in_a_review() {
    let (resp, _) = admit(&pod(vec![]));
    assert_denied(&resp, 400, "pod has no containers");

    let mut broken = pod(vec![]);
    broken["spec"]["containers"] = json!("not a list");
    let (resp, outcome) = admit(&broken);
    assert_eq!(resp["response"]["allowed"], false);
    assert_eq!(resp["response"]["uid"], "uid-1");
    assert_eq!(resp["response"]["status"]["code"], 400);
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.starts_with("object is not a valid Pod: "), "{msg}");
    assert_eq!(outcome, Outcome::Denied("invalid_object"));

    let mut no_object = review("admission.k8s.io/v1", "uid-1", json!(null));
    no_object["request"]
        .as_object_mut()
        .unwrap()
        .remove("object");
    let (resp, _) = webhook(RuleConfig::default())
        .admit(&serde_json::to_vec(&no_object).unwrap())
        .unwrap();
    assert_denied(&resp, 400, "admission request carries no object");
}

#[test]
fn non_create_operations_pass_unchanged() {
    let original = pod(vec![container("train", json!({"nvidia.com/gpu": "1"}))]);
    let mut r = review("admission.k8s.io/v1", "u", original);
    r["request"]["operation"] = json!("UPDATE");
    let (resp, outcome) = webhook(RuleConfig::default())
        .admit(&serde_json::to_vec(&r).unwrap())
        .unwrap();
    assert_unchanged(&resp);
    assert_eq!(outcome, Outcome::Skipped);
}

#[test]
fn second_pass_over_a_mutated_pod_changes_nothing() {
    let cfg = with_nvidia("nvidia:\n  gpuCorePolicy: disable\n  overwriteEnv: true\n");
    let original = pod(vec![
        container(
            "train",
            json!({"nvidia.com/gpumem-percentage": "100", "nvidia.com/priority": "0"}),
        ),
        container("sidecar", json!({"cpu": "1"})),
    ]);
    let (resp, _) = admit_with(cfg.clone(), &original);
    let once = patched(&original, &resp);
    assert_ne!(once, original);
    let (again, outcome) = admit_with(cfg, &once);
    assert_unchanged(&again);
    assert_eq!(outcome, Outcome::Allowed);
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let wh = webhook(RuleConfig::default());
    for body in [
        &b""[..],
        b"garbage",
        b"{}",
        b"null",
        b"[]",
        b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{\"uid\":7}}",
        b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{}}",
        b"\xff\xfe\x00",
    ] {
        assert!(wh.admit(body).is_err(), "{}", String::from_utf8_lossy(body));
    }
}
