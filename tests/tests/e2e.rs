//! End to end through the whole system, in one process: pods created through the API
//! server emulator pass our real webhook (HTTPS, MutatingWebhookConfiguration), are
//! scheduled by the kube-scheduler emulator through our real extender, admitted by
//! kubelet emulators that call our real device plugins' Allocate, and checked for
//! annotations, bind phase, node lock, exact env and mounts, and per-GPU usage against
//! capacity. Then every component is restarted mid-run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use hami_core::annotations as keys;
use hami_e2e::report::ClusterReport;
use hami_e2e::scenario::{self, Example, Mem, Outcome, Wants};
use hami_e2e::{ClusterSpec, DemoCluster, Settled, Timing};
use hami_testkit::fixture::{Check, GpuPod};
use hami_testkit::kubelet::PluginCall;
use hami_testkit::resources::{NODES, PODS};
use hami_testkit::selectors::Selector;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

async fn cluster() -> DemoCluster {
    DemoCluster::start(ClusterSpec::demo().timing(Timing::fast()))
        .await
        .expect("demo cluster starts")
}

/// A pod pinned to one GPU by `nvidia.com/use-gpuuuid`, asking `mib` MiB of it.
fn pinned(name: &str, uuid: &str, mib: u32, outcome: Outcome) -> Example {
    Example {
        pod: GpuPod::new(name)
            .gpus(1)
            .gpumem(mib)
            .annotation(keys::NVIDIA_USE_GPUUUID, uuid),
        about: "pinned to one GPU",
        wants: match outcome {
            Outcome::Running => vec![Wants {
                container: "main",
                gpus: 1,
                mem: Mem::Mib(mib),
                cores: 0,
            }],
            Outcome::Unschedulable { .. } => Vec::new(),
        },
        outcome,
        gpu_type: None,
        same_numa: false,
    }
}

/// Submits and checks `examples`, panicking with every problem found.
async fn must_pass(cluster: &DemoCluster, examples: &[Example]) -> ClusterReport {
    let outcome = scenario::run(cluster, examples).await;
    assert!(
        outcome.ok(),
        "problems: {:#?}\nviolations: {:#?}\n{}",
        outcome.problems,
        outcome.report.violations,
        outcome.report.render_text()
    );
    outcome.report
}

/// The examples' pods again (already submitted), checked against all pods' usage.
async fn must_still_hold(cluster: &DemoCluster, examples: &[Example]) -> ClusterReport {
    let outcome = scenario::check(cluster, examples).await;
    assert!(
        outcome.ok(),
        "problems: {:#?}\nviolations: {:#?}",
        outcome.problems,
        outcome.report.violations
    );
    outcome.report
}

fn uuid_of(cluster: &DemoCluster, node: &str, index: usize) -> String {
    cluster.spec().node(node).unwrap().uuid(index)
}

