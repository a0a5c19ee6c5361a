//! CPU and memory: Kubernetes quantities, a pod's requests as kube-scheduler counts them, and
//! a node's allocatable amounts (`docs/extender.md#cpu-and-memory`).
//!
//! The placement engine's `frag` policies need each node's free CPU and memory; the
//! extender keeps them from its node and pod watches with these rules.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::pod;

/// The CPU resource name.
pub const CPU: &str = "cpu";
/// The memory resource name.
pub const MEMORY: &str = "memory";

/// An amount of CPU and memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Resources {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
}

impl Resources {
    pub const ZERO: Resources = Resources {
        cpu_milli: 0,
        memory_bytes: 0,
    };

    pub fn new(cpu_milli: i64, memory_bytes: i64) -> Self {
        Resources {
            cpu_milli,
            memory_bytes,
        }
    }

    /// Memory in MiB, rounded down (the unit of the fragmentation measure).
    pub fn memory_mib(&self) -> i64 {
        self.memory_bytes.div_euclid(1 << 20)
    }

    pub fn saturating_add(self, o: Resources) -> Resources {
        Resources {
            cpu_milli: self.cpu_milli.saturating_add(o.cpu_milli),
            memory_bytes: self.memory_bytes.saturating_add(o.memory_bytes),
        }
    }

    pub fn saturating_sub(self, o: Resources) -> Resources {
        Resources {
            cpu_milli: self.cpu_milli.saturating_sub(o.cpu_milli),
            memory_bytes: self.memory_bytes.saturating_sub(o.memory_bytes),
        }
    }

    fn max(self, o: Resources) -> Resources {
        Resources {
            cpu_milli: self.cpu_milli.max(o.cpu_milli),
            memory_bytes: self.memory_bytes.max(o.memory_bytes),
        }
    }
}

/// A quantity that is not a valid Kubernetes quantity (or is negative).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {resource}={value:?} is not a valid non-negative quantity")]
pub struct QuantityError {
    /// Where it was read (`container app`, `pod overhead`, `node allocatable`).
    pub what: String,
    pub resource: String,
    pub value: String,
}

/// Parses a Kubernetes quantity (`<number><suffix>`: `500m`, `2`, `1.5Gi`, `128974848`,
/// `129M`, `1e3`) scaled by 10^`scale` and rounded up, as `Quantity.ScaledValue` does.
/// Values beyond `i64` saturate. `None` for anything else, negatives included.
pub fn parse_quantity(text: &str, scale: i32) -> Option<i64> {
    let s = text.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    let frac = frac.trim_end_matches('0');
    let (binary_pow, mut exp10) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        e if e.starts_with(['e', 'E']) => {
            let exp = &e[1..];
            let unsigned = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (0, exp.parse::<i32>().ok().filter(|x| x.abs() <= 1000)?)
        }
        _ => return None,
    };
    // Mantissa of every digit; exponent adjusted for the fraction.
    let all: String = whole.chars().chain(frac.chars()).collect();
    let all = all.trim_start_matches('0');
    if all.len() > 36 {
        // More significant digits than u128 holds with room to scale: saturate.
        return Some(i64::MAX);
    }
    let mantissa: u128 = if all.is_empty() { 0 } else { all.parse().ok()? };
    exp10 += scale - frac.len() as i32;
    let mut value = mantissa.checked_mul(1u128 << binary_pow);
    if exp10 >= 0 {
        for _ in 0..exp10 {
            value = value.and_then(|v| v.checked_mul(10));
        }
    } else if let Some(v) = value {
        let mut div: u128 = 1;
        let mut exact = true;
        for _ in 0..(-exp10) {
            match div.checked_mul(10) {
                Some(d) => div = d,
                None => {
                    // The divisor outgrew u128: the result is below 1.
                    exact = false;
                    break;
                }
            }
        }
        value = Some(if exact {
            v.div_ceil(div)
        } else {
            u128::from(v > 0)
        });
    }
    Some(value.map_or(i64::MAX, |v| i64::try_from(v).unwrap_or(i64::MAX)))
}

/// CPU of a quantity in milli-CPU, rounded up.
pub fn cpu_milli(q: &Quantity) -> Option<i64> {
    parse_quantity(&q.0, 3)
}

/// Memory of a quantity in bytes, rounded up.
pub fn memory_bytes(q: &Quantity) -> Option<i64> {
    parse_quantity(&q.0, 0)
}

