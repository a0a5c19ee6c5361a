//! The emulator driven by the real `kube::Client`, as our services will use it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use hami_testkit::{ApiServer, Options};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use kube::{Client, Config};
use serde_json::json;

async fn client(server: &ApiServer) -> Client {
    let config = Config::new(server.url().parse().unwrap());
    Client::try_from(config).unwrap()
}

fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}
    }))
    .unwrap()
}

fn api_status(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn crud_patch_and_conflicts() {
    let server = ApiServer::start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&server).await, "default");
    let pp = PostParams::default();

    let created = pods
        .create(&pp, &pod("a", json!({"app": "x"})))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
    assert_eq!(meta.generation, Some(1));
    assert_eq!(
        created.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending")
    );
    let rv1: u64 = meta.resource_version.as_deref().unwrap().parse().unwrap();

    assert_eq!(
        api_status(pods.create(&pp, &pod("a", json!({}))).await.unwrap_err()),
        (409, "AlreadyExists".into())
    );
    assert_eq!(
        api_status(pods.get("nope").await.unwrap_err()),
        (404, "NotFound".into())
    );
    let other_ns: Api<Pod> = Api::namespaced(client(&server).await, "missing");
    assert_eq!(
        api_status(
            other_ns
                .create(&pp, &pod("a", json!({})))
                .await
                .unwrap_err()
        )
        .0,
        404
    );

    let got = pods.get("a").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);

    // Merge patch: add one label, `null` deletes another.
    let merged = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"app": null, "m": "1"}}})),
        )
        .await
        .unwrap();
    let labels = merged.metadata.labels.clone().unwrap();
    assert!(!labels.contains_key("app") && labels["m"] == "1");
    let rv2: u64 = merged
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1);

    // Strategic merge patch: containers merge by name.
    let smp = json!({"metadata": {"annotations": {"s": "1"}}, "spec": {"containers": [{"name": "main", "image": "nginx"}]}});
    let strategic = pods
        .patch("a", &PatchParams::default(), &Patch::Strategic(smp))
        .await
        .unwrap();
    let spec = strategic.spec.clone().unwrap();
    assert_eq!(spec.containers.len(), 1);
    assert_eq!(spec.containers[0].image.as_deref(), Some("nginx"));
    assert_eq!(strategic.metadata.generation, Some(2));

    // JSON patch.
    let jp: json_patch::Patch =
        serde_json::from_value(json!([{"op": "add", "path": "/metadata/labels/j", "value": "2"}]))
            .unwrap();
    let patched = pods
        .patch("a", &PatchParams::default(), &Patch::<()>::Json(jp))
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.as_ref().unwrap()["j"], "2");

    // A patch carrying a stale resourceVersion is a conflict.
    let stale = json!({"metadata": {"resourceVersion": rv1.to_string(), "labels": {"z": "1"}}});
    assert_eq!(
        api_status(
            pods.patch("a", &PatchParams::default(), &Patch::Merge(stale))
                .await
                .unwrap_err()
        ),
        (409, "Conflict".into())
    );

    // Replace with a stale resourceVersion: 409 Conflict; with the current one: ok.
    let mut old = created.clone();
    old.metadata.labels = Some([("r".to_string(), "1".to_string())].into());
    assert_eq!(
        api_status(pods.replace("a", &pp, &old).await.unwrap_err()),
        (409, "Conflict".into())
    );
    let mut fresh = pods.get("a").await.unwrap();
    fresh.metadata.labels = Some([("r".to_string(), "1".to_string())].into());
    let replaced = pods.replace("a", &pp, &fresh).await.unwrap();
    assert_eq!(replaced.metadata.labels.unwrap()["r"], "1");

    pods.delete("a", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_status(pods.get("a").await.unwrap_err()).0, 404);
    assert_eq!(
        api_status(
            pods.delete("a", &DeleteParams::default())
                .await
                .unwrap_err()
        )
        .0,
        404
    );
}

#[tokio::test]
async fn binding_sets_node_once() {
    let server = ApiServer::start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&server).await, "default");
    pods.create(&PostParams::default(), &pod("b", json!({})))
        .await
        .unwrap();
    let binding = |node: &str| json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "b"}, "target": {"kind": "Node", "name": node}});
    let status: serde_json::Value = pods
        .create_subresource("binding", "b", &PostParams::default(), &binding("n1"))
        .await
        .unwrap();
    assert_eq!(status["status"], "Success");
    let bound = pods.get("b").await.unwrap();
    assert_eq!(bound.spec.unwrap().node_name.as_deref(), Some("n1"));
    // The registry marks the pod scheduled, as kube-apiserver's binding does.
    let conds = bound.status.unwrap().conditions.unwrap();
    let scheduled = conds.iter().find(|c| c.type_ == "PodScheduled").unwrap();
    assert_eq!(scheduled.status, "True");
    assert!(scheduled.last_transition_time.is_some());
    let err = pods
        .create_subresource::<_, serde_json::Value>(
            "binding",
            "b",
            &PostParams::default(),
            &binding("n2"),
        )
        .await
        .unwrap_err();
    assert_eq!(api_status(err), (409, "Conflict".into()));
}

