//! Pod admission by the device manager: per container (init containers first) and resource,
//! choose devices, ask the plugin to allocate them, then call PreStartContainer where the
//! plugin asks for it. Mirrors `ManagerImpl.Allocate` / `devicesToAllocate`.

use std::collections::{BTreeMap, BTreeSet};

use hami_core::pod::is_sidecar;
use hami_kubelet_api::v1beta1::{
    AllocateRequest, ContainerAllocateRequest, ContainerPreferredAllocationRequest,
    PreStartContainerRequest, PreferredAllocationRequest,
};
use k8s_openapi::api::core::v1::{Container, Pod};

use super::Kubelet;
use super::go_error::{go_quote, go_status};
use super::state::{ContainerResources, PluginCall, ResourceAllocation};

/// Pod status reason kubelet sets when the device manager fails admission.
pub const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";
/// Container waiting reason when PreStartContainer fails.
pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";

/// What an admitted pod got.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    pub pod_uid: String,
    /// In admission order: init containers, then app containers.
    pub containers: Vec<AdmittedContainer>,
}

impl Admission {
    /// The allocation of `resource` for container `name`.
    pub fn get(&self, name: &str, resource: &str) -> Option<&ResourceAllocation> {
        self.containers
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.resources.get(resource))
    }
}

/// One container's devices, by resource (empty when it asked for no plugin resource).
#[derive(Debug, Clone, PartialEq)]
pub struct AdmittedContainer {
    pub name: String,
    pub init: bool,
    pub resources: ContainerResources,
}

/// Why a pod did not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    /// Kubelet rejected the pod: it would be `Failed` with this status reason and message
    /// (e.g. `UnexpectedAdmissionError`, `Allocate failed due to ..., which is unexpected`).
    #[error("{reason}: {message}")]
    Rejected { reason: String, message: String },
    /// Admitted, but a container could not be started (PreStartContainer failed).
    #[error("container {container}: {reason}: {message}")]
    ContainerStart {
        container: String,
        reason: String,
        message: String,
    },
    /// The pod can never reach this kubelet (no UID, bound to another node, a device
    /// quantity that is not a whole number): a mistake in the test, not a kubelet decision.
    #[error("pod cannot be admitted by this kubelet: {0}")]
    InvalidPod(String),
}

impl AdmitError {
    /// The pod status / container message kubelet would show.
    pub fn message(&self) -> &str {
        match self {
            AdmitError::Rejected { message, .. } | AdmitError::ContainerStart { message, .. } => {
                message
            }
            AdmitError::InvalidPod(m) => m,
        }
    }
}

struct ContainerView {
    name: String,
    init: bool,
    /// `restartPolicy: Always` init container (sidecar): keeps its devices.
    restartable: bool,
    /// Resource limits with whole-number values, sorted by name.
    limits: BTreeMap<String, u64>,
}

struct PodView {
    uid: String,
    containers: Vec<ContainerView>,
}

impl PodView {
    fn parse(pod: &Pod, node: Option<&str>) -> Result<Self, AdmitError> {
        let invalid = AdmitError::InvalidPod;
        let uid = pod
            .metadata
            .uid
            .clone()
            .filter(|u| !u.is_empty())
            .ok_or_else(|| invalid("metadata.uid is missing".into()))?;
        let spec = pod
            .spec
            .as_ref()
            .ok_or_else(|| invalid("spec is missing".into()))?;
        if let Some(node) = node {
            let bound = spec.node_name.as_deref().unwrap_or_default();
            if bound != node {
                return Err(invalid(format!(
                    "pod is bound to node {bound:?}, this kubelet is {node:?}"
                )));
            }
        }
        let init = spec.init_containers.iter().flatten().map(|c| (c, true));
        let app = spec.containers.iter().map(|c| (c, false));
        let containers = init
            .chain(app)
            .map(|(c, is_init)| container_view(c, is_init))
            .collect::<Result<_, _>>()?;
        Ok(PodView { uid, containers })
    }
}

