//! The monitor end to end: the API server emulator holds the node's pods, container
//! directories hold shared regions written the way HAMi-core writes them, and the real
//! scan, pod watch, feedback loop and metrics server run as in production.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hami_core::shared_region::{ImageDevice, ImageMemory, ImageProc, RegionImage, V1};
use hami_device_plugin::BackendError;
use hami_device_plugin_nvidia::activity::{ActivitySource, GpuActivity};
use hami_device_plugin_nvidia::fake::FakeBackend;
use hami_server::CancellationToken;
use hami_server::supervise::RestartPolicy;
use hami_server::test_support::{http_request, request};
use hami_testkit::fixture::{Cluster, poll_until};
use hami_testkit::resources::PODS;
use hami_testkit::store::{DeleteOptions, Preconditions};
use hami_vgpu_monitor::run::{self, Handles, RunError, Settings};
use hami_vgpu_monitor::scan::ScanSettings;
use serde_json::{Value, json};

const NODE: &str = "gpu-1";
const GPU_A: &str = "GPU-aaaaaaaa-1111-2222-3333-444444444444";
const GPU_B: &str = "GPU-bbbbbbbb-1111-2222-3333-444444444444";
const WAIT: Duration = Duration::from_secs(10);
const GIB: u64 = 1 << 30;

struct Node {
    cluster: Cluster,
    hook: tempfile::TempDir,
    devices: PathBuf,
}

impl Node {
    async fn new() -> Self {
        let cluster = Cluster::start().await.unwrap();
        cluster.add_namespace("team-a", &[]).unwrap();
        let hook = tempfile::tempdir().unwrap();
        std::fs::create_dir(hook.path().join("containers")).unwrap();
        let devices = hook.path().join("devices.yaml");
        std::fs::write(
            &devices,
            format!(
                "devices:\n  - {{uuid: {GPU_A}, model: Tesla T4, memory: 15360, used_memory: 5000, utilization: 61, memory_utilization: 12}}\n  - {{uuid: {GPU_B}, model: Tesla T4, memory: 15360}}\n"
            ),
        )
        .unwrap();
        Node {
            cluster,
            hook,
            devices,
        }
    }

    fn containers(&self) -> PathBuf {
        self.hook.path().join("containers")
    }

    fn settings(&self) -> Settings {
        Settings {
            node: NODE.into(),
            scan: ScanSettings {
                containers_dir: self.containers(),
                resync_interval: Duration::from_secs(60),
                mig_apply_lock: self.hook.path().join("mig-apply.lock"),
            },
            scan_interval: Duration::from_millis(40),
            feedback_interval: Some(Duration::from_millis(40)),
            legacy_metrics: false,
            restart: RestartPolicy::default(),
        }
    }

