//! The resource types the emulator serves, and how their URLs map onto them.

/// One served resource type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    /// Store key: `plural` for the core group, `plural.group` otherwise.
    pub id: &'static str,
    /// API group; empty for core/v1.
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Short names as `kubectl get` accepts them (`po`, `no`, `cm`).
    pub short_names: &'static [&'static str],
}

impl Resource {
    /// `apiVersion` as objects carry it (`v1`, `coordination.k8s.io/v1`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

pub const PODS: Resource = core("pods", "Pod", true, &["po"]);
pub const NODES: Resource = core("nodes", "Node", false, &["no"]);
pub const EVENTS: Resource = core("events", "Event", true, &["ev"]);
pub const NAMESPACES: Resource = core("namespaces", "Namespace", false, &["ns"]);
pub const RESOURCE_QUOTAS: Resource = core("resourcequotas", "ResourceQuota", true, &["quota"]);
pub const SECRETS: Resource = core("secrets", "Secret", true, &[]);
pub const CONFIG_MAPS: Resource = core("configmaps", "ConfigMap", true, &["cm"]);
pub const SERVICES: Resource = core("services", "Service", true, &["svc"]);
pub const SERVICE_ACCOUNTS: Resource = core("serviceaccounts", "ServiceAccount", true, &["sa"]);
pub const LEASES: Resource = Resource {
    id: "leases.coordination.k8s.io",
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
    kind: "Lease",
    namespaced: true,
    short_names: &[],
};
pub const MUTATING_WEBHOOK_CONFIGURATIONS: Resource = Resource {
    id: "mutatingwebhookconfigurations.admissionregistration.k8s.io",
    group: "admissionregistration.k8s.io",
    version: "v1",
    plural: "mutatingwebhookconfigurations",
    kind: "MutatingWebhookConfiguration",
    namespaced: false,
    short_names: &[],
};

const fn core(
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
) -> Resource {
    Resource {
        id: plural,
        group: "",
        version: "v1",
        plural,
        kind,
        namespaced,
        short_names,
    }
}

/// Every served resource.
pub const ALL: [Resource; 11] = [
    PODS,
    NODES,
    EVENTS,
    NAMESPACES,
    RESOURCE_QUOTAS,
    SECRETS,
    CONFIG_MAPS,
    SERVICES,
    SERVICE_ACCOUNTS,
    LEASES,
    MUTATING_WEBHOOK_CONFIGURATIONS,
];

/// Looks a resource up by group, version and plural.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<Resource> {
    ALL.iter()
        .copied()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}
