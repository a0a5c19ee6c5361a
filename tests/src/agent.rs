//! The node agent: the part of kubelet the kubelet emulator leaves out. It watches
//! the pods bound to its node, runs the emulator's device-manager admission (which
//! calls the device plugin's GetPreferredAllocation and Allocate), and writes what
//! kubelet would write through the pods' status subresource: `Running` with
//! container statuses, or `Failed` with the admission error. It also keeps the
//! node's capacity and allocatable for device plugin resources in step with the
//! emulator, as kubelet's node status loop does, and finishes graceful deletions.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hami_core::pod::is_terminal;
use hami_testkit::kubelet::{AdmitError, Kubelet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// How often the node status is compared again when no change woke the loop (a failed
/// write is retried then).
const NODE_STATUS_RESYNC: Duration = Duration::from_secs(5);

/// Runs until `stop` is cancelled.
pub(crate) async fn run(
    client: Client,
    node: String,
    kubelet: Arc<Kubelet>,
    stop: CancellationToken,
) -> Result<(), String> {
    let status = tokio::spawn(node_status_loop(
        client.clone(),
        node.clone(),
        kubelet.clone(),
        stop.clone(),
    ));
    let mut agent = Agent {
        api: Api::all(client.clone()),
        client,
        node,
        kubelet,
        handled: HashMap::new(),
    };
    agent.pods_loop(&stop).await;
    status.abort();
    Ok(())
}

struct Agent {
    client: Client,
    api: Api<Pod>,
    node: String,
    kubelet: Arc<Kubelet>,
    /// Pods this kubelet admitted or rejected, by UID (name, namespace).
    handled: HashMap<String, (String, String)>,
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl Agent {
    async fn pods_loop(&mut self, stop: &CancellationToken) {
        let cfg = watcher::Config::default().fields(&format!("spec.nodeName={}", self.node));
        let mut events = watcher(self.api.clone(), cfg).default_backoff().boxed();
        // UIDs listed since the last (re)list started; pods missing from a relist are gone.
        let mut listed: Option<HashSet<String>> = None;
        loop {
            let event = tokio::select! {
                () = stop.cancelled() => return,
                e = events.next() => e,
            };
            match event {
                None => return,
                Some(Err(e)) => {
                    tracing::warn!(node = %self.node, error = %e, "node agent: pod watch failed; retrying");
                }
                Some(Ok(watcher::Event::Init)) => listed = Some(HashSet::new()),
                Some(Ok(watcher::Event::InitApply(pod))) => {
                    if let (Some(seen), Some(uid)) = (listed.as_mut(), pod.uid()) {
                        seen.insert(uid);
                    }
                    self.sync(&pod).await;
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    if let Some(seen) = listed.take() {
                        let gone: Vec<String> = self
                            .handled
                            .keys()
                            .filter(|uid| !seen.contains(*uid))
                            .cloned()
                            .collect();
                        for uid in gone {
                            self.forget(&uid);
                        }
                    }
                }
                Some(Ok(watcher::Event::Apply(pod))) => self.sync(&pod).await,
                Some(Ok(watcher::Event::Delete(pod))) => {
                    if let Some(uid) = pod.uid() {
                        self.forget(&uid);
                    }
                }
            }
        }
    }

    /// The pod left the node: its devices are free again.
    fn forget(&mut self, uid: &str) {
        if let Some((ns, name)) = self.handled.remove(uid) {
            tracing::debug!(node = %self.node, pod = %format!("{ns}/{name}"), "pod left the node");
        }
        self.kubelet.remove_pod(uid);
    }

    async fn sync(&mut self, pod: &Pod) {
        let Some(uid) = pod.uid() else { return };
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        if pod.metadata.deletion_timestamp.is_some() {
            // Containers are "killed" at once; kubelet then deletes with grace 0.
            self.forget(&uid);
            self.finish_deletion(&ns, &name, &uid).await;
            return;
        }
        if is_terminal(pod) {
            self.kubelet.remove_pod(&uid);
            self.handled.insert(uid, (ns, name));
            return;
        }
        // Admitted by an earlier agent (restart): the kubelet emulator kept its devices.
        if phase(pod) == "Running" {
            self.handled.insert(uid, (ns, name));
            return;
        }
        if self.handled.contains_key(&uid) {
            return;
        }
        self.handled.insert(uid.clone(), (ns.clone(), name.clone()));
        let status = match self.kubelet.admit(pod).await {
            Ok(_) => {
                tracing::info!(node = %self.node, pod = %format!("{ns}/{name}"), "pod admitted; running");
                running_status(pod)
            }
            Err(AdmitError::Rejected { reason, message }) => {
                tracing::info!(node = %self.node, pod = %format!("{ns}/{name}"), %reason, %message, "pod rejected by admission");
                json!({"status": {"phase": "Failed", "reason": reason, "message": message, "startTime": now()}})
            }
            Err(AdmitError::ContainerStart {
                container,
                reason,
                message,
            }) => {
                tracing::info!(node = %self.node, pod = %format!("{ns}/{name}"), %container, %reason, %message, "container cannot start");
                waiting_status(pod, &container, &reason, &message)
            }
            Err(AdmitError::InvalidPod(why)) => {
                tracing::warn!(node = %self.node, pod = %format!("{ns}/{name}"), %why, "pod cannot be admitted here; left alone");
                return;
            }
        };
        // As kubelet does: the UID makes the patch a precondition, so a pod re-created
        // under the same name meanwhile never gets this pod's status.
        let mut status = status;
        status["metadata"] = json!({"uid": uid});
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let what = format!("writing the status of {ns}/{name}");
        let params = PatchParams::default();
        let patch = Patch::Strategic(&status);
        let written = retry_transient(&what, || api.patch_status(&name, &params, &patch)).await;
        if let Err(e) = written {
            tracing::warn!(node = %self.node, pod = %format!("{ns}/{name}"), error = %e, "cannot write pod status");
        }
    }

    async fn finish_deletion(&self, ns: &str, name: &str, uid: &str) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let what = format!("finishing the deletion of {ns}/{name}");
        match retry_transient(&what, || async {
            match api.delete(name, &params).await {
                // 409: the UID precondition failed only if the pod now is another one;
                // an answer of 409 for this very pod (a lost race) is tried again.
                Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(name).await {
                    Ok(Some(p)) if p.uid().as_deref() == Some(uid) => Err(kube::Error::Api(e)),
                    Ok(_) => Ok(()),
                    Err(get) => Err(get),
                },
                other => other.map(|_| ()),
            }
        })
        .await
        {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(node = %self.node, pod = %format!("{ns}/{name}"), error = %e, "cannot finish pod deletion")
            }
        }
    }
}

