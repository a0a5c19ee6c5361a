#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The quota rule (`docs/protocol.md#webhook`): a pod that alone asks for more device
//! memory or cores than its namespace's ResourceQuota allows is refused with HAMi's
//! words (`exceeding resource quota`) and the numbers; the limits come from a watch of
//! the API server (here the test kit's emulator).

mod common;

use std::time::{Duration, Instant};

use common::{container, pod, review};
use hami_k8s::quotas::QuotaCache;
use hami_server::CancellationToken;
use hami_testkit::ApiServer;
use hami_webhook::handler::{DEFAULT_BODY_LIMIT, Webhook};
use hami_webhook::metrics::{Metrics, Outcome};
use hami_webhook::rules::{RuleConfig, Rules};
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

async fn webhook_with_quota(hard: Value) -> (Webhook, CancellationToken, ApiServer) {
    let server = ApiServer::start().await.unwrap();
    let client = Client::try_from(Config::new(server.url().parse().unwrap())).unwrap();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let q: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "gpu", "namespace": "team-a"},
        "spec": {"hard": hard},
    }))
    .unwrap();
    Api::<ResourceQuota>::namespaced(client.clone(), "team-a")
        .create(&PostParams::default(), &q)
        .await
        .unwrap();
    let rules = Rules::new(RuleConfig::default());
    let quotas = QuotaCache::new(rules.registry());
    let stop = CancellationToken::new();
    tokio::spawn(quotas.clone().watch(client, || {}, stop.clone()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !quotas.synced() {
        assert!(Instant::now() < deadline, "quotas never listed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut registry = Registry::default();
    let webhook = Webhook::new(
        rules.with_quotas(quotas),
        Metrics::register(&mut registry),
        DEFAULT_BODY_LIMIT,
    );
    (webhook, stop, server)
}

fn admit(w: &Webhook, object: Value) -> (Value, Outcome) {
    let body = serde_json::to_vec(&review("admission.k8s.io/v1", "uid-1", object)).unwrap();
    w.admit(&body).unwrap()
}

#[tokio::test]
async fn a_pod_that_alone_exceeds_the_quota_is_refused_with_the_numbers() {
    let (w, stop, _server) = webhook_with_quota(json!({"limits.nvidia.com/gpumem": "8000"})).await;
    // 2 GPUs × 5000 MiB = 10000 > 8000.
    let (resp, outcome) = admit(
        &w,
        pod(vec![container(
            "big",
            json!({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "5000"}),
        )]),
    );
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    assert_eq!(resp["response"]["status"]["code"], 403);
    assert_eq!(
        resp["response"]["status"]["message"],
        "exceeding resource quota: the pod asks for 10000 of limits.nvidia.com/gpumem, above the hard limit 8000 of namespace team-a"
    );
    assert_eq!(outcome, Outcome::Denied("resource_quota"));
    // Within the limit alone: admitted (what other pods hold is the scheduler's to judge).
    let (resp, _) = admit(
        &w,
        pod(vec![container(
            "fits",
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}),
        )]),
    );
    assert_eq!(resp["response"]["allowed"], true, "{resp}");
    stop.cancel();
}

#[tokio::test]
async fn other_namespaces_and_unlimited_resources_pass() {
    let (w, stop, _server) = webhook_with_quota(json!({"limits.nvidia.com/gpucores": "50"})).await;
    // Cores: 2 × 30 = 60 > 50.
    let mut p = pod(vec![container(
        "c",
        json!({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "100", "nvidia.com/gpucores": "30"}),
    )]);
    let (resp, _) = admit(&w, p.clone());
    assert_eq!(
        resp["response"]["status"]["message"],
        "exceeding resource quota: the pod asks for 60 of limits.nvidia.com/gpucores, above the hard limit 50 of namespace team-a"
    );
    p["metadata"]["namespace"] = json!("team-b");
    let (resp, _) = admit(&w, p);
    assert_eq!(resp["response"]["allowed"], true, "{resp}");
    stop.cancel();
}
