//! Pod writes name the pod's UID: a pod deleted and re-created under the same name is
//! another pod, and the API server (here its emulator) refuses writes meant for the old
//! one; [`is_replaced`] tells that refusal apart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use hami_k8s::binding::create_binding;
use hami_k8s::patch::{MetadataPatch, PodRef, is_gone, is_not_found, is_replaced, patch_pod};
use hami_testkit::ApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::{Client, Config};
use serde_json::json;

async fn setup() -> (ApiServer, Client, Api<Pod>) {
    let server = ApiServer::start().await.unwrap();
    let client = Client::try_from(Config::new(server.url().parse().unwrap())).unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    (server, client, pods)
}

async fn create(pods: &Api<Pod>, name: &str) -> Pod {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "x"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap()
}

/// Deletes `name` and creates another pod of that name; the dead one is returned.
async fn replace(pods: &Api<Pod>, name: &str) -> Pod {
    let old = pods.get(name).await.unwrap();
    pods.delete(name, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    create(pods, name).await;
    old
}

#[tokio::test]
async fn patches_land_on_the_pod_they_name_and_never_on_its_successor() {
    let (_server, client, pods) = setup().await;
    let first = create(&pods, "web-0").await;
    let mark = MetadataPatch::new().annotate("hami.io/bind-phase", "allocating");
    patch_pod(&client, PodRef::of(&first), &mark).await.unwrap();
    let a = pods
        .get("web-0")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap();
    assert_eq!(a["hami.io/bind-phase"], "allocating");

    let dead = replace(&pods, "web-0").await;
    let err = patch_pod(&client, PodRef::of(&dead), &mark)
        .await
        .unwrap_err();
    assert!(is_replaced(&err), "{err}");
    assert!(is_gone(&err) && !is_not_found(&err), "{err}");
    let successor = pods.get("web-0").await.unwrap();
    assert_eq!(
        successor.metadata.annotations, None,
        "the successor was written"
    );

    // A pod that is simply gone: not found, not replaced.
    pods.delete("web-0", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let err = patch_pod(&client, PodRef::of(&successor), &mark)
        .await
        .unwrap_err();
    assert!(
        is_not_found(&err) && !is_replaced(&err) && is_gone(&err),
        "{err}"
    );

    // No UID, no write: refused before any request.
    let err = patch_pod(&client, PodRef::new("default", "web-0", ""), &mark)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("needs the pod's UID"), "{err}");
}

#[tokio::test]
async fn bindings_and_deletes_naming_a_dead_pod_are_refused_as_replaced() {
    let (_server, client, pods) = setup().await;
    create(&pods, "db-0").await;
    let dead = replace(&pods, "db-0").await;
    let uid = dead.metadata.uid.clone().unwrap();
    let err = create_binding(&client, PodRef::new("default", "db-0", &uid), "n1")
        .await
        .unwrap_err();
    assert!(is_replaced(&err), "{err}");
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let err = pods.delete("db-0", &params).await.unwrap_err();
    assert!(is_replaced(&err), "{err}");
    let successor = pods.get("db-0").await.unwrap();
    assert_eq!(successor.spec.unwrap().node_name, None);
}
