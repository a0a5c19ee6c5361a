//! NVIDIA: resource names and request defaults from `device-config.yaml`, inventory in
//! `hami.io/node-nvidia-register`, admission rules of `docs/protocol.md#webhook` step 4.

use k8s_openapi::api::core::v1::Container;

use super::admission::{Admission, non_negative, set_env, set_resource};
use super::common::bounded;
use super::{
    Annotations, ConstraintError, DeviceConstraints, HealthRule, InventorySource, NodeView, Vendor,
};
use crate::annotations as keys;
use crate::codec::selectors::{DeviceSelector, SelectorKeys};
use crate::codec::{CodecError, decode_node_register, parse_go_bool};
use crate::config::NvidiaConfig;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::quota::QuotaResources;
use crate::request::{RequestError, integer_resource};

/// HAMi-core reads the task priority from this variable.
pub const TASK_PRIORITY_ENV: &str = "CUDA_TASK_PRIORITY";
/// HAMi-core reads the core limit policy (`force`, `disable`) from this variable.
pub const CORE_POLICY_ENV: &str = "GPU_CORE_UTILIZATION_POLICY";
/// The NVIDIA container runtime hides every GPU when this is `none`.
pub const VISIBLE_DEVICES_ENV: &str = "NVIDIA_VISIBLE_DEVICES";

const DEFAULT_CORE_POLICY: &str = "default";

/// The vendor key NVIDIA devices carry in pod device strings.
pub const NVIDIA: &str = "NVIDIA";

/// Mode a device without an explicit mode runs in.
const DEFAULT_MODE: &str = "hami-core";

#[derive(Debug, Clone)]
pub struct Nvidia {
    cfg: NvidiaConfig,
}

impl Nvidia {
    pub fn new(cfg: NvidiaConfig) -> Self {
        Nvidia { cfg }
    }

    pub fn config(&self) -> &NvidiaConfig {
        &self.cfg
    }
}

impl Vendor for Nvidia {
    fn common_word(&self) -> &str {
        NVIDIA
    }

    fn resource_names(&self) -> Vec<String> {
        vec![
            self.cfg.resource_count_name.clone(),
            self.cfg.resource_memory_name.clone(),
            self.cfg.resource_memory_percentage_name.clone(),
            self.cfg.resource_core_name.clone(),
        ]
    }

    fn count_resource(&self) -> &str {
        &self.cfg.resource_count_name
    }

    fn quota_resources(&self) -> QuotaResources {
        let named = |n: &String| Some(n.clone()).filter(|n| !n.trim().is_empty());
        QuotaResources {
            memory: named(&self.cfg.resource_memory_name),
            cores: named(&self.cfg.resource_core_name),
            memory_factor: self.cfg.memory_factor,
        }
    }

