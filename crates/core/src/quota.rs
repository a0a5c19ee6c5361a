//! ResourceQuota on device memory and cores (`docs/protocol.md#resourcequota`).
//!
//! A namespace limits what its pods hold with `spec.hard["limits.<resource>"]` of its
//! ResourceQuota objects, for each vendor's memory and core resources
//! (`limits.nvidia.com/gpumem`, `limits.nvidia.com/gpucores`). [`QuotaBook`] keeps the hard
//! limits of every object (the tightest object wins, as every object applies); the ledger
//! keeps what each namespace holds ([`crate::ledger::Ledger::namespace_use`]); a pod's fit
//! checks its own usage against the [`QuotaBudget`] made of both.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ResourceQuota;

use crate::accounting::collapsed_totals;
use crate::request::{PodRequests, plain_integer};
use crate::vendor::{Vendor, VendorRegistry};

/// The prefix of the `spec.hard` keys HAMi reads.
pub const LIMITS_PREFIX: &str = "limits.";

/// The resources of a vendor a ResourceQuota can limit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuotaResources {
    /// The memory resource (MiB per device, as requested); `None`: not limited.
    pub memory: Option<String>,
    /// The core resource (percent of a device); `None`: not limited.
    pub cores: Option<String>,
    /// Requests are counted in MiB × this factor, so a memory limit is too (0 is read as
    /// 1, in [`QuotaBook::budget`]).
    pub memory_factor: u32,
}

impl QuotaResources {
    /// A vendor's memory and core resources as its config names them; an empty name (a
    /// vendor configured without that resource) is not limited. HAMi counts a quota on
    /// the memory and core resources of every family it serves
    /// (`docs/protocol.md#resourcequota`).
    pub fn named(memory: &str, cores: &str, memory_factor: u32) -> Self {
        let named = |n: &str| Some(n.trim().to_string()).filter(|n| !n.is_empty());
        QuotaResources {
            memory: named(memory),
            cores: named(cores),
            memory_factor,
        }
    }
}

/// What the pods of a namespace hold of one vendor's devices, collapsed per pod as device
/// usage is (`docs/protocol.md#resources-and-requests`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NamespaceUse {
    /// MiB.
    pub memory: u64,
    /// Percent of one device.
    pub cores: u64,
}

/// A `spec.hard` value that is not a plain non-negative integer: left out, as HAMi leaves
/// out values it cannot read as an integer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "ResourceQuota {namespace}/{name}: spec.hard[{key}]={value:?} is not a plain non-negative integer; this limit is ignored"
)]
pub struct QuotaIssue {
    pub namespace: String,
    pub name: String,
    pub key: String,
    pub value: String,
}

/// The hard limits namespaces set on the resources some vendor tracks.
#[derive(Debug, Clone, Default)]
pub struct QuotaBook {
    /// Resource names (without `limits.`) of every vendor's memory and cores.
    tracked: BTreeSet<String>,
    /// (namespace, object name) → resource → hard limit.
    objects: BTreeMap<(String, String), BTreeMap<String, u64>>,
    /// (namespace, resource) → the smallest limit of the namespace's objects.
    effective: BTreeMap<(String, String), u64>,
    /// The unusable values last reported per object: the quota controller rewrites an
    /// object's status on every pod change, and the same issue is worth one report.
    reported: BTreeMap<(String, String), Vec<QuotaIssue>>,
}

impl QuotaBook {
    /// A book for the resources the registry's vendors track.
    pub fn new(registry: &VendorRegistry) -> Self {
        let tracked = registry
            .vendors()
            .iter()
            .flat_map(|v| {
                let r = v.quota_resources();
                [r.memory, r.cores]
            })
            .flatten()
            .collect();
        QuotaBook {
            tracked,
            ..QuotaBook::default()
        }
    }

