//! HAMi's Allocate protocol (`docs/protocol.md#allocate`): turn the scheduler's decision,
//! written in the pod's annotations, into the containers' environment and mounts, then
//! record that the pod got its devices (bind phase, node lock).

use hami_core::annotations::BIND_PHASE;
use hami_core::codec::{decode_pod_single_device, encode_pod_single_device};
use hami_core::model::{ContainerDevices, PodSingleDevice};
use hami_k8s::patch::{MetadataPatch, PodRef, is_replaced, patch_pod};
use hami_kubelet_api::v1beta1::{AllocateRequest, AllocateResponse};
use k8s_openapi::api::core::v1::{Container, Pod};
use std::time::Duration;

use crate::backoff::{Backoff, retry};
use crate::hook::{ContainerContext, HookError};
use crate::pending::{LookupError, PHASE_FAILED, PHASE_SUCCESS, find_pending_pod, trace_pod};
use crate::shared::Shared;
use hami_core::pod::pod_name;

/// Why an Allocate call failed; the text reaches the user through kubelet's
/// `UnexpectedAdmissionError`.
#[derive(Debug, thiserror::Error)]
pub enum AllocateError {
    #[error(transparent)]
    Lookup(#[from] LookupError),
    #[error(
        "pod {pod}: annotation {key} is malformed ({error}); the scheduler's GPU assignment cannot be read"
    )]
    Malformed {
        pod: String,
        key: String,
        error: String,
    },
    #[error(
        "pod {pod}: no GPUs left to allocate in {key} for the container kubelet is starting (it asked for {asked})"
    )]
    NothingLeft {
        pod: String,
        key: String,
        asked: usize,
    },
    #[error(
        "pod {pod}: device number not matched: container {container} asks kubelet for {asked} {resource}, the scheduler assigned {assigned} GPUs"
    )]
    CountMismatch {
        pod: String,
        container: String,
        resource: String,
        asked: usize,
        assigned: usize,
    },
    #[error(
        "pod {pod}: {key} has an entry for container #{index} but the pod has only {containers} containers"
    )]
    NoSuchContainer {
        pod: String,
        key: String,
        index: usize,
        containers: usize,
    },
    #[error(
        "pod {pod}: device {uuid} assigned to container {container} has type {found:?}, expected {expected:?}"
    )]
    WrongType {
        pod: String,
        container: String,
        uuid: String,
        found: String,
        expected: String,
    },
    #[error("pod {pod}: GPU {uuid} assigned to container {container} is not a GPU of node {node}")]
    UnknownDevice {
        pod: String,
        container: String,
        uuid: String,
        node: String,
    },
    #[error("pod {pod}: GPU {uuid} assigned to container {container} is unhealthy")]
    Unhealthy {
        pod: String,
        container: String,
        uuid: String,
    },
    #[error("pod {pod}, container {container}: {source}")]
    Response {
        pod: String,
        container: String,
        source: HookError,
    },
    #[error("pod {pod}: cannot record the allocation in the API server: {source}")]
    Record { pod: String, source: kube::Error },
}

impl AllocateError {
    pub fn to_status(&self) -> tonic::Status {
        let msg = self.to_string();
        match self {
            AllocateError::Lookup(e) if e.is_transient() => tonic::Status::unavailable(msg),
            AllocateError::Record { .. } => tonic::Status::unavailable(msg),
            AllocateError::Response {
                source: HookError::Refused(_),
                ..
            } => tonic::Status::failed_precondition(msg),
            AllocateError::Response { .. } => tonic::Status::internal(msg),
            _ => tonic::Status::failed_precondition(msg),
        }
    }
}

/// Answers one Allocate call. On any failure after the pod is known, the pod is marked
/// `bind-phase=failed` and the node lock released, so the scheduler and the next pod are
/// not held up.
pub(crate) async fn allocate(
    shared: &Shared,
    request: AllocateRequest,
) -> Result<AllocateResponse, AllocateError> {
    let _one_at_a_time = shared.allocate_lock.lock().await;
    let pod = find_pending_pod(&shared.kube, &shared.cfg).await?;
    trace_pod(&pod);
    let key = pod_name(&pod);
    match allocate_for(shared, &pod, request).await {
        Ok(response) => {
            shared.metrics.allocation(true);
            Ok(response)
        }
        Err(e) => {
            shared.metrics.allocation(false);
            tracing::warn!(pod = %key, node = %shared.cfg.node_name, error = %e, "allocation failed");
            give_up(shared, &pod, &e).await;
            Err(e)
        }
    }
}

