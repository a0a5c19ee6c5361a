//! The node lock protocol against the API server emulator, through the real kube client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use hami_core::annotations::{BIND_PHASE, NODE_LOCK};
use hami_k8s::binding;
use hami_k8s::lock::{self, Acquired, LocalBinds, LockError, Released, Takeover};
use hami_k8s::patch::PodRef;
use hami_testkit::{ApiServer, Fault};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, Config};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(300);

async fn setup() -> (ApiServer, Client) {
    let server = ApiServer::start().await.unwrap();
    let client = Client::try_from(Config::new(server.url().parse().unwrap())).unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    (server, client)
}

async fn create_pod(client: &Client, name: &str, annotations: serde_json::Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "x"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
}

/// Binds pod `name` to node n1, as the scheduler's Binding does.
async fn bind_to_n1(client: &Client, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let uid = pods.get(name).await.unwrap().metadata.uid.unwrap();
    binding::create_binding(client, PodRef::new("default", name, &uid), "n1")
        .await
        .unwrap();
}

async fn lock_value(client: &Client) -> Option<String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let n = nodes.get("n1").await.unwrap();
    n.metadata
        .annotations
        .and_then(|a| a.get(NODE_LOCK).cloned())
}

async fn set_lock(client: &Client, value: &str) {
    hami_k8s::patch::patch_node(
        client,
        "n1",
        &hami_k8s::patch::MetadataPatch::new().annotate(NODE_LOCK, value),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn take_reenter_contend_release() {
    let (_server, client) = setup().await;
    create_pod(&client, "a", json!({})).await;
    create_pod(&client, "b", json!({})).await;

    let got = lock::try_acquire(&client, "n1", "default", "a", TIMEOUT).await;
    assert_eq!(got.unwrap(), Acquired::Taken);
    let value = lock_value(&client).await.unwrap();
    assert!(value.ends_with(",default,a"), "{value}");
    let current = lock::current(&client, "n1").await.unwrap().unwrap();
    assert!(current.is_owned_by("default", "a"));

    assert_eq!(
        lock::try_acquire(&client, "n1", "default", "a", TIMEOUT)
            .await
            .unwrap(),
        Acquired::Reentered
    );
    let err = lock::try_acquire(&client, "n1", "default", "b", TIMEOUT)
        .await
        .unwrap_err();
    assert!(err.is_held(), "{err}");
    assert!(err.to_string().contains("default/a"), "{err}");

    assert_eq!(
        lock::release(&client, "n1", "default", "b").await.unwrap(),
        Released::HeldByOther { value }
    );
    assert!(lock_value(&client).await.is_some());
    assert_eq!(
        lock::release(&client, "n1", "default", "a").await.unwrap(),
        Released::Released
    );
    assert_eq!(lock_value(&client).await, None);
    assert_eq!(
        lock::release(&client, "n1", "default", "a").await.unwrap(),
        Released::NotLocked
    );
    assert_eq!(
        lock::try_acquire(&client, "n1", "default", "b", TIMEOUT)
            .await
            .unwrap(),
        Acquired::Taken
    );
}

#[tokio::test]
async fn stale_locks_are_taken_over() {
    let (_server, client) = setup().await;
    create_pod(&client, "live", json!({})).await;
    create_pod(&client, "done", json!({BIND_PHASE: "success"})).await;
    create_pod(&client, "me", json!({})).await;

    // Expired, although its owner is alive.
    set_lock(&client, "2020-01-01T00:00:00Z,default,live").await;
    assert_eq!(
        lock::try_acquire(&client, "n1", "default", "me", TIMEOUT)
            .await
            .unwrap(),
        Acquired::TookOver(Takeover::Expired {
            owner: "default/live".into()
        })
    );

    // Fresh, but its owner no longer exists.
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    set_lock(&client, &format!("{now},default,gone")).await;
    assert!(matches!(
        lock::try_acquire(&client, "n1", "default", "me", TIMEOUT).await,
        Ok(Acquired::TookOver(Takeover::Dangling { .. }))
    ));

    // Fresh, but its owner was already allocated.
    set_lock(&client, &format!("{now},default,done")).await;
    assert!(matches!(
        lock::try_acquire(&client, "n1", "default", "me", TIMEOUT).await,
        Ok(Acquired::TookOver(Takeover::Dangling { .. }))
    ));

    // Garbage that nobody can own (HAMi blocks the node forever on this).
    set_lock(&client, "not a lock,at,all,really").await;
    assert_eq!(
        lock::try_acquire(&client, "n1", "default", "me", TIMEOUT)
            .await
            .unwrap(),
        Acquired::TookOver(Takeover::Malformed {
            value: "not a lock,at,all,really".into()
        })
    );
    assert!(lock_value(&client).await.unwrap().ends_with(",default,me"));

    // A fresh lock of a live pod is respected.
    set_lock(&client, &format!("{now},default,live")).await;
    assert!(
        lock::try_acquire(&client, "n1", "default", "me", TIMEOUT)
            .await
            .unwrap_err()
            .is_held()
    );
}

#[tokio::test]
async fn legacy_owner_less_lock_blocks_until_expiry_but_anyone_may_release_it() {
    let (_server, client) = setup().await;
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    set_lock(&client, &now).await;
    assert!(
        lock::try_acquire(&client, "n1", "default", "p", TIMEOUT)
            .await
            .unwrap_err()
            .is_held()
    );
    // The same value is expired under a shorter timeout.
    let past = (chrono::Utc::now() - chrono::TimeDelta::seconds(5))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    set_lock(&client, &past).await;
    assert!(matches!(
        lock::try_acquire(&client, "n1", "default", "p", Duration::from_secs(2)).await,
        Ok(Acquired::TookOver(Takeover::Expired { owner })) if owner == "<unknown>"
    ));
    set_lock(&client, &now).await;
    assert_eq!(
        lock::release(&client, "n1", "default", "x").await.unwrap(),
        Released::Released
    );
}

#[tokio::test]
async fn concurrent_lockers_exactly_one_wins() {
    let (_server, client) = setup().await;
    for i in 0..12 {
        create_pod(&client, &format!("p{i}"), json!({})).await;
    }
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                lock::try_acquire(&client, "n1", "default", &format!("p{i}"), TIMEOUT).await
            })
        })
        .collect();
    let mut winners = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Ok(a) => {
                assert_eq!(a, Acquired::Taken);
                winners.push(i);
            }
            Err(e) => assert!(e.is_held(), "{e}"),
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let value = lock_value(&client).await.unwrap();
    assert!(value.ends_with(&format!(",default,p{}", winners[0])));
}

