//! Fake workloads, for clusters on the fake backend (no GPU, no HAMi-core): every running
//! container this node granted GPUs gets a HAMi-core shared region written the way
//! `libvgpu.so` would write it inside the container (`docs/monitor.md`), so the vGPU
//! monitor has something true to report. Per device the limit is what the scheduler
//! granted (`hami.io/vgpu-devices-allocated`), the memory in use moves between 30% and
//! 80% of it and the SM utilisation below the granted compute, over minutes; the task
//! priority comes from the container's `CUDA_TASK_PRIORITY`. A container the priority
//! feedback blocks (`recent_kernel < 0`) launches nothing and shows no utilisation, as
//! HAMi-core's launch gate makes a real one wait.

use std::collections::HashSet;
use std::f64::consts::TAU;
use std::fs::File;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hami_core::annotations::NVIDIA_DEVICES_ALLOCATED;
use hami_core::codec::decode_pod_single_device;
use hami_core::model::ContainerDevice;
use hami_core::shared_region::{
    ImageDevice, ImageMemory, ImageProc, MAGIC, RegionImage, V1, encode_slot,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use tokio_util::sync::CancellationToken;

/// File name of the fake region in each container directory.
pub const CACHE_FILE: &str = "fake-workload.cache";
const MIB: u64 = 1024 * 1024;
/// What HAMi-core's containers see in their environment.
const PRIORITY_ENV: &str = "CUDA_TASK_PRIORITY";

/// Where and how often.
#[derive(Debug, Clone)]
pub struct WorkloadSettings {
    pub node: String,
    /// HAMi-core's host directory (the plugin's `--hook-path`): regions go to
    /// `<hook>/vgpu/containers/<podUID>_<container>/`.
    pub hook_path: PathBuf,
    pub interval: Duration,
}

/// One container with GPUs, as the pod's annotations and spec say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeContainer {
    pub pod_uid: String,
    pub name: String,
    pub devices: Vec<ContainerDevice>,
    /// `CUDA_TASK_PRIORITY`; HAMi-core's default is 1.
    pub priority: i32,
}

/// The containers of a running pod that hold GPUs (init containers first, in the
/// annotation's order). A malformed annotation is logged and yields none.
pub fn containers_of(pod: &Pod) -> Vec<FakeContainer> {
    let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let (Some(uid), Some(spec)) = (pod.metadata.uid.as_deref(), pod.spec.as_ref()) else {
        return Vec::new();
    };
    if !running || pod.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    let Some(value) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NVIDIA_DEVICES_ALLOCATED))
    else {
        return Vec::new();
    };
    let per_container = match decode_pod_single_device(value) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(pod = %uid, annotation = NVIDIA_DEVICES_ALLOCATED, %value, error = %e, "fake workload: allocation unreadable; pod left out");
            return Vec::new();
        }
    };
    let all = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    all.zip(per_container)
        .filter(|(_, devices)| !devices.is_empty())
        .map(|(c, devices)| FakeContainer {
            pod_uid: uid.to_string(),
            name: c.name.clone(),
            devices,
            priority: c
                .env
                .iter()
                .flatten()
                .find(|e| e.name == PRIORITY_ENV)
                .and_then(|e| e.value.as_deref())
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(1),
        })
        .collect()
}

/// A number in 0..1 that moves smoothly with `t` (seconds), out of phase per `key`.
fn wave(key: &impl Hash, t: f64, period: f64) -> f64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    let phase = (h.finish() % 1000) as f64 / 1000.0 * TAU;
    0.5 + 0.5 * (TAU * t / period + phase).sin()
}

