//! Rules about pods that every component reads the same way: when a pod is over, which
//! init containers are sidecars, and how a pod is named in messages.

use k8s_openapi::api::core::v1::{Container, Pod};

/// Phase of a pod whose containers all exited successfully.
pub const PHASE_SUCCEEDED: &str = "Succeeded";
/// Phase of a pod whose containers all stopped, at least one in failure.
pub const PHASE_FAILED: &str = "Failed";

/// The pod's `status.phase`, if set.
pub fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// Whether a pod in this phase has stopped for good (`Succeeded` or `Failed`): its
/// containers never run again, so it holds no devices and no node resources. A pod
/// being deleted is not terminal until its phase says so.
pub fn is_terminal_phase(phase: Option<&str>) -> bool {
    matches!(phase, Some(PHASE_SUCCEEDED | PHASE_FAILED))
}

/// [`is_terminal_phase`] of the pod's phase.
pub fn is_terminal(pod: &Pod) -> bool {
    is_terminal_phase(phase(pod))
}

/// Whether an init container with this `restartPolicy` is a sidecar: `Always` keeps it
/// running beside every container declared after it (Kubernetes' native sidecars).
pub fn is_sidecar_restart_policy(restart_policy: Option<&str>) -> bool {
    restart_policy == Some("Always")
}

/// [`is_sidecar_restart_policy`] of an init container.
pub fn is_sidecar(init_container: &Container) -> bool {
    is_sidecar_restart_policy(init_container.restart_policy.as_deref())
}

/// The node the pod is bound to (`spec.nodeName`), if any.
pub fn bound_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// `namespace/name`, as logs and messages name a pod. A pod read from a file may lack a
/// namespace: it is `default`, where the API server would put it.
pub fn pod_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("<unnamed>")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn in_phase(phase: Option<&str>) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: phase.map(String::from),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_succeeded_and_failed_are_terminal() {
        for terminal in ["Succeeded", "Failed"] {
            assert!(is_terminal(&in_phase(Some(terminal))), "{terminal}");
        }
        for live in [
            None,
            Some("Pending"),
            Some("Running"),
            Some("Unknown"),
            Some(""),
        ] {
            assert!(!is_terminal(&in_phase(live)), "{live:?}");
        }
        assert!(!is_terminal(&Pod::default()));
    }

    #[test]
    fn sidecars_are_init_containers_that_always_restart() {
        let with = |policy: Option<&str>| Container {
            restart_policy: policy.map(String::from),
            ..Default::default()
        };
        assert!(is_sidecar(&with(Some("Always"))));
        for other in [None, Some("OnFailure"), Some("Never"), Some("always")] {
            assert!(!is_sidecar(&with(other)), "{other:?}");
        }
    }

    #[test]
    fn names_are_namespace_slash_name() {
        let pod = |ns: Option<&str>, name: Option<&str>| Pod {
            metadata: ObjectMeta {
                namespace: ns.map(String::from),
                name: name.map(String::from),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(pod_name(&pod(Some("team"), Some("train"))), "team/train");
        assert_eq!(pod_name(&pod(None, Some("train"))), "default/train");
        assert_eq!(pod_name(&pod(Some("team"), None)), "team/<unnamed>");
    }
}
