//! Graceful pod deletion and finalizers, as kube-apiserver does them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use hami_testkit::{ApiServer, GraceExpiry, Options};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, Config};
use serde_json::json;

async fn server(expiry: GraceExpiry) -> (ApiServer, Api<Pod>) {
    let server = ApiServer::start_with(Options {
        grace_expiry: expiry,
        ..Options::default()
    })
    .await
    .unwrap();
    let client = Client::try_from(Config::new(server.url().parse().unwrap())).unwrap();
    (server, Api::namespaced(client, "default"))
}

fn pod(name: &str, node: Option<&str>, grace: Option<i64>, finalizers: &[&str]) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "finalizers": finalizers},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "main", "image": "busybox"}],
        }
    }))
    .unwrap()
}

fn grace(p: &Pod) -> Option<i64> {
    p.metadata.deletion_grace_period_seconds
}

/// Type names of the next `n` watch events.
async fn next_events(
    s: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<Pod>>> + Unpin),
    n: usize,
) -> Vec<(String, Option<i64>)> {
    let mut out = Vec::new();
    while out.len() < n {
        let ev = tokio::time::timeout(Duration::from_secs(20), s.try_next())
            .await
            .expect("watch event in time")
            .unwrap()
            .expect("stream open");
        out.push(match ev {
            WatchEvent::Added(p) => ("ADDED".into(), grace(&p)),
            WatchEvent::Modified(p) => ("MODIFIED".into(), grace(&p)),
            WatchEvent::Deleted(p) => ("DELETED".into(), grace(&p)),
            other => panic!("unexpected {other:?}"),
        });
    }
    out
}

fn ty(evs: &[(String, Option<i64>)]) -> Vec<&str> {
    evs.iter().map(|(t, _)| t.as_str()).collect()
}

#[tokio::test]
async fn unbound_pods_go_at_once() {
    let (_s, pods) = server(GraceExpiry::Never).await;
    pods.create(&PostParams::default(), &pod("u", None, None, &[]))
        .await
        .unwrap();
    pods.delete("u", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("u").await.unwrap().is_none());
}

#[tokio::test]
async fn bound_pod_waits_for_grace_and_shortening() {
    let (_s, pods) = server(GraceExpiry::Never).await;
    let mut w = pods
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .unwrap()
        .boxed();
    pods.create(&PostParams::default(), &pod("b", Some("n1"), None, &[]))
        .await
        .unwrap();

    // No grace anywhere: the default 30 s.
    let marked = pods
        .delete("b", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(grace(&marked), Some(30));
    let still = pods.get("b").await.unwrap();
    assert_eq!(grace(&still), Some(30));

    // A longer grace changes nothing; a shorter one shortens it.
    let same = pods
        .delete("b", &DeleteParams::default().grace_period(60))
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(grace(&same), Some(30));
    let shorter = pods
        .delete("b", &DeleteParams::default().grace_period(10))
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(grace(&shorter), Some(10));

    // An update cannot take the deletion back.
    pods.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"deletionTimestamp": null, "labels": {"x": "1"}}})),
    )
    .await
    .unwrap();
    assert_eq!(grace(&pods.get("b").await.unwrap()), Some(10));

    // The kubelet's final delete.
    pods.delete("b", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert!(pods.get_opt("b").await.unwrap().is_none());

    let evs = next_events(&mut w, 5).await;
    assert_eq!(
        ty(&evs),
        ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"]
    );
    assert_eq!(evs[1].1, Some(30));
    assert_eq!(evs[2].1, Some(10));
}

#[tokio::test]
async fn pod_grace_comes_from_its_spec_and_expires() {
    let (_s, pods) = server(GraceExpiry::Scaled(1.0)).await;
    pods.create(&PostParams::default(), &pod("g", Some("n1"), Some(1), &[]))
        .await
        .unwrap();
    let marked = pods
        .delete("g", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(grace(&marked), Some(1));
    // Gone after about a second; poll generously.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while pods.get_opt("g").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pod outlived its grace period"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn zero_scale_finishes_at_once_but_announces_it() {
    let (_s, pods) = server(GraceExpiry::Scaled(0.0)).await;
    let mut w = pods
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .unwrap()
        .boxed();
    pods.create(
        &PostParams::default(),
        &pod("z", Some("n1"), Some(300), &[]),
    )
    .await
    .unwrap();
    pods.delete("z", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("z").await.unwrap().is_none());
    let evs = next_events(&mut w, 3).await;
    assert_eq!(ty(&evs), ["ADDED", "MODIFIED", "DELETED"]);
    assert_eq!(evs[1].1, Some(300));
}

#[tokio::test]
async fn finalizers_hold_objects_until_emptied() {
    let (s, pods) = server(GraceExpiry::Scaled(0.0)).await;
    // A bound pod whose grace ran out but that still has a finalizer.
    pods.create(
        &PostParams::default(),
        &pod("f", Some("n1"), Some(5), &["hami.io/test"]),
    )
    .await
    .unwrap();
    pods.delete("f", &DeleteParams::default()).await.unwrap();
    let held = pods.get("f").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(grace(&held), Some(0));
    pods.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(pods.get_opt("f").await.unwrap().is_none());

    // Any other resource: held with grace 0, gone once the list is empty.
    let client = Client::try_from(Config::new(s.url().parse().unwrap())).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c", "finalizers": ["a/b", "c/d"]}}))
            .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    cms.delete("c", &DeleteParams::default()).await.unwrap();
    let held = cms.get("c").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    let jp: json_patch::Patch =
        serde_json::from_value(json!([{"op": "remove", "path": "/metadata/finalizers/0"}]))
            .unwrap();
    cms.patch("c", &PatchParams::default(), &Patch::<()>::Json(jp.clone()))
        .await
        .unwrap();
    assert_eq!(
        cms.get("c").await.unwrap().metadata.finalizers.unwrap(),
        ["c/d"]
    );
    cms.patch("c", &PatchParams::default(), &Patch::<()>::Json(jp))
        .await
        .unwrap();
    assert!(cms.get_opt("c").await.unwrap().is_none());
}
