//! The pods of this node, by UID: what turns a `<podUID>_<container>` directory into
//! namespace, pod and container labels, tells which directories belong to pods that are
//! gone, and carries the MIG identities for `hami_mig_device_info`.

use hami_core::sync::RwLockExt;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::{StreamExt, TryStreamExt};
use hami_core::annotations::MIG_ALLOCATIONS;
use hami_core::codec::decode_mig_allocations;
use hami_core::codec::mig::MigAllocation;
use hami_server::CancellationToken;
use hami_server::admin::Readiness;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ApiResource};
use kube::core::object::{NotUsed, Object};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::Deserialize;

/// Readiness component of the pod watch.
pub const COMPONENT: &str = "pod watch";

/// What the monitor needs of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    /// Init containers, then app containers (HAMi's container index order).
    pub containers: Vec<String>,
    /// Runtime-ready MIG allocations of `hami.io/vgpu-mig-allocations`.
    pub mig: Vec<MigAllocation>,
}

impl PodInfo {
    pub fn has_container(&self, name: &str) -> bool {
        self.containers.iter().any(|c| c == name)
    }
}

/// The pods on this node, and whether the first full list has arrived (before it, no
/// directory may be judged orphaned).
#[derive(Debug, Default)]
pub struct PodIndex {
    pods: HashMap<String, Arc<PodInfo>>,
    synced: bool,
}

impl PodIndex {
    pub fn get(&self, uid: &str) -> Option<&Arc<PodInfo>> {
        self.pods.get(uid)
    }

    pub fn synced(&self) -> bool {
        self.synced
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Replaces the whole index (a completed list) and marks it synced.
    pub fn replace(&mut self, pods: HashMap<String, Arc<PodInfo>>) {
        self.pods = pods;
        self.synced = true;
    }

    pub fn insert(&mut self, uid: String, pod: PodInfo) {
        self.pods.insert(uid, Arc::new(pod));
    }

    pub fn remove(&mut self, uid: &str) {
        self.pods.remove(uid);
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Arc<PodInfo>)> {
        self.pods.iter()
    }
}

/// Shared between the watch (writer), the scan and the metrics (readers).
pub type SharedPods = Arc<RwLock<PodIndex>>;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimSpec {
    #[serde(default)]
    init_containers: Vec<Named>,
    #[serde(default)]
    containers: Vec<Named>,
}

#[derive(Debug, Clone, Deserialize)]
struct Named {
    name: String,
}

/// A pod parsed down to what the index keeps; every other field is skipped while
/// parsing, so listing a busy node costs little memory.
type SlimPod = Object<SlimSpec, NotUsed>;

fn pod_info(pod: &SlimPod) -> Option<(String, PodInfo)> {
    let m = &pod.metadata;
    let uid = m.uid.clone()?;
    let name = m.name.clone()?;
    let namespace = m.namespace.clone().unwrap_or_default();
    let mig = match m.annotations.as_ref().and_then(|a| a.get(MIG_ALLOCATIONS)) {
        None => Vec::new(),
        Some(value) => match decode_mig_allocations(value) {
            Ok(all) => all
                .into_iter()
                .filter(MigAllocation::runtime_ready)
                .collect(),
            Err(e) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), annotation = MIG_ALLOCATIONS, %value, error = %e, "MIG allocations unreadable; no MIG series for this pod");
                Vec::new()
            }
        },
    };
    let containers = pod
        .spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .map(|c| c.name.clone())
        .collect();
    Some((
        uid,
        PodInfo {
            namespace,
            name,
            containers,
            mig,
        },
    ))
}

/// Why the watch stopped.
#[derive(Debug, thiserror::Error)]
pub enum WatchEnded {
    #[error("the pod watch of node {node} ended")]
    Ended { node: String },
    /// An error no retry fixes (`hami_k8s::watch::is_permanent`).
    #[error("the API server refused the pod watch of node {node}: {error}")]
    Refused { node: String, error: String },
}

/// Keeps `pods` equal to the pods bound to `node` until `stop`. Watch errors are logged
/// and retried with backoff; the stream ending, or an error no retry fixes, is an error
/// (the supervisor restarts it).
pub async fn watch_pods(
    client: Client,
    node: String,
    pods: SharedPods,
    readiness: Readiness,
    stop: CancellationToken,
) -> Result<(), WatchEnded> {
    let api: Api<SlimPod> = Api::all_with(client, &ApiResource::erase::<Pod>(&()));
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut listing: Option<HashMap<String, Arc<PodInfo>>> = None;
    if !pods.read_unpoisoned().synced() {
        readiness.set_component(
            COMPONENT,
            Err(format!("pods of node {node} not listed yet")),
        );
    }
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            n = stream.try_next() => n,
        };
        let event = match next {
            Ok(Some(e)) => e,
            Ok(None) => return Err(WatchEnded::Ended { node }),
            Err(e) if hami_k8s::watch::is_permanent(&e) => {
                return Err(WatchEnded::Refused {
                    node,
                    error: e.to_string(),
                });
            }
            Err(e) => {
                tracing::warn!(%node, error = %e, "pod watch failed; retrying");
                continue;
            }
        };
        let mut index = pods.write_unpoisoned();
        match event {
            Event::Init => listing = Some(HashMap::new()),
            Event::InitApply(pod) => {
                if let (Some(list), Some((uid, info))) = (listing.as_mut(), pod_info(&pod)) {
                    list.insert(uid, Arc::new(info));
                }
            }
            Event::InitDone => {
                let list = listing.take().unwrap_or_default();
                tracing::info!(%node, pods = list.len(), "pods of this node listed");
                index.replace(list);
                readiness.set_component(COMPONENT, Ok(()));
            }
            Event::Apply(pod) => {
                if let Some((uid, info)) = pod_info(&pod) {
                    index.insert(uid, info);
                }
            }
            Event::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    index.remove(uid);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slim_pod_keeps_names_and_ready_mig_allocations() {
        let pod: SlimPod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": {
                "hami.io/vgpu-mig-allocations": "[{\"containerIndex\":1,\"deviceIndex\":0,\"gpuUUID\":\"GPU-a\",\"profile\":\"1g.10gb\",\"placement\":{\"start\":0,\"size\":1},\"migUUID\":\"MIG-x\",\"gpuInstanceID\":3,\"computeInstanceID\":0},{\"containerIndex\":1,\"deviceIndex\":1,\"gpuUUID\":\"GPU-b\",\"profile\":\"1g.10gb\",\"placement\":{\"start\":0,\"size\":1},\"migUUID\":\"\"}]"
            }},
            "spec": {"initContainers": [{"name": "init", "image": "x"}], "containers": [{"name": "main", "image": "y", "env": []}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        let (uid, info) = pod_info(&pod).unwrap();
        assert_eq!(uid, "u1");
        assert_eq!(info.containers, ["init", "main"]);
        assert_eq!(info.mig.len(), 1, "only the runtime-ready allocation");
        assert_eq!(info.mig[0].mig_uuid.as_deref(), Some("MIG-x"));
        assert!(info.has_container("main") && !info.has_container("other"));
    }
}
