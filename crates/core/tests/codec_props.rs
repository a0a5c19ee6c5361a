//! Properties of every annotation codec: what we encode decodes back to the same value, and
//! no input, however hostile, makes a decoder panic.

// Test helpers outside `#[test]` functions panic on purpose when a fixture is wrong.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime, Timelike as _};
use hami_core::codec::*;
use hami_core::model::{ContainerDevice, DeviceInfo, MigPlacement, MigProfile, PodSingleDevice};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// Any text, including control characters, quotes and non-ASCII.
fn any_text(max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("(?s).{{0,{max}}}")).expect("valid regex")
}

/// Text drawn mostly from the characters the grammars care about, so random inputs get past
/// the first split and exercise the deeper rules.
fn grammar_text() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::string::string_regex(r"[-,:;=0-9a-zA-Z _.+tTfF]{0,64}").expect("valid regex"),
        any::<String>(),
    ]
}

fn json_text() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::string::string_regex(r#"[\[\]{}",:0-9a-zA-Z. \-]{0,96}"#).expect("valid regex"),
        any::<String>(),
    ]
}

fn capacity() -> impl Strategy<Value = u32> {
    0..=i32::MAX as u32
}

fn mig_placement() -> impl Strategy<Value = MigPlacement> {
    (any::<u32>(), any::<u32>()).prop_map(|(start, size)| MigPlacement { start, size })
}

fn mig_profile() -> impl Strategy<Value = MigProfile> {
    (
        any_text(12),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        prop::collection::vec(mig_placement(), 0..3),
    )
        .prop_map(
            |(name, memory_mb, core, slice_count, placements)| MigProfile {
                name,
                memory_mb,
                core,
                slice_count,
                placements,
            },
        )
}

fn json_device() -> impl Strategy<Value = DeviceInfo> {
    (
        (
            any_text(24),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
        ),
        (any_text(24), any::<i32>(), any_text(10), any::<bool>()),
        prop::collection::vec(mig_profile(), 0..3),
    )
        .prop_map(
            |(
                (id, index, count, devmem, devcore),
                (dev_type, numa, mode, health),
                mig_profiles,
            )| {
                DeviceInfo {
                    id: id.into(),
                    index,
                    count,
                    mem_mib: devmem,
                    cores: devcore,
                    dev_type: dev_type.into(),
                    numa,
                    mode: mode.into(),
                    health,
                    mig_profiles,
                    custom_info: Default::default(),
                }
            },
        )
}

/// Devices the legacy form can carry: no `,`/`:` in text fields, unique non-blank IDs,
/// capacities that fit HAMi's 32-bit parse, no MIG profiles.
fn legacy_devices() -> impl Strategy<Value = Vec<DeviceInfo>> {
    let field = |max: usize| {
        proptest::string::string_regex(&format!("[^,:]{{0,{max}}}")).expect("valid regex")
    };
    let device = (
        (field(16), any::<u32>(), capacity(), capacity(), capacity()),
        (field(24), any::<i32>(), field(10), any::<bool>()),
    )
        .prop_map(
            |((id, index, count, devmem, devcore), (dev_type, numa, mode, health))| DeviceInfo {
                id: format!("GPU-{id}").into(),
                index,
                count,
                mem_mib: devmem,
                cores: devcore,
                dev_type: dev_type.into(),
                numa,
                mode: mode.into(),
                health,
                mig_profiles: Vec::new(),
                custom_info: Default::default(),
            },
        );
    prop::collection::vec(device, 0..6).prop_map(|devices| {
        let mut seen = HashSet::new();
        devices
            .into_iter()
            .filter(|d| seen.insert(d.id.clone()))
            .collect()
    })
}

fn container_device() -> impl Strategy<Value = ContainerDevice> {
    (
        proptest::string::string_regex("[^,:;]{1,24}").expect("valid regex"),
        proptest::string::string_regex("[^,:;]{0,8}").expect("valid regex"),
        capacity(),
        capacity(),
        // Unset (one slot) or a multi-slot share (Enflame DRS), the optional fifth field.
        prop_oneof![Just(0u32), 2u32..=i32::MAX as u32],
    )
        .prop_map(
            |(uuid, dev_type, usedmem, usedcores, slots)| ContainerDevice {
                idx: 0,
                uuid,
                dev_type,
                mem_mib: usedmem,
                cores: usedcores,
                slots,
            },
        )
}

fn pod_devices() -> impl Strategy<Value = PodSingleDevice> {
    prop::collection::vec(prop::collection::vec(container_device(), 0..4), 0..5)
}