/// CPU and memory of a resource list (missing = 0).
fn resources_of(
    list: Option<&BTreeMap<String, Quantity>>,
    what: impl Fn() -> String,
) -> Result<Resources, QuantityError> {
    let Some(list) = list else {
        return Ok(Resources::ZERO);
    };
    let read = |name: &str, parse: fn(&Quantity) -> Option<i64>| match list.get(name) {
        None => Ok(0),
        Some(q) => parse(q).ok_or_else(|| QuantityError {
            what: what(),
            resource: name.to_string(),
            value: q.0.clone(),
        }),
    };
    Ok(Resources {
        cpu_milli: read(CPU, cpu_milli)?,
        memory_bytes: read(MEMORY, memory_bytes)?,
    })
}

/// What a container requests: `requests`, and `limits` for a resource it has no request
/// for (the API server defaults the request to the limit; objects that did not pass it
/// read the same).
fn container_requests(c: &Container) -> Result<Resources, QuantityError> {
    let what = || format!("container {}", c.name);
    let res = c.resources.as_ref();
    let requests = resources_of(res.and_then(|r| r.requests.as_ref()), what)?;
    let limits = resources_of(res.and_then(|r| r.limits.as_ref()), what)?;
    let has = |name: &str| {
        res.and_then(|r| r.requests.as_ref())
            .is_some_and(|m| m.contains_key(name))
    };
    Ok(Resources {
        cpu_milli: if has(CPU) {
            requests.cpu_milli
        } else {
            limits.cpu_milli
        },
        memory_bytes: if has(MEMORY) {
            requests.memory_bytes
        } else {
            limits.memory_bytes
        },
    })
}

/// A pod's CPU and memory requests as kube-scheduler's NodeResourcesFit counts them: the
/// larger of the app containers' sum (sidecars included) and the largest init container
/// (with the sidecars started before it), plus the pod overhead. Pod-level requests
/// (`spec.resources`), where set, replace the containers' for that resource.
pub fn pod_requests(pod: &Pod) -> Result<Resources, QuantityError> {
    let Some(spec) = &pod.spec else {
        return Ok(Resources::ZERO);
    };
    let mut apps = Resources::ZERO;
    for c in &spec.containers {
        apps = apps.saturating_add(container_requests(c)?);
    }
    let mut sidecars = Resources::ZERO;
    let mut init_peak = Resources::ZERO;
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c)?;
        if pod::is_sidecar(c) {
            apps = apps.saturating_add(r);
            sidecars = sidecars.saturating_add(r);
            init_peak = init_peak.max(sidecars);
        } else {
            init_peak = init_peak.max(sidecars.saturating_add(r));
        }
    }
    let mut total = apps.max(init_peak);
    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let levels = resources_of(Some(pod_level), || "pod resources".to_string())?;
        if pod_level.contains_key(CPU) {
            total.cpu_milli = levels.cpu_milli;
        }
        if pod_level.contains_key(MEMORY) {
            total.memory_bytes = levels.memory_bytes;
        }
    }
    let overhead = resources_of(spec.overhead.as_ref(), || "pod overhead".to_string())?;
    Ok(total.saturating_add(overhead))
}

/// What a node that reports one of CPU and memory but not the other has of the other:
/// more than any pod asks for.
pub const UNREPORTED: i64 = i64::MAX / 4;

