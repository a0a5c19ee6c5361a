//! Serving, registering, re-registering, ListAndWatch and the node inventory, against the
//! kubelet emulator and the API server emulator over real sockets.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use hami_device_plugin::{BackendEvent, DirWatcher};
use hami_server::test_support::LogCapture;
use hami_server::trace::{LogFormat, subscriber};
use hami_testkit::kubelet::PluginCall;
use serde_json::json;

#[tokio::test]
async fn registers_streams_replicas_and_publishes_the_inventory() {
    let mut c = Cluster::start().await;
    c.ready(8).await;
    let state = c.kubelet.resource(RESOURCE).unwrap();
    assert_eq!(
        state.healthy.iter().collect::<Vec<_>>(),
        [
            "GPU-a-0", "GPU-a-1", "GPU-a-2", "GPU-a-3", "GPU-b-0", "GPU-b-1", "GPU-b-2", "GPU-b-3"
        ]
    );
    assert!(
        state.devices["GPU-b-2"].topology.is_none(),
        "NUMA only when enabled"
    );
    let options = state.options.unwrap();
    assert!(options.get_preferred_allocation_available && !options.pre_start_required);
    let reg = &c.kubelet.registrations()[0];
    assert_eq!(
        (
            reg.version.as_str(),
            reg.endpoint.as_str(),
            reg.resource_name.as_str()
        ),
        ("v1beta1", "nvidia-gpu.sock", RESOURCE)
    );
    assert_eq!(
        reg.options,
        Some(options),
        "registered options = answered options"
    );
    assert_eq!(state.socket, Some(c.kubelet.dir().join("nvidia-gpu.sock")));

    let value = c
        .wait_node_annotation("hami.io/node-nvidia-register", |v| v.is_some())
        .await
        .unwrap();
    assert_eq!(
        value,
        r#"[{"id":"GPU-a","count":4,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4","mode":"hami-core","health":true},{"id":"GPU-b","index":1,"count":4,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4","numa":1,"mode":"hami-core","health":true}]"#
    );
    let decoded = hami_core::codec::decode_node_register(&value).unwrap();
    assert_eq!(decoded.len(), 2);
    assert!(c.status.borrow().published);
}

#[tokio::test]
async fn numa_topology_scaling_and_filter_come_from_the_config() {
    let mut c = Cluster::start_with(
        |cfg| {
            cfg.numa_topology = true;
            cfg.split_count = 2;
            cfg.memory_scaling = 2.0;
            cfg.core_scaling = 0.5;
            cfg.filter.indexes = vec![2];
        },
        vec![
            gpu("GPU-a", 0, 1000, 0),
            gpu("GPU-b", 1, 1000, 1),
            gpu("GPU-c", 2, 1000, 1),
        ],
        json!({}),
    )
    .await;
    c.ready(4).await;
    let state = c.kubelet.resource(RESOURCE).unwrap();
    assert_eq!(
        state.devices["GPU-b-1"].topology.as_ref().unwrap().nodes[0].id,
        1
    );
    assert_eq!(
        state.devices["GPU-a-0"].topology.as_ref().unwrap().nodes[0].id,
        0
    );
    assert!(!state.devices.contains_key("GPU-c-0"), "filtered device");
    let v = c
        .wait_node_annotation("hami.io/node-nvidia-register", |v| v.is_some())
        .await
        .unwrap();
    let devs = hami_core::codec::decode_node_register(&v).unwrap();
    assert_eq!(devs.len(), 2);
    assert_eq!(
        (devs[0].count, devs[0].mem_mib, devs[0].cores),
        (2, 2000, 50)
    );
}

#[tokio::test]
async fn kubelet_restart_means_serve_again_and_register_again() {
    let mut c = Cluster::start().await;
    c.ready(8).await;
    c.kubelet.restart().await.unwrap();
    c.wait_registered(2).await;
    assert!(c.kubelet.wait_for_healthy(RESOURCE, 8, WAIT).await);
    assert!(
        c.kubelet.dir().join("nvidia-gpu.sock").exists(),
        "socket served again"
    );
    let regs = c.kubelet.registrations();
    assert_eq!(regs.len(), 2, "{regs:?}");
    assert!(regs.iter().all(|r| r.result == Some(Ok(()))));
}

#[tokio::test]
async fn a_removed_socket_means_serve_again_and_register_again() {
    let mut c = Cluster::start().await;
    c.ready(8).await;
    std::fs::remove_file(c.kubelet.dir().join("nvidia-gpu.sock")).unwrap();
    c.wait_registered(2).await;
    assert!(c.kubelet.wait_for_healthy(RESOURCE, 8, WAIT).await);
    assert!(c.kubelet.dir().join("nvidia-gpu.sock").exists());
}

