//! HAMi's example values (`docs/protocol.md`) and every rejection rule of every annotation codec.

// Test helpers outside `#[test]` functions panic on purpose when a fixture is wrong.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, TimeZone, Utc};
use hami_core::annotations;
use hami_core::codec::*;
use hami_core::model::{ContainerDevice, DeviceInfo, MigPlacement, MigProfile};

fn err_text<T: std::fmt::Debug>(result: Result<T, CodecError>) -> String {
    result.expect_err("expected an error").to_string()
}

fn p4(id: &str) -> DeviceInfo {
    DeviceInfo {
        id: id.into(),
        index: 0,
        count: 5,
        mem_mib: 8192,
        cores: 100,
        dev_type: "NVIDIA-Tesla P4".into(),
        numa: 0,
        mode: "".into(),
        health: true,
        mig_profiles: Vec::new(),
        custom_info: Default::default(),
    }
}

fn mig_1g5gb() -> MigProfile {
    MigProfile {
        name: "1g.5gb".to_owned(),
        memory_mb: 4864,
        core: 15,
        slice_count: 1,
        placements: vec![MigPlacement { start: 6, size: 1 }],
    }
}

// =============================================================================================
// Node register: JSON form
// =============================================================================================

mod node_register_json {
    use super::*;

    #[test]
    fn encodes_with_omitempty_like_the_plugin() {
        assert_eq!(
            encode_node_register_json(&[p4("GPU-0")]),
            r#"[{"id":"GPU-0","count":5,"devmem":8192,"devcore":100,"type":"NVIDIA-Tesla P4","health":true}]"#
        );
    }

    #[test]
    fn encodes_every_key_in_writer_order() {
        let device = DeviceInfo {
            id: "GPU-1".into(),
            index: 3,
            count: 7,
            mem_mib: 40960,
            cores: 100,
            dev_type: "NVIDIA A100".into(),
            numa: 1,
            mode: "mig".into(),
            health: true,
            mig_profiles: vec![mig_1g5gb()],
            custom_info: Default::default(),
        };
        assert_eq!(
            encode_node_register_json(&[device]),
            concat!(
                r#"[{"id":"GPU-1","index":3,"count":7,"devmem":40960,"devcore":100,"#,
                r#""type":"NVIDIA A100","numa":1,"mode":"mig","#,
                r#""migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"#,
                r#""placements":[{"start":6,"size":1}]}],"health":true}]"#
            )
        );
    }

    #[test]
    fn zero_device_encodes_as_empty_object() {
        assert_eq!(encode_node_register_json(&[DeviceInfo::default()]), "[{}]");
        assert_eq!(encode_node_register_json(&[]), "[]");
    }

    #[test]
    fn mig_profile_keys_are_never_omitted() {
        let device = DeviceInfo {
            mig_profiles: vec![MigProfile::default()],
            custom_info: Default::default(),
            ..DeviceInfo::default()
        };
        assert_eq!(
            encode_node_register_json(&[device]),
            r#"[{"migProfiles":[{"name":"","memoryMB":0,"core":0,"sliceCount":0,"placements":[]}]}]"#
        );
    }

