//! HAMi's own unit-test tables, case by case, run against hami-rs's placement engine:
//! decision compatibility means the same devices, in the same order, for the same
//! reasons (`docs/protocol.md#fit-checks`, `#gpu-policies`, `#resourcequota`).
//!
//! Each test names the HAMi test (Project-HAMi/HAMi, `pkg/device/nvidia/device_test.go`
//! unless said otherwise) and case it comes from. HAMi's `Fit` receives the node's
//! device list already sorted by the GPU policy; here the whole node fit runs, sort
//! included: for these tables (equal devices, or orders the policy keeps) the sort
//! leaves HAMi's list as the table gives it. Where a case's numbers reach HAMi's
//! `fitInDevices` check first (more GPUs asked than the node has), the answer is that
//! check's, `NodeInsufficientDevice`, as the whole HAMi scheduler gives it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use hami_core::accounting::DeviceCharge;
use hami_core::codec::{PairScores, decode_topology_scores, parse_device_cordon};
use hami_core::engine::{NodeFit, fit_node};
use hami_core::fit::FitFailure;
use hami_core::ledger::{Ledger, NodeInventory, VendorDevices};
use hami_core::model::DeviceInfo;
use k8s_openapi::api::core::v1::Pod;

/// One row of HAMi's `DeviceUsage` tables.
#[derive(Clone)]
struct Dev {
    id: &'static str,
    index: u32,
    used: u32,
    count: u32,
    usedmem: u64,
    totalmem: u32,
    totalcore: u32,
    usedcores: u64,
    numa: i32,
    health: bool,
}

impl Dev {
    /// HAMi's common row: idle, healthy, 100 cores, NUMA 0.
    fn new(id: &'static str, index: u32, count: u32, totalmem: u32) -> Self {
        Dev {
            id,
            index,
            used: 0,
            count,
            usedmem: 0,
            totalmem,
            totalcore: 100,
            usedcores: 0,
            numa: 0,
            health: true,
        }
    }
}

/// A node holding `devs` (in this order) with their usage, and optional node-level
/// settings (cordon, pair scores).
fn node(devs: &[Dev], inventory: impl FnOnce(&mut NodeInventory)) -> Ledger {
    let infos: Vec<DeviceInfo> = devs
        .iter()
        .map(|d| DeviceInfo {
            id: d.id.into(),
            index: d.index,
            count: d.count,
            mem_mib: d.totalmem,
            cores: d.totalcore,
            dev_type: "NVIDIA".into(),
            numa: d.numa,
            mode: "hami-core".into(),
            health: d.health,
            mig_profiles: vec![],
            custom_info: Default::default(),
        })
        .collect();
    let mut inv = NodeInventory {
        vendors: vec![VendorDevices {
            vendor: "NVIDIA".into(),
            devices: infos,
        }],
        ..Default::default()
    };
    inventory(&mut inv);
    let mut ledger = Ledger::new();
    ledger.set_node("n", inv);
    let charges: Vec<DeviceCharge> = devs
        .iter()
        .filter(|d| d.used > 0 || d.usedmem > 0 || d.usedcores > 0)
        .map(|d| DeviceCharge {
            uuid: d.id.into(),
            vendor: "NVIDIA".into(),
            slots: d.used,
            mem: d.usedmem,
            cores: d.usedcores,
        })
        .collect();
    common::hami::book_running(&mut ledger, charges);
    ledger
}

/// HAMi's `ContainerDeviceRequest` as a pod's one container: `Nums`, `Memreq`,
/// `MemPercentagereq` (0 = not given), `Coresreq`.
fn request(nums: u32, memreq: u32, mem_percent: u32, coresreq: u32) -> Pod {
    let mut limits = vec![
        ("nvidia.com/gpu", nums.to_string()),
        ("nvidia.com/gpucores", coresreq.to_string()),
    ];
    if memreq > 0 {
        limits.push(("nvidia.com/gpumem", memreq.to_string()));
    }
    if mem_percent > 0 {
        limits.push(("nvidia.com/gpumem-percentage", mem_percent.to_string()));
    }
    let limits: Vec<(&str, &str)> = limits.iter().map(|(k, v)| (*k, v.as_str())).collect();
    pod("p", vec![container("main", &limits)])
}

