#![no_main]
//! MIG allocations: decoding never panics and decoded allocations round-trip.

use hami_core::codec::{decode_mig_allocations, encode_mig_allocations};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(allocations) = decode_mig_allocations(value) {
        let again = decode_mig_allocations(&encode_mig_allocations(&allocations));
        assert_eq!(again.as_ref(), Ok(&allocations), "round trip of {value:?}");
    }
});