fn node_annotation(cluster: &DemoCluster, node: &str, key: &str) -> Option<String> {
    let n = cluster.api().store().get(&NODES, None, node).unwrap();
    n.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Per GPU: MiB allocated according to the extender's ledger (its metrics).
async fn ledger_mib(cluster: &DemoCluster) -> BTreeMap<String, u64> {
    let metrics = cluster.extender_metrics().await.unwrap();
    let mut out = BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("hami_gpu_memory_allocated_bytes{"))
    {
        let uuid = line
            .split("device_uuid=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap()
            .to_string();
        let bytes: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        out.insert(uuid, bytes as u64 / (1024 * 1024));
    }
    out
}

/// The extender's ledger agrees with the pods' annotations, GPU by GPU.
async fn ledger_matches_annotations(cluster: &DemoCluster, report: &ClusterReport) {
    let want: BTreeMap<String, u64> = report
        .gpus
        .iter()
        .map(|g| (g.uuid.clone(), g.used_mem))
        .collect();
    // The ledger follows the pods through a watch: wait for it to catch up.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got = ledger_mib(cluster).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "extender ledger {got:?} != annotations {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every example, the full path, checked in detail; then what the cluster looks like.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_takes_the_full_path() {
    let cluster = cluster().await;
    let examples = scenario::demo_examples();
    let report = must_pass(&cluster, &examples).await;

    // The checks can fail: wrong expectations are reported, pod by pod.
    let mut wrong = examples.clone();
    let mut set = |name: &str, f: &dyn Fn(&mut Example)| {
        f(wrong.iter_mut().find(|e| e.name() == name).unwrap());
    };
    set("shared-4g", &|e| e.wants[0].mem = Mem::Mib(4001));
    set("shared-8g", &|e| e.wants[0].cores = 5);
    set("multi-gpu", &|e| e.wants[0].gpus = 1);
    set("two-containers", &|e| {
        e.wants.pop();
    });
    set("t4-only", &|e| e.gpu_type = Some("A100"));
    set("numa-pair", &|e| e.wants[0].mem = Mem::Percent(26));
    set("too-big", &|e| e.outcome = Outcome::Running);
    let caught = scenario::check(&cluster, &wrong).await;
    let named: BTreeSet<&str> = caught.problems.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        named,
        BTreeSet::from([
            "shared-4g",
            "shared-8g",
            "multi-gpu",
            "two-containers",
            "t4-only",
            "numa-pair",
            "too-big"
        ]),
        "{:#?}",
        caught.problems
    );

    // No node lock is left behind.
    for node in cluster.nodes() {
        assert_eq!(
            node_annotation(&cluster, node.name(), keys::NODE_LOCK),
            None,
            "lock left on {}",
            node.name()
        );
    }

    // Each running pod went through the webhook (scheduler name), the scheduler (event),
    // kubelet admission (PreferredAllocation then Allocate for each GPU container) and
    // got kubelet's status.
    for ex in examples
        .iter()
        .filter(|e| matches!(e.outcome, Outcome::Running))
    {
        let pod = cluster.pod("default", ex.name()).unwrap();
        assert_eq!(
            pod["spec"]["schedulerName"],
            "hami-scheduler",
            "{}",
            ex.name()
        );
        let statuses = pod["status"]["containerStatuses"].as_array().unwrap();
        assert_eq!(statuses.len(), ex.pod.containers.len());
        assert!(statuses.iter().all(|s| s["ready"] == true));
        let node = pod["spec"]["nodeName"].as_str().unwrap();
        let uid = pod["metadata"]["uid"].as_str().unwrap();
        let calls = cluster.node(node).unwrap().kubelet().calls();
        let allocates: Vec<&PluginCall> = calls
            .iter()
            .filter(|c| matches!(c, PluginCall::Allocate { pod_uid, .. } if pod_uid == uid))
            .collect();
        assert_eq!(
            allocates.len(),
            ex.wants.len(),
            "{}: {allocates:?}",
            ex.name()
        );
        assert!(
            allocates
                .iter()
                .all(|c| matches!(c, PluginCall::Allocate { result: Ok(_), .. }))
        );
        let scheduled = cluster
            .api()
            .store()
            .list(
                &hami_testkit::resources::EVENTS,
                Some("default"),
                &Selector::default(),
            )
            .0
            .into_iter()
            .any(|e| e["involvedObject"]["name"] == ex.name() && e["reason"] == "Scheduled");
        assert!(scheduled, "no Scheduled event for {}", ex.name());
    }

    // The webhook made the plain one-GPU pod exclusive.
    let whole = report.pod("whole-card").unwrap();
    assert_eq!(whole.containers[0].limits["nvidia.com/gpucores"], "100");
    let gpu = report.gpu(&whole.containers[0].devices[0].uuid).unwrap();
    assert_eq!((gpu.shares, gpu.used_mem), (1, u64::from(gpu.memory_mib)));

    // Constraints decided the node.
    assert_eq!(
        report.pod("t4-only").unwrap().node.as_deref(),
        Some("gpu-t4")
    );
    assert_eq!(
        report.pod("numa-pair").unwrap().node.as_deref(),
        Some("gpu-t4")
    );

    // The misfit: readable reasons, per node, from kube-scheduler and from the extender.
    let misfit = report.pod("too-big").unwrap();
    assert_eq!(misfit.phase, "Pending");
    let msg = misfit.message.as_deref().unwrap();
    assert!(
        msg.starts_with("0/3 nodes are available:") && msg.contains("CardInsufficientMemory"),
        "{msg}"
    );
    let filtering = scenario::wait_warning(&cluster, "default", "too-big", "FilteringFailed")
        .await
        .unwrap();
    assert_eq!(
        filtering,
        "no available node, 3 nodes do not meet: 3 nodes CardInsufficientMemory(gpu-a100,gpu-h100,gpu-t4)"
    );
    assert!(
        misfit
            .warnings
            .iter()
            .any(|w| w.reason == "FailedScheduling" && w.message == msg)
    );

    ledger_matches_annotations(&cluster, &report).await;

    // Deleting a pod frees its GPU share: the extender and the kubelet forget it.
    let t4 = report.pod("t4-only").unwrap().clone();
    let t4_gpu = t4.containers[0].devices[0].uuid.clone();
    cluster.delete_pod("default", "t4-only").await.unwrap();
    assert!(
        cluster
            .node("gpu-t4")
            .unwrap()
            .kubelet()
            .pod_allocations(&t4.uid)
            .is_none()
    );
    let after = scenario::check(&cluster, &[]).await.report;
    assert_eq!(
        after.gpu(&t4_gpu).unwrap().used_mem,
        report.gpu(&t4_gpu).unwrap().used_mem - 2000
    );
    ledger_matches_annotations(&cluster, &after).await;

    // The usage check sees double booking: a pod written straight into the store (no
    // webhook, no scheduler) claiming part of the exclusively held H100.
    let h100 = uuid_of(&cluster, "gpu-h100", 0);
    cluster
        .api()
        .store()
        .create(
            &PODS,
            Some("default"),
            json!({
                "metadata": {"name": "forged", "namespace": "default", "annotations": {
                    keys::VGPU_NODE: "gpu-h100",
                    keys::NVIDIA_DEVICES_ALLOCATED: format!("{h100},NVIDIA,1000,10:;"),
                }},
                "spec": {"nodeName": "gpu-h100", "containers": [{"name": "main", "image": "cuda"}]},
                "status": {"phase": "Running"},
            }),
        )
        .unwrap();
    let forged = scenario::check(&cluster, &[]).await.report.violations;
    assert!(
        forged.iter().any(|v| v.contains("held exclusively"))
            && forged
                .iter()
                .any(|v| v.contains("82559 MiB booked of 81559 MiB"))
            && forged.iter().any(|v| v.contains("110% compute booked")),
        "{forged:#?}"
    );
    cluster.delete_pod("default", "forged").await.unwrap();
    assert!(
        scenario::check(&cluster, &[])
            .await
            .report
            .violations
            .is_empty()
    );
    cluster.shutdown().await.unwrap();
}

