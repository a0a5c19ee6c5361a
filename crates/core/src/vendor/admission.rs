//! What a vendor's admission rules do to a container (`docs/protocol.md#webhook`), and the
//! small edits they make, each idempotent so a re-invoked webhook changes nothing the
//! second time.

use k8s_openapi::api::core::v1::{Container, EnvVar};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::request::{RequestError, integer_resource};

/// The outcome of one vendor's rules on one container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Admission {
    /// The container asks for this vendor's devices (after the rules ran).
    pub uses: bool,
    /// The RuntimeClass the pod needs for these devices, when the pod names none.
    pub runtime_class: Option<String>,
}

impl Admission {
    /// The container asks for the vendor's devices, no RuntimeClass needed.
    pub fn uses(uses: bool) -> Self {
        Admission {
            uses,
            runtime_class: None,
        }
    }
}

/// Sets `name=value`, replacing an existing entry of that name (also one that used
/// `valueFrom`), appending otherwise.
pub fn set_env(c: &mut Container, name: &str, value: &str) {
    let env = c.env.get_or_insert_with(Vec::new);
    match env.iter_mut().find(|e| e.name == name) {
        Some(existing) => {
            if existing.value.as_deref() != Some(value) || existing.value_from.is_some() {
                existing.value = Some(value.to_string());
                existing.value_from = None;
            }
        }
        None => env.push(EnvVar {
            name: name.to_string(),
            value: Some(value.to_string()),
            value_from: None,
        }),
    }
}

/// Adds `name=value` unless the container already sets `name` (whatever its value).
pub fn default_env(c: &mut Container, name: &str, value: &str) {
    if !c.env.iter().flatten().any(|e| e.name == name) {
        set_env(c, name, value);
    }
}

/// Sets an extended resource in limits and requests alike: extended resources must
/// have equal request and limit, and kube-scheduler counts requests.
pub fn set_resource(c: &mut Container, name: &str, value: u64) {
    let resources = c.resources.get_or_insert_with(Default::default);
    let q = Quantity(value.to_string());
    resources
        .limits
        .get_or_insert_with(Default::default)
        .insert(name.to_string(), q.clone());
    resources
        .requests
        .get_or_insert_with(Default::default)
        .insert(name.to_string(), q);
}

/// Whether the container names `resource` in its limits (HAMi's admission looks at
/// limits only).
pub fn has_limit(c: &Container, resource: &str) -> bool {
    c.resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .is_some_and(|l| l.contains_key(resource))
}

/// Whether the container names `resource` in its limits or requests.
pub fn names_resource(c: &Container, resource: &str) -> bool {
    c.resources.as_ref().is_some_and(|r| {
        r.limits.as_ref().is_some_and(|l| l.contains_key(resource))
            || r.requests
                .as_ref()
                .is_some_and(|l| l.contains_key(resource))
    })
}

/// An integer resource that must not be negative, as a refusal message otherwise.
pub fn non_negative(c: &Container, resource: &str) -> Result<Option<i64>, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_env_replaces_and_is_idempotent() {
        let mut c = Container {
            name: "c".into(),
            ..Default::default()
        };
        set_env(&mut c, "A", "1");
        set_env(&mut c, "A", "1");
        assert_eq!(c.env.as_ref().map(Vec::len), Some(1));
        set_env(&mut c, "A", "2");
        default_env(&mut c, "A", "3");
        let env = c.env.unwrap_or_default();
        assert_eq!(env.len(), 1);
        assert_eq!(env[0].value.as_deref(), Some("2"));
    }

    #[test]
    fn set_resource_writes_limits_and_requests() {
        let mut c = Container::default();
        set_resource(&mut c, "nvidia.com/gpu", 2);
        assert!(has_limit(&c, "nvidia.com/gpu") && names_resource(&c, "nvidia.com/gpu"));
        let r = c.resources.unwrap_or_default();
        assert_eq!(r.limits.unwrap_or_default()["nvidia.com/gpu"].0, "2");
        assert_eq!(r.requests.unwrap_or_default()["nvidia.com/gpu"].0, "2");
    }
}