fn fit(ledger: &Ledger, pod: &Pod) -> Result<NodeFit, FitFailure> {
    fit_node(&plan(pod), &registry(), ledger.node("n").unwrap())
}

/// The UUIDs the pod's only container got, in order.
fn uuids(fit: &NodeFit) -> Vec<String> {
    fit.devices["NVIDIA"]
        .iter()
        .flatten()
        .map(|d| d.uuid.clone())
        .collect()
}

fn reason(out: Result<NodeFit, FitFailure>) -> String {
    out.expect_err("expected no fit").render()
}

// ---- TestDevices_Fit ----

#[test]
fn devices_fit_success_takes_the_last_of_equal_devices() {
    // "fit success": dev-0 and dev-1 are identical (both even with Index 0).
    let mut d1 = Dev::new("dev-1", 0, 100, 128);
    d1.index = 0;
    let ledger = node(&[Dev::new("dev-0", 0, 100, 128), d1], |_| {});
    let out = fit(&ledger, &request(1, 64, 0, 50)).unwrap();
    assert_eq!(uuids(&out), ["dev-1"]);
}

#[test]
fn devices_fit_failures_name_hamis_reasons() {
    // "fit fail: memory not enough"
    let ledger = node(&[Dev::new("dev-0", 0, 100, 128)], |_| {});
    assert_eq!(
        reason(fit(&ledger, &request(1, 512, 0, 50))),
        "1/1 CardInsufficientMemory"
    );

    // "fit fail: core not enough"
    let mut d = Dev::new("dev-0", 0, 100, 1024);
    d.usedcores = 100;
    let ledger = node(&[d], |_| {});
    assert_eq!(
        reason(fit(&ledger, &request(1, 512, 0, 50))),
        "1/1 CardInsufficientCore"
    );

    // "fit fail: card overused"
    let mut d = Dev::new("dev-0", 0, 100, 1280);
    d.used = 100;
    let ledger = node(&[d], |_| {});
    assert_eq!(
        reason(fit(&ledger, &request(1, 512, 0, 50))),
        "1/1 CardTimeSlicingExhausted"
    );

    // "fit fail:  card exclusively"
    let mut d = Dev::new("dev-0", 0, 100, 1280);
    d.used = 20;
    let ledger = node(&[d], |_| {});
    assert_eq!(
        reason(fit(&ledger, &request(1, 512, 0, 100))),
        "1/1 ExclusiveDeviceAllocateConflict"
    );

    // "fit fail:  CardComputeUnitsExhausted"
    let mut d = Dev::new("dev-0", 0, 100, 1280);
    d.used = 20;
    d.usedcores = 100;
    let ledger = node(&[d], |_| {});
    assert_eq!(
        reason(fit(&ledger, &request(1, 512, 0, 0))),
        "1/1 CardComputeUnitsExhausted"
    );

    // "fit fail:  CardNotHealth"
    let mut d = Dev::new("dev-0", 0, 100, 1280);
    d.used = 20;
    d.usedcores = 10;
    d.health = false;
    let ledger = node(&[d], |_| {});
    assert_eq!(
        reason(fit(&ledger, &request(1, 0, 10, 20))),
        "1/1 CardNotHealth"
    );
}

#[test]
fn devices_fit_memory_percentage_resolves_on_the_device() {
    // "fit success:  memory percentage"
    let mut d = Dev::new("dev-0", 0, 100, 1280);
    d.used = 20;
    d.usedcores = 10;
    let ledger = node(&[d], |_| {});
    let out = fit(&ledger, &request(1, 0, 10, 20)).unwrap();
    assert_eq!(uuids(&out), ["dev-0"]);
    assert_eq!(out.devices["NVIDIA"][0][0].mem_mib, 128);
}