fn container_view(c: &Container, init: bool) -> Result<ContainerView, AdmitError> {
    let mut limits = BTreeMap::new();
    let all = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    for (name, quantity) in all.into_iter().flatten() {
        // Only extended resources can be device plugin resources; CPU/memory quantities
        // (`500m`, `1Gi`) are none of the device manager's business.
        if !name.contains('/') {
            continue;
        }
        let value: u64 = quantity.0.trim().parse().map_err(|_| {
            AdmitError::InvalidPod(format!(
                "container {:?}: limit {name}={:?} is not a whole number",
                c.name, quantity.0
            ))
        })?;
        limits.insert(name.clone(), value);
    }
    Ok(ContainerView {
        name: c.name.clone(),
        init,
        restartable: init && is_sidecar(c),
        limits,
    })
}

impl Kubelet {
    /// Admits `pod` as kubelet does when it is bound to this node. On success the devices stay
    /// allocated until [`Kubelet::remove_pod`]; on failure the pod holds nothing.
    pub async fn admit(&self, pod: &Pod) -> Result<Admission, AdmitError> {
        let view = PodView::parse(pod, self.inner.opts.node_name.as_deref())?;
        // Kubelet admits pods one at a time.
        let _serial = self.inner.admit_lock.lock().await;
        let mut reusable: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for c in &view.containers {
            if let Err(e) = self.allocate_container(&view.uid, c, &reusable).await {
                // A rejected pod is no longer active, so kubelet frees what it took.
                self.inner.update(|s| s.pods.remove(&view.uid));
                tracing::info!(pod = %view.uid, container = %c.name, error = %e, "kubelet: admission failed");
                return Err(AdmitError::Rejected {
                    reason: UNEXPECTED_ADMISSION_ERROR.into(),
                    message: format!("Allocate failed due to {e}, which is unexpected"),
                });
            }
            // Devices of a finished init container can be reused by the next containers;
            // sidecars and app containers keep theirs.
            for (resource, a) in self
                .container_allocation(&view.uid, &c.name)
                .unwrap_or_default()
            {
                let set = reusable.entry(resource).or_default();
                if c.init && !c.restartable {
                    set.extend(a.devices);
                } else {
                    for d in &a.devices {
                        set.remove(d);
                    }
                }
            }
        }
        for c in &view.containers {
            self.pre_start(&view.uid, c).await?;
        }
        let containers = view
            .containers
            .iter()
            .map(|c| AdmittedContainer {
                name: c.name.clone(),
                init: c.init,
                resources: self
                    .container_allocation(&view.uid, &c.name)
                    .unwrap_or_default(),
            })
            .collect();
        Ok(Admission {
            pod_uid: view.uid,
            containers,
        })
    }

    async fn allocate_container(
        &self,
        uid: &str,
        c: &ContainerView,
        reusable: &BTreeMap<String, BTreeSet<String>>,
    ) -> Result<(), String> {
        for (resource, &required) in &c.limits {
            if !self.inner.with(|s| s.is_device_plugin_resource(resource)) {
                continue;
            }
            let devices = self
                .devices_to_allocate(uid, &c.name, resource, required, reusable.get(resource))
                .await?;
            if devices.is_empty() {
                continue;
            }
            let devices: Vec<String> = devices.into_iter().collect();
            let endpoint = self
                .inner
                .with(|s| s.endpoints.get(resource).cloned())
                .ok_or_else(|| format!("unknown Device Plugin {resource}"))?;
            let result = match endpoint.client.filter(|_| endpoint.stopped_at.is_none()) {
                None => Err(endpoint_stopped(resource)),
                Some(mut client) => client
                    .allocate(AllocateRequest {
                        container_requests: vec![ContainerAllocateRequest {
                            devices_ids: devices.clone(),
                        }],
                    })
                    .await
                    .map(|r| r.into_inner())
                    .map_err(|e| go_status(&e)),
            };
            self.inner.update(|s| {
                s.calls.push(PluginCall::Allocate {
                    resource: resource.clone(),
                    pod_uid: uid.to_owned(),
                    container: c.name.clone(),
                    devices: devices.clone(),
                    result: result
                        .as_ref()
                        .map(|r| r.container_responses.first().cloned().unwrap_or_default())
                        .map_err(Clone::clone),
                })
            });
            let response = result?;
            let Some(first) = response.container_responses.into_iter().next() else {
                return Err(
                    "no containers return in allocation response &AllocateResponse{ContainerResponses:[]*ContainerAllocateResponse{},}"
                        .into(),
                );
            };
            self.inner.update(|s| {
                s.pods
                    .entry(uid.to_owned())
                    .or_default()
                    .entry(c.name.clone())
                    .or_default()
                    .insert(
                        resource.clone(),
                        ResourceAllocation {
                            devices,
                            response: first,
                        },
                    )
            });
        }
        Ok(())
    }

