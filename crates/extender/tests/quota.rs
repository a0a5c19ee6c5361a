//! ResourceQuota on device memory and cores (`docs/protocol.md#resourcequota`): watched
//! from the API server, counted from the ledger (reservations included), enforced at
//! /filter with the numbers in FailedNodes and the FilteringFailed event, exported as
//! HAMi's quota series; and never shared between concurrent filters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Cluster, Knobs, chosen, gpu_pod, gpus};
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn quotas(c: &Cluster) -> Api<ResourceQuota> {
    Api::namespaced(c.client.clone(), "default")
}

async fn create_quota(c: &Cluster, name: &str, hard: serde_json::Value) {
    let q: ResourceQuota = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"hard": hard},
    }))
    .unwrap();
    quotas(c).create(&PostParams::default(), &q).await.unwrap();
}

/// Waits (bounded) until the extender's metrics contain `line`: the quota watch has
/// caught up.
async fn wait_metric(c: &Cluster, line: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = c.metrics().await;
        if m.contains(line) {
            return m;
        }
        assert!(Instant::now() < deadline, "{line} never showed in\n{m}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn mem_pod(name: &str, mem: u32) -> k8s_openapi::api::core::v1::Pod {
    gpu_pod(
        name,
        &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": mem.to_string()})],
        json!({}),
    )
}

#[tokio::test]
async fn filter_refuses_past_the_quota_with_the_numbers_and_counts_reservations() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 4, 10_000))], Knobs::default()).await;
    create_quota(
        &c,
        "gpu",
        json!({"limits.nvidia.com/gpumem": "5000", "limits.cpu": "10"}),
    )
    .await;
    wait_metric(
        &c,
        "hami_resource_quota_limit{zone=\"vGPU\",namespace=\"default\",quota_name=\"nvidia.com/gpumem\"} 5000",
    )
    .await;
    for name in ["a", "b", "c"] {
        c.create(&mem_pod(name, 2000)).await;
    }
    // a is bound, b only reserved by /filter: both count.
    assert_eq!(c.schedule("a").await, "n1");
    assert_eq!(chosen(&c.filter("b").await).as_deref(), Some("n1"));
    let f = c.filter("c").await;
    assert_eq!(f.error, "");
    let reason = f.failed_nodes.as_ref().unwrap()["n1"].clone();
    assert_eq!(
        reason,
        "4/4 ResourceQuotaNotFit (namespace default: limits.nvidia.com/gpumem used 4000 + requested 2000 > hard limit 5000)"
    );
    let event = c.wait_event("c", "FilteringFailed").await;
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains("ResourceQuotaNotFit (namespace default: limits.nvidia.com/gpumem used 4000 + requested 2000 > hard limit 5000)(n1)"),
        "{message}"
    );
    let m = c.metrics().await;
    assert!(
        m.contains("hami_resource_quota_used{zone=\"vGPU\",namespace=\"default\",quota_name=\"nvidia.com/gpumem\",limit=\"5000\"} 4000"),
        "{m}"
    );
    // Cores are tracked for the namespace too, with no limit set (HAMi shows limit 0).
    assert!(
        m.contains("hami_resource_quota_used{zone=\"vGPU\",namespace=\"default\",quota_name=\"nvidia.com/gpucores\",limit=\"0\"} 0"),
        "{m}"
    );
    assert!(!m.contains("quota_name=\"nvidia.com/gpucores\"} "), "{m}");

    // Deleting a holder frees its share.
    c.pods()
        .delete("a", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if chosen(&c.filter("c").await).is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "a's share never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_explicit_zero_blocks_and_quota_updates_apply() {
    install_crypto();
    let c = Cluster::start(&[("n1", gpus("n1", 2, 10_000))], Knobs::default()).await;
    create_quota(&c, "gpu", json!({"limits.nvidia.com/gpucores": "0"})).await;
    wait_metric(
        &c,
        "hami_resource_quota_limit{zone=\"vGPU\",namespace=\"default\",quota_name=\"nvidia.com/gpucores\"} 0",
    )
    .await;
    c.create(&gpu_pod(
        "p",
        &[json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100", "nvidia.com/gpucores": "10"})],
        json!({}),
    ))
    .await;
    let f = c.filter("p").await;
    assert!(
        f.failed_nodes.as_ref().unwrap()["n1"].starts_with(
            "2/2 ResourceQuotaNotFit (namespace default: limits.nvidia.com/gpucores used 0 + requested 10 > hard limit 0)"
        ),
        "{:?}",
        f.failed_nodes
    );
    // Raising the limit (the watch sees the update) lets it in.
    quotas(&c)
        .patch(
            "gpu",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"limits.nvidia.com/gpucores": "50"}}})),
        )
        .await
        .unwrap();
    wait_metric(
        &c,
        "hami_resource_quota_limit{zone=\"vGPU\",namespace=\"default\",quota_name=\"nvidia.com/gpucores\"} 50",
    )
    .await;
    assert_eq!(chosen(&c.filter("p").await).as_deref(), Some("n1"));
    // Deleting the quota lifts it.
    quotas(&c)
        .delete("gpu", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.metrics().await.contains("hami_resource_quota_limit{") {
        assert!(Instant::now() < deadline, "deleted quota still exported");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Many filters at once for pods that together exceed the quota: the limit is checked
/// and the reservation made under one lock, so exactly as many pods as fit are placed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_filters_never_share_the_last_of_a_quota() {
    install_crypto();
    const PODS: usize = 40;
    const FIT: usize = 10;
    let c = Arc::new(
        Cluster::start(
            &[("n1", gpus("n1", 4, 80_000)), ("n2", gpus("n2", 4, 80_000))],
            Knobs::default(),
        )
        .await,
    );
    create_quota(
        &c,
        "gpu",
        json!({"limits.nvidia.com/gpumem": (FIT * 1000).to_string()}),
    )
    .await;
    wait_metric(
        &c,
        "hami_resource_quota_limit{zone=\"vGPU\",namespace=\"default\",quota_name=\"nvidia.com/gpumem\"} 10000",
    )
    .await;
    for i in 0..PODS {
        c.create(&mem_pod(&format!("p{i:02}"), 1000)).await;
    }
    let tasks: Vec<_> = (0..PODS)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move { c.filter(&format!("p{i:02}")).await })
        })
        .collect();
    let mut placed = 0;
    for t in tasks {
        let f = t.await.unwrap();
        assert_eq!(f.error, "");
        match chosen(&f) {
            Some(_) => placed += 1,
            None => {
                for reason in f.failed_nodes.unwrap().values() {
                    assert!(reason.contains("ResourceQuotaNotFit"), "{reason}");
                }
            }
        }
    }
    assert_eq!(placed, FIT);
    let m = c.metrics().await;
    assert!(
        m.contains("hami_resource_quota_used{zone=\"vGPU\",namespace=\"default\",quota_name=\"nvidia.com/gpumem\",limit=\"10000\"} 10000"),
        "{m}"
    );
}
