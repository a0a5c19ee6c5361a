//! The DCU's part of registration and Allocate (`docs/device-plugin.md#hygon-dcu`).
//!
//! Register: HAMi's legacy string `DCU-<serial>,4,<MiB>,100,DCU-<model>,0,<health>,<SMI
//! index>,hami:` per DCU, and the handshake answered every round.
//!
//! Per container: `/dev/kfd` and `/dev/mkfd` (`rwm`), each DCU's card and render node
//! (`rw`); a container given part of one DCU (less than its memory) also gets a vdev
//! ([`crate::vdev`]): its directory at `/etc/vdev/docker/` and `HYGONPATH` at
//! `/opt/hygondriver`. Every container gets `/opt/hyhal` read-only. No environment.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use hami_core::codec::encode_node_register_legacy;
use hami_core::model::DeviceInfo;
use hami_device_plugin::hook::{device_spec, host_mount, live_node_pods_and};
use hami_device_plugin::{
    ContainerContext, HookError, Inventory, PluginConfig, PodAllocation, VendorHook,
};
use hami_kubelet_api::v1beta1::ContainerAllocateResponse;
use k8s_openapi::api::core::v1::Pod;

use crate::backend::Catalog;
use crate::vdev::{VdevConf, VdevDirs, VdevName, VdevState};

/// The mode of the register entries.
pub const MODE: &str = "hami";
/// Where a container finds its vdev file.
pub const VDEV_IN_CONTAINER: &str = "/etc/vdev/docker/";
/// Where a container with a vdev finds the DCU toolkit (`HYGONPATH`).
pub const HYGON_DRIVER_IN_CONTAINER: &str = "/opt/hygondriver";
/// The Hygon hardware abstraction layer, mounted in every container at the same path.
pub const HYHAL_IN_CONTAINER: &str = "/opt/hyhal";

/// The host paths the answer names (flags of the binary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPaths {
    /// Host directory of the device nodes (`--dev-root`).
    pub dev_root: PathBuf,
    /// vGPU directory; vdev directories go to `<vgpu>/dcu` (`--vgpu-dir`).
    pub vgpu_dir: PathBuf,
    /// dcu-exporter's vdev directory (`--vdev-dir`, `/etc/vdev`).
    pub vdev_dir: PathBuf,
    /// The DCU toolkit (`HYGONPATH`, `/opt/dtk`).
    pub hygon_path: PathBuf,
    /// `/opt/hyhal` on the host.
    pub hyhal_path: PathBuf,
}

