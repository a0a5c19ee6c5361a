//! Which pod is kubelet admitting? Allocate requests carry device IDs only, so the plugin
//! finds the pod the scheduler is handing to this node: the owner of the node lock, else the
//! oldest pod bound here that the scheduler left in bind-phase `allocating`.

use hami_core::annotations::{BIND_PHASE, BIND_TIME, VGPU_NODE};
use hami_core::pod::pod_name;
use hami_k8s::lock::CurrentError;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::config::PluginConfig;

pub const PHASE_ALLOCATING: &str = "allocating";
pub const PHASE_SUCCESS: &str = "success";
pub const PHASE_FAILED: &str = "failed";

/// Why no pod could be looked up.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error(
        "no pod on node {node} is waiting for a GPU allocation (a pod placed by the HAMi scheduler carries {BIND_PHASE}=allocating, {BIND_TIME} and {VGPU_NODE}={node}); pods that bypass the scheduler (spec.nodeName set by hand) cannot get shared GPUs"
    )]
    NonePending { node: String },
    #[error("cannot read pods of node {node} from the API server: {source}")]
    Api { node: String, source: kube::Error },
    #[error("cannot read the lock of node {node}: {detail}")]
    Lock { node: String, detail: String },
}

impl LookupError {
    /// The API server did not answer (as opposed to "there is no such pod").
    pub fn is_transient(&self) -> bool {
        !matches!(self, LookupError::NonePending { .. })
    }
}

/// Names `pod` on the current call's span: kubelet's calls do not say which pod they
/// are for, the pending pod found for them does.
pub(crate) fn trace_pod(pod: &Pod) {
    let meta = &pod.metadata;
    hami_server::trace::record_pod(
        &tracing::Span::current(),
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
        meta.uid.as_deref().unwrap_or_default(),
    );
}

/// Why `pod` is not a pod the scheduler placed on `node` and left for this plugin, or
/// `None` when it is.
pub fn not_pending_reason(pod: &Pod, cfg: &PluginConfig) -> Option<String> {
    let node = cfg.node_name.as_str();
    let ann = pod.metadata.annotations.as_ref();
    let get = |k: &str| ann.and_then(|a| a.get(k)).map(String::as_str);
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    if bound != Some(node) {
        return Some(format!("spec.nodeName is {bound:?}, not {node:?}"));
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Some("the pod is being deleted".into());
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if !matches!(phase, None | Some("Pending")) {
        return Some(format!("pod phase is {phase:?}"));
    }
    match get(VGPU_NODE) {
        Some(n) if n == node => {}
        other => return Some(format!("{VGPU_NODE} is {other:?}, not {node:?}")),
    }
    match get(BIND_PHASE) {
        Some(PHASE_ALLOCATING) => {}
        other => {
            return Some(format!(
                "{BIND_PHASE} is {other:?}, not \"{PHASE_ALLOCATING}\""
            ));
        }
    }
    match get(BIND_TIME) {
        Some(t) if t.trim().parse::<i64>().is_ok() => {}
        other => {
            return Some(format!(
                "{BIND_TIME} is {other:?}, not a Unix time written by the scheduler"
            ));
        }
    }
    if get(&cfg.vendor.to_allocate_annotation).is_none() {
        return Some(format!("{} is missing", cfg.vendor.to_allocate_annotation));
    }
    None
}

/// The pod whose devices kubelet is allocating now.
pub async fn find_pending_pod(
    client: &kube::Client,
    cfg: &PluginConfig,
) -> Result<Pod, LookupError> {
    let node = cfg.node_name.as_str();
    match hami_k8s::lock::current(client, node).await {
        Ok(Some(lock)) => {
            if let Some(owner) = lock.owner {
                let api: Api<Pod> = Api::namespaced(client.clone(), &owner.namespace);
                match api.get_opt(&owner.name).await {
                    Ok(Some(pod)) => match not_pending_reason(&pod, cfg) {
                        None => return Ok(pod),
                        Some(why) => tracing::info!(
                            owner = %format!("{}/{}", owner.namespace, owner.name),
                            reason = %why,
                            "node lock owner is not waiting for allocation here; looking for another pod"
                        ),
                    },
                    Ok(None) => tracing::info!(
                        owner = %format!("{}/{}", owner.namespace, owner.name),
                        "node lock owner no longer exists; looking for another pod"
                    ),
                    Err(source) => {
                        return Err(LookupError::Api {
                            node: node.into(),
                            source,
                        });
                    }
                }
            }
        }
        Ok(None) => {}
        Err(CurrentError::Malformed { error, .. }) => {
            tracing::warn!(node, %error, "node lock value is malformed; looking for the pod by its annotations");
        }
        Err(CurrentError::Lock(e)) => {
            return Err(LookupError::Lock {
                node: node.into(),
                detail: e.to_string(),
            });
        }
    }
    let api: Api<Pod> = Api::all(client.clone());
    let pods = api
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(|source| LookupError::Api {
            node: node.into(),
            source,
        })?;
    // Oldest first, then by name: the same cluster state always picks the same pod.
    pods.items
        .into_iter()
        .filter(|p| not_pending_reason(p, cfg).is_none())
        .min_by(|a, b| {
            let created = |p: &Pod| p.metadata.creation_timestamp.clone().map(|t| t.0);
            created(a)
                .cmp(&created(b))
                .then_with(|| pod_name(a).cmp(&pod_name(b)))
        })
        .ok_or_else(|| LookupError::NonePending { node: node.into() })
}