/// Same cluster, same pods, same order: the same placement, GPU for GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_is_deterministic() {
    let mut runs = Vec::new();
    for _ in 0..2 {
        let cluster = cluster().await;
        let report = must_pass(&cluster, &scenario::demo_examples()).await;
        let placed: Vec<(String, Option<String>, Vec<Vec<String>>)> = report
            .pods
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    p.node.clone(),
                    p.containers
                        .iter()
                        .map(|c| c.devices.iter().map(|d| d.uuid.clone()).collect())
                        .collect(),
                )
            })
            .collect();
        runs.push(placed);
        cluster.shutdown().await.unwrap();
    }
    assert_eq!(runs[0], runs[1]);
}

/// The webhook down: pod creation is refused (failurePolicy Fail), nothing is created
/// behind its back; back up, pods are admitted and mutated again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_restart() {
    let mut cluster = cluster().await;
    let before = scenario::demo_examples();
    must_pass(&cluster, &before[..2]).await;

    cluster.stop_webhook().await.unwrap();
    let refused = cluster
        .create_pod(&GpuPod::new("while-down").gpus(1).gpumem(1000))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("failed calling webhook"),
        "{refused}"
    );
    assert!(cluster.pod("default", "while-down").is_none());

    cluster.start_webhook().await.unwrap();
    let after: Vec<Example> = before[2..5].to_vec();
    must_pass(&cluster, &after).await;
    let all: Vec<Example> = before[..5].to_vec();
    must_still_hold(&cluster, &all).await;
    cluster.shutdown().await.unwrap();
}

/// The extender down: pods wait (SchedulerError) and run once it is back; the fresh
/// extender rebuilds its ledger from the pods' annotations, so a GPU filled before the
/// restart is not booked twice after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extender_restart_keeps_the_books() {
    let mut cluster = cluster().await;
    let h100 = uuid_of(&cluster, "gpu-h100", 0);
    let first = pinned("h100-50g", &h100, 50_000, Outcome::Running);
    must_pass(&cluster, std::slice::from_ref(&first)).await;

    cluster.stop_extender().await.unwrap();
    let waiting = pinned("h100-30g", &h100, 30_000, Outcome::Running);
    cluster.create_pod(&waiting.pod).await.unwrap();
    let (reason, message) = hami_testkit::fixture::wait_for(
        cluster.api().store(),
        "h100-30g to fail scheduling while the extender is down",
        WAIT,
        |s| {
            let p = s.get(&PODS, Some("default"), "h100-30g").ok()?;
            let c = p["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "PodScheduled")?
                .clone();
            (c["status"] == "False").then(|| {
                (
                    c["reason"].as_str().unwrap_or("").to_string(),
                    c["message"].as_str().unwrap_or("").to_string(),
                )
            })
        },
    )
    .await
    .unwrap();
    assert_eq!(reason, "SchedulerError", "{message}");

    cluster.start_extender().await.unwrap();
    cluster
        .wait_running("default", "h100-30g", WAIT)
        .await
        .unwrap();
    // 81559 - 50000 - 30000 = 1559 MiB left: a fresh extender that forgot either pod
    // would place this one.
    let overflow = pinned(
        "h100-overflow",
        &h100,
        2_000,
        Outcome::Unschedulable {
            reason: "CardInsufficientMemory",
        },
    );
    must_pass(&cluster, std::slice::from_ref(&overflow)).await;
    let fits = pinned("h100-1g", &h100, 1_000, Outcome::Running);
    must_pass(&cluster, std::slice::from_ref(&fits)).await;
    let report = must_still_hold(&cluster, &[first, waiting, overflow, fits]).await;
    assert_eq!(report.gpu(&h100).unwrap().used_mem, 81_000);
    ledger_matches_annotations(&cluster, &report).await;
    cluster.shutdown().await.unwrap();
}

