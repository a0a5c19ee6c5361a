//! What a vendor plugs into the framework (`docs/device-plugin.md#vendor-hooks`): the
//! node inventory it registers and the per-container answer of Allocate. The framework
//! keeps everything around them: finding the pod, consuming `*-devices-to-allocate`
//! container by container, the count/type/health checks, the bind phase and the lock
//! release after the pod's last container, and the error paths.

use futures::future::BoxFuture;
use hami_core::codec::encode_node_register_json;
use hami_core::model::{ContainerDevice, DeviceInfo};
use hami_kubelet_api::v1beta1::{ContainerAllocateResponse, DeviceSpec, Mount};
use k8s_openapi::api::core::v1::{Container, Pod};

use crate::backend::PhysicalDevice;
use crate::config::PluginConfig;
use crate::inventory::Inventory;
use crate::libvgpu::{self, ContainerGrant, ResponseError, control_disabled};

/// Why a vendor could not answer for a container.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The HAMi-core (`libvgpu.so`) answer failed.
    #[error(transparent)]
    HamiCore(#[from] ResponseError),
    /// The grant conflicts with the node's state (e.g. compute units already taken): the
    /// pod is refused, nothing was handed out.
    #[error("{0}")]
    Refused(String),
    /// The vendor's own state could not be read or prepared (host files, API server).
    #[error("{0}")]
    Internal(String),
}

/// One container the framework has checked against the inventory.
#[derive(Debug, Clone, Copy)]
pub struct ContainerContext<'a> {
    pub cfg: &'a PluginConfig,
    pub pod: &'a Pod,
    pub container: &'a Container,
    /// The devices the scheduler assigned to this container, in annotation order; each
    /// one is a healthy device of the inventory.
    pub devices: &'a [ContainerDevice],
    pub inventory: &'a Inventory,
}

impl ContainerContext<'_> {
    pub fn pod_uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }
}

/// The vendor's state for one Allocate call (one pod), answering container by container.
pub trait PodAllocation: Send {
    /// The container's environment, mounts and device nodes.
    fn container(
        &mut self,
        ctx: &ContainerContext<'_>,
    ) -> Result<ContainerAllocateResponse, HookError>;

    /// Pod annotations to write together with the rewritten to-allocate annotation
    /// (e.g. AMD's compute-unit record), after every container of the call answered.
    fn annotations(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// A vendor's part of the device plugin.
pub trait VendorHook: Send + Sync + 'static {
    /// The register annotation's entries for the inventory.
    fn register_info(&self, inventory: &Inventory, cfg: &PluginConfig) -> Vec<DeviceInfo> {
        inventory.register_info(cfg)
    }

    /// The register annotation's value (HAMi's JSON form unless the vendor's scheduler
    /// side reads the legacy form).
    fn encode_register(&self, entries: &[DeviceInfo]) -> String {
        encode_node_register_json(entries)
    }

    /// The register annotation's value for the inventory: what the publisher writes and
    /// `discover` prints.
    fn register_value(&self, inventory: &Inventory, cfg: &PluginConfig) -> String {
        self.encode_register(&self.register_info(inventory, cfg))
    }

    /// Whether the handshake annotation is answered `Reported <time>` every register
    /// round (HAMi's DCU plugin, whose scheduler re-reads the register annotation only
    /// after such an answer) rather than only when kubelet cannot vouch for the node
    /// (`publisher`).
    fn reports_handshake_every_round(&self) -> bool {
        false
    }

    /// Whether a pod device string's TYPE belongs to this plugin's device.
    fn type_matches(&self, cfg: &PluginConfig, dev_type: &str, _device: &PhysicalDevice) -> bool {
        dev_type == cfg.vendor.device_type
    }

    /// Starts one Allocate call for `pod` (reads whatever node-wide state the vendor's
    /// answer depends on).
    fn begin<'a>(
        &'a self,
        kube: &'a kube::Client,
        cfg: &'a PluginConfig,
        pod: &'a Pod,
    ) -> BoxFuture<'a, Result<Box<dyn PodAllocation>, HookError>>;
}

/// A device node for a container: `host` (under the plugin's `--dev-root`) at
/// `container`.
pub fn device_spec(container: &str, host: &std::path::Path, permissions: &str) -> DeviceSpec {
    DeviceSpec {
        container_path: container.into(),
        host_path: host.to_string_lossy().into_owned(),
        permissions: permissions.into(),
    }
}

/// A host path mounted into a container.
pub fn host_mount(container: &str, host: &std::path::Path, read_only: bool) -> Mount {
    Mount {
        container_path: container.into(),
        host_path: host.to_string_lossy().into_owned(),
        read_only,
    }
}

/// The pods on `node` that have not finished: whose node-wide holdings (compute units,
/// virtual devices) a vendor's answer must respect. `purpose` names them in the error.
pub async fn live_node_pods(
    kube: &kube::Client,
    node: &str,
    purpose: &str,
) -> Result<Vec<Pod>, HookError> {
    let pods = kube::Api::<Pod>::all(kube.clone())
        .list(&kube::api::ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(|e| {
            HookError::Internal(format!(
                "cannot list the pods of node {node} to rebuild {purpose}: {e}"
            ))
        })?;
    Ok(pods
        .items
        .into_iter()
        .filter(|p| !hami_core::pod::is_terminal(p))
        .collect())
}

/// [`live_node_pods`] with `pod`, the one being allocated, last and as this call found it
/// (the list may not show it yet, or show an older copy).
pub async fn live_node_pods_and(
    kube: &kube::Client,
    node: &str,
    pod: &Pod,
    purpose: &str,
) -> Result<Vec<Pod>, HookError> {
    let uid = pod.metadata.uid.as_deref();
    let mut pods: Vec<Pod> = live_node_pods(kube, node, purpose)
        .await?
        .into_iter()
        .filter(|p| p.metadata.uid.as_deref() != uid)
        .collect();
    pods.push(pod.clone());
    Ok(pods)
}

/// NVIDIA's answer: HAMi-core (`libvgpu.so`) environment and mounts ([`libvgpu`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct HamiCoreHook;

impl VendorHook for HamiCoreHook {
    fn begin<'a>(
        &'a self,
        _kube: &'a kube::Client,
        _cfg: &'a PluginConfig,
        _pod: &'a Pod,
    ) -> BoxFuture<'a, Result<Box<dyn PodAllocation>, HookError>> {
        Box::pin(async { Ok(Box::new(HamiCorePod) as Box<dyn PodAllocation>) })
    }
}

struct HamiCorePod;

impl PodAllocation for HamiCorePod {
    fn container(
        &mut self,
        ctx: &ContainerContext<'_>,
    ) -> Result<ContainerAllocateResponse, HookError> {
        let grant = ContainerGrant {
            pod_uid: ctx.pod_uid(),
            container: &ctx.container.name,
            devices: ctx.devices,
            control_disabled: control_disabled(ctx.container.env.as_deref().unwrap_or_default()),
        };
        Ok(libvgpu::container_response(ctx.cfg, &grant)?)
    }
}
