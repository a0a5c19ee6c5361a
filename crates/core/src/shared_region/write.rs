//! Writing regions: whole images for tests and benchmarks, single slots for writers that
//! update a region in place the way HAMi-core does (seqlock odd, data, seqlock even).

use super::layout::{Family, Layout, MAGIC, MAX_DEVICES, MAX_PROCS, UUID_BYTES, V0, V1};

/// One device of an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageDevice {
    /// Written NUL-padded (cut at 95 bytes).
    pub uuid: String,
    /// Bytes.
    pub limit: u64,
    /// Percent.
    pub sm_limit: u64,
}

impl ImageDevice {
    pub fn new(uuid: &str, limit: u64, sm_limit: u64) -> Self {
        ImageDevice {
            uuid: uuid.to_string(),
            limit,
            sm_limit,
        }
    }
}

/// The memory counters of one process on one device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageMemory {
    pub context: u64,
    pub module: u64,
    pub data: u64,
    pub offset: u64,
    pub total: u64,
}

impl ImageMemory {
    /// Counters with `total` and the three kinds it is made of.
    pub fn total(total: u64, context: u64, module: u64, data: u64) -> Self {
        ImageMemory {
            context,
            module,
            data,
            offset: 0,
            total,
        }
    }
}

/// One process slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageProc {
    pub pid: i32,
    pub hostpid: i32,
    pub status: i32,
    /// Written as is (an odd value marks the slot as mid-write); 1.2 only.
    pub seqlock: u64,
    /// Per device: memory counters.
    pub used: Vec<ImageMemory>,
    /// Per device: what NVML reported for the process.
    pub monitor_used: Vec<u64>,
    /// Per device: SM utilisation, percent.
    pub sm_util: Vec<u64>,
}

impl ImageProc {
    /// A live process (status 1) with `(memory, sm_util)` per device.
    pub fn live(pid: i32, hostpid: i32, devices: &[(ImageMemory, u64)]) -> Self {
        ImageProc {
            pid,
            hostpid,
            status: 1,
            seqlock: 0,
            used: devices.iter().map(|d| d.0).collect(),
            monitor_used: devices.iter().map(|d| d.0.total).collect(),
            sm_util: devices.iter().map(|d| d.1).collect(),
        }
    }
}

/// A whole region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionImage {
    pub family: Family,
    /// V1 only.
    pub minor: u32,
    /// `initialized_flag`.
    pub magic: i32,
    pub devices: Vec<ImageDevice>,
    pub procs: Vec<ImageProc>,
    /// `proc_num`; `procs.len()` when None.
    pub proc_num: Option<i32>,
    pub utilization_switch: i32,
    pub recent_kernel: i32,
    pub priority: i32,
    /// V1 only.
    pub last_kernel_time: i64,
}

impl RegionImage {
    /// An empty V1 region of minor version `minor`.
    pub fn v1(minor: u32) -> Self {
        RegionImage {
            family: Family::V1,
            minor,
            magic: MAGIC,
            devices: Vec::new(),
            procs: Vec::new(),
            proc_num: None,
            utilization_switch: 0,
            recent_kernel: 0,
            priority: 0,
            last_kernel_time: 0,
        }
    }

    pub fn layout(&self) -> &'static Layout {
        match self.family {
            Family::V0 => &V0,
            Family::V1 => &V1,
        }
    }

    /// The region's bytes (`sizeof(shared_region_t)` of its layout). Devices past 16 and
    /// processes past 1024 are left out.
    pub fn encode(&self) -> Vec<u8> {
        let l = self.layout();
        let mut b = vec![0u8; l.size];
        put(&mut b, 0, &self.magic.to_le_bytes());
        if let Some((major, minor)) = l.versions {
            put(&mut b, major, &1u32.to_le_bytes());
            put(&mut b, minor, &self.minor.to_le_bytes());
        }
        let devices = self.devices.len().min(MAX_DEVICES);
        put(&mut b, l.device_num, &(devices as u64).to_le_bytes());
        for (i, d) in self.devices.iter().take(MAX_DEVICES).enumerate() {
            let uuid = d.uuid.as_bytes();
            let n = uuid.len().min(UUID_BYTES - 1);
            put(&mut b, l.uuids + i * UUID_BYTES, &uuid[..n]);
            put(&mut b, l.limit + i * 8, &d.limit.to_le_bytes());
            put(&mut b, l.sm_limit + i * 8, &d.sm_limit.to_le_bytes());
        }
        for (i, p) in self.procs.iter().take(MAX_PROCS).enumerate() {
            let at = l.slot_offset(i);
            encode_slot(l, p, &mut b[at..at + l.slot.size]);
        }
        let proc_num = self
            .proc_num
            .unwrap_or(self.procs.len().min(MAX_PROCS) as i32);
        put(&mut b, l.proc_num, &proc_num.to_le_bytes());
        put(
            &mut b,
            l.utilization_switch,
            &self.utilization_switch.to_le_bytes(),
        );
        put(&mut b, l.recent_kernel, &self.recent_kernel.to_le_bytes());
        put(&mut b, l.priority, &self.priority.to_le_bytes());
        if let Some(at) = l.last_kernel_time {
            put(&mut b, at, &self.last_kernel_time.to_le_bytes());
        }
        b
    }
}

impl RegionImage {
    /// The parts of [`RegionImage::encode`]'s bytes that can be non-zero: the header with
    /// the slots in use, and the fields after the slots. A writer that starts from a
    /// zero-filled (sparse) file of the layout's size needs to write only these, as
    /// HAMi-core touches only these pages of a fresh region.
    pub fn written_ranges(&self) -> [std::ops::Range<usize>; 2] {
        let l = self.layout();
        let slots = self.procs.len().min(MAX_PROCS);
        [0..l.slot_offset(slots), l.proc_num..l.size]
    }
}

fn put(b: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = b.get_mut(at..at + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

/// Writes process slot `p` into `out` (one slot of `layout`; a shorter buffer gets what
/// fits). The seqlock is written only where the layout has its bytes.
pub fn encode_slot(layout: &Layout, p: &ImageProc, out: &mut [u8]) {
    let s = layout.slot;
    out.fill(0);
    put(out, s.pid, &p.pid.to_le_bytes());
    put(out, s.hostpid, &p.hostpid.to_le_bytes());
    for (i, m) in p.used.iter().take(MAX_DEVICES).enumerate() {
        let at = s.used + i * s.memory.stride;
        put(out, at + s.memory.context, &m.context.to_le_bytes());
        put(out, at + s.memory.module, &m.module.to_le_bytes());
        put(out, at + s.memory.data, &m.data.to_le_bytes());
        put(out, at + s.memory.offset, &m.offset.to_le_bytes());
        put(out, at + s.memory.total, &m.total.to_le_bytes());
    }
    for (i, v) in p.monitor_used.iter().take(MAX_DEVICES).enumerate() {
        put(out, s.monitor_used + i * 8, &v.to_le_bytes());
    }
    for (i, v) in p.sm_util.iter().take(MAX_DEVICES).enumerate() {
        put(
            out,
            s.util + i * s.util_entry.stride + s.util_entry.sm,
            &v.to_le_bytes(),
        );
    }
    put(out, s.status, &p.status.to_le_bytes());
    if let Some(at) = s.seqlock {
        put(out, at, &p.seqlock.to_le_bytes());
    }
}
