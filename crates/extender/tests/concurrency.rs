//! Hundreds of pods filtered and bound at once onto a small cluster, with API errors
//! injected and pods deleted between Filter and Bind: no device is ever over-committed,
//! and once things settle no lock or reservation is left behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Cluster, Knobs, chosen, gpu_pod, gpus};
use hami_core::codec::decode_pod_single_device;
use hami_testkit::Fault;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;

const PODS: usize = 240;
const MEM: u32 = 40_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_filters_and_binds_never_overcommit() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if std::env::var("HAMI_TEST_LOG").is_ok() {
        let _ = hami_server::trace::init_tracing(
            hami_server::trace::LogFormat::Text,
            Some("hami_scheduler=trace,hami_k8s=debug,warn"),
        );
    }
    let knobs = Knobs {
        reservation_timeout: Duration::from_secs(2),
        node_lock_wait: Duration::from_secs(3),
        ..Knobs::default()
    };
    let (nodes, c) = cluster(8, 4, knobs).await;

    let shapes = [
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"}),
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}),
        json!({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "25"}),
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "40"}),
        json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "500", "nvidia.com/gpucores": "100"}),
    ];
    for i in 0..PODS {
        c.create(&gpu_pod(
            &format!("p{i:03}"),
            &[shapes[i % shapes.len()].clone()],
            json!({}),
        ))
        .await;
    }
    // Every 10th write and binding fails; the kube client does not retry them.
    c.server
        .faults()
        .set_error_rate("patch", 0.1, Fault::InternalError);
    c.server
        .faults()
        .set_error_rate("create", 0.1, Fault::InternalError);

    let tasks: Vec<_> = (0..PODS)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                schedule_like_kube_scheduler(&c, &format!("p{i:03}"), i % 11 == 5).await
            })
        })
        .collect();
    let mut outcomes: BTreeMap<&'static str, usize> = BTreeMap::new();
    for t in tasks {
        *outcomes.entry(t.await.unwrap()).or_default() += 1;
    }
    c.server.faults().clear();
    assert!(
        outcomes.get("bound").copied().unwrap_or(0) > 100,
        "{outcomes:?}"
    );
    assert!(
        outcomes.get("unschedulable").copied().unwrap_or(0) > 0,
        "{outcomes:?}"
    );
    assert!(
        outcomes.get("deleted").copied().unwrap_or(0) > 0,
        "{outcomes:?}"
    );

    // Let unbound reservations expire, then compare the extender's usage with what the
    // bound pods in the API server say.
    let expected = bound_usage(&c).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = c.allocated_mem().await;
        let got: BTreeMap<String, u64> = got.into_iter().filter(|(_, v)| *v > 0).collect();
        if got == expected.mem {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "usage never settled:\n got {got:?}\nwant {:?}",
            expected.mem
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let over: Vec<&String> = expected
        .mem
        .iter()
        .filter(|(_, m)| **m > u64::from(MEM))
        .map(|(u, _)| u)
        .chain(
            expected
                .cores
                .iter()
                .filter(|(_, c)| **c > 100)
                .map(|(u, _)| u),
        )
        .collect();
    for uuid in &over {
        for p in c.pods().list(&ListParams::default()).await.unwrap().items {
            let a = p.metadata.annotations.clone().unwrap_or_default();
            if a.get("hami.io/vgpu-devices-allocated")
                .is_some_and(|d| d.contains(uuid.as_str()))
            {
                println!(
                    "OVER {uuid}: {:?} node={:?} {:?}",
                    p.metadata.name,
                    p.spec.as_ref().and_then(|s| s.node_name.clone()),
                    a
                );
            }
        }
    }
    for (uuid, mem) in &expected.mem {
        assert!(*mem <= u64::from(MEM), "{uuid} over-committed: {mem} MiB");
    }
    for (uuid, cores) in &expected.cores {
        assert!(*cores <= 100, "{uuid} over-committed: {cores}% cores");
    }
    for (uuid, (slots, exclusive)) in &expected.slots {
        assert!(*slots <= 10, "{uuid}: {slots} slots");
        assert!(
            !exclusive || *slots == 1,
            "{uuid}: exclusive card shared by {slots}"
        );
    }
    for n in &nodes {
        assert_eq!(c.node_lock(n).await, None, "lock left on {n}");
    }
    println!("outcomes: {outcomes:?}");
}

