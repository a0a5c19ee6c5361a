//! AWS Neuron (`AWSNeuron`, `docs/vendors.md#aws-neuron`): devices derived from the node's
//! capacity of `aws.amazon.com/neuron`, each with its NeuronCores as a bit mask (a device
//! with two cores counts 3); a pod asks for whole devices or for cores (up to two per
//! device); several devices are taken as one contiguous run; the `AWS_NEURON_IDS` and
//! `NEURON_*` pod annotations the Neuron device plugin reads.

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Serialize};

use super::admission::has_limit;
use super::common::{MAX_I32, bounded, capacity_count, selection_constraints, selector_keys};
use super::{
    Admission, AllocationContext, Annotations, CapacityCheck, ConstraintError, DeviceConstraints,
    HealthRule, InventorySource, NodeLockRule, NodeView, Vendor,
};
use crate::codec::CodecError;
use crate::codec::selectors::SelectorKeys;
use crate::model::{ContainerDeviceRequest, DeviceInfo};
use crate::reason::Reason;
use crate::request::{RequestError, integer_resource};

/// The vendor key of AWS Neuron devices.
pub const AWS_NEURON: &str = "AWSNeuron";
/// Pod: devices given (the plugin reads no to-allocate key).
pub const ALLOCATED: &str = "hami.io/aws-neuron-devices-allocated";
/// Pod: allowed / forbidden device UUIDs (exact).
pub const USE_UUID: &str = "aws.amazon.com/use-neuron-uuid";
pub const NOUSE_UUID: &str = "aws.amazon.com/nouse-neuron-uuid";
/// Pod: the device (or core) IDs given, the decision time (ns), whether the plugin
/// allocated them, the node, and the resource asked when cores were.
pub const ASSIGNED_IDS: &str = "AWS_NEURON_IDS";
pub const ALLOC_TIME: &str = "NEURON_ALLOC_TIME";
pub const ALLOCATED_FLAG: &str = "NEURON_ALLOCATED";
pub const ASSIGNED_NODE: &str = "aws.amazon.com/predicate-node";
pub const RESOURCE_TYPE: &str = "NEURON_RESOURCE_TYPE";
/// `custominfo` key of the node's instance type (`inf2.xlarge`, `trn1.32xlarge`).
pub const NODE_TYPE: &str = "AWSNodeType";
/// The node label holding the instance type.
const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";

/// The `awsneuron:` section of `device-config.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AwsNeuronConfig {
    pub resource_count_name: String,
    pub resource_core_name: String,
}

impl Default for AwsNeuronConfig {
    fn default() -> Self {
        AwsNeuronConfig {
            resource_count_name: "aws.amazon.com/neuron".into(),
            resource_core_name: "aws.amazon.com/neuroncore".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct AwsNeuron {
    cfg: AwsNeuronConfig,
    keys: SelectorKeys,
}

impl AwsNeuron {
    pub fn new(cfg: AwsNeuronConfig) -> Self {
        AwsNeuron {
            cfg,
            keys: selector_keys(None, None, Some(USE_UUID), Some(NOUSE_UUID)),
        }
    }
}

/// The lowest `n` bits of `mask` not in `used`.
fn free_cores(mask: u32, used: u32, n: u32) -> u32 {
    let mut out = 0;
    let mut left = n;
    for bit in 0..32 {
        if left == 0 {
            break;
        }
        let b = 1u32 << bit;
        if mask & b != 0 && used & b == 0 {
            out |= b;
            left -= 1;
        }
    }
    out
}

impl Vendor for AwsNeuron {
    fn common_word(&self) -> &str {
        AWS_NEURON
    }

    fn resource_names(&self) -> Vec<String> {
        vec![
            self.cfg.resource_count_name.clone(),
            self.cfg.resource_core_name.clone(),
        ]
    }

    fn count_resource(&self) -> &str {
        &self.cfg.resource_count_name
    }

    fn inventory_source(&self) -> InventorySource<'_> {
        InventorySource::Capacity(&self.cfg.resource_count_name)
    }

    fn inventory_inputs(&self) -> Vec<InventorySource<'_>> {
        vec![
            InventorySource::Capacity(&self.cfg.resource_count_name),
            InventorySource::Capacity(&self.cfg.resource_core_name),
        ]
    }

    fn health_rule(&self) -> HealthRule<'_> {
        HealthRule::Always
    }