    /// `devicesToAllocate` without a topology manager (no NUMA hint, so no device is
    /// "aligned" and the plugin's preference comes first).
    async fn devices_to_allocate(
        &self,
        uid: &str,
        container: &str,
        resource: &str,
        required: u64,
        reusable: Option<&BTreeSet<String>>,
    ) -> Result<BTreeSet<String>, String> {
        let (mut needed, available) = self.inner.with(|s| {
            let before: Option<BTreeSet<String>> = s
                .pods
                .get(uid)
                .and_then(|p| p.get(container))
                .and_then(|r| r.get(resource))
                .map(|a| a.devices.iter().cloned().collect());
            let mut needed = required;
            if let Some(before) = &before {
                let had = before.len() as u64;
                if had != required {
                    return Err(format!(
                        "pod {} container {} changed request for resource {} from {had} to {required}",
                        go_quote(uid),
                        go_quote(container),
                        go_quote(resource)
                    ));
                }
                needed = 0;
            }
            let Some(healthy) = s.healthy.get(resource) else {
                return Err(format!("cannot allocate unregistered device {resource}"));
            };
            if healthy.is_empty() {
                return Err(format!(
                    "no healthy devices present; cannot allocate unhealthy devices {resource}"
                ));
            }
            if before.as_ref().is_some_and(|b| !b.is_subset(healthy)) {
                return Err(format!(
                    "previously allocated devices are no longer healthy; cannot allocate unhealthy devices {resource}"
                ));
            }
            let in_use = s.allocated(resource);
            let available: BTreeSet<String> = healthy.difference(&in_use).cloned().collect();
            Ok((needed, available))
        })?;
        let mut allocated = BTreeSet::new();
        if needed == 0 {
            return Ok(allocated);
        }
        if let Some(reuse) = reusable
            && take_from(reuse, &mut allocated, &mut needed)
        {
            return Ok(allocated);
        }
        let remaining = needed;
        if (available.len() as u64) < remaining {
            return Err(format!(
                "requested number of devices unavailable for {resource}. Requested: {remaining}, Available: {}",
                available.len()
            ));
        }
        let offer: BTreeSet<String> = available.union(&allocated).cloned().collect();
        let preferred = self
            .preferred_allocation(resource, &offer, &allocated, required)
            .await?;
        let preferred: BTreeSet<String> = preferred.intersection(&available).cloned().collect();
        if take_from(&preferred, &mut allocated, &mut needed)
            || take_from(&available, &mut allocated, &mut needed)
        {
            return Ok(allocated);
        }
        Err(format!(
            "unexpectedly allocated less resources than required. Requested: {required}, Got: {}",
            required - needed
        ))
    }

