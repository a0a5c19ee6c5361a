//! Pod device strings (`hami.io/vgpu-devices-to-allocate`, `hami.io/vgpu-devices-allocated`
//! and every vendor's equivalent):
//!
//! ```text
//! pod       := { container ";" }     one entry per container, init containers first
//! container := { device ":" }        may be empty
//! device    := UUID "," TYPE "," USEDMEM "," USEDCORES [ "," SLOTS ]
//! ```
//!
//! SLOTS (written only above 1) is the number of slots the container takes on the device
//! (Enflame DRS slices), as HAMi writes it after v2.10; readers that stop at the fourth
//! field see one slot.
//!
//! Containers are identified by position only, so the decoder never drops an entry: an empty
//! container stays an empty list and callers align entries with the pod spec by index.

use super::error::CodecError;
use super::gofmt::parse_i32;
use crate::model::{ContainerDevice, ContainerDevices, PodSingleDevice};

/// Ends every container entry.
pub const CONTAINER_SEPARATOR: char = ';';
/// Ends every device inside a container entry.
pub const DEVICE_SEPARATOR: char = ':';

/// Encodes every container as its devices, each followed by `:`, then `;`. An empty container
/// is therefore a bare `;` and the value always ends with `;` (unless the pod has no entries).
pub fn encode_pod_single_device(pod: &PodSingleDevice) -> String {
    let mut out = String::new();
    for container in pod {
        out.push_str(&encode_container_devices(container));
        out.push(CONTAINER_SEPARATOR);
    }
    out
}

/// Encodes one container entry (without the closing `;`).
pub fn encode_container_devices(devices: &ContainerDevices) -> String {
    devices
        .iter()
        .map(|d| {
            if d.slots > 1 {
                format!(
                    "{},{},{},{},{}{DEVICE_SEPARATOR}",
                    d.uuid, d.dev_type, d.mem_mib, d.cores, d.slots
                )
            } else {
                format!(
                    "{},{},{},{}{DEVICE_SEPARATOR}",
                    d.uuid, d.dev_type, d.mem_mib, d.cores
                )
            }
        })
        .collect()
}

/// Decodes a pod device string exactly as HAMi splits it, so both sides agree on container
/// positions: the text after the last `;` is one more (normally empty) container, hence
/// `a,NVIDIA,1,2:;` is two containers and the empty string is one empty container.
/// `decode(encode(x))` is therefore `x` followed by one empty container.
///
/// Within a container, `:`-separated segments without a `,` are ignored; a fifth field is the
/// slot count when it is a non-negative 32-bit integer and ignored otherwise (as HAMi does:
/// one slot too few is better than dropping the whole value); later fields are ignored. Rejected: a segment with a `,` but fewer than four fields (HAMi's
/// "missing fields" error) and a memory or cores field that is not a 32-bit integer.
///
/// Hardening beyond HAMi, which accepts these silently: a negative memory or cores value is
/// rejected (it would subtract from the device's usage and allow over-booking), and so is an
/// empty UUID (the allocation could never be matched to a device).
pub fn decode_pod_single_device(value: &str) -> Result<PodSingleDevice, CodecError> {
    value
        .split(CONTAINER_SEPARATOR)
        .map(decode_container_devices)
        .collect()
}

/// Decodes one container entry (the text between two `;`).
pub fn decode_container_devices(value: &str) -> Result<ContainerDevices, CodecError> {
    value
        .split(DEVICE_SEPARATOR)
        .filter(|segment| segment.contains(','))
        .map(decode_device)
        .collect()
}

fn decode_device(segment: &str) -> Result<ContainerDevice, CodecError> {
    let fields: Vec<&str> = segment.split(',').collect();
    let [uuid, dev_type, mem_used, cores_used, rest @ ..] = fields.as_slice() else {
        return Err(CodecError::PodDeviceMissingFields {
            segment: segment.to_owned(),
        });
    };
    if uuid.is_empty() {
        return Err(CodecError::PodDeviceEmptyUuid {
            segment: segment.to_owned(),
        });
    }
    Ok(ContainerDevice {
        idx: 0,
        uuid: (*uuid).to_owned(),
        dev_type: (*dev_type).to_owned(),
        mem_mib: quantity("usedmem", mem_used, segment)?,
        cores: quantity("usedcores", cores_used, segment)?,
        slots: rest
            .first()
            .and_then(|s| parse_i32(s, "ParseInt").ok())
            .and_then(|s| u32::try_from(s).ok())
            // One slot is spelled by leaving the field out: 0 and 1 read as unset.
            .filter(|s| *s > 1)
            .unwrap_or(0),
    })
}

/// A memory or cores field: a 32-bit integer as HAMi parses it, and not negative.
fn quantity(field: &'static str, text: &str, segment: &str) -> Result<u32, CodecError> {
    let value =
        parse_i32(text, "ParseInt").map_err(|cause| CodecError::PodDeviceInvalidNumber {
            field,
            segment: segment.to_owned(),
            cause,
        })?;
    u32::try_from(value).map_err(|_| CodecError::PodDeviceNegative {
        field,
        segment: segment.to_owned(),
    })
}
