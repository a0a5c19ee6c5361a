//! HAMi's handshake health cases (`Test_CheckHealth` of Project-HAMi/HAMi
//! `pkg/device/biren/device_test.go` and `pkg/device/vastai/device_test.go`,
//! `Test_KunlunVDevices_CheckHealth` of `pkg/device/kunlun/vdevice_test.go`) against
//! hami-rs's judge (`docs/protocol.md#handshake`): a request older than the timeout with
//! no allocatable devices takes the family out; an answer (any other value) keeps it in
//! and is asked again; a fresh request keeps it in and is left alone.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use chrono::NaiveDateTime;
use hami_scheduler::health::judge;

fn at(s: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap()
}

const TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn requesting_state_expired() {
    // HAMi: (false, false) for "Requesting_2025-01-07 00:00:00".
    for count in ["birentech.com/gpu", "vastaitech.com/va"] {
        let v = judge(
            Some("Requesting_2025-01-07 00:00:00"),
            None,
            count,
            at("2026-01-01 00:00:00"),
            TIMEOUT,
        );
        assert!(v.unhealthy.is_some(), "{count}");
        assert_eq!(v.write, None);
    }
}

#[test]
fn unknown_state() {
    // HAMi: (true, true): healthy, and the node is asked again.
    for count in [
        "birentech.com/gpu",
        "vastaitech.com/va",
        "kunlunxin.com/vxpu",
    ] {
        let now = at("2026-01-01 00:00:00");
        let v = judge(Some("Unknown"), None, count, now, TIMEOUT);
        assert_eq!(v.unhealthy, None, "{count}");
        assert_eq!(v.write.as_deref(), Some("Requesting_2026-01-01 00:00:00"));
    }
}

#[test]
fn requesting_state_recently_set_is_still_online() {
    // Kunlunxin vXPU: (true, false): healthy, nothing written.
    let now = at("2026-01-01 00:00:30");
    let v = judge(
        Some("Requesting_2026-01-01 00:00:00"),
        None,
        "kunlunxin.com/vxpu",
        now,
        TIMEOUT,
    );
    assert_eq!((v.unhealthy, v.write), (None, None));
}