    /// Records (or replaces) a ResourceQuota object's limits; returns the values it had to
    /// leave out, unless the last apply of the object reported the same.
    pub fn apply(&mut self, quota: &ResourceQuota) -> Vec<QuotaIssue> {
        let namespace = quota.metadata.namespace.clone().unwrap_or_default();
        let name = quota.metadata.name.clone().unwrap_or_default();
        let mut issues = Vec::new();
        let mut limits = BTreeMap::new();
        let hard = quota.spec.as_ref().and_then(|s| s.hard.as_ref());
        for (key, value) in hard.into_iter().flatten() {
            let Some(resource) = key
                .strip_prefix(LIMITS_PREFIX)
                .filter(|r| self.tracked.contains(*r))
            else {
                continue;
            };
            match plain_integer(value).and_then(|v| u64::try_from(v).ok()) {
                Some(v) => {
                    limits.insert(resource.to_string(), v);
                }
                None => issues.push(QuotaIssue {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    key: key.clone(),
                    value: value.0.clone(),
                }),
            }
        }
        let key = (namespace.clone(), name);
        let new_issues = if issues.is_empty() {
            self.reported.remove(&key);
            false
        } else if self.reported.get(&key) == Some(&issues) {
            false
        } else {
            self.reported.insert(key.clone(), issues.clone());
            true
        };
        let before = if limits.is_empty() {
            self.objects.remove(&key)
        } else {
            self.objects.insert(key, limits.clone())
        };
        let touched: BTreeSet<String> = before
            .into_iter()
            .flat_map(BTreeMap::into_keys)
            .chain(limits.into_keys())
            .collect();
        for resource in touched {
            self.recompute(&namespace, &resource);
        }
        if new_issues { issues } else { Vec::new() }
    }

    /// Forgets a ResourceQuota object.
    pub fn remove(&mut self, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        self.reported.remove(&key);
        if let Some(limits) = self.objects.remove(&key) {
            for resource in limits.keys() {
                self.recompute(namespace, resource);
            }
        }
    }

    /// After a relist: forgets the objects that were not listed.
    pub fn retain(&mut self, listed: &BTreeSet<(String, String)>) {
        let gone: Vec<(String, String)> = self
            .objects
            .keys()
            .filter(|k| !listed.contains(*k))
            .cloned()
            .collect();
        for (namespace, name) in gone {
            self.remove(&namespace, &name);
        }
    }

    fn recompute(&mut self, namespace: &str, resource: &str) {
        let smallest = self
            .objects
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .filter_map(|(_, limits)| limits.get(resource).copied())
            .min();
        let key = (namespace.to_string(), resource.to_string());
        match smallest {
            Some(v) => {
                self.effective.insert(key, v);
            }
            None => {
                self.effective.remove(&key);
            }
        }
    }

    /// The namespace's limit on `resource` (the tightest of its objects), if any.
    pub fn limit(&self, namespace: &str, resource: &str) -> Option<u64> {
        self.effective
            .get(&(namespace.to_string(), resource.to_string()))
            .copied()
    }

    /// Whether any limit is set in the namespace.
    pub fn limits_namespace(&self, namespace: &str) -> bool {
        self.effective
            .range((namespace.to_string(), String::new())..)
            .next()
            .is_some_and(|((ns, _), _)| ns == namespace)
    }

    /// Every limit in force: (namespace, resource, limit), sorted.
    pub fn limits(&self) -> impl Iterator<Item = (&str, &str, u64)> {
        self.effective
            .iter()
            .map(|((ns, r), v)| (ns.as_str(), r.as_str(), *v))
    }

    /// The budget the namespace's limits leave a pod of `vendor`, given what the
    /// namespace's pods hold (`used`); `None` when no limit applies.
    pub fn budget(
        &self,
        namespace: &str,
        vendor: &dyn Vendor,
        used: NamespaceUse,
    ) -> Option<QuotaBudget> {
        if !self.limits_namespace(namespace) {
            return None;
        }
        let resources = vendor.quota_resources();
        let factor = u64::from(resources.memory_factor.max(1));
        let limit = |resource: &Option<String>, used: u64, factor: u64| {
            let resource = resource.as_deref()?;
            self.limit(namespace, resource).map(|hard| QuotaLimit {
                resource: resource.into(),
                used,
                hard: hard.saturating_mul(factor),
            })
        };
        let memory = limit(&resources.memory, used.memory, factor);
        let cores = limit(&resources.cores, used.cores, 1);
        (memory.is_some() || cores.is_some()).then(|| QuotaBudget {
            namespace: namespace.into(),
            memory,
            cores,
        })
    }
}

/// What a pod alone asks of a vendor's quota resources, as HAMi's webhook counts it:
/// memory × count and cores × count per container, regular init containers at their peak
/// against the app containers' sum (sidecars beside both). Memory asked as a percentage
/// counts 0 here: its MiB depend on the device, known only at the fit.
pub fn pod_request(requests: &PodRequests, vendor: &str) -> NamespaceUse {
    let kinds: Vec<_> = requests.containers.iter().map(|c| c.kind).collect();
    // One shared key: the collapse then takes max(init peak, app sum) over the pod.
    let entries = requests
        .containers
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.by_vendor.get(vendor).map(|r| (i, r)))
        .map(|(i, r)| {
            let count = u64::from(r.count);
            (
                i,
                0u8,
                u64::from(r.mem_mib) * count,
                u64::from(r.cores) * count,
            )
        });
    let (memory, cores) = collapsed_totals(entries, &kinds);
    NamespaceUse { memory, cores }
}