/// Lock times Go's RFC3339 can carry: years 0001–9998 in any whole-minute offset.
fn lock_time() -> impl Strategy<Value = DateTime<FixedOffset>> {
    (
        -62_135_596_800_i64..253_370_764_800_i64,
        -(23 * 60 + 59)..=(23 * 60 + 59),
    )
        .prop_map(|(secs, offset_minutes)| {
            let offset = FixedOffset::east_opt(offset_minutes * 60).expect("offset in range");
            DateTime::from_timestamp(secs, 0)
                .expect("timestamp in range")
                .with_timezone(&offset)
        })
}

fn node_lock() -> impl Strategy<Value = NodeLock> {
    let part = || proptest::string::string_regex("[^,]{0,16}").expect("valid regex");
    (lock_time(), prop::option::of((part(), part()))).prop_map(|(acquired_at, owner)| NodeLock {
        acquired_at,
        owner: owner.map(|(namespace, name)| LockOwner { namespace, name }),
    })
}

fn handshake_time() -> impl Strategy<Value = NaiveDateTime> {
    (
        0_i32..=9999,
        1_u32..=12,
        1_u32..=28,
        0_u32..24,
        0_u32..60,
        0_u32..60,
    )
        .prop_map(|(y, mo, d, h, mi, s)| {
            NaiveDate::from_ymd_opt(y, mo, d)
                .expect("valid date")
                .and_time(NaiveTime::from_hms_opt(h, mi, s).expect("valid time"))
        })
}

fn scoring_weights() -> impl Strategy<Value = ScoringWeights> {
    (any::<u32>(), any::<u32>(), any::<u32>())
        .prop_filter("not all zero", |(s, c, m)| *s != 0 || *c != 0 || *m != 0)
        .prop_map(|(slot, core, memory)| ScoringWeights { slot, core, memory })
}

fn mig_allocations() -> impl Strategy<Value = Vec<MigAllocation>> {
    let non_empty = || proptest::string::string_regex("(?s).{1,16}").expect("valid regex");
    let record = (
        non_empty(),
        non_empty(),
        (any::<u32>(), 1..=u32::MAX),
        prop::option::of((non_empty(), any::<u32>(), any::<u32>())),
    );
    prop::collection::btree_map((any::<u32>(), any::<u32>()), record, 0..6).prop_map(|records| {
        records
            .into_iter()
            .map(
                |((container_index, device_index), (gpu_uuid, profile, (start, size), runtime))| {
                    MigAllocation {
                        container_index,
                        device_index,
                        gpu_uuid,
                        profile,
                        placement: MigPlacement { start, size },
                        mig_uuid: runtime.as_ref().map(|r| r.0.clone()),
                        gpu_instance_id: runtime.as_ref().map(|r| r.1),
                        compute_instance_id: runtime.as_ref().map(|r| r.2),
                    }
                },
            )
            .collect()
    })
}

fn topology_scores() -> impl Strategy<Value = Vec<DeviceTopologyScore>> {
    let device = (
        any_text(16),
        prop::collection::btree_map(any_text(16), any::<i64>(), 0..5),
    )
        .prop_map(|(uuid, score)| DeviceTopologyScore { uuid, score });
    prop::collection::vec(device, 0..5)
}

