#![no_main]
//! Both node register forms: decoding never panics, and whatever decodes re-encodes to a value
//! that decodes to the same devices.

use hami_core::codec::{
    decode_node_register, decode_node_register_json, decode_node_register_legacy,
    encode_node_register_json, encode_node_register_legacy,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(devices) = decode_node_register_json(value) {
        let again = decode_node_register_json(&encode_node_register_json(&devices));
        assert_eq!(again.as_ref(), Ok(&devices), "JSON round trip of {value:?}");
    }
    if let Ok(devices) = decode_node_register_legacy(value) {
        let again = decode_node_register_legacy(&encode_node_register_legacy(&devices));
        assert_eq!(
            again.as_ref(),
            Ok(&devices),
            "legacy round trip of {value:?}"
        );
    }
    let _ = decode_node_register(value);
});
