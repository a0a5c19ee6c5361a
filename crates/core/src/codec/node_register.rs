//! Node device inventory (`hami.io/node-nvidia-register` and the vendor equivalents).
//!
//! Two wire forms exist. NVIDIA (since HAMi v2.8), AMD, Ascend, Biren, Vastai and Kunlun vXPU
//! publish a JSON array; Hygon DCU, Iluvatar and NVIDIA plugins up to v2.7 publish the legacy
//! colon/comma string. A node can be upgraded one component at a time, so readers accept both
//! ([`decode_node_register`]) while writers pick the form their vendor's readers expect.

use std::collections::HashSet;

use super::error::{CodecError, GoNumError};
use super::gobool::parse_go_bool;
use super::gofmt::{parse_i32, parse_int};
use super::json::{self, Entry, ObjectWriter};
use crate::model::{DeviceInfo, MigPlacement, MigProfile};

/// Mode a legacy 7-field entry implies: those plugins predate MIG and MPS.
pub const LEGACY_DEFAULT_MODE: &str = "hami-core";

const WHAT: &str = "node register";

/// Decodes either wire form: a value that starts with `[` (after whitespace) is JSON, anything
/// else is the legacy string. An empty list means "no device found on node" to callers.
pub fn decode_node_register(value: &str) -> Result<Vec<DeviceInfo>, CodecError> {
    if value.trim_start().starts_with('[') {
        decode_node_register_json(value)
    } else {
        decode_node_register_legacy(value)
    }
}

// ---------------------------------------------------------------------------------------------
// JSON form
// ---------------------------------------------------------------------------------------------

/// Decodes the JSON form with Go's leniency (missing or `null` keys are zero values, so a
/// missing `health` means unhealthy; unknown keys such as `migtemplate`, `devicevendor` and
/// `devicepairscore` are ignored; `custominfo` is kept as it is) but without Go's silent wrap-around: a negative or oversized
/// number is a [`CodecError::JsonField`] naming the entry and field.
pub fn decode_node_register_json(value: &str) -> Result<Vec<DeviceInfo>, CodecError> {
    json::parse_array(WHAT, value)?
        .iter()
        .enumerate()
        .map(|(i, item)| decode_json_device(&Entry::top(WHAT, i, item)?))
        .collect()
}

fn decode_json_device(entry: &Entry<'_>) -> Result<DeviceInfo, CodecError> {
    Ok(DeviceInfo {
        id: entry.string("id")?.into(),
        index: entry.u32("index")?,
        count: entry.u32("count")?,
        mem_mib: entry.u32("devmem")?,
        cores: entry.u32("devcore")?,
        dev_type: entry.string("type")?.into(),
        numa: entry.i32("numa")?,
        mode: entry.string("mode")?.into(),
        health: entry.bool("health")?,
        mig_profiles: entry
            .objects("migProfiles")?
            .iter()
            .map(decode_mig_profile)
            .collect::<Result<_, _>>()?,
        custom_info: entry.raw_object("custominfo")?,
    })
}

fn decode_mig_profile(entry: &Entry<'_>) -> Result<MigProfile, CodecError> {
    Ok(MigProfile {
        name: entry.string("name")?,
        memory_mb: entry.u32("memoryMB")?,
        core: entry.u32("core")?,
        slice_count: entry.u32("sliceCount")?,
        placements: entry
            .objects("placements")?
            .iter()
            .map(decode_mig_placement)
            .collect::<Result<_, _>>()?,
    })
}

pub(crate) fn decode_mig_placement(entry: &Entry<'_>) -> Result<MigPlacement, CodecError> {
    Ok(MigPlacement {
        start: entry.u32("start")?,
        size: entry.u32("size")?,
    })
}

