//! Reading a region that other processes write while it is read.
//!
//! Nothing in the file is trusted: sizes, counts and indexes are checked before use, a
//! region that is not fully initialised is refused with a reason, and a process slot is
//! only taken when its 1.2 `seqlock` was even and unchanged around the read (retried a
//! bounded number of times, then reported as busy).

use std::io;

use super::layout::{
    Family, Layout, MAGIC, MAX_DEVICES, MAX_PROCS, UUID_BYTES, UUID_LABEL_BYTES, V0, V1,
};

/// How often a slot set that was being written is read again before giving up.
const SEQLOCK_ATTEMPTS: usize = 64;
/// Attempts that only spin before the reader starts yielding its thread.
const SEQLOCK_SPINS: usize = 8;

/// Where a region's bytes come from.
pub trait RegionSource {
    /// The current size of the region in bytes.
    fn region_len(&self) -> io::Result<u64>;
    /// Fills `buf` from `offset`; a short read is an error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl RegionSource for [u8] {
    fn region_len(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| eof())?;
        let end = start.checked_add(buf.len()).ok_or_else(eof)?;
        let src = self.get(start..end).ok_or_else(eof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

fn eof() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "read past the end of the region",
    )
}

/// Which layout and version a region declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Version {
    pub family: Family,
    /// 0 for V0.
    pub major: u32,
    /// 0 for V0.
    pub minor: u32,
}

impl Version {
    pub fn layout(&self) -> &'static Layout {
        match self.family {
            Family::V0 => &V0,
            Family::V1 => &V1,
        }
    }

    /// Whether slots carry a sequence number (HAMi-core 1.2 and later minors).
    pub fn has_seqlock(&self) -> bool {
        self.family == Family::V1 && self.minor >= 2
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.family {
            Family::V0 => f.write_str("v0"),
            Family::V1 => write!(f, "v{}.{}", self.major, self.minor),
        }
    }
}

/// Why a region could not be read. Each names what was found, for the log line that
/// names the file.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    #[error("cannot read: {0}")]
    Io(#[from] io::Error),
    #[error(
        "{len} bytes, smaller than the smallest layout (v0, {min} bytes): truncated or still being created"
    )]
    TooSmall { len: u64, min: usize },
    #[error("not initialised yet (initialized_flag is 0)")]
    NotInitialised,
    #[error("initialized_flag is {found}, not HAMi-core's {MAGIC}: not a HAMi-core cache file")]
    BadMagic { found: i32 },
    #[error(
        "declares version {major}.{minor} with {len} bytes; only v0 (<{v1} bytes) and v1.x (>= {v1} bytes) are known"
    )]
    UnsupportedVersion {
        major: u32,
        minor: u32,
        len: u64,
        v1: usize,
    },
    #[error("device_num is {found}, more than the {MAX_DEVICES} devices a region holds")]
    DeviceCount { found: u64 },
    #[error("proc_num is {found}, outside 0..={MAX_PROCS}")]
    ProcCount { found: i32 },
    #[error("process slot {slot} stayed mid-write (seqlock odd or moving) over {attempts} reads")]
    SlotBusy { slot: usize, attempts: usize },
}

/// A device's UUID as the region names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeviceId {
    /// HAMi-core has not written it yet (first byte NUL).
    #[default]
    Unset,
    /// Its first 40 bytes are not UTF-8.
    Invalid,
    /// The first 40 bytes, trailing NULs removed.
    Uuid(Uuid40),
}

/// Up to 40 bytes of valid UTF-8, stored inline so a scan allocates nothing per device.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Uuid40 {
    bytes: [u8; UUID_LABEL_BYTES],
    len: u8,
}

