//! GetPreferredAllocation: steer kubelet towards replicas of the GPUs the scheduler chose,
//! so kubelet's own accounting matches the pod's annotations.

use hami_core::codec::decode_pod_single_device;
use hami_core::model::ContainerDevice;
use hami_kubelet_api::v1beta1::{
    ContainerPreferredAllocationRequest, ContainerPreferredAllocationResponse,
    PreferredAllocationRequest, PreferredAllocationResponse,
};

use crate::config::PluginConfig;
use crate::inventory::Inventory;
use crate::pending::{find_pending_pod, trace_pod};
use crate::shared::Shared;
use hami_core::pod::pod_name;

/// Never fails: without a pending pod or a readable annotation, kubelet gets no preference
/// and picks by itself.
pub(crate) async fn preferred(
    shared: &Shared,
    request: PreferredAllocationRequest,
) -> PreferredAllocationResponse {
    let cfg = &shared.cfg;
    let entries: Vec<Vec<ContainerDevice>> = match find_pending_pod(&shared.kube, cfg).await {
        Err(e) => {
            tracing::debug!(error = %e, "no preference: pending pod unknown");
            Vec::new()
        }
        Ok(pod) => {
            trace_pod(&pod);
            let value = pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(&cfg.vendor.to_allocate_annotation))
                .map(String::as_str)
                .unwrap_or_default();
            match decode_pod_single_device(value) {
                Ok(all) => all.into_iter().filter(|e| !e.is_empty()).collect(),
                Err(e) => {
                    tracing::debug!(pod = %pod_name(&pod), error = %e, "no preference: unreadable annotation");
                    Vec::new()
                }
            }
        }
    };
    let inventory = shared.inventory();
    let container_responses = request
        .container_requests
        .iter()
        .enumerate()
        .map(|(k, req)| ContainerPreferredAllocationResponse {
            device_i_ds: entries
                .get(k)
                .map(|entry| pick(entry, req, &inventory, cfg))
                .unwrap_or_default(),
        })
        .collect();
    PreferredAllocationResponse {
        container_responses,
    }
}

/// Kubelet's must-include IDs first, then for each annotated GPU its lowest free replica,
/// never more than the allocation size.
pub(crate) fn pick(
    entry: &[ContainerDevice],
    req: &ContainerPreferredAllocationRequest,
    inventory: &Inventory,
    cfg: &PluginConfig,
) -> Vec<String> {
    let size = usize::try_from(req.allocation_size).unwrap_or(0);
    let mut chosen: Vec<String> = req.must_include_device_i_ds.clone();
    let gpu_of = |id: &str| inventory.device_of_replica(id, cfg).map(|d| d.uuid.clone());
    for dev in entry {
        if chosen.len() >= size {
            break;
        }
        if chosen
            .iter()
            .any(|c| gpu_of(c).as_deref() == Some(dev.uuid.as_str()))
        {
            continue;
        }
        let replica = req
            .available_device_i_ds
            .iter()
            .filter(|id| !chosen.contains(id))
            .filter(|id| gpu_of(id).as_deref() == Some(dev.uuid.as_str()))
            .min_by_key(|id| id.rsplit_once('-').and_then(|(_, i)| i.parse::<u32>().ok()));
        if let Some(r) = replica {
            chosen.push(r.clone());
        }
    }
    chosen.truncate(size.max(req.must_include_device_i_ds.len()));
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::PhysicalDevice;
    use crate::config::test_config;

    fn inv(cfg: &PluginConfig) -> Inventory {
        let d = |uuid: &str, index| PhysicalDevice {
            uuid: uuid.into(),
            index,
            model: "NVIDIA-T4".into(),
            memory_mib: 100,
            numa: None,
            healthy: true,
        };
        Inventory::new(vec![d("GPU-a", 0), d("GPU-b", 1), d("GPU-c", 2)], cfg)
    }

    fn cd(uuid: &str) -> ContainerDevice {
        ContainerDevice {
            idx: 0,
            uuid: uuid.into(),
            dev_type: "NVIDIA".into(),
            mem_mib: 1,
            cores: 1,
            slots: 0,
        }
    }

    fn req(available: &[&str], must: &[&str], size: i32) -> ContainerPreferredAllocationRequest {
        ContainerPreferredAllocationRequest {
            available_device_i_ds: available.iter().map(|s| s.to_string()).collect(),
            must_include_device_i_ds: must.iter().map(|s| s.to_string()).collect(),
            allocation_size: size,
        }
    }

    #[test]
    fn picks_the_lowest_free_replica_of_each_annotated_gpu() {
        let cfg = test_config("n", std::path::Path::new("/tmp"));
        let inv = inv(&cfg);
        let available = ["GPU-a-0", "GPU-a-3", "GPU-b-2", "GPU-c-1", "GPU-c-0"];
        let got = pick(
            &[cd("GPU-c"), cd("GPU-a")],
            &req(&available, &[], 2),
            &inv,
            &cfg,
        );
        assert_eq!(got, ["GPU-c-0", "GPU-a-0"]);
        // A must-include replica of an annotated GPU covers that GPU.
        let got = pick(
            &[cd("GPU-c"), cd("GPU-a")],
            &req(&available, &["GPU-c-1"], 2),
            &inv,
            &cfg,
        );
        assert_eq!(got, ["GPU-c-1", "GPU-a-0"]);
        // No free replica of the GPU: no preference for it; never more than the size.
        let got = pick(
            &[cd("GPU-b"), cd("GPU-a"), cd("GPU-c")],
            &req(&["GPU-a-1", "GPU-c-2"], &[], 1),
            &inv,
            &cfg,
        );
        assert_eq!(got, ["GPU-a-1"]);
    }
}