    #[test]
    fn strings_are_escaped_like_go() {
        let device = DeviceInfo {
            id: "a<b>&\"c\"\n".into(),
            ..DeviceInfo::default()
        };
        let encoded = encode_node_register_json(std::slice::from_ref(&device));
        assert_eq!(encoded, r#"[{"id":"a\u003cb\u003e\u0026\"c\"\n"}]"#);
        assert_eq!(decode_node_register_json(&encoded).unwrap(), vec![device]);
    }

    #[test]
    fn decodes_the_real_example() {
        let value = r#"[{"id":"GPU-0","count":5,"devmem":8192,"devcore":100,"type":"NVIDIA-Tesla P4","numa":0,"health":true,"index":0}]"#;
        assert_eq!(decode_node_register_json(value).unwrap(), vec![p4("GPU-0")]);
    }

    #[test]
    fn missing_keys_are_zero_and_missing_health_is_unhealthy() {
        let devices = decode_node_register_json(r#"[{"id":"GPU-0"}]"#).unwrap();
        assert_eq!(
            devices,
            vec![DeviceInfo {
                id: "GPU-0".into(),
                ..DeviceInfo::default()
            }]
        );
        assert!(!devices[0].health);
    }

    #[test]
    fn null_values_are_zero() {
        let value = r#"[{"id":null,"count":null,"health":null,"migProfiles":null,"numa":null}]"#;
        assert_eq!(
            decode_node_register_json(value).unwrap(),
            vec![DeviceInfo::default()]
        );
    }

    #[test]
    fn unknown_keys_are_ignored_and_custominfo_kept() {
        let value = r#"[{"id":"GPU-0","count":5,"devmem":8192,"devcore":100,"type":"NVIDIA-Tesla P4","health":true,
            "migtemplate":[{"models":["A100"],"allowedGeometries":[]}],"devicevendor":"NVIDIA",
            "custominfo":{"a":1},"somethingNew":[1,2,3],"devicepairscore":{}}]"#;
        let mut expected = p4("GPU-0");
        expected
            .custom_info
            .insert("a".into(), serde_json::json!(1));
        assert_eq!(decode_node_register_json(value).unwrap(), vec![expected]);
        // Vendor facts survive a round trip, keys sorted as Go writes a map.
        let ascend = r#"[{"id":"0A1B","count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,"custominfo":{"NetworkID":1,"A":"x"}}]"#;
        let devices = decode_node_register_json(ascend).unwrap();
        assert_eq!(devices[0].custom_int("NetworkID"), Some(1));
        assert_eq!(devices[0].custom_str("A"), Some("x"));
        assert_eq!(
            encode_node_register_json(&devices),
            r#"[{"id":"0A1B","count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,"custominfo":{"A":"x","NetworkID":1}}]"#
        );
        assert!(decode_node_register_json(r#"[{"id":"x","custominfo":[1]}]"#).is_err());
    }

    #[test]
    fn keys_match_case_insensitively_like_go() {
        let value = r#"[{"ID":"GPU-0","Count":5,"DEVMEM":8192,"devCore":100,"Type":"NVIDIA-Tesla P4","Health":true}]"#;
        assert_eq!(decode_node_register_json(value).unwrap(), vec![p4("GPU-0")]);
    }

    #[test]
    fn decodes_mig_profiles_and_ignores_instance_count() {
        let value = r#"[{"id":"GPU-0","mode":"mig","migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"instanceCount":7,"placements":[{"start":6,"size":1}]}]}]"#;
        let devices = decode_node_register_json(value).unwrap();
        assert_eq!(devices[0].mig_profiles, vec![mig_1g5gb()]);
        assert_eq!(&*devices[0].mode, "mig");
    }

    #[test]
    fn empty_and_null_arrays_are_no_devices() {
        assert_eq!(decode_node_register_json("[]").unwrap(), vec![]);
        assert_eq!(decode_node_register_json(" [ ] ").unwrap(), vec![]);
        assert_eq!(decode_node_register_json("null").unwrap(), vec![]);
    }

    #[test]
    fn negative_numbers_are_typed_errors() {
        assert_eq!(
            err_text(decode_node_register_json(r#"[{"id":"GPU-0","count":-1}]"#)),
            r#"invalid node register JSON: entry 0: field "count": expected an unsigned 32-bit integer, found -1"#
        );
        assert!(matches!(
            decode_node_register_json(r#"[{},{"devmem":-8192}]"#),
            Err(CodecError::JsonField { entry: 1, .. })
        ));
        assert!(decode_node_register_json(r#"[{"index":-1}]"#).is_err());
        assert!(decode_node_register_json(r#"[{"devcore":-100}]"#).is_err());
    }

    #[test]
    fn numa_may_be_negative_but_must_fit() {
        assert_eq!(
            decode_node_register_json(r#"[{"numa":-1}]"#).unwrap()[0].numa,
            -1
        );
        assert!(decode_node_register_json(r#"[{"numa":2147483648}]"#).is_err());
    }

    #[test]
    fn oversized_and_non_integer_numbers_are_typed_errors() {
        for value in [
            r#"[{"count":4294967296}]"#,
            r#"[{"count":99999999999999999999999}]"#,
            r#"[{"count":1.5}]"#,
            r#"[{"count":1e2}]"#,
            r#"[{"count":"5"}]"#,
            r#"[{"health":"true"}]"#,
            r#"[{"id":7}]"#,
            r#"[{"migProfiles":{}}]"#,
            r#"[{"migProfiles":[7]}]"#,
        ] {
            assert!(
                matches!(
                    decode_node_register_json(value),
                    Err(CodecError::JsonField { .. })
                ),
                "{value}"
            );
        }
    }

    #[test]
    fn nested_errors_name_the_path() {
        let value = r#"[{"migProfiles":[{"placements":[{"start":0,"size":-2}]}]}]"#;
        assert_eq!(
            err_text(decode_node_register_json(value)),
            r#"invalid node register JSON: entry 0: field "migProfiles[0].placements[0].size": expected an unsigned 32-bit integer, found -2"#
        );
    }

    #[test]
    fn wrong_shapes_are_errors() {
        assert!(matches!(
            decode_node_register_json("{}"),
            Err(CodecError::Json { .. })
        ));
        assert!(matches!(
            decode_node_register_json("[{]"),
            Err(CodecError::Json { .. })
        ));
        assert!(matches!(
            decode_node_register_json(""),
            Err(CodecError::Json { .. })
        ));
        assert!(matches!(
            decode_node_register_json("[null]"),
            Err(CodecError::JsonField { .. })
        ));
        assert!(matches!(
            decode_node_register_json(r#"["GPU-0"]"#),
            Err(CodecError::JsonField { .. })
        ));
    }
}

// =============================================================================================
// Node register: legacy form
// =============================================================================================

mod node_register_legacy {
    use super::*;

    fn ebe7() -> DeviceInfo {
        DeviceInfo {
            id: "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4".into(),
            index: 0,
            count: 10,
            mem_mib: 7680,
            cores: 100,
            dev_type: "NVIDIA-Tesla P4".into(),
            numa: 0,
            mode: "hami-core".into(),
            health: true,
            mig_profiles: Vec::new(),
            custom_info: Default::default(),
        }
    }

    #[test]
    fn encodes_nine_fields_and_trailing_colon() {
        assert_eq!(
            encode_node_register_legacy(&[ebe7()]),
            "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true,0,hami-core:"
        );
    }

    #[test]
    fn encodes_several_devices() {
        let mut second = ebe7();
        second.id = "GPU-2".into();
        second.index = 1;
        second.numa = 1;
        second.health = false;
        assert_eq!(
            encode_node_register_legacy(&[ebe7(), second.clone()]),
            "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true,0,hami-core:GPU-2,10,7680,100,NVIDIA-Tesla P4,1,false,1,hami-core:"
        );
        assert_eq!(
            decode_node_register_legacy(&encode_node_register_legacy(&[ebe7(), second.clone()]))
                .unwrap(),
            vec![ebe7(), second]
        );
    }

    #[test]
    fn empty_inventory_round_trips() {
        assert_eq!(encode_node_register_legacy(&[]), ":");
        assert_eq!(decode_node_register_legacy(":").unwrap(), vec![]);
        assert_eq!(decode_node_register_legacy(":::").unwrap(), vec![]);
    }

    #[test]
    fn decodes_seven_fields_as_index_zero_hami_core() {
        let value = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true:";
        assert_eq!(decode_node_register_legacy(value).unwrap(), vec![ebe7()]);
    }

    #[test]
    fn decodes_nine_fields() {
        let value = "GPU-a,4,16384,200,NVIDIA-A10,-1,false,5,mps:";
        assert_eq!(
            decode_node_register_legacy(value).unwrap(),
            vec![DeviceInfo {
                id: "GPU-a".into(),
                index: 5,
                count: 4,
                mem_mib: 16384,
                cores: 200,
                dev_type: "NVIDIA-A10".into(),
                numa: -1,
                mode: "mps".into(),
                health: false,
                mig_profiles: Vec::new(),
                custom_info: Default::default(),
            }]
        );
    }

    #[test]
    fn empty_segments_are_skipped_and_last_colon_is_optional() {
        let value = ":GPU-a,1,2,3,T,0,1::GPU-b,1,2,3,T,0,0";
        let devices = decode_node_register_legacy(value).unwrap();
        assert_eq!(devices.len(), 2);
        assert!(devices[0].health);
        assert!(!devices[1].health);
    }

    #[test]
    fn health_uses_go_parse_bool() {
        for (text, expected) in [
            ("1", true),
            ("t", true),
            ("T", true),
            ("TRUE", true),
            ("true", true),
            ("True", true),
            ("0", false),
            ("f", false),
            ("F", false),
            ("FALSE", false),
            ("false", false),
            ("False", false),
        ] {
            let value = format!("GPU-a,1,2,3,T,0,{text}:");
            assert_eq!(
                decode_node_register_legacy(&value).unwrap()[0].health,
                expected,
                "{text}"
            );
        }
        assert_eq!(
            err_text(decode_node_register_legacy("GPU-a,1,2,3,T,0,yes:")),
            r#"invalid health field: strconv.ParseBool: parsing "yes": invalid syntax"#
        );
        assert!(decode_node_register_legacy("GPU-a,1,2,3,T,0,tRUE:").is_err());
        assert!(decode_node_register_legacy("GPU-a,1,2,3,T,0, true:").is_err());
    }

    #[test]
    fn missing_separator() {
        for value in ["", "GPU-a,1,2,3,T,0,true", "[]"] {
            assert_eq!(
                err_text(decode_node_register_legacy(value)),
                "node annotation missing device separator"
            );
        }
    }

    #[test]
    fn malformed_segment() {
        assert_eq!(
            err_text(decode_node_register_legacy("GPU-a:")),
            r#"malformed node annotation segment: "GPU-a""#
        );
        assert_eq!(
            err_text(decode_node_register_legacy("GPU-a,1,2,3,T,0,true:oops\t:")),
            r#"malformed node annotation segment: "oops\t""#
        );
    }

    #[test]
    fn unexpected_field_count() {
        for (value, count) in [
            ("a,b:", 2),
            ("GPU-a,1,2,3,T,0:", 6),
            ("GPU-a,1,2,3,T,0,true,0:", 8),
            ("GPU-a,1,2,3,T,0,true,0,hami-core,x:", 10),
        ] {
            assert_eq!(
                err_text(decode_node_register_legacy(value)),
                format!("unexpected field count {count} in node annotation")
            );
        }
    }

    #[test]
    fn invalid_numeric_fields() {
        let cases = [
            (
                "GPU-a,x,2,3,T,0,true:",
                r#"invalid count field: strconv.ParseInt: parsing "x": invalid syntax"#,
            ),
            (
                "GPU-a,1,2.5,3,T,0,true:",
                r#"invalid memory field: strconv.ParseInt: parsing "2.5": invalid syntax"#,
            ),
            (
                "GPU-a,1,2,,T,0,true:",
                r#"invalid core field: strconv.ParseInt: parsing "": invalid syntax"#,
            ),
            (
                "GPU-a,1,2,3,T,zero,true:",
                r#"invalid numa field: strconv.Atoi: parsing "zero": invalid syntax"#,
            ),
            (
                "GPU-a,1,2,3,T,0,true,one,hami-core:",
                r#"invalid index field: strconv.Atoi: parsing "one": invalid syntax"#,
            ),
            (
                "GPU-a,2147483648,2,3,T,0,true:",
                r#"invalid count field: strconv.ParseInt: parsing "2147483648": value out of range"#,
            ),
            (
                "GPU-a,1,2,3,T,0,true,4294967296,hami-core:",
                r#"invalid index field: strconv.Atoi: parsing "4294967296": value out of range"#,
            ),
            (
                "GPU-a, 1,2,3,T,0,true:",
                r#"invalid count field: strconv.ParseInt: parsing " 1": invalid syntax"#,
            ),
        ];
        for (value, message) in cases {
            assert_eq!(
                err_text(decode_node_register_legacy(value)),
                message,
                "{value}"
            );
        }
    }

    #[test]
    fn negative_index_and_capacities() {
        assert_eq!(
            err_text(decode_node_register_legacy(
                "GPU-a,1,2,3,T,0,true,-1,hami-core:"
            )),
            "index field must not be negative: -1"
        );
        assert_eq!(
            err_text(decode_node_register_legacy("GPU-a,-5,2,3,T,0,true:")),
            "count field must not be negative: -5"
        );
        assert_eq!(
            err_text(decode_node_register_legacy("GPU-a,1,-2,3,T,0,true:")),
            "memory field must not be negative: -2"
        );
        assert_eq!(
            err_text(decode_node_register_legacy("GPU-a,1,2,-3,T,0,true:")),
            "core field must not be negative: -3"
        );
    }

    #[test]
    fn blank_and_duplicate_ids() {
        assert_eq!(
            err_text(decode_node_register_legacy(",1,2,3,T,0,true:")),
            "device ID must not be empty"
        );
        assert_eq!(
            err_text(decode_node_register_legacy("  ,1,2,3,T,0,true:")),
            "device ID must not be empty"
        );
        assert_eq!(
            err_text(decode_node_register_legacy(
                "GPU-0,1,2,3,T,0,true:GPU-0,1,2,3,T,0,true:"
            )),
            r#"duplicate device ID "GPU-0""#
        );
    }

    #[test]
    fn encoder_drops_mig_profiles() {
        let mut device = ebe7();
        device.mig_profiles = vec![mig_1g5gb()];
        let decoded = decode_node_register_legacy(&encode_node_register_legacy(&[device])).unwrap();
        assert_eq!(decoded, vec![ebe7()]);
    }
}

mod node_register_auto {
    use super::*;

    #[test]
    fn bracket_means_json() {
        let json = encode_node_register_json(&[p4("GPU-0")]);
        assert_eq!(decode_node_register(&json).unwrap(), vec![p4("GPU-0")]);
        assert_eq!(
            decode_node_register(&format!("  \n{json}")).unwrap(),
            vec![p4("GPU-0")]
        );
        assert_eq!(decode_node_register("[]").unwrap(), vec![]);
        assert!(matches!(
            decode_node_register("[oops"),
            Err(CodecError::Json { .. })
        ));
    }

    #[test]
    fn anything_else_is_legacy() {
        let value = "GPU-0,5,8192,100,NVIDIA-Tesla P4,0,true:";
        let mut expected = p4("GPU-0");
        expected.mode = "hami-core".into();
        assert_eq!(decode_node_register(value).unwrap(), vec![expected]);
        assert_eq!(
            err_text(decode_node_register("")),
            "node annotation missing device separator"
        );
        assert_eq!(
            err_text(decode_node_register("null")),
            "node annotation missing device separator"
        );
    }
}

// =============================================================================================
// Pod device strings
// =============================================================================================

mod pod_devices {
    use super::*;

    fn dev(uuid: &str, mem: u32, cores: u32) -> ContainerDevice {
        ContainerDevice {
            idx: 0,
            uuid: uuid.to_owned(),
            dev_type: "NVIDIA".to_owned(),
            mem_mib: mem,
            slots: 0,
            cores,
        }
    }

    const TWO_CONTAINERS: &str = "GPU-8dcd427f-bbd6-4b3f-a28b-4d1c7ef4f1a2,NVIDIA,500,3:;GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,NVIDIA,500,3:;";

    #[test]
    fn encodes_the_reference_example() {
        let pod = vec![
            vec![dev("GPU-8dcd427f-bbd6-4b3f-a28b-4d1c7ef4f1a2", 500, 3)],
            vec![dev("GPU-ebe7c3f7-303d-558d-435e-99a160631fe4", 500, 3)],
        ];
        assert_eq!(encode_pod_single_device(&pod), TWO_CONTAINERS);
    }

    #[test]
    fn decoding_keeps_the_trailing_empty_container() {
        let pod = decode_pod_single_device(TWO_CONTAINERS).unwrap();
        assert_eq!(pod.len(), 3);
        assert_eq!(
            pod[0],
            vec![dev("GPU-8dcd427f-bbd6-4b3f-a28b-4d1c7ef4f1a2", 500, 3)]
        );
        assert_eq!(
            pod[1],
            vec![dev("GPU-ebe7c3f7-303d-558d-435e-99a160631fe4", 500, 3)]
        );
        assert!(pod[2].is_empty());

        assert_eq!(
            decode_pod_single_device("a,NVIDIA,1,2:;").unwrap(),
            vec![vec![dev("a", 1, 2)], vec![]]
        );
    }

    #[test]
    fn empty_string_is_one_empty_container() {
        assert_eq!(decode_pod_single_device("").unwrap(), vec![vec![]]);
        assert_eq!(encode_pod_single_device(&vec![]), "");
    }

    #[test]
    fn empty_containers_keep_their_position() {
        let pod = vec![
            vec![],
            vec![dev("GPU-a", 3000, 50), dev("GPU-b", 3000, 50)],
            vec![],
        ];
        let encoded = encode_pod_single_device(&pod);
        assert_eq!(encoded, ";GPU-a,NVIDIA,3000,50:GPU-b,NVIDIA,3000,50:;;");
        let mut expected = pod.clone();
        expected.push(vec![]);
        assert_eq!(decode_pod_single_device(&encoded).unwrap(), expected);
        // The device plugin's erased form of a one-container pod.
        assert_eq!(
            decode_pod_single_device(";;").unwrap(),
            vec![vec![], vec![], vec![]]
        );
    }

    #[test]
    fn last_device_colon_is_optional() {
        assert_eq!(
            decode_pod_single_device("a,NVIDIA,1,2").unwrap(),
            vec![vec![dev("a", 1, 2)]]
        );
    }

    #[test]
    fn segments_without_comma_are_ignored() {
        assert_eq!(
            decode_pod_single_device("junk::a,NVIDIA,1,2:more;").unwrap(),
            vec![vec![dev("a", 1, 2)], vec![]]
        );
    }

    #[test]
    fn extra_fields_are_ignored() {
        assert_eq!(
            decode_pod_single_device("a,NVIDIA,1,2,extra,more:").unwrap(),
            vec![vec![dev("a", 1, 2)]]
        );
    }

    #[test]
    fn type_may_be_anything_including_empty() {
        let pod = decode_pod_single_device("a,,1,2:").unwrap();
        assert_eq!(pod[0][0].dev_type, "");
    }

    #[test]
    fn missing_fields() {
        for value in ["a,NVIDIA,1:", "a,:", "GPU-0,NVIDIA:;", ",,,:"] {
            let text = err_text(decode_pod_single_device(value));
            if value == ",,,:" {
                // Four fields, but no UUID.
                assert!(text.contains("empty device UUID"), "{text}");
                continue;
            }
            assert!(
                text.contains(
                    "pod annotation format error, missing fields, do not use nodeName in task spec"
                ),
                "{text}"
            );
        }
    }

    #[test]
    fn non_integer_quantities() {
        assert_eq!(
            err_text(decode_pod_single_device("a,NVIDIA,x,2:")),
            r#"invalid usedmem in pod device "a,NVIDIA,x,2": strconv.ParseInt: parsing "x": invalid syntax"#
        );
        assert_eq!(
            err_text(decode_pod_single_device("a,NVIDIA,1,2.0:")),
            r#"invalid usedcores in pod device "a,NVIDIA,1,2.0": strconv.ParseInt: parsing "2.0": invalid syntax"#
        );
        assert!(decode_pod_single_device("a,NVIDIA,2147483648,0:").is_err());
        assert!(decode_pod_single_device("a,NVIDIA, 1,0:").is_err());
    }

    #[test]
    fn hardening_negative_quantities_and_empty_uuid() {
        assert_eq!(
            err_text(decode_pod_single_device("a,NVIDIA,-1,2:")),
            r#"usedmem must not be negative in pod device "a,NVIDIA,-1,2""#
        );
        assert_eq!(
            err_text(decode_pod_single_device("a,NVIDIA,1,-2:")),
            r#"usedcores must not be negative in pod device "a,NVIDIA,1,-2""#
        );
        assert_eq!(
            err_text(decode_pod_single_device(",NVIDIA,1,2:")),
            r#"empty device UUID in pod device ",NVIDIA,1,2""#
        );
    }

    #[test]
    fn container_helpers() {
        assert_eq!(
            encode_container_devices(&vec![dev("a", 1, 2)]),
            "a,NVIDIA,1,2:"
        );
        assert_eq!(
            decode_container_devices("a,NVIDIA,1,2:").unwrap(),
            vec![dev("a", 1, 2)]
        );
        assert_eq!(decode_container_devices("").unwrap(), vec![]);
    }
}

// =============================================================================================
// Node lock
// =============================================================================================

mod node_lock {
    use super::*;

    fn at(text: &str) -> DateTime<FixedOffset> {
        DateTime::parse_from_rfc3339(text).unwrap()
    }

    #[test]
    fn decodes_and_encodes_the_reference_example() {
        let value = "2026-08-21T06:20:39+08:00,default,gpu-pod";
        let lock = decode_node_lock(value).unwrap();
        assert_eq!(lock.acquired_at, at("2026-08-21T06:20:39+08:00"));
        assert_eq!(lock.acquired_at.offset().local_minus_utc(), 8 * 3600);
        assert_eq!(
            lock.owner,
            Some(LockOwner {
                namespace: "default".to_owned(),
                name: "gpu-pod".to_owned()
            })
        );
        assert_eq!(encode_node_lock(&lock), value);
    }

    #[test]
    fn utc_is_written_with_z_and_without_fraction() {
        let when = Utc
            .with_ymd_and_hms(2024, 2, 21, 10, 30, 0)
            .unwrap()
            .fixed_offset()
            + chrono::TimeDelta::milliseconds(250);
        let lock = NodeLock::owned(when, "ns", "p");
        assert_eq!(encode_node_lock(&lock), "2024-02-21T10:30:00Z,ns,p");
        let negative = at("2024-02-21T10:30:00-05:30");
        assert_eq!(
            encode_node_lock(&NodeLock {
                acquired_at: negative,
                owner: None
            }),
            "2024-02-21T10:30:00-05:30"
        );
    }

    #[test]
    fn legacy_bare_time() {
        let lock = decode_node_lock("2024-02-21T10:30:00Z").unwrap();
        assert_eq!(lock.owner, None);
        assert_eq!(encode_node_lock(&lock), "2024-02-21T10:30:00Z");
        assert!(!lock.is_owned_by("", ""));
    }

    #[test]
    fn fractional_seconds_are_accepted_like_go() {
        let lock = decode_node_lock("2024-02-21T10:30:00.123456Z,a,b").unwrap();
        assert_eq!(lock.acquired_at.timestamp_subsec_millis(), 123);
    }

    #[test]
    fn wrong_part_counts() {
        assert_eq!(
            err_text(decode_node_lock("part1,part2")),
            "malformed lock annotation: expected 3 parts, got 2 from part1,part2"
        );
        assert_eq!(
            err_text(decode_node_lock("2024-02-21T10:30:00Z,a,b,c")),
            "malformed lock annotation: expected 3 parts, got 4 from 2024-02-21T10:30:00Z,a,b,c"
        );
        assert_eq!(
            err_text(decode_node_lock(",")),
            "malformed lock annotation: expected 3 parts, got 2 from ,"
        );
    }

    #[test]
    fn bad_times_are_typed_errors() {
        for value in [
            "",
            "yesterday",
            "yesterday,default,pod",
            "2024-02-21 10:30:00Z,a,b",
            "2024-02-21t10:30:00Z,a,b",
            "2024-02-21T10:30:00z,a,b",
            "2024-02-21T10:30:00,a,b",
            "2024-02-21T10:30:60Z,a,b",
            "2024-13-21T10:30:00Z,a,b",
            "1708511400,a,b",
        ] {
            let error = decode_node_lock(value).expect_err(value);
            assert!(
                matches!(error, CodecError::LockTime { .. }),
                "{value}: {error}"
            );
        }
        assert_eq!(
            err_text(decode_node_lock("soon,ns,pod")),
            r#"invalid lock time "soon" in lock annotation "soon,ns,pod": premature end of input"#
        );
    }

    #[test]
    fn empty_owner_parts_are_kept() {
        let lock = decode_node_lock("2024-02-21T10:30:00Z,,").unwrap();
        assert!(lock.is_owned_by("", ""));
        assert_eq!(encode_node_lock(&lock), "2024-02-21T10:30:00Z,,");
    }

    #[test]
    fn ownership() {
        let lock = decode_node_lock("2026-08-21T06:20:39+08:00,default,gpu-pod").unwrap();
        assert!(lock.is_owned_by("default", "gpu-pod"));
        assert!(!lock.is_owned_by("default", "pod"));
        assert!(!lock.is_owned_by("other", "gpu-pod"));
    }

    #[test]
    fn expiry_is_strict_and_zone_independent() {
        let lock = decode_node_lock("2026-08-21T06:20:39+08:00,default,gpu-pod").unwrap();
        let five_min = Duration::from_secs(300);
        let exactly = Utc.with_ymd_and_hms(2026, 8, 20, 22, 25, 39).unwrap();
        assert!(!lock.is_expired(&exactly, five_min));
        let later = exactly + chrono::TimeDelta::seconds(1);
        assert!(lock.is_expired(&later, five_min));
        let before = Utc.with_ymd_and_hms(2026, 8, 20, 22, 0, 0).unwrap();
        assert!(!lock.is_expired(&before, five_min));
        assert!(!lock.is_expired(&later, Duration::MAX));
        assert!(lock.is_expired(&later, Duration::ZERO));
    }

    #[test]
    fn release_rules() {
        let value = "2026-08-21T06:20:39+08:00,default,gpu-pod";
        assert!(release_allowed(value, "default", "gpu-pod"));
        assert!(!release_allowed(value, "default", "pod"));
        assert!(!release_allowed(value, "other", "gpu-pod"));
        assert!(!release_allowed(value, "default", "gpu"));
        // Legacy owner-less values can be released by anyone.
        assert!(release_allowed(
            "2026-08-21T06:20:39+08:00",
            "default",
            "gpu-pod"
        ));
        // Raw suffix semantics, as HAMi: a malformed value naming the pod is releasable.
        assert!(release_allowed(
            "junk,x,default,gpu-pod",
            "default",
            "gpu-pod"
        ));
    }
}

// =============================================================================================
// Handshake
// =============================================================================================

mod handshake {
    use super::*;

    fn t(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(y, mo, d)
            .unwrap()
            .and_hms_opt(h, mi, s)
            .unwrap()
    }

    #[test]
    fn encodes_requesting_with_current_layout() {
        assert_eq!(
            encode_requesting(t(2024, 1, 23, 4, 30, 4)),
            "Requesting_2024-01-23 04:30:04"
        );
    }

    #[test]
    fn decodes_requesting_in_both_layouts() {
        assert_eq!(
            decode_handshake("Requesting_2024-01-23 04:30:04"),
            Handshake::Requesting(Some(t(2024, 1, 23, 4, 30, 4)))
        );
        assert_eq!(
            decode_handshake("Requesting_2006.01.02 15:04:05"),
            Handshake::Requesting(Some(t(2006, 1, 2, 15, 4, 5)))
        );
        assert_eq!(
            decode_handshake("Requesting_2024-01-23 04:30:04.5"),
            Handshake::Requesting(Some(
                t(2024, 1, 23, 4, 30, 4) + chrono::TimeDelta::milliseconds(500)
            ))
        );
    }

    #[test]
    fn time_is_the_text_between_first_and_second_underscore() {
        assert_eq!(
            decode_handshake("Requesting_2024-01-23 04:30:04_extra"),
            Handshake::Requesting(Some(t(2024, 1, 23, 4, 30, 4)))
        );
        assert_eq!(
            decode_handshake("xRequestingx_2024-01-23 04:30:04"),
            Handshake::Requesting(Some(t(2024, 1, 23, 4, 30, 4)))
        );
    }

    #[test]
    fn unreadable_request_times_are_none() {
        for value in [
            "Requesting",
            "Requesting_",
            "Requesting_now",
            "Requesting_2024-01-23T04:30:04",
            "Requesting 2024-01-23 04:30:04",
        ] {
            assert_eq!(
                decode_handshake(value),
                Handshake::Requesting(None),
                "{value}"
            );
        }
    }

    #[test]
    fn anything_else_is_other() {
        for value in [
            "",
            "Reported 2024-01-23 04:30:05",
            "Deleted_2024.01.02 15:04:05",
            "requesting_2024-01-23 04:30:04",
        ] {
            let decoded = decode_handshake(value);
            assert!(!decoded.is_requesting());
            assert_eq!(decoded, Handshake::Other(value.to_owned()));
        }
    }
}

// =============================================================================================
// Device scoring weights
// =============================================================================================

mod scoring_weights {
    use super::*;

    const KEY: &str = "invalid hami.io/device-scoring-weights annotation";

    #[test]
    fn default_and_encode() {
        let weights = ScoringWeights::default();
        assert_eq!(
            weights,
            ScoringWeights {
                slot: 1,
                core: 1,
                memory: 1
            }
        );
        assert_eq!(encode_scoring_weights(&weights), "slot=1,core=1,memory=1");
    }

    #[test]
    fn decodes_any_order_with_spaces() {
        let expected = ScoringWeights {
            slot: 1,
            core: 1,
            memory: 3,
        };
        assert_eq!(
            decode_scoring_weights("slot=1,core=1,memory=3").unwrap(),
            expected
        );
        assert_eq!(
            decode_scoring_weights(" memory = 3 ,slot=1,  core =1 ").unwrap(),
            expected
        );
        assert_eq!(
            decode_scoring_weights("slot=0,core=0,memory=+2").unwrap(),
            ScoringWeights {
                slot: 0,
                core: 0,
                memory: 2
            }
        );
    }

    #[test]
    fn each_violation_has_its_own_error() {
        let cases = [
            (
                "",
                format!(r#"{KEY} "": expected slot, core, and memory weights"#),
            ),
            (
                "slot=1,core=1",
                format!(r#"{KEY} "slot=1,core=1": expected slot, core, and memory weights"#),
            ),
            (
                "slot=1,core=1,memory=1,",
                format!(
                    r#"{KEY} "slot=1,core=1,memory=1,": expected slot, core, and memory weights"#
                ),
            ),
            (
                "slot=1,core=1,memory",
                format!(r#"{KEY} "slot=1,core=1,memory": expected key=value entries"#),
            ),
            (
                "slot=1,slot=2,memory=1",
                format!(r#"{KEY} "slot=1,slot=2,memory=1": duplicate "slot" weight"#),
            ),
            (
                "slot=x,core=1,memory=1",
                format!(r#"{KEY} "slot=x,core=1,memory=1": "slot" weight must be an integer"#),
            ),
            (
                "slot=1,core=,memory=1",
                format!(r#"{KEY} "slot=1,core=,memory=1": "core" weight must be an integer"#),
            ),
            (
                "slot=1,core=1,memory=1.5",
                format!(r#"{KEY} "slot=1,core=1,memory=1.5": "memory" weight must be an integer"#),
            ),
            (
                "slot=-1,core=1,memory=1",
                format!(r#"{KEY} "slot=-1,core=1,memory=1": "slot" weight must not be negative"#),
            ),
            (
                "slot=4294967296,core=1,memory=1",
                format!(r#"{KEY} "slot=4294967296,core=1,memory=1": "slot" weight is too large"#),
            ),
            (
                "gpu=1,core=1,memory=1",
                format!(r#"{KEY} "gpu=1,core=1,memory=1": unknown weight "gpu""#),
            ),
            (
                "Slot=1,core=1,memory=1",
                format!(r#"{KEY} "Slot=1,core=1,memory=1": unknown weight "Slot""#),
            ),
            (
                "slot=0,core=0,memory=0",
                format!(r#"{KEY} "slot=0,core=0,memory=0": at least one weight must be positive"#),
            ),
        ];
        for (value, message) in cases {
            assert_eq!(err_text(decode_scoring_weights(value)), message, "{value}");
        }
    }

    #[test]
    fn variants_are_distinct() {
        assert!(matches!(
            decode_scoring_weights("a=1,b=2"),
            Err(CodecError::WeightsEntryCount { .. })
        ));
        assert!(matches!(
            decode_scoring_weights("slot=1,core=1,memory=1=2"),
            Err(CodecError::WeightsNotInteger { .. })
        ));
        assert!(matches!(
            decode_scoring_weights("slot=1,slot=1,memory=1"),
            Err(CodecError::WeightsDuplicateKey { .. })
        ));
        assert!(matches!(
            decode_scoring_weights("slot=0,core=0,memory=0"),
            Err(CodecError::WeightsAllZero { .. })
        ));
    }
}

// =============================================================================================
// Selectors, cordon, Go booleans
// =============================================================================================

mod selectors {
    use super::*;

    fn annos(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn comma_lists_are_trimmed_without_empties() {
        assert_eq!(parse_comma_list(" A100, ,V100 "), vec!["A100", "V100"]);
        assert_eq!(
            parse_comma_list("Tesla V100-PCIE-32GB, NVIDIA A10"),
            vec!["Tesla V100-PCIE-32GB", "NVIDIA A10"]
        );
        assert!(parse_comma_list("").is_empty());
        assert!(parse_comma_list("  , ,").is_empty());
    }

    #[test]
    fn device_cordon() {
        let set = parse_device_cordon("GPU-a, GPU-b,,GPU-a ");
        assert_eq!(set.len(), 2);
        assert!(set.contains("GPU-a") && set.contains("GPU-b"));
        assert!(parse_device_cordon(" ").is_empty());
    }

    #[test]
    fn type_matching_is_case_insensitive_substring() {
        let selector = DeviceSelector::from_annotations(
            &annos(&[(annotations::NVIDIA_USE_GPUTYPE, "v100, A10")]),
            &SelectorKeys::nvidia(),
        );
        assert!(selector.type_allowed("NVIDIA-Tesla V100-SXM2-32GB"));
        assert!(selector.type_allowed("NVIDIA A10"));
        assert!(selector.type_allowed("NVIDIA A100-SXM4-40GB")); // "A10" is a substring
        assert!(!selector.type_allowed("NVIDIA-Tesla P4"));
    }

    #[test]
    fn nouse_types_exclude() {
        let selector = DeviceSelector::from_annotations(
            &annos(&[
                (annotations::NVIDIA_USE_GPUTYPE, "Tesla"),
                (annotations::NVIDIA_NOUSE_GPUTYPE, "p4"),
            ]),
            &SelectorKeys::nvidia(),
        );
        assert!(selector.type_allowed("NVIDIA-Tesla V100"));
        assert!(!selector.type_allowed("NVIDIA-Tesla P4"));
        assert!(!selector.type_allowed("NVIDIA A100"));
    }

    #[test]
    fn blank_values_are_no_constraint() {
        let selector = DeviceSelector::from_annotations(
            &annos(&[
                (annotations::NVIDIA_USE_GPUTYPE, "  "),
                (annotations::NVIDIA_NOUSE_GPUTYPE, ","),
                (annotations::NVIDIA_USE_GPUUUID, ""),
            ]),
            &SelectorKeys::nvidia(),
        );
        assert_eq!(selector, DeviceSelector::default());
        assert!(selector.type_allowed("anything"));
        assert!(selector.uuid_allowed("GPU-x"));
    }

    #[test]
    fn uuid_matching_is_exact() {
        let selector = DeviceSelector::from_annotations(
            &annos(&[
                (annotations::NVIDIA_USE_GPUUUID, "GPU-AAA, GPU-BBB"),
                (annotations::NVIDIA_NOUSE_GPUUUID, "GPU-BBB"),
            ]),
            &SelectorKeys::nvidia(),
        );
        assert!(selector.uuid_allowed("GPU-AAA"));
        assert!(!selector.uuid_allowed("GPU-BBB"));
        assert!(!selector.uuid_allowed("GPU-AA"));
        assert!(!selector.uuid_allowed("gpu-aaa"));
        assert!(!selector.uuid_allowed("GPU-CCC"));
    }

    #[test]
    fn keys_a_vendor_lacks_are_skipped() {
        let keys = SelectorKeys {
            use_uuids: Some("hami.io/use-MR-V100-uuid".to_owned()),
            ..SelectorKeys::default()
        };
        let selector = DeviceSelector::from_annotations(
            &annos(&[
                ("hami.io/use-MR-V100-uuid", "U1"),
                (annotations::NVIDIA_USE_GPUTYPE, "V100"),
            ]),
            &keys,
        );
        assert_eq!(selector.use_uuids, vec!["U1"]);
        assert!(selector.use_types.is_empty());
    }

    #[test]
    fn go_bool() {
        for text in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(text), Ok(true), "{text}");
        }
        for text in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(text), Ok(false), "{text}");
        }
        for text in ["", "yes", "tRUE", " true", "true ", "2", "on"] {
            assert!(parse_go_bool(text).is_err(), "{text}");
        }
        assert_eq!(
            err_text(parse_go_bool("yes")),
            r#"strconv.ParseBool: parsing "yes": invalid syntax"#
        );
    }
}

// =============================================================================================
// MIG allocations
// =============================================================================================

mod mig {
    use super::*;

    fn reserved(container: u32, device: u32) -> MigAllocation {
        MigAllocation {
            container_index: container,
            device_index: device,
            gpu_uuid: "GPU-xxxxxxxx".to_owned(),
            profile: "2g.10gb".to_owned(),
            placement: MigPlacement { start: 2, size: 2 },
            mig_uuid: None,
            gpu_instance_id: None,
            compute_instance_id: None,
        }
    }

    fn realised() -> MigAllocation {
        MigAllocation {
            mig_uuid: Some("MIG-xxxxxxxx".to_owned()),
            gpu_instance_id: Some(4),
            compute_instance_id: Some(0),
            ..reserved(0, 0)
        }
    }

    const REALISED: &str = r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-xxxxxxxx","profile":"2g.10gb","placement":{"start":2,"size":2},"migUUID":"MIG-xxxxxxxx","gpuInstanceID":4,"computeInstanceID":0}]"#;

    #[test]
    fn encodes_like_hami() {
        assert_eq!(encode_mig_allocations(&[realised()]), REALISED);
        assert_eq!(
            encode_mig_allocations(&[reserved(1, 2)]),
            r#"[{"containerIndex":1,"deviceIndex":2,"gpuUUID":"GPU-xxxxxxxx","profile":"2g.10gb","placement":{"start":2,"size":2}}]"#
        );
        assert_eq!(encode_mig_allocations(&[]), "[]");
    }

    #[test]
    fn decodes_the_reference_example() {
        let pretty = r#"[
          {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": "GPU-xxxxxxxx",
            "profile": "2g.10gb",
            "placement": { "start": 2, "size": 2 },
            "migUUID": "MIG-xxxxxxxx",
            "gpuInstanceID": 4,
            "computeInstanceID": 0
          }
        ]"#;
        let decoded = decode_mig_allocations(pretty).unwrap();
        assert_eq!(decoded, vec![realised()]);
        assert!(decoded[0].runtime_ready());
        assert!(!reserved(0, 0).runtime_ready());
    }

    #[test]
    fn empty_means_none() {
        assert_eq!(decode_mig_allocations("").unwrap(), vec![]);
        assert_eq!(decode_mig_allocations("null").unwrap(), vec![]);
        assert_eq!(decode_mig_allocations("[]").unwrap(), vec![]);
    }

    #[test]
    fn incomplete_records() {
        let cases = [
            (
                r#"[{"containerIndex":-1,"deviceIndex":0,"gpuUUID":"G","profile":"p","placement":{"start":0,"size":1}}]"#,
                "MIG allocation 0 is incomplete: negative containerIndex -1",
            ),
            (
                r#"[{"containerIndex":0,"deviceIndex":-3,"gpuUUID":"G","profile":"p","placement":{"start":0,"size":1}}]"#,
                "MIG allocation 0 is incomplete: negative deviceIndex -3",
            ),
            (
                r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"","profile":"p","placement":{"start":0,"size":1}}]"#,
                "MIG allocation 0 is incomplete: empty gpuUUID",
            ),
            (
                r#"[{"containerIndex":0,"deviceIndex":0,"profile":"p","placement":{"start":0,"size":1}}]"#,
                "MIG allocation 0 is incomplete: empty gpuUUID",
            ),
            (
                r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"","placement":{"start":0,"size":1}}]"#,
                "MIG allocation 0 is incomplete: empty profile",
            ),
            (
                r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"p","placement":{"start":3,"size":0}}]"#,
                "MIG allocation 0 is incomplete: placement size is 0",
            ),
            (
                r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"p"}]"#,
                "MIG allocation 0 is incomplete: placement size is 0",
            ),
        ];
        for (value, message) in cases {
            assert_eq!(err_text(decode_mig_allocations(value)), message, "{value}");
        }
    }

    #[test]
    fn partial_runtime_identity() {
        let base = r#""containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"p","placement":{"start":0,"size":1}"#;
        for runtime in [
            r#","migUUID":"MIG-1""#,
            r#","gpuInstanceID":1"#,
            r#","computeInstanceID":0"#,
            r#","migUUID":"MIG-1","gpuInstanceID":1"#,
            r#","gpuInstanceID":1,"computeInstanceID":0"#,
            r#","migUUID":"","gpuInstanceID":1,"computeInstanceID":0"#,
        ] {
            let value = format!("[{{{base}}},{{{base}{runtime},\"deviceIndex\":1}}]");
            assert_eq!(
                err_text(decode_mig_allocations(&value)),
                "MIG allocation 1 has partial runtime identity",
                "{value}"
            );
        }
        // An empty migUUID with no IDs is simply "not realised yet".
        let value = format!(r#"[{{{base},"migUUID":""}}]"#);
        assert!(!decode_mig_allocations(&value).unwrap()[0].runtime_ready());
    }

    #[test]
    fn duplicate_container_device_pairs() {
        let mut second = reserved(0, 1);
        second.profile = "1g.5gb".to_owned();
        let mut third = reserved(0, 1);
        third.gpu_uuid = "GPU-other".to_owned();
        let value = encode_mig_allocations(&[reserved(0, 0), second, third]);
        assert_eq!(
            err_text(decode_mig_allocations(&value)),
            "duplicate MIG allocation for container 0 device 1"
        );
    }

    #[test]
    fn type_errors() {
        for value in [
            "[",
            "{}",
            " ",
            r#"[{"containerIndex":"0"}]"#,
            r#"[{"containerIndex":4294967296,"deviceIndex":0,"gpuUUID":"G","profile":"p","placement":{"start":0,"size":1}}]"#,
            r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"p","placement":{"start":0,"size":1},"gpuInstanceID":-1}]"#,
            r#"[{"gpuUUID":"G","profile":"p","placement":[1,2]}]"#,
        ] {
            assert!(
                matches!(
                    decode_mig_allocations(value),
                    Err(CodecError::Json { .. } | CodecError::JsonField { .. })
                ),
                "{value}"
            );
        }
    }
}

// =============================================================================================
// Topology scores
// =============================================================================================

mod topology {
    use super::*;

    const EXAMPLE: &str = r#"[{"uuid":"GPU-0","score":{"GPU-1":50,"GPU-2":20}},{"uuid":"GPU-1","score":{"GPU-0":50}}]"#;

    fn example() -> Vec<DeviceTopologyScore> {
        vec![
            DeviceTopologyScore {
                uuid: "GPU-0".to_owned(),
                score: [("GPU-1".to_owned(), 50), ("GPU-2".to_owned(), 20)].into(),
            },
            DeviceTopologyScore {
                uuid: "GPU-1".to_owned(),
                score: [("GPU-0".to_owned(), 50)].into(),
            },
        ]
    }

    #[test]
    fn decodes_and_encodes_the_example() {
        assert_eq!(decode_topology_scores(EXAMPLE).unwrap(), example());
        assert_eq!(encode_topology_scores(&example()), EXAMPLE);
    }

    #[test]
    fn peers_are_written_sorted() {
        let value = r#"[{"uuid":"GPU-0","score":{"GPU-2":20,"GPU-1":50}}]"#;
        assert_eq!(
            encode_topology_scores(&decode_topology_scores(value).unwrap()),
            r#"[{"uuid":"GPU-0","score":{"GPU-1":50,"GPU-2":20}}]"#
        );
        assert_eq!(
            encode_topology_scores(&[DeviceTopologyScore::default()]),
            r#"[{"uuid":"","score":{}}]"#
        );
    }

    #[test]
    fn pair_lookup_defaults_to_zero() {
        let pairs = PairScores::new(&example());
        assert_eq!(pairs.score("GPU-0", "GPU-1"), 50);
        assert_eq!(pairs.score("GPU-1", "GPU-0"), 50);
        assert_eq!(pairs.score("GPU-0", "GPU-2"), 20);
        assert_eq!(pairs.score("GPU-2", "GPU-0"), 0);
        assert_eq!(pairs.score("GPU-9", "GPU-0"), 0);
        assert!(!pairs.is_empty());
        assert!(PairScores::default().is_empty());
    }

    #[test]
    fn empty_and_null_values() {
        assert_eq!(decode_topology_scores("").unwrap(), vec![]);
        assert_eq!(decode_topology_scores("null").unwrap(), vec![]);
        assert_eq!(
            decode_topology_scores(r#"[{"uuid":"GPU-0","score":null}]"#).unwrap(),
            vec![DeviceTopologyScore {
                uuid: "GPU-0".to_owned(),
                score: BTreeMap::new()
            }]
        );
    }

    #[test]
    fn bad_scores_are_typed_errors() {
        assert_eq!(
            err_text(decode_topology_scores(
                r#"[{"uuid":"GPU-0","score":{"GPU-1":"fifty"}}]"#
            )),
            r#"invalid node topology score JSON: entry 0: field "score.GPU-1": expected a 64-bit integer, found "fifty""#
        );
        for value in [
            "{}",
            "[1]",
            r#"[{"uuid":1}]"#,
            r#"[{"score":[1]}]"#,
            r#"[{"score":{"a":1.5}}]"#,
        ] {
            assert!(decode_topology_scores(value).is_err(), "{value}");
        }
    }
}

#[test]
fn handshake_leap_second_is_unparsable_as_in_go() {
    use hami_core::codec::{Handshake, decode_handshake};
    assert_eq!(
        decode_handshake("Requesting_2026-01-01 00:00:60"),
        Handshake::Requesting(None)
    );
    assert!(matches!(
        decode_handshake("Requesting_2026-01-01 00:00:59"),
        Handshake::Requesting(Some(_))
    ));
}