    fn inventory_source(&self) -> InventorySource<'_> {
        InventorySource::Annotation(keys::NVIDIA_NODE_REGISTER)
    }

    fn health_rule(&self) -> HealthRule<'_> {
        HealthRule::Handshake(keys::NVIDIA_NODE_HANDSHAKE)
    }

    fn to_allocate_annotation(&self) -> Option<&str> {
        Some(keys::NVIDIA_DEVICES_TO_ALLOCATE)
    }

    fn allocated_annotation(&self) -> &str {
        keys::NVIDIA_DEVICES_ALLOCATED
    }

    fn pair_score_annotation(&self) -> Option<&str> {
        Some(keys::NVIDIA_NODE_SCORE)
    }

    fn container_request(
        &self,
        c: &Container,
        _pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        let cfg = &self.cfg;
        let count = match integer_resource(c, &cfg.resource_count_name)? {
            Some(n) if n > 0 => n,
            _ => return Ok(None),
        };
        let count = bounded(c, &cfg.resource_count_name, count, i64::from(i32::MAX))?;

        let factor = i64::from(cfg.memory_factor.max(1));
        let mem_mib = match integer_resource(c, &cfg.resource_memory_name)? {
            None => 0,
            Some(m) => {
                let m = bounded(
                    c,
                    &cfg.resource_memory_name,
                    m,
                    i64::from(i32::MAX) / factor,
                )?;
                m * cfg.memory_factor.max(1)
            }
        };

        // HAMi reads a missing or non-positive percentage as its "unset" 101.
        let mut mem_percent = match integer_resource(c, &cfg.resource_memory_percentage_name)? {
            Some(p) if p > 0 => Some(p.min(100) as u32),
            _ => None,
        };

        let mut mem_mib = mem_mib;
        if mem_percent.is_none() && mem_mib == 0 {
            if cfg.default_memory != 0 {
                mem_mib = cfg.default_memory;
            } else {
                mem_percent = Some(100);
            }
        }

        let cores = match integer_resource(c, &cfg.resource_core_name)? {
            None => cfg.default_cores,
            Some(v) => bounded(c, &cfg.resource_core_name, v, i64::from(i32::MAX))?,
        };

        Ok(Some(ContainerDeviceRequest {
            count,
            dev_type: NVIDIA.to_string(),
            mem_mib,
            mem_percent,
            cores,
        }))
    }

    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        node.annotations
            .get(keys::NVIDIA_NODE_REGISTER)
            .map(|v| decode_node_register(v))
    }

    fn pod_constraints(
        &self,
        pod_annotations: &Annotations,
    ) -> Result<DeviceConstraints, ConstraintError> {
        let selector = DeviceSelector::from_annotations(pod_annotations, &SelectorKeys::nvidia());
        let numa_bind = match pod_annotations.get(keys::NVIDIA_NUMA_BIND) {
            None => false,
            Some(v) => parse_go_bool(v.trim()).map_err(|e| ConstraintError {
                key: keys::NVIDIA_NUMA_BIND.into(),
                value: v.clone(),
                reason: e.to_string(),
            })?,
        };
        let mode_filter = pod_annotations
            .get(keys::NVIDIA_VGPU_MODE)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty());
        Ok(DeviceConstraints {
            selector,
            numa_bind,
            mode_filter,
            ..DeviceConstraints::default()
        })
    }

    fn accepts_any_type(
        &self,
        req: &ContainerDeviceRequest,
        constraints: &DeviceConstraints,
    ) -> bool {
        req.dev_type == NVIDIA
            && constraints.selector.types_unconstrained()
            && constraints.mode_filter.is_none()
    }

    fn type_matches(
        &self,
        device: &DeviceInfo,
        req: &ContainerDeviceRequest,
        constraints: &DeviceConstraints,
    ) -> bool {
        if req.dev_type != NVIDIA {
            return false;
        }
        if !constraints.selector.type_allowed(&device.dev_type) {
            return false;
        }
        match &constraints.mode_filter {
            None => true,
            Some(filter) => {
                let mode = if device.mode.is_empty() {
                    DEFAULT_MODE
                } else {
                    &device.mode
                };
                filter.contains(mode)
            }
        }
    }

    /// Default GPU count, default exclusive cores, task priority and core policy
    /// environment, hiding GPUs from containers that asked for none, and range checks.
    fn mutate_admission(
        &self,
        c: &mut Container,
        _pod_annotations: &Annotations,
    ) -> Result<Admission, String> {
        let cfg = &self.cfg;
        let count = non_negative(c, &cfg.resource_count_name)?;
        let memory = non_negative(c, &cfg.resource_memory_name)?;
        let percentage = percent(c, &cfg.resource_memory_percentage_name)?;
        let cores = percent(c, &cfg.resource_core_name)?;
        let priority = non_negative(c, &cfg.resource_priority_name)?;

        // The first resource (in a fixed order) that only makes sense with a GPU count.
        let sizing = [
            (&cfg.resource_memory_name, memory.is_some()),
            (&cfg.resource_memory_percentage_name, percentage.is_some()),
            (&cfg.resource_core_name, cores.is_some()),
        ]
        .into_iter()
        .find(|(_, present)| *present)
        .map(|(name, _)| name.clone());

        let uses_gpu = match (count, &sizing) {
            (Some(n), _) if n > 0 => true,
            (Some(_), Some(resource)) => {
                return Err(format!(
                    "container {}: asks for {resource} but {} is 0; ask for at least one GPU or drop {resource}",
                    c.name, cfg.resource_count_name
                ));
            }
            (Some(_), None) => false,
            (None, Some(resource)) => {
                if cfg.default_gpu_num == 0 {
                    return Err(format!(
                        "container {}: asks for {resource} without {}, and defaultGPUNum is 0 so none can be assumed; set {}",
                        c.name, cfg.resource_count_name, cfg.resource_count_name
                    ));
                }
                set_resource(c, &cfg.resource_count_name, u64::from(cfg.default_gpu_num));
                true
            }
            (None, None) => false,
        };

        // A container that takes a whole card's memory gets the whole card's compute, so
        // no other task is packed onto a GPU whose memory it cannot use anyway.
        let whole_memory = percentage == Some(100)
            || (memory.is_none() && percentage.is_none() && cfg.default_memory == 0);
        if uses_gpu && cores.is_none() && whole_memory {
            set_resource(c, &cfg.resource_core_name, 100);
        }

        if let Some(p) = priority {
            set_env(c, TASK_PRIORITY_ENV, &p.to_string());
        }
        if uses_gpu {
            let policy = cfg.gpu_core_policy.trim();
            if !policy.is_empty() && policy != DEFAULT_CORE_POLICY {
                set_env(c, CORE_POLICY_ENV, policy);
            }
        } else if cfg.overwrite_env {
            set_env(c, VISIBLE_DEVICES_ENV, "none");
        }
        let runtime_class = cfg.runtime_class_name.trim();
        Ok(Admission {
            uses: uses_gpu,
            runtime_class: (uses_gpu && !runtime_class.is_empty())
                .then(|| runtime_class.to_string()),
        })
    }
}

