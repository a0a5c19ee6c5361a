#![no_main]
//! HAMi-core shared regions (what the vGPU monitor reads from files containers can write):
//! reading never panics, whatever the bytes and the size. The input is read as is, and
//! also spliced into a full-size v1.2 region (header, first slots and the fields after the
//! slots taken from the input) so the fuzzer reaches the deep checks quickly; whatever is
//! accepted stays within the region's bounds.

use hami_core::shared_region::{MAGIC, MAX_DEVICES, MAX_PROCS, RegionReader, Usage, V1};
use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    let mut out = Usage::default();
    if RegionReader::new().read(bytes, &mut out).is_ok() {
        assert!(out.devices.len() <= MAX_DEVICES);
        assert!(out.proc_num as usize <= MAX_PROCS);
        assert!(out.live_procs <= out.proc_num);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut region = vec![0u8; V1.size];
    region[..4].copy_from_slice(&MAGIC.to_le_bytes());
    region[4..8].copy_from_slice(&1u32.to_le_bytes());
    region[8..12].copy_from_slice(&2u32.to_le_bytes());
    let (tail, rest) = data.split_at(data.len().min(24));
    let (header, slots) = rest.split_at(rest.len().min(V1.procs - 12));
    region[V1.proc_num..V1.proc_num + tail.len()].copy_from_slice(tail);
    region[12..12 + header.len()].copy_from_slice(header);
    let slots = &slots[..slots.len().min(4 * V1.slot.size)];
    region[V1.procs..V1.procs + slots.len()].copy_from_slice(slots);
    check(&region);
    // The same region cut short.
    let cut = usize::from(data.first().copied().unwrap_or(0)) * 8_000;
    check(&region[..cut.min(region.len())]);
});
