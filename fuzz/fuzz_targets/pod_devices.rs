#![no_main]
//! Pod device strings: decoding never panics; re-encoding a decoded value decodes to the same
//! containers plus the trailing empty one the grammar always yields.

use hami_core::codec::{decode_pod_single_device, encode_pod_single_device};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(pod) = decode_pod_single_device(value) {
        let mut expected = pod.clone();
        expected.push(Vec::new());
        let again = decode_pod_single_device(&encode_pod_single_device(&pod));
        assert_eq!(again, Ok(expected), "round trip of {value:?}");
    }
});