/// The process slot of `c` at time `t`: usage within the grant.
pub fn usage_at(c: &FakeContainer, t: f64, blocked: bool) -> ImageProc {
    let devices: Vec<(ImageMemory, u64)> = c
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let key = (&c.pod_uid, &c.name, i);
            let limit = u64::from(d.mem_mib) * MIB;
            let total = (limit as f64 * (0.3 + 0.5 * wave(&key, t, 120.0))) as u64;
            let context = total.min(300 * MIB) / 2;
            let module = total.min(300 * MIB) / 4;
            let memory = ImageMemory::total(total, context, module, total - context - module);
            let cap = if d.cores == 0 { 100 } else { d.cores };
            let util = if blocked {
                0
            } else {
                (f64::from(cap) * (0.3 + 0.6 * wave(&(key, 1), t, 45.0))) as u64
            };
            (memory, util)
        })
        .collect();
    ImageProc::live(1, 4_000_000 + (c.devices.len() as i32), &devices)
}

/// Writes (or updates) the region of `c` under `containers_dir`.
pub fn write_region(
    containers_dir: &Path,
    c: &FakeContainer,
    now: SystemTime,
) -> std::io::Result<()> {
    let dir = containers_dir.join(format!("{}_{}", c.pod_uid, c.name));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(CACHE_FILE);
    let t = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)?;
    let fresh = read_i32(&file, 0)? != MAGIC;
    if fresh {
        // As HAMi-core: the whole region first, the magic last.
        let image = RegionImage {
            devices: c
                .devices
                .iter()
                .map(|d| ImageDevice::new(&d.uuid, u64::from(d.mem_mib) * MIB, u64::from(d.cores)))
                .collect(),
            procs: vec![usage_at(c, t.as_secs_f64(), false)],
            utilization_switch: 1,
            recent_kernel: 2,
            priority: c.priority,
            last_kernel_time: t.as_secs() as i64,
            ..RegionImage::v1(2)
        };
        create_region(&file, &image)?;
        return Ok(());
    }
    let blocked = read_i32(&file, V1.recent_kernel)? < 0;
    let slot_at = V1.slot_offset(0) as u64;
    let seq_at = slot_at + V1.slot.seqlock.unwrap_or_default() as u64;
    let mut seq = [0u8; 8];
    file.read_exact_at(&mut seq, seq_at)?;
    let seq = u64::from_le_bytes(seq);
    let mut proc = usage_at(c, t.as_secs_f64(), blocked);
    // Seqlock: odd while the slot changes, even again after (HAMi-core's protocol).
    proc.seqlock = seq.wrapping_add(1) | 1;
    file.write_all_at(&proc.seqlock.to_le_bytes(), seq_at)?;
    let mut slot = vec![0u8; V1.slot.size];
    encode_slot(&V1, &proc, &mut slot);
    let data_end = V1.slot.seqlock.unwrap_or(V1.slot.size);
    file.write_all_at(&slot[..data_end], slot_at)?;
    file.write_all_at(&proc.seqlock.wrapping_add(1).to_le_bytes(), seq_at)?;
    if !blocked {
        // A kernel launch: HAMi-core marks it for the feedback loop and the metrics.
        file.write_all_at(&2i32.to_le_bytes(), V1.recent_kernel as u64)?;
        if let Some(at) = V1.last_kernel_time {
            file.write_all_at(&(t.as_secs() as i64).to_le_bytes(), at as u64)?;
        }
    }
    Ok(())
}

/// Writes a fresh region into `file` as HAMi-core does: the file sized one byte past
/// the region, only the parts in use written (the rest stays a hole), the magic last so a
/// reader never takes a half-written region for a real one.
pub fn create_region(file: &File, image: &RegionImage) -> std::io::Result<()> {
    file.set_len(image.layout().size as u64 + 1)?;
    let mut bytes = image.encode();
    bytes[..4].fill(0);
    for r in image.written_ranges() {
        file.write_all_at(&bytes[r.clone()], r.start as u64)?;
    }
    file.write_all_at(&image.magic.to_le_bytes(), 0)
}