/// One limited resource of a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaLimit {
    /// The resource name (`nvidia.com/gpumem`).
    pub resource: Arc<str>,
    /// What the namespace's pods hold.
    pub used: u64,
    /// The hard limit, in the unit requests are counted in (memory: × the memory factor).
    pub hard: u64,
}

/// What a namespace's limits leave for one vendor's devices, for a pod's fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaBudget {
    pub namespace: Arc<str>,
    pub memory: Option<QuotaLimit>,
    pub cores: Option<QuotaLimit>,
}

impl QuotaBudget {
    /// Whether a pod taking `memory` MiB and `cores` percent in all fits the namespace's
    /// limits (HAMi's order: memory, then cores; an explicit 0 admits nothing).
    pub fn admit(&self, memory: u64, cores: u64) -> Result<(), QuotaRefusal> {
        for (limit, requested) in [(&self.memory, memory), (&self.cores, cores)] {
            if let Some(l) = limit
                && l.used.saturating_add(requested) > l.hard
            {
                return Err(QuotaRefusal {
                    namespace: self.namespace.clone(),
                    resource: l.resource.clone(),
                    used: l.used,
                    requested,
                    hard: l.hard,
                });
            }
        }
        Ok(())
    }
}

/// Why a pod exceeds its namespace's quota: the numbers an operator needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaRefusal {
    pub namespace: Arc<str>,
    /// The resource name (`nvidia.com/gpumem`).
    pub resource: Arc<str>,
    pub used: u64,
    pub requested: u64,
    pub hard: u64,
}