/// A device plugin down: its GPUs are withdrawn (published unhealthy), so pods that need
/// them wait; back up, it registers again, running pods keep their devices and new pods
/// are allocated correctly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_plugin_restart() {
    let mut cluster = cluster().await;
    let t4 = uuid_of(&cluster, "gpu-t4", 1);
    let before = pinned("t4-before", &t4, 3_000, Outcome::Running);
    must_pass(&cluster, std::slice::from_ref(&before)).await;
    let registrations = cluster
        .node("gpu-t4")
        .unwrap()
        .kubelet()
        .registrations()
        .len();

    cluster.stop_device_plugin("gpu-t4").await.unwrap();
    let register = node_annotation(&cluster, "gpu-t4", keys::NVIDIA_NODE_REGISTER).unwrap();
    let devices = hami_core::codec::decode_node_register(&register).unwrap();
    assert!(devices.iter().all(|d| !d.health), "{register}");
    // The extender learns of the withdrawal through its node watch. A pod that reaches it
    // first is placed on the stale view and kubelet, which has no healthy device left,
    // fails it; that is a real (if unlikely) race, not what this test is about, so such a
    // pod is replaced by the next attempt.
    let mut during = None;
    for attempt in 0..5 {
        let ex = pinned(
            &format!("t4-during-{attempt}"),
            &t4,
            3_000,
            Outcome::Running,
        );
        cluster.create_pod(&ex.pod).await.unwrap();
        match cluster
            .wait_settled("default", ex.name(), WAIT)
            .await
            .unwrap()
        {
            Settled::Unschedulable { message, .. } => {
                assert!(message.contains("CardNotHealth"), "{message}");
                during = Some(ex);
                break;
            }
            Settled::Failed { reason, .. } if reason == "UnexpectedAdmissionError" => {
                cluster.delete_pod("default", ex.name()).await.unwrap();
            }
            other => panic!("{} must wait for the plugin, got {other:?}", ex.name()),
        }
    }
    let during = during.expect("a pod waits while the plugin is down");

    cluster.start_device_plugin("gpu-t4").await.unwrap();
    let kubelet = cluster.node("gpu-t4").unwrap().kubelet();
    assert_eq!(kubelet.registrations().len(), registrations + 1);
    cluster
        .wait_running("default", during.name(), WAIT)
        .await
        .unwrap();
    let after = pinned("t4-after", &t4, 3_000, Outcome::Running);
    must_pass(&cluster, std::slice::from_ref(&after)).await;
    let report = must_still_hold(&cluster, &[before, during, after]).await;
    assert_eq!(report.gpu(&t4).unwrap().used_mem, 9_000);
    assert_eq!(report.gpu(&t4).unwrap().shares, 3);
    cluster.shutdown().await.unwrap();
}

/// Kubelet restarts: the plugin notices the new kubelet.sock and registers again; pods
/// keep their devices (kubelet's checkpoint) and new pods are allocated as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_restart_and_plugin_reregistration() {
    let mut cluster = cluster().await;
    let a100 = uuid_of(&cluster, "gpu-a100", 1);
    let before = pinned("a100-before", &a100, 20_000, Outcome::Running);
    must_pass(&cluster, std::slice::from_ref(&before)).await;
    let uid = cluster.pod("default", "a100-before").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let registrations = cluster
        .node("gpu-a100")
        .unwrap()
        .kubelet()
        .registrations()
        .len();

    cluster.restart_kubelet("gpu-a100").await.unwrap();
    let kubelet = cluster.node("gpu-a100").unwrap().kubelet();
    let records = kubelet.registrations();
    assert_eq!(records.len(), registrations + 1);
    assert_eq!(records.last().unwrap().result, Some(Ok(())));
    assert!(
        kubelet.wait_for_healthy("nvidia.com/gpu", 20, WAIT).await,
        "the plugin's devices are back after the restart"
    );
    assert!(kubelet.pod_allocations(&uid).is_some(), "checkpoint kept");
    // The node's allocatable follows kubelet again.
    hami_testkit::fixture::wait_for(cluster.api().store(), "allocatable back to 20", WAIT, |s| {
        let n = s.get(&NODES, None, "gpu-a100").ok()?;
        (n["status"]["allocatable"]["nvidia.com/gpu"] == "20").then_some(())
    })
    .await
    .unwrap();

    let after = pinned("a100-after", &a100, 20_000, Outcome::Running);
    must_pass(&cluster, std::slice::from_ref(&after)).await;
    let report = must_still_hold(&cluster, &[before, after]).await;
    assert_eq!(report.gpu(&a100).unwrap().used_mem, 40_000);
    cluster.shutdown().await.unwrap();
}

/// The node agent and the kube-scheduler emulator restart: running pods are not admitted
/// twice, pending ones are scheduled by the new scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_and_scheduler_restart() {
    let mut cluster = cluster().await;
    let examples = scenario::demo_examples();
    must_pass(&cluster, &examples[..3]).await;
    let allocations = |c: &DemoCluster| -> usize {
        c.nodes()
            .iter()
            .map(|n| {
                n.kubelet()
                    .calls()
                    .iter()
                    .filter(|c| matches!(c, PluginCall::Allocate { .. }))
                    .count()
            })
            .sum()
    };
    let before = allocations(&cluster);
    for node in ["gpu-a100", "gpu-t4", "gpu-h100"] {
        cluster.restart_agent(node).await.unwrap();
    }
    cluster.restart_scheduler().unwrap();
    must_pass(&cluster, &examples[3..6]).await;
    assert_eq!(
        allocations(&cluster),
        before + 4,
        "only the new pods' containers (1 + 1 + 2) were allocated"
    );
    must_still_hold(&cluster, &examples[..6]).await;
    cluster.shutdown().await.unwrap();
}