/// Runs `call` again while it fails in a way a retry can fix (the API server's 5xx and
/// 429, a conflict, a dropped connection), as kubelet's status manager keeps syncing until
/// a write lands; bounded, so a pod whose successor took its name is given up on.
async fn retry_transient<T, F, Fut>(what: &str, mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    const ATTEMPTS: u32 = 8;
    let mut delay = Duration::from_millis(20);
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt < ATTEMPTS && transient(&e) => {
                tracing::debug!(%what, attempt, error = %e, "node agent: retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500 || s.code == 409 || s.code == 429,
        _ => true,
    }
}

fn containers(pod: &Pod) -> Vec<(String, String)> {
    pod.spec
        .as_ref()
        .map(|s| {
            s.containers
                .iter()
                .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

/// Kubelet's status of a pod whose containers all started.
fn running_status(pod: &Pod) -> Value {
    let at = now();
    let uid = pod.uid().unwrap_or_default();
    let statuses: Vec<Value> = containers(pod)
        .into_iter()
        .enumerate()
        .map(|(i, (name, image))| {
            json!({
                "name": name, "image": image, "imageID": "",
                "containerID": format!("containerd://{}{i:02}", uid.replace('-', "")),
                "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": at}},
            })
        })
        .collect();
    let cond = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": at});
    json!({"status": {
        "phase": "Running",
        "startTime": at,
        "hostIP": "10.0.0.1",
        "podIP": "10.244.0.1",
        "conditions": [cond("Initialized"), cond("ContainersReady"), cond("Ready")],
        "containerStatuses": statuses,
    }})
}

/// Kubelet's status of a pod admitted but with a container that cannot start.
fn waiting_status(pod: &Pod, failed: &str, reason: &str, message: &str) -> Value {
    let statuses: Vec<Value> = containers(pod)
        .into_iter()
        .map(|(name, image)| {
            let waiting = if name == failed {
                json!({"reason": reason, "message": message})
            } else {
                json!({"reason": "PodInitializing"})
            };
            json!({"name": name, "image": image, "imageID": "", "ready": false, "started": false,
                   "restartCount": 0, "state": {"waiting": waiting}})
        })
        .collect();
    json!({"status": {"phase": "Pending", "startTime": now(), "containerStatuses": statuses}})
}

/// Device plugin resources as kubelet reports them: capacity counts every device,
/// allocatable only the healthy ones.
fn device_counts(kubelet: &Kubelet) -> BTreeMap<String, (usize, usize)> {
    kubelet
        .resources()
        .into_iter()
        .filter_map(|r| {
            let s = kubelet.resource(&r)?;
            Some((r, (s.healthy.len() + s.unhealthy.len(), s.healthy.len())))
        })
        .collect()
}

async fn node_status_loop(
    client: Client,
    node: String,
    kubelet: Arc<Kubelet>,
    stop: CancellationToken,
) {
    let api: Api<Node> = Api::all(client);
    let mut written = None;
    loop {
        let counts = device_counts(&kubelet);
        if written.as_ref() == Some(&counts) {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = kubelet.wait_until(NODE_STATUS_RESYNC, |k| device_counts(k) != counts) => {}
            }
            continue;
        }
        let capacity: serde_json::Map<String, Value> = counts
            .iter()
            .map(|(r, (c, _))| (r.clone(), Value::from(c.to_string())))
            .collect();
        let allocatable: serde_json::Map<String, Value> = counts
            .iter()
            .map(|(r, (_, a))| (r.clone(), Value::from(a.to_string())))
            .collect();
        let patch = json!({"status": {"capacity": capacity, "allocatable": allocatable}});
        match api
            .patch_status(&node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::debug!(%node, ?counts, "node status: device plugin resources");
                written = Some(counts);
            }
            Err(e) => {
                tracing::warn!(%node, error = %e, "node agent: cannot write node status; retrying");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(200)) => {}
                }
            }
        }
    }
}