/// A node's allocatable CPU and memory (`status.allocatable`); `Ok(None)` when it reports
/// neither, [`UNREPORTED`] for the one it does not report.
pub fn node_allocatable(node: &Node) -> Result<Option<Resources>, QuantityError> {
    let Some(list) = node.status.as_ref().and_then(|s| s.allocatable.as_ref()) else {
        return Ok(None);
    };
    if !list.contains_key(CPU) && !list.contains_key(MEMORY) {
        return Ok(None);
    }
    let mut r = resources_of(Some(list), || "node allocatable".to_string())?;
    if !list.contains_key(CPU) {
        r.cpu_milli = UNREPORTED;
    }
    if !list.contains_key(MEMORY) {
        r.memory_bytes = UNREPORTED;
    }
    Ok(Some(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeStatus, PodSpec, ResourceRequirements};

    fn q(s: &str) -> Quantity {
        Quantity(s.to_string())
    }

    #[test]
    fn quantities_parse_like_kubernetes() {
        for (text, milli) in [
            ("500m", 500),
            ("2", 2000),
            ("1.5", 1500),
            ("0.1", 100),
            (".5", 500),
            ("1.0001", 1001),
            ("100u", 1),
            ("1k", 1_000_000),
            ("1e3", 1_000_000),
            ("+3", 3000),
            ("0", 0),
        ] {
            assert_eq!(cpu_milli(&q(text)), Some(milli), "{text}");
        }
        for (text, bytes) in [
            ("128974848", 128_974_848),
            ("129e6", 129_000_000),
            ("129M", 129_000_000),
            ("123Mi", 123 << 20),
            ("1.5Gi", 3 << 29),
            ("1Ki", 1024),
            ("1E", 1_000_000_000_000_000_000),
            ("20E", i64::MAX),
            ("1m", 1),
        ] {
            assert_eq!(memory_bytes(&q(text)), Some(bytes), "{text}");
        }
        for bad in [
            "", "-1", "1.2.3", "abc", "1Xi", "1e", "1ee3", "Gi", ".", "1 Gi",
        ] {
            assert_eq!(parse_quantity(bad, 0), None, "{bad:?}");
        }
    }

    fn container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        let list = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| kv.iter().map(|(k, v)| (k.to_string(), q(v))).collect())
        };
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: list(requests),
                limits: list(limits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sidecar(c: Container) -> Container {
        Container {
            restart_policy: Some("Always".into()),
            ..c
        }
    }

    #[test]
    fn pod_requests_follow_kube_scheduler() {
        let pod = |spec: PodSpec| Pod {
            spec: Some(spec),
            ..Default::default()
        };
        // Two app containers sum; a limit stands in for a missing request.
        let p = pod(PodSpec {
            containers: vec![
                container("a", &[("cpu", "500m"), ("memory", "1Gi")], &[]),
                container("b", &[], &[("cpu", "1"), ("memory", "512Mi")]),
            ],
            ..Default::default()
        });
        assert_eq!(pod_requests(&p), Ok(Resources::new(1500, 3 << 29)));
        // A large regular init container dominates; overhead is added on top.
        let p = pod(PodSpec {
            init_containers: Some(vec![container("init", &[("cpu", "4")], &[])]),
            containers: vec![container("a", &[("cpu", "1")], &[])],
            overhead: Some([("cpu".to_string(), q("250m"))].into()),
            ..Default::default()
        });
        assert_eq!(pod_requests(&p), Ok(Resources::new(4250, 0)));
        // A sidecar runs beside the apps and beside init containers after it.
        let p = pod(PodSpec {
            init_containers: Some(vec![
                sidecar(container("proxy", &[("cpu", "1")], &[])),
                container("migrate", &[("cpu", "2500m")], &[]),
            ]),
            containers: vec![container("a", &[("cpu", "1")], &[])],
            ..Default::default()
        });
        assert_eq!(pod_requests(&p), Ok(Resources::new(3500, 0)));
        // Pod-level requests replace the containers' for the resources they set.
        let p = pod(PodSpec {
            containers: vec![container("a", &[("cpu", "1"), ("memory", "1Gi")], &[])],
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), q("3"))].into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(pod_requests(&p), Ok(Resources::new(3000, 1 << 30)));
        assert_eq!(pod_requests(&Pod::default()), Ok(Resources::ZERO));
    }

    #[test]
    fn bad_quantities_name_where_they_are() {
        let p = Pod {
            spec: Some(PodSpec {
                containers: vec![container("app", &[("cpu", "lots")], &[])],
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = pod_requests(&p).unwrap_err();
        assert_eq!(
            e.to_string(),
            "container app: cpu=\"lots\" is not a valid non-negative quantity"
        );
    }

    #[test]
    fn node_allocatable_reads_status() {
        let node = |alloc: &[(&str, &str)]| Node {
            status: Some(NodeStatus {
                allocatable: Some(alloc.iter().map(|(k, v)| (k.to_string(), q(v))).collect()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            node_allocatable(&node(&[
                ("cpu", "95500m"),
                ("memory", "376Gi"),
                ("pods", "110")
            ])),
            Ok(Some(Resources::new(95_500, 376 << 30)))
        );
        assert_eq!(node_allocatable(&node(&[("pods", "110")])), Ok(None));
        assert_eq!(
            node_allocatable(&node(&[("cpu", "8")])),
            Ok(Some(Resources::new(8000, UNREPORTED)))
        );
        assert_eq!(node_allocatable(&Node::default()), Ok(None));
        assert!(node_allocatable(&node(&[("memory", "-1")])).is_err());
    }
}