/// An integer percentage of one GPU, 0 to 100.
fn percent(c: &Container, resource: &str) -> Result<Option<i64>, String> {
    match integer_resource(c, resource).map_err(|e| e.to_string())? {
        Some(v) if !(0..=100).contains(&v) => Err(format!(
            "container {}: resource {resource}={v} is outside 0-100 (a percentage of one GPU)",
            c.name
        )),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NvidiaConfig;

    fn device(dev_type: &str, mode: &str) -> DeviceInfo {
        DeviceInfo {
            id: "GPU-0".into(),
            dev_type: dev_type.into(),
            mode: mode.into(),
            health: true,
            ..DeviceInfo::default()
        }
    }

    fn request(dev_type: &str) -> ContainerDeviceRequest {
        ContainerDeviceRequest {
            count: 1,
            dev_type: dev_type.into(),
            mem_mib: 100,
            mem_percent: None,
            cores: 0,
        }
    }

    #[test]
    fn any_type_shortcut_agrees_with_the_per_device_check() {
        let v = Nvidia::new(NvidiaConfig::default());
        let devices = [
            device("NVIDIA-Tesla T4", ""),
            device("NVIDIA A100-SXM4-80GB", "hami-core"),
            device("NVIDIA H100", "mig"),
            device("NVIDIA-Tesla V100", "mps"),
        ];
        let annotations = |pairs: &[(&str, &str)]| -> Annotations {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let cases = [
            annotations(&[]),
            annotations(&[(keys::NVIDIA_USE_GPUTYPE, "A100")]),
            annotations(&[(keys::NVIDIA_NOUSE_GPUTYPE, "T4")]),
            annotations(&[(keys::NVIDIA_VGPU_MODE, "hami-core")]),
        ];
        for pod in &cases {
            let c = v.pod_constraints(pod).unwrap();
            for req in [request(NVIDIA), request("MLU")] {
                let all = devices.iter().all(|d| v.type_matches(d, &req, &c));
                if v.accepts_any_type(&req, &c) {
                    assert!(all, "shortcut claims every device passes for {pod:?}");
                }
            }
        }
        let free = v.pod_constraints(&Annotations::new()).unwrap();
        assert!(v.accepts_any_type(&request(NVIDIA), &free));
        assert!(!v.accepts_any_type(&request("MLU"), &free));
    }
}