#[tokio::test]
async fn without_inotify_the_directory_is_polled_and_a_kubelet_restart_still_noticed() {
    // What inotify_init answers past the per-user instance limit
    // (fs.inotify.max_user_instances): the plugin must say so and poll instead.
    let capture = LogCapture::default();
    let dispatch = subscriber(LogFormat::Json, Some("info"), capture.clone()).unwrap();
    let _logs = tracing::dispatcher::set_default(&dispatch);
    let no_inotify = DirWatcher::with_factory(Box::new(|_| {
        Err(notify::Error::io(std::io::Error::from_raw_os_error(
            rustix::io::Errno::MFILE.raw_os_error(),
        )))
    }));
    let mut c = Cluster::start_with_dir_watcher(no_inotify).await;
    c.ready(8).await;
    let warned = capture
        .json_logged("cannot watch the device plugin directory; checking it every 5s instead");
    assert_eq!(warned.len(), 1, "{:?}", capture.lines());
    assert_eq!(warned[0]["limit_reached"], true, "{}", warned[0]);
    let error = warned[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("max_user_instances"), "{error}");

    c.kubelet.restart().await.unwrap();
    c.wait_registered(2).await;
    assert!(c.kubelet.wait_for_healthy(RESOURCE, 8, WAIT).await);
    std::fs::remove_file(c.kubelet.dir().join("nvidia-gpu.sock")).unwrap();
    c.wait_registered(3).await;
    assert!(c.kubelet.dir().join("nvidia-gpu.sock").exists());
}

#[tokio::test]
async fn kubelet_going_away_and_coming_back_means_register_again() {
    let mut c = Cluster::start().await;
    c.ready(8).await;
    c.kubelet.stop().await;
    assert!(
        tokio::time::timeout(WAIT, c.status.wait_for(|s| !s.registered))
            .await
            .is_ok(),
        "kubelet going away is noticed (our socket stays, kubelet.sock goes)"
    );
    c.kubelet.restart().await.unwrap();
    c.wait_registered(2).await;
    assert!(c.kubelet.wait_for_healthy(RESOURCE, 8, WAIT).await);
}