impl Uuid40 {
    pub fn as_str(&self) -> &str {
        // Only ever built from validated UTF-8 (see `DeviceId::parse`).
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl std::fmt::Debug for Uuid40 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl DeviceId {
    fn parse(entry: &[u8]) -> Self {
        let label = &entry[..UUID_LABEL_BYTES.min(entry.len())];
        if label.first().is_none_or(|b| *b == 0) {
            return DeviceId::Unset;
        }
        let len = label.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
        let label = &label[..len];
        if std::str::from_utf8(label).is_err() {
            return DeviceId::Invalid;
        }
        let mut bytes = [0u8; UUID_LABEL_BYTES];
        bytes[..len].copy_from_slice(label);
        DeviceId::Uuid(Uuid40 {
            bytes,
            len: len as u8,
        })
    }

    /// The UUID, when the region has a valid one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            DeviceId::Uuid(u) => Some(u.as_str()),
            _ => None,
        }
    }
}

/// One device of a container, summed over its live processes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceUsage {
    pub uuid: DeviceId,
    /// `limit[i]`, bytes.
    pub limit: u64,
    /// `sm_limit[i]`, percent.
    pub sm_limit: u64,
    /// Σ `used[i].total`, bytes.
    pub used: u64,
    /// Σ `used[i].context_size`.
    pub context: u64,
    /// Σ `used[i].module_size`.
    pub module: u64,
    /// Σ `used[i].data_size` (HAMi's "buffer").
    pub data: u64,
    /// Σ `used[i].offset`.
    pub offset: u64,
    /// Σ `monitorused[i]` (what NVML reported per process).
    pub monitor_used: u64,
    /// Σ `device_util[i].sm_util`, percent.
    pub sm_util: u64,
}

/// What one region says, as of one read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    pub version: Version,
    /// `device_num` entries, in the region's order (the container's device index).
    pub devices: Vec<DeviceUsage>,
    /// `proc_num`.
    pub proc_num: u32,
    /// Slots among the first `proc_num` with a non-zero status.
    pub live_procs: u32,
    /// The container's task priority (HAMi: 0 high, 1 low).
    pub priority: i32,
    /// HAMi-core sets 2 on kernel launches; the monitor counts it down and sets -1 to
    /// block launches.
    pub recent_kernel: i32,
    pub utilization_switch: i32,
    /// Unix seconds of the last kernel launch; 0 when never or in V0.
    pub last_kernel_time: i64,
}