impl HostPaths {
    pub fn vdev_dirs(&self) -> VdevDirs {
        VdevDirs {
            containers: self.vgpu_dir.join(crate::vdev::DCU_DIR),
            exporter: self.vdev_dir.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct DcuHook {
    catalog: Arc<Catalog>,
    paths: HostPaths,
}

impl DcuHook {
    pub fn new(catalog: Arc<Catalog>, paths: HostPaths) -> Self {
        DcuHook { catalog, paths }
    }
}

impl VendorHook for DcuHook {
    /// HAMi's DCU entry: `Devcore` 100 (percent), NUMA 0, mode `hami`.
    fn register_info(&self, inventory: &Inventory, cfg: &PluginConfig) -> Vec<DeviceInfo> {
        inventory
            .register_info(cfg)
            .into_iter()
            .map(|mut info| {
                info.cores = 100;
                info.numa = 0;
                info.mode = MODE.into();
                info
            })
            .collect()
    }

    /// HAMi's scheduler reads the DCU inventory in the legacy string form.
    fn encode_register(&self, entries: &[DeviceInfo]) -> String {
        encode_node_register_legacy(entries)
    }

    fn reports_handshake_every_round(&self) -> bool {
        true
    }

    fn begin<'a>(
        &'a self,
        kube: &'a kube::Client,
        cfg: &'a PluginConfig,
        pod: &'a Pod,
    ) -> BoxFuture<'a, Result<Box<dyn PodAllocation>, HookError>> {
        Box::pin(async move {
            let live = live_pods(kube, &cfg.node_name, pod).await?;
            let dirs = self.paths.vdev_dirs();
            let state = dirs.rebuild(&live).map_err(HookError::Refused)?;
            Ok(Box::new(DcuPod {
                hook: self.clone(),
                dirs,
                state,
            }) as Box<dyn PodAllocation>)
        })
    }
}

/// The UIDs of the pods running or about to run on the node (the one being allocated
/// included, also when the list does not show it yet).
async fn live_pods(
    kube: &kube::Client,
    node: &str,
    pod: &Pod,
) -> Result<HashSet<String>, HookError> {
    let pods = live_node_pods_and(kube, node, pod, "vdev usage").await?;
    Ok(pods.into_iter().filter_map(|p| p.metadata.uid).collect())
}

struct DcuPod {
    hook: DcuHook,
    dirs: VdevDirs,
    state: VdevState,
}

impl PodAllocation for DcuPod {
    fn container(
        &mut self,
        ctx: &ContainerContext<'_>,
    ) -> Result<ContainerAllocateResponse, HookError> {
        let paths = &self.hook.paths;
        let mut r = ContainerAllocateResponse::default();
        r.devices
            .push(device_spec("/dev/kfd", &paths.dev_root.join("kfd"), "rwm"));
        r.devices.push(device_spec(
            "/dev/mkfd",
            &paths.dev_root.join("mkfd"),
            "rwm",
        ));
        let mut dcus = Vec::with_capacity(ctx.devices.len());
        for d in ctx.devices {
            let dcu = self.hook.catalog.get(&d.uuid).ok_or_else(|| {
                HookError::Internal(format!(
                    "DCU {} is registered but no longer discovered",
                    d.uuid
                ))
            })?;
            for node in [&dcu.sys.card, &dcu.sys.render] {
                r.devices.push(device_spec(
                    &format!("/dev/dri/{node}"),
                    &paths.dev_root.join("dri").join(node),
                    "rw",
                ));
            }
            dcus.push(dcu);
        }
        if let ([d], [dcu]) = (ctx.devices, dcus.as_slice())
            && u64::from(d.mem_mib) < dcu.facts.memory_mib
        {
            let cu_count = d.cores.min(100) * dcu.facts.cu_count / 100;
            let dev = dcu.facts.index;
            let refused = |e: crate::vdev::VdevError| HookError::Refused(e.to_string());
            let name = VdevName {
                pod_uid: ctx.pod_uid().into(),
                container: ctx.container.name.clone(),
                dev_index: dev,
                pipe: self.state.free_pipe(dev).map_err(refused)?,
                vdev: self.state.free_vdev().map_err(refused)?,
                masks: self
                    .state
                    .free_cus(dev, dcu.facts.cu_count, cu_count)
                    .map_err(refused)?,
            };
            let conf = VdevConf {
                pci_bus_id: dcu.sys.pci_bdf.to_uppercase(),
                masks: name.masks,
                cu_count,
                mem_mib: d.mem_mib,
                device_id: dev,
                vdev: name.vdev,
                pipe: name.pipe,
            };
            let dir = self
                .dirs
                .create(&name, &conf)
                .map_err(HookError::Internal)?;
            self.state.mark(&name).map_err(refused)?;
            tracing::info!(dcu = %d.uuid, dir = %dir.display(), cu_count, mem_mib = d.mem_mib, "vdev created");
            r.mounts.push(host_mount(VDEV_IN_CONTAINER, &dir, false));
            r.mounts.push(host_mount(
                HYGON_DRIVER_IN_CONTAINER,
                &paths.hygon_path,
                false,
            ));
        }
        r.mounts
            .push(host_mount(HYHAL_IN_CONTAINER, &paths.hyhal_path, true));
        Ok(r)
    }
}