fn read_i32(file: &File, at: usize) -> std::io::Result<i32> {
    let mut b = [0u8; 4];
    match file.read_exact_at(&mut b, at as u64) {
        Ok(()) => Ok(i32::from_le_bytes(b)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(0),
        Err(e) => Err(e),
    }
}

/// Writes the regions of this node's running GPU containers every `interval` until
/// `stop`. API errors are logged and retried at the next tick.
pub async fn run(
    client: kube::Client,
    settings: WorkloadSettings,
    stop: CancellationToken,
) -> Result<(), std::convert::Infallible> {
    let api: Api<Pod> = Api::all(client);
    let params = ListParams::default().fields(&format!("spec.nodeName={}", settings.node));
    let containers_dir = settings.hook_path.join("vgpu").join("containers");
    let mut failing: HashSet<String> = HashSet::new();
    let mut tick = tokio::time::interval(settings.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = tick.tick() => {}
        }
        let pods = match api.list(&params).await {
            Ok(l) => l.items,
            Err(e) => {
                tracing::warn!(node = %settings.node, error = %e, "fake workload: cannot list the node's pods; retrying");
                continue;
            }
        };
        let now = SystemTime::now();
        for c in pods.iter().flat_map(containers_of) {
            let key = format!("{}_{}", c.pod_uid, c.name);
            match write_region(&containers_dir, &c, now) {
                Ok(()) => {
                    failing.remove(&key);
                }
                Err(e) => {
                    if failing.insert(key.clone()) {
                        tracing::warn!(container = %key, error = %e, "fake workload: cannot write the shared region");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hami_core::shared_region::{RegionReader, Usage};

    fn pod(phase: &str, annotation: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u-1", "annotations": {NVIDIA_DEVICES_ALLOCATED: annotation}},
            "spec": {
                "initContainers": [{"name": "init"}],
                "containers": [
                    {"name": "a", "env": [{"name": "CUDA_TASK_PRIORITY", "value": "0"}]},
                    {"name": "b"},
                ],
            },
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn running_containers_with_gpus_and_their_priority() {
        let p = pod("Running", ";GPU-1,NVIDIA,4000,30:;;");
        let got = containers_of(&p);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].name.as_str(), got[0].priority), ("a", 0));
        assert_eq!(got[0].devices[0].mem_mib, 4000);
        assert!(containers_of(&pod("Pending", ";GPU-1,NVIDIA,4000,30:;;")).is_empty());
        assert!(containers_of(&pod("Running", "garbage")).is_empty());
    }

    #[test]
    fn regions_stay_within_the_grant_and_honour_the_block() {
        let dir = tempfile::tempdir().unwrap();
        let c = FakeContainer {
            pod_uid: "u-1".into(),
            name: "a".into(),
            devices: vec![ContainerDevice {
                idx: 0,
                uuid: "GPU-1".into(),
                dev_type: "NVIDIA".into(),
                mem_mib: 4000,
                cores: 30,
                slots: 0,
            }],
            priority: 0,
        };
        let path = dir.path().join("u-1_a").join(CACHE_FILE);
        let mut reader = RegionReader::new();
        let mut usage = Usage::default();
        for s in [0u64, 17, 60, 95, 150] {
            write_region(
                dir.path(),
                &c,
                UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s),
            )
            .unwrap();
            reader
                .read(std::fs::read(&path).unwrap().as_slice(), &mut usage)
                .unwrap();
            let d = &usage.devices[0];
            assert_eq!((d.limit, d.sm_limit, usage.priority), (4000 * MIB, 30, 0));
            assert!(
                d.used >= d.limit * 3 / 10 && d.used <= d.limit * 8 / 10,
                "{d:?}"
            );
            assert!(d.sm_util <= 30 && d.sm_util > 0);
            assert_eq!(usage.last_kernel_time, 1_700_000_000 + s as i64);
        }
        // Blocked by the feedback: no launch, no utilisation, the block kept.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&(-1i32).to_le_bytes(), V1.recent_kernel as u64)
            .unwrap();
        write_region(
            dir.path(),
            &c,
            UNIX_EPOCH + Duration::from_secs(1_700_000_500),
        )
        .unwrap();
        reader
            .read(std::fs::read(&path).unwrap().as_slice(), &mut usage)
            .unwrap();
        assert_eq!((usage.recent_kernel, usage.devices[0].sm_util), (-1, 0));
    }
}