impl Default for Usage {
    fn default() -> Self {
        Usage {
            version: Version {
                family: Family::V1,
                major: 1,
                minor: 0,
            },
            devices: Vec::new(),
            proc_num: 0,
            live_procs: 0,
            priority: 0,
            recent_kernel: 0,
            utilization_switch: 0,
            last_kernel_time: 0,
        }
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    i32::from_le_bytes(a)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    i32_at(b, at) as u32
}

/// The version of a region of `len` bytes whose first 12 bytes are `prefix`, by HAMi's
/// rule: the magic must match; `major_version == 1` with at least the V1 size is V1;
/// anything between the V0 and the V1 size is V0; the rest is refused.
pub fn detect(len: u64, prefix: &[u8]) -> Result<Version, RegionError> {
    if len < 12 || prefix.len() < 12 {
        return Err(RegionError::TooSmall { len, min: V0.size });
    }
    match i32_at(prefix, 0) {
        MAGIC => {}
        0 => return Err(RegionError::NotInitialised),
        found => return Err(RegionError::BadMagic { found }),
    }
    let (major, minor) = (u32_at(prefix, 4), u32_at(prefix, 8));
    if len >= V1.size as u64 {
        if major == 1 {
            return Ok(Version {
                family: Family::V1,
                major,
                minor,
            });
        }
    } else if len >= V0.size as u64 {
        return Ok(Version {
            family: Family::V0,
            major: 0,
            minor: 0,
        });
    } else {
        return Err(RegionError::TooSmall { len, min: V0.size });
    }
    Err(RegionError::UnsupportedVersion {
        major,
        minor,
        len,
        v1: V1.size,
    })
}

/// Reads regions, keeping its buffers between reads (a scan of many containers
/// allocates nothing per container once the buffers have grown).
///
/// A read takes four positioned reads (two before 1.2): the header together with the
/// first slots (as many as the previous region had in use; for 1.2 these give the
/// sequence numbers before the data), the fields after the slots, then (1.2) the slots
/// in use and their sequence numbers once more.
#[derive(Debug, Default)]
pub struct RegionReader {
    /// The header and the first `guess` slots.
    front: Vec<u8>,
    /// The slots in use.
    data: Vec<u8>,
    /// The slots in use read again, for their sequence numbers.
    after: Vec<u8>,
    /// Sequence numbers of the slots before their data was read.
    seqs: Vec<u64>,
    /// Slots in use in the last region read.
    guess: usize,
}

impl RegionReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads `src` into `out` (its device list is reused). On error `out` is left in an
    /// unspecified but valid state.
    pub fn read<S: RegionSource + ?Sized>(
        &mut self,
        src: &S,
        out: &mut Usage,
    ) -> Result<(), RegionError> {
        let len = src.region_len()?;
        if len < 12 {
            return Err(RegionError::TooSmall { len, min: V0.size });
        }
        let want = V1.slot_offset(self.guess.clamp(1, MAX_PROCS)) as u64;
        self.front.resize(want.min(len) as usize, 0);
        src.read_exact_at(&mut self.front, 0)?;
        let version = detect(len, &self.front)?;
        let layout = version.layout();
        // Both layouts' headers are shorter than the smallest region.
        let h = &self.front;
        let device_num = u64_at(h, layout.device_num);
        if device_num > MAX_DEVICES as u64 {
            return Err(RegionError::DeviceCount { found: device_num });
        }
        let devices = device_num as usize;

        let (tail_at, tail_len) = layout.tail();
        let mut tail = [0u8; 24];
        let tail = &mut tail[..tail_len];
        src.read_exact_at(tail, tail_at as u64)?;
        let field = |at: usize| at - tail_at;
        let proc_num = i32_at(tail, 0);
        if !(0..=MAX_PROCS as i32).contains(&proc_num) {
            return Err(RegionError::ProcCount { found: proc_num });
        }

        out.version = version;
        out.proc_num = proc_num as u32;
        out.utilization_switch = i32_at(tail, field(layout.utilization_switch));
        out.recent_kernel = i32_at(tail, field(layout.recent_kernel));
        out.priority = i32_at(tail, field(layout.priority));
        out.last_kernel_time = layout
            .last_kernel_time
            .map_or(0, |at| u64_at(tail, field(at)) as i64);
        out.devices.clear();
        for i in 0..devices {
            let entry = &h[layout.uuids + i * UUID_BYTES..layout.uuids + (i + 1) * UUID_BYTES];
            out.devices.push(DeviceUsage {
                uuid: DeviceId::parse(entry),
                limit: u64_at(h, layout.limit + i * 8),
                sm_limit: u64_at(h, layout.sm_limit + i * 8),
                ..DeviceUsage::default()
            });
        }

        let slots = proc_num as usize;
        self.read_slots(src, layout, version, slots)?;
        self.guess = slots;
        out.live_procs = 0;
        let s = layout.slot;
        for slot in self.data.chunks_exact(s.size).take(slots) {
            if i32_at(slot, s.status) == 0 {
                continue;
            }
            out.live_procs += 1;
            for (i, d) in out.devices.iter_mut().enumerate() {
                let m = s.used + i * s.memory.stride;
                let u = s.util + i * s.util_entry.stride;
                let add = |sum: &mut u64, at: usize| *sum = sum.saturating_add(u64_at(slot, at));
                add(&mut d.used, m + s.memory.total);
                add(&mut d.context, m + s.memory.context);
                add(&mut d.module, m + s.memory.module);
                add(&mut d.data, m + s.memory.data);
                add(&mut d.offset, m + s.memory.offset);
                add(&mut d.monitor_used, s.monitor_used + i * 8);
                add(&mut d.sm_util, u + s.util_entry.sm);
            }
        }
        Ok(())
    }