#[tokio::test]
async fn label_and_field_selectors() {
    let server = ApiServer::start().await.unwrap();
    let c = client(&server).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();
    pods.create(&pp, &pod("p1", json!({"app": "a", "tier": "web"})))
        .await
        .unwrap();
    pods.create(&pp, &pod("p2", json!({"app": "b"})))
        .await
        .unwrap();
    pods.create(&pp, &pod("p3", json!({}))).await.unwrap();
    let mut bound = pod("p4", json!({"app": "a"}));
    bound.spec.as_mut().unwrap().node_name = Some("n1".into());
    pods.create(&pp, &bound).await.unwrap();

    let names = |l: kube::core::ObjectList<Pod>| {
        l.items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    let by = |s: &str| ListParams::default().labels(s);
    assert_eq!(names(pods.list(&by("app=a")).await.unwrap()), ["p1", "p4"]);
    assert_eq!(names(pods.list(&by("app!=a")).await.unwrap()), ["p2", "p3"]);
    assert_eq!(
        names(pods.list(&by("app in (a,b),!tier")).await.unwrap()),
        ["p2", "p4"]
    );
    assert_eq!(
        names(pods.list(&by("app notin (a)")).await.unwrap()),
        ["p2", "p3"]
    );
    assert_eq!(names(pods.list(&by("tier")).await.unwrap()), ["p1"]);
    let fields = |s: &str| ListParams::default().fields(s);
    assert_eq!(
        names(pods.list(&fields("spec.nodeName=n1")).await.unwrap()),
        ["p4"]
    );
    assert_eq!(
        names(
            pods.list(&fields("spec.nodeName=,metadata.name!=p1"))
                .await
                .unwrap()
        ),
        ["p2", "p3"]
    );
    assert_eq!(
        names(
            pods.list(&fields("status.phase=Pending,metadata.namespace=default"))
                .await
                .unwrap()
        )
        .len(),
        4
    );
    let err = pods.list(&fields("spec.bogus=x")).await.unwrap_err();
    assert_eq!(api_status(err).0, 400);

    let list = pods.list(&ListParams::default()).await.unwrap();
    assert!(
        list.metadata
            .resource_version
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    let all: Api<Pod> = Api::all(c);
    assert_eq!(
        all.list(&ListParams::default().limit(3))
            .await
            .unwrap()
            .items
            .len(),
        3
    );
}

#[tokio::test]
async fn watcher_sees_pods_created_after_start() {
    let server = ApiServer::start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&server).await, "default");
    let mut stream = watcher(pods.clone(), watcher::Config::default()).boxed();
    // Initial list (empty) completes before we create anything.
    loop {
        if let watcher::Event::InitDone = stream.try_next().await.unwrap().unwrap() {
            break;
        }
    }
    let pp = PostParams::default();
    pods.create(&pp, &pod("w", json!({}))).await.unwrap();
    pods.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .unwrap();
    pods.delete("w", &DeleteParams::default()).await.unwrap();

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let ev = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match ev {
            watcher::Event::Apply(p) => seen.push(format!(
                "apply:{}",
                p.metadata.labels.unwrap_or_default().contains_key("x")
            )),
            watcher::Event::Delete(_) => seen.push("delete".into()),
            _ => {}
        }
    }
    assert_eq!(seen, ["apply:false", "apply:true", "delete"]);
}

#[tokio::test]
async fn raw_watch_event_types_bookmarks_and_gone() {
    let server = ApiServer::start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&server).await, "default");
    let pp = PostParams::default();
    let start = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    pods.create(&pp, &pod("r", json!({}))).await.unwrap();
    pods.patch(
        "r",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .unwrap();
    pods.delete("r", &DeleteParams::default()).await.unwrap();

    let wp = WatchParams::default().timeout(3);
    let mut s = pods.watch(&wp, &start).await.unwrap().boxed();
    let mut kinds = Vec::new();
    while let Some(ev) = s.try_next().await.unwrap() {
        kinds.push(match ev {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            WatchEvent::Bookmark(_) => "BOOKMARK",
            WatchEvent::Error(_) => "ERROR",
        });
        if kinds.len() == 4 {
            break;
        }
    }
    // The bookmark comes once the stream has caught up (interval 1 s).
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]);

    // Label-filtered watch: the pod entering the selector is ADDED.
    pods.create(&pp, &pod("f", json!({}))).await.unwrap();
    let rv = pods
        .get("f")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut s = pods
        .watch(
            &WatchParams::default()
                .labels("x=1")
                .timeout(3)
                .disable_bookmarks(),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    pods.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .unwrap();
    assert!(matches!(
        s.try_next().await.unwrap(),
        Some(WatchEvent::Added(_))
    ));

    // Expired resourceVersion: an ERROR event carrying a 410 Status.
    server.store().compact();
    let mut s = pods
        .watch(
            &WatchParams::default().timeout(3).disable_bookmarks(),
            &start,
        )
        .await
        .unwrap()
        .boxed();
    match s.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
}