#[test]
fn devices_fit_more_gpus_than_the_node_has() {
    // "fit fail: user assign use uuid mismatch" / "... no use uuid match" (2 GPUs, 1
    // device), "fit fail:  AllocatedCardsInsufficientRequest" (2 on 1) and "fit fail:
    // partial allocation AllocatedCardsInsufficientRequest for multiple cards" (3 on 2):
    // HAMi's fitInDevices refuses these before Fit runs.
    let one = node(&[Dev::new("dev-0", 0, 100, 1280)], |_| {});
    let use_uuid = with_annotations(
        request(2, 512, 0, 50),
        &[("nvidia.com/use-gpuuuid", "dev-0")],
    );
    assert_eq!(reason(fit(&one, &use_uuid)), "NodeInsufficientDevice");
    let nouse = with_annotations(
        request(2, 512, 0, 50),
        &[("nvidia.com/nouse-gpuuuid", "dev-0")],
    );
    assert_eq!(reason(fit(&one, &nouse)), "NodeInsufficientDevice");
    assert_eq!(
        reason(fit(&one, &request(2, 512, 0, 20))),
        "NodeInsufficientDevice"
    );
    let two = node(
        &[
            Dev::new("dev-0", 0, 100, 1280),
            Dev::new("dev-1", 1, 100, 1280),
        ],
        |_| {},
    );
    assert_eq!(
        reason(fit(&two, &request(3, 512, 0, 20))),
        "NodeInsufficientDevice"
    );
    // With as many GPUs as devices the walk itself answers, as Fit does.
    let mut busy = Dev::new("dev-1", 1, 100, 1280);
    busy.used = 100;
    let partial = node(&[Dev::new("dev-0", 0, 100, 1280), busy], |_| {});
    assert_eq!(
        reason(fit(&partial, &request(2, 512, 0, 20))),
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted"
    );
}

// ---- TestFit_DeviceCordon ----

#[test]
fn fit_device_cordon() {
    let devs = [
        Dev::new("dev-0", 0, 100, 128),
        Dev::new("dev-1", 0, 100, 128),
    ];
    let req = request(1, 64, 0, 50);
    // "cordoned device is skipped, healthy sibling still fits" (cordon "dev-1, ")
    let ledger = node(&devs, |inv| inv.cordon = parse_device_cordon("dev-1, "));
    assert_eq!(uuids(&fit(&ledger, &req).unwrap()), ["dev-0"]);
    // "all devices cordoned fails with CardCordoned reason"
    let ledger = node(&devs, |inv| inv.cordon = parse_device_cordon("dev-0,dev-1"));
    assert_eq!(reason(fit(&ledger, &req)), "2/2 CardCordoned");
    // "running pods on a cordoned device are unaffected"
    let mut busy = devs.clone();
    busy[1].used = 1;
    busy[1].usedcores = 50;
    busy[1].usedmem = 64;
    let ledger = node(&busy, |inv| inv.cordon = parse_device_cordon("dev-1"));
    assert_eq!(uuids(&fit(&ledger, &req).unwrap()), ["dev-0"]);
    assert_eq!(ledger.usage("n").unwrap()[0][1].used, 1);
    // "no annotation or no node info means nothing cordoned"
    let ledger = node(&devs, |_| {});
    assert!(fit(&ledger, &req).is_ok());
}

// ---- TestFit_NumaSwitching ----

#[test]
fn fit_numa_switching() {
    // Walked from the end: dev-2 (NUMA 0) is taken, dev-1 (NUMA 1) starts over, then
    // dev-0 completes the pair; the container's devices in walk order.
    let mut devs = [
        Dev::new("dev-0", 0, 10, 8192),
        Dev::new("dev-1", 1, 10, 8192),
        Dev::new("dev-2", 2, 10, 8192),
    ];
    devs[0].numa = 1;
    devs[1].numa = 1;
    let ledger = node(&devs, |_| {});
    let pod = with_annotations(request(2, 100, 0, 10), &[("nvidia.com/numa-bind", "true")]);
    assert_eq!(uuids(&fit(&ledger, &pod).unwrap()), ["dev-1", "dev-0"]);
}

