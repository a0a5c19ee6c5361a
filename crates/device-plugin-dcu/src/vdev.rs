//! Virtual DCUs (`docs/device-plugin.md#hygon-dcu`): a container that asks for part of
//! one DCU gets a vdev — some of the card's compute units (two 64-bit CU masks), a vdev
//! id (node-wide, 200 of them) and a pipe id (per card, 20) — described by two files the
//! DCU runtime and dcu-exporter read:
//!
//! - `<vgpu>/dcu/<podUID>_<container>_<devidx>_<pipe>_<vdev>_<mask1>_<mask2>/vdev0.conf`
//!   (`device_id: 0`: the container sees one card), mounted at `/etc/vdev/docker/`;
//! - `<vdev dir>/vdev<vdev>.conf` (`device_id: <devidx>`), for dcu-exporter.
//!
//! The directory names are the node's record: every Allocate call rebuilds the CUs, vdev
//! and pipe ids in use from them, and removes the directories (and exporter files) of
//! pods that no longer run here. Nothing is kept in memory, so a restarted plugin
//! carries on where it stopped.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// Directory under the vGPU host directory holding one directory per vdev.
pub const DCU_DIR: &str = "dcu";
/// vdev ids per node.
pub const MAX_VDEVS: u32 = 200;
/// Pipe ids per DCU.
pub const MAX_PIPES: u32 = 20;
/// The file the container reads, in its vdev directory.
pub const CONTAINER_CONF: &str = "vdev0.conf";

/// Why a vdev cannot be given.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VdevError {
    #[error("DCU {dev}: {free} compute units free, the container needs {want}")]
    NotEnoughCus { dev: u32, free: u32, want: u32 },
    #[error("all {MAX_VDEVS} vdev ids of the node are in use")]
    NoVdevId,
    #[error("all {MAX_PIPES} pipe ids of DCU {0} are in use")]
    NoPipeId(u32),
    #[error("vdev directories {0} and {1} claim the same compute units, vdev id or pipe id")]
    Overlap(String, String),
}

/// What a vdev directory's name records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VdevName {
    pub pod_uid: String,
    pub container: String,
    /// SMI index of the DCU.
    pub dev_index: u32,
    pub pipe: u32,
    pub vdev: u32,
    /// CUs 0–63 and 64–127.
    pub masks: [u64; 2],
}

impl VdevName {
    /// `<podUID>_<container>_<devidx>_<pipe>_<vdev>_<mask1>_<mask2>`, masks as 16 hex
    /// digits.
    pub fn dir_name(&self) -> String {
        format!(
            "{}_{}_{}_{}_{}_{:016x}_{:016x}",
            self.pod_uid,
            self.container,
            self.dev_index,
            self.pipe,
            self.vdev,
            self.masks[0],
            self.masks[1]
        )
    }

    /// The name's fields; `None` for a name this plugin did not write.
    pub fn parse(name: &str) -> Option<Self> {
        let parts: Vec<&str> = name.split('_').collect();
        let [uid, container, dev, pipe, vdev, m1, m2] = parts.as_slice() else {
            return None;
        };
        if uid.is_empty() || container.is_empty() {
            return None;
        }
        Some(VdevName {
            pod_uid: (*uid).into(),
            container: (*container).into(),
            dev_index: dev.parse().ok()?,
            pipe: pipe.parse().ok().filter(|p| *p < MAX_PIPES)?,
            vdev: vdev.parse().ok().filter(|v| *v < MAX_VDEVS)?,
            masks: [
                u64::from_str_radix(m1, 16).ok()?,
                u64::from_str_radix(m2, 16).ok()?,
            ],
        })
    }

    fn cus(&self) -> u128 {
        u128::from(self.masks[0]) | (u128::from(self.masks[1]) << 64)
    }
}

/// The text of a vdev file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VdevConf {
    /// SMI's PCI bus id, upper case (`0000:3D:00.0`).
    pub pci_bus_id: String,
    pub masks: [u64; 2],
    pub cu_count: u32,
    pub mem_mib: u32,
    pub device_id: u32,
    pub vdev: u32,
    pub pipe: u32,
}

impl VdevConf {
    pub fn text(&self) -> String {
        format!(
            "PciBusId: {}\ncu_mask: 0x{:016x}\ncu_mask: 0x{:016x}\ncu_count: {}\nmem: {} MiB\ndevice_id: {}\nvdev_id: {}\npipe_id: {}\nenable: 1\n",
            self.pci_bus_id,
            self.masks[0],
            self.masks[1],
            self.cu_count,
            self.mem_mib,
            self.device_id,
            self.vdev,
            self.pipe
        )
    }
}