    fn to_allocate_annotation(&self) -> Option<&str> {
        None
    }

    fn allocated_annotation(&self) -> &str {
        ALLOCATED
    }

    /// Its device plugin does not look for the pod through a node lock.
    fn node_lock(&self) -> NodeLockRule<'_> {
        NodeLockRule::None
    }

    /// Devices by count (cores 0 here: every core of each device), or cores: one device
    /// for one core, a device per two cores otherwise.
    fn container_request(
        &self,
        c: &Container,
        _pod_annotations: &Annotations,
    ) -> Result<Option<ContainerDeviceRequest>, RequestError> {
        let whole = |count| ContainerDeviceRequest {
            count,
            dev_type: AWS_NEURON.to_string(),
            mem_mib: 0,
            mem_percent: None,
            cores: 0,
        };
        if let Some(n) = integer_resource(c, &self.cfg.resource_count_name)? {
            if n <= 0 {
                return Ok(None);
            }
            return Ok(Some(whole(bounded(
                c,
                &self.cfg.resource_count_name,
                n,
                MAX_I32,
            )?)));
        }
        let Some(cores) = integer_resource(c, &self.cfg.resource_core_name)? else {
            return Ok(None);
        };
        if cores <= 0 {
            return Ok(None);
        }
        let cores = bounded(c, &self.cfg.resource_core_name, cores, MAX_I32)?;
        Ok(Some(ContainerDeviceRequest {
            cores: cores.min(2),
            ..whole((cores / 2).max(1))
        }))
    }

    /// One device per unit of `aws.amazon.com/neuron`, its cores this node's share of
    /// `aws.amazon.com/neuroncore` (HAMi fixes the share from the first node it sees).
    fn decode_inventory(&self, node: &NodeView<'_>) -> Option<Result<Vec<DeviceInfo>, CodecError>> {
        let count = match capacity_count(node, &self.cfg.resource_count_name)? {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        let cores = match capacity_count(node, &self.cfg.resource_core_name) {
            None => 0,
            Some(Ok(c)) => c,
            Some(Err(e)) => return Some(Err(e)),
        };
        let per_device = (cores / count).min(31);
        let mask = (1u32 << per_device) - 1;
        let node_type = node.label(INSTANCE_TYPE_LABEL).unwrap_or_default();
        Some(Ok((0..count)
            .map(|i| {
                let mut d = DeviceInfo {
                    id: format!("{}-{AWS_NEURON}-{i}", node.name).into(),
                    index: i,
                    count: per_device,
                    mem_mib: 0,
                    cores: mask,
                    dev_type: AWS_NEURON.into(),
                    health: true,
                    ..DeviceInfo::default()
                };
                d.custom_info.insert(NODE_TYPE.into(), node_type.into());
                d
            })
            .collect()))
    }

    fn pod_constraints(
        &self,
        pod_annotations: &Annotations,
    ) -> Result<DeviceConstraints, ConstraintError> {
        selection_constraints(pod_annotations, &self.keys)
    }

    fn accepts_any_type(&self, req: &ContainerDeviceRequest, _c: &DeviceConstraints) -> bool {
        req.dev_type == AWS_NEURON
    }

    fn type_matches(
        &self,
        _d: &DeviceInfo,
        req: &ContainerDeviceRequest,
        _c: &DeviceConstraints,
    ) -> bool {
        req.dev_type == AWS_NEURON
    }

    fn custom_capacity(&self) -> bool {
        true
    }

    /// Several devices: only idle ones, taken whole. One device: a free slot and enough
    /// free cores; the cores given are the lowest free bits of the mask.
    fn check_capacity(&self, c: &CapacityCheck<'_>) -> Result<(u32, u32), Reason> {
        let (info, u, req) = (c.info, c.usage, c.req);
        let used = u32::try_from(u.cores_used).unwrap_or(u32::MAX);
        if req.count > 1 {
            if u.used > 0 {
                return Err(Reason::ExclusiveDeviceAllocateConflict);
            }
            return Ok((0, info.cores));
        }
        if info.count <= u.used {
            return Err(Reason::CardTimeSlicingExhausted);
        }
        let want = if req.cores == 0 {
            info.cores.count_ones()
        } else {
            req.cores
        };
        if info
            .cores
            .count_ones()
            .saturating_sub((used & info.cores).count_ones())
            < want
        {
            return Err(Reason::CardInsufficientCore);
        }
        Ok((0, free_cores(info.cores, used, want)))
    }

    fn may_choose_devices(&self) -> bool {
        true
    }

    fn chooses_devices(&self, _devices: &[DeviceInfo], req: &ContainerDeviceRequest) -> bool {
        req.count > 1
    }

    /// A run of `count` devices with consecutive indexes: anywhere on Inferentia
    /// instances (their devices form a ring), else a run of 4, 8 or 16 starting at a
    /// multiple of its length.
    fn choose_devices(
        &self,
        devices: &[DeviceInfo],
        candidates: &[usize],
        count: usize,
    ) -> Vec<usize> {
        let index_of = |i: usize| devices.get(candidates[i]).map(|d| d.index);
        let has = |index: u32| (0..candidates.len()).find(|&i| index_of(i) == Some(index));
        let ring = devices
            .first()
            .and_then(|d| d.custom_str(NODE_TYPE))
            .is_some_and(|t| t.contains("inf") || t.contains("Inf"));
        let total = devices.len() as u32;
        let step = if ring {
            1
        } else if matches!(count, 4 | 8 | 16) {
            count as u32
        } else {
            return Vec::new();
        };
        let mut start = 0;
        while start + count as u32 <= total {
            let run: Option<Vec<usize>> = (start..start + count as u32).map(has).collect();
            if let Some(run) = run {
                return run;
            }
            start += step;
        }
        Vec::new()
    }

    fn choice_failure(&self) -> Reason {
        Reason::NumaNotFit
    }

    /// The IDs the plugin binds: device indexes for containers that asked for devices,
    /// core indexes (device index × cores per device + core) for those that asked for
    /// cores, over every container.
    fn extra_annotations(&self, ctx: &AllocationContext<'_>) -> Vec<(String, String)> {
        let mut ids = Vec::new();
        let mut by_cores = false;
        for (i, devs) in ctx.devices.iter().enumerate() {
            let per_core = ctx
                .requests
                .get(i)
                .copied()
                .flatten()
                .is_some_and(|r| r.cores != 0);
            for d in devs {
                if !per_core {
                    ids.push(d.idx.to_string());
                    continue;
                }
                let per_device = ctx
                    .node_devices
                    .iter()
                    .find(|n| *n.id == *d.uuid)
                    .map_or(0, |n| n.count);
                for bit in 0..32 {
                    if d.cores & (1 << bit) != 0 {
                        ids.push((per_device * d.idx + bit).to_string());
                        by_cores = true;
                    }
                }
            }
        }
        if ids.is_empty() {
            return Vec::new();
        }
        let mut out = vec![
            (ASSIGNED_IDS.to_string(), ids.join(",")),
            (
                ALLOC_TIME.to_string(),
                ctx.now_unix.saturating_mul(1_000_000_000).to_string(),
            ),
            (ALLOCATED_FLAG.to_string(), "false".to_string()),
            (ASSIGNED_NODE.to_string(), ctx.node.to_string()),
        ];
        if by_cores {
            out.push((
                RESOURCE_TYPE.to_string(),
                self.cfg.resource_core_name.clone(),
            ));
        }
        out
    }

    fn mutate_admission(&self, c: &mut Container, _pod: &Annotations) -> Result<Admission, String> {
        Ok(Admission::uses(
            has_limit(c, &self.cfg.resource_count_name)
                || has_limit(c, &self.cfg.resource_core_name),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_are_the_lowest_free_bits() {
        assert_eq!(free_cores(3, 0, 2), 3);
        assert_eq!(free_cores(3, 0, 1), 1);
        assert_eq!(free_cores(3, 1, 1), 2);
        assert_eq!(free_cores(0b1111, 0b0101, 2), 0b1010);
    }
}