/// Encodes the JSON form byte for byte as HAMi's device plugin does: keys in the order
/// `id,index,count,devmem,devcore,type,numa,mode,migProfiles,health,custominfo`, every key
/// omitted when it holds its zero value (Go `omitempty`), MIG profile keys always written,
/// `custominfo` keys sorted as Go writes a map.
///
/// Byte-exactness matters because plugins re-patch the node only when the text changes.
pub fn encode_node_register_json(devices: &[DeviceInfo]) -> String {
    let mut out = String::new();
    json::write_array(&mut out, devices, write_json_device);
    out
}

fn write_json_device(out: &mut String, device: &DeviceInfo) {
    let mut obj = ObjectWriter::begin(out);
    if !device.id.is_empty() {
        obj.str("id", &device.id);
    }
    if device.index != 0 {
        obj.num("index", device.index);
    }
    if device.count != 0 {
        obj.num("count", device.count);
    }
    if device.mem_mib != 0 {
        obj.num("devmem", device.mem_mib);
    }
    if device.cores != 0 {
        obj.num("devcore", device.cores);
    }
    if !device.dev_type.is_empty() {
        obj.str("type", &device.dev_type);
    }
    if device.numa != 0 {
        obj.num("numa", device.numa);
    }
    if !device.mode.is_empty() {
        obj.str("mode", &device.mode);
    }
    if !device.mig_profiles.is_empty() {
        json::write_array(
            obj.nested("migProfiles"),
            &device.mig_profiles,
            write_mig_profile,
        );
    }
    if device.health {
        obj.bool("health", true);
    }
    if !device.custom_info.is_empty() {
        json::write_raw_object(obj.nested("custominfo"), &device.custom_info);
    }
    obj.end();
}

fn write_mig_profile(out: &mut String, profile: &MigProfile) {
    let mut obj = ObjectWriter::begin(out);
    obj.str("name", &profile.name);
    obj.num("memoryMB", profile.memory_mb);
    obj.num("core", profile.core);
    obj.num("sliceCount", profile.slice_count);
    json::write_array(obj.nested("placements"), &profile.placements, |out, p| {
        write_mig_placement(out, *p)
    });
    obj.end();
}

pub(crate) fn write_mig_placement(out: &mut String, placement: MigPlacement) {
    let mut obj = ObjectWriter::begin(out);
    obj.num("start", placement.start);
    obj.num("size", placement.size);
    obj.end();
}

// ---------------------------------------------------------------------------------------------
// Legacy colon/comma form
// ---------------------------------------------------------------------------------------------

/// Decodes the legacy form `{ id,count,devmem,devcore,type,numa,health[,index,mode] ":" }`.
///
/// A 7-field entry predates the index and mode fields and decodes to index 0, mode
/// [`LEGACY_DEFAULT_MODE`]. Empty segments are skipped (so `:` is an empty inventory), but a
/// value without any `:` is rejected because it cannot have come from an encoder. Like HAMi's
/// current decoder, a blank or repeated device ID is rejected: allocations are keyed by ID,
/// so a duplicate would double the capacity behind one key. Unlike Go, negative capacities
/// are rejected instead of being carried as negative numbers.
pub fn decode_node_register_legacy(value: &str) -> Result<Vec<DeviceInfo>, CodecError> {
    if !value.contains(':') {
        return Err(CodecError::RegisterMissingSeparator {
            input: value.to_owned(),
        });
    }
    let mut seen = HashSet::new();
    value
        .split(':')
        .filter(|segment| !segment.is_empty())
        .map(|segment| decode_legacy_device(segment, &mut seen))
        .collect()
}

/// The comma fields of one legacy entry, before conversion.
struct LegacyFields<'a> {
    id: &'a str,
    count: &'a str,
    memory: &'a str,
    core: &'a str,
    dev_type: &'a str,
    numa: &'a str,
    health: &'a str,
    index_and_mode: Option<(&'a str, &'a str)>,
}

