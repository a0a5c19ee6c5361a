//! NVIDIA's per-container admission rules (`docs/protocol.md#webhook`
//! step 4, `docs/protocol.md#resources-and-requests`): default GPU
//! count, default exclusive cores, task priority and core policy environment,
//! hiding GPUs from containers that asked for none, and range checks.

use hami_core::config::NvidiaConfig;
use hami_core::request::{RequestError, integer_resource};
use k8s_openapi::api::core::v1::Container;

use super::container::{set_env, set_resource};

/// HAMi-core reads the task priority from this variable.
pub const TASK_PRIORITY_ENV: &str = "CUDA_TASK_PRIORITY";
/// HAMi-core reads the core limit policy (`force`, `disable`) from this variable.
pub const CORE_POLICY_ENV: &str = "GPU_CORE_UTILIZATION_POLICY";
/// The NVIDIA container runtime hides every GPU when this is `none`.
pub const VISIBLE_DEVICES_ENV: &str = "NVIDIA_VISIBLE_DEVICES";

const DEFAULT_CORE_POLICY: &str = "default";

/// Applies the rules to one container. Returns whether it uses GPUs afterwards, or a
/// message naming the container and resource when a value is unusable.
pub fn mutate_container(cfg: &NvidiaConfig, c: &mut Container) -> Result<bool, String> {
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
            set_resource(c, &cfg.resource_count_name, cfg.default_gpu_num);
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
    Ok(uses_gpu)
}

/// An integer resource that must not be negative.
fn non_negative(c: &Container, resource: &str) -> Result<Option<i64>, String> {
    match integer_resource(c, resource).map_err(|e| e.to_string())? {
        Some(v) if v < 0 => Err(RequestError::NotAnInteger {
            container: c.name.clone(),
            resource: resource.to_string(),
            value: v.to_string(),
        }
        .to_string()),
        other => Ok(other),
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
