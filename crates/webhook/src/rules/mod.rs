//! The admission rules as a pure function of a Pod (`docs/protocol.md#webhook`), so they can be
//! tested without HTTP.

pub mod container;
pub mod owned;

use hami_core::config::DeviceConfig;
use hami_core::quota::{LIMITS_PREFIX, NamespaceUse, pod_request};
use hami_core::request::PodRequests;
use hami_core::vendor::VendorRegistry;
use hami_k8s::quotas::QuotaCache;
use k8s_openapi::api::core::v1::Pod;

/// The scheduler kube-apiserver fills in when a pod names none.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// What to do with a pod that arrives carrying scheduler-owned annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OwnedAnnotationPolicy {
    /// Refuse the pod, naming the keys.
    #[default]
    Deny,
    /// Remove the keys and admit the pod with a warning.
    Strip,
}

/// The rule switches.
#[derive(Debug, Clone)]
pub struct RuleConfig {
    /// Written into `spec.schedulerName` of pods that ask for managed devices; empty
    /// leaves the field alone.
    pub scheduler_name: String,
    /// Take over pods that name `default-scheduler` (the API server's default).
    pub overwrite_default_scheduler: bool,
    pub owned_annotations: OwnedAnnotationPolicy,
    /// Refuse pods asking for managed devices when any container is privileged (a
    /// privileged container sees every GPU on the node, bypassing the split).
    pub deny_privileged: bool,
    pub devices: DeviceConfig,
}

impl Default for RuleConfig {
    fn default() -> Self {
        RuleConfig {
            scheduler_name: "hami-scheduler".into(),
            overwrite_default_scheduler: true,
            owned_annotations: OwnedAnnotationPolicy::Deny,
            deny_privileged: true,
            devices: DeviceConfig::default(),
        }
    }
}

/// Which rule refused a pod; a bounded label for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyRule {
    NoContainers,
    OwnedAnnotations,
    InvalidResource,
    Privileged,
    NodeName,
    ResourceQuota,
}

impl DenyRule {
    pub fn as_str(self) -> &'static str {
        match self {
            DenyRule::NoContainers => "no_containers",
            DenyRule::OwnedAnnotations => "scheduler_owned_annotations",
            DenyRule::InvalidResource => "invalid_resource",
            DenyRule::Privileged => "privileged",
            DenyRule::NodeName => "node_name",
            DenyRule::ResourceQuota => "resource_quota",
        }
    }

    /// The status code and reason put in the AdmissionReview response.
    pub fn status(self) -> (u16, &'static str) {
        match self {
            DenyRule::InvalidResource | DenyRule::NoContainers => (400, "BadRequest"),
            _ => (403, "Forbidden"),
        }
    }
}

/// A refusal with the message the user sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub rule: DenyRule,
    pub message: String,
}

/// The decision about one pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Admitted as `pod` (equal to the input when nothing changed).
    Admit {
        pod: Box<Pod>,
        /// Whether the pod asks for devices this webhook manages.
        managed: bool,
        warnings: Vec<String>,
    },
    /// Left alone: it belongs to another scheduler.
    Skip {
        reason: String,
    },
    Deny(Denial),
}

/// The rules with their configuration.
#[derive(Debug, Clone)]
pub struct Rules {
    cfg: RuleConfig,
    registry: VendorRegistry,
    /// The namespaces' ResourceQuota limits, when the webhook watches them.
    quotas: Option<QuotaCache>,
}

impl Rules {
    pub fn new(cfg: RuleConfig) -> Self {
        let registry = VendorRegistry::from_config(&cfg.devices);
        Rules {
            cfg,
            registry,
            quotas: None,
        }
    }

    /// The vendors the rules read requests with.
    pub fn registry(&self) -> &VendorRegistry {
        &self.registry
    }

    /// Also refuses pods that alone exceed their namespace's quota on device resources
    /// (`docs/protocol.md#webhook`), as the limits in `quotas` say once listed.
    pub fn with_quotas(mut self, quotas: QuotaCache) -> Self {
        self.quotas = Some(quotas);
        self
    }

    pub fn config(&self) -> &RuleConfig {
        &self.cfg
    }