    /// A pod bound to `node`; its UID.
    fn pod(&self, name: &str, node: &str, containers: &[&str], init: &[&str]) -> String {
        let list = |names: &[&str]| -> Vec<Value> {
            names
                .iter()
                .map(|n| json!({"name": n, "image": "cuda"}))
                .collect()
        };
        let pod = self
            .cluster
            .store()
            .create(
                &PODS,
                Some("team-a"),
                json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": "team-a"},
                    "spec": {"nodeName": node, "containers": list(containers), "initContainers": list(init)},
                }),
            )
            .unwrap();
        pod["metadata"]["uid"].as_str().unwrap().to_string()
    }

    fn delete_pod(&self, name: &str) {
        let opts = DeleteOptions {
            preconditions: Preconditions::default(),
            grace_period_seconds: Some(0),
        };
        self.cluster
            .store()
            .delete_with(&PODS, Some("team-a"), name, &opts)
            .unwrap();
    }

    fn dir(&self, uid: &str, container: &str) -> PathBuf {
        let d = self.containers().join(format!("{uid}_{container}"));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Writes `image` as the container's cache file, one byte past the region as
    /// HAMi-core does.
    fn region(&self, uid: &str, container: &str, image: &RegionImage) -> PathBuf {
        let path = self.dir(uid, container).join("1b2c3d4e.cache");
        let mut bytes = image.encode();
        bytes.push(0);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    async fn start(&self, settings: Settings) -> Monitor {
        self.start_with(settings, Arc::new(FakeBackend::new(&self.devices)))
            .await
    }

    async fn start_with(&self, settings: Settings, activity: Arc<dyn ActivitySource>) -> Monitor {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let (handles, sup) = run::start(
            settings,
            activity,
            self.cluster.client().unwrap(),
            listener,
            stop.clone(),
        )
        .unwrap();
        Monitor {
            addr,
            stop,
            handles,
            task: tokio::spawn(sup.run()),
        }
    }
}

struct Monitor {
    addr: std::net::SocketAddr,
    stop: CancellationToken,
    handles: Handles,
    task: tokio::task::JoinHandle<Result<(), hami_server::supervise::GaveUp>>,
}

impl Monitor {
    async fn get(&self, path: &str) -> (u16, String) {
        let resp = http_request(self.addr, request("GET", path, "").unwrap())
            .await
            .unwrap();
        (resp.status.as_u16(), resp.text())
    }

    async fn metrics(&self) -> String {
        let (code, body) = self.get("/metrics").await;
        assert_eq!(code, 200, "{body}");
        body
    }

    /// Waits for a scan that started after now.
    async fn next_scans(&self, n: u64) {
        let from = self.handles.snapshot.borrow().scans;
        let mut rx = self.handles.snapshot.clone();
        tokio::time::timeout(WAIT, rx.wait_for(|s| s.scans >= from + n))
            .await
            .unwrap()
            .unwrap();
    }

    async fn ready(&self) {
        poll_until("/readyz to answer 200", WAIT, || async {
            (self.get("/readyz").await.0 == 200).then_some(())
        })
        .await
        .unwrap();
    }

    async fn stop(self) {
        self.stop.cancel();
        assert_eq!(self.task.await.unwrap(), Ok(()));
    }
}

/// The value of the series whose line starts with `name{` and contains every label.
fn value(metrics: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn live(devices: &[(ImageMemory, u64)]) -> ImageProc {
    ImageProc::live(7, 4242, devices)
}

fn one_gpu(uuid: &str, limit: u64, used: u64, priority: i32) -> RegionImage {
    RegionImage {
        devices: vec![ImageDevice::new(uuid, limit, 50)],
        procs: vec![live(&[(
            ImageMemory::total(used, used / 4, used / 4, used / 2),
            30,
        )])],
        priority,
        recent_kernel: 0,
        last_kernel_time: now() - 12,
        ..RegionImage::v1(2)
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
async fn exports_hamis_series_per_container_device_and_gpu() {
    let node = Node::new().await;
    let train = node.pod("train", NODE, &["main", "sidecar"], &["warmup"]);
    let two = RegionImage {
        devices: vec![
            ImageDevice::new(GPU_A, 4 * GIB, 30),
            ImageDevice::new(GPU_B, 2 * GIB, 30),
        ],
        procs: vec![
            live(&[
                (ImageMemory::total(GIB, 100, 200, GIB - 300), 20),
                (ImageMemory::total(GIB / 2, 1, 2, 3), 5),
            ]),
            live(&[
                (ImageMemory::total(GIB, 0, 0, GIB), 15),
                (ImageMemory::default(), 0),
            ]),
        ],
        last_kernel_time: now() - 30,
        ..RegionImage::v1(2)
    };
    node.region(&train, "main", &two);
    node.region(&train, "warmup", &one_gpu(GPU_B, GIB, GIB / 8, 1));
    // Not a container of the pod: never exported.
    node.region(&train, "ghost", &one_gpu(GPU_B, GIB, 1, 1));

    let m = node.start(node.settings()).await;
    m.ready().await;
    m.next_scans(1).await;
    let text = m.metrics().await;
    let main = |i: &'static str, uuid: &'static str| {
        vec![
            ("zone", "vGPU"),
            ("namespace", "team-a"),
            ("pod", "train"),
            ("container", "main"),
            ("vdevice_index", i),
            ("device_uuid", uuid),
        ]
    };
    let gib = GIB as f64;
    assert_eq!(
        value(&text, "hami_vgpu_memory_used_bytes", &main("0", GPU_A)),
        Some(2.0 * gib)
    );
    assert_eq!(
        value(&text, "hami_vgpu_memory_limit_bytes", &main("0", GPU_A)),
        Some(4.0 * gib)
    );
    assert_eq!(
        value(
            &text,
            "hami_container_device_memory_bytes",
            &main("0", GPU_A)
        ),
        Some(2.0 * gib)
    );
    assert_eq!(
        value(
            &text,
            "hami_container_device_utilization_ratio",
            &main("0", GPU_A)
        ),
        Some(35.0)
    );
    assert_eq!(
        value(&text, "hami_vgpu_memory_context_bytes", &main("0", GPU_A)),
        Some(100.0)
    );
    assert_eq!(
        value(&text, "hami_vgpu_memory_module_bytes", &main("0", GPU_A)),
        Some(200.0)
    );
    assert_eq!(
        value(&text, "hami_vgpu_memory_buffer_bytes", &main("0", GPU_A)),
        Some(2.0 * gib - 300.0)
    );
    assert_eq!(
        value(&text, "hami_vgpu_memory_used_bytes", &main("1", GPU_B)),
        Some(gib / 2.0)
    );
    assert_eq!(
        value(&text, "hami_vgpu_memory_limit_bytes", &main("1", GPU_B)),
        Some(2.0 * gib)
    );
    let elapsed = value(
        &text,
        "hami_container_last_kernel_elapsed_seconds",
        &main("0", GPU_A),
    )
    .unwrap();
    assert!((30.0..40.0).contains(&elapsed), "{elapsed}");
    // Init containers count; a directory of a container the pod does not have does not.
    assert_eq!(
        value(
            &text,
            "hami_vgpu_memory_used_bytes",
            &[("container", "warmup")]
        ),
        Some(gib / 8.0)
    );
    assert!(!text.contains("container=\"ghost\""), "{text}");
    assert!(
        !text.contains("container=\"sidecar\""),
        "no region yet: {text}"
    );
    // Host series from the backend (the fake device file here).
    let host = [
        ("zone", "vGPU"),
        ("node", NODE),
        ("device_index", "0"),
        ("device_uuid", GPU_A),
        ("device_type", "NVIDIA-Tesla T4"),
    ];
    assert_eq!(
        value(&text, "hami_host_gpu_memory_used_bytes", &host),
        Some(5000.0 * 1048576.0)
    );
    assert_eq!(
        value(&text, "hami_host_gpu_utilization_ratio", &host),
        Some(61.0)
    );
    assert_eq!(
        value(
            &text,
            "hami_host_gpu_memory_controller_utilization_ratio",
            &[("device_uuid", GPU_A), ("device_type", "NVIDIA-Tesla T4")]
        ),
        Some(12.0)
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("hami_build_info{") && !l.contains("zone=")),
        "{text}"
    );
    assert_eq!(value(&text, "hami_vgpu_monitor_containers", &[]), Some(2.0));
    assert!(
        !text.contains("vGPU_device_memory_usage_in_bytes"),
        "legacy names are opt-in"
    );
    m.stop().await;
}

#[tokio::test]
async fn legacy_metrics_add_hamis_old_names() {
    let node = Node::new().await;
    let uid = node.pod("p", NODE, &["main"], &[]);
    let img = RegionImage {
        procs: vec![live(&[(ImageMemory::total(1000, 100, 200, 300), 40)])],
        ..one_gpu(GPU_A, 8 * GIB, 0, 0)
    };
    node.region(&uid, "main", &img);
    let m = node
        .start(Settings {
            legacy_metrics: true,
            ..node.settings()
        })
        .await;
    m.ready().await;
    m.next_scans(1).await;
    let text = m.metrics().await;
    let old = [
        ("zone", "vGPU"),
        ("podnamespace", "team-a"),
        ("podname", "p"),
        ("ctrname", "main"),
        ("vdeviceid", "0"),
        ("deviceuuid", GPU_A),
    ];
    assert_eq!(
        value(&text, "vGPU_device_memory_usage_in_bytes", &old),
        Some(1000.0)
    );
    assert_eq!(
        value(&text, "vGPU_device_memory_limit_in_bytes", &old),
        Some(8.0 * GIB as f64)
    );
    assert_eq!(
        value(&text, "Device_utilization_desc_of_container", &old),
        Some(40.0)
    );
    assert_eq!(
        value(
            &text,
            "Device_memory_desc_of_container",
            &[
                ("context", "100"),
                ("module", "200"),
                ("data", "300"),
                ("offset", "400")
            ]
        ),
        Some(1000.0)
    );
    assert!(value(&text, "Device_last_kernel_of_container", &old).is_some());
    assert_eq!(
        value(
            &text,
            "HostGPUMemoryUsage",
            &[
                ("nodeid", NODE),
                ("deviceidx", "0"),
                ("deviceuuid", GPU_A),
                ("devicetype", "NVIDIA-Tesla T4")
            ]
        ),
        Some(5000.0 * 1048576.0)
    );
    assert_eq!(
        value(&text, "HostCoreUtilization", &[("deviceuuid", GPU_A)]),
        Some(61.0)
    );
    assert!(
        value(&text, "hami_vgpu_memory_used_bytes", &[("pod", "p")]).is_some(),
        "new names stay"
    );
    m.stop().await;
}

fn read_i32(path: &Path, offset: usize) -> i32 {
    let f = std::fs::File::open(path).unwrap();
    let mut b = [0u8; 4];
    f.read_exact_at(&mut b, offset as u64).unwrap();
    i32::from_le_bytes(b)
}

fn write_i32(path: &Path, offset: usize, v: i32) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&v.to_le_bytes(), offset as u64).unwrap();
}

#[tokio::test]
async fn priority_feedback_holds_back_the_low_priority_container_while_the_high_one_runs() {
    let node = Node::new().await;
    let hi_uid = node.pod("inference", NODE, &["main"], &[]);
    let lo_uid = node.pod("batch", NODE, &["main"], &[]);
    let other_uid = node.pod("elsewhere", NODE, &["main"], &[]);
    let hi = node.region(&hi_uid, "main", &one_gpu(GPU_A, GIB, 100, 0));
    let lo = node.region(&lo_uid, "main", &one_gpu(GPU_A, GIB, 100, 1));
    // Low priority too, but alone on another GPU: never held back.
    let other = node.region(&other_uid, "main", &one_gpu(GPU_B, GIB, 100, 1));
    let m = node.start(node.settings()).await;
    m.ready().await;

    // Both launch kernels (HAMi-core sets recent_kernel = 2 at each launch, and waits
    // while it is negative).
    let launches = CancellationToken::new();
    let keep_launching = |path: PathBuf, stop: CancellationToken| async move {
        while !stop.is_cancelled() {
            if read_i32(&path, V1.recent_kernel) >= 0 {
                write_i32(&path, V1.recent_kernel, 2);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let hi_task = tokio::spawn(keep_launching(hi.clone(), launches.clone()));
    let lo_stop = CancellationToken::new();
    let lo_task = tokio::spawn(keep_launching(lo.clone(), lo_stop.clone()));
    let other_task = tokio::spawn(keep_launching(other.clone(), lo_stop.clone()));

    poll_until("the low-priority container to be blocked", WAIT, || async {
        (read_i32(&lo, V1.recent_kernel) == -1).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(read_i32(&lo, V1.utilization_switch), 1);
    // It stays blocked over further rounds while the high-priority one keeps launching.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(read_i32(&lo, V1.recent_kernel), -1);
        assert!(
            read_i32(&hi, V1.recent_kernel) >= 0,
            "the high-priority task is never blocked"
        );
        assert!(
            read_i32(&other, V1.recent_kernel) >= 0,
            "another GPU is not affected"
        );
    }
    assert_eq!(read_i32(&hi, V1.utilization_switch), 0);
    m.next_scans(1).await;
    let text = m.metrics().await;
    assert_eq!(
        value(
            &text,
            "hami_container_feedback_blocked",
            &[("pod", "batch")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            "hami_container_feedback_blocked",
            &[("pod", "inference")]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(&text, "hami_container_task_priority", &[("pod", "batch")]),
        Some(1.0)
    );

    // The high-priority task goes idle: within two rounds the block is lifted.
    launches.cancel();
    hi_task.await.unwrap();
    poll_until("the block to be lifted", WAIT, || async {
        (read_i32(&lo, V1.recent_kernel) >= 0).then_some(())
    })
    .await
    .unwrap();
    lo_stop.cancel();
    lo_task.await.unwrap();
    other_task.await.unwrap();
    poll_until("the utilization switch to turn off", WAIT, || async {
        (read_i32(&lo, V1.utilization_switch) == 0).then_some(())
    })
    .await
    .unwrap();
    m.stop().await;
}

fn age(path: &Path, by: Duration) {
    let f = std::fs::File::open(path).unwrap();
    f.set_modified(SystemTime::now() - by).unwrap();
}

#[tokio::test]
async fn directories_of_pods_gone_from_the_node_are_removed_once_older_than_the_resync_interval() {
    let node = Node::new().await;
    let here = node.pod("here", NODE, &["main"], &[]);
    let leaving = node.pod("leaving", NODE, &["main"], &[]);
    let kept = node.region(&here, "main", &one_gpu(GPU_A, GIB, 1, 0));
    node.region(&leaving, "main", &one_gpu(GPU_A, GIB, 1, 0));
    // A pod of another node, old and recent; a directory that is not a container's.
    let other = node.pod("other", "gpu-2", &["main"], &[]);
    let old_other = node.dir(&other, "main");
    let stray = node.containers().join("stray");
    std::fs::create_dir_all(&stray).unwrap();
    let recent = node.dir("0f0f0f0f-dead-beef-0000-000000000000", "main");
    for d in [&old_other, &stray] {
        age(d, Duration::from_secs(3600));
    }
    let m = node.start(node.settings()).await;
    m.ready().await;
    poll_until(
        "the old directory of a pod of another node to go",
        WAIT,
        || async { (!old_other.exists()).then_some(()) },
    )
    .await
    .unwrap();
    m.next_scans(2).await;
    assert!(recent.exists(), "younger than the resync interval: kept");
    assert!(
        stray.exists(),
        "not a <podUID>_<container> directory: never removed"
    );
    assert!(kept.exists());

    let leaving_dir = node.containers().join(format!("{leaving}_main"));
    age(&leaving_dir, Duration::from_secs(3600));
    m.next_scans(2).await;
    assert!(leaving_dir.exists(), "its pod is still on the node");
    node.delete_pod("leaving");
    poll_until("the deleted pod's directory to go", WAIT, || async {
        (!leaving_dir.exists()).then_some(())
    })
    .await
    .unwrap();
    assert!(kept.exists());
    m.stop().await;
}

#[tokio::test]
async fn broken_files_are_skipped_and_the_others_still_reported() {
    let node = Node::new().await;
    let good = node.pod("good", NODE, &["main"], &[]);
    let bad = node.pod(
        "bad",
        NODE,
        &["short", "foreign", "unborn", "link", "busy", "huge"],
        &[],
    );
    node.region(&good, "main", &one_gpu(GPU_A, GIB, 77, 0));
    std::fs::write(
        node.dir(&bad, "short").join("a.cache"),
        b"\x4e\xf9\x2f\x01 truncated",
    )
    .unwrap();
    let mut foreign = vec![0u8; V1.size + 1];
    foreign[..4].copy_from_slice(b"ELF\x7f");
    std::fs::write(node.dir(&bad, "foreign").join("a.cache"), &foreign).unwrap();
    let unborn = node.region(
        &bad,
        "unborn",
        &RegionImage {
            magic: 0,
            ..one_gpu(GPU_A, GIB, 5, 0)
        },
    );
    let real = node
        .containers()
        .join(format!("{good}_main"))
        .join("1b2c3d4e.cache");
    std::os::unix::fs::symlink(&real, node.dir(&bad, "link").join("a.cache")).unwrap();
    let mut busy = one_gpu(GPU_A, GIB, 5, 0);
    busy.procs[0].seqlock = 3;
    node.region(&bad, "busy", &busy);
    let mut huge = one_gpu(GPU_A, GIB, 5, 0);
    huge.proc_num = Some(70_000);
    node.region(&bad, "huge", &huge);

    let m = node.start(node.settings()).await;
    m.ready().await;
    m.next_scans(3).await;
    let text = m.metrics().await;
    assert_eq!(
        value(&text, "hami_vgpu_memory_used_bytes", &[("pod", "good")]),
        Some(77.0)
    );
    assert!(!text.contains("pod=\"bad\",container"), "{text}");
    assert_eq!(
        value(&text, "hami_vgpu_monitor_skipped_containers", &[]),
        Some(6.0)
    );

    // The half-written file is finished by its writer: read at the next scan.
    node.region(&bad, "unborn", &one_gpu(GPU_A, GIB, 5, 0));
    assert!(unborn.exists());
    m.next_scans(2).await;
    let text = m.metrics().await;
    assert_eq!(
        value(
            &text,
            "hami_vgpu_memory_used_bytes",
            &[("pod", "bad"), ("container", "unborn")]
        ),
        Some(5.0)
    );
    assert_eq!(
        read_i32(&real, V1.recent_kernel),
        0,
        "nothing written through the symlink"
    );
    m.stop().await;
}

#[tokio::test]
async fn the_mig_apply_lock_pauses_scans_and_feedback() {
    let node = Node::new().await;
    let uid = node.pod("p", NODE, &["main"], &[]);
    let path = node.region(&uid, "main", &one_gpu(GPU_A, GIB, 10, 0));
    let settings = node.settings();
    let lock = settings.scan.mig_apply_lock.clone();
    let m = node.start(settings).await;
    m.ready().await;
    std::fs::write(&lock, b"").unwrap();
    poll_until("the pause to show", WAIT, || async {
        (value(&m.metrics().await, "hami_vgpu_monitor_paused", &[]) == Some(1.0)).then_some(())
    })
    .await
    .unwrap();
    write_i32(&path, V1.recent_kernel, 2);
    node.region(
        &uid,
        "main",
        &RegionImage {
            recent_kernel: 2,
            ..one_gpu(GPU_A, GIB, 20, 0)
        },
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        read_i32(&path, V1.recent_kernel),
        2,
        "no feedback while paused"
    );
    let text = m.metrics().await;
    assert_eq!(
        value(&text, "hami_vgpu_memory_used_bytes", &[("pod", "p")]),
        Some(10.0),
        "last scan kept"
    );
    std::fs::remove_file(&lock).unwrap();
    poll_until("scans to resume", WAIT, || async {
        (value(
            &m.metrics().await,
            "hami_vgpu_memory_used_bytes",
            &[("pod", "p")],
        ) == Some(20.0))
        .then_some(())
    })
    .await
    .unwrap();
    poll_until("feedback to resume", WAIT, || async {
        (read_i32(&path, V1.recent_kernel) < 2).then_some(())
    })
    .await
    .unwrap();
    m.stop().await;
}

/// A GPU source that panics (a misbehaving driver library): the scan loop dies each time.
struct Exploding;

impl ActivitySource for Exploding {
    fn activity(&self) -> Result<Vec<GpuActivity>, BackendError> {
        panic!("NVML returned garbage");
    }
}

#[tokio::test]
async fn a_task_that_keeps_failing_shows_in_readyz_then_stops_the_monitor() {
    let node = Node::new().await;
    node.pod("p", NODE, &["main"], &[]);
    let settings = Settings {
        restart: RestartPolicy {
            initial_delay: Duration::from_millis(300),
            max_delay: Duration::from_millis(300),
            max_failures: 3,
            window: Duration::from_secs(60),
        },
        ..node.settings()
    };
    let m = node.start_with(settings, Arc::new(Exploding)).await;
    let reason = poll_until("/readyz to name the failing task", WAIT, || async {
        let (code, body) = m.get("/readyz").await;
        (code == 503
            && body
                .contains("scan loop: failed: scan panicked: NVML returned garbage; restarting in"))
        .then_some(body)
    })
    .await
    .unwrap();
    assert!(reason.contains("not ready"), "{reason}");
    let ended = tokio::time::timeout(WAIT, m.task).await.unwrap().unwrap();
    let err = ended.unwrap_err();
    assert_eq!((err.task.as_str(), err.failures), ("scan loop", 3));
    assert!(m.stop.is_cancelled(), "giving up stops the other tasks");
    assert!(
        RunError::from(err)
            .to_string()
            .contains("task scan loop failed 3 times")
    );
}
