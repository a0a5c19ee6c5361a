//! AMD's part of Allocate and registration (`docs/vendors.md#amd-device-plugin`).
//!
//! Per container: `/dev/kfd` and each GPU's `/dev/dri/card<N>` + `renderD<M>`;
//! `HSA_CU_MASK` (`<i>:<ID_List>` per device, `;`-joined) from a first-fit choice of the
//! lowest free CUs, the node's holdings rebuilt from every live pod's
//! `hami.io/amd-cu-allocated` (a CU held twice refuses the pod); `ROCR_VISIBLE_DEVICES`,
//! `HIP_DEVICE_MEMORY_LIMIT` (first device's MiB), `LD_AUDIT` and the `libamvgpu.so`
//! mount. The pod's union of CUs is written back with the framework's to-allocate patch.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use hami_core::model::DeviceInfo;
use hami_core::pod::pod_name;
use hami_device_plugin::hook::{device_spec, host_mount, live_node_pods_and};
use hami_device_plugin::{
    ContainerContext, HookError, Inventory, PhysicalDevice, PluginConfig, PodAllocation, VendorHook,
};
use hami_kubelet_api::v1beta1::{ContainerAllocateResponse, DeviceSpec};
use k8s_openapi::api::core::v1::Pod;

use crate::backend::Catalog;
use crate::cu::{self, CU_ALLOCATED, Occupancy};

/// Where containers find the HIP audit library.
pub const LIBAMVGPU_IN_CONTAINER: &str = "/usr/local/vgpu/libamvgpu.so";
pub const ENV_CU_MASK: &str = "HSA_CU_MASK";
pub const ENV_VISIBLE: &str = "ROCR_VISIBLE_DEVICES";
pub const ENV_MEMORY_LIMIT: &str = "HIP_DEVICE_MEMORY_LIMIT";
pub const ENV_LD_AUDIT: &str = "LD_AUDIT";
/// `custominfo` key of the register entries.
pub const CUSTOM_PCI_BDF: &str = "pciBDF";

#[derive(Debug, Clone)]
pub struct AmdHook {
    catalog: Arc<Catalog>,
    /// `HOST_HOOK_PATH`: host directory holding `vgpu/libamvgpu.so`.
    hook_path: PathBuf,
    /// Host directory of the device nodes (`--dev-root`).
    dev_root: PathBuf,
}

impl AmdHook {
    pub fn new(catalog: Arc<Catalog>, hook_path: PathBuf, dev_root: PathBuf) -> Self {
        AmdHook {
            catalog,
            hook_path,
            dev_root,
        }
    }
}

impl VendorHook for AmdHook {
    /// HAMi's AMD entry: `devcore` is the GPU's CU count, `custominfo.pciBDF` its PCI
    /// address (a partition's own, `dddd:bb:dd.<partition>`), no mode.
    fn register_info(&self, inventory: &Inventory, cfg: &PluginConfig) -> Vec<DeviceInfo> {
        inventory
            .register_info(cfg)
            .into_iter()
            .filter_map(|mut info| {
                let gpu = self.catalog.get(&info.id)?;
                info.cores = gpu.facts.cu_count;
                info.mode = "".into();
                info.custom_info.insert(
                    CUSTOM_PCI_BDF.into(),
                    serde_json::Value::String(gpu.sys.address.clone()),
                );
                Some(info)
            })
            .collect()
    }

    /// The scheduler writes the GPU's market name as the type (`AMD Instinct MI300X`).
    fn type_matches(&self, cfg: &PluginConfig, dev_type: &str, device: &PhysicalDevice) -> bool {
        dev_type == device.model || dev_type == cfg.vendor.device_type
    }

    fn begin<'a>(
        &'a self,
        kube: &'a kube::Client,
        cfg: &'a PluginConfig,
        pod: &'a Pod,
    ) -> BoxFuture<'a, Result<Box<dyn PodAllocation>, HookError>> {
        Box::pin(async move {
            let (occupancy, held) = node_occupancy(kube, &cfg.node_name, pod).await?;
            Ok(Box::new(AmdPod {
                hook: self.clone(),
                pod: pod_name(pod),
                occupancy,
                held,
            }) as Box<dyn PodAllocation>)
        })
    }
}

