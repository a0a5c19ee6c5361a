#![no_main]
//! Device scoring weights: decoding never panics and decoded weights round-trip.

use hami_core::codec::{decode_scoring_weights, encode_scoring_weights};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(weights) = decode_scoring_weights(value) {
        let again = decode_scoring_weights(&encode_scoring_weights(&weights));
        assert_eq!(again, Ok(weights), "round trip of {value:?}");
    }
});