    /// Decides about a pod being created.
    pub fn review(&self, original: &Pod) -> Verdict {
        let deny = |rule, message: String| Verdict::Deny(Denial { rule, message });
        let mut pod = original.clone();
        let mut warnings = Vec::new();

        let owned = owned::find(
            pod.metadata.annotations.as_ref(),
            pod.metadata.labels.as_ref(),
            &self.registry,
        );
        // Checked before the scheduler test: the device plugin and the usage ledger
        // trust these keys on any pod, whoever schedules it.
        if !owned.is_empty() {
            match self.cfg.owned_annotations {
                OwnedAnnotationPolicy::Deny => {
                    return deny(
                        DenyRule::OwnedAnnotations,
                        format!(
                            "pod sets {} which only hami-scheduler may write; remove them from the pod (or its template)",
                            owned.describe()
                        ),
                    );
                }
                OwnedAnnotationPolicy::Strip => {
                    if let Some(a) = pod.metadata.annotations.as_mut() {
                        a.retain(|k, _| !owned.annotations.contains(k));
                    }
                    if let Some(l) = pod.metadata.labels.as_mut() {
                        l.retain(|k, _| !owned.labels.contains(k));
                    }
                    warnings.push(format!(
                        "removed {} (written only by hami-scheduler)",
                        owned.describe()
                    ));
                }
            }
        }

        let Some(spec) = pod.spec.as_mut() else {
            return deny(DenyRule::NoContainers, "pod has no containers".into());
        };
        if spec.containers.is_empty() {
            return deny(DenyRule::NoContainers, "pod has no containers".into());
        }

        if let Some(other) = self.foreign_scheduler(spec.scheduler_name.as_deref()) {
            if warnings.is_empty() {
                return Verdict::Skip {
                    reason: format!("pod is for scheduler {other}"),
                };
            }
            return Verdict::Admit {
                pod: Box::new(pod),
                managed: false,
                warnings,
            };
        }

        // Every vendor's rules on every container, init containers first
        // (docs/vendors.md#admission).
        let pod_annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let containers = spec
            .init_containers
            .iter_mut()
            .flatten()
            .chain(spec.containers.iter_mut());
        let mut uses_gpu = false;
        let mut runtime_class: Option<String> = None;
        for c in containers {
            for vendor in self.registry.vendors() {
                match vendor.mutate_admission(c, &pod_annotations) {
                    Ok(a) => {
                        uses_gpu |= a.uses;
                        if runtime_class.is_none() {
                            runtime_class = a.runtime_class;
                        }
                    }
                    Err(message) => return deny(DenyRule::InvalidResource, message),
                }
            }
        }

        // hami-core reads the requests the scheduler will see; what it refuses here
        // would fail later at filter time with a less useful message.
        let requests = match PodRequests::from_pod(&pod, &self.registry) {
            Ok(r) => r,
            Err(e) => return deny(DenyRule::InvalidResource, e.to_string()),
        };
        let managed = uses_gpu || !requests.is_empty();
        let Some(spec) = pod.spec.as_mut() else {
            return deny(DenyRule::NoContainers, "pod has no containers".into());
        };

        if managed {
            if self.cfg.deny_privileged
                && let Some(c) = spec
                    .init_containers
                    .iter()
                    .flatten()
                    .chain(spec.containers.iter())
                    .find(|c| container::is_privileged(c))
            {
                return deny(
                    DenyRule::Privileged,
                    format!(
                        "container {} is privileged; a pod asking for shared GPUs must not run privileged containers (they see every GPU on the node)",
                        c.name
                    ),
                );
            }
            if spec.runtime_class_name.is_none() {
                spec.runtime_class_name = runtime_class;
            }
            if !self.cfg.scheduler_name.is_empty() {
                spec.scheduler_name = Some(self.cfg.scheduler_name.clone());
            }
            if let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
                return deny(
                    DenyRule::NodeName,
                    format!(
                        "pod has node assigned (spec.nodeName={node}); pods asking for shared GPUs must be placed by {}",
                        self.scheduler_label()
                    ),
                );
            }
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            if let Some(message) = self.exceeds_quota(namespace, &requests) {
                return deny(DenyRule::ResourceQuota, message);
            }
        }
        Verdict::Admit {
            pod: Box::new(pod),
            managed,
            warnings,
        }
    }

    /// HAMi's quota pre-check: a pod that alone asks for more than its namespace's hard
    /// limit can never be placed. What the namespace's other pods hold is the scheduler's
    /// to judge (at /filter); before the limits are listed nothing is refused here.
    fn exceeds_quota(&self, namespace: &str, requests: &PodRequests) -> Option<String> {
        let quotas = self.quotas.as_ref().filter(|q| q.synced())?;
        let book = quotas.read();
        for key in requests.vendors() {
            let Some(budget) = self
                .registry
                .get(key)
                .and_then(|v| book.budget(namespace, v.as_ref(), NamespaceUse::default()))
            else {
                continue;
            };
            let asked = pod_request(requests, key);
            if let Err(r) = budget.admit(asked.memory, asked.cores) {
                return Some(format!(
                    "exceeding resource quota: the pod asks for {} of {LIMITS_PREFIX}{}, above the hard limit {} of namespace {}",
                    r.requested, r.resource, r.hard, r.namespace
                ));
            }
        }
        None
    }

    /// The other scheduler's name when the pod is not ours to handle.
    fn foreign_scheduler<'a>(&self, name: Option<&'a str>) -> Option<&'a str> {
        let name = name.filter(|n| !n.is_empty())?;
        if name == self.cfg.scheduler_name {
            return None;
        }
        if name == DEFAULT_SCHEDULER && self.cfg.overwrite_default_scheduler {
            return None;
        }
        Some(name)
    }

    fn scheduler_label(&self) -> &str {
        if self.cfg.scheduler_name.is_empty() {
            "the GPU scheduler"
        } else {
            &self.cfg.scheduler_name
        }
    }
}