#[tokio::test]
async fn api_errors_are_retried_and_missing_nodes_reported() {
    let (server, client) = setup().await;
    create_pod(&client, "a", json!({})).await;
    server
        .faults()
        .set_error_rate("patch", 0.5, Fault::InternalError);
    assert_eq!(
        lock::try_acquire(&client, "n1", "default", "a", TIMEOUT)
            .await
            .unwrap(),
        Acquired::Taken
    );
    assert_eq!(
        lock::release(&client, "n1", "default", "a").await.unwrap(),
        Released::Released
    );
    server.faults().clear();
    assert!(matches!(
        lock::try_acquire(&client, "nope", "default", "a", TIMEOUT).await,
        Err(LockError::NodeNotFound(n)) if n == "nope"
    ));
    assert_eq!(
        lock::release(&client, "nope", "default", "a")
            .await
            .unwrap(),
        Released::NotLocked
    );
}

#[tokio::test]
async fn a_scheduler_that_knows_its_binds_takes_over_locks_nobody_is_binding() {
    let (_server, client) = setup().await;
    create_pod(&client, "orphan", json!({BIND_PHASE: "allocating"})).await;
    create_pod(&client, "me", json!({})).await;
    let at = |secs_ago: i64| {
        (chrono::Utc::now() - chrono::TimeDelta::seconds(secs_ago))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let sole = LocalBinds::sole();

    // Fresh, owner unbound, and this process is binding it: a live lock.
    set_lock(&client, &format!("{},default,orphan", at(0))).await;
    let binding = sole.start("default", "orphan");
    let held = lock::try_acquire_with(&client, "n1", "default", "me", TIMEOUT, &sole).await;
    assert!(held.unwrap_err().is_held());
    // Its bind ended without a Binding (killed, cut off): abandoned, taken over at once.
    drop(binding);
    assert!(!sole.is_binding("default", "orphan"));
    assert_eq!(
        lock::try_acquire_with(&client, "n1", "default", "me", TIMEOUT, &sole)
            .await
            .unwrap(),
        Acquired::TookOver(Takeover::Abandoned {
            owner: "default/orphan".into()
        })
    );
    // Without that knowledge the same lock is respected (plain `try_acquire`).
    set_lock(&client, &format!("{},default,orphan", at(0))).await;
    assert!(
        lock::try_acquire(&client, "n1", "default", "me", TIMEOUT)
            .await
            .unwrap_err()
            .is_held()
    );

    // Other replicas may bind: a fresh lock may be one of their live binds; an old one
    // (past the grace) is not.
    let peers = LocalBinds::with_peers(Duration::from_secs(30));
    assert!(
        lock::try_acquire_with(&client, "n1", "default", "me", TIMEOUT, &peers)
            .await
            .unwrap_err()
            .is_held()
    );
    set_lock(&client, &format!("{},default,orphan", at(40))).await;
    assert!(matches!(
        lock::try_acquire_with(&client, "n1", "default", "me", TIMEOUT, &peers).await,
        Ok(Acquired::TookOver(Takeover::Abandoned { .. }))
    ));

    // A bound owner is being allocated by the device plugin: never abandoned.
    bind_to_n1(&client, "orphan").await;
    set_lock(&client, &format!("{},default,orphan", at(0))).await;
    assert!(
        lock::try_acquire_with(&client, "n1", "default", "me", TIMEOUT, &sole)
            .await
            .unwrap_err()
            .is_held()
    );
}

/// The chaos run's fault of seed 5 (`docs/architecture.md#chaos-run`): a killed extender's
/// HTTP thread still finished a bind, found the lock its successor had just taken for a pod
/// it knew nothing of, and took it over as abandoned; the device plugin then answered that
/// pod's Allocate for the wrong one. A process that is stopping judges no lock abandoned.
#[tokio::test]
async fn a_stopping_scheduler_takes_over_no_lock_as_abandoned() {
    let (_server, client) = setup().await;
    create_pod(&client, "successors", json!({})).await;
    create_pod(&client, "me", json!({})).await;
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let lock_value_of_successor = format!("{now},default,successors");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let sole = LocalBinds::sole();
    sole.stops_with(shutdown.clone());

    // Running: an unbound owner nobody here binds is abandoned (as before).
    set_lock(&client, &lock_value_of_successor).await;
    assert!(matches!(
        lock::try_acquire_with(&client, "n1", "default", "me", TIMEOUT, &sole).await,
        Ok(Acquired::TookOver(Takeover::Abandoned { .. }))
    ));
    // Stopping: the same lock is held; the lock names its owner still.
    set_lock(&client, &lock_value_of_successor).await;
    shutdown.cancel();
    assert!(
        lock::try_acquire_with(&client, "n1", "default", "me", TIMEOUT, &sole)
            .await
            .unwrap_err()
            .is_held()
    );
    assert_eq!(lock_value(&client).await, Some(lock_value_of_successor));
}

/// The chaos run's fault (`docs/architecture.md#chaos-run`): a bind that ends while the
/// next locker reads its owner pod may have created its Binding after the read was
/// answered, so the unbound owner that read returned proves nothing; the lock is held
/// (kubelet is about to allocate that pod) and judged again on the next try.
#[tokio::test]
async fn a_bind_ending_while_its_owner_is_read_is_not_abandoned() {
    let (server, client) = setup().await;
    create_pod(&client, "owner", json!({BIND_PHASE: "allocating"})).await;
    create_pod(&client, "next", json!({})).await;
    let sole = LocalBinds::sole();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    set_lock(&client, &format!("{now},default,owner")).await;

    let binding = sole.start("default", "owner");
    server
        .faults()
        .before_next("get", "/pods/owner", move || drop(binding));
    let held = lock::try_acquire_with(&client, "n1", "default", "next", TIMEOUT, &sole).await;
    assert!(
        held.as_ref().is_err_and(LockError::is_held),
        "the owner's bind ended during the read: {held:?}"
    );
    assert_eq!(
        lock_value(&client).await,
        Some(format!("{now},default,owner"))
    );

    // Read again with no bind in flight and still unbound: abandoned, taken over at once.
    assert_eq!(
        lock::try_acquire_with(&client, "n1", "default", "next", TIMEOUT, &sole)
            .await
            .unwrap(),
        Acquired::TookOver(Takeover::Abandoned {
            owner: "default/owner".into()
        })
    );
}

/// The chaos run's other fault (`docs/architecture.md#chaos-run`): the owner of the last
/// lock taken on a node was deleted (or re-created under its name) between its bind and
/// its allocation, so no device plugin releases the lock and no later bind takes it
/// over. `release_stale` releases exactly the locks a bind would take over.
#[tokio::test]
async fn stale_locks_are_released_without_a_bind_and_live_ones_kept() {
    let (_server, client) = setup().await;
    let sole = LocalBinds::sole();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let stale = |c| lock::release_stale(c, "n1", TIMEOUT, &sole);

    // No lock: nothing to do.
    assert_eq!(stale(&client).await.unwrap(), None);

    // Owner deleted after its bind: released.
    set_lock(&client, &format!("{now},default,gone")).await;
    assert_eq!(
        stale(&client).await.unwrap(),
        Some(Takeover::Dangling {
            owner: "default/gone".into()
        })
    );
    assert_eq!(lock_value(&client).await, None);

    // Owner re-created under its name (unbound) and nobody binds it: released.
    create_pod(&client, "again", json!({})).await;
    set_lock(&client, &format!("{now},default,again")).await;
    let binding = sole.start("default", "again");
    // ... but not while this process is binding it.
    assert_eq!(stale(&client).await.unwrap(), None);
    assert!(lock_value(&client).await.is_some());
    drop(binding);
    assert_eq!(
        stale(&client).await.unwrap(),
        Some(Takeover::Abandoned {
            owner: "default/again".into()
        })
    );
    assert_eq!(lock_value(&client).await, None);

    // Owner bound and being allocated: kept for the device plugin to release.
    bind_to_n1(&client, "again").await;
    set_lock(&client, &format!("{now},default,again")).await;
    assert_eq!(stale(&client).await.unwrap(), None);
    assert_eq!(
        lock_value(&client).await,
        Some(format!("{now},default,again"))
    );
}

/// A pod deleted after its Binding and before its Allocate keeps the node lock while it
/// is still `allocating` there: kubelet may be admitting it, and the device plugin matches
/// that Allocate to the lock's owner, so a lock taken over by the next pod handed that pod's
/// devices to the leaving one (`docs/extender.md#node-lock-takeover`).
#[tokio::test]
async fn a_pod_deleted_while_awaiting_its_allocation_keeps_the_lock() {
    let (_server, client) = setup().await;
    let sole = LocalBinds::sole();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    create_pod(&client, "leaving", json!({BIND_PHASE: "allocating"})).await;
    create_pod(&client, "next", json!({})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    bind_to_n1(&client, "leaving").await;
    let value = format!("{now},default,leaving");
    set_lock(&client, &value).await;
    // A bound pod is deleted gracefully: it stays, marked, until its kubelet finishes.
    pods.delete("leaving", &DeleteParams::default())
        .await
        .unwrap();
    let leaving = pods.get("leaving").await.unwrap();
    assert!(leaving.metadata.deletion_timestamp.is_some());

    // Neither the next bind nor the sweep takes the lock from it.
    let held = lock::try_acquire_with(&client, "n1", "default", "next", TIMEOUT, &sole)
        .await
        .unwrap_err();
    assert!(held.is_held(), "{held}");
    assert_eq!(
        lock::release_stale(&client, "n1", TIMEOUT, &sole)
            .await
            .unwrap(),
        None
    );
    assert_eq!(lock_value(&client).await, Some(value.clone()));

    // Once its allocation ended (here: failed), the lock is free.
    hami_k8s::patch::patch_pod(
        &client,
        hami_k8s::patch::PodRef::of(&leaving),
        &hami_k8s::patch::MetadataPatch::new().annotate(BIND_PHASE, "failed"),
    )
    .await
    .unwrap();
    assert!(matches!(
        lock::try_acquire_with(&client, "n1", "default", "next", TIMEOUT, &sole).await,
        Ok(Acquired::TookOver(Takeover::Dangling { owner })) if owner == "default/leaving"
    ));

    // Being deleted and not allocating here (never bound): done, as before.
    create_pod(&client, "unbound", json!({BIND_PHASE: "allocating"})).await;
    set_lock(&client, &format!("{now},default,unbound")).await;
    pods.delete("unbound", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        lock::release_stale(&client, "n1", TIMEOUT, &sole)
            .await
            .unwrap(),
        Some(Takeover::Dangling {
            owner: "default/unbound".into()
        })
    );
}

/// HAMi's `Test_LockNode`, `TestLockNodeWithDangling` and `TestReleaseNodeLock`
/// (pkg/util/nodelock), case by case. Three of HAMi's cases are deliberate differences
/// (`docs/protocol.md#node-lock`): the lock's own owner takes it back (HAMi: `node has been
/// locked`, an error), a malformed value is taken over (HAMi: `node lock is invalid`, an
/// error that blocks the node until someone edits it) and releasing on a node that is gone
/// finds nothing to release (HAMi: an error).
#[tokio::test]
async fn hamis_node_lock_tables() {
    let (_server, client) = setup().await;
    create_pod(&client, "hami", json!({})).await;

    // Test_LockNode "node not found": an error.
    assert!(matches!(
        lock::try_acquire(&client, "node", "default", "hami", TIMEOUT).await,
        Err(LockError::NodeNotFound(n)) if n == "node"
    ));
    // Test_LockNode "successfully set node lock".
    assert_eq!(
        lock::try_acquire(&client, "n1", "default", "hami", TIMEOUT)
            .await
            .unwrap(),
        Acquired::Taken
    );
    // Test_LockNode "node has been locked" (by the same pod): re-entered here.
    assert_eq!(
        lock::try_acquire(&client, "n1", "default", "hami", TIMEOUT)
            .await
            .unwrap(),
        Acquired::Reentered
    );
    // TestReleaseNodeLock "successfully release node lock", then "node is not lock".
    assert_eq!(
        lock::release(&client, "n1", "default", "hami")
            .await
            .unwrap(),
        Released::Released
    );
    assert_eq!(
        lock::release(&client, "n1", "default", "hami")
            .await
            .unwrap(),
        Released::NotLocked
    );
    // TestReleaseNodeLock "node lock is not set by this pod": no error, lock left alone.
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let other = format!("{now},namespace,pod");
    set_lock(&client, &other).await;
    assert_eq!(
        lock::release(&client, "n1", "default", "hami")
            .await
            .unwrap(),
        Released::HeldByOther {
            value: other.clone()
        }
    );
    assert_eq!(lock_value(&client).await, Some(other));
    // TestLockNodeWithDangling: a fresh lock whose pod does not exist is taken over.
    assert!(matches!(
        lock::try_acquire(&client, "n1", "default", "hami", TIMEOUT).await,
        Ok(Acquired::TookOver(Takeover::Dangling { .. }))
    ));
    // TestReleaseNodeLock "node not found": HAMi errors; here there is nothing left to
    // release, and a failed bind's clean-up must not report the node's deletion as a fault.
    assert_eq!(
        lock::release(&client, "node", "default", "hami")
            .await
            .unwrap(),
        Released::NotLocked
    );
    // Test_LockNode "node lock is invalid" (`lock`): taken over here.
    set_lock(&client, "lock").await;
    assert_eq!(
        lock::try_acquire(&client, "n1", "default", "hami", TIMEOUT)
            .await
            .unwrap(),
        Acquired::TookOver(Takeover::Malformed {
            value: "lock".into()
        })
    );
}

/// The node's resourceVersion now.
async fn node_version(client: &Client) -> String {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .get("n1")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
}

/// The (verb, HTTP status) of the node requests served since `from` in the log.
fn node_calls_since(server: &ApiServer, from: usize) -> Vec<(String, u16)> {
    server
        .faults()
        .requests()
        .split_off(from)
        .into_iter()
        .filter(|r| r.path.ends_with("/nodes/n1"))
        .map(|r| (r.verb, r.code))
        .collect()
}

#[tokio::test]
async fn a_lock_taken_from_a_watched_unlocked_version_needs_no_read() {
    let (server, client) = setup().await;
    create_pod(&client, "a", json!({})).await;
    let sole = LocalBinds::sole();
    let version = node_version(&client).await;
    let from = server.faults().requests().len();
    let got =
        lock::try_acquire_seen_unlocked(&client, "n1", "default", "a", TIMEOUT, &sole, &version)
            .await;
    assert_eq!(got.unwrap(), Acquired::Taken);
    assert_eq!(
        node_calls_since(&server, from),
        [("patch".to_string(), 200)]
    );
    assert!(lock_value(&client).await.unwrap().ends_with(",default,a"));
}

#[tokio::test]
async fn a_stale_watched_version_is_refused_then_the_node_is_read_and_locked() {
    let (server, client) = setup().await;
    create_pod(&client, "a", json!({})).await;
    let sole = LocalBinds::sole();
    let stale = node_version(&client).await;
    // The node changes after the watch showed it (a device plugin's registration, say).
    hami_k8s::patch::patch_node(
        &client,
        "n1",
        &hami_k8s::patch::MetadataPatch::new().annotate("example.com/other", "x"),
    )
    .await
    .unwrap();
    let from = server.faults().requests().len();
    let got =
        lock::try_acquire_seen_unlocked(&client, "n1", "default", "a", TIMEOUT, &sole, &stale)
            .await;
    assert_eq!(got.unwrap(), Acquired::Taken);
    let calls = node_calls_since(&server, from);
    assert_eq!(
        calls,
        [
            ("patch".to_string(), 409),
            ("get".to_string(), 200),
            ("patch".to_string(), 200)
        ]
    );
    assert!(lock_value(&client).await.unwrap().ends_with(",default,a"));
}

#[tokio::test]
async fn a_stale_unlocked_view_never_takes_a_live_lock() {
    let (_server, client) = setup().await;
    create_pod(&client, "a", json!({})).await;
    create_pod(&client, "b", json!({})).await;
    let sole = LocalBinds::sole();
    let unlocked = node_version(&client).await;
    // Pod b is being bound and locked the node since the watch showed it unlocked.
    let _binding_b = sole.start("default", "b");
    assert_eq!(
        lock::try_acquire_with(&client, "n1", "default", "b", TIMEOUT, &sole)
            .await
            .unwrap(),
        Acquired::Taken
    );
    let taken = lock_value(&client).await.unwrap();
    let err =
        lock::try_acquire_seen_unlocked(&client, "n1", "default", "a", TIMEOUT, &sole, &unlocked)
            .await
            .unwrap_err();
    assert!(err.is_held(), "{err}");
    assert!(err.to_string().contains("default/b"), "{err}");
    assert_eq!(lock_value(&client).await, Some(taken));
}

#[test]
fn a_second_bind_of_the_same_pod_is_seen_by_the_first() {
    let binds = LocalBinds::sole();
    let first = binds.start("default", "a");
    assert!(
        !binds.others_binding("default", "a"),
        "only the caller's own"
    );
    let second = binds.start("default", "a");
    let other_pod = binds.start("default", "b");
    assert!(binds.others_binding("default", "a"));
    assert!(!binds.others_binding("default", "b"));
    drop(second);
    assert!(!binds.others_binding("default", "a"));
    drop((first, other_pod));
    assert!(!binds.is_binding("default", "a"));
}

#[test]
fn a_bind_learns_whether_another_bind_of_its_pod_overlapped_it() {
    let binds = LocalBinds::sole();
    let alone = binds.start("default", "a");
    let other_pod = binds.start("default", "b");
    drop(other_pod);
    assert!(!alone.overlapped(), "a bind of another pod is no overlap");
    drop(alone);

    // Started and ended while the first ran (kube-scheduler's retry that bound the pod).
    let first = binds.start("default", "a");
    drop(binds.start("default", "a"));
    assert!(first.overlapped());
    assert!(!binds.others_binding("default", "a"));
    // In flight when the second started: the second overlapped from its start.
    let second = binds.start("default", "a");
    assert!(second.overlapped());
    drop((first, second));

    // Each bind's own start and end are no overlap of a later one.
    let later = binds.start("default", "a");
    assert!(!later.overlapped());
}