async fn allocate_for(
    shared: &Shared,
    pod: &Pod,
    request: AllocateRequest,
) -> Result<AllocateResponse, AllocateError> {
    let cfg = &shared.cfg;
    let key = pod_name(pod);
    let ann_key = cfg.vendor.to_allocate_annotation.as_str();
    let value = annotation(pod, ann_key).unwrap_or_default();
    let mut entries: PodSingleDevice =
        decode_pod_single_device(value).map_err(|e| AllocateError::Malformed {
            pod: key.clone(),
            key: ann_key.into(),
            error: e.to_string(),
        })?;
    let containers = containers_in_annotation_order(pod);
    let inventory = shared.inventory();
    let mut vendor = shared
        .hook
        .begin(&shared.kube, cfg, pod)
        .await
        .map_err(|source| AllocateError::Response {
            pod: key.clone(),
            container: "(all)".into(),
            source,
        })?;

    let mut response = AllocateResponse::default();
    for creq in &request.container_requests {
        let asked = creq.devices_ids.len();
        let index = entries.iter().position(|e| !e.is_empty()).ok_or_else(|| {
            AllocateError::NothingLeft {
                pod: key.clone(),
                key: ann_key.into(),
                asked,
            }
        })?;
        let container = containers
            .get(index)
            .ok_or_else(|| AllocateError::NoSuchContainer {
                pod: key.clone(),
                key: ann_key.into(),
                index,
                containers: containers.len(),
            })?;
        let devices: ContainerDevices = std::mem::take(&mut entries[index]);
        if devices.len() != asked {
            return Err(AllocateError::CountMismatch {
                pod: key.clone(),
                container: container.name.clone(),
                resource: cfg.resource_name.clone(),
                asked,
                assigned: devices.len(),
            });
        }
        for d in &devices {
            let known = inventory.get(&d.uuid);
            let type_ok = match known {
                Some(p) => shared.hook.type_matches(cfg, &d.dev_type, p),
                None => d.dev_type == cfg.vendor.device_type,
            };
            if !type_ok {
                return Err(AllocateError::WrongType {
                    pod: key.clone(),
                    container: container.name.clone(),
                    uuid: d.uuid.clone(),
                    found: d.dev_type.clone(),
                    expected: cfg.vendor.device_type.clone(),
                });
            }
            match known {
                None => {
                    return Err(AllocateError::UnknownDevice {
                        pod: key.clone(),
                        container: container.name.clone(),
                        uuid: d.uuid.clone(),
                        node: cfg.node_name.clone(),
                    });
                }
                Some(p) if !p.healthy => {
                    return Err(AllocateError::Unhealthy {
                        pod: key.clone(),
                        container: container.name.clone(),
                        uuid: d.uuid.clone(),
                    });
                }
                Some(_) => {}
            }
        }
        // The scheduler's choice is the ledger; kubelet's replica IDs only fix the count.
        let kubelet_gpus: Vec<&str> = creq
            .devices_ids
            .iter()
            .filter_map(|id| {
                inventory
                    .device_of_replica(id, cfg)
                    .map(|d| d.uuid.as_str())
            })
            .collect();
        tracing::debug!(pod = %key, container = %container.name, ?kubelet_gpus, "kubelet's replica choice (informational)");
        let ctx = ContainerContext {
            cfg,
            pod,
            container,
            devices: &devices,
            inventory: &inventory,
        };
        let r = vendor
            .container(&ctx)
            .map_err(|source| AllocateError::Response {
                pod: key.clone(),
                container: container.name.clone(),
                source,
            })?;
        tracing::info!(
            pod = %key,
            node = %cfg.node_name,
            container = %container.name,
            gpus = %devices.iter().map(|d| format!("{}({}MiB,{}%)", d.uuid, d.mem_mib, d.cores)).collect::<Vec<_>>().join(","),
            "allocated"
        );
        response.container_responses.push(r);
    }

    let remaining = encode_pod_single_device(&trim_trailing(&entries, value));
    let mut patch = MetadataPatch::new().annotate(ann_key, remaining);
    for (k, v) in vendor.annotations() {
        patch = patch.annotate(&k, v);
    }
    let done = entries.iter().all(Vec::is_empty) && !other_vendors_pending(pod, ann_key);
    if done {
        patch = patch.annotate(BIND_PHASE, PHASE_SUCCESS);
    }
    write(shared, pod, &patch).await?;
    if done {
        release_lock(shared, pod).await;
        tracing::info!(pod = %key, node = %cfg.node_name, "pod fully allocated: bind-phase success, node lock released");
    }
    Ok(response)
}

/// `decode` yields one more (empty) container than `encode` wrote, because the encoded
/// value ends with `;`. Dropping that extra entry keeps the rewritten value the same shape
/// as the scheduler's (`a,NVIDIA,1,2:;` becomes `;`, as HAMi writes it).
fn trim_trailing(entries: &PodSingleDevice, original: &str) -> PodSingleDevice {
    let mut out = entries.clone();
    if original.ends_with(';') && out.last().is_some_and(Vec::is_empty) {
        out.pop();
    }
    out
}