// ---------------------------------------------------------------------------------------------
// Round trips of generated values
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn node_register_json_round_trips(devices in prop::collection::vec(json_device(), 0..5)) {
        let encoded = encode_node_register_json(&devices);
        prop_assert_eq!(decode_node_register_json(&encoded).unwrap(), devices.clone());
        prop_assert_eq!(decode_node_register(&encoded).unwrap(), devices);
    }

    #[test]
    fn node_register_json_matches_serde_reading(devices in prop::collection::vec(json_device(), 0..3)) {
        // Our hand-written writer must produce valid JSON with the same content.
        let encoded = encode_node_register_json(&devices);
        let value: serde_json::Value = serde_json::from_str(&encoded).unwrap();
        prop_assert_eq!(value.as_array().map(Vec::len), Some(devices.len()));
    }

    #[test]
    fn node_register_legacy_round_trips(devices in legacy_devices()) {
        let encoded = encode_node_register_legacy(&devices);
        prop_assert_eq!(decode_node_register_legacy(&encoded).unwrap(), devices.clone());
        prop_assert_eq!(decode_node_register(&encoded).unwrap(), devices);
    }

    #[test]
    fn pod_devices_round_trip_plus_trailing_empty(pod in pod_devices()) {
        let encoded = encode_pod_single_device(&pod);
        let mut expected = pod;
        expected.push(Vec::new());
        prop_assert_eq!(decode_pod_single_device(&encoded).unwrap(), expected);
    }

    #[test]
    fn node_lock_round_trips(lock in node_lock()) {
        let encoded = encode_node_lock(&lock);
        prop_assert_eq!(decode_node_lock(&encoded).unwrap(), lock);
    }

    #[test]
    fn node_lock_owner_may_release(lock in node_lock()) {
        let encoded = encode_node_lock(&lock);
        if let Some(owner) = &lock.owner {
            prop_assert!(release_allowed(&encoded, &owner.namespace, &owner.name));
            prop_assert!(lock.is_owned_by(&owner.namespace, &owner.name));
        } else {
            prop_assert!(release_allowed(&encoded, "any", "pod"));
        }
    }

    #[test]
    fn handshake_round_trips(at in handshake_time()) {
        prop_assert_eq!(decode_handshake(&encode_requesting(at)), Handshake::Requesting(Some(at)));
    }

    #[test]
    fn scoring_weights_round_trip(weights in scoring_weights()) {
        prop_assert_eq!(decode_scoring_weights(&encode_scoring_weights(&weights)).unwrap(), weights);
    }

    #[test]
    fn mig_allocations_round_trip(allocations in mig_allocations()) {
        let encoded = encode_mig_allocations(&allocations);
        prop_assert_eq!(decode_mig_allocations(&encoded).unwrap(), allocations);
    }

    #[test]
    fn topology_scores_round_trip(scores in topology_scores()) {
        let encoded = encode_topology_scores(&scores);
        let decoded = decode_topology_scores(&encoded).unwrap();
        prop_assert_eq!(&decoded, &scores);
        let pairs = PairScores::new(&decoded);
        for device in &scores {
            for (peer, score) in &device.score {
                // A later entry for the same GPU may override; check against the last one.
                let last = scores.iter().rev().find(|d| d.uuid == device.uuid && d.score.contains_key(peer));
                prop_assert_eq!(pairs.score(&device.uuid, peer), last.map_or(*score, |d| d.score[peer]));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile input: never panic, and whatever decodes re-encodes to itself
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn node_register_never_panics(value in prop_oneof![grammar_text(), json_text()]) {
        if let Ok(devices) = decode_node_register_json(&value) {
            prop_assert_eq!(decode_node_register_json(&encode_node_register_json(&devices)).unwrap(), devices);
        }
        if let Ok(devices) = decode_node_register_legacy(&value) {
            prop_assert_eq!(decode_node_register_legacy(&encode_node_register_legacy(&devices)).unwrap(), devices);
        }
        let _ = decode_node_register(&value);
    }

    #[test]
    fn pod_devices_never_panic(value in grammar_text()) {
        if let Ok(pod) = decode_pod_single_device(&value) {
            let mut expected = pod.clone();
            expected.push(Vec::new());
            prop_assert_eq!(decode_pod_single_device(&encode_pod_single_device(&pod)).unwrap(), expected);
        }
        let _ = decode_container_devices(&value);
    }

    #[test]
    fn node_lock_never_panics(value in prop_oneof![
        grammar_text(),
        proptest::string::string_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,12})?(Z|[+-][0-9]{2}:[0-9]{2})(,[a-z]{0,5}){0,3}").expect("valid regex"),
    ]) {
        if let Ok(lock) = decode_node_lock(&value) {
            let once = encode_node_lock(&lock);
            let again = decode_node_lock(&once).unwrap();
            prop_assert_eq!(encode_node_lock(&again), once);
            prop_assert_eq!(again.owner, lock.owner);
        }
        let _ = release_allowed(&value, "ns", "pod");
    }

    #[test]
    fn handshake_never_panics(value in prop_oneof![
        grammar_text(),
        proptest::string::string_regex(r"Requesting_[0-9]{1,4}[-.][0-9]{1,2}[-.][0-9]{1,2} [0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}(\.[0-9]{0,12})?").expect("valid regex"),
    ]) {
        if let Handshake::Requesting(Some(at)) = decode_handshake(&value) {
            // Sub-second precision is not on the wire; the whole seconds are.
            let whole = at.with_nanosecond(0).unwrap_or(at);
            prop_assert_eq!(decode_handshake(&encode_requesting(at)), Handshake::Requesting(Some(whole)));
        }
    }

    #[test]
    fn scoring_weights_never_panic(value in prop_oneof![
        grammar_text(),
        proptest::string::string_regex(r" ?(slot|core|memory|x) ?= ?-?[0-9]{1,11} ?(, ?(slot|core|memory) ?= ?-?[0-9]{1,3} ?){0,3}").expect("valid regex"),
    ]) {
        if let Ok(weights) = decode_scoring_weights(&value) {
            prop_assert_eq!(decode_scoring_weights(&encode_scoring_weights(&weights)).unwrap(), weights);
        }
    }

    #[test]
    fn mig_allocations_never_panic(value in json_text()) {
        if let Ok(allocations) = decode_mig_allocations(&value) {
            prop_assert_eq!(decode_mig_allocations(&encode_mig_allocations(&allocations)).unwrap(), allocations);
        }
    }

    #[test]
    fn topology_scores_never_panic(value in json_text()) {
        if let Ok(scores) = decode_topology_scores(&value) {
            prop_assert_eq!(decode_topology_scores(&encode_topology_scores(&scores)).unwrap(), scores.clone());
            let _ = PairScores::new(&scores).score("a", "b");
        }
    }

    #[test]
    fn selectors_never_panic(value in grammar_text(), device in any::<String>()) {
        let annotations: BTreeMap<String, String> = [
            (hami_core::annotations::NVIDIA_USE_GPUTYPE.to_owned(), value.clone()),
            (hami_core::annotations::NVIDIA_NOUSE_GPUUUID.to_owned(), value.clone()),
        ].into();
        let selector = DeviceSelector::from_annotations(&annotations, &SelectorKeys::nvidia());
        let _ = selector.type_allowed(&device);
        let _ = selector.uuid_allowed(&device);
        for item in parse_comma_list(&value) {
            prop_assert!(!item.is_empty() && item.trim() == item);
        }
        let _ = parse_device_cordon(&value);
        let _ = parse_go_bool(&value);
    }
}

