#![no_main]
//! Node lock values: decoding never panics; a decoded lock re-encodes to a fixed point with the
//! same owner (sub-second precision is not on the wire).

use hami_core::codec::{decode_node_lock, encode_node_lock, release_allowed};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(lock) = decode_node_lock(value) {
        let once = encode_node_lock(&lock);
        let again = decode_node_lock(&once);
        assert!(
            again.is_ok(),
            "re-encoded lock {once:?} of {value:?} does not decode"
        );
        if let Ok(again) = again {
            assert_eq!(encode_node_lock(&again), once);
            assert_eq!(again.owner, lock.owner);
        }
    }
    let _ = release_allowed(value, "default", "pod");
});