/// Whether another vendor's `*-devices-to-allocate` annotation still holds devices (a pod
/// using several vendors is done only when every plugin has allocated).
fn other_vendors_pending(pod: &Pod, ours: &str) -> bool {
    let Some(ann) = pod.metadata.annotations.as_ref() else {
        return false;
    };
    ann.iter()
        .filter(|(k, _)| k.as_str() != ours && k.starts_with("hami.io/") && k.ends_with("-devices-to-allocate"))
        .any(|(k, v)| match decode_pod_single_device(v) {
            Ok(entries) => entries.iter().any(|e| !e.is_empty()),
            Err(e) => {
                tracing::warn!(annotation = %k, error = %e, "cannot read another vendor's allocation; treating it as done");
                false
            }
        })
}

/// Init containers first, then app containers: the order of annotation entries.
fn containers_in_annotation_order(pod: &Pod) -> Vec<&Container> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .collect()
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Retries transient API errors a few times: failing here fails the pod. Guarded by the
/// pod's UID: a pod deleted and re-created under the same name since it was read is
/// another pod, and is left alone.
async fn write(shared: &Shared, pod: &Pod, patch: &MetadataPatch) -> Result<(), AllocateError> {
    let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
    retry(4, backoff, is_transient, || {
        patch_pod(&shared.kube, PodRef::of(pod), patch)
    })
    .await
    .map(|_| ())
    .map_err(|source| AllocateError::Record {
        pod: pod_name(pod),
        source,
    })
}

/// Server errors, throttling and write conflicts. The patch names no resourceVersion, so
/// a 409 is the API server's own conflict with a concurrent write, which the same patch
/// gets past on a retry; a pod replaced under the same name answers 422 for the UID
/// (`docs/protocol.md#uid-preconditions`) and is not retried. Not retried, a conflict
/// failed the pod's admission: about one pod in twenty in the chaos run at 5% of writes
/// failing (`docs/architecture.md#chaos-run`).
fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500 || s.code == 429 || s.code == 409,
        _ => true,
    }
}

async fn release_lock(shared: &Shared, pod: &Pod) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    match hami_k8s::lock::release(&shared.kube, &shared.cfg.node_name, ns, name).await {
        Ok(r) => tracing::debug!(pod = %pod_name(pod), result = ?r, "node lock release"),
        Err(e) => {
            tracing::warn!(pod = %pod_name(pod), error = %e, "cannot release the node lock; it expires on its own")
        }
    }
}

/// The failure path: `bind-phase=failed`, lock released, a Warning event for the user.
/// A pod re-created under the same name meanwhile is another pod: it is not marked, and
/// the lock (which names pods by name only) may be its own, so it is left to the
/// scheduler's takeover rules.
async fn give_up(shared: &Shared, pod: &Pod, error: &AllocateError) {
    let patch = MetadataPatch::new().annotate(BIND_PHASE, PHASE_FAILED);
    let replaced = match write(shared, pod, &patch).await {
        Ok(()) => false,
        Err(AllocateError::Record { source, .. }) if is_replaced(&source) => {
            tracing::info!(pod = %pod_name(pod), error = %source, "the pod was re-created under its name; the new one and the node lock are left alone");
            true
        }
        Err(e) => {
            tracing::warn!(pod = %pod_name(pod), error = %e, "cannot mark the pod failed");
            false
        }
    };
    if !replaced {
        release_lock(shared, pod).await;
    }
    if let Some(events) = &shared.events {
        let subject = hami_k8s::events::Subject::pod(
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.uid.as_deref(),
        );
        events.record(
            subject,
            hami_k8s::events::EventType::Warning,
            "GPUAllocationFailed",
            error.to_string(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hami_core::model::ContainerDevice;

    fn dev(uuid: &str) -> ContainerDevice {
        ContainerDevice {
            idx: 0,
            uuid: uuid.into(),
            dev_type: "NVIDIA".into(),
            mem_mib: 1,
            cores: 2,
            slots: 0,
        }
    }

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("injected", reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_conflict_on_the_allocation_write_is_retried_and_a_replaced_pod_is_not() {
        assert!(is_transient(&api_error(409, "Conflict")));
        assert!(is_transient(&api_error(500, "InternalError")));
        assert!(is_transient(&api_error(429, "TooManyRequests")));
        assert!(!is_transient(&api_error(422, "Invalid")));
        assert!(!is_transient(&api_error(404, "NotFound")));
    }

    #[test]
    fn rewrite_keeps_hamis_shape() {
        let original = "GPU-a,NVIDIA,3000,50:;";
        let mut entries = decode_pod_single_device(original).unwrap();
        assert_eq!(entries.len(), 2);
        entries[0].clear();
        assert_eq!(
            encode_pod_single_device(&trim_trailing(&entries, original)),
            ";"
        );
        let original = ";GPU-a,NVIDIA,1,2:;";
        let mut entries = decode_pod_single_device(original).unwrap();
        entries[1].clear();
        assert_eq!(
            encode_pod_single_device(&trim_trailing(&entries, original)),
            ";;"
        );
        let entries = vec![vec![dev("GPU-b")]];
        assert_eq!(
            encode_pod_single_device(&trim_trailing(&entries, "GPU-b,NVIDIA,1,2:")),
            "GPU-b,NVIDIA,1,2:;"
        );
    }
}
