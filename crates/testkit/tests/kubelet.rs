//! The kubelet emulator driving a minimal device plugin over real unix sockets.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use hami_kubelet_api::v1beta1::device_plugin_server::{DevicePlugin, DevicePluginServer};
use hami_kubelet_api::v1beta1::registration_client::RegistrationClient;
use hami_kubelet_api::v1beta1::{
    AllocateRequest, AllocateResponse, ContainerAllocateResponse,
    ContainerPreferredAllocationResponse, Device, DevicePluginOptions, Empty, ListAndWatchResponse,
    Mount, PreStartContainerRequest, PreStartContainerResponse, PreferredAllocationRequest,
    PreferredAllocationResponse, RegisterRequest,
};
use hami_testkit::kubelet::{
    AdmitError, Kubelet, KubeletOptions, PluginCall, UNEXPECTED_ADMISSION_ERROR,
};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

const RESOURCE: &str = "example.com/dev";
const WAIT: Duration = Duration::from_secs(10);

/// A device plugin with scripted answers.
struct TestPlugin {
    options: DevicePluginOptions,
    devices: watch::Sender<Vec<Device>>,
    preferred: Mutex<Option<Result<Vec<String>, Status>>>,
    allocate_error: Mutex<Option<Status>>,
    prestart_error: Mutex<Option<Status>>,
    options_error: Option<Status>,
    /// Device IDs of every Allocate request, one entry per ContainerAllocateRequest.
    allocations: Mutex<Vec<Vec<String>>>,
    shutdown: CancellationToken,
}

impl TestPlugin {
    fn new(options: DevicePluginOptions, ids: &[&str]) -> Arc<Self> {
        Arc::new(TestPlugin {
            options,
            devices: watch::channel(ids.iter().map(|id| device(id, true)).collect()).0,
            preferred: Mutex::new(None),
            allocate_error: Mutex::new(None),
            prestart_error: Mutex::new(None),
            options_error: None,
            allocations: Mutex::new(Vec::new()),
            shutdown: CancellationToken::new(),
        })
    }

    fn set_health(&self, id: &str, healthy: bool) {
        self.devices.send_modify(|devs| {
            for d in devs.iter_mut().filter(|d| d.id == id) {
                *d = device(id, healthy);
            }
        });
    }
}

fn device(id: &str, healthy: bool) -> Device {
    Device {
        id: id.into(),
        health: if healthy { "Healthy" } else { "Unhealthy" }.into(),
        topology: None,
    }
}

#[tonic::async_trait]
impl DevicePlugin for TestPlugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        match &self.options_error {
            Some(e) => Err(e.clone()),
            None => Ok(Response::new(self.options)),
        }
    }

    type ListAndWatchStream =
        futures::stream::BoxStream<'static, Result<ListAndWatchResponse, Status>>;

    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let updates = tokio_stream::wrappers::WatchStream::new(self.devices.subscribe())
            .map(|devices| Ok(ListAndWatchResponse { devices }))
            .take_until(self.shutdown.clone().cancelled_owned());
        Ok(Response::new(updates.boxed()))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let scripted = self.preferred.lock().unwrap().clone();
        let ids = match scripted {
            Some(answer) => answer?,
            None => request.into_inner().container_requests[0]
                .available_device_i_ds
                .clone(),
        };
        Ok(Response::new(PreferredAllocationResponse {
            container_responses: vec![ContainerPreferredAllocationResponse { device_i_ds: ids }],
        }))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        if let Some(e) = self.allocate_error.lock().unwrap().clone() {
            return Err(e);
        }
        let mut responses = Vec::new();
        for req in request.into_inner().container_requests {
            self.allocations
                .lock()
                .unwrap()
                .push(req.devices_ids.clone());
            let mut r = ContainerAllocateResponse::default();
            r.envs.insert("DEVICES".into(), req.devices_ids.join(","));
            r.mounts.push(Mount {
                container_path: "/dev/shm/x".into(),
                host_path: "/tmp/x".into(),
                read_only: true,
            });
            r.annotations.insert("a".into(), "b".into());
            responses.push(r);
        }
        Ok(Response::new(AllocateResponse {
            container_responses: responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        match self.prestart_error.lock().unwrap().clone() {
            Some(e) => Err(e),
            None => Ok(Response::new(PreStartContainerResponse {})),
        }
    }
}

/// Serves `plugin` on `<dir>/<name>`; the returned token stops it.
fn serve_plugin(dir: &Path, name: &str, plugin: Arc<TestPlugin>) -> CancellationToken {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let stop = plugin.shutdown.clone();
    let server = DevicePluginServer::from_arc(plugin);
    let token = stop.clone();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(server)
            .serve_with_incoming_shutdown(
                hami_kubelet_api::unix::incoming(listener),
                token.cancelled_owned(),
            )
            .await
            .unwrap();
    });
    stop
}

