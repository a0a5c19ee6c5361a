//! The device model shared by every codec and by the placement engine.
//!
//! Units: memory is MiB, cores are percent of one device (100 = the whole card). Fields
//! carry domain names; HAMi's Go names (`devmem`, `usedmem`, …) exist only on the wire,
//! in the codecs (`crate::codec`) and the serde renames below.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// One physical device as a device plugin registers it on its node (an element of
/// `hami.io/node-nvidia-register` or of another vendor's register annotation, or a
/// device derived from the node's capacity; `docs/vendors.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct DeviceInfo {
    /// Device UUID (`GPU-…`); the key every allocation refers to. Shared: the ledger's
    /// records of the pods on the device point at this very string
    /// (`docs/extender.md#memory`).
    #[serde(with = "shared_str")]
    pub id: Arc<str>,
    /// Index of the device on its node (NVML index for NVIDIA).
    pub index: u32,
    /// Number of containers that may share the device (split slots).
    pub count: u32,
    /// Device memory in MiB (already scaled by the plugin's memory scaling).
    #[serde(rename = "devmem")]
    pub mem_mib: u32,
    /// Compute capacity in percent (100 for one whole card, scaled by core scaling).
    #[serde(rename = "devcore")]
    pub cores: u32,
    /// Device model as registered, e.g. `NVIDIA-Tesla V100-SXM2-32GB`.
    /// Shared by the node's devices of one model ([`DeviceInfo::share_strings`]).
    #[serde(rename = "type", with = "shared_str")]
    pub dev_type: Arc<str>,
    /// NUMA node the device is attached to.
    pub numa: i32,
    /// Operating mode: `hami-core` (shared through HAMi-core, `libvgpu.so`), `mig` or
    /// `mps`; empty means `hami-core`.
    #[serde(with = "shared_str")]
    pub mode: Arc<str>,
    /// Whether the device is healthy. A missing value on the wire means unhealthy.
    pub health: bool,
    /// MIG profiles the device offers (only in `mig` mode).
    #[serde(rename = "migProfiles", default, skip_serializing_if = "Vec::is_empty")]
    pub mig_profiles: Vec<MigProfile>,
    /// Vendor-specific facts the register carries (`custominfo`): Ascend's
    /// `NetworkID`, Vastai's `AIC` and `DeviceStrategy`, AMD's `pciBDF`, … Empty for
    /// NVIDIA.
    #[serde(
        rename = "custominfo",
        default,
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub custom_info: BTreeMap<String, serde_json::Value>,
}

impl DeviceInfo {
    /// Makes equal model and mode strings of `devices` one shared string each: a node's
    /// devices are usually of one model, and 40,000 GPUs with strings of their own cost
    /// about 2 MiB (`docs/extender.md#memory`).
    pub fn share_strings(devices: &mut [DeviceInfo]) {
        let mut seen: Vec<Arc<str>> = Vec::new();
        let mut share = |s: &mut Arc<str>| match seen.iter().find(|k| **k == *s) {
            Some(k) => *s = k.clone(),
            None => seen.push(s.clone()),
        };
        for d in devices {
            share(&mut d.dev_type);
            share(&mut d.mode);
        }
    }

    /// A `custominfo` entry as an integer (JSON numbers are floats in Go's decoder, so
    /// an integral float counts).
    pub fn custom_int(&self, key: &str) -> Option<i64> {
        let v = self.custom_info.get(key)?;
        v.as_i64()
            .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
    }

    /// A `custominfo` entry as a string.
    pub fn custom_str(&self, key: &str) -> Option<&str> {
        self.custom_info.get(key)?.as_str()
    }
}

/// Serde for the shared strings of [`DeviceInfo`] (as plain strings on the wire).
mod shared_str {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(s: &Arc<str>, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_str(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<Arc<str>, D::Error> {
        String::deserialize(de).map(Arc::from)
    }
}

/// A MIG profile a device can be partitioned into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MigProfile {
    pub name: String,
    #[serde(rename = "memoryMB")]
    pub memory_mb: u32,
    pub core: u32,
    #[serde(rename = "sliceCount")]
    pub slice_count: u32,
    pub placements: Vec<MigPlacement>,
}

/// A contiguous run of MIG slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct MigPlacement {
    pub start: u32,
    pub size: u32,
}