/// Many pods at once with the extender restarted in the middle: exactly the pods that
/// fit run, every GPU stays within its capacity, the rest wait as Unschedulable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_double_booking_across_an_extender_restart() {
    let mut cluster = cluster().await;
    // 20000 MiB and 25% each: four per A100 (2 GPUs) and four on the H100 fit (12);
    // T4s are too small. 16 pods: 4 must wait.
    let example = |i: usize| Example {
        pod: GpuPod::new(&format!("burst-{i:02}"))
            .gpus(1)
            .gpumem(20_000)
            .gpucores(25),
        about: "burst",
        outcome: Outcome::Running,
        wants: vec![Wants {
            container: "main",
            gpus: 1,
            mem: Mem::Mib(20_000),
            cores: 25,
        }],
        gpu_type: None,
        same_numa: false,
    };
    let examples: Vec<Example> = (0..16).map(example).collect();
    for ex in &examples[..8] {
        cluster.create_pod(&ex.pod).await.unwrap();
    }
    cluster
        .wait_running("default", "burst-02", WAIT)
        .await
        .unwrap();
    cluster.restart_extender().await.unwrap();
    for ex in &examples[8..] {
        cluster.create_pod(&ex.pod).await.unwrap();
    }
    let (running, waiting) = hami_testkit::fixture::wait_for(
        cluster.api().store(),
        "12 burst pods running and 4 unschedulable",
        WAIT,
        |s| {
            let (pods, _) = s.list(&PODS, Some("default"), &Selector::default());
            let mut running = Vec::new();
            let mut waiting = Vec::new();
            for p in &pods {
                let name = p["metadata"]["name"].as_str().unwrap().to_string();
                match hami_e2e::cluster::settled(p) {
                    Check::Done(Settled::Running { .. }) => running.push(name),
                    Check::Done(Settled::Unschedulable { .. }) => waiting.push(name),
                    Check::Done(other) => return Check::NotYet(format!("{name}: {other:?}")),
                    Check::NotYet(_) => {}
                }
            }
            if running.len() == 12 && waiting.len() == 4 {
                Check::Done((running, waiting))
            } else {
                Check::NotYet(format!("running {running:?}, waiting {waiting:?}"))
            }
        },
    )
    .await
    .unwrap();
    let running: Vec<Example> = examples
        .iter()
        .filter(|e| running.contains(&e.name().to_string()))
        .cloned()
        .collect();
    let report = must_still_hold(&cluster, &running).await;
    for g in &report.gpus {
        let expected = if g.model.contains("T4") { 0 } else { 4 };
        assert_eq!(g.shares, expected, "{g:?}");
    }
    for name in &waiting {
        let p = cluster.pod("default", name).unwrap();
        assert_eq!(p["spec"]["nodeName"], Value::Null, "{name} is not bound");
    }
    ledger_matches_annotations(&cluster, &report).await;
    cluster.shutdown().await.unwrap();
}

/// A pod the webhook is told to ignore (namespace label `hami.io/webhook: ignore`) and
/// that names its node itself bypasses the scheduler: kubelet's admission calls the
/// device plugin, which finds no allocation for it, and the pod fails with kubelet's
/// UnexpectedAdmissionError and a message that says why. The node stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bypassing_the_scheduler_fails_admission_readably() {
    let cluster = cluster().await;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(cluster.client());
    namespaces
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "raw", "labels": {"hami.io/webhook": "ignore"}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let mut pod = GpuPod::new("by-hand").namespace("raw").gpus(1).to_object();
    pod["spec"]["nodeName"] = "gpu-t4".into();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(cluster.client(), "raw");
    let created = pods
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(
        spec.scheduler_name.as_deref(),
        Some("default-scheduler"),
        "the webhook left it alone"
    );
    match cluster.wait_settled("raw", "by-hand", WAIT).await.unwrap() {
        Settled::Failed {
            node,
            reason,
            message,
        } => {
            assert_eq!(node, "gpu-t4");
            assert_eq!(reason, "UnexpectedAdmissionError");
            assert!(
                message.starts_with("Allocate failed due to ")
                    && message.ends_with(", which is unexpected")
                    && message.contains("no pod on node gpu-t4 is waiting for a GPU allocation"),
                "{message}"
            );
        }
        other => panic!("by-hand must fail admission, got {other:?}"),
    }
    assert_eq!(node_annotation(&cluster, "gpu-t4", keys::NODE_LOCK), None);
    let t4 = uuid_of(&cluster, "gpu-t4", 0);
    let after = pinned("t4-after", &t4, 3_000, Outcome::Running);
    let report = must_pass(&cluster, std::slice::from_ref(&after)).await;
    assert_eq!(
        report.gpu(&t4).unwrap().used_mem,
        3_000,
        "the failed pod holds nothing"
    );
    cluster.shutdown().await.unwrap();
}

/// A namespace with a ResourceQuota on GPU memory: the webhook refuses a pod that alone
/// exceeds it (`exceeding resource quota` + numbers), the extender refuses the pod that
/// together with the running ones would (`ResourceQuotaNotFit` + numbers, in
/// kube-scheduler's FailedScheduling message), and the quota series count what runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_quota_refuses_at_admission_and_at_filter() {
    use hami_e2e::quota;
    let cluster = cluster().await;
    let out = quota::run(&cluster).await;
    assert!(out.ok(), "{:#?}\n{}", out.problems, out.render_text());
    let refusal = out.admission_refusal.clone().unwrap();
    assert_eq!(
        refusal,
        "admission webhook \"vgpu.hami-rs.io\" denied the request: exceeding resource quota: the pod asks for 10000 of limits.nvidia.com/gpumem, above the hard limit 8000 of namespace quota-demo"
    );
    assert_eq!(out.placed.len(), 2);
    let [(pod, message)] = out.refused.as_slice() else {
        panic!("{:?}", out.refused)
    };
    assert_eq!(pod, "quota-c");
    assert!(
        message.contains(
            "ResourceQuotaNotFit (namespace quota-demo: limits.nvidia.com/gpumem used 6000 + requested 3000 > hard limit 8000)"
        ),
        "{message}"
    );
    assert_eq!(out.used_mib, Some(6000));
    let warning = scenario::wait_warning(&cluster, quota::NAMESPACE, "quota-c", "FailedScheduling")
        .await
        .unwrap();
    assert!(
        warning.contains("ResourceQuotaNotFit (namespace quota-demo"),
        "{warning}"
    );
    cluster.shutdown().await.unwrap();
}