// ---- TestFit_MutexPolicy ----

#[test]
fn fit_mutex_policy() {
    let mut used = Dev::new("used", 0, 10, 8192);
    used.used = 1;
    let ledger = node(&[used, Dev::new("idle", 1, 10, 8192)], |_| {});
    let mutex = |p: Pod| with_annotations(p, &[("hami.io/gpu-scheduler-policy", "mutex")]);
    // "mutex skips the used device and allocates only the idle one."
    let out = fit(&ledger, &mutex(request(1, 100, 0, 10))).unwrap();
    assert_eq!(uuids(&out), ["idle"]);
    // "mutex cannot satisfy 2 cards when only one device is idle."
    assert!(fit(&ledger, &mutex(request(2, 100, 0, 10))).is_err());
}

// ---- TestFit_Topology* ----

fn topology_node(scores: &str) -> Ledger {
    let devs = [
        Dev::new("dev-0", 0, 10, 8192),
        Dev::new("dev-1", 1, 10, 8192),
        Dev::new("dev-2", 2, 10, 8192),
    ];
    let scores = decode_topology_scores(scores).unwrap();
    node(&devs, |inv| inv.pair_scores = PairScores::new(&scores))
}

fn topology(nums: u32) -> Pod {
    with_annotations(
        request(nums, 100, 0, 10),
        &[("hami.io/gpu-scheduler-policy", "topology-aware")],
    )
}

const SCORES: &str = r#"[{"uuid":"dev-0","score":{"dev-1":100,"dev-2":200}},{"uuid":"dev-1","score":{"dev-0":100,"dev-2":150}},{"uuid":"dev-2","score":{"dev-0":200,"dev-1":150}}]"#;

#[test]
fn fit_topology_worst_single_card_and_best_combination() {
    let ledger = topology_node(SCORES);
    // TestFit_TopologyWorstSingleCard: dev-1 totals 250, below dev-0 (300) and dev-2 (350).
    assert_eq!(uuids(&fit(&ledger, &topology(1)).unwrap()), ["dev-1"]);
    // TestFit_TopologyBestCombination: dev-0 + dev-2 score 200; in walk order.
    assert_eq!(
        uuids(&fit(&ledger, &topology(2)).unwrap()),
        ["dev-2", "dev-0"]
    );
    // TestFit_TopologyExactMatch: as many fitting devices as asked for.
    let two = node(
        &[
            Dev::new("dev-0", 0, 10, 8192),
            Dev::new("dev-1", 1, 10, 8192),
        ],
        |_| {},
    );
    assert_eq!(uuids(&fit(&two, &topology(2)).unwrap()).len(), 2);
}

#[test]
fn fit_topology_zero_and_negative_scores() {
    // TestFit_TopologyBestCombinationZeroScores: every pair ties; two devices still.
    let zero = topology_node(
        r#"[{"uuid":"dev-0","score":{"dev-1":0,"dev-2":0}},{"uuid":"dev-1","score":{"dev-0":0,"dev-2":0}},{"uuid":"dev-2","score":{"dev-0":0,"dev-1":0}}]"#,
    );
    // The first combination in walk order wins the tie.
    assert_eq!(
        uuids(&fit(&zero, &topology(2)).unwrap()),
        ["dev-2", "dev-1"]
    );
    // TestFit_TopologyNegativeScores: SingleGPU picks dev-0 (-8), MultiGPU dev-1 + dev-2 (-1).
    let negative = topology_node(
        r#"[{"uuid":"dev-0","score":{"dev-1":-5,"dev-2":-3}},{"uuid":"dev-1","score":{"dev-0":-5,"dev-2":-1}},{"uuid":"dev-2","score":{"dev-0":-3,"dev-1":-1}}]"#,
    );
    assert_eq!(uuids(&fit(&negative, &topology(1)).unwrap()), ["dev-0"]);
    assert_eq!(
        uuids(&fit(&negative, &topology(2)).unwrap()),
        ["dev-2", "dev-1"]
    );
}