fn split_legacy_fields(segment: &str) -> Result<LegacyFields<'_>, CodecError> {
    if !segment.contains(',') {
        return Err(CodecError::RegisterMalformedSegment {
            segment: segment.to_owned(),
        });
    }
    let fields: Vec<&str> = segment.split(',').collect();
    let (base, index_and_mode) = match fields.as_slice() {
        [base @ .., index, mode] if fields.len() == 9 => (base, Some((*index, *mode))),
        base => (base, None),
    };
    match *base {
        [id, count, memory, core, dev_type, numa, health] => Ok(LegacyFields {
            id,
            count,
            memory,
            core,
            dev_type,
            numa,
            health,
            index_and_mode,
        }),
        _ => Err(CodecError::RegisterFieldCount {
            count: fields.len(),
            segment: segment.to_owned(),
        }),
    }
}

fn decode_legacy_device<'a>(
    segment: &'a str,
    seen: &mut HashSet<&'a str>,
) -> Result<DeviceInfo, CodecError> {
    let fields = split_legacy_fields(segment)?;
    if fields.id.trim().is_empty() {
        return Err(CodecError::RegisterEmptyId {
            segment: segment.to_owned(),
        });
    }
    if !seen.insert(fields.id) {
        return Err(CodecError::RegisterDuplicateId {
            id: fields.id.to_owned(),
        });
    }
    let count = legacy_capacity("count", fields.count)?;
    let mem_mib = legacy_capacity("memory", fields.memory)?;
    let cores = legacy_capacity("core", fields.core)?;
    let numa =
        parse_i32(fields.numa, "Atoi").map_err(|cause| CodecError::RegisterInvalidNumber {
            field: "numa",
            cause,
        })?;
    let health = parse_go_bool(fields.health).map_err(|_| CodecError::RegisterInvalidHealth {
        value: fields.health.to_owned(),
    })?;
    let (index, mode) = match fields.index_and_mode {
        Some((index, mode)) => (legacy_index(index)?, mode.to_owned()),
        None => (0, LEGACY_DEFAULT_MODE.to_owned()),
    };
    Ok(DeviceInfo {
        id: fields.id.into(),
        index,
        count,
        mem_mib,
        cores,
        dev_type: fields.dev_type.into(),
        numa,
        mode: mode.into(),
        health,
        mig_profiles: Vec::new(),
        custom_info: Default::default(),
    })
}

/// A count/memory/core field: a 32-bit integer (as HAMi parses it) that must not be negative.
fn legacy_capacity(field: &'static str, text: &str) -> Result<u32, CodecError> {
    let value = parse_i32(text, "ParseInt")
        .map_err(|cause| CodecError::RegisterInvalidNumber { field, cause })?;
    u32::try_from(value).map_err(|_| CodecError::RegisterNegativeField {
        field,
        value: i64::from(value),
    })
}

fn legacy_index(text: &str) -> Result<u32, CodecError> {
    let invalid = |cause| CodecError::RegisterInvalidNumber {
        field: "index",
        cause,
    };
    let value = parse_int(text, 64, "Atoi").map_err(invalid)?;
    if value < 0 {
        return Err(CodecError::RegisterNegativeField {
            field: "index",
            value,
        });
    }
    u32::try_from(value).map_err(|_| invalid(GoNumError::range("Atoi", text)))
}

/// Encodes the legacy form: always the 9-field entry followed by `:`, e.g.
/// `GPU-ebe7...,10,7680,100,NVIDIA-Tesla P4,0,true,0,hami-core:`.
///
/// The form cannot carry MIG profiles (they are dropped) nor IDs, types or modes containing
/// `,` or `:`. An empty inventory encodes as `:` rather than Go's empty string, so that it
/// decodes back to an empty list instead of a "missing device separator" error.
pub fn encode_node_register_legacy(devices: &[DeviceInfo]) -> String {
    if devices.is_empty() {
        return ":".to_owned();
    }
    devices
        .iter()
        .map(|d| {
            format!(
                "{},{},{},{},{},{},{},{},{}:",
                d.id, d.count, d.mem_mib, d.cores, d.dev_type, d.numa, d.health, d.index, d.mode
            )
        })
        .collect()
}
