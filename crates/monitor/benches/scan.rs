//! One scan of 1,000 containers with 4 GPUs each (one CUDA process per container, v1.2
//! regions with the seqlock), and one scrape of what it found. Targets: scan <= 10 ms,
//! scrape <= 20 ms (`docs/monitor.md`). The regions are sparse files, as HAMi-core's are.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use hami_core::shared_region::{ImageDevice, ImageMemory, ImageProc, RegionImage};
use hami_device_plugin_nvidia::workload::create_region;
use hami_vgpu_monitor::metrics;
use hami_vgpu_monitor::pods::{PodIndex, PodInfo, SharedPods};
use hami_vgpu_monitor::scan::{ScanSettings, Scanner};
use hami_vgpu_monitor::snapshot::{self, Snapshot};
use prometheus_client::registry::Registry;

const CONTAINERS: usize = 1_000;
const DEVICES: usize = 4;
const GIB: u64 = 1 << 30;

fn uuid(d: usize) -> String {
    format!("GPU-{d:08x}-aaaa-bbbb-cccc-dddddddddddd")
}

fn region(i: usize) -> RegionImage {
    let used: Vec<(ImageMemory, u64)> = (0..DEVICES)
        .map(|d| {
            (
                ImageMemory::total((i + d) as u64 * 1_000_000, 300 << 20, 100 << 20, 1 << 30),
                25,
            )
        })
        .collect();
    RegionImage {
        devices: (0..DEVICES)
            .map(|d| ImageDevice::new(&uuid(d), 8 * GIB, 25))
            .collect(),
        procs: vec![ImageProc {
            seqlock: 42,
            ..ImageProc::live(1, 1000 + i as i32, &used)
        }],
        priority: (i % 2) as i32,
        recent_kernel: 2,
        last_kernel_time: 1_800_000_000,
        ..RegionImage::v1(2)
    }
}

/// `CONTAINERS` container directories with sparse regions, and their pods.
fn node(dir: &std::path::Path) -> PodIndex {
    let mut pods = HashMap::new();
    for i in 0..CONTAINERS {
        let uid = format!("{i:08x}-0000-4000-8000-000000000000");
        let d = dir.join(format!("{uid}_main"));
        std::fs::create_dir_all(&d).unwrap();
        let f = std::fs::File::create(d.join("a.cache")).unwrap();
        create_region(&f, &region(i)).unwrap();
        pods.insert(
            uid,
            Arc::new(PodInfo {
                namespace: "bench".into(),
                name: format!("pod-{i}"),
                containers: vec!["main".into()],
                mig: Vec::new(),
            }),
        );
    }
    let mut index = PodIndex::default();
    index.replace(pods);
    index
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let index = node(tmp.path());
    let mut scanner = Scanner::new(ScanSettings {
        containers_dir: tmp.path().to_path_buf(),
        resync_interval: Duration::from_secs(300),
        mig_apply_lock: tmp.path().join("no-such.lock"),
    });
    let mut out = Vec::new();
    // The first pass opens the files; steady state is what repeats every 5 s.
    let stats = scanner.scan(&index, &mut out);
    assert_eq!(stats.read, CONTAINERS, "{stats:?}");
    c.bench_function("scan 1000 containers x 4 GPUs", |b| {
        b.iter(|| scanner.scan(&index, &mut out))
    });

    let (tx, rx) = snapshot::channel();
    tx.send_replace(Arc::new(Snapshot {
        containers: out.clone(),
        scans: 1,
        ..Snapshot::default()
    }));
    let mut registry = Registry::default();
    metrics::register(
        &mut registry,
        rx,
        SharedPods::default(),
        "bench-node".into(),
        false,
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("hami_vgpu_memory_used_bytes{"))
            .count(),
        CONTAINERS * DEVICES
    );
    c.bench_function("scrape 1000 containers x 4 GPUs", |b| {
        b.iter(|| {
            text.clear();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            text.len()
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
