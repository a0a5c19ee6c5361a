//! Every vendor of `docs/vendors.md` through hami-core: inventory decoding (valid and
//! malformed), requests and defaults, the fit and its reasons, the allocation
//! annotations byte for byte, admission rules. Cases marked "HAMi:" are the literal
//! cases of HAMi's `pkg/device/<vendor>/device_test.go`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::{container, pod, with_annotations};
use hami_core::codec::encode_node_register_json;
use hami_core::config::{DeviceConfig, VendorSwitches};
use hami_core::engine::{PodPlan, SchedulerDefaults, allocation_annotations, place};
use hami_core::ledger::{Ledger, NodeInventory};
use hami_core::model::{ContainerDeviceRequest, DeviceInfo};
use hami_core::vendor::{Annotations, HealthRule, NodeLockRule, NodeView, Vendor, VendorRegistry};
use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn registry() -> VendorRegistry {
    VendorRegistry::from_config(&DeviceConfig::default().with_switches(VendorSwitches {
        ascend: true,
        iluvatar: true,
    }))
}

fn vendor(word: &str) -> std::sync::Arc<dyn Vendor> {
    registry().get(word).unwrap().clone()
}

fn ann(pairs: &[(&str, &str)]) -> Annotations {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn quantities(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    (!pairs.is_empty()).then(|| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect()
    })
}

