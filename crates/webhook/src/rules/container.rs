//! Small edits to a container, each idempotent so a re-invoked webhook changes
//! nothing the second time.

use k8s_openapi::api::core::v1::{Container, EnvVar};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

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

/// Sets an extended resource in limits and requests alike: extended resources must
/// have equal request and limit, and kube-scheduler counts requests.
pub fn set_resource(c: &mut Container, name: &str, value: u32) {
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

/// Whether the container runs privileged.
pub fn is_privileged(c: &Container) -> bool {
    c.security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
        assert_eq!(c.env.as_ref().unwrap().len(), 1);
        set_env(&mut c, "A", "2");
        let env = c.env.unwrap();
        assert_eq!(env.len(), 1);
        assert_eq!(env[0].value.as_deref(), Some("2"));
    }

    #[test]
    fn set_resource_writes_limits_and_requests() {
        let mut c = Container::default();
        set_resource(&mut c, "nvidia.com/gpu", 2);
        let r = c.resources.unwrap();
        assert_eq!(r.limits.unwrap()["nvidia.com/gpu"].0, "2");
        assert_eq!(r.requests.unwrap()["nvidia.com/gpu"].0, "2");
    }
}
