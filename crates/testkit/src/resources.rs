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
    /// Categories (`kubectl get all` lists the `all` category).
    pub categories: &'static [&'static str],
    /// Subresources served for this resource.
    pub subresources: &'static [Subresource],
}

/// A served subresource (`pods/binding`, `nodes/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subresource {
    pub name: &'static str,
    /// Kind of the body it takes and answers with; `None`: the parent's kind.
    pub kind: Option<&'static str>,
    pub verbs: &'static [&'static str],
}

const STATUS: Subresource = Subresource {
    name: "status",
    kind: None,
    verbs: &["get", "patch", "update"],
};
const BINDING: Subresource = Subresource {
    name: "binding",
    kind: Some("Binding"),
    verbs: &["create"],
};

/// Every verb on a collection and its items; namespaces have no deletecollection,
/// as on the real server.
const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const NAMESPACE_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

impl Resource {
    /// `apiVersion` as objects carry it (`v1`, `coordination.k8s.io/v1`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The singular name (`pod`), as discovery reports it.
    pub fn singular(&self) -> String {
        self.kind.to_ascii_lowercase()
    }

    /// The verbs discovery advertises, all of which are served.
    pub fn verbs(&self) -> &'static [&'static str] {
        if self.id == NAMESPACES.id {
            NAMESPACE_VERBS
        } else {
            ALL_VERBS
        }
    }

    /// Whether `name` is a subresource served for this resource.
    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.iter().any(|s| s.name == name)
    }
}

pub const PODS: Resource = Resource {
    categories: &["all"],
    subresources: &[BINDING, STATUS],
    ..core("pods", "Pod", true, &["po"])
};
pub const NODES: Resource = Resource {
    subresources: &[STATUS],
    ..core("nodes", "Node", false, &["no"])
};
pub const EVENTS: Resource = core("events", "Event", true, &["ev"]);
pub const NAMESPACES: Resource = Resource {
    subresources: &[STATUS],
    ..core("namespaces", "Namespace", false, &["ns"])
};
pub const RESOURCE_QUOTAS: Resource = Resource {
    subresources: &[STATUS],
    ..core("resourcequotas", "ResourceQuota", true, &["quota"])
};
pub const SECRETS: Resource = core("secrets", "Secret", true, &[]);
pub const CONFIG_MAPS: Resource = core("configmaps", "ConfigMap", true, &["cm"]);
pub const SERVICES: Resource = Resource {
    categories: &["all"],
    subresources: &[STATUS],
    ..core("services", "Service", true, &["svc"])
};
pub const SERVICE_ACCOUNTS: Resource = core("serviceaccounts", "ServiceAccount", true, &["sa"]);
pub const LEASES: Resource = Resource {
    id: "leases.coordination.k8s.io",
    group: "coordination.k8s.io",
    ..core("leases", "Lease", true, &[])
};
pub const MUTATING_WEBHOOK_CONFIGURATIONS: Resource = Resource {
    id: "mutatingwebhookconfigurations.admissionregistration.k8s.io",
    group: "admissionregistration.k8s.io",
    ..core(
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        false,
        &[],
    )
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
        categories: &[],
        subresources: &[],
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

/// The API groups served besides the core group, in the order discovery lists them.
pub fn groups() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in ALL.iter().filter(|r| !r.group.is_empty()) {
        if !out.contains(&r.group) {
            out.push(r.group);
        }
    }
    out
}

/// The resources of one group/version.
pub fn in_group_version(group: &str, version: &str) -> impl Iterator<Item = &'static Resource> {
    ALL.iter()
        .filter(move |r| r.group == group && r.version == version)
}

/// Looks a resource up by an object's `apiVersion` and `kind`.
pub fn by_kind(api_version: &str, kind: &str) -> Option<Resource> {
    ALL.iter()
        .copied()
        .find(|r| r.api_version() == api_version && r.kind == kind)
}