async fn register(kubelet: &Kubelet, req: RegisterRequest) -> Result<(), Status> {
    let channel = hami_kubelet_api::unix::connect(&kubelet.socket_path())
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    RegistrationClient::new(channel)
        .register(req)
        .await
        .map(|_| ())
}

fn request(endpoint: &str, resource: &str) -> RegisterRequest {
    RegisterRequest {
        version: "v1beta1".into(),
        endpoint: endpoint.into(),
        resource_name: resource.into(),
        // Kubelet ignores these: what counts is GetDevicePluginOptions.
        options: Some(DevicePluginOptions::default()),
    }
}

fn pod(uid: &str, node: &str, init: serde_json::Value, containers: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": uid, "namespace": "default", "uid": uid},
        "spec": {"nodeName": node, "initContainers": init, "containers": containers}
    }))
    .unwrap()
}

fn ctr(name: &str, count: u32) -> serde_json::Value {
    json!({"name": name, "image": "x", "resources": {"limits": {RESOURCE: count.to_string()}}})
}

fn opts(preferred: bool, pre_start: bool) -> DevicePluginOptions {
    DevicePluginOptions {
        pre_start_required: pre_start,
        get_preferred_allocation_available: preferred,
    }
}

async fn kubelet() -> Kubelet {
    Kubelet::start_with(KubeletOptions {
        node_name: Some("node-a".into()),
        dial_timeout: Duration::from_millis(500),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn rejected(err: AdmitError) -> String {
    match err {
        AdmitError::Rejected { reason, message } => {
            assert_eq!(reason, UNEXPECTED_ADMISSION_ERROR);
            message
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

fn plugin_socket(kubelet: &Kubelet, name: &str) -> PathBuf {
    kubelet.dir().join(name)
}

#[tokio::test]
async fn register_watch_prefer_allocate_restart_and_register_again() {
    let kubelet = kubelet().await;
    assert!(kubelet.socket_path().exists());
    let plugin = TestPlugin::new(opts(true, true), &["d0", "d1", "d2", "d3"]);
    serve_plugin(kubelet.dir(), "test.sock", plugin.clone());
    register(&kubelet, request("test.sock", RESOURCE))
        .await
        .unwrap();

    assert!(kubelet.wait_for_healthy(RESOURCE, 4, WAIT).await);
    let state = kubelet.resource(RESOURCE).unwrap();
    assert_eq!(
        state.options,
        Some(opts(true, true)),
        "options come from the RPC"
    );
    assert_eq!(state.socket, Some(plugin_socket(&kubelet, "test.sock")));
    assert_eq!(kubelet.registrations()[0].result, Some(Ok(())));
    assert!(matches!(
        &kubelet.calls()[0],
        PluginCall::GetDevicePluginOptions { result: Ok(o), .. } if *o == opts(true, true)
    ));
    let cap = kubelet.capacity()[RESOURCE];
    assert_eq!((cap.capacity, cap.allocatable), (4, 4));

    // The plugin's preference wins over kubelet's own order.
    *plugin.preferred.lock().unwrap() = Some(Ok(vec!["d3".into(), "d2".into()]));
    kubelet.clear_calls();
    let admitted = kubelet
        .admit(&pod("p1", "node-a", json!([]), json!([ctr("main", 2)])))
        .await
        .unwrap();
    let got = admitted.get("main", RESOURCE).unwrap();
    assert_eq!(got.devices, ["d2", "d3"]);
    assert_eq!(got.response.envs["DEVICES"], "d2,d3");
    assert_eq!(got.response.mounts[0].container_path, "/dev/shm/x");
    assert_eq!(got.response.annotations["a"], "b");
    let calls = kubelet.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(
        matches!(&calls[0], PluginCall::GetPreferredAllocation { available, must_include, size: 2, result: Ok(_), .. }
        if available == &["d0", "d1", "d2", "d3"] && must_include.is_empty())
    );
    assert!(
        matches!(&calls[1], PluginCall::Allocate { devices, container, pod_uid, .. }
        if devices == &["d2", "d3"] && container == "main" && pod_uid == "p1")
    );
    assert!(
        matches!(&calls[2], PluginCall::PreStartContainer { devices, result: Ok(()), .. }
        if devices == &["d2", "d3"])
    );
    assert_eq!(*plugin.allocations.lock().unwrap(), [vec!["d2", "d3"]]);

    // Health changes reach kubelet through ListAndWatch.
    plugin.set_health("d0", false);
    assert!(
        kubelet
            .wait_until(WAIT, |k| k
                .resource(RESOURCE)
                .is_some_and(|r| r.unhealthy.contains("d0")))
            .await
    );
    let cap = kubelet.capacity()[RESOURCE];
    assert_eq!((cap.capacity, cap.allocatable), (4, 3));
    let err = kubelet
        .admit(&pod("p2", "node-a", json!([]), json!([ctr("main", 2)])))
        .await
        .unwrap_err();
    assert_eq!(
        rejected(err),
        "Allocate failed due to requested number of devices unavailable for example.com/dev. Requested: 2, Available: 1, which is unexpected"
    );

    // Kubelet restart: sockets are wiped, allocations survive, the resource waits for its plugin.
    kubelet.restart().await.unwrap();
    assert!(kubelet.socket_path().exists());
    assert!(!plugin_socket(&kubelet, "test.sock").exists());
    let state = kubelet.resource(RESOURCE).unwrap();
    assert!(!state.connected && state.healthy.is_empty() && state.options.is_none());
    assert_eq!(
        state.allocated.iter().collect::<Vec<_>>(),
        ["d2", "d3"],
        "checkpoint kept"
    );
    let err = kubelet
        .admit(&pod("p3", "node-a", json!([]), json!([ctr("main", 1)])))
        .await
        .unwrap_err();
    assert_eq!(
        rejected(err),
        "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices example.com/dev, which is unexpected"
    );

    // The plugin comes back on a new socket and registers again.
    plugin.shutdown.cancel();
    let plugin2 = TestPlugin::new(opts(false, false), &["d0", "d1", "d2", "d3"]);
    serve_plugin(kubelet.dir(), "test2.sock", plugin2.clone());
    register(&kubelet, request("test2.sock", RESOURCE))
        .await
        .unwrap();
    assert!(kubelet.wait_for_healthy(RESOURCE, 4, WAIT).await);
    kubelet.clear_calls();
    let admitted = kubelet
        .admit(&pod("p4", "node-a", json!([]), json!([ctr("main", 2)])))
        .await
        .unwrap();
    assert_eq!(
        admitted.get("main", RESOURCE).unwrap().devices,
        ["d0", "d1"],
        "devices of p1 are still taken"
    );
    assert!(
        kubelet
            .calls()
            .iter()
            .all(|c| matches!(c, PluginCall::Allocate { .. })),
        "no preferred allocation, no pre-start without the options"
    );

    assert!(kubelet.remove_pod("p1"));
    assert_eq!(
        kubelet
            .resource(RESOURCE)
            .unwrap()
            .allocated
            .into_iter()
            .collect::<Vec<_>>(),
        ["d0", "d1"]
    );
}

#[tokio::test]
async fn registration_rejections_carry_kubelets_texts() {
    let kubelet = kubelet().await;
    let plugin = TestPlugin::new(opts(false, false), &["d0"]);
    serve_plugin(kubelet.dir(), "ok.sock", plugin);

    let mut bad_version = request("ok.sock", RESOURCE);
    bad_version.version = "v1alpha1".into();
    let e = register(&kubelet, bad_version).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unknown);
    assert_eq!(
        e.message(),
        r#"requested API version "v1alpha1" is not supported by kubelet. Supported version is ["v1beta1"]"#
    );

    for name in [
        "gpu",
        "kubernetes.io/gpu",
        "requests.example.com/x",
        "Example.com/x",
    ] {
        let e = register(&kubelet, request("ok.sock", name))
            .await
            .unwrap_err();
        assert_eq!(
            e.message(),
            format!("the ResourceName \"{name}\" is invalid")
        );
    }

    let e = register(&kubelet, request("../ok.sock", RESOURCE))
        .await
        .unwrap_err();
    assert!(
        e.message().starts_with(
            "failed to dial device plugin: endpoint \"../ok.sock\" is not a socket file name"
        ),
        "{}",
        e.message()
    );

    let e = register(&kubelet, request("nobody.sock", RESOURCE))
        .await
        .unwrap_err();
    assert_eq!(
        e.message(),
        "failed to dial device plugin: context deadline exceeded"
    );

    let broken = Arc::new(TestPlugin {
        options_error: Some(Status::internal("no options today")),
        ..Arc::into_inner(TestPlugin::new(opts(false, false), &["d0"])).unwrap()
    });
    serve_plugin(kubelet.dir(), "broken.sock", broken);
    let e = register(&kubelet, request("broken.sock", RESOURCE))
        .await
        .unwrap_err();
    assert_eq!(
        e.message(),
        "failed to get device plugin options: rpc error: code = Internal desc = no options today"
    );

    assert!(
        kubelet.resource(RESOURCE).is_none(),
        "nothing was registered"
    );
    let results: Vec<bool> = kubelet
        .registrations()
        .iter()
        .map(|r| matches!(r.result, Some(Err(_))))
        .collect();
    assert_eq!(results, [true; 8]);
}

#[tokio::test]
async fn plugin_errors_fail_admission_and_free_devices() {
    let kubelet = kubelet().await;
    let plugin = TestPlugin::new(opts(true, true), &["d0", "d1"]);
    serve_plugin(kubelet.dir(), "p.sock", plugin.clone());
    register(&kubelet, request("p.sock", RESOURCE))
        .await
        .unwrap();
    assert!(kubelet.wait_for_healthy(RESOURCE, 2, WAIT).await);

    *plugin.allocate_error.lock().unwrap() = Some(Status::unknown("device number not matched"));
    let two = pod("p1", "node-a", json!([]), json!([ctr("a", 1), ctr("b", 1)]));
    let err = kubelet.admit(&two).await.unwrap_err();
    assert_eq!(
        rejected(err),
        "Allocate failed due to rpc error: code = Unknown desc = device number not matched, which is unexpected"
    );
    assert!(kubelet.resource(RESOURCE).unwrap().allocated.is_empty());
    assert!(kubelet.pod_allocations("p1").is_none());

    *plugin.allocate_error.lock().unwrap() = None;
    *plugin.preferred.lock().unwrap() = Some(Err(Status::internal("cannot decide")));
    let err = kubelet.admit(&two).await.unwrap_err();
    assert_eq!(
        rejected(err),
        "Allocate failed due to device plugin GetPreferredAllocation rpc failed with err: rpc error: code = Internal desc = cannot decide, which is unexpected"
    );

    // A preference naming unavailable devices is ignored; kubelet fills in itself.
    *plugin.preferred.lock().unwrap() = Some(Ok(vec!["zz".into()]));
    *plugin.prestart_error.lock().unwrap() = Some(Status::unavailable("driver busy"));
    let err = kubelet.admit(&two).await.unwrap_err();
    match err {
        AdmitError::ContainerStart {
            container,
            reason,
            message,
        } => {
            assert_eq!(container, "a");
            assert_eq!(reason, "CreateContainerConfigError");
            assert_eq!(
                message,
                "device plugin PreStartContainer rpc failed with err: rpc error: code = Unavailable desc = driver busy"
            );
        }
        other => panic!("{other:?}"),
    }
    // Admission itself succeeded: both containers hold a device.
    let held = kubelet.pod_allocations("p1").unwrap();
    assert_eq!(held["a"][RESOURCE].devices, ["d0"]);
    assert_eq!(held["b"][RESOURCE].devices, ["d1"]);

    let elsewhere = pod("p9", "node-b", json!([]), json!([ctr("a", 1)]));
    assert!(matches!(
        kubelet.admit(&elsewhere).await,
        Err(AdmitError::InvalidPod(_))
    ));
}

#[tokio::test]
async fn init_devices_are_reused_sidecars_keep_theirs_and_other_resources_are_ignored() {
    let kubelet = kubelet().await;
    let plugin = TestPlugin::new(opts(false, false), &["d0", "d1", "d2"]);
    serve_plugin(kubelet.dir(), "p.sock", plugin.clone());
    register(&kubelet, request("p.sock", RESOURCE))
        .await
        .unwrap();
    assert!(kubelet.wait_for_healthy(RESOURCE, 3, WAIT).await);

    let mut main = ctr("main", 2);
    main["resources"]["limits"]["example.com/dev-memory"] = json!("3000");
    main["resources"]["limits"]["cpu"] = json!("500m");
    let admitted = kubelet
        .admit(&pod("p1", "node-a", json!([ctr("init", 2)]), json!([main])))
        .await
        .unwrap();
    assert_eq!(admitted.containers[0].name, "init");
    assert!(admitted.containers[0].init);
    let init = &admitted.get("init", RESOURCE).unwrap().devices;
    assert_eq!(admitted.get("main", RESOURCE).unwrap().devices, *init);
    assert_eq!(admitted.containers[1].resources.len(), 1);
    assert!(kubelet.remove_pod("p1"));

    let mut sidecar = ctr("sidecar", 1);
    sidecar["restartPolicy"] = json!("Always");
    let admitted = kubelet
        .admit(&pod(
            "p2",
            "node-a",
            json!([sidecar]),
            json!([ctr("main", 2)]),
        ))
        .await
        .unwrap();
    let side = &admitted.get("sidecar", RESOURCE).unwrap().devices;
    let main = &admitted.get("main", RESOURCE).unwrap().devices;
    assert!(main.iter().all(|d| !side.contains(d)), "{side:?} {main:?}");
    assert_eq!(kubelet.resource(RESOURCE).unwrap().allocated.len(), 3);
}

#[tokio::test]
async fn a_vanished_plugin_turns_unhealthy_then_leaves_the_node() {
    let kubelet = Kubelet::start_with(KubeletOptions {
        stop_grace_period: Duration::from_millis(200),
        ..Default::default()
    })
    .await
    .unwrap();
    let plugin = TestPlugin::new(opts(false, false), &["d0", "d1"]);
    serve_plugin(kubelet.dir(), "p.sock", plugin.clone());
    register(&kubelet, request("p.sock", RESOURCE))
        .await
        .unwrap();
    assert!(kubelet.wait_for_healthy(RESOURCE, 2, WAIT).await);

    plugin.shutdown.cancel();
    assert!(
        kubelet
            .wait_until(WAIT, |k| k.resource(RESOURCE).is_some_and(|r| !r.connected
                && r.healthy.is_empty()
                && r.unhealthy.len() == 2))
            .await
    );
    let cap = kubelet
        .capacity()
        .get(RESOURCE)
        .copied()
        .unwrap_or_default();
    assert_eq!((cap.capacity, cap.allocatable), (2, 0));

    let deadline = tokio::time::Instant::now() + WAIT;
    while kubelet.capacity().contains_key(RESOURCE) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "resource never dropped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(kubelet.resource(RESOURCE).is_none());
}

#[tokio::test]
async fn stop_removes_the_socket_and_disconnects_plugins() {
    let kubelet = kubelet().await;
    let plugin = TestPlugin::new(opts(false, false), &["d0"]);
    serve_plugin(kubelet.dir(), "p.sock", plugin);
    register(&kubelet, request("p.sock", RESOURCE))
        .await
        .unwrap();
    assert!(kubelet.wait_for_healthy(RESOURCE, 1, WAIT).await);
    kubelet.stop().await;
    assert!(!kubelet.is_serving());
    assert!(!kubelet.socket_path().exists());
    assert!(!kubelet.resource(RESOURCE).unwrap().connected);
    assert!(
        register(&kubelet, request("p.sock", RESOURCE))
            .await
            .is_err()
    );
}