    /// `callGetPreferredAllocationIfAvailable`: only when the plugin's options say so.
    async fn preferred_allocation(
        &self,
        resource: &str,
        available: &BTreeSet<String>,
        must_include: &BTreeSet<String>,
        size: u64,
    ) -> Result<BTreeSet<String>, String> {
        let endpoint = self
            .inner
            .with(|s| s.endpoints.get(resource).cloned())
            .ok_or_else(|| {
                format!("endpoint not found in cache for a registered resource: {resource}")
            })?;
        let wanted = endpoint
            .options
            .as_ref()
            .is_some_and(|o| o.get_preferred_allocation_available);
        if !wanted {
            return Ok(BTreeSet::new());
        }
        let available: Vec<String> = available.iter().cloned().collect();
        let must_include: Vec<String> = must_include.iter().cloned().collect();
        let size = i32::try_from(size).unwrap_or(i32::MAX);
        let result = match endpoint.client.filter(|_| endpoint.stopped_at.is_none()) {
            None => Err(endpoint_stopped(resource)),
            Some(mut client) => client
                .get_preferred_allocation(PreferredAllocationRequest {
                    container_requests: vec![ContainerPreferredAllocationRequest {
                        available_device_i_ds: available.clone(),
                        must_include_device_i_ds: must_include.clone(),
                        allocation_size: size,
                    }],
                })
                .await
                .map(|r| {
                    r.into_inner()
                        .container_responses
                        .into_iter()
                        .next()
                        .map(|c| c.device_i_ds)
                        .unwrap_or_default()
                })
                .map_err(|e| go_status(&e)),
        };
        self.inner.update(|s| {
            s.calls.push(PluginCall::GetPreferredAllocation {
                resource: resource.to_owned(),
                available,
                must_include,
                size,
                result: result.clone(),
            })
        });
        result
            .map(|ids| ids.into_iter().collect())
            .map_err(|e| format!("device plugin GetPreferredAllocation rpc failed with err: {e}"))
    }

    /// `callPreStartContainerIfNeeded` for every plugin resource of the container.
    async fn pre_start(&self, uid: &str, c: &ContainerView) -> Result<(), AdmitError> {
        let failed = |message: String| AdmitError::ContainerStart {
            container: c.name.clone(),
            reason: CREATE_CONTAINER_CONFIG_ERROR.into(),
            message,
        };
        for (resource, &value) in &c.limits {
            if value == 0 || !self.inner.with(|s| s.is_device_plugin_resource(resource)) {
                continue;
            }
            let Some(endpoint) = self.inner.with(|s| s.endpoints.get(resource).cloned()) else {
                return Err(failed(format!(
                    "endpoint not found in cache for a registered resource: {resource}"
                )));
            };
            if !endpoint
                .options
                .as_ref()
                .is_some_and(|o| o.pre_start_required)
            {
                continue;
            }
            let Some(devices) = self
                .container_allocation(uid, &c.name)
                .and_then(|r| r.get(resource).map(|a| a.devices.clone()))
            else {
                return Err(failed(format!(
                    "no devices found allocated in local cache for pod {uid}, container {}, resource {resource}",
                    c.name
                )));
            };
            let result = match endpoint.client.filter(|_| endpoint.stopped_at.is_none()) {
                None => Err(endpoint_stopped(resource)),
                Some(mut client) => client
                    .pre_start_container(PreStartContainerRequest {
                        devices_ids: devices.clone(),
                    })
                    .await
                    .map(|_| ())
                    .map_err(|e| go_status(&e)),
            };
            self.inner.update(|s| {
                s.calls.push(PluginCall::PreStartContainer {
                    resource: resource.clone(),
                    container: c.name.clone(),
                    devices,
                    result: result.clone(),
                })
            });
            result.map_err(|e| {
                failed(format!(
                    "device plugin PreStartContainer rpc failed with err: {e}"
                ))
            })?;
        }
        Ok(())
    }
}

/// `allocateRemainingFrom`: adds devices of `from` until none is needed any more.
fn take_from(from: &BTreeSet<String>, allocated: &mut BTreeSet<String>, needed: &mut u64) -> bool {
    for d in from {
        if *needed == 0 {
            break;
        }
        if allocated.insert(d.clone()) {
            *needed -= 1;
        }
    }
    *needed == 0
}

fn endpoint_stopped(resource: &str) -> String {
    format!("endpoint {resource} has been stopped")
}