/// The CUs, vdev ids and pipe ids in use on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VdevState {
    cus: BTreeMap<u32, u128>,
    vdevs: BTreeMap<u32, String>,
    pipes: BTreeMap<(u32, u32), String>,
    owners: BTreeMap<u32, Vec<(u128, String)>>,
}

impl VdevState {
    /// Records a vdev in use; one that claims what another holds is refused (the node's
    /// record cannot be trusted).
    pub fn mark(&mut self, v: &VdevName) -> Result<(), VdevError> {
        let name = v.dir_name();
        let cus = v.cus();
        let dev_cus = self.cus.entry(v.dev_index).or_default();
        if *dev_cus & cus != 0 {
            let other = self
                .owners
                .get(&v.dev_index)
                .and_then(|o| o.iter().find(|(m, _)| m & cus != 0))
                .map(|(_, n)| n.clone())
                .unwrap_or_default();
            return Err(VdevError::Overlap(other, name));
        }
        if let Some(other) = self
            .vdevs
            .get(&v.vdev)
            .or_else(|| self.pipes.get(&(v.dev_index, v.pipe)))
        {
            return Err(VdevError::Overlap(other.clone(), name));
        }
        *dev_cus |= cus;
        self.vdevs.insert(v.vdev, name.clone());
        self.pipes.insert((v.dev_index, v.pipe), name.clone());
        self.owners
            .entry(v.dev_index)
            .or_default()
            .push((cus, name));
        Ok(())
    }

    /// The lowest `want` free CUs of DCU `dev` (which has `cu_count`), as two masks.
    pub fn free_cus(&self, dev: u32, cu_count: u32, want: u32) -> Result<[u64; 2], VdevError> {
        let used = self.cus.get(&dev).copied().unwrap_or(0);
        let mut picked: u128 = 0;
        let mut n = 0;
        for bit in 0..cu_count.min(128) {
            if n == want {
                break;
            }
            if used & (1u128 << bit) == 0 {
                picked |= 1u128 << bit;
                n += 1;
            }
        }
        if n < want {
            return Err(VdevError::NotEnoughCus { dev, free: n, want });
        }
        // Truncation is the split into the two 64-bit masks.
        #[allow(clippy::cast_possible_truncation)]
        Ok([picked as u64, (picked >> 64) as u64])
    }

    /// The first free vdev id of the node.
    pub fn free_vdev(&self) -> Result<u32, VdevError> {
        (0..MAX_VDEVS)
            .find(|v| !self.vdevs.contains_key(v))
            .ok_or(VdevError::NoVdevId)
    }

    /// The first free pipe id of DCU `dev`.
    pub fn free_pipe(&self, dev: u32) -> Result<u32, VdevError> {
        (0..MAX_PIPES)
            .find(|p| !self.pipes.contains_key(&(dev, *p)))
            .ok_or(VdevError::NoPipeId(dev))
    }
}

/// Where the vdev files live on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VdevDirs {
    /// `<vgpu>/dcu`: one directory per vdev.
    pub containers: PathBuf,
    /// The exporter's directory (`/etc/vdev`).
    pub exporter: PathBuf,
}

impl VdevDirs {
    pub fn exporter_file(&self, vdev: u32) -> PathBuf {
        self.exporter.join(format!("vdev{vdev}.conf"))
    }

    /// Rebuilds the node's state from the vdev directories: those of pods in `live`
    /// (UIDs) are in use; the others are removed with their exporter file. A name this
    /// plugin did not write is left alone (logged).
    pub fn rebuild(&self, live: &HashSet<String>) -> Result<VdevState, String> {
        let mut state = VdevState::default();
        let entries = match std::fs::read_dir(&self.containers) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(state),
            Err(e) => {
                return Err(format!(
                    "cannot list the vdev directories in {}: {e}",
                    self.containers.display()
                ));
            }
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let Some(v) = entry.file_name().to_str().and_then(VdevName::parse) else {
                tracing::warn!(path = %path.display(), "not a vdev directory of this plugin: left alone");
                continue;
            };
            if live.contains(&v.pod_uid) {
                state.mark(&v).map_err(|e| e.to_string())?;
                continue;
            }
            remove_vdev(&path, &self.exporter_file(v.vdev));
        }
        Ok(state)
    }

    /// Writes the container's and the exporter's vdev files; the container's directory.
    pub fn create(&self, name: &VdevName, conf: &VdevConf) -> Result<PathBuf, String> {
        let dir = self.containers.join(name.dir_name());
        let exporter = self.exporter_file(name.vdev);
        let written = write_files(&dir, &self.exporter, &exporter, conf);
        if let Err(e) = written {
            remove_vdev(&dir, &exporter);
            return Err(e);
        }
        Ok(dir)
    }
}