impl fmt::Display for QuotaRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "namespace {}: {LIMITS_PREFIX}{} used {} + requested {} > hard limit {}",
            self.namespace, self.resource, self.used, self.requested, self.hard
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DeviceConfig;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn registry() -> VendorRegistry {
        VendorRegistry::from_config(&DeviceConfig::default())
    }

    fn quota(ns: &str, name: &str, hard: &[(&str, &str)]) -> ResourceQuota {
        ResourceQuota {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::ResourceQuotaSpec {
                hard: Some(
                    hard.iter()
                        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn tracks_only_limits_of_vendor_resources() {
        let mut book = QuotaBook::new(&registry());
        let issues = book.apply(&quota(
            "a",
            "q",
            &[
                ("limits.nvidia.com/gpumem", "8192"),
                ("requests.nvidia.com/gpumem", "1"),
                ("limits.cpu", "4"),
                ("limits.nvidia.com/gpucores", "200"),
            ],
        ));
        assert!(issues.is_empty());
        assert_eq!(
            book.limits().collect::<Vec<_>>(),
            vec![
                ("a", "nvidia.com/gpucores", 200),
                ("a", "nvidia.com/gpumem", 8192)
            ]
        );
        assert_eq!(book.limit("a", "nvidia.com/gpumem"), Some(8192));
        assert_eq!(book.limit("b", "nvidia.com/gpumem"), None);
    }

    /// Every object applies, so the tightest wins (HAMi's QuotaManager keeps limits per
    /// object for the same reason); removing it brings the other back.
    #[test]
    fn the_smallest_limit_of_several_objects_applies() {
        let mut book = QuotaBook::new(&registry());
        book.apply(&quota("a", "big", &[("limits.nvidia.com/gpumem", "8000")]));
        book.apply(&quota(
            "a",
            "small",
            &[("limits.nvidia.com/gpumem", "3000")],
        ));
        assert_eq!(book.limit("a", "nvidia.com/gpumem"), Some(3000));
        book.remove("a", "small");
        assert_eq!(book.limit("a", "nvidia.com/gpumem"), Some(8000));
        // An update that drops the resource releases it.
        book.apply(&quota("a", "big", &[("limits.cpu", "1")]));
        assert_eq!(book.limit("a", "nvidia.com/gpumem"), None);
        assert!(!book.limits_namespace("a"));
    }

    #[test]
    fn unreadable_values_are_reported_and_left_out() {
        let mut book = QuotaBook::new(&registry());
        let issues = book.apply(&quota(
            "a",
            "q",
            &[
                ("limits.nvidia.com/gpumem", "8Gi"),
                ("limits.nvidia.com/gpucores", "50"),
            ],
        ));
        assert_eq!(issues.len(), 1);
        assert_eq!(
            issues[0].to_string(),
            "ResourceQuota a/q: spec.hard[limits.nvidia.com/gpumem]=\"8Gi\" is not a plain non-negative integer; this limit is ignored"
        );
        assert_eq!(book.limit("a", "nvidia.com/gpumem"), None);
        assert_eq!(book.limit("a", "nvidia.com/gpucores"), Some(50));
        // The same object again (a status update): reported once.
        let again = quota(
            "a",
            "q",
            &[
                ("limits.nvidia.com/gpumem", "8Gi"),
                ("limits.nvidia.com/gpucores", "50"),
            ],
        );
        assert!(book.apply(&again).is_empty());
        assert_eq!(book.limit("a", "nvidia.com/gpucores"), Some(50));
    }

    #[test]
    fn relist_forgets_objects_not_listed() {
        let mut book = QuotaBook::new(&registry());
        book.apply(&quota("a", "q", &[("limits.nvidia.com/gpumem", "1")]));
        book.apply(&quota("b", "q", &[("limits.nvidia.com/gpumem", "2")]));
        book.retain(&BTreeSet::from([("b".to_string(), "q".to_string())]));
        assert_eq!(book.limit("a", "nvidia.com/gpumem"), None);
        assert_eq!(book.limit("b", "nvidia.com/gpumem"), Some(2));
    }

    /// HAMi's webhook count: Σ app (memory × count) against the largest init container.
    #[test]
    fn a_pods_own_request_counts_init_containers_at_their_peak() {
        use crate::request::ContainerKind;
        use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
        let c = |name: &str, limits: &[(&str, &str)]| Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                limits: Some(
                    limits
                        .iter()
                        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pod = Pod {
            spec: Some(PodSpec {
                init_containers: Some(vec![c(
                    "init",
                    &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "9000")],
                )]),
                containers: vec![
                    c(
                        "a",
                        &[
                            ("nvidia.com/gpu", "2"),
                            ("nvidia.com/gpumem", "3000"),
                            ("nvidia.com/gpucores", "10"),
                        ],
                    ),
                    c(
                        "b",
                        &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "1000")],
                    ),
                    c(
                        "pct",
                        &[
                            ("nvidia.com/gpu", "1"),
                            ("nvidia.com/gpumem-percentage", "50"),
                        ],
                    ),
                ],
                ..Default::default()
            }),
            ..Default::default()
        };
        let requests = PodRequests::from_pod(&pod, &registry()).unwrap();
        assert_eq!(requests.containers[0].kind, ContainerKind::Init);
        // Apps: 2 × 3000 + 1000 (+ 0 for the percentage) = 7000 < init 9000; cores 20.
        assert_eq!(
            pod_request(&requests, "NVIDIA"),
            NamespaceUse {
                memory: 9000,
                cores: 20
            }
        );
        assert_eq!(pod_request(&requests, "MLU"), NamespaceUse::default());
    }

    #[test]
    fn budget_scales_memory_by_the_factor_and_an_explicit_zero_blocks() {
        let mut cfg = DeviceConfig::default();
        cfg.nvidia.memory_factor = 2;
        let registry = VendorRegistry::from_config(&cfg);
        let mut book = QuotaBook::new(&registry);
        book.apply(&quota(
            "a",
            "q",
            &[
                ("limits.nvidia.com/gpumem", "1000"),
                ("limits.nvidia.com/gpucores", "0"),
            ],
        ));
        let nvidia = registry.get("NVIDIA").unwrap();
        let used = NamespaceUse {
            memory: 500,
            cores: 0,
        };
        let budget = book.budget("a", nvidia.as_ref(), used).unwrap();
        assert_eq!(budget.memory.as_ref().unwrap().hard, 2000);
        assert_eq!(budget.admit(1500, 0), Ok(()));
        let refusal = budget.admit(1501, 0).unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "namespace a: limits.nvidia.com/gpumem used 500 + requested 1501 > hard limit 2000"
        );
        let refusal = budget.admit(10, 1).unwrap_err();
        assert_eq!(&*refusal.resource, "nvidia.com/gpucores");
        assert!(book.budget("b", nvidia.as_ref(), used).is_none());
    }
}