#[tokio::test]
async fn events_leases_and_nodes() {
    let server = ApiServer::start().await.unwrap();
    let c = client(&server).await;
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-system");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "hami-scheduler"}, "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}})).unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let got = leases.get("hami-scheduler").await.unwrap();
    assert_eq!(got.spec.unwrap().holder_identity.as_deref(), Some("me"));

    let events: Api<Event> = Api::namespaced(c.clone(), "default");
    let ev: Event = serde_json::from_value(json!({
        "metadata": {"generateName": "p."},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "FilteringFailed", "message": "no node fits", "type": "Warning"
    }))
    .unwrap();
    let created = events.create(&PostParams::default(), &ev).await.unwrap();
    let name = created.metadata.name.unwrap();
    assert!(name.starts_with("p."));
    assert_eq!(
        events.get(&name).await.unwrap().reason.as_deref(),
        Some("FilteringFailed")
    );
    let listed = events
        .list(&ListParams::default().fields("involvedObject.name=p"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);

    let nodes: Api<Node> = Api::all(c);
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"gpu": "on"}}}))
            .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let patched = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"metadata": {"annotations": {"hami.io/node-handshake": "Requesting_2024"}}}),
            ),
        )
        .await
        .unwrap();
    assert!(patched.metadata.namespace.is_none());
    assert_eq!(
        nodes
            .list(&ListParams::default().labels("gpu=on"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
}

#[tokio::test]
async fn reflector_survives_dropped_watch_and_410() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use kube::runtime::{WatchStreamExt, reflector};

    let opts = Options {
        bookmark_interval: Duration::from_secs(3600),
        ..Options::default()
    };
    let server = ApiServer::start_with(opts).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&server).await, "default");
    let (reader, writer) = reflector::store();
    let inits = Arc::new(AtomicUsize::new(0));
    let counted = inits.clone();
    let stream = reflector(writer, watcher(pods.clone(), watcher::Config::default()))
        .default_backoff()
        .for_each(move |ev| {
            if let Ok(watcher::Event::InitDone) = ev {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            futures::future::ready(())
        });
    let task = tokio::spawn(stream);
    reader.wait_until_ready().await.unwrap();

    let wait_for = |n: usize| {
        let reader = reader.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(20), async {
                while reader.len() != n {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .unwrap();
        }
    };
    let pp = PostParams::default();
    pods.create(&pp, &pod("p1", json!({}))).await.unwrap();
    wait_for(1).await;

    // A plain dropped connection: the watcher re-watches from its last version.
    server.store().drop_watches();
    pods.create(&pp, &pod("p2", json!({}))).await.unwrap();
    wait_for(2).await;

    // Dropped connection + compacted history: a change the watcher never saw
    // (bookmarks are off for this server, so its version stays behind) is
    // compacted away; the re-watch gets 410 and the watcher re-lists.
    let nodes: Api<Node> = Api::all(client(&server).await);
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
    nodes.create(&pp, &node).await.unwrap();
    server.store().compact();
    server.store().drop_watches();
    tokio::time::timeout(Duration::from_secs(20), async {
        while inits.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    pods.delete("p1", &DeleteParams::default()).await.unwrap();
    wait_for(1).await;
    assert!(
        reader
            .get(&kube::runtime::reflector::ObjectRef::new("p2").within("default"))
            .is_some()
    );
    task.abort();
}

#[tokio::test]
async fn fault_injection_and_request_log() {
    use hami_testkit::Fault;

    let server = ApiServer::start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client(&server).await, "default");
    let faults = server.faults();

    // Every second create fails with 500, deterministically.
    faults.set_error_rate("create", 0.5, Fault::InternalError);
    let pp = PostParams::default();
    assert!(pods.create(&pp, &pod("f1", json!({}))).await.is_ok());
    assert_eq!(
        api_status(pods.create(&pp, &pod("f2", json!({}))).await.unwrap_err()),
        (500, "InternalError".into())
    );
    assert!(pods.create(&pp, &pod("f2", json!({}))).await.is_ok());

    faults.set_error_rate("patch", 1.0, Fault::Conflict);
    let p = Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}));
    assert_eq!(
        api_status(
            pods.patch("f1", &PatchParams::default(), &p)
                .await
                .unwrap_err()
        )
        .0,
        409
    );

    faults.clear();
    faults.set_latency(Duration::from_millis(100));
    let t = std::time::Instant::now();
    pods.get("f1").await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(100));
    faults.clear();

    let log = faults.requests();
    let verbs: Vec<_> = log.iter().map(|r| (r.verb.as_str(), r.code)).collect();
    assert_eq!(
        verbs,
        [
            ("create", 201),
            ("create", 500),
            ("create", 201),
            ("patch", 409),
            ("get", 200)
        ]
    );
    assert_eq!(log[0].path, "/api/v1/namespaces/default/pods");
}