/// The CUs every live pod on the node holds, and this pod's own share (kept and
/// extended: each container of a pod is allocated in its own call).
async fn node_occupancy(
    kube: &kube::Client,
    node: &str,
    pod: &Pod,
) -> Result<(Occupancy, BTreeMap<String, BTreeSet<u32>>), HookError> {
    let refused = |e: cu::CuError| HookError::Refused(e.to_string());
    // The pod being allocated comes last, read as this call found it.
    let pods = live_node_pods_and(kube, node, pod, "CU usage").await?;
    let mut occupancy = Occupancy::default();
    let mut own = BTreeMap::new();
    for (i, p) in pods.iter().enumerate() {
        let Some(value) = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CU_ALLOCATED))
        else {
            continue;
        };
        let name = pod_name(p);
        let held = cu::parse_annotation(&name, value).map_err(refused)?;
        occupancy.add(&name, &held).map_err(refused)?;
        if i + 1 == pods.len() {
            own = held;
        }
    }
    Ok((occupancy, own))
}

struct AmdPod {
    hook: AmdHook,
    pod: String,
    occupancy: Occupancy,
    held: BTreeMap<String, BTreeSet<u32>>,
}

fn device(container: &str, host: PathBuf) -> DeviceSpec {
    device_spec(container, &host, "rw")
}

impl PodAllocation for AmdPod {
    fn container(
        &mut self,
        ctx: &ContainerContext<'_>,
    ) -> Result<ContainerAllocateResponse, HookError> {
        let dev = &self.hook.dev_root;
        let mut r = ContainerAllocateResponse::default();
        r.devices.push(device("/dev/kfd", dev.join("kfd")));
        let mut masks = Vec::new();
        let mut visible = Vec::new();
        for (i, d) in ctx.devices.iter().enumerate() {
            let gpu = self.hook.catalog.get(&d.uuid).ok_or_else(|| {
                HookError::Internal(format!(
                    "GPU {} is registered but no longer discovered",
                    d.uuid
                ))
            })?;
            let (card, render) = (gpu.sys.card, gpu.sys.render);
            r.devices.push(device(
                &format!("/dev/dri/card{card}"),
                dev.join(format!("dri/card{card}")),
            ));
            r.devices.push(device(
                &format!("/dev/dri/renderD{render}"),
                dev.join(format!("dri/renderD{render}")),
            ));
            let picked = self
                .occupancy
                .take(&self.pod, &d.uuid, gpu.facts.cu_count, d.cores)
                .map_err(|e| HookError::Refused(e.to_string()))?;
            masks.push(format!("{i}:{}", cu::format_list(&picked)));
            self.held.entry(d.uuid.clone()).or_default().extend(picked);
            visible.push(gpu.sys.rocr_uuid.clone());
        }
        if let Some(first) = ctx.devices.first() {
            r.envs.insert(ENV_CU_MASK.into(), masks.join(";"));
            r.envs.insert(ENV_VISIBLE.into(), visible.join(","));
            r.envs
                .insert(ENV_MEMORY_LIMIT.into(), format!("{}m", first.mem_mib));
            r.envs
                .insert(ENV_LD_AUDIT.into(), LIBAMVGPU_IN_CONTAINER.into());
        }
        r.mounts.push(host_mount(
            LIBAMVGPU_IN_CONTAINER,
            &self.hook.hook_path.join("vgpu/libamvgpu.so"),
            true,
        ));
        Ok(r)
    }

    fn annotations(&self) -> Vec<(String, String)> {
        if self.held.values().all(BTreeSet::is_empty) {
            return Vec::new();
        }
        vec![(CU_ALLOCATED.into(), cu::encode_annotation(&self.held))]
    }
}