fn write_files(
    dir: &Path,
    exporter_dir: &Path,
    exporter: &Path,
    conf: &VdevConf,
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |path: &Path, e: std::io::Error| format!("cannot write {}: {e}", path.display());
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e))?;
    // The container's runtime writes beside the file, whatever user it runs as.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))
        .map_err(|e| fail(dir, e))?;
    let own = VdevConf {
        device_id: 0,
        ..conf.clone()
    };
    let file = dir.join(CONTAINER_CONF);
    std::fs::write(&file, own.text()).map_err(|e| fail(&file, e))?;
    std::fs::create_dir_all(exporter_dir).map_err(|e| fail(exporter_dir, e))?;
    std::fs::write(exporter, conf.text()).map_err(|e| fail(exporter, e))
}

fn remove_vdev(dir: &Path, exporter: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {
            tracing::info!(path = %dir.display(), "vdev of a pod no longer on the node removed")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %dir.display(), error = %e, "cannot remove a vdev directory")
        }
    }
    match std::fs::remove_file(exporter) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %exporter.display(), error = %e, "cannot remove a vdev file")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(uid: &str, dev: u32, pipe: u32, vdev: u32, masks: [u64; 2]) -> VdevName {
        VdevName {
            pod_uid: uid.into(),
            container: "main".into(),
            dev_index: dev,
            pipe,
            vdev,
            masks,
        }
    }

    #[test]
    fn names_round_trip_and_foreign_names_are_refused() {
        let v = name("0b6c-11", 1, 2, 3, [0xff, 0x1]);
        assert_eq!(
            v.dir_name(),
            "0b6c-11_main_1_2_3_00000000000000ff_0000000000000001"
        );
        assert_eq!(VdevName::parse(&v.dir_name()), Some(v));
        for bad in [
            "lost+found",
            "u_c_0_0_0_zz_00",
            "u_c_0_0_200_0_0",
            "u_c_0_20_0_0_0",
            "_c_0_0_0_0_0",
        ] {
            assert_eq!(VdevName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn cus_are_taken_lowest_first_across_both_masks() {
        let mut s = VdevState::default();
        assert_eq!(s.free_cus(0, 120, 36).unwrap(), [(1 << 36) - 1, 0]);
        s.mark(&name("a", 0, 0, 0, [(1 << 60) - 1, 0])).unwrap();
        // 60 taken: the next 12 are bits 60..71, four in the first mask, eight in the second.
        assert_eq!(s.free_cus(0, 120, 12).unwrap(), [0xf << 60, 0xff]);
        assert_eq!(
            s.free_cus(0, 120, 61),
            Err(VdevError::NotEnoughCus {
                dev: 0,
                free: 60,
                want: 61
            })
        );
        assert_eq!(s.free_cus(1, 120, 120).unwrap(), [u64::MAX, (1 << 56) - 1]);
        assert_eq!((s.free_vdev().unwrap(), s.free_pipe(0).unwrap()), (1, 1));
        assert_eq!(s.free_pipe(1).unwrap(), 0);
        let err = s.mark(&name("b", 0, 1, 1, [1, 0])).unwrap_err();
        assert!(matches!(err, VdevError::Overlap(..)), "{err}");
        let err = s.mark(&name("b", 1, 0, 0, [1, 0])).unwrap_err();
        assert!(
            matches!(err, VdevError::Overlap(..)),
            "vdev id 0 held: {err}"
        );
    }

    #[test]
    fn conf_text_is_hamis() {
        let c = VdevConf {
            pci_bus_id: "0000:3D:00.0".into(),
            masks: [0xfff, 0],
            cu_count: 12,
            mem_mib: 4096,
            device_id: 1,
            vdev: 0,
            pipe: 0,
        };
        assert_eq!(
            c.text(),
            "PciBusId: 0000:3D:00.0\ncu_mask: 0x0000000000000fff\ncu_mask: 0x0000000000000000\ncu_count: 12\nmem: 4096 MiB\ndevice_id: 1\nvdev_id: 0\npipe_id: 0\nenable: 1\n"
        );
    }
}