/// `nodes` nodes `n0`, `n1`, … with `gpus_each` GPUs of [`MEM`] MiB; their names and the cluster.
async fn cluster(nodes: usize, gpus_each: u32, knobs: Knobs) -> (Vec<String>, Arc<Cluster>) {
    let nodes: Vec<(String, Vec<_>)> = (0..nodes)
        .map(|i| {
            let n = format!("n{i}");
            let g = gpus(&n, gpus_each, MEM);
            (n, g)
        })
        .collect();
    let node_refs: Vec<(&str, Vec<_>)> =
        nodes.iter().map(|(n, g)| (n.as_str(), g.clone())).collect();
    let c = Arc::new(Cluster::start(&node_refs, knobs).await);
    (nodes.into_iter().map(|(n, _)| n).collect(), c)
}

/// Filter, then (sometimes delete the pod, as a user would) bind; retry on errors like
/// kube-scheduler's backoff; emulate the device plugin after a successful bind.
async fn schedule_like_kube_scheduler(
    c: &Cluster,
    name: &str,
    delete_between: bool,
) -> &'static str {
    let mut unschedulable = 0;
    for _ in 0..30 {
        let f = c.filter(name).await;
        if !f.error.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let Some(node) = chosen(&f) else {
            unschedulable += 1;
            if unschedulable == 3 {
                return "unschedulable";
            }
            // kube-scheduler's backoff: capacity may free up (failed binds, deletions).
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if delete_between {
            let uid = c.pods().get(name).await.unwrap().metadata.uid.unwrap();
            c.pods()
                .delete(name, &DeleteParams::default().grace_period(0))
                .await
                .unwrap();
            let b: hami_scheduler::wire::ExtenderBindingResult = c
                .post(
                    "/bind",
                    json!({"PodName": name, "PodNamespace": "default", "PodUID": uid, "Node": node}),
                )
                .await;
            assert_ne!(b.error, "", "bind of a deleted pod succeeded");
            return "deleted";
        }
        let b = c.bind(name, &node).await;
        if b.error.is_empty() {
            let pod = c.pods().get(name).await.unwrap();
            // The device plugin's Allocate, with retries (the API still fails at times).
            for _ in 0..50 {
                let phase = hami_k8s::patch::patch_pod(
                    &c.client,
                    hami_k8s::patch::PodRef::of(&pod),
                    &hami_k8s::patch::MetadataPatch::new()
                        .annotate("hami.io/bind-phase", "success"),
                )
                .await;
                if phase.is_ok()
                    && hami_k8s::lock::release(&c.client, &node, "default", name)
                        .await
                        .is_ok()
                {
                    return "bound";
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("could not finish allocation of {name}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    "gave_up"
}

struct Usage {
    mem: BTreeMap<String, u64>,
    cores: BTreeMap<String, u64>,
    slots: BTreeMap<String, (u32, bool)>,
}

/// Per device: what bound pods hold according to their annotations.
async fn bound_usage(c: &Cluster) -> Usage {
    let mut u = Usage {
        mem: BTreeMap::new(),
        cores: BTreeMap::new(),
        slots: BTreeMap::new(),
    };
    for p in c.pods().list(&ListParams::default()).await.unwrap().items {
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let a = p.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            a.get("hami.io/vgpu-node"),
            Some(&node),
            "bound pod without matching assignment"
        );
        let devices = decode_pod_single_device(&a["hami.io/vgpu-devices-allocated"]).unwrap();
        for d in devices.iter().flatten() {
            *u.mem.entry(d.uuid.clone()).or_default() += u64::from(d.mem_mib);
            *u.cores.entry(d.uuid.clone()).or_default() += u64::from(d.cores);
            let s = u.slots.entry(d.uuid.clone()).or_default();
            s.0 += 1;
            s.1 |= d.cores == 100;
        }
    }
    u
}

/// `pod → device → MiB` of the per-pod series, and `device → MiB` of the per-GPU one.
type ScrapedMem = (BTreeMap<(String, String), u64>, BTreeMap<String, u64>);

fn label<'a>(line: &'a str, key: &str) -> &'a str {
    line.split(&format!("{key}=\""))
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

fn mib(line: &str) -> u64 {
    line.rsplit(' ').next().unwrap().parse::<u64>().unwrap() / (1024 * 1024)
}

fn scraped_mem(page: &str) -> ScrapedMem {
    let (mut pods, mut devices) = (BTreeMap::new(), BTreeMap::new());
    for line in page.lines() {
        if line.starts_with("hami_vgpu_memory_allocated_bytes{") {
            let key = (
                label(line, "pod").to_string(),
                label(line, "device_uuid").to_string(),
            );
            assert!(pods.insert(key, mib(line)).is_none(), "twice: {line}");
        } else if line.starts_with("hami_gpu_memory_allocated_bytes{") {
            devices.insert(label(line, "device_uuid").to_string(), mib(line));
        }
    }
    (pods, devices)
}

/// A scrape reads the nodes and pods as one snapshot, also while /filter reserves
/// devices: every page's per-GPU memory is the sum of its per-pod rows. Pods placed
/// after a scrape are in the next one, deleted ones leave it
/// (`docs/extender.md#metrics`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scrapes_during_filters_are_consistent_snapshots() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (_, c) = cluster(4, 2, Knobs::default()).await;
    let shape = json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"});
    const N: usize = 40;
    for i in 0..N {
        c.create(&gpu_pod(
            &format!("s{i:02}"),
            std::slice::from_ref(&shape),
            json!({}),
        ))
        .await;
    }
    let before = scraped_mem(&c.metrics().await);
    assert!(before.0.is_empty(), "{before:?}");

    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scraper = {
        let (c, done) = (c.clone(), done.clone());
        tokio::spawn(async move {
            let mut pages = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                let (pods, devices) = scraped_mem(&c.metrics().await);
                let mut summed: BTreeMap<String, u64> = BTreeMap::new();
                for ((_, uuid), mem) in &pods {
                    *summed.entry(uuid.clone()).or_default() += mem;
                }
                let used: BTreeMap<String, u64> =
                    devices.into_iter().filter(|(_, m)| *m > 0).collect();
                assert_eq!(used, summed, "page {pages}: devices and pods disagree");
                pages += 1;
            }
            pages
        })
    };
    for i in 0..N {
        let f = c.filter(&format!("s{i:02}")).await;
        assert!(chosen(&f).is_some(), "{f:?}");
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    assert!(
        scraper.await.unwrap() > 0,
        "no scrape ran during the filters"
    );

    let (pods, _) = scraped_mem(&c.metrics().await);
    let placed: Vec<String> = (0..N).map(|i| format!("s{i:02}")).collect();
    let seen: Vec<String> = pods.keys().map(|(p, _)| p.clone()).collect();
    assert_eq!(seen, placed, "every placed pod, once");
    assert!(pods.values().all(|m| *m == 1000), "{pods:?}");

    // Deleted pods leave the page (through the pod watch); the others stay.
    for i in 0..N / 2 {
        c.pods()
            .delete(
                &format!("s{i:02}"),
                &DeleteParams::default().grace_period(0),
            )
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (pods, _) = scraped_mem(&c.metrics().await);
        let seen: Vec<String> = pods.keys().map(|(p, _)| p.clone()).collect();
        if seen == placed[N / 2..] {
            break;
        }
        assert!(Instant::now() < deadline, "deleted pods stayed: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A pod placed after a scrape is in the next one.
    c.create(&gpu_pod("late", std::slice::from_ref(&shape), json!({})))
        .await;
    assert!(chosen(&c.filter("late").await).is_some());
    let (pods, _) = scraped_mem(&c.metrics().await);
    assert_eq!(
        pods.keys().filter(|(p, _)| p == "late").count(),
        1,
        "{pods:?}"
    );
    assert_eq!(pods.len(), N / 2 + 1, "{pods:?}");
}