/// Structured JSON the decoders must digest: valid shapes with hostile values.
fn hostile_json_entry() -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("-1".to_owned()),
        Just("0".to_owned()),
        Just("4294967296".to_owned()),
        Just("1.5".to_owned()),
        Just("\"\"".to_owned()),
        Just("\"GPU-0\"".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        Just("{\"start\":1,\"size\":2}".to_owned()),
        any::<i64>().prop_map(|i| i.to_string()),
    ];
    let key = prop_oneof![
        Just("id"),
        Just("index"),
        Just("count"),
        Just("devmem"),
        Just("devcore"),
        Just("type"),
        Just("numa"),
        Just("mode"),
        Just("health"),
        Just("migProfiles"),
        Just("containerIndex"),
        Just("deviceIndex"),
        Just("gpuUUID"),
        Just("profile"),
        Just("placement"),
        Just("migUUID"),
        Just("gpuInstanceID"),
        Just("computeInstanceID"),
        Just("uuid"),
        Just("score"),
        Just("ID"),
    ];
    prop::collection::vec((key, scalar), 0..8).prop_map(|fields| {
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", body.join(","))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn json_decoders_survive_hostile_fields(entries in prop::collection::vec(hostile_json_entry(), 0..4)) {
        let value = format!("[{}]", entries.join(","));
        if let Ok(devices) = decode_node_register_json(&value) {
            prop_assert_eq!(decode_node_register_json(&encode_node_register_json(&devices)).unwrap(), devices);
        }
        if let Ok(allocations) = decode_mig_allocations(&value) {
            prop_assert_eq!(decode_mig_allocations(&encode_mig_allocations(&allocations)).unwrap(), allocations);
        }
        if let Ok(scores) = decode_topology_scores(&value) {
            prop_assert_eq!(decode_topology_scores(&encode_topology_scores(&scores)).unwrap(), scores);
        }
    }
}

/// Colon/semicolon-separated records of comma fields drawn from near-valid values, so the
/// legacy register and pod device decoders get past their shape checks.
fn near_valid_records(separator: &'static str) -> impl Strategy<Value = String> {
    let field = prop_oneof![
        Just("GPU-0"),
        Just("GPU-1"),
        Just(""),
        Just(" "),
        Just("0"),
        Just("1"),
        Just("-1"),
        Just("100"),
        Just("x"),
        Just("true"),
        Just("F"),
        Just("2147483648"),
        Just("hami-core"),
        Just("NVIDIA"),
        Just("4294967296"),
        Just("+5"),
    ];
    let record = prop::collection::vec(field, 3..11).prop_map(|fields| fields.join(","));
    prop::collection::vec(record, 0..4).prop_map(move |records| {
        let mut value = records.join(separator);
        value.push_str(separator);
        value
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn legacy_register_survives_near_valid_input(value in near_valid_records(":")) {
        if let Ok(devices) = decode_node_register_legacy(&value) {
            prop_assert_eq!(decode_node_register_legacy(&encode_node_register_legacy(&devices)).unwrap(), devices);
        }
    }

    #[test]
    fn pod_devices_survive_near_valid_input(
        containers in prop::collection::vec(near_valid_records(":"), 0..4),
    ) {
        let value = containers.join(";");
        if let Ok(pod) = decode_pod_single_device(&value) {
            let mut expected = pod.clone();
            expected.push(Vec::new());
            prop_assert_eq!(decode_pod_single_device(&encode_pod_single_device(&pod)).unwrap(), expected);
        }
    }
}