// ---- TestZeroMemoryPercentageIsAccountedAsWholeCard ----

#[test]
fn zero_memory_percentage_books_the_whole_card() {
    let pod = pod(
        "zero-percentage",
        vec![container(
            "test",
            &[
                ("nvidia.com/gpu", "1"),
                ("nvidia.com/gpumem-percentage", "0"),
            ],
        )],
    );
    let empty = node(&[Dev::new("dev-0", 0, 10, 11264)], |_| {});
    let out = fit(&empty, &pod).unwrap();
    assert_eq!(out.devices["NVIDIA"][0][0].mem_mib, 11264);
    let mut almost_full = Dev::new("dev-0", 0, 10, 11264);
    almost_full.usedmem = 11260;
    let full = node(&[almost_full], |_| {});
    assert!(reason(fit(&full, &pod)).contains("CardInsufficientMemory"));
}

// ---- TestFitQuota ----

/// HAMi's `fitQuota` table: a `limits.nvidia.com/gpumem: 2048` quota in `default`, the
/// pod's init/app container counts, the devices its earlier containers were given
/// (`allocated`) and this container's picks so far (`tmpDevs`), and the candidate device;
/// usage collapsed (init peak against app sum) before the check.
#[test]
fn fit_quota_table() {
    use hami_core::accounting::collapsed_totals;
    use hami_core::quota::{QuotaBudget, QuotaLimit};
    use hami_core::request::ContainerKind;

    let budget = QuotaBudget {
        namespace: "default".into(),
        memory: Some(QuotaLimit {
            resource: "nvidia.com/gpumem".into(),
            used: 0,
            hard: 2048,
        }),
        cores: None,
    };
    type Devs<'a> = &'a [(&'a str, u64, u64)];
    struct Case<'a> {
        name: &'a str,
        init: usize,
        app: usize,
        allocated: &'a [Devs<'a>],
        tmp: Devs<'a>,
        candidate: (&'a str, u64, u64),
        fits: bool,
    }
    let cases = [
        Case {
            name: "no tmp and no allocated",
            init: 0,
            app: 1,
            allocated: &[],
            tmp: &[],
            candidate: ("gpu-0", 100, 1),
            fits: true,
        },
        Case {
            name: "request exceed quota",
            init: 0,
            app: 1,
            allocated: &[],
            tmp: &[],
            candidate: ("gpu-0", 3000, 1),
            fits: false,
        },
        Case {
            name: "tmpdev",
            init: 0,
            app: 2,
            allocated: &[],
            tmp: &[("gpu-1", 1024, 5)],
            candidate: ("gpu-0", 100, 1),
            fits: true,
        },
        Case {
            name: "tmpdev exceed quota",
            init: 0,
            app: 2,
            allocated: &[],
            tmp: &[("gpu-1", 1024, 5)],
            candidate: ("gpu-0", 2000, 1),
            fits: false,
        },
        Case {
            name: "allocated devs",
            init: 0,
            app: 2,
            allocated: &[&[("gpu-0", 1024, 2)]],
            tmp: &[],
            candidate: ("gpu-1", 100, 1),
            fits: true,
        },
        Case {
            name: "allocated devs exceed quota",
            init: 0,
            app: 2,
            allocated: &[&[("gpu-0", 1024, 2)]],
            tmp: &[],
            candidate: ("gpu-1", 2000, 1),
            fits: false,
        },
        Case {
            name: "exceed quota",
            init: 0,
            app: 3,
            allocated: &[&[("gpu-0", 1024, 2)]],
            tmp: &[("gpu-1", 1024, 5)],
            candidate: ("gpu-1", 100, 1),
            fits: false,
        },
        Case {
            name: "fit",
            init: 0,
            app: 3,
            allocated: &[&[("gpu-0", 100, 2)]],
            tmp: &[("gpu-1", 100, 1)],
            candidate: ("gpu-1", 100, 1),
            fits: true,
        },
        Case {
            name: "fitting second init container maxes against first",
            init: 2,
            app: 1,
            allocated: &[&[("gpu-0", 1500, 2)]],
            tmp: &[],
            candidate: ("gpu-0", 1500, 1),
            fits: true,
        },
        Case {
            name: "sequential init containers counted as peak not sum",
            init: 2,
            app: 1,
            allocated: &[&[("gpu-0", 1024, 2)], &[("gpu-0", 1024, 2)]],
            tmp: &[],
            candidate: ("gpu-0", 500, 1),
            fits: true,
        },
        Case {
            name: "collapsed init peak still enforces quota",
            init: 1,
            app: 1,
            allocated: &[&[("gpu-0", 2100, 2)]],
            tmp: &[],
            candidate: ("gpu-1", 100, 1),
            fits: false,
        },
    ];
    for c in cases {
        let kinds: Vec<ContainerKind> = std::iter::repeat_n(ContainerKind::Init, c.init)
            .chain(std::iter::repeat_n(ContainerKind::App, c.app))
            .collect();
        // The container being fitted follows the allocated ones.
        let current = c.allocated.len();
        let entries = c
            .allocated
            .iter()
            .enumerate()
            .flat_map(|(i, devs)| devs.iter().map(move |d| (i, *d)))
            .chain(c.tmp.iter().map(|d| (current, *d)))
            .chain(std::iter::once((current, c.candidate)))
            .map(|(i, (uuid, mem, cores))| (i, uuid, mem, cores));
        let (mem, cores) = collapsed_totals(entries, &kinds);
        assert_eq!(budget.admit(mem, cores).is_ok(), c.fits, "{}", c.name);
    }
}

// ---- TestComputeScore (pkg/scheduler/policy/gpu_policy_test.go) ----

#[test]
fn compute_score_without_requests() {
    use hami_core::codec::ScoringWeights;
    use hami_core::score::{Usage, device_score};
    // "ContainerDeviceRequests has no data": 10 × (2/10 + 1/4 + 2048/8192) = 7.
    let info = DeviceInfo {
        id: "test-device".into(),
        count: 10,
        mem_mib: 8192,
        cores: 4,
        ..Default::default()
    };
    let usage = Usage {
        used: 2,
        mem_used: 2048,
        cores_used: 1,
    };
    assert_eq!(
        device_score(&info, &usage, None, &ScoringWeights::default()),
        7.0
    );
}

/// HAMi sorts one device list in place for every container of a pod, so a later
/// container's ties keep the order the earlier sort left, not registration order
/// (`docs/protocol.md#gpu-policies`). X (index 0) is emptier than Y and spread takes
/// it; with the first container on it X scores exactly as Y does, and the stable sort
/// keeps [Y, X]: the walk from the end takes X again.
#[test]
fn later_containers_keep_the_list_order_the_earlier_sort_left() {
    let mut y = Dev::new("Y", 1, 10, 1000);
    y.used = 1;
    y.usedmem = 100;
    let ledger = node(&[Dev::new("X", 0, 10, 1000), y], |_| {});
    let limits = [
        ("nvidia.com/gpu", "1"),
        ("nvidia.com/gpumem", "100"),
        ("nvidia.com/gpucores", "0"),
    ];
    let two = pod(
        "two",
        vec![container("a", &limits), container("b", &limits)],
    );
    let out = fit(&ledger, &two).unwrap();
    let per_container: Vec<Vec<String>> = out.devices["NVIDIA"]
        .iter()
        .map(|c| c.iter().map(|d| d.uuid.clone()).collect())
        .collect();
    assert_eq!(per_container, [vec!["X"], vec!["X"]]);
}
