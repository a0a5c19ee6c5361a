//! HAMi's Allocate protocol end to end: kubelet emulator → plugin → API server emulator.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use common::*;
use hami_device_plugin::BackendEvent;
use hami_kubelet_api::v1beta1::device_plugin_client::DevicePluginClient;
use hami_kubelet_api::v1beta1::{
    AllocateRequest, ContainerAllocateRequest, ContainerAllocateResponse, Mount,
};
use hami_testkit::kubelet::{AdmitError, PluginCall};
use serde_json::json;

const TO_ALLOCATE: &str = "hami.io/vgpu-devices-to-allocate";
const PHASE: &str = "hami.io/bind-phase";

fn rejected(e: AdmitError) -> String {
    match e {
        AdmitError::Rejected { reason, message } => {
            assert_eq!(reason, "UnexpectedAdmissionError");
            assert!(
                message.starts_with("Allocate failed due to rpc error: "),
                "{message}"
            );
            assert!(message.ends_with(", which is unexpected"), "{message}");
            message
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

fn env(r: &ContainerAllocateResponse) -> BTreeMap<&str, &str> {
    r.envs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

fn m(container: &str, host: &str, read_only: bool) -> Mount {
    Mount {
        container_path: container.into(),
        host_path: host.into(),
        read_only,
    }
}

/// Checks the cache file env and removes it (its name is random), returning the rest.
fn without_cache<'a>(mut e: BTreeMap<&'a str, &'a str>, hook: &str) -> BTreeMap<&'a str, &'a str> {
    let cache = e
        .remove("CUDA_DEVICE_MEMORY_SHARED_CACHE")
        .expect("cache env");
    let name = cache
        .strip_prefix(&format!("{hook}/vgpu/"))
        .expect("under the hook path");
    let uuid = name.strip_suffix(".cache").expect(".cache file");
    assert_eq!(uuid.len(), 36, "{cache}");
    e
}

async fn plugin_client(c: &Cluster) -> DevicePluginClient<tonic::transport::Channel> {
    let channel = hami_kubelet_api::unix::connect(&c.kubelet.dir().join("nvidia-gpu.sock"))
        .await
        .unwrap();
    DevicePluginClient::new(channel)
}

#[tokio::test]
async fn single_container_gets_libvgpu_env_and_mounts_then_the_pod_is_done() {
    let mut c = Cluster::start().await;
    c.ready(8).await;
    let pod = c
        .scheduled_pod(
            "p1",
            json!([gpu_container("main", 1)]),
            json!([]),
            "GPU-b,NVIDIA,3000,30:;",
            true,
        )
        .await;
    assert!(c.lock_value().await.unwrap().ends_with(",default,p1"));

    let admitted = c.kubelet.admit(&pod).await.unwrap();
    let got = admitted.get("main", RESOURCE).unwrap();
    assert_eq!(
        got.devices,
        ["GPU-b-0"],
        "preferred allocation steered kubelet to the annotated GPU"
    );
    let hook = c.hook_path().display().to_string();
    let uid = pod.metadata.uid.clone().unwrap();
    assert_eq!(
        without_cache(env(&got.response), &hook),
        BTreeMap::from([
            ("NVIDIA_VISIBLE_DEVICES", "GPU-b"),
            ("CUDA_DEVICE_MEMORY_LIMIT_0", "3000m"),
            ("CUDA_DEVICE_SM_LIMIT", "30"),
            ("LIBCUDA_LOG_LEVEL", "1"),
        ])
    );
    let cache_dir = format!("{hook}/vgpu/containers/{uid}_main");
    assert_eq!(
        got.response.mounts,
        [
            m(
                &format!("{hook}/vgpu/libvgpu.so"),
                &format!("{hook}/vgpu/libvgpu.so"),
                true
            ),
            m(&format!("{hook}/vgpu"), &cache_dir, false),
            m("/tmp/vgpulock", "/tmp/vgpulock", false),
            m(
                "/etc/ld.so.preload",
                &format!("{hook}/vgpu/ld.so.preload"),
                true
            ),
        ]
    );
    let meta = std::fs::metadata(&cache_dir).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o777, 0o777);
    assert!(got.response.devices.is_empty() && got.response.annotations.is_empty());

    let ann = c.pod_annotations("p1").await;
    assert_eq!(ann[TO_ALLOCATE], ";");
    assert_eq!(
        ann["hami.io/vgpu-devices-allocated"], "GPU-b,NVIDIA,3000,30:;",
        "the ledger is untouched"
    );
    assert_eq!(ann[PHASE], "success");
    assert_eq!(c.lock_value().await, None, "node lock released");

    let calls = c.kubelet.calls();
    assert!(calls.iter().any(|call| matches!(call, PluginCall::GetPreferredAllocation { result: Ok(ids), .. } if ids == &["GPU-b-0"])));
}

#[tokio::test]
async fn multi_container_multi_gpu_pod_consumes_one_entry_per_container() {
    let mut c = Cluster::start().await;
    c.ready(8).await;
    let value = ";GPU-a,NVIDIA,4000,50:GPU-b,NVIDIA,4000,50:;GPU-b,NVIDIA,2000,20:;";
    let pod = c
        .scheduled_pod(
            "p2",
            json!([
                plain_container("sidecar"),
                gpu_container("train", 2),
                gpu_container("eval", 1)
            ]),
            json!([]),
            value,
            true,
        )
        .await;
    let admitted = c.kubelet.admit(&pod).await.unwrap();
    let hook = c.hook_path().display().to_string();

    assert!(
        admitted.containers[0].resources.is_empty(),
        "sidecar asked for nothing"
    );
    let train = admitted.get("train", RESOURCE).unwrap();
    assert_eq!(train.devices, ["GPU-a-0", "GPU-b-0"]);
    assert_eq!(
        without_cache(env(&train.response), &hook),
        BTreeMap::from([
            ("NVIDIA_VISIBLE_DEVICES", "GPU-a,GPU-b"),
            ("CUDA_DEVICE_MEMORY_LIMIT_0", "4000m"),
            ("CUDA_DEVICE_MEMORY_LIMIT_1", "4000m"),
            ("CUDA_DEVICE_SM_LIMIT", "50"),
            ("LIBCUDA_LOG_LEVEL", "1"),
        ])
    );
    let eval = admitted.get("eval", RESOURCE).unwrap();
    assert_eq!(
        eval.devices,
        ["GPU-b-1"],
        "a free replica of the annotated GPU"
    );
    assert_eq!(
        without_cache(env(&eval.response), &hook),
        BTreeMap::from([
            ("NVIDIA_VISIBLE_DEVICES", "GPU-b"),
            ("CUDA_DEVICE_MEMORY_LIMIT_0", "2000m"),
            ("CUDA_DEVICE_SM_LIMIT", "20"),
            ("LIBCUDA_LOG_LEVEL", "1"),
        ])
    );
    let uid = pod.metadata.uid.clone().unwrap();
    assert_eq!(
        eval.response.mounts[1].host_path,
        format!("{hook}/vgpu/containers/{uid}_eval")
    );
    assert_ne!(
        train.response.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"],
        eval.response.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
    );

    let ann = c.pod_annotations("p2").await;
    assert_eq!(ann[TO_ALLOCATE], ";;;");
    assert_eq!(ann[PHASE], "success");
    assert_eq!(c.lock_value().await, None);
}

#[tokio::test]
async fn partial_allocation_keeps_the_lock_and_several_requests_in_one_call_each_get_an_entry() {
    let mut c = Cluster::start().await;
    c.ready(8).await;
    c.scheduled_pod(
        "p3",
        json!([gpu_container("a", 1), gpu_container("b", 1)]),
        json!([gpu_container("init", 1)]),
        "GPU-a,NVIDIA,100,10:;GPU-a,NVIDIA,200,20:;GPU-b,NVIDIA,300,30:;",
        true,
    )
    .await;
    let mut client = plugin_client(&c).await;
    let one = |ids: &[&str]| ContainerAllocateRequest {
        devices_ids: ids.iter().map(|s| s.to_string()).collect(),
    };

    // The init container alone: entry 0.
    let r = client
        .allocate(AllocateRequest {
            container_requests: vec![one(&["GPU-a-3"])],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.container_responses.len(), 1);
    assert_eq!(
        r.container_responses[0].envs["CUDA_DEVICE_MEMORY_LIMIT_0"],
        "100m"
    );
    assert!(
        r.container_responses[0].mounts[1]
            .host_path
            .ends_with("_init")
    );
    let ann = c.pod_annotations("p3").await;
    assert_eq!(
        ann[TO_ALLOCATE],
        ";GPU-a,NVIDIA,200,20:;GPU-b,NVIDIA,300,30:;"
    );
    assert_eq!(ann[PHASE], "allocating", "not done yet");
    assert!(
        c.lock_value().await.unwrap().ends_with(",default,p3"),
        "lock still held"
    );

    // Both app containers in one call, in order.
    let r = client
        .allocate(AllocateRequest {
            container_requests: vec![one(&["GPU-a-1"]), one(&["GPU-b-2"])],
        })
        .await
        .unwrap()
        .into_inner();
    let limits: Vec<&str> = r
        .container_responses
        .iter()
        .map(|x| x.envs["CUDA_DEVICE_MEMORY_LIMIT_0"].as_str())
        .collect();
    assert_eq!(limits, ["200m", "300m"]);
    assert_eq!(
        r.container_responses[1].envs["NVIDIA_VISIBLE_DEVICES"],
        "GPU-b"
    );
    assert!(r.container_responses[1].mounts[1].host_path.ends_with("_b"));
    let ann = c.pod_annotations("p3").await;
    assert_eq!(ann[TO_ALLOCATE], ";;;");
    assert_eq!(ann[PHASE], "success");
    assert_eq!(c.lock_value().await, None);
}

#[tokio::test]
async fn a_pod_the_scheduler_did_not_place_is_refused() {
    let mut c = Cluster::start().await;
    c.ready(8).await;
    // Forged: nodeName and device annotations written by the user, no bind phase/time.
    let forged = c
        .create_pod(json!({
            "metadata": {"name": "forged", "namespace": NS, "annotations": {
                TO_ALLOCATE: "GPU-a,NVIDIA,15000,100:;",
                "hami.io/vgpu-node": NODE,
            }},
            "spec": {"nodeName": NODE, "containers": [gpu_container("main", 1)]},
        }))
        .await;
    let msg = rejected(c.kubelet.admit(&forged).await.unwrap_err());
    assert!(
        msg.contains("no pod on node node-a is waiting for a GPU allocation"),
        "{msg}"
    );
    let ann = c.pod_annotations("forged").await;
    assert_eq!(ann[TO_ALLOCATE], "GPU-a,NVIDIA,15000,100:;", "untouched");
    assert!(!ann.contains_key(PHASE));

    // Bind phase forged too, but placed on another node.
    let other = c
        .create_pod(json!({
            "metadata": {"name": "elsewhere", "namespace": NS, "annotations": {
                TO_ALLOCATE: "GPU-a,NVIDIA,15000,100:;",
                "hami.io/vgpu-node": "node-b",
                PHASE: "allocating",
                "hami.io/bind-time": "1767225601",
            }},
            "spec": {"nodeName": NODE, "containers": [gpu_container("main", 1)]},
        }))
        .await;
    let msg = rejected(c.kubelet.admit(&other).await.unwrap_err());
    assert!(msg.contains("no pod on node node-a"), "{msg}");
    assert_eq!(c.pod_annotations("elsewhere").await[PHASE], "allocating");
}

#[tokio::test]
async fn malformed_annotation_fails_the_pod_clearly_and_releases_the_lock() {
    let mut c = Cluster::start().await;
    c.ready(8).await;
    let pod = c
        .scheduled_pod(
            "bad",
            json!([gpu_container("main", 1)]),
            json!([]),
            "GPU-a,NVIDIA,oops:;",
            true,
        )
        .await;
    let msg = rejected(c.kubelet.admit(&pod).await.unwrap_err());
    assert!(
        msg.contains("pod default/bad: annotation hami.io/vgpu-devices-to-allocate is malformed"),
        "{msg}"
    );
    assert!(msg.contains("code = FailedPrecondition"), "{msg}");
    assert_eq!(c.pod_annotations("bad").await[PHASE], "failed");
    assert_eq!(c.lock_value().await, None, "lock released on failure");
}

#[tokio::test]
async fn count_mismatch_unknown_and_unhealthy_gpus_fail_the_pod() {
    let mut c = Cluster::start().await;
    c.ready(8).await;

    let pod = c
        .scheduled_pod(
            "two",
            json!([gpu_container("main", 2)]),
            json!([]),
            "GPU-a,NVIDIA,100,10:;",
            true,
        )
        .await;
    let msg = rejected(c.kubelet.admit(&pod).await.unwrap_err());
    assert!(
        msg.contains("device number not matched: container main asks kubelet for 2 nvidia.com/gpu, the scheduler assigned 1 GPUs"),
        "{msg}"
    );
    assert_eq!(c.pod_annotations("two").await[PHASE], "failed");
    assert_eq!(c.lock_value().await, None);

    let pod = c
        .scheduled_pod(
            "ghost",
            json!([gpu_container("main", 1)]),
            json!([]),
            "GPU-zzz,NVIDIA,100,10:;",
            true,
        )
        .await;
    let msg = rejected(c.kubelet.admit(&pod).await.unwrap_err());
    assert!(
        msg.contains("GPU GPU-zzz assigned to container main is not a GPU of node node-a"),
        "{msg}"
    );
    assert_eq!(c.lock_value().await, None);

    c.backend
        .send(BackendEvent::Health {
            uuid: "GPU-a".into(),
            healthy: false,
            reason: "test".into(),
        })
        .await;
    assert!(c.kubelet.wait_for_healthy(RESOURCE, 4, WAIT).await);
    let pod = c
        .scheduled_pod(
            "sick",
            json!([gpu_container("main", 1)]),
            json!([]),
            "GPU-a,NVIDIA,100,10:;",
            true,
        )
        .await;
    let msg = rejected(c.kubelet.admit(&pod).await.unwrap_err());
    assert!(
        msg.contains("GPU GPU-a assigned to container main is unhealthy"),
        "{msg}"
    );
    assert_eq!(c.pod_annotations("sick").await[PHASE], "failed");
    assert_eq!(c.lock_value().await, None);
}

#[tokio::test]
async fn config_switches_and_cuda_disable_control_shape_the_response() {
    let mut c = Cluster::start_with(
        |cfg| {
            cfg.memory_scaling = 2.0;
            cfg.vgpu_hook.disable_core_limit = true;
            cfg.vgpu_hook.lib_cuda_log_level = String::new();
            cfg.preferred_allocation = false;
        },
        vec![gpu("GPU-a", 0, 1000, 0)],
        json!({}),
    )
    .await;
    c.ready(4).await;
    let hook = c.hook_path().display().to_string();
    std::fs::create_dir_all(format!("{hook}/vgpu")).unwrap();
    std::fs::write(format!("{hook}/vgpu/license"), b"x").unwrap();
    let mut ctr = gpu_container("main", 1);
    ctr["env"] = json!([{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]);
    let pod = c
        .scheduled_pod(
            "opts",
            json!([ctr]),
            json!([]),
            "GPU-a,NVIDIA,1500,0:;",
            true,
        )
        .await;
    let admitted = c.kubelet.admit(&pod).await.unwrap();
    let got = admitted.get("main", RESOURCE).unwrap();
    assert_eq!(
        without_cache(env(&got.response), &hook),
        BTreeMap::from([
            ("NVIDIA_VISIBLE_DEVICES", "GPU-a"),
            ("CUDA_DEVICE_MEMORY_LIMIT_0", "1500m"),
            ("CUDA_DEVICE_SM_LIMIT", "0"),
            ("CUDA_OVERSUBSCRIBE", "true"),
            ("GPU_CORE_UTILIZATION_POLICY", "disable"),
        ])
    );
    let targets: Vec<&str> = got
        .response
        .mounts
        .iter()
        .map(|m| m.container_path.as_str())
        .collect();
    let vgpu = format!("{hook}/vgpu");
    assert_eq!(
        targets,
        [
            format!("{vgpu}/libvgpu.so").as_str(),
            vgpu.as_str(),
            "/tmp/vgpulock",
            "/tmp/license",
            "/usr/bin/vgpuvalidator"
        ],
        "no ld.so.preload with CUDA_DISABLE_CONTROL; license mounts when present"
    );
    assert!(
        !c.kubelet
            .calls()
            .iter()
            .any(|call| matches!(call, PluginCall::GetPreferredAllocation { .. })),
        "preferred allocation off"
    );
}

#[tokio::test]
async fn the_lock_owner_goes_first_then_the_oldest_pending_pod() {
    let mut c = Cluster::start().await;
    c.ready(8).await;
    let old = c
        .scheduled_pod(
            "old",
            json!([gpu_container("main", 1)]),
            json!([]),
            "GPU-a,NVIDIA,111,10:;",
            false,
        )
        .await;
    let owner = c
        .scheduled_pod(
            "owner",
            json!([gpu_container("main", 1)]),
            json!([]),
            "GPU-b,NVIDIA,222,20:;",
            true,
        )
        .await;
    let admitted = c.kubelet.admit(&owner).await.unwrap();
    assert_eq!(
        admitted.get("main", RESOURCE).unwrap().response.envs["CUDA_DEVICE_MEMORY_LIMIT_0"],
        "222m"
    );
    assert_eq!(c.pod_annotations("owner").await[PHASE], "success");
    assert_eq!(c.pod_annotations("old").await[PHASE], "allocating");

    // No lock now: the oldest pending pod on the node.
    let admitted = c.kubelet.admit(&old).await.unwrap();
    assert_eq!(
        admitted.get("main", RESOURCE).unwrap().response.envs["CUDA_DEVICE_MEMORY_LIMIT_0"],
        "111m"
    );
    assert_eq!(c.pod_annotations("old").await[PHASE], "success");
}

/// A cluster whose plugin is ready, with pod `name` placed on GPU-b (3000 MiB, 30 %) for
/// its one container, bound and holding the node lock.
async fn one_gpu_pod_placed(name: &str) -> (Cluster, k8s_openapi::api::core::v1::Pod) {
    let mut c = Cluster::start().await;
    c.ready(8).await;
    let pod = c
        .scheduled_pod(
            name,
            json!([gpu_container("main", 1)]),
            json!([]),
            "GPU-b,NVIDIA,3000,30:;",
            true,
        )
        .await;
    (c, pod)
}

/// The allocation write meets a write conflict of the API server (a 409: the patch names
/// no resourceVersion, so it is not a precondition of ours): it is retried and the pod
/// admitted, instead of failing its admission (one pod in twenty failed so in the chaos
/// run, `docs/architecture.md#chaos-run`).
#[tokio::test]
async fn a_write_conflict_on_the_allocation_write_is_retried() {
    let (c, pod) = one_gpu_pod_placed("p1").await;
    let faults = c.api.faults().clone();
    faults.set_error_rate("patch", 1.0, hami_testkit::Fault::Conflict);
    let after_first = faults.clone();
    faults.before_next("patch", "/pods/p1", move || after_first.clear());
    let admitted = c.kubelet.admit(&pod).await.unwrap();
    assert_eq!(admitted.get("main", RESOURCE).unwrap().devices, ["GPU-b-0"]);
    let pod_patches: Vec<u16> = faults
        .requests()
        .iter()
        .filter(|r| r.verb == "patch" && r.path.ends_with("/pods/p1"))
        .map(|r| r.code)
        .collect();
    assert_eq!(pod_patches.first(), Some(&409), "{pod_patches:?}");
    assert_eq!(c.pod_annotations("p1").await[PHASE], "success");
}

/// kubelet admits a pod that is deleted and re-created under its name while Allocate
/// runs: the write meant for it is refused (it names the old UID), the successor keeps
/// its annotations, and the lock, which names pods by name only, is left to the
/// scheduler.
#[tokio::test]
async fn a_pod_recreated_during_allocate_is_not_written_and_its_successor_untouched() {
    let (c, pod) = one_gpu_pod_placed("web-0").await;
    let store = c.api.store().clone();
    c.api.faults().before_next("patch", "/pods/web-0", move || {
        let pods = &hami_testkit::resources::PODS;
        let now = hami_testkit::store::DeleteOptions {
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        store.delete_with(pods, Some(NS), "web-0", &now).unwrap();
        let successor = json!({"metadata": {"name": "web-0", "annotations": {"owner": "successor"}},
                               "spec": {"containers": [plain_container("c")]}});
        store.create(pods, Some(NS), successor).unwrap();
    });
    let message = rejected(c.kubelet.admit(&pod).await.unwrap_err());
    assert!(
        message.contains("cannot record the allocation") && message.contains("metadata.uid"),
        "{message}"
    );
    let successor = c.pod("web-0").await;
    assert_ne!(successor.metadata.uid, pod.metadata.uid);
    assert_eq!(
        successor.metadata.annotations.unwrap_or_default(),
        BTreeMap::from([("owner".to_string(), "successor".to_string())])
    );
    assert!(
        c.lock_value().await.unwrap().ends_with(",default,web-0"),
        "the lock is the scheduler's to judge"
    );
}
