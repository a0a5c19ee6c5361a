//! Building blocks the vendors share: HAMi's common request shape, register decoding,
//! devices derived from node capacity, and the use/nouse selection keys.

use k8s_openapi::api::core::v1::Container;

use super::{Annotations, ConstraintError, DeviceConstraints, NodeView};
use crate::codec::selectors::{DeviceSelector, SelectorKeys};
use crate::codec::{CodecError, decode_node_register_json, decode_node_register_legacy};
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::request::{RequestError, integer_resource, plain_integer};

/// The largest request value HAMi carries (an `int32`).
pub(crate) const MAX_I32: i64 = i32::MAX as i64;

/// `value` as a `u32`, refusing negative values and values above `max` with a message
/// naming the container and resource.
pub(crate) fn bounded(
    c: &Container,
    resource: &str,
    value: i64,
    max: i64,
) -> Result<u32, RequestError> {
    if value < 0 {
        return Err(RequestError::NotAnInteger {
            container: c.name.clone(),
            resource: resource.to_string(),
            value: value.to_string(),
        });
    }
    if value > max {
        return Err(RequestError::TooLarge {
            container: c.name.clone(),
            resource: resource.to_string(),
            value,
            max,
        });
    }
    u32::try_from(value).map_err(|_| RequestError::TooLarge {
        container: c.name.clone(),
        resource: resource.to_string(),
        value,
        max,
    })
}

/// The request shape most of HAMi's vendors share: a count, optional memory in some
/// unit, optional cores with a default; no memory means the whole device's memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestShape<'a> {
    /// The vendor key the request carries.
    pub vendor: &'a str,
    pub count: &'a str,
    /// HAMi reads some vendors' counts from limits only (AMD).
    pub count_from_limits_only: bool,
    pub memory: Option<&'a str>,
    /// MiB per unit of the memory resource (Cambricon's 256, a `memoryFactor`, …).
    pub memory_unit: u32,
    pub cores: Option<&'a str>,
    /// Cores when the container names none.
    pub default_cores: u32,
}

impl<'a> RequestShape<'a> {
    /// A whole-device vendor: a count and nothing else.
    pub(crate) fn count_only(vendor: &'a str, count: &'a str) -> Self {
        RequestShape {
            vendor,
            count,
            count_from_limits_only: false,
            memory: None,
            memory_unit: 1,
            cores: None,
            default_cores: 0,
        }
    }

    /// Reads the container: `None` without a positive count. Values that are not plain
    /// integers, negative or beyond HAMi's int32 are refused naming the container
    /// (HAMi drops such requests silently).
    pub(crate) fn read(
        &self,
        c: &Container,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        let count = if self.count_from_limits_only {
            match limit(c, self.count) {
                None => None,
                Some(q) => Some(plain_integer(q).ok_or_else(|| RequestError::NotAnInteger {
                    container: c.name.clone(),
                    resource: self.count.to_string(),
                    value: q.0.clone(),
                })?),
            }
        } else {
            integer_resource(c, self.count)?
        };
        let count = match count {
            Some(n) if n > 0 => bounded(c, self.count, n, MAX_I32)?,
            _ => return Ok(None),
        };
        let unit = i64::from(self.memory_unit.max(1));
        let mem_mib = match self.memory {
            None => 0,
            Some(r) => match integer_resource(c, r)? {
                None => 0,
                Some(m) => bounded(c, r, m, MAX_I32 / unit)? * unit as u32,
            },
        };
        let cores = match self.cores {
            None => self.default_cores,
            Some(r) => match integer_resource(c, r)? {
                None => self.default_cores,
                Some(v) => bounded(c, r, v, MAX_I32)?,
            },
        };
        Ok(Some(ContainerDeviceRequest {
            count,
            dev_type: self.vendor.to_string(),
            mem_mib,
            mem_percent: (mem_mib == 0).then_some(100),
            cores,
        }))
    }
}

