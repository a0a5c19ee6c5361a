//! The kernel's view of AMD GPUs (`docs/vendors.md#amd-device-plugin`), read under a
//! configurable root so tests use a fake tree:
//!
//! - KFD topology `class/kfd/kfd/topology/nodes/<n>/properties` (`<key> <value>` lines):
//!   GPU nodes have `drm_render_minor > 0`; `unique_id` gives the ROCr UUID
//!   (`GPU-%016x`), `domain` and `location_id` the PCI address, whose function bits KFD
//!   sets to the partition number on a partitioned GPU.
//! - amdgpu's PCI devices `module/amdgpu/drivers/pci:amdgpu/<dddd:bb:dd.f>`: `numa_node`
//!   (required), `drm/card<N>`, `drm/renderD<M>`, the optional
//!   `current_compute_partition` / `current_memory_partition`.
//! - a partitioned GPU's further partitions `devices/platform/amdgpu_xcp_<n>`, each with
//!   its own `drm/card<N>` and `drm/renderD<M>`.
//!
//! A device is a PCI device or a partition whose renderD minor is a KFD GPU node. In a
//! compute partition mode other than SPX (DPX, QPX, CPX) the PCI device is partition 0
//! and every other partition is an `amdgpu_xcp_*` device; each is registered on its
//! own (`docs/device-plugin.md#amd-partitions`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why the tree cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} is missing: the amdgpu driver is not loaded")]
    NoDriver(PathBuf),
}

/// One KFD GPU node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfdNode {
    pub node_id: u32,
    pub render_minor: u32,
    /// `GPU-%016x` of `unique_id`, what `ROCR_VISIBLE_DEVICES` takes.
    pub rocr_uuid: String,
    /// `dddd:bb:dd.0` from `domain` and `location_id`: the physical GPU's address.
    pub pci_bdf: String,
    /// The partition number (`location_id`'s function bits; 0 on an unpartitioned GPU).
    pub partition: u32,
}

/// One amdgpu GPU, or one partition of a partitioned GPU, as the kernel shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysGpu {
    /// PCI address of the physical GPU, lower case (`0000:19:00.0`).
    pub pci_bdf: String,
    /// This device's own address: the physical GPU's with the partition number as the
    /// function (`0000:19:00.3`), as AMD SMI names partitions; the facts' key.
    pub address: String,
    /// Partition number on the GPU (0 for an unpartitioned GPU and for partition 0).
    pub partition: u32,
    /// `amdgpu_xcp_<n>` for a partition other than the PCI device's own.
    pub platform: Option<String>,
    pub card: u32,
    pub render: u32,
    pub numa: i32,
    pub rocr_uuid: String,
    pub kfd_node: u32,
    pub compute_partition: Option<String>,
    pub memory_partition: Option<String>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SysfsError + '_ {
    move |source| SysfsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn read_dir_names(dir: &Path) -> Result<Vec<String>, SysfsError> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

/// Parses a KFD `properties` file into its numeric keys (lines that are not
/// `<key> <integer>` are skipped).
pub fn parse_properties(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let key = it.next()?;
            let value = it.next()?.parse().ok()?;
            Some((key.to_string(), value))
        })
        .collect()
}

/// The KFD GPU nodes (CPU nodes skipped); a node with an unreadable or incomplete
/// `properties` is skipped with a warning naming it.
pub fn kfd_nodes(sysfs: &Path) -> Result<Vec<KfdNode>, SysfsError> {
    let dir = sysfs.join("class/kfd/kfd/topology/nodes");
    let mut out = Vec::new();
    for name in read_dir_names(&dir)? {
        let Ok(node_id) = name.parse::<u32>() else {
            continue;
        };
        let path = dir.join(&name).join("properties");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "KFD node skipped");
                continue;
            }
        };
        let p = parse_properties(&text);
        let render = p.get("drm_render_minor").copied().unwrap_or(0);
        if render == 0 {
            continue;
        }
        let (Some(loc), Some(unique)) = (p.get("location_id"), p.get("unique_id")) else {
            tracing::warn!(path = %path.display(), "KFD GPU node without location_id or unique_id skipped");
            continue;
        };
        let domain = p.get("domain").copied().unwrap_or(0);
        out.push(KfdNode {
            node_id,
            render_minor: u32::try_from(render).unwrap_or(u32::MAX),
            rocr_uuid: format!("GPU-{unique:016x}"),
            pci_bdf: format!(
                "{domain:04x}:{:02x}:{:02x}.0",
                (loc >> 8) & 0xff,
                (loc >> 3) & 0x1f
            ),
            partition: (loc & 0x7) as u32,
        });
    }
    Ok(out)
}

fn minor(dir: &Path, prefix: &str) -> Option<u32> {
    read_dir_names(dir)
        .ok()?
        .iter()
        .find_map(|n| n.strip_prefix(prefix)?.parse().ok())
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty())
}

