//! Reading device requests out of a Pod spec.
//!
//! Quantities are taken from `limits` first, then `requests`, as HAMi does. Device
//! quantities are counts, MiB or percents: only plain integers are accepted, so a
//! `16Gi` memory request is refused with a message instead of being read as bytes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::model::ContainerDeviceRequest;
use crate::pod;
use crate::vendor::VendorRegistry;

/// Why a pod's device request could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error(
        "container {container}: resource {resource}={value:?} must be a plain non-negative integer (no unit suffix)"
    )]
    NotAnInteger {
        container: String,
        resource: String,
        value: String,
    },
    #[error("container {container}: resource {resource}={value} is too large (at most {max})")]
    TooLarge {
        container: String,
        resource: String,
        value: i64,
        max: i64,
    },
    /// A value the vendor cannot serve (an odd Ascend 910C count, a memory no template
    /// holds, …); the reason is the vendor's.
    #[error("container {container}: resource {resource}={value}: {reason}")]
    Unservable {
        container: String,
        resource: String,
        value: String,
        reason: String,
    },
}

/// Where a container runs in the pod's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    /// A regular init container: runs alone, before the app containers.
    Init,
    /// An init container with `restartPolicy: Always`: runs beside everything after it.
    Sidecar,
    App,
}

impl ContainerKind {
    /// The kind of one of the pod's init containers.
    pub fn of_init(init_container: &Container) -> Self {
        if pod::is_sidecar(init_container) {
            ContainerKind::Sidecar
        } else {
            ContainerKind::Init
        }
    }
}

/// The device requests of one container, per vendor (vendor key → request).
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerRequests {
    pub name: String,
    pub kind: ContainerKind,
    pub by_vendor: BTreeMap<String, ContainerDeviceRequest>,
}

/// The device requests of a whole pod, init containers first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodRequests {
    pub containers: Vec<ContainerRequests>,
}

impl PodRequests {
    /// Reads every container of `pod` through every vendor of `registry`.
    pub fn from_pod(pod: &Pod, registry: &VendorRegistry) -> Result<Self, RequestError> {
        let mut containers = Vec::new();
        let annotations = pod.metadata.annotations.as_ref().unwrap_or(&NO_ANNOTATIONS);
        if let Some(spec) = &pod.spec {
            for c in spec.init_containers.iter().flatten() {
                containers.push(container_requests(
                    c,
                    ContainerKind::of_init(c),
                    registry,
                    annotations,
                )?);
            }
            for c in &spec.containers {
                containers.push(container_requests(
                    c,
                    ContainerKind::App,
                    registry,
                    annotations,
                )?);
            }
        }
        Ok(PodRequests { containers })
    }

    /// True when no container asks for any managed device.
    pub fn is_empty(&self) -> bool {
        self.containers.iter().all(|c| c.by_vendor.is_empty())
    }

    /// Vendor keys any container asks for, sorted.
    pub fn vendors(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .containers
            .iter()
            .flat_map(|c| c.by_vendor.keys().map(String::as_str))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Number of init containers (regular and sidecar) at the front of `containers`.
    pub fn init_count(&self) -> usize {
        self.containers
            .iter()
            .take_while(|c| c.kind != ContainerKind::App)
            .count()
    }
}

/// A pod without annotations.
static NO_ANNOTATIONS: BTreeMap<String, String> = BTreeMap::new();

fn container_requests(
    c: &Container,
    kind: ContainerKind,
    registry: &VendorRegistry,
    pod_annotations: &BTreeMap<String, String>,
) -> Result<ContainerRequests, RequestError> {
    let mut by_vendor = BTreeMap::new();
    // Only vendors that read one of the container's resources can find a request.
    let named = c.resources.iter().flat_map(|r| {
        r.limits
            .iter()
            .flatten()
            .chain(r.requests.iter().flatten())
            .map(|(k, _)| k)
    });
    for vendor in registry.vendors_reading(named) {
        if let Some(req) = vendor.container_request(c, pod_annotations)? {
            by_vendor.insert(vendor.common_word().to_string(), req);
        }
    }
    Ok(ContainerRequests {
        name: c.name.clone(),
        kind,
        by_vendor,
    })
}

/// The quantity of `resource` for a container: limits first, then requests.
pub fn resource_quantity<'a>(c: &'a Container, resource: &str) -> Option<&'a Quantity> {
    let res = c.resources.as_ref()?;
    res.limits
        .as_ref()
        .and_then(|l| l.get(resource))
        .or_else(|| res.requests.as_ref().and_then(|r| r.get(resource)))
}

/// Parses a device quantity as a plain integer. Unit suffixes (`Gi`, `k`, `m`) and
/// decimals are refused: device quantities are counts, MiB or percents.
pub fn plain_integer(q: &Quantity) -> Option<i64> {
    let s = q.0.trim();
    let digits = s.strip_prefix('+').unwrap_or(s);
    let (neg, digits) = match digits.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, digits),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: i64 = digits.parse().ok()?;
    Some(if neg { -v } else { v })
}

/// Reads an integer device resource, with a typed error naming the container.
pub fn integer_resource(c: &Container, resource: &str) -> Result<Option<i64>, RequestError> {
    match resource_quantity(c, resource) {
        None => Ok(None),
        Some(q) => plain_integer(q)
            .map(Some)
            .ok_or_else(|| RequestError::NotAnInteger {
                container: c.name.clone(),
                resource: resource.to_string(),
                value: q.0.clone(),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_integers_only() {
        assert_eq!(plain_integer(&Quantity("3000".into())), Some(3000));
        assert_eq!(plain_integer(&Quantity("+7".into())), Some(7));
        assert_eq!(plain_integer(&Quantity("-5".into())), Some(-5));
        for bad in ["16Gi", "16.0Gi", "1k", "1.5", "", "abc", "500m", "1e3"] {
            assert_eq!(plain_integer(&Quantity(bad.into())), None, "{bad}");
        }
        assert_eq!(
            plain_integer(&Quantity("99999999999999999999999".into())),
            None
        );
    }
}
