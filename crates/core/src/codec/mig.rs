//! MIG reservations of a pod (`hami.io/vgpu-mig-allocations`).
//!
//! The scheduler reserves an exact MIG placement per (container, device) so that the device
//! plugin creates the instance the scheduler accounted for, not just any instance of the
//! profile. The plugin later adds the runtime identity (MIG UUID, GPU and compute instance
//! IDs) to the same records.
//!
//! ```json
//! [{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-0","profile":"2g.10gb",
//!   "placement":{"start":2,"size":2},"migUUID":"MIG-0","gpuInstanceID":4,"computeInstanceID":0}]
//! ```

use std::collections::HashSet;

use super::error::CodecError;
use super::json::{self, Entry, ObjectWriter};
use super::node_register::{decode_mig_placement, write_mig_placement};
use crate::model::MigPlacement;

const WHAT: &str = "MIG allocations";

/// One reserved MIG instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MigAllocation {
    /// Position of the container in the pod (init containers first).
    pub container_index: u32,
    /// Position of the device within that container's entry of the pod device string.
    pub device_index: u32,
    /// The physical GPU the instance lives on.
    pub gpu_uuid: String,
    /// MIG profile name, e.g. `1g.10gb`.
    pub profile: String,
    pub placement: MigPlacement,
    /// Runtime identity: filled by the device plugin once the instance exists. Either all
    /// three are set or none is; the decoder rejects anything in between.
    pub mig_uuid: Option<String>,
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
}

impl MigAllocation {
    /// Whether the device plugin has realised the instance (all runtime fields present).
    pub fn runtime_ready(&self) -> bool {
        self.mig_uuid.is_some()
            && self.gpu_instance_id.is_some()
            && self.compute_instance_id.is_some()
    }
}

/// Decodes the annotation. The empty string (no annotation content) and `null` are no
/// allocations. Rejected, each naming the entry: a negative index, an empty `gpuUUID` or
/// `profile`, a placement of size 0 (all "incomplete"), a partial runtime identity, and two
/// entries for the same (container, device), which would make the reservation ambiguous.
/// An empty `migUUID` counts as absent, as in Go's `omitempty` world.
pub fn decode_mig_allocations(value: &str) -> Result<Vec<MigAllocation>, CodecError> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    let mut seen = HashSet::new();
    json::parse_array(WHAT, value)?
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let allocation = decode_allocation(i, &Entry::top(WHAT, i, item)?)?;
            if !seen.insert((allocation.container_index, allocation.device_index)) {
                return Err(CodecError::MigDuplicate {
                    container_index: allocation.container_index,
                    device_index: allocation.device_index,
                });
            }
            Ok(allocation)
        })
        .collect()
}

fn decode_allocation(entry: usize, obj: &Entry<'_>) -> Result<MigAllocation, CodecError> {
    let incomplete = |detail: String| CodecError::MigIncomplete { entry, detail };
    let container_index = index_field(entry, obj, "containerIndex")?;
    let device_index = index_field(entry, obj, "deviceIndex")?;
    let gpu_uuid = obj.string("gpuUUID")?;
    if gpu_uuid.is_empty() {
        return Err(incomplete("empty gpuUUID".to_owned()));
    }
    let profile = obj.string("profile")?;
    if profile.is_empty() {
        return Err(incomplete("empty profile".to_owned()));
    }
    let placement = decode_mig_placement(&obj.object("placement")?)?;
    if placement.size == 0 {
        return Err(incomplete("placement size is 0".to_owned()));
    }
    let mig_uuid = Some(obj.string("migUUID")?).filter(|s| !s.is_empty());
    let gpu_instance_id = obj.opt_u32("gpuInstanceID")?;
    let compute_instance_id = obj.opt_u32("computeInstanceID")?;
    let runtime_fields = usize::from(mig_uuid.is_some())
        + usize::from(gpu_instance_id.is_some())
        + usize::from(compute_instance_id.is_some());
    if runtime_fields != 0 && runtime_fields != 3 {
        return Err(CodecError::MigPartialRuntimeIdentity { entry });
    }
    Ok(MigAllocation {
        container_index,
        device_index,
        gpu_uuid,
        profile,
        placement,
        mig_uuid,
        gpu_instance_id,
        compute_instance_id,
    })
}

/// A container or device index: Go writes an `int`, so a negative value is possible on the
/// wire and means the record is unusable ("incomplete"), not a type error.
fn index_field(entry: usize, obj: &Entry<'_>, key: &str) -> Result<u32, CodecError> {
    let value = obj.i64(key)?;
    if value < 0 {
        return Err(CodecError::MigIncomplete {
            entry,
            detail: format!("negative {key} {value}"),
        });
    }
    u32::try_from(value).map_err(|_| CodecError::JsonField {
        what: WHAT,
        entry,
        field: key.to_owned(),
        expected: "an unsigned 32-bit integer",
        found: value.to_string(),
    })
}

/// Encodes as HAMi does: keys `containerIndex,deviceIndex,gpuUUID,profile,placement` always,
/// then `migUUID`, `gpuInstanceID`, `computeInstanceID` only when set (an empty `migUUID` is
/// omitted like Go's `omitempty`). No allocations encode as `[]`.
pub fn encode_mig_allocations(allocations: &[MigAllocation]) -> String {
    let mut out = String::new();
    json::write_array(&mut out, allocations, write_allocation);
    out
}

fn write_allocation(out: &mut String, allocation: &MigAllocation) {
    let mut obj = ObjectWriter::begin(out);
    obj.num("containerIndex", allocation.container_index);
    obj.num("deviceIndex", allocation.device_index);
    obj.str("gpuUUID", &allocation.gpu_uuid);
    obj.str("profile", &allocation.profile);
    write_mig_placement(obj.nested("placement"), allocation.placement);
    if let Some(mig_uuid) = allocation.mig_uuid.as_deref().filter(|s| !s.is_empty()) {
        obj.str("migUUID", mig_uuid);
    }
    if let Some(id) = allocation.gpu_instance_id {
        obj.num("gpuInstanceID", id);
    }
    if let Some(id) = allocation.compute_instance_id {
        obj.num("computeInstanceID", id);
    }
    obj.end();
}