/// The GPUs: amdgpu PCI devices whose renderD is a KFD GPU node.
pub fn gpus(sysfs: &Path) -> Result<Vec<SysGpu>, SysfsError> {
    let drivers = sysfs.join("module/amdgpu/drivers/pci:amdgpu");
    if !drivers.is_dir() {
        return Err(SysfsError::NoDriver(drivers));
    }
    let kfd = kfd_nodes(sysfs)?;
    let mut out = Vec::new();
    for name in read_dir_names(&drivers)? {
        let is_pci = name.len() >= 5
            && name[..4].chars().all(|c| c.is_ascii_hexdigit())
            && name.as_bytes()[4] == b':';
        if !is_pci {
            continue;
        }
        let dev = drivers.join(&name);
        let Some(numa) = read_trimmed(&dev.join("numa_node")).and_then(|s| s.parse().ok()) else {
            tracing::warn!(device = %name, "amdgpu device without a readable numa_node skipped");
            continue;
        };
        let drm = dev.join("drm");
        let (Some(card), Some(render)) = (minor(&drm, "card"), minor(&drm, "renderD")) else {
            tracing::warn!(device = %name, "amdgpu device without drm/card* and drm/renderD* skipped");
            continue;
        };
        let Some(node) = kfd.iter().find(|k| k.render_minor == render) else {
            tracing::warn!(device = %name, render, "amdgpu device unknown to KFD skipped");
            continue;
        };
        let pci_bdf = name.to_lowercase();
        out.push(SysGpu {
            address: partition_address(&pci_bdf, node.partition),
            pci_bdf,
            partition: node.partition,
            platform: None,
            card,
            render,
            numa,
            rocr_uuid: node.rocr_uuid.clone(),
            kfd_node: node.node_id,
            compute_partition: read_trimmed(&dev.join("current_compute_partition")),
            memory_partition: read_trimmed(&dev.join("current_memory_partition")),
        });
    }
    let parts = partitions(sysfs, &kfd, &out);
    out.extend(parts);
    Ok(out)
}

/// `dddd:bb:dd.<partition>` of the GPU at `pci_bdf` (`dddd:bb:dd.f`).
fn partition_address(pci_bdf: &str, partition: u32) -> String {
    let base = pci_bdf.rsplit_once('.').map_or(pci_bdf, |(b, _)| b);
    format!("{base}.{partition}")
}

/// The `<n>` of `amdgpu_xcp_<n>`, for ordering.
fn xcp_number(name: &str) -> Option<u32> {
    name.strip_prefix("amdgpu_xcp_")?.parse().ok()
}

/// The partitions beyond each GPU's own: `devices/platform/amdgpu_xcp_*` whose renderD
/// is a KFD GPU node (the driver keeps an `amdgpu_xcp_*` device for every possible
/// partition; only those of the current mode are KFD nodes). A partition takes its GPU's
/// NUMA node and partition modes; its GPU is the PCI device at its KFD address.
fn partitions(sysfs: &Path, kfd: &[KfdNode], gpus: &[SysGpu]) -> Vec<SysGpu> {
    let platform = sysfs.join("devices/platform");
    let names = match read_dir_names(&platform) {
        Ok(names) => names,
        // No platform bus directory (a fake tree) means no partitions.
        Err(_) if !platform.exists() => return Vec::new(),
        Err(e) => {
            tracing::warn!(error = %e, "partitions not read: only whole GPUs are devices");
            return Vec::new();
        }
    };
    let mut names: Vec<(u32, String)> = names
        .into_iter()
        .filter_map(|n| Some((xcp_number(&n)?, n)))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for (_, name) in names {
        let drm = platform.join(&name).join("drm");
        let (Some(card), Some(render)) = (minor(&drm, "card"), minor(&drm, "renderD")) else {
            tracing::debug!(device = %name, "partition device without drm/card* and drm/renderD* skipped");
            continue;
        };
        let Some(node) = kfd.iter().find(|k| k.render_minor == render) else {
            tracing::debug!(device = %name, render, "partition device unused in this partition mode (unknown to KFD)");
            continue;
        };
        let Some(gpu) = gpus.iter().find(|g| g.pci_bdf == node.pci_bdf) else {
            tracing::warn!(device = %name, render, pci = %node.pci_bdf, "partition of a GPU that is not an amdgpu PCI device skipped");
            continue;
        };
        out.push(SysGpu {
            pci_bdf: gpu.pci_bdf.clone(),
            address: partition_address(&gpu.pci_bdf, node.partition),
            partition: node.partition,
            platform: Some(name),
            card,
            render,
            numa: gpu.numa,
            rocr_uuid: node.rocr_uuid.clone(),
            kfd_node: node.node_id,
            compute_partition: gpu.compute_partition.clone(),
            memory_partition: gpu.memory_partition.clone(),
        });
    }
    out
}
