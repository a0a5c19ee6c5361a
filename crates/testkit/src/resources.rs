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

pub const PODS: Resource = core("pods", "Pod", true);
pub const NODES: Resource = core("nodes", "Node", false);
pub const EVENTS: Resource = core("events", "Event", true);
pub const NAMESPACES: Resource = core("namespaces", "Namespace", false);
pub const RESOURCE_QUOTAS: Resource = core("resourcequotas", "ResourceQuota", true);
pub const LEASES: Resource = Resource {
    id: "leases.coordination.k8s.io",
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
    kind: "Lease",
    namespaced: true,
};

const fn core(plural: &'static str, kind: &'static str, namespaced: bool) -> Resource {
    Resource {
        id: plural,
        group: "",
        version: "v1",
        plural,
        kind,
        namespaced,
    }
}

/// Every served resource.
pub const ALL: [Resource; 6] = [PODS, NODES, EVENTS, NAMESPACES, RESOURCE_QUOTAS, LEASES];

/// Looks a resource up by group, version and plural.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<Resource> {
    ALL.iter()
        .copied()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}