#[tokio::test]
async fn health_changes_reach_kubelet_and_the_node_annotation() {
    let mut c = Cluster::start().await;
    c.ready(8).await;
    c.backend
        .send(BackendEvent::Health {
            uuid: "GPU-b".into(),
            healthy: false,
            reason: "Xid 79".into(),
        })
        .await;
    assert!(
        c.kubelet
            .wait_until(WAIT, |k| k.resource(RESOURCE).is_some_and(|r| r
                .healthy
                .len()
                == 4
                && r.unhealthy.iter().all(|d| d.starts_with("GPU-b-"))
                && r.unhealthy.len() == 4))
            .await
    );
    let v = c
        .wait_node_annotation("hami.io/node-nvidia-register", |v| {
            v.is_some_and(|v| v.contains(r#""numa":1,"mode":"hami-core"}"#))
        })
        .await
        .unwrap();
    let devs = hami_core::codec::decode_node_register(&v).unwrap();
    assert!(devs[0].health && !devs[1].health);

    // And back.
    c.backend
        .send(BackendEvent::Health {
            uuid: "GPU-b".into(),
            healthy: true,
            reason: "recovered".into(),
        })
        .await;
    assert!(c.kubelet.wait_for_healthy(RESOURCE, 8, WAIT).await);

    // A re-read device list replaces the inventory.
    c.backend
        .send(BackendEvent::Devices(vec![gpu("GPU-a", 0, 15360, 0)]))
        .await;
    assert!(c.kubelet.wait_for_healthy(RESOURCE, 4, WAIT).await);
    c.wait_node_annotation("hami.io/node-nvidia-register", |v| {
        v.is_some_and(|v| !v.contains("GPU-b"))
    })
    .await;
}

#[tokio::test]
async fn the_annotation_is_restored_and_only_written_when_it_differs() {
    let mut c = Cluster::start_with(
        |cfg| cfg.register_interval = Duration::from_millis(200),
        vec![gpu("GPU-a", 0, 100, 0)],
        json!({}),
    )
    .await;
    c.ready(4).await;
    let v = c
        .wait_node_annotation("hami.io/node-nvidia-register", |v| v.is_some())
        .await;
    // Someone deletes it: the periodic check writes it back.
    hami_k8s::patch::patch_node(
        &c.client,
        NODE,
        &hami_k8s::patch::MetadataPatch::new().remove_annotation("hami.io/node-nvidia-register"),
    )
    .await
    .unwrap();
    let back = c
        .wait_node_annotation("hami.io/node-nvidia-register", |x| x.is_some())
        .await;
    assert_eq!(back, v);
    // Several rounds later the node has been patched no more.
    let writes = || {
        c.api
            .faults()
            .requests()
            .iter()
            .filter(|r| r.verb == "patch" && r.path.contains("/nodes/"))
            .count()
    };
    let before = writes();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(writes(), before, "unchanged inventory is not re-written");
}

#[tokio::test]
async fn handshake_is_answered_only_when_kubelet_does_not_vouch() {
    // No allocatable: a pending request gets `Reported <time>`.
    let c = Cluster::start_with(
        |cfg| cfg.register_interval = Duration::from_millis(200),
        vec![gpu("GPU-a", 0, 100, 0)],
        json!({}),
    )
    .await;
    hami_k8s::patch::patch_node(
        &c.client,
        NODE,
        &hami_k8s::patch::MetadataPatch::new()
            .annotate("hami.io/node-handshake", "Requesting_2026-01-01 00:00:00"),
    )
    .await
    .unwrap();
    let v = c
        .wait_node_annotation("hami.io/node-handshake", |v| {
            v.is_some_and(|v| v.starts_with("Reported "))
        })
        .await;
    assert!(!v.unwrap().contains("Requesting"));

    // kubelet reports our devices: the request is left for the scheduler.
    let c2 = Cluster::start_with(
        |cfg| cfg.register_interval = Duration::from_millis(200),
        vec![gpu("GPU-a", 0, 100, 0)],
        json!({"allocatable": {RESOURCE: "4"}, "capacity": {RESOURCE: "4"}}),
    )
    .await;
    hami_k8s::patch::patch_node(
        &c2.client,
        NODE,
        &hami_k8s::patch::MetadataPatch::new()
            .annotate("hami.io/node-handshake", "Requesting_2026-01-01 00:00:00"),
    )
    .await
    .unwrap();
    c2.wait_node_annotation("hami.io/node-nvidia-register", |v| v.is_some())
        .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        c2.node_annotation("hami.io/node-handshake")
            .await
            .as_deref(),
        Some("Requesting_2026-01-01 00:00:00")
    );
}

#[tokio::test]
async fn graceful_shutdown_ends_streams_removes_the_socket_and_withdraws_devices() {
    let mut c = Cluster::start().await;
    c.ready(8).await;
    c.wait_node_annotation("hami.io/node-nvidia-register", |v| v.is_some())
        .await;
    c.stop().await;
    assert!(!c.kubelet.dir().join("nvidia-gpu.sock").exists());
    assert!(
        c.kubelet
            .wait_until(WAIT, |k| k
                .resource(RESOURCE)
                .is_some_and(|r| !r.connected && r.healthy.is_empty()))
            .await,
        "kubelet saw the stream end"
    );
    let v = c
        .node_annotation("hami.io/node-nvidia-register")
        .await
        .unwrap();
    let devs = hami_core::codec::decode_node_register(&v).unwrap();
    assert!(devs.iter().all(|d| !d.health), "{v}");
    assert!(
        !c.kubelet
            .calls()
            .iter()
            .any(|call| matches!(call, PluginCall::Allocate { .. })),
    );
}

/// The registration loop ends when it cannot serve (the plugin directory is gone):
/// readiness names it and why, and it is started again until it serves and registers.
#[tokio::test]
async fn a_registration_loop_that_cannot_serve_is_reported_and_restarted() {
    let mut c = Cluster::start_patient().await;
    c.ready(8).await;
    assert_eq!(c.readiness.check(), Ok(()));
    let dir = c.kubelet.dir().to_path_buf();
    c.kubelet.stop().await;
    std::fs::remove_dir_all(&dir).unwrap();
    let why = c
        .wait_readiness(|r| {
            r.as_ref()
                .is_err_and(|e| e.contains("device plugin server: failed: cannot serve on"))
        })
        .await
        .unwrap_err();
    assert!(why.contains("nvidia-gpu.sock"), "{why}");
    assert!(why.contains("restarting in"), "{why}");
    std::fs::create_dir_all(&dir).unwrap();
    c.kubelet.restart().await.unwrap();
    c.wait_registered(2).await;
    assert!(c.kubelet.wait_for_healthy(RESOURCE, 8, WAIT).await);
    c.wait_readiness(|r| r.is_ok()).await.unwrap();
    c.stop().await;
}

/// A backend whose health watch dies (its channel closes): reported, and watched again.
#[tokio::test]
async fn a_health_watch_that_dies_is_reported_and_started_again() {
    let mut c = Cluster::start_patient().await;
    c.ready(8).await;
    assert_eq!(
        c.backend.watches.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    c.backend.die();
    let why = c.wait_readiness(|r| r.is_err()).await.unwrap_err();
    assert!(
        why.contains(
            "device health watch: failed: the scripted backend stopped reporting device health"
        ),
        "{why}"
    );
    c.wait_readiness(|r| r.is_ok()).await.unwrap();
    assert_eq!(
        c.backend.watches.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    // The new watch is the one that counts.
    c.backend
        .send(BackendEvent::Health {
            uuid: "GPU-a".into(),
            healthy: false,
            reason: "xid 79".into(),
        })
        .await;
    assert!(c.kubelet.wait_for_healthy(RESOURCE, 4, WAIT).await);
    c.stop().await;
}
