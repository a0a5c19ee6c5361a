//! Byte offsets of HAMi-core's shared region, per layout family (the tables of
//! `docs/monitor.md`). Little-endian, natural C alignment on 64-bit Linux; every number
//! here is asserted against a C compiler by `crates/monitor/tests/c_layout.rs`.

/// `initialized_flag` of a region HAMi-core has finished setting up.
pub const MAGIC: i32 = 19_920_718;
/// Devices a region describes at most (`CUDA_DEVICE_MAX_COUNT`).
pub const MAX_DEVICES: usize = 16;
/// Process slots of a region (`SHARED_REGION_MAX_PROCESS_NUM`).
pub const MAX_PROCS: usize = 1024;
/// Bytes of one `uuids[i]` entry (NUL-padded NVML UUID).
pub const UUID_BYTES: usize = 96;
/// Bytes of a UUID that name the device (`GPU-` and 36 characters); HAMi's metrics use
/// this prefix of the entry.
pub const UUID_LABEL_BYTES: usize = 40;

/// Per-device memory counters inside a process slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEntry {
    /// Size of one `used[i]` entry.
    pub stride: usize,
    pub context: usize,
    pub module: usize,
    /// HAMi-core calls it `data_size`; HAMi's metrics call it buffer.
    pub data: usize,
    pub offset: usize,
    pub total: usize,
}

/// Per-device utilisation counters inside a process slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtilEntry {
    /// Size of one `device_util[i]` entry.
    pub stride: usize,
    pub dec: usize,
    pub enc: usize,
    pub sm: usize,
}

/// One process slot (`shrreg_proc_slot_t`), offsets relative to the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotLayout {
    pub size: usize,
    pub pid: usize,
    pub hostpid: usize,
    /// `used[16]`.
    pub used: usize,
    pub memory: MemoryEntry,
    /// `monitorused[16]`, u64 each.
    pub monitor_used: usize,
    /// `device_util[16]`.
    pub util: usize,
    pub util_entry: UtilEntry,
    pub status: usize,
    /// The slot's `seqlock` (u64). Its bytes exist from layout 1.0 on (as padding); only
    /// from minor version 2 does HAMi-core keep a sequence number there.
    pub seqlock: Option<usize>,
}

/// Which family of layouts a region uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Before HAMi-core versioned the region: no version fields, no padding.
    V0,
    /// `major_version == 1`, minor 0 to 2 (same offsets; minor 2 adds the seqlock).
    V1,
}

/// Every offset of one layout family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub family: Family,
    /// `major_version` and `minor_version` (u32 each), V1 only.
    pub versions: Option<(usize, usize)>,
    /// `device_num` (u64): how many `uuids`/`limit` entries are meaningful.
    pub device_num: usize,
    pub uuids: usize,
    /// `limit[16]`, bytes, u64 each.
    pub limit: usize,
    /// `sm_limit[16]`, percent, u64 each.
    pub sm_limit: usize,
    /// `procs[1024]`.
    pub procs: usize,
    pub slot: SlotLayout,
    /// `proc_num` (i32): slots in use, from the start of `procs`.
    pub proc_num: usize,
    pub utilization_switch: usize,
    pub recent_kernel: usize,
    pub priority: usize,
    /// `last_kernel_time` (i64, unix seconds), V1 only.
    pub last_kernel_time: Option<usize>,
    /// `sizeof(shared_region_t)`.
    pub size: usize,
}

impl Layout {
    /// Offset of process slot `i` (callers keep `i < MAX_PROCS`).
    pub const fn slot_offset(&self, i: usize) -> usize {
        self.procs + i * self.slot.size
    }

    /// Bytes from the start of the region to the first slot: the device table.
    pub const fn header_len(&self) -> usize {
        self.procs
    }

    /// Offset and length of the fields after the slots that a reader needs (`proc_num`
    /// up to the end of `last_kernel_time`, or of `priority` in V0).
    pub const fn tail(&self) -> (usize, usize) {
        let end = match self.last_kernel_time {
            Some(at) => at + 8,
            None => self.priority + 4,
        };
        (self.proc_num, end - self.proc_num)
    }
}

/// HAMi-core 1.x (`major_version == 1`).
pub const V1: Layout = Layout {
    family: Family::V1,
    versions: Some((4, 8)),
    device_num: 56,
    uuids: 64,
    limit: 1600,
    sm_limit: 1728,
    procs: 1856,
    slot: SlotLayout {
        size: 1960,
        pid: 0,
        hostpid: 4,
        used: 8,
        memory: MemoryEntry {
            stride: 64,
            context: 0,
            module: 8,
            data: 16,
            offset: 24,
            total: 32,
        },
        monitor_used: 1032,
        util: 1160,
        util_entry: UtilEntry {
            stride: 48,
            dec: 0,
            enc: 8,
            sm: 16,
        },
        status: 1928,
        seqlock: Some(1936),
    },
    proc_num: 2_008_896,
    utilization_switch: 2_008_900,
    recent_kernel: 2_008_904,
    priority: 2_008_908,
    last_kernel_time: Some(2_008_912),
    size: 2_008_952,
};

/// The unversioned layout of early HAMi-core releases.
pub const V0: Layout = Layout {
    family: Family::V0,
    versions: None,
    device_num: 48,
    uuids: 56,
    limit: 1592,
    sm_limit: 1720,
    procs: 1848,
    slot: SlotLayout {
        size: 1168,
        pid: 0,
        hostpid: 4,
        used: 8,
        memory: MemoryEntry {
            stride: 40,
            context: 0,
            module: 8,
            data: 16,
            offset: 24,
            total: 32,
        },
        monitor_used: 648,
        util: 776,
        util_entry: UtilEntry {
            stride: 24,
            dec: 0,
            enc: 8,
            sm: 16,
        },
        status: 1160,
        seqlock: None,
    },
    proc_num: 1_197_880,
    utilization_switch: 1_197_884,
    recent_kernel: 1_197_888,
    priority: 1_197_892,
    last_kernel_time: None,
    size: 1_197_896,
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables are consistent with themselves: arrays end where the next field starts.
    #[test]
    fn offsets_chain() {
        for l in [V0, V1] {
            assert_eq!(l.uuids + MAX_DEVICES * UUID_BYTES, l.limit);
            assert_eq!(l.limit + MAX_DEVICES * 8, l.sm_limit);
            assert_eq!(l.sm_limit + MAX_DEVICES * 8, l.procs);
            assert_eq!(l.slot_offset(MAX_PROCS), l.proc_num);
            let s = l.slot;
            assert_eq!(s.used + MAX_DEVICES * s.memory.stride, s.monitor_used);
            assert_eq!(s.monitor_used + MAX_DEVICES * 8, s.util);
            assert_eq!(s.util + MAX_DEVICES * s.util_entry.stride, s.status);
            assert_eq!(l.utilization_switch, l.proc_num + 4);
            assert_eq!(l.recent_kernel, l.proc_num + 8);
            assert_eq!(l.priority, l.proc_num + 12);
        }
        assert_eq!(V1.tail(), (2_008_896, 24));
        assert_eq!(V0.tail(), (1_197_880, 16));
    }
}