/// One device given to one container: an element of a pod device string
/// (`UUID,TYPE,USEDMEM,USEDCORES`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, Hash)]
pub struct ContainerDevice {
    /// Position of the device on its node. Not on the wire (decodes as 0).
    #[serde(skip)]
    pub idx: u32,
    pub uuid: String,
    /// Vendor key (`NVIDIA`), not the card model.
    #[serde(rename = "type")]
    pub dev_type: String,
    /// MiB taken on the device.
    #[serde(rename = "usedmem")]
    pub mem_mib: u32,
    /// Percent of the device's compute taken.
    #[serde(rename = "usedcores")]
    pub cores: u32,
    /// Slots (time slices, Enflame DRS slices) the container takes on the device; 0 and
    /// 1 both mean one. On the wire only above 1, as an optional fifth field
    /// (`docs/protocol.md#pod-device-string`).
    #[serde(default, skip_serializing_if = "slots_are_one")]
    pub slots: u32,
}

impl ContainerDevice {
    /// The slots the container takes on the device (at least one).
    pub fn slots_taken(&self) -> u32 {
        self.slots.max(1)
    }
}

/// Whether a device string entry leaves its slot count out (one slot).
fn slots_are_one(slots: &u32) -> bool {
    *slots <= 1
}

/// The devices of one container (possibly empty).
pub type ContainerDevices = Vec<ContainerDevice>;

/// The devices of every container of a pod for one vendor: init containers first, then
/// app containers, empty containers kept so indexes line up with the pod spec.
pub type PodSingleDevice = Vec<ContainerDevices>;

/// What one container asks of one vendor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerDeviceRequest {
    /// Number of distinct devices.
    pub count: u32,
    /// Vendor key (`NVIDIA`).
    pub dev_type: String,
    /// MiB per device; 0 when memory is given as a percentage.
    pub mem_mib: u32,
    /// Percent of each device's memory, when memory is given that way (HAMi spells "not
    /// given" as 101; that sentinel never leaves request parsing).
    pub mem_percent: Option<u32>,
    /// Percent of each device's compute.
    pub cores: u32,
}

impl ContainerDeviceRequest {
    /// Memory this request takes on a device of `device_mem_mib` MiB.
    pub fn memory_on(&self, device_mem_mib: u32) -> u32 {
        if self.mem_mib > 0 {
            return self.mem_mib;
        }
        match self.mem_percent {
            // Integer arithmetic in u64 as HAMi does, without the i32 overflow.
            Some(percent) if percent != 0 => {
                (u64::from(device_mem_mib) * u64::from(percent) / 100) as u32
            }
            _ => 0,
        }
    }

    /// Cores this request takes on one device, clamped to one whole card as the fit does.
    pub fn cores_clamped(&self) -> u32 {
        self.cores.min(100)
    }
}

/// Live usage of one device on a node: its inventory plus what running and reserved
/// pods take.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceUsage {
    pub id: String,
    pub index: u32,
    /// Containers on the device (slots taken).
    pub used: u32,
    pub count: u32,
    pub mem_used: u64,
    pub mem_total: u32,
    pub cores_used: u64,
    pub cores_total: u32,
    pub numa: i32,
    pub dev_type: String,
    pub mode: String,
    pub health: bool,
}

impl DeviceUsage {
    /// A device with nothing on it.
    pub fn idle(info: &DeviceInfo) -> Self {
        DeviceUsage {
            id: info.id.to_string(),
            index: info.index,
            used: 0,
            count: info.count,
            mem_used: 0,
            mem_total: info.mem_mib,
            cores_used: 0,
            cores_total: info.cores,
            numa: info.numa,
            dev_type: info.dev_type.to_string(),
            mode: info.mode.to_string(),
            health: info.health,
        }
    }

    pub fn free_mem(&self) -> u64 {
        u64::from(self.mem_total).saturating_sub(self.mem_used)
    }

    pub fn free_cores(&self) -> u64 {
        u64::from(self.cores_total).saturating_sub(self.cores_used)
    }
}