/// The quantity of `resource` in the container's limits.
pub(crate) fn limit<'c>(
    c: &'c Container,
    resource: &str,
) -> Option<&'c k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    c.resources.as_ref()?.limits.as_ref()?.get(resource)
}

/// The JSON register annotation `key`, if the node has it.
pub(crate) fn json_register(
    node: &NodeView<'_>,
    key: &str,
) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
    node.annotations
        .get(key)
        .map(|v| decode_node_register_json(v))
}

/// The legacy register string `key`, if the node has it.
pub(crate) fn legacy_register(
    node: &NodeView<'_>,
    key: &str,
) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
    node.annotations
        .get(key)
        .map(|v| decode_node_register_legacy(v))
}

/// The node's capacity of `resource` as a count: `None` when the node has none (absent
/// or 0: the vendor's plugin is not there), an error when it is not a count.
pub(crate) fn capacity_count(
    node: &NodeView<'_>,
    resource: &str,
) -> Option<Result<u32, CodecError>> {
    let q = node.capacity?.get(resource)?;
    let bad = || CodecError::Capacity {
        resource: resource.to_string(),
        value: q.0.clone(),
    };
    match plain_integer(q) {
        Some(0) => None,
        Some(n) => Some(u32::try_from(n).map_err(|_| bad())),
        None => Some(Err(bad())),
    }
}

/// A healthy whole device derived from node capacity (no register annotation): id
/// `<node>-<word>-<i>`, one slot, `mem_mib` MiB, 100 cores.
pub(crate) fn capacity_device(
    node: &str,
    word: &str,
    index: u32,
    mem_mib: u32,
    dev_type: &str,
) -> DeviceInfo {
    DeviceInfo {
        id: format!("{node}-{word}-{index}").into(),
        index,
        count: 1,
        mem_mib,
        cores: 100,
        dev_type: dev_type.into(),
        health: true,
        ..DeviceInfo::default()
    }
}

/// The four selection keys of a vendor (`None` for a list it does not have).
pub(crate) fn selector_keys(
    use_types: Option<&str>,
    nouse_types: Option<&str>,
    use_uuids: Option<&str>,
    nouse_uuids: Option<&str>,
) -> SelectorKeys {
    SelectorKeys {
        use_types: use_types.map(String::from),
        nouse_types: nouse_types.map(String::from),
        use_uuids: use_uuids.map(String::from),
        nouse_uuids: nouse_uuids.map(String::from),
    }
}

/// Constraints made of the selection lists alone (most vendors).
pub(crate) fn selection_constraints(
    pod_annotations: &Annotations,
    keys: &SelectorKeys,
) -> Result<DeviceConstraints, ConstraintError> {
    Ok(DeviceConstraints {
        selector: DeviceSelector::from_annotations(pod_annotations, keys),
        ..DeviceConstraints::default()
    })
}

/// HAMi's admission for most vendors: the container uses the vendor's devices when it
/// names the count resource in its limits.
pub(crate) fn uses_count(c: &Container, count: &str) -> super::Admission {
    super::Admission::uses(super::admission::has_limit(c, count))
}