/// The demo as `cargo xtask demo` runs it: the NVIDIA nodes plus an AMD MI300X node and a
/// Hygon K100_AI node, each running its real plugin on a fake tree. Every NVIDIA example
/// still passes; the AMD and DCU pods go through the webhook, the extender and kubelet's
/// Allocate, and get exactly the devices, env and mounts their annotations imply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_with_amd_and_dcu_nodes() {
    use hami_e2e::vendor_examples;
    let cluster = DemoCluster::start(ClusterSpec::demo_all_vendors().timing(Timing::fast()))
        .await
        .expect("demo cluster with AMD and DCU nodes starts");
    must_pass(&cluster, &scenario::demo_examples()).await;
    let examples = vendor_examples::vendor_examples();
    let outcome = vendor_examples::run(&cluster, &examples).await;
    assert!(
        outcome.ok(),
        "{:#?}\n{}",
        outcome.problems,
        outcome.render_text()
    );
    let node_of = |pod: &str| {
        outcome
            .pods
            .iter()
            .find(|p| p.name == pod)
            .map(|p| p.node.clone())
    };
    assert_eq!(node_of("amd-slice").as_deref(), Some("amd-mi300x"));
    assert_eq!(node_of("dcu-partial").as_deref(), Some("dcu-k100"));
    assert_eq!(node_of("dcu-whole").as_deref(), Some("dcu-k100"));
    let amd = &outcome.pods[0].containers[0];
    assert!(amd.env.contains_key("HSA_CU_MASK"), "{amd:?}");
    assert!(amd.devices.contains_key("/dev/kfd"), "{amd:?}");
    let partial = &outcome.pods[1].containers[0];
    assert!(
        partial
            .mounts
            .iter()
            .any(|m| m.container_path == "/etc/vdev/docker/"),
        "{partial:?}"
    );
    let whole = &outcome.pods[2].containers[0];
    assert!(
        whole
            .mounts
            .iter()
            .all(|m| m.container_path != "/etc/vdev/docker/"),
        "{whole:?}"
    );

    // The checks can fail: with the scheduler's annotations changed behind the plugins'
    // backs, what the containers got no longer matches and each pod is named.
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(cluster.client(), "default");
    let cus = cluster.pod("default", "amd-slice").unwrap()["metadata"]["annotations"]
        ["hami.io/amd-cu-allocated"]
        .as_str()
        .unwrap()
        .to_string();
    let shifted: std::collections::BTreeMap<String, String> =
        serde_json::from_str::<std::collections::BTreeMap<String, String>>(&cus)
            .unwrap()
            .into_keys()
            .map(|uuid| (uuid, "300-303".to_string()))
            .collect();
    let partial_alloc = cluster.pod("default", "dcu-partial").unwrap()["metadata"]["annotations"]
        ["hami.io/dcu-devices-allocated"]
        .as_str()
        .unwrap()
        .replace(",8192,", ",4096,");
    for (pod, key, value) in [
        (
            "amd-slice",
            "hami.io/amd-cu-allocated",
            serde_json::to_string(&shifted).unwrap(),
        ),
        (
            "dcu-partial",
            "hami.io/dcu-devices-allocated",
            partial_alloc,
        ),
    ] {
        pods.patch(
            pod,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
        )
        .await
        .unwrap();
    }
    let caught = vendor_examples::check(&cluster, &examples).await;
    let named: BTreeSet<&str> = caught.problems.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        named,
        BTreeSet::from(["amd-slice", "dcu-partial"]),
        "{:#?}",
        caught.problems
    );
    cluster.shutdown().await.unwrap();
}

/// A cluster of the demo's AMD and DCU nodes only (their plugins on fake trees).
async fn vendor_cluster() -> DemoCluster {
    DemoCluster::start(ClusterSpec::new(hami_e2e::spec::vendor_nodes()).timing(Timing::fast()))
        .await
        .expect("AMD and DCU cluster starts")
}

fn registrations(cluster: &DemoCluster, node: &str) -> usize {
    cluster.node(node).unwrap().kubelet().registrations().len()
}

/// The registered device of `pod`'s first container (the allocated annotation's first ID).
fn first_device(outcome: &hami_e2e::vendor_examples::VendorOutcome, pod: &str) -> String {
    let p = outcome.pods.iter().find(|p| p.name == pod).unwrap();
    p.allocated.split(',').next().unwrap().to_string()
}

