#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The Rust layouts of hami-vendor-ffi checked against C: `abi.c` declares the vendor
//! structs as their headers do, is compiled with the system C compiler and prints sizes,
//! alignments, offsets and bit-field encodings, which must match the Rust side.

use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of};
use std::process::Command;

use hami_vendor_ffi::amdsmi::{self, AsicInfo};
use hami_vendor_ffi::libdrm_amdgpu::{InfoDeviceHead, MemoryInfo};
use hami_vendor_ffi::testing;

fn c_layout() -> (BTreeMap<String, usize>, Vec<(String, u64)>) {
    let dir = tempfile::tempdir().unwrap();
    let exe = testing::compile(dir.path(), "abi", include_str!("abi.c"), "", false, &[]).unwrap();
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut layout = BTreeMap::new();
    let mut bdfs = Vec::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["bdf", pci, value] => bdfs.push((pci.to_string(), value.parse().unwrap())),
            [name, value] => {
                layout.insert(name.to_string(), value.parse().unwrap());
            }
            _ => panic!("unexpected line {line:?}"),
        }
    }
    (layout, bdfs)
}

#[test]
fn rust_layouts_match_the_c_declarations() {
    let (c, bdfs) = c_layout();

    // amdsmi_bdf_t is read as its u64; the bit fields decode as C lays them out.
    assert_eq!(c["amdsmi_bdf_t.size"], size_of::<u64>());
    assert_eq!(bdfs.len(), 4);
    for (pci, as_uint) in &bdfs {
        assert_eq!(&amdsmi::decode_bdf(*as_uint), pci);
    }

    // The ASIC info buffer holds every release's struct, with the name first.
    for release in ["asic_oldest", "asic_newest"] {
        assert!(
            size_of::<AsicInfo>() >= c[&format!("{release}.size")],
            "{release}"
        );
        assert!(
            align_of::<AsicInfo>() >= c[&format!("{release}.align")],
            "{release}"
        );
        assert_eq!(c[&format!("{release}.market_name")], 0, "{release}");
    }
    assert_eq!(offset_of!(AsicInfo, market_name), 0);
    assert_eq!(c["asic_newest.market_name.size"], amdsmi::MARKET_NAME_MAX);

    // The head of drm_amdgpu_info_device ends right before cu_bitmap.
    assert_eq!(
        offset_of!(InfoDeviceHead, max_engine_clock),
        c["info_device.max_engine_clock"]
    );
    assert_eq!(
        offset_of!(InfoDeviceHead, max_memory_clock),
        c["info_device.max_memory_clock"]
    );
    assert_eq!(
        offset_of!(InfoDeviceHead, cu_active_number),
        c["info_device.cu_active_number"]
    );
    assert_eq!(size_of::<InfoDeviceHead>(), c["info_device.cu_bitmap"]);

    assert_eq!(size_of::<MemoryInfo>(), c["memory_info.size"]);
    assert_eq!(align_of::<MemoryInfo>(), c["memory_info.align"]);
    assert_eq!(
        offset_of!(MemoryInfo, vram.total_heap_size),
        c["memory_info.vram.total_heap_size"]
    );
    assert_eq!(offset_of!(MemoryInfo, gtt), c["memory_info.gtt"]);
}