/// Picks `count` of the fitting `candidates` (positions into `devices`, in walk order)
/// keeping groups together: one device is simply the first; more come from the largest
/// group first (Ascend's network IDs, Vastai's AIC dies). Groups of equal size keep the
/// order in which the walk met them (HAMi's order there is random). Answers positions
/// into `candidates`.
pub(crate) fn choose_by_group<K: PartialEq>(
    devices: &[DeviceInfo],
    candidates: &[usize],
    count: usize,
    group_of: impl Fn(&DeviceInfo) -> Option<K>,
) -> Vec<usize> {
    if count <= 1 {
        return (0..candidates.len().min(count)).collect();
    }
    let mut groups: Vec<(K, Vec<usize>)> = Vec::new();
    for (i, &pos) in candidates.iter().enumerate() {
        let Some(key) = devices.get(pos).and_then(&group_of) else {
            continue;
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    groups.sort_by_key(|g| std::cmp::Reverse(g.1.len()));
    groups
        .into_iter()
        .flat_map(|(_, members)| members)
        .take(count)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn container(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> Container {
        let map = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                limits: map(limits),
                requests: map(requests),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const SHAPE: RequestShape<'static> = RequestShape {
        vendor: "X",
        count: "x/n",
        count_from_limits_only: false,
        memory: Some("x/mem"),
        memory_unit: 256,
        cores: Some("x/core"),
        default_cores: 100,
    };

    #[test]
    fn common_shape_reads_units_defaults_and_refuses_garbage() {
        let r = SHAPE
            .read(&container(&[("x/n", "2"), ("x/mem", "4")], &[]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.count, r.mem_mib, r.mem_percent, r.cores),
            (2, 1024, None, 100)
        );
        let r = SHAPE
            .read(&container(&[], &[("x/n", "1"), ("x/core", "30")]))
            .unwrap()
            .unwrap();
        assert_eq!((r.mem_mib, r.mem_percent, r.cores), (0, Some(100), 30));
        assert_eq!(SHAPE.read(&container(&[("x/n", "0")], &[])).unwrap(), None);
        assert_eq!(SHAPE.read(&container(&[], &[])).unwrap(), None);
        assert!(
            SHAPE
                .read(&container(&[("x/n", "1"), ("x/mem", "4Gi")], &[]))
                .is_err()
        );
        assert!(
            SHAPE
                .read(&container(&[("x/n", "1"), ("x/core", "-1")], &[]))
                .is_err()
        );
        assert!(
            SHAPE
                .read(&container(&[("x/n", "1"), ("x/mem", "99999999")], &[]))
                .is_err()
        );
        let limits_only = RequestShape {
            count_from_limits_only: true,
            ..SHAPE
        };
        assert_eq!(
            limits_only.read(&container(&[], &[("x/n", "1")])).unwrap(),
            None
        );
    }

    #[test]
    fn groups_are_kept_together_largest_first() {
        let dev = |g: i64| {
            let mut d = DeviceInfo::default();
            d.custom_info.insert("G".into(), serde_json::json!(g));
            d
        };
        let devices = vec![dev(0), dev(1), dev(1), dev(0), dev(1)];
        let by_g = |d: &DeviceInfo| d.custom_int("G");
        // Candidates in walk order 0,1,2,3,4: group 1 has three members.
        assert_eq!(
            choose_by_group(&devices, &[0, 1, 2, 3, 4], 2, by_g),
            vec![1, 2]
        );
        assert_eq!(
            choose_by_group(&devices, &[0, 1, 2, 3, 4], 4, by_g),
            vec![1, 2, 4, 0]
        );
        assert_eq!(choose_by_group(&devices, &[3, 0, 4], 1, by_g), vec![0]);
        // Equal groups: the one met first.
        assert_eq!(
            choose_by_group(&devices, &[3, 1, 0, 2], 2, by_g),
            vec![0, 2]
        );
    }

    #[test]
    fn capacity_counts() {
        let cap: BTreeMap<String, Quantity> = [
            ("a".to_string(), Quantity("3".into())),
            ("z".to_string(), Quantity("0".into())),
            ("bad".to_string(), Quantity("1.5".into())),
        ]
        .into();
        let ann = BTreeMap::new();
        let node = NodeView {
            name: "n",
            annotations: &ann,
            capacity: Some(&cap),
            labels: None,
        };
        assert_eq!(capacity_count(&node, "a"), Some(Ok(3)));
        assert_eq!(capacity_count(&node, "z"), None);
        assert_eq!(capacity_count(&node, "none"), None);
        assert!(matches!(
            capacity_count(&node, "bad"),
            Some(Err(CodecError::Capacity { .. }))
        ));
        assert_eq!(&*capacity_device("n", "x", 2, 10, "X").id, "n-x-2");
    }
}