/// `(vdev_id, pipe_id, CUs)` of the virtual DCU `pod`'s first container got, read from
/// the vdev conf in the directory mounted at `/etc/vdev/docker/`.
fn vdev_of(
    outcome: &hami_e2e::vendor_examples::VendorOutcome,
    pod: &str,
) -> (u32, u32, BTreeSet<u32>) {
    let p = outcome.pods.iter().find(|p| p.name == pod).unwrap();
    let m = p.containers[0]
        .mounts
        .iter()
        .find(|m| m.container_path == hami_device_plugin_dcu::hook::VDEV_IN_CONTAINER)
        .unwrap_or_else(|| panic!("{pod} has no virtual DCU: {p:?}"));
    let conf =
        std::path::Path::new(&m.host_path).join(hami_device_plugin_dcu::vdev::CONTAINER_CONF);
    let text = std::fs::read_to_string(&conf).unwrap();
    let field = |key: &str| -> Vec<&str> {
        text.lines()
            .filter_map(|l| l.strip_prefix(key))
            .map(str::trim)
            .collect()
    };
    let mut cus = BTreeSet::new();
    for (word, mask) in field("cu_mask:").iter().enumerate() {
        let bits = u64::from_str_radix(mask.trim_start_matches("0x"), 16).unwrap();
        cus.extend(
            (0..64)
                .filter(|b| bits >> b & 1 == 1)
                .map(|b| word as u32 * 64 + b),
        );
    }
    (
        field("vdev_id:")[0].parse().unwrap(),
        field("pipe_id:")[0].parse().unwrap(),
        cus,
    )
}

/// The AMD and DCU plugins restart with pods running: each registers again, rebuilds its
/// state from the cluster (AMD: the pods' `hami.io/amd-cu-allocated`; DCU: the vdev
/// directories) and gives the next pod on the same device CUs, a vdev and a pipe no
/// running pod holds; every pod still has what its annotations say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amd_and_dcu_plugin_restart_rebuild_their_state() {
    use hami_e2e::vendor_examples::{self, VendorExample};
    let mut cluster = vendor_cluster().await;
    let before = vendor_examples::vendor_examples();
    let outcome = vendor_examples::run(&cluster, &before).await;
    assert!(outcome.ok(), "{:#?}", outcome.problems);
    let gpu = first_device(&outcome, "amd-slice");
    let card = first_device(&outcome, "dcu-partial");

    for node in ["amd-mi300x", "dcu-k100"] {
        let n = registrations(&cluster, node);
        cluster.restart_device_plugin(node).await.unwrap();
        assert_eq!(registrations(&cluster, node), n + 1, "{node}");
    }

    // The same shapes again, pinned to the same devices.
    let again = |name: &str, key: &str, device: &str| {
        let mut ex = before.iter().find(|e| e.pod.name == name).unwrap().clone();
        ex.pod = ex.pod.annotation(key, device);
        ex.pod.name = format!("{name}-after");
        ex
    };
    let after = vec![
        again("amd-slice", hami_core::vendor::amd::USE_UUID, &gpu),
        again("dcu-partial", hami_core::vendor::hygon::USE_UUID, &card),
    ];
    let outcome_after = vendor_examples::run(&cluster, &after).await;
    assert!(outcome_after.ok(), "{:#?}", outcome_after.problems);
    assert_eq!(first_device(&outcome_after, "amd-slice-after"), gpu);
    assert_eq!(first_device(&outcome_after, "dcu-partial-after"), card);

    // AMD: no CU of the GPU given twice.
    let cus = |pod: &str| {
        let v = cluster.pod("default", pod).unwrap()["metadata"]["annotations"]
            [hami_device_plugin_amd::cu::CU_ALLOCATED]
            .as_str()
            .unwrap()
            .to_string();
        hami_device_plugin_amd::cu::parse_annotation(pod, &v).unwrap()[&gpu].clone()
    };
    let (a, b) = (cus("amd-slice"), cus("amd-slice-after"));
    assert_eq!((a.len(), b.len()), (76, 76));
    assert!(a.is_disjoint(&b), "{a:?} / {b:?}");

    // DCU: another vdev, another pipe, other CUs.
    let (v1, p1, c1) = vdev_of(&outcome, "dcu-partial");
    let (v2, p2, c2) = vdev_of(&outcome_after, "dcu-partial-after");
    assert_ne!(v1, v2);
    assert_ne!(p1, p2);
    assert_eq!((c1.len(), c2.len()), (60, 60));
    assert!(c1.is_disjoint(&c2), "{c1:?} / {c2:?}");

    let all: Vec<VendorExample> = before.into_iter().chain(after).collect();
    let still = vendor_examples::check(&cluster, &all).await;
    assert!(still.ok(), "{:#?}", still.problems);
    cluster.shutdown().await.unwrap();
}

