#![no_main]
//! Topology pair scores: decoding never panics and decoded scores round-trip.

use hami_core::codec::{PairScores, decode_topology_scores, encode_topology_scores};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(scores) = decode_topology_scores(value) {
        let again = decode_topology_scores(&encode_topology_scores(&scores));
        assert_eq!(again.as_ref(), Ok(&scores), "round trip of {value:?}");
        let pairs = PairScores::new(&scores);
        let _ = pairs.score("GPU-0", "GPU-1");
    }
});