    /// Fills `self.data` with the first `slots` process slots, consistent under the
    /// seqlock when the version has one. `self.front` holds what the first read got.
    fn read_slots<S: RegionSource + ?Sized>(
        &mut self,
        src: &S,
        layout: &Layout,
        version: Version,
        slots: usize,
    ) -> Result<(), RegionError> {
        let size = layout.slot.size;
        let bytes = slots * size;
        let at = layout.slot_offset(0);
        // The slots the first read already holds, if it holds them all.
        let in_front = self.front.get(at..at + bytes);
        let seq = match (version.has_seqlock(), layout.slot.seqlock) {
            (true, Some(seq)) if slots > 0 => seq,
            _ => {
                match in_front {
                    Some(b) => {
                        self.data.clear();
                        self.data.extend_from_slice(b);
                    }
                    None => {
                        self.data.resize(bytes, 0);
                        src.read_exact_at(&mut self.data, at as u64)?;
                    }
                }
                return Ok(());
            }
        };
        self.data.resize(bytes, 0);
        self.after.resize(bytes, 0);
        let seq_of = |b: &[u8], i: usize| u64_at(b, i * size + seq);
        self.seqs.clear();
        match in_front {
            Some(b) => self.seqs.extend((0..slots).map(|i| seq_of(b, i))),
            None => {
                src.read_exact_at(&mut self.after, at as u64)?;
                self.seqs.extend((0..slots).map(|i| seq_of(&self.after, i)));
            }
        }
        let mut busy = 0;
        for attempt in 0..SEQLOCK_ATTEMPTS {
            if attempt > 0 {
                if attempt < SEQLOCK_SPINS {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
                src.read_exact_at(&mut self.after, at as u64)?;
                self.seqs.clear();
                self.seqs.extend((0..slots).map(|i| seq_of(&self.after, i)));
            }
            if let Some(i) = self.seqs.iter().position(|s| s & 1 == 1) {
                busy = i;
                continue;
            }
            src.read_exact_at(&mut self.data, at as u64)?;
            src.read_exact_at(&mut self.after, at as u64)?;
            match (0..slots).find(|i| self.seqs[*i] != seq_of(&self.after, *i)) {
                None => return Ok(()),
                Some(i) => busy = i,
            }
        }
        Err(RegionError::SlotBusy {
            slot: busy,
            attempts: SEQLOCK_ATTEMPTS,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared_region::write::{ImageDevice, ImageMemory, ImageProc, RegionImage};

    fn image(minor: u32) -> RegionImage {
        RegionImage {
            devices: vec![
                ImageDevice::new("GPU-11111111-2222-3333-4444-555555555555", 4 << 30, 30),
                ImageDevice::new("GPU-aaaaaaaa-2222-3333-4444-555555555555", 2 << 30, 100),
            ],
            procs: vec![
                ImageProc::live(
                    10,
                    1010,
                    &[
                        (ImageMemory::total(100, 1, 2, 3), 7),
                        (ImageMemory::total(50, 0, 0, 50), 0),
                    ],
                ),
                ImageProc {
                    status: 0,
                    ..ImageProc::live(11, 1011, &[(ImageMemory::total(999, 0, 0, 999), 99)])
                },
                ImageProc::live(12, 1012, &[(ImageMemory::total(5, 5, 0, 0), 3)]),
            ],
            priority: 1,
            recent_kernel: 2,
            utilization_switch: 1,
            last_kernel_time: 1_700_000_000,
            ..RegionImage::v1(minor)
        }
    }

    #[test]
    fn sums_live_slots_only() {
        let bytes = image(2).encode();
        let mut out = Usage::default();
        RegionReader::new()
            .read(bytes.as_slice(), &mut out)
            .unwrap();
        assert_eq!(out.version.to_string(), "v1.2");
        assert_eq!((out.proc_num, out.live_procs), (3, 2));
        assert_eq!(
            (
                out.priority,
                out.recent_kernel,
                out.utilization_switch,
                out.last_kernel_time
            ),
            (1, 2, 1, 1_700_000_000)
        );
        let d0 = &out.devices[0];
        assert_eq!(
            d0.uuid.as_str(),
            Some("GPU-11111111-2222-3333-4444-555555555555")
        );
        assert_eq!((d0.limit, d0.sm_limit), (4 << 30, 30));
        assert_eq!(
            (d0.used, d0.context, d0.module, d0.data, d0.sm_util),
            (105, 6, 2, 3, 10)
        );
        assert_eq!(out.devices[1].used, 50);
    }

    #[test]
    fn v0_reads_without_versions() {
        let img = RegionImage {
            family: Family::V0,
            ..image(0)
        };
        let mut out = Usage::default();
        RegionReader::new()
            .read(img.encode().as_slice(), &mut out)
            .unwrap();
        assert_eq!(out.version.to_string(), "v0");
        assert_eq!(out.last_kernel_time, 0);
        assert_eq!(out.devices[0].used, 105);
    }

    #[test]
    fn odd_seqlock_is_never_read() {
        let mut img = image(2);
        img.procs[2].seqlock = 7;
        let mut out = Usage::default();
        let err = RegionReader::new()
            .read(img.encode().as_slice(), &mut out)
            .unwrap_err();
        assert!(
            matches!(err, RegionError::SlotBusy { slot: 2, .. }),
            "{err}"
        );
        // Before 1.2 the same bytes are padding.
        img.minor = 1;
        RegionReader::new()
            .read(img.encode().as_slice(), &mut out)
            .unwrap();
        assert_eq!(out.devices[0].used, 105);
    }

    #[test]
    fn bad_regions_say_why() {
        let good = image(2).encode();
        let mut out = Usage::default();
        let mut read = |b: &[u8]| {
            RegionReader::new()
                .read(b, &mut out)
                .unwrap_err()
                .to_string()
        };
        assert!(read(&good[..100]).contains("smaller than the smallest layout"));
        assert!(read(&good[..V0.size - 1]).contains("smaller than the smallest layout"));
        let mut b = good.clone();
        b[..4].fill(0);
        assert!(read(&b).contains("not initialised"));
        b[..4].copy_from_slice(&7i32.to_le_bytes());
        assert!(read(&b).contains("initialized_flag is 7"));
        let mut b = good.clone();
        b[V1.device_num..V1.device_num + 8].copy_from_slice(&17u64.to_le_bytes());
        assert!(read(&b).contains("device_num is 17"));
        let mut b = good.clone();
        b[V1.proc_num..V1.proc_num + 4].copy_from_slice(&(-1i32).to_le_bytes());
        assert!(read(&b).contains("proc_num is -1"));
        b[V1.proc_num..V1.proc_num + 4].copy_from_slice(&1025i32.to_le_bytes());
        assert!(read(&b).contains("proc_num is 1025"));
        let mut b = good.clone();
        b[4..8].copy_from_slice(&2u32.to_le_bytes());
        assert!(read(&b).contains("declares version 2.2"));
    }

    #[test]
    fn written_ranges_cover_every_non_zero_byte() {
        for img in [
            image(2),
            RegionImage {
                family: Family::V0,
                ..image(0)
            },
        ] {
            let full = img.encode();
            let mut sparse = vec![0u8; full.len()];
            for r in img.written_ranges() {
                sparse[r.clone()].copy_from_slice(&full[r]);
            }
            assert!(sparse == full);
        }
    }

    #[test]
    fn uuids_unset_and_invalid() {
        let mut entry = [0u8; UUID_BYTES];
        assert_eq!(DeviceId::parse(&entry), DeviceId::Unset);
        entry[..3].copy_from_slice(&[b'G', 0xff, 0xfe]);
        assert_eq!(DeviceId::parse(&entry), DeviceId::Invalid);
        entry[..3].copy_from_slice(b"GPU");
        assert_eq!(DeviceId::parse(&entry).as_str(), Some("GPU"));
        entry.fill(b'x');
        assert_eq!(DeviceId::parse(&entry).as_str().map(str::len), Some(40));
    }
}