/// Waits until `node`'s register annotation `key` says device `id` is `healthy`.
async fn wait_registered_health(
    cluster: &DemoCluster,
    node: &str,
    key: &str,
    id: &str,
    healthy: bool,
) {
    let health = || {
        let value = node_annotation(cluster, node, key)?;
        let devices = hami_core::codec::decode_node_register(&value).ok()?;
        devices.iter().find(|d| &*d.id == id).map(|d| d.health)
    };
    hami_testkit::fixture::wait_for(cluster.api().store(), key, WAIT, |_| {
        (health() == Some(healthy)).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{node}: {id} never registered healthy={healthy}: {e}"));
}

/// Kubelet restarts on the AMD and DCU nodes: each plugin registers again and its devices
/// come back. Then a device's render node vanishes from the tree: its replicas turn
/// unhealthy at kubelet and in the register annotation, and come back with it; pods are
/// allocated as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amd_and_dcu_kubelet_restart_and_a_vanishing_device() {
    use hami_e2e::vendor_examples;
    let mut cluster = vendor_cluster().await;
    let amd_gpu = hami_device_plugin_amd::fake_tree::mi300x(2)[1].uuid.clone();
    let dcu_card = hami_device_plugin_dcu::fake_tree::k100_ai(2)[1].id();
    for (node, resource, replicas, register, id) in [
        (
            "amd-mi300x",
            "amd.com/gpu",
            10,
            "hami.io/node-amd-register",
            amd_gpu,
        ),
        (
            "dcu-k100",
            "hygon.com/dcunum",
            4,
            "hami.io/node-dcu-register",
            dcu_card,
        ),
    ] {
        let n = registrations(&cluster, node);
        cluster.restart_kubelet(node).await.unwrap();
        let kubelet = cluster.node(node).unwrap().kubelet();
        let records = kubelet.registrations();
        assert_eq!(records.len(), n + 1, "{node}");
        assert_eq!(records.last().unwrap().result, Some(Ok(())), "{node}");
        assert!(
            kubelet.wait_for_healthy(resource, 2 * replicas, WAIT).await,
            "{node}: devices back after the kubelet restart"
        );

        // The second device's render node (renderD129 on both trees) vanishes.
        let dev = cluster.node(node).unwrap().vendor_dev_root().unwrap();
        let (render, gone) = (dev.join("dri/renderD129"), dev.join("dri/renderD129.gone"));
        std::fs::rename(&render, &gone).unwrap();
        assert!(
            kubelet.wait_for_healthy(resource, replicas, WAIT).await,
            "{node}: the device's replicas turn unhealthy"
        );
        wait_registered_health(&cluster, node, register, &id, false).await;
        std::fs::rename(&gone, &render).unwrap();
        assert!(
            kubelet.wait_for_healthy(resource, 2 * replicas, WAIT).await,
            "{node}: the device is back"
        );
        wait_registered_health(&cluster, node, register, &id, true).await;
    }
    cluster.wait_extender_knows_gpus().await.unwrap();
    let outcome = vendor_examples::run(&cluster, &vendor_examples::vendor_examples()).await;
    assert!(outcome.ok(), "{:#?}", outcome.problems);
    cluster.shutdown().await.unwrap();
}

/// The harness's kill is a real `kill -9` (`docs/extender.md#shutdown`): a bind that holds
/// its node lock and waits for its Binding is dropped where it stands. It neither binds the
/// pod nor gives the lock back after the kill (before, the killed extender's HTTP thread
/// went on binding beside its successor); the successor then takes the abandoned lock over
/// and runs the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_extender_writes_nothing_more() {
    let node = "gpu-one";
    let mut cluster = DemoCluster::start(
        ClusterSpec::new(vec![hami_e2e::NodeSpec::new(node).gpus(
            "Tesla T4",
            15360,
            &[0],
        )])
        .timing(Timing::fast()),
    )
    .await
    .expect("cluster starts");
    // `q` waits until the blocker leaves, so the Binding fault below is in place first.
    let blocker = GpuPod::new("blocker").gpus(1).gpumem(15360);
    cluster.create_pod(&blocker).await.unwrap();
    cluster
        .wait_running("default", "blocker", WAIT)
        .await
        .unwrap();
    cluster
        .create_pod(&GpuPod::new("q").gpus(1).gpumem(1000))
        .await
        .unwrap();
    let pending = cluster.wait_settled("default", "q", WAIT).await.unwrap();
    assert!(
        matches!(pending, Settled::Unschedulable { .. }),
        "{pending:?}"
    );
    // q's Binding hangs 4 s, then fails (and is retried by the client).
    cluster.api().faults().fail_path(
        "create",
        "/pods/q/binding",
        hami_testkit::Fault::Timeout(Duration::from_secs(4)),
    );
    cluster.delete_pod("default", "blocker").await.unwrap();
    let lock_of_q = |c: &DemoCluster| {
        node_annotation(c, node, keys::NODE_LOCK).is_some_and(|v| v.ends_with(",default,q"))
    };
    let deadline = std::time::Instant::now() + WAIT;
    while !lock_of_q(&cluster) {
        assert!(
            std::time::Instant::now() < deadline,
            "q's bind never took the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The bind holds the lock and waits for its Binding: killed now.
    tokio::time::sleep(Duration::from_millis(200)).await;
    cluster.kill_extender().await;
    // Past the bind's own limit (10 s from its lock, `LOCKED_BIND_LIMIT`), by which a
    // live bind, its Binding failing on, would have given the lock back.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(
        lock_of_q(&cluster),
        "the lock changed after the kill: {:?}",
        node_annotation(&cluster, node, keys::NODE_LOCK)
    );
    let q = cluster.pod("default", "q").unwrap();
    assert_eq!(q.pointer("/spec/nodeName"), None, "{q}");

    cluster.api().faults().clear();
    cluster.start_extender().await.unwrap();
    assert_eq!(
        cluster.wait_running("default", "q", WAIT).await.unwrap(),
        node
    );
    cluster.shutdown().await.unwrap();
}
