//! Property tests of the shared-region reader: arbitrary bytes of arbitrary sizes never
//! make it panic, whatever it accepts respects the region's bounds, and every image the
//! writer produces reads back as the sums of its live slots.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use hami_core::shared_region::{
    DeviceId, Family, ImageDevice, ImageMemory, ImageProc, MAX_DEVICES, MAX_PROCS, RegionImage,
    RegionReader, Usage, V0, V1,
};
use proptest::prelude::*;

fn check_bounds(bytes: &[u8]) {
    let mut out = Usage::default();
    if RegionReader::new().read(bytes, &mut out).is_ok() {
        assert!(out.devices.len() <= MAX_DEVICES);
        assert!(out.proc_num as usize <= MAX_PROCS);
        assert!(out.live_procs <= out.proc_num);
    }
}

fn memory() -> impl Strategy<Value = ImageMemory> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(|(c, m, d, o, t)| ImageMemory {
            context: c.into(),
            module: m.into(),
            data: d.into(),
            offset: o.into(),
            total: t.into(),
        })
}

fn image() -> impl Strategy<Value = RegionImage> {
    let devices = prop::collection::vec(
        ("[A-Za-z0-9-]{0,60}", any::<u64>(), 0u64..=100)
            .prop_map(|(u, l, s)| ImageDevice::new(&u, l, s)),
        0..=MAX_DEVICES,
    );
    let procs = prop::collection::vec(
        (
            any::<i32>(),
            prop_oneof![Just(0), Just(1), Just(2)],
            prop::collection::vec((memory(), 0u64..=100), MAX_DEVICES),
            0u64..1000,
        )
            .prop_map(|(pid, status, used, seq)| ImageProc {
                status,
                seqlock: seq * 2,
                ..ImageProc::live(pid, pid, &used)
            }),
        0..8,
    );
    (
        prop_oneof![
            Just((Family::V0, 0)),
            (0u32..=2).prop_map(|m| (Family::V1, m))
        ],
        devices,
        procs,
        any::<(i32, i32, i32)>(),
        0i64..2_000_000_000,
    )
        .prop_map(
            |((family, minor), devices, procs, (sw, rk, prio), lkt)| RegionImage {
                family,
                devices,
                procs,
                utilization_switch: sw,
                recent_kernel: rk,
                priority: prio,
                last_kernel_time: lkt,
                ..RegionImage::v1(minor)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_small_inputs_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        check_bounds(&bytes);
    }

    /// Full-size regions with a valid header and arbitrary bytes poked anywhere.
    #[test]
    fn corrupted_regions_never_panic(
        img in image(),
        pokes in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..64),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut bytes = img.encode();
        for (at, b) in pokes {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        // Poke the counts too, where most of the checking happens.
        let l = img.layout();
        let n = bytes.len();
        bytes[l.device_num % n] ^= 0x11;
        bytes[l.proc_num % n] ^= 0x01;
        if let Some(c) = cut {
            bytes.truncate(c.index(n + 1));
        }
        check_bounds(&bytes);
    }

    #[test]
    fn images_read_back_as_the_sums_of_their_live_slots(img in image()) {
        let mut out = Usage::default();
        RegionReader::new().read(img.encode().as_slice(), &mut out).unwrap();
        let expect_layout = if img.family == Family::V0 { &V0 } else { &V1 };
        prop_assert_eq!(out.version.layout(), expect_layout);
        prop_assert_eq!(out.devices.len(), img.devices.len());
        prop_assert_eq!(out.proc_num as usize, img.procs.len());
        prop_assert_eq!(out.live_procs as usize, img.procs.iter().filter(|p| p.status != 0).count());
        prop_assert_eq!((out.priority, out.recent_kernel, out.utilization_switch), (img.priority, img.recent_kernel, img.utilization_switch));
        let lkt = if img.family == Family::V0 { 0 } else { img.last_kernel_time };
        prop_assert_eq!(out.last_kernel_time, lkt);
        for (i, (got, dev)) in out.devices.iter().zip(&img.devices).enumerate() {
            let live = || img.procs.iter().filter(|p| p.status != 0);
            let sum = |f: fn(&ImageMemory) -> u64| live().map(|p| f(&p.used[i])).fold(0u64, u64::saturating_add);
            prop_assert_eq!(got.used, sum(|m| m.total));
            prop_assert_eq!(got.context, sum(|m| m.context));
            prop_assert_eq!(got.data, sum(|m| m.data));
            prop_assert_eq!(got.sm_util, live().map(|p| p.sm_util[i]).sum::<u64>());
            prop_assert_eq!((got.limit, got.sm_limit), (dev.limit, dev.sm_limit));
            let label: String = dev.uuid.chars().take(40).collect();
            match &got.uuid {
                DeviceId::Unset => prop_assert!(label.is_empty()),
                DeviceId::Uuid(u) => prop_assert_eq!(u.as_str(), label.as_str()),
                DeviceId::Invalid => prop_assert!(false, "ASCII is valid UTF-8"),
            }
        }
    }
}