fn ctr(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> Container {
    Container {
        name: "c".into(),
        resources: Some(ResourceRequirements {
            limits: quantities(limits),
            requests: quantities(requests),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn request(v: &dyn Vendor, c: &Container) -> Option<ContainerDeviceRequest> {
    v.container_request(c, &Annotations::new()).unwrap()
}

fn req(
    count: u32,
    dev_type: &str,
    mem: u32,
    pct: Option<u32>,
    cores: u32,
) -> ContainerDeviceRequest {
    ContainerDeviceRequest {
        count,
        dev_type: dev_type.into(),
        mem_mib: mem,
        mem_percent: pct,
        cores,
    }
}

/// Decodes a node of annotations and capacity through every vendor.
fn decode(annotations: &[(&str, &str)], capacity: &[(&str, &str)]) -> (NodeInventory, Vec<String>) {
    let a = ann(annotations);
    let cap = quantities(capacity).unwrap_or_default();
    let view = NodeView {
        name: "n1",
        annotations: &a,
        capacity: Some(&cap),
        labels: None,
    };
    let (inv, issues) = NodeInventory::from_node(&view, &registry());
    (
        inv,
        issues
            .into_iter()
            .map(|i| format!("{} {}: {}", i.vendor, i.annotation, i.error))
            .collect(),
    )
}

/// A test node: name, annotations and capacity.
type TestNode<'a> = (&'a str, Vec<(&'a str, String)>, Vec<(&'a str, &'a str)>);

/// What placing a pod gave: the chosen node, the annotations written, and the
/// failure reasons per node.
type Placed = (
    Option<String>,
    BTreeMap<String, String>,
    BTreeMap<String, String>,
);

/// Places `pod` on `nodes`.
fn place_on(nodes: &[TestNode], p: &k8s_openapi::api::core::v1::Pod) -> Placed {
    let reg = registry();
    let mut ledger = Ledger::new();
    let mut names = Vec::new();
    for (name, annotations, capacity) in nodes {
        let a: Annotations = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let cap = quantities(capacity).unwrap_or_default();
        let view = NodeView {
            name,
            annotations: &a,
            capacity: Some(&cap),
            labels: None,
        };
        let (inv, issues) = NodeInventory::from_node(&view, &reg);
        assert!(issues.is_empty(), "{issues:?}");
        ledger.set_node(name, inv);
        names.push(name.to_string());
    }
    let plan = PodPlan::new(p, &reg, &SchedulerDefaults::default()).unwrap();
    let placement = place(&plan, &reg, &ledger, &names);
    let annotations = placement
        .chosen
        .as_ref()
        .map(|(n, fit)| allocation_annotations(&reg, &plan, n, fit, 1_700_000_000))
        .unwrap_or_default();
    (
        placement.chosen.map(|(n, _)| n),
        annotations,
        placement.failed,
    )
}

fn json_devices(devices: &[DeviceInfo]) -> String {
    encode_node_register_json(devices)
}

fn device(id: &str, index: u32, count: u32, mem: u32, cores: u32, dev_type: &str) -> DeviceInfo {
    DeviceInfo {
        id: id.into(),
        index,
        count,
        mem_mib: mem,
        cores,
        dev_type: dev_type.into(),
        health: true,
        ..DeviceInfo::default()
    }
}

// ---------------------------------------------------------------------------------------
// Hygon DCU
// ---------------------------------------------------------------------------------------

#[test]
fn dcu_registers_from_the_legacy_string() {
    // HAMi: Test_GetNodeDevices.
    let (inv, issues) = decode(
        &[(
            "hami.io/node-dcu-register",
            "test-0,1,1024,100,DCU,0,true,0,test:",
        )],
        &[],
    );
    assert!(issues.is_empty());
    assert_eq!(inv.vendors[0].vendor, "DCU");
    assert_eq!(
        inv.vendors[0].devices,
        vec![DeviceInfo {
            mode: "test".into(),
            ..device("test-0", 0, 1, 1024, 100, "DCU")
        }]
    );
    // An empty list registers nothing; garbage and short entries are refused, only
    // for the DCU.
    let (inv, issues) = decode(&[("hami.io/node-dcu-register", ":")], &[]);
    assert!(inv.vendors.is_empty() && issues.is_empty());
    for bad in ["", "test-0,1,1024,100,DCU:"] {
        let (inv, issues) = decode(
            &[
                ("hami.io/node-dcu-register", bad),
                (
                    "hami.io/node-nvidia-register",
                    &json_devices(&[device("GPU-0", 0, 10, 1000, 100, "NVIDIA-T4")]),
                ),
            ],
            &[],
        );
        assert_eq!(issues.len(), 1, "{bad:?}: {issues:?}");
        assert!(
            issues[0].starts_with("DCU hami.io/node-dcu-register: "),
            "{issues:?}"
        );
        assert_eq!(inv.vendors.len(), 1);
        assert_eq!(inv.vendors[0].vendor, "NVIDIA");
    }
    let v = vendor("DCU");
    assert_eq!(
        v.health_rule(),
        HealthRule::Handshake("hami.io/node-handshake-dcu")
    );
    assert_eq!(v.node_lock(), NodeLockRule::Shared);
}

#[test]
fn dcu_requests_follow_hami() {
    // HAMi: Test_GenerateResourceRequests.
    let v = vendor("DCU");
    assert_eq!(request(v.as_ref(), &ctr(&[], &[])), None);
    let all = [
        ("hygon.com/dcunum", "1"),
        ("hygon.com/dcucores", "1"),
        ("hygon.com/dcumem", "1024"),
    ];
    assert_eq!(
        request(v.as_ref(), &ctr(&all, &all)),
        Some(req(1, "DCU", 1024, None, 1))
    );
    assert_eq!(
        request(v.as_ref(), &ctr(&[("hygon.com/dcunum", "1")], &all)),
        Some(req(1, "DCU", 1024, None, 1))
    );
    assert_eq!(
        request(
            v.as_ref(),
            &ctr(
                &[("hygon.com/dcunum", "1")],
                &[("hygon.com/dcunum", "1"), ("hygon.com/dcucores", "1")]
            )
        ),
        Some(req(1, "DCU", 0, Some(100), 1))
    );
    // No cores: the whole device's compute.
    assert_eq!(
        request(v.as_ref(), &ctr(&[("hygon.com/dcunum", "2")], &[])),
        Some(req(2, "DCU", 0, Some(100), 100))
    );
    // A memory factor multiplies.
    let mut cfg = DeviceConfig::default();
    cfg.hygon.memory_factor = 1024;
    let reg = VendorRegistry::from_config(&cfg);
    let v = reg.get("DCU").unwrap();
    assert_eq!(
        request(
            v.as_ref(),
            &ctr(&[("hygon.com/dcunum", "1"), ("hygon.com/dcumem", "2")], &[])
        ),
        Some(req(1, "DCU", 2048, None, 100))
    );
}

#[test]
fn dcu_type_lists_follow_hami() {
    // HAMi: Test_checkDCUtype.
    let v = vendor("DCU");
    let cases = [
        (&[("hygon.com/use-dcutype", "dcu")][..], "dcu", true),
        (&[("hygon.com/use-dcutype", "dcu")][..], "test", false),
        (&[][..], "dcu", true),
        (&[("hygon.com/use-dcutype", "dcu,test")][..], "dcu", true),
        (&[("hygon.com/nouse-dcutype", "dcu")][..], "dcu", false),
        (
            &[("hygon.com/nouse-dcutype", "test,dcu")][..],
            "test",
            false,
        ),
        (&[("hygon.com/nouse-dcutype", "dcu")][..], "test", true),
    ];
    let r = req(1, "DCU", 0, Some(100), 100);
    for (annotations, card, want) in cases {
        let c = v.pod_constraints(&ann(annotations)).unwrap();
        let d = device("x", 0, 4, 100, 100, card);
        assert_eq!(v.type_matches(&d, &r, &c), want, "{annotations:?} {card}");
    }
    // HAMi: Test_checkType — another request type never matches.
    let c = v.pod_constraints(&Annotations::new()).unwrap();
    assert!(!v.type_matches(
        &device("x", 0, 4, 100, 100, "DCU"),
        &req(1, "test", 0, None, 0),
        &c
    ));
}

#[test]
fn dcu_fit_and_annotations() {
    let register =
        "DCU-a,4,65520,100,DCU-K100_AI,0,true,0,hami:DCU-b,4,65520,100,DCU-K100_AI,0,true,1,hami:";
    let node = vec![("hami.io/node-dcu-register", register.to_string())];
    let p = pod(
        "p",
        vec![container(
            "c",
            &[
                ("hygon.com/dcunum", "1"),
                ("hygon.com/dcumem", "2048"),
                ("hygon.com/dcucores", "1"),
            ],
        )],
    );
    let (chosen, a, _) = place_on(&[("n1", node.clone(), vec![])], &p);
    assert_eq!(chosen.as_deref(), Some("n1"));
    // HAMi: Test_PatchAnnotations' shape (`test1,DCU,2048,1:;`).
    let dev = &a["hami.io/dcu-devices-allocated"];
    assert!(
        dev == "DCU-a,DCU,2048,1:;" || dev == "DCU-b,DCU,2048,1:;",
        "{dev}"
    );
    assert_eq!(&a["hami.io/dcu-devices-to-allocate"], dev);
    // Reasons: a type nobody has, too much memory.
    let p = with_annotations(
        pod("t", vec![container("c", &[("hygon.com/dcunum", "1")])]),
        &[("hygon.com/use-dcutype", "Z100")],
    );
    let (chosen, _, failed) = place_on(&[("n1", node.clone(), vec![])], &p);
    assert_eq!(chosen, None);
    assert_eq!(failed["n1"], "2/2 CardTypeMismatch");
    let p = pod(
        "m",
        vec![container(
            "c",
            &[("hygon.com/dcunum", "1"), ("hygon.com/dcumem", "70000")],
        )],
    );
    assert_eq!(
        place_on(&[("n1", node, vec![])], &p).2["n1"],
        "2/2 CardInsufficientMemory"
    );
}

// ---------------------------------------------------------------------------------------
// AMD
// ---------------------------------------------------------------------------------------

fn amd_node() -> Vec<(&'static str, String)> {
    let mut d0 = device(
        "8eff74b5-0000-1000-801b-b56457addd1b",
        0,
        10,
        196288,
        304,
        "AMD Instinct MI300X VF",
    );
    d0.custom_info
        .insert("pciBDF".into(), "0000:83:00.0".into());
    vec![("hami.io/node-amd-register", json_devices(&[d0]))]
}

#[test]
fn amd_requests_read_limits_only_and_cores_are_compute_units() {
    let v = vendor("AMD");
    // Counts in requests alone are not AMD requests (HAMi reads limits only).
    assert_eq!(
        request(v.as_ref(), &ctr(&[], &[("amd.com/gpu", "1")])),
        None
    );
    assert_eq!(
        request(v.as_ref(), &ctr(&[("amd.com/gpu", "1")], &[])),
        Some(req(1, "AMD", 0, None, 100))
    );
    assert_eq!(
        request(
            v.as_ref(),
            &ctr(
                &[
                    ("amd.com/gpu", "2"),
                    ("amd.com/gpumem", "16384"),
                    ("amd.com/gpucores", "25")
                ],
                &[]
            )
        ),
        Some(req(2, "AMD", 16384, None, 25))
    );
    assert!(
        v.container_request(
            &ctr(&[("amd.com/gpu", "1"), ("amd.com/gpucores", "0")], &[]),
            &Annotations::new()
        )
        .is_err()
    );
    assert_eq!(v.health_rule(), HealthRule::Capacity);
    assert!(v.handshake_annotation().is_none());

    // 25 % of 304 units: 76, written with the card model.
    let p = pod(
        "p",
        vec![container(
            "c",
            &[
                ("amd.com/gpu", "1"),
                ("amd.com/gpumem", "16384"),
                ("amd.com/gpucores", "25"),
            ],
        )],
    );
    let (chosen, a, _) = place_on(&[("n1", amd_node(), vec![])], &p);
    assert_eq!(chosen.as_deref(), Some("n1"));
    assert_eq!(
        a["hami.io/amd-devices-allocated"],
        "8eff74b5-0000-1000-801b-b56457addd1b,AMD Instinct MI300X VF,16384,76:;"
    );
    // Memory only: the memory asked and every unit; nothing asked: the whole card.
    let p = pod("m", vec![container("c", &[("amd.com/gpu", "1")])]);
    let (_, a, _) = place_on(&[("n1", amd_node(), vec![])], &p);
    assert_eq!(
        a["hami.io/amd-devices-allocated"],
        "8eff74b5-0000-1000-801b-b56457addd1b,AMD Instinct MI300X VF,196288,304:;"
    );
    // Type and UUID selection.
    let p = with_annotations(
        pod("t", vec![container("c", &[("amd.com/gpu", "1")])]),
        &[("amd.com/use-gputype", "mi250")],
    );
    assert_eq!(
        place_on(&[("n1", amd_node(), vec![])], &p).2["n1"],
        "1/1 CardTypeMismatch"
    );
    let p = with_annotations(
        pod("u", vec![container("c", &[("amd.com/gpu", "1")])]),
        &[(
            "amd.com/nouse-gpu-uuid",
            "8eff74b5-0000-1000-801b-b56457addd1b",
        )],
    );
    assert_eq!(
        place_on(&[("n1", amd_node(), vec![])], &p).2["n1"],
        "1/1 CardUuidMismatch"
    );
}

#[test]
fn amd_admission_refuses_core_percentages_outside_1_to_100() {
    let v = vendor("AMD");
    for (cores, ok) in [("0", false), ("101", false), ("1", true), ("100", true)] {
        let mut c = ctr(&[("amd.com/gpu", "1"), ("amd.com/gpucores", cores)], &[]);
        let r = v.mutate_admission(&mut c, &Annotations::new());
        assert_eq!(r.is_ok(), ok, "{cores}");
        if !ok {
            assert_eq!(
                r.unwrap_err(),
                "amd.com/gpucores must be an integer percentage between 1 and 100"
            );
        }
    }
    let mut c = ctr(&[("amd.com/gpu", "0")], &[]);
    assert_eq!(
        v.mutate_admission(&mut c, &Annotations::new()).unwrap_err(),
        "amd.com/gpu must be a positive integer"
    );
    let mut c = ctr(&[("amd.com/gpumem", "100")], &[]);
    assert!(
        v.mutate_admission(&mut c, &Annotations::new())
            .unwrap()
            .uses
    );
}

// ---------------------------------------------------------------------------------------
// Cambricon MLU
// ---------------------------------------------------------------------------------------

#[test]
fn mlu_devices_come_from_capacity() {
    let (inv, issues) = decode(
        &[],
        &[
            ("cambricon.com/mlu.smlu.vcore", "200"),
            ("cambricon.com/mlu.smlu.vmemory", "192"),
        ],
    );
    assert!(issues.is_empty());
    let devices = &inv.vendors[0].devices;
    assert_eq!(devices.len(), 2);
    assert_eq!(
        devices[1],
        device("n1-cambricon-mlu-1", 1, 100, 96 * 256, 100, "MLU")
    );
    let (inv, issues) = decode(&[], &[("cambricon.com/mlu.smlu.vcore", "lots")]);
    assert!(inv.vendors.is_empty());
    assert_eq!(
        issues,
        vec![
            "MLU status.capacity[cambricon.com/mlu.smlu.vcore]: node capacity cambricon.com/mlu.smlu.vcore=\"lots\" is not a non-negative integer"
        ]
    );
    let v = vendor("MLU");
    assert_eq!(v.health_rule(), HealthRule::Always);
    assert!(matches!(
        v.node_lock(),
        NodeLockRule::Timestamp {
            key: "cambricon.com/dsmlu.lock",
            ..
        }
    ));
    // Memory in 256 MiB units, cores default to the whole card.
    assert_eq!(
        request(
            v.as_ref(),
            &ctr(
                &[
                    ("cambricon.com/vmlu", "1"),
                    ("cambricon.com/mlu.smlu.vmemory", "4")
                ],
                &[]
            )
        ),
        Some(req(1, "MLU", 1024, None, 100))
    );
}

#[test]
fn mlu_annotations_carry_the_dsmlu_profile() {
    let p = pod(
        "p",
        vec![
            container("sidecar", &[]),
            container(
                "c",
                &[
                    ("cambricon.com/vmlu", "1"),
                    ("cambricon.com/mlu.smlu.vmemory", "4"),
                    ("cambricon.com/mlu.smlu.vcore", "20"),
                ],
            ),
        ],
    );
    let cap = vec![
        ("cambricon.com/mlu.smlu.vcore", "100"),
        ("cambricon.com/mlu.smlu.vmemory", "96"),
    ];
    let (chosen, a, _) = place_on(&[("n1", vec![], cap)], &p);
    assert_eq!(chosen.as_deref(), Some("n1"));
    assert_eq!(
        a["hami.io/cambricon-mlu-devices-allocated"],
        ";n1-cambricon-mlu-0,MLU,1024,20:;"
    );
    assert_eq!(
        a["hami.io/cambricon-mlu-devices-to-allocate"],
        ";n1-cambricon-mlu-0,MLU,1024,20:;"
    );
    assert_eq!(a["CAMBRICON_DSMLU_PROFILE"], "0_20_4");
    assert_eq!(a["CAMBRICON_DSMLU_ASSIGNED"], "false");
}

// ---------------------------------------------------------------------------------------
// Iluvatar
// ---------------------------------------------------------------------------------------

#[test]
fn iluvatar_chips_are_vendors_of_their_own() {
    let v = vendor("MR-V100");
    assert_eq!(
        v.inventory_source().describe(),
        "hami.io/node-MR-V100-register"
    );
    assert_eq!(
        v.handshake_annotation(),
        Some("hami.io/node-handshake-MR-V100")
    );
    assert_eq!(
        v.to_allocate_annotation(),
        Some("hami.io/MR-V100-devices-to-allocate")
    );
    assert_eq!(
        request(
            v.as_ref(),
            &ctr(
                &[
                    ("iluvatar.ai/MR-V100-vgpu", "1"),
                    ("iluvatar.ai/MR-V100.vMem", "8")
                ],
                &[]
            )
        ),
        Some(req(1, "MR-V100", 2048, None, 0))
    );
    // Several devices: vCore 100 each; the container's name for the runtime.
    let mut c = ctr(&[("iluvatar.ai/MR-V100-vgpu", "2")], &[]);
    c.name = "train".into();
    assert!(
        v.mutate_admission(&mut c, &Annotations::new())
            .unwrap()
            .uses
    );
    let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["iluvatar.ai/MR-V100.vCore"].0, "200");
    let env = c.env.unwrap();
    assert_eq!(env[0].name, "SOL_CONTINER_NAME");
    assert_eq!(env[0].value.as_deref(), Some("train"));
    // Off by default.
    assert!(
        VendorRegistry::from_config(&DeviceConfig::default())
            .get("MR-V100")
            .is_none()
    );
}

// ---------------------------------------------------------------------------------------
// Ascend
// ---------------------------------------------------------------------------------------

fn npu(i: u32, cw: &str, network: Option<i64>) -> DeviceInfo {
    let mut d = device(&format!("{cw}-{i}"), i, 4, 65536, 20, cw);
    if let Some(n) = network {
        d.custom_info.insert("NetworkID".into(), n.into());
    }
    d
}

#[test]
fn ascend_memory_rounds_up_to_templates() {
    let v = vendor("Ascend310P");
    // HAMi's rounding: the smallest template holding the request, else the whole
    // device while the request fits the device's capacity (22000 MiB gets 21527).
    let c = |mem: &str| {
        ctr(
            &[
                ("huawei.com/Ascend310P", "1"),
                ("huawei.com/Ascend310P-memory", mem),
            ],
            &[],
        )
    };
    assert_eq!(request(v.as_ref(), &c("1024")).unwrap().mem_mib, 3072);
    assert_eq!(request(v.as_ref(), &c("6144")).unwrap().mem_mib, 6144);
    assert_eq!(request(v.as_ref(), &c("12289")).unwrap().mem_mib, 21527);
    assert_eq!(request(v.as_ref(), &c("22000")).unwrap().mem_mib, 21527);
    assert!(
        v.container_request(&c("30000"), &Annotations::new())
            .is_err()
    );
    // Soft split: as asked.
    let soft = ann(&[("huawei.com/vnpu-mode", "hami-core")]);
    assert_eq!(
        v.container_request(&c("1024"), &soft)
            .unwrap()
            .unwrap()
            .mem_mib,
        1024
    );
    // Admission: the memory rewritten, several devices only whole, cores only soft.
    let mut one = c("1024");
    v.mutate_admission(&mut one, &Annotations::new()).unwrap();
    assert_eq!(
        one.resources.unwrap().limits.unwrap()["huawei.com/Ascend310P-memory"].0,
        "3072"
    );
    let mut two = ctr(
        &[
            ("huawei.com/Ascend310P", "2"),
            ("huawei.com/Ascend310P-memory", "1024"),
        ],
        &[],
    );
    assert_eq!(
        v.mutate_admission(&mut two, &Annotations::new())
            .unwrap_err(),
        "vNPU nor supported for multiple devices"
    );
    let mut big = c("30000");
    assert_eq!(
        v.mutate_admission(&mut big, &Annotations::new())
            .unwrap_err(),
        "huawei.com/Ascend310P-memory 30000 is invalid"
    );
    let mut cores = ctr(
        &[
            ("huawei.com/Ascend310P", "1"),
            ("huawei.com/Ascend310P-core", "30"),
        ],
        &[],
    );
    assert!(v.mutate_admission(&mut cores, &Annotations::new()).is_err());
    assert!(v.mutate_admission(&mut cores, &soft).is_ok());
}

#[test]
fn ascend_910c_counts_modules_and_takes_pairs() {
    let v = vendor("Ascend910C");
    let c = |n: &str| ctr(&[("huawei.com/Ascend910C", n)], &[]);
    assert_eq!(request(v.as_ref(), &c("1")).unwrap().count, 2);
    assert_eq!(request(v.as_ref(), &c("4")).unwrap().count, 4);
    assert!(v.container_request(&c("3"), &Annotations::new()).is_err());
    let mut odd = c("3");
    assert_eq!(
        v.mutate_admission(&mut odd, &Annotations::new())
            .unwrap_err(),
        "Ascend910C device request must be 1 or 2*n, got 3"
    );
    let mut one = c("1");
    v.mutate_admission(&mut one, &Annotations::new()).unwrap();
    assert_eq!(
        one.resources.unwrap().limits.unwrap()["huawei.com/Ascend910C"].0,
        "2"
    );

    // NPUs 1, 2, 3 free (0 taken by a whole-card pod): only module 1 (2, 3) is whole.
    let devices: Vec<DeviceInfo> = (0..4).map(|i| npu(i, "Ascend910C", Some(0))).collect();
    let node = vec![("hami.io/node-register-Ascend910C", json_devices(&devices))];
    let reg = registry();
    let mut ledger = Ledger::new();
    let a = ann(&[("hami.io/node-register-Ascend910C", &json_devices(&devices))]);
    let (inv, _) = NodeInventory::from_node(&NodeView::annotations_only("n1", &a), &reg);
    ledger.set_node("n1", inv);
    let hold = pod(
        "hold",
        vec![container("c", &[("huawei.com/Ascend910C", "1")])],
    );
    let plan = PodPlan::new(&hold, &reg, &SchedulerDefaults::default()).unwrap();
    let placed = place(&plan, &reg, &ledger, &["n1".into()]).chosen.unwrap();
    let modules: Vec<&str> = placed.1.devices["Ascend910C"][0]
        .iter()
        .map(|d| d.uuid.as_str())
        .collect();
    // The pair is one module.
    let idx: Vec<u32> = modules
        .iter()
        .map(|u| u.rsplit('-').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(idx[0] / 2, idx[1] / 2, "{modules:?}");
    let _ = node;
}

#[test]
fn ascend_910b_keeps_network_groups_together_and_writes_runtime_info() {
    // NetworkID 0 for NPUs 0-3, 1 for 4-7; NPUs 0 and 1 are unhealthy: a request of 3
    // comes from group 1 (the largest fitting group).
    let devices: Vec<DeviceInfo> = (0..8)
        .map(|i| DeviceInfo {
            health: i > 1,
            ..npu(i, "Ascend910B3", Some(i64::from(i > 3)))
        })
        .collect();
    let reg = registry();
    let a = ann(&[("hami.io/node-register-Ascend910B3", &json_devices(&devices))]);
    let (inv, issues) = NodeInventory::from_node(&NodeView::annotations_only("n1", &a), &reg);
    assert!(issues.is_empty());
    assert_eq!(inv.vendors[0].devices[5].custom_int("NetworkID"), Some(1));
    let mut ledger = Ledger::new();
    ledger.set_node("n1", inv);
    let p = pod(
        "p",
        vec![container("c", &[("huawei.com/Ascend910B3", "3")])],
    );
    let plan = PodPlan::new(&p, &reg, &SchedulerDefaults::default()).unwrap();
    let (node, fit) = place(&plan, &reg, &ledger, &["n1".into()]).chosen.unwrap();
    let groups: Vec<i64> = fit.devices["Ascend910B3"][0]
        .iter()
        .map(|d| i64::from(d.uuid.rsplit('-').next().unwrap().parse::<u32>().unwrap() > 3))
        .collect();
    assert_eq!(groups, vec![1, 1, 1], "{:?}", fit.devices);

    let out = allocation_annotations(&reg, &plan, &node, &fit, 1_700_000_000);
    assert_eq!(out["predicate-time"], "1700000000");
    let uuids: Vec<String> = fit.devices["Ascend910B3"][0]
        .iter()
        .map(|d| d.uuid.clone())
        .collect();
    assert_eq!(
        out["huawei.com/Ascend910B3"],
        format!(
            "[{}]",
            uuids
                .iter()
                .map(|u| format!(r#"{{"UUID":"{u}","memory":65536}}"#))
                .collect::<Vec<_>>()
                .join(",")
        )
    );
}

#[test]
fn ascend_soft_split_needs_a_hami_vnpu_core_node() {
    let devices: Vec<DeviceInfo> = (0..2).map(|i| npu(i, "Ascend910B4", None)).collect();
    let register = json_devices(&devices);
    let soft = with_annotations(
        pod(
            "s",
            vec![container(
                "c",
                &[
                    ("huawei.com/Ascend910B4", "1"),
                    ("huawei.com/Ascend910B4-memory", "1000"),
                    ("huawei.com/Ascend910B4-core", "30"),
                ],
            )],
        ),
        &[("huawei.com/vnpu-mode", "hami-core")],
    );
    let (chosen, _, failed) = place_on(
        &[(
            "hard",
            vec![("hami.io/node-register-Ascend910B4", register.clone())],
            vec![],
        )],
        &soft,
    );
    assert_eq!(chosen, None);
    assert_eq!(failed["hard"], "1/2 ModeNotFit");
    let (chosen, a, _) = place_on(
        &[(
            "soft",
            vec![
                ("hami.io/node-register-Ascend910B4", register),
                ("hami-vnpu-core", "true".to_string()),
            ],
            vec![],
        )],
        &soft,
    );
    assert_eq!(chosen.as_deref(), Some("soft"));
    let dev = &a["hami.io/Ascend910B4-devices-allocated"];
    assert!(dev.ends_with(",Ascend910B4,1000,30:;"), "{dev}");
    let uuid = dev.split(',').next().unwrap();
    assert_eq!(
        a["huawei.com/Ascend910B4"],
        format!(r#"[{{"UUID":"{uuid}","memory":1000,"core":30}}]"#)
    );
}

#[test]
fn ascend_config_reads_both_layouts() {
    let current = "vnpus:\n  hamiVnpuCore: true\n  configs:\n  - chipName: 910B3\n    commonWord: Ascend910B3\n    resourceName: huawei.com/Ascend910B3\n    resourceMemoryName: huawei.com/Ascend910B3-memory\n    memoryAllocatable: 65536\n    memoryCapacity: 65536\n    templates:\n    - {name: vir05_1c_16g, memory: 16384}\n";
    let cfg = DeviceConfig::from_yaml(current).unwrap();
    assert!(cfg.vnpus.hami_vnpu_core);
    assert_eq!(cfg.vnpus.configs[0].templates[0].name, "vir05_1c_16g");
    let legacy = "vnpus:\n- chipName: 910B3\n  commonWord: Ascend910B3\n  resourceName: huawei.com/Ascend910B3\n";
    let cfg = DeviceConfig::from_yaml(legacy).unwrap();
    assert!(!cfg.vnpus.hami_vnpu_core);
    assert_eq!(cfg.vnpus.configs[0].common_word, "Ascend910B3");
}

// ---------------------------------------------------------------------------------------
// Biren, Vastai (whole cards, JSON, handshake)
// ---------------------------------------------------------------------------------------

#[test]
fn biren_and_vastai_take_whole_cards() {
    for (word, register, resource, allocated) in [
        (
            "Biren",
            "hami.io/node-biren-register",
            "birentech.com/gpu",
            "hami.io/Biren-devices-allocated",
        ),
        (
            "Vastai",
            "hami.io/node-va-register",
            "vastaitech.com/va",
            "hami.io/Vastai-devices-allocated",
        ),
    ] {
        // The plugins register no compute; devices count 100.
        let value = format!(
            r#"[{{"id":"{word}-0","count":1,"type":"{word}","health":true,"devicepairscore":{{}}}},{{"id":"{word}-1","index":1,"count":1,"type":"{word}","health":true}}]"#
        );
        let (inv, issues) = decode(&[(register, &value)], &[]);
        assert!(issues.is_empty(), "{issues:?}");
        assert_eq!(inv.vendors[0].devices[0].cores, 100);
        let p = pod("p", vec![container("c", &[(resource, "2")])]);
        let (chosen, a, _) = place_on(&[("n1", vec![(register, value.clone())], vec![])], &p);
        assert_eq!(chosen.as_deref(), Some("n1"));
        let dev = &a[allocated];
        assert!(
            dev == &format!("{word}-1,{word},0,0:{word}-0,{word},0,0:;")
                || dev == &format!("{word}-0,{word},0,0:{word}-1,{word},0,0:;"),
            "{dev}"
        );
        // Three cards from two: HAMi's node-level reason.
        let p = pod("q", vec![container("c", &[(resource, "3")])]);
        assert_eq!(
            place_on(&[("n1", vec![(register, value)], vec![])], &p).2["n1"],
            "NodeInsufficientDevice"
        );
    }
}

#[test]
fn vastai_die_mode_keeps_aic_groups_together() {
    let mut devices = Vec::new();
    for (i, aic) in ["a", "b", "b", "a", "b"].iter().enumerate() {
        let mut d = device(&format!("die-{i}"), i as u32, 1, 0, 100, "Vastai");
        d.custom_info.insert("DeviceStrategy".into(), "die".into());
        d.custom_info.insert("AIC".into(), (*aic).into());
        devices.push(d);
    }
    let p = pod("p", vec![container("c", &[("vastaitech.com/va", "3")])]);
    let (_, a, _) = place_on(
        &[(
            "n1",
            vec![("hami.io/node-va-register", json_devices(&devices))],
            vec![],
        )],
        &p,
    );
    let dev = &a["hami.io/Vastai-devices-allocated"];
    for i in [1, 2, 4] {
        assert!(dev.contains(&format!("die-{i},")), "{dev}");
    }
}

// ---------------------------------------------------------------------------------------
// Metax
// ---------------------------------------------------------------------------------------

#[test]
fn metax_gpus_come_from_capacity_and_sgpus_from_their_annotation() {
    let (inv, issues) = decode(
        &[(
            "metax-tech.com/node-gpu-devices",
            r#"[{"uuid":"sg-0","model":"C500","totalDevCount":16,"totalCompute":100,"totalVRam":65536,"numa":1,"healthy":true,"qosPolicy":"fixed-share","linkZone":2}]"#,
        )],
        &[("metax-tech.com/gpu", "2")],
    );
    assert!(issues.is_empty(), "{issues:?}");
    let by: BTreeMap<&str, &Vec<DeviceInfo>> = inv
        .vendors
        .iter()
        .map(|v| (v.vendor.as_str(), &v.devices))
        .collect();
    assert_eq!(
        by["Metax-GPU"][1],
        device("n1-metax-1", 1, 1, 65536, 100, "Metax-GPU")
    );
    let sg = &by["Metax-SGPU"][0];
    assert_eq!(
        (sg.count, sg.mem_mib, sg.cores, sg.numa),
        (16, 65536, 100, 1)
    );
    assert_eq!(sg.custom_str("QosPolicy"), Some("fixed-share"));
    let (_, issues) = decode(&[("metax-tech.com/node-gpu-devices", "{}")], &[]);
    assert_eq!(issues.len(), 1);
}

#[test]
fn metax_sgpu_memory_units_qos_and_annotations() {
    let v = vendor("Metax-SGPU");
    let c = |mem: &str| {
        ctr(
            &[
                ("metax-tech.com/sgpu", "1"),
                ("metax-tech.com/vmemory", mem),
            ],
            &[],
        )
    };
    // A bare number is GiB, a number with a unit is bytes.
    assert_eq!(request(v.as_ref(), &c("16")).unwrap().mem_mib, 16384);
    assert_eq!(request(v.as_ref(), &c("16G")).unwrap().mem_mib, 15258);
    assert_eq!(request(v.as_ref(), &c("16Gi")).unwrap().mem_mib, 16384);
    assert_eq!(
        request(v.as_ref(), &ctr(&[("metax-tech.com/sgpu", "1")], &[]))
            .unwrap()
            .cores,
        100
    );

    let mut bad = ctr(&[("metax-tech.com/sgpu", "1")], &[]);
    assert_eq!(
        v.mutate_admission(
            &mut bad,
            &ann(&[("metax-tech.com/sgpu-qos-policy", "fast")])
        )
        .unwrap_err(),
        "metax-tech.com/sgpu-qos-policy must be set one of [best-effort, fixed-share, burst-share]"
    );
    let mut two = ctr(&[("metax-tech.com/sgpu", "2")], &[]);
    assert_eq!(
        v.mutate_admission(
            &mut two,
            &ann(&[("metax-tech.com/sgpu-app-class", "online")])
        )
        .unwrap_err(),
        "app-class pod must request single device"
    );

    let register = r#"[{"uuid":"sg-0","totalDevCount":16,"totalCompute":100,"totalVRam":65536,"healthy":true,"qosPolicy":"fixed-share"}]"#;
    let node = vec![("metax-tech.com/node-gpu-devices", register.to_string())];
    let p = pod(
        "p",
        vec![container(
            "c",
            &[
                ("metax-tech.com/sgpu", "1"),
                ("metax-tech.com/vmemory", "4"),
                ("metax-tech.com/vcore", "30"),
            ],
        )],
    );
    let (chosen, a, _) = place_on(&[("n1", node, vec![])], &p);
    assert_eq!(chosen.as_deref(), Some("n1"));
    assert_eq!(
        a["hami.io/metax-sgpu-devices-allocated"],
        "sg-0,Metax-SGPU,4096,30:;"
    );
    assert_eq!(
        a["metax-tech.com/gpu-devices-allocated"],
        r#"[[{"uuid":"sg-0","compute":30,"vRam":4096}]]"#
    );
    assert_eq!(a["metax-tech.com/predicate-time"], "1700000000000000000");
}

// ---------------------------------------------------------------------------------------
// Mthreads
// ---------------------------------------------------------------------------------------

#[test]
fn mthreads_splits_requests_over_gpus_and_writes_its_keys() {
    let v = vendor("Mthreads");
    assert_eq!(v.to_allocate_annotation(), None);
    assert_eq!(v.node_lock(), NodeLockRule::None);
    // 2 GPUs, 32 cores and 8 memory units together: 16 cores and 2048 MiB each.
    assert_eq!(
        request(
            v.as_ref(),
            &ctr(
                &[
                    ("mthreads.com/vgpu", "2"),
                    ("mthreads.com/sgpu-core", "32"),
                    ("mthreads.com/sgpu-memory", "8")
                ],
                &[]
            )
        ),
        Some(req(2, "Mthreads", 2048, None, 16))
    );
    let mut c = ctr(
        &[
            ("mthreads.com/vgpu", "1"),
            ("mthreads.com/sgpu-memory", "3"),
        ],
        &[],
    );
    assert!(
        v.mutate_admission(&mut c, &Annotations::new())
            .unwrap_err()
            .starts_with("sGPU memory request value is invalid")
    );
    let mut c = ctr(&[("mthreads.com/vgpu", "1")], &[]);
    v.mutate_admission(&mut c, &Annotations::new()).unwrap();
    let l = c.resources.unwrap().limits.unwrap();
    assert_eq!(
        (
            l["mthreads.com/sgpu-core"].0.as_str(),
            l["mthreads.com/sgpu-memory"].0.as_str()
        ),
        ("16", "96")
    );

    let cap = vec![
        ("mthreads.com/sgpu-core", "32"),
        ("mthreads.com/sgpu-memory", "192"),
    ];
    let p = pod(
        "p",
        vec![container(
            "c",
            &[
                ("mthreads.com/vgpu", "1"),
                ("mthreads.com/sgpu-core", "8"),
                ("mthreads.com/sgpu-memory", "4"),
            ],
        )],
    );
    let (chosen, a, _) = place_on(&[("n1", vec![], cap)], &p);
    assert_eq!(chosen.as_deref(), Some("n1"));
    let dev = &a["hami.io/mthreads-vgpu-devices-allocated"];
    assert!(dev.ends_with(",Mthreads,2048,8:;"), "{dev}");
    let idx = dev.split(',').next().unwrap().rsplit('-').next().unwrap();
    assert_eq!(a["mthreads.com/gpu-index"], idx);
    assert_eq!(a["mthreads.com/predicate-node"], "n1");
    assert!(!a.contains_key("hami.io/mthreads-vgpu-devices-to-allocate"));
}

// ---------------------------------------------------------------------------------------
// Enflame GCU, Kunlunxin, AWS Neuron
// ---------------------------------------------------------------------------------------

#[test]
fn enflame_gcus_are_taken_one_pod_each() {
    let v = vendor("GCU");
    assert_eq!(v.health_rule(), HealthRule::Capacity);
    assert_eq!(v.node_lock(), NodeLockRule::None);
    let cap = vec![("enflame.com/gcu", "1")];
    let p = pod("p", vec![container("c", &[("enflame.com/gcu", "1")])]);
    let (chosen, a, _) = place_on(&[("n1", vec![], cap.clone())], &p);
    assert_eq!(chosen.as_deref(), Some("n1"));
    assert_eq!(
        a["hami.io/enflame-gcu-devices-allocated"],
        "n1-GCU-0,GCU,100,100:;"
    );
    assert_eq!(
        a["hami.io/enflame-gcu-devices-to-allocate"],
        "n1-GCU-0,GCU,100,100:;"
    );
    // The GCU in use refuses a second pod.
    let reg = registry();
    let mut ledger = Ledger::new();
    let a0 = Annotations::new();
    let capq = quantities(&cap).unwrap();
    let view = NodeView {
        name: "n1",
        annotations: &a0,
        capacity: Some(&capq),
        labels: None,
    };
    ledger.set_node("n1", NodeInventory::from_node(&view, &reg).0);
    let plan = PodPlan::new(&p, &reg, &SchedulerDefaults::default()).unwrap();
    let (node, fit) = place(&plan, &reg, &ledger, &["n1".into()]).chosen.unwrap();
    ledger.apply_pod(hami_core::ledger::PodRecord::from_devices(
        "u1",
        "default",
        "p",
        &node,
        &fit.devices,
        &plan.kinds,
    ));
    let out = place(&plan, &reg, &ledger, &["n1".into()]);
    assert_eq!(out.failed["n1"], "1/1 ExclusiveDeviceAllocateConflict");
}

#[test]
fn kunlun_whole_xpus_follow_the_board() {
    let v = vendor("kunlun");
    assert_eq!(v.to_allocate_annotation(), None);
    assert_eq!(v.allocated_annotation(), "hami.io/kunlun-allocated");
    let (inv, _) = decode(&[], &[("kunlunxin.com/xpu", "8")]);
    let xpus = &inv.vendors[0].devices;
    assert_eq!((xpus[3].numa, xpus[4].numa), (0, 1));
    assert_eq!(xpus[0].mem_mib, 98304);
    let cap = vec![("kunlunxin.com/xpu", "8")];
    let p = pod("p", vec![container("c", &[("kunlunxin.com/xpu", "4")])]);
    let (chosen, a, _) = place_on(&[("n1", vec![], cap.clone())], &p);
    assert_eq!(chosen.as_deref(), Some("n1"));
    assert_eq!(
        a["hami.io/kunlun-allocated"],
        "n1-kunlun-0,kunlun,98304,100:n1-kunlun-1,kunlun,98304,100:n1-kunlun-2,kunlun,98304,100:n1-kunlun-3,kunlun,98304,100:;"
    );
    assert_eq!(a["BAIDU_COM_DEVICE_IDX"], "0,1,2,3");
    // Three XPUs are no shape of the board (HAMi's reason name).
    let p = pod("q", vec![container("c", &[("kunlunxin.com/xpu", "3")])]);
    assert_eq!(
        place_on(&[("n1", vec![], cap)], &p).2["n1"],
        "1/8 NumaNotFit"
    );
}

#[test]
fn kunlun_vxpus_come_in_three_sizes() {
    let v = vendor("XPU");
    let c = |mem: &str| {
        ctr(
            &[
                ("kunlunxin.com/vxpu", "1"),
                ("kunlunxin.com/vxpu-memory", mem),
            ],
            &[],
        )
    };
    assert_eq!(
        request(v.as_ref(), &c("1000")),
        Some(req(1, "XPU", 24576, None, 25))
    );
    assert_eq!(
        request(v.as_ref(), &c("30000")),
        Some(req(1, "XPU", 49152, None, 50))
    );
    assert_eq!(
        request(v.as_ref(), &ctr(&[("kunlunxin.com/vxpu", "1")], &[])),
        Some(req(1, "XPU", 98304, Some(100), 100))
    );
    let mut m = c("1000");
    v.mutate_admission(&mut m, &Annotations::new()).unwrap();
    assert_eq!(
        m.resources.unwrap().limits.unwrap()["kunlunxin.com/vxpu-memory"].0,
        "24576"
    );
    assert_eq!(v.handshake_annotation(), Some("hami.io/node-handshake-xpu"));
    let devices: Vec<DeviceInfo> = (0..8)
        .map(|i| device(&format!("xpu-{i}"), i, 4, 98304, 100, "XPU"))
        .collect();
    let node = vec![("hami.io/node-register-xpu", json_devices(&devices))];
    let p = pod(
        "p",
        vec![container(
            "c",
            &[
                ("kunlunxin.com/vxpu", "1"),
                ("kunlunxin.com/vxpu-memory", "20000"),
            ],
        )],
    );
    let (chosen, a, _) = place_on(&[("n1", node, vec![])], &p);
    assert_eq!(chosen.as_deref(), Some("n1"));
    let dev = &a["hami.io/xpu-devices-allocated"];
    assert!(dev.ends_with(",XPU,24576,25:;"), "{dev}");
    assert_eq!(&a["hami.io/xpu-devices-to-allocate"], dev);
}

#[test]
fn aws_neuron_counts_cores_as_bits_and_runs_of_devices() {
    let v = vendor("AWSNeuron");
    assert_eq!(
        v.allocated_annotation(),
        "hami.io/aws-neuron-devices-allocated"
    );
    assert_eq!(v.node_lock(), NodeLockRule::None);
    // Two cores per device: a mask of 3.
    let (inv, _) = decode(
        &[],
        &[
            ("aws.amazon.com/neuron", "4"),
            ("aws.amazon.com/neuroncore", "8"),
        ],
    );
    assert_eq!(
        (
            inv.vendors[0].devices[0].count,
            inv.vendors[0].devices[0].cores
        ),
        (2, 3)
    );
    // Cores: one device for one core, a device per two cores.
    let c = |k: &str, n: &str| ctr(&[(k, n)], &[]);
    assert_eq!(
        request(v.as_ref(), &c("aws.amazon.com/neuroncore", "1")),
        Some(req(1, "AWSNeuron", 0, None, 1))
    );
    assert_eq!(
        request(v.as_ref(), &c("aws.amazon.com/neuroncore", "4")),
        Some(req(2, "AWSNeuron", 0, None, 2))
    );
    assert_eq!(
        request(v.as_ref(), &c("aws.amazon.com/neuron", "2")),
        Some(req(2, "AWSNeuron", 0, None, 0))
    );

    let cap = vec![
        ("aws.amazon.com/neuron", "4"),
        ("aws.amazon.com/neuroncore", "8"),
    ];
    // One core: the core's index.
    let p = pod(
        "p",
        vec![container("c", &[("aws.amazon.com/neuroncore", "1")])],
    );
    let (chosen, a, _) = place_on(&[("n1", vec![], cap.clone())], &p);
    assert_eq!(chosen.as_deref(), Some("n1"));
    let dev = &a["hami.io/aws-neuron-devices-allocated"];
    assert!(dev.ends_with(",AWSNeuron,0,1:;"), "{dev}");
    let idx: u32 = dev
        .split(',')
        .next()
        .unwrap()
        .rsplit('-')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(a["AWS_NEURON_IDS"], (idx * 2).to_string());
    assert_eq!(a["NEURON_RESOURCE_TYPE"], "aws.amazon.com/neuroncore");
    assert_eq!(a["NEURON_ALLOCATED"], "false");
    assert_eq!(a["aws.amazon.com/predicate-node"], "n1");
    // Four whole devices: an aligned run.
    let p = pod("q", vec![container("c", &[("aws.amazon.com/neuron", "4")])]);
    let (_, a, _) = place_on(&[("n1", vec![], cap.clone())], &p);
    assert_eq!(a["AWS_NEURON_IDS"], "0,1,2,3");
    assert!(!a.contains_key("NEURON_RESOURCE_TYPE"));
    // Three: no run of that length off Inferentia.
    let p = pod("r", vec![container("c", &[("aws.amazon.com/neuron", "3")])]);
    assert_eq!(
        place_on(&[("n1", vec![], cap)], &p).2["n1"],
        "1/4 NumaNotFit"
    );
}
