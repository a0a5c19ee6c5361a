//! One pass over `<hook>/containers`: every `<podUID>_<container>` directory of a pod on
//! this node has its cache file read; directories of pods gone from the node are removed
//! once they are older than the resync interval; nothing happens while the MIG apply lock
//! exists (`docs/monitor.md`).
//!
//! A broken file (truncated, foreign, half-written, mid-write for too long) is skipped
//! for this pass with a rate-limited warning naming it; the others are read as usual.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hami_core::shared_region::{RegionError, RegionReader, Usage};

use crate::cache_file::CacheFile;
use crate::pods::{PodIndex, PodInfo};
use crate::warnings::Warnings;

/// How often the same problem with the same file is logged again.
const WARN_EVERY: Duration = Duration::from_secs(600);
/// Every this many passes each open file is checked against its path (a file replaced
/// under the same name is opened again).
const RECHECK_EVERY: u64 = 12;

/// Where and how to scan.
#[derive(Debug, Clone)]
pub struct ScanSettings {
    /// `<hook>/containers`.
    pub containers_dir: PathBuf,
    /// A directory whose pod is gone is removed once its mtime is older than this.
    pub resync_interval: Duration,
    /// While this file exists the device plugin is reconfiguring MIG: no scan.
    pub mig_apply_lock: PathBuf,
}

/// One container's region as of the last scan.
#[derive(Debug, Clone)]
pub struct ContainerReading {
    pub pod_uid: Arc<str>,
    pub pod: Arc<PodInfo>,
    pub container: Arc<str>,
    /// The file, for the feedback loop's writes.
    pub file: Arc<CacheFile>,
    pub usage: Usage,
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// The MIG apply lock existed: nothing was read or removed.
    pub paused: bool,
    /// Containers read.
    pub read: usize,
    /// Directories (of pods on this node) that have no usable cache file this pass.
    pub skipped: usize,
    /// Directories removed (their pod is gone).
    pub removed: Vec<PathBuf>,
}

#[derive(Debug)]
struct Entry {
    generation: u64,
    pod_uid: Arc<str>,
    container: Arc<str>,
    file: Option<Arc<CacheFile>>,
    /// Pass at which `file` was opened or last checked against its path.
    checked: u64,
    usage: Usage,
}

/// What a pass found for one container (its pod is added by the caller).
struct Found {
    pod_uid: Arc<str>,
    container: Arc<str>,
    file: Arc<CacheFile>,
    usage: Usage,
}

/// Scans a containers directory again and again, keeping each container's file open.
#[derive(Debug)]
pub struct Scanner {
    settings: ScanSettings,
    entries: HashMap<String, Entry>,
    reader: RegionReader,
    warnings: Warnings,
    generation: u64,
}

/// `<podUID>_<container>`: pod UIDs and container names contain no `_`.
pub fn parse_dir_name(name: &str) -> Option<(&str, &str)> {
    let (uid, container) = name.split_once('_')?;
    (!uid.is_empty() && !container.is_empty() && !container.contains('_'))
        .then_some((uid, container))
}

impl Scanner {
    pub fn new(settings: ScanSettings) -> Self {
        Scanner {
            settings,
            entries: HashMap::new(),
            reader: RegionReader::new(),
            warnings: Warnings::new(WARN_EVERY),
            generation: 0,
        }
    }

    pub fn settings(&self) -> &ScanSettings {
        &self.settings
    }

    /// One pass; the readings replace `out`'s contents.
    pub fn scan(&mut self, pods: &PodIndex, out: &mut Vec<ContainerReading>) -> ScanStats {
        let mut stats = ScanStats::default();
        if self.settings.mig_apply_lock.exists() {
            stats.paused = true;
            return stats;
        }
        out.clear();
        self.generation += 1;
        let dir = self.settings.containers_dir.clone();
        let listing = match std::fs::read_dir(&dir) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!(dir = %dir.display(), "no containers directory yet");
                self.entries.clear();
                return stats;
            }
            Err(e) => {
                let key = dir.display().to_string();
                if self.warnings.allow(&key, &e.to_string()) {
                    tracing::warn!(dir = %key, error = %e, "cannot list the containers directory");
                }
                return stats;
            }
        };
        for item in listing {
            let item = match item {
                Ok(i) => i,
                Err(e) => {
                    tracing::debug!(dir = %dir.display(), error = %e, "directory entry unreadable");
                    continue;
                }
            };
            if !item.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let os_name = item.file_name();
            let Some(name) = os_name.to_str() else {
                self.warn_once(&item.path(), "directory name is not UTF-8; ignored");
                continue;
            };
            let Some((uid, container)) = parse_dir_name(name) else {
                self.warn_once(
                    &item.path(),
                    "not named <podUID>_<container>; ignored (and never removed)",
                );
                continue;
            };
            if !pods.synced() {
                continue;
            }
            let Some(pod) = pods.get(uid) else {
                self.orphan(&item.path(), &mut stats);
                continue;
            };
            if !pod.has_container(container) {
                tracing::debug!(dir = %item.path().display(), pod = %format!("{}/{}", pod.namespace, pod.name), "no such container in the pod; skipped");
                stats.skipped += 1;
                continue;
            }
            match self.read_container(name, uid, container, &item) {
                Some(Found {
                    pod_uid,
                    container,
                    file,
                    usage,
                }) => {
                    stats.read += 1;
                    out.push(ContainerReading {
                        pod_uid,
                        pod: pod.clone(),
                        container,
                        file,
                        usage,
                    });
                }
                None => stats.skipped += 1,
            }
        }
        let generation = self.generation;
        self.entries.retain(|_, e| e.generation == generation);
        // Problems of files and directories that are gone are forgotten (warnings are
        // few; this is a stat each).
        self.warnings.retain(|key| Path::new(key).exists());
        stats
    }

    /// What the container's file says, or None (logged) when it has no usable file this
    /// pass.
    fn read_container(
        &mut self,
        name: &str,
        uid: &str,
        container: &str,
        item: &std::fs::DirEntry,
    ) -> Option<Found> {
        let generation = self.generation;
        if !self.entries.contains_key(name) {
            self.entries.insert(
                name.to_string(),
                Entry {
                    generation,
                    pod_uid: uid.into(),
                    container: container.into(),
                    file: None,
                    checked: generation,
                    usage: Usage::default(),
                },
            );
        }
        let entry = self.entries.get_mut(name)?;
        entry.generation = generation;
        if let Some(f) = &entry.file
            && generation - entry.checked >= RECHECK_EVERY
        {
            entry.checked = generation;
            let same = std::fs::symlink_metadata(f.path())
                .is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) == f.ino());
            if !same {
                tracing::info!(file = %f.path().display(), "cache file replaced; opening it again");
                entry.file = None;
            }
        }
        if entry.file.is_none() {
            let dir = item.path();
            match find_cache_file(&dir) {
                Ok(None) => {
                    // HAMi-core creates the file at the container's first CUDA call.
                    tracing::trace!(dir = %dir.display(), "no cache file yet");
                    return None;
                }
                Ok(Some(path)) => match CacheFile::open(&path) {
                    Ok(f) => {
                        entry.file = Some(Arc::new(f));
                        entry.checked = generation;
                    }
                    Err(e) => {
                        let key = path.display().to_string();
                        if self.warnings.allow(&key, &e.to_string()) {
                            tracing::warn!(file = %key, error = %e, "cache file not usable; skipped");
                        }
                        return None;
                    }
                },
                Err(e) => {
                    let key = dir.display().to_string();
                    if self.warnings.allow(&key, &e.to_string()) {
                        tracing::warn!(dir = %key, error = %e, "cannot list the container directory; skipped");
                    }
                    return None;
                }
            }
        }
        let file = entry.file.clone()?;
        match self.reader.read(file.as_ref(), &mut entry.usage) {
            Ok(()) => Some(Found {
                pod_uid: entry.pod_uid.clone(),
                container: entry.container.clone(),
                file,
                usage: entry.usage.clone(),
            }),
            Err(e) => {
                let key = file.path().display().to_string();
                if self.warnings.allow(&key, &e.to_string()) {
                    tracing::warn!(file = %key, error = %e, "cache file not readable; skipped this scan");
                }
                // Look the file up again next pass unless it is only busy: it may have
                // been replaced or still be in the making.
                if !matches!(e, RegionError::SlotBusy { .. }) {
                    entry.file = None;
                }
                None
            }
        }
    }

    /// A directory whose pod is not on this node: removed once old enough.
    fn orphan(&mut self, dir: &Path, stats: &mut ScanStats) {
        let modified = std::fs::symlink_metadata(dir).and_then(|m| m.modified());
        let age = modified
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok());
        if age.is_none_or(|a| a < self.settings.resync_interval) {
            return;
        }
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {
                tracing::info!(dir = %dir.display(), "removed the directory of a pod no longer on this node");
                stats.removed.push(dir.to_path_buf());
            }
            Err(e) => {
                let key = dir.display().to_string();
                if self.warnings.allow(&key, &e.to_string()) {
                    tracing::warn!(dir = %key, error = %e, "cannot remove the directory of a gone pod");
                }
            }
        }
    }

    fn warn_once(&mut self, path: &Path, what: &str) {
        let key = path.display().to_string();
        if self.warnings.allow(&key, what) {
            tracing::warn!(dir = %key, "{what}");
        }
    }
}

/// The newest regular `*.cache` file of `dir` (HAMi-core names it after a random UUID;
/// a restarted container may leave an older one behind).
fn find_cache_file(dir: &Path) -> std::io::Result<Option<PathBuf>> {
    let mut best: Option<(SystemTime, PathBuf)> = None;
    for item in std::fs::read_dir(dir)? {
        let item = item?;
        let name = item.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.ends_with(".cache") {
            continue;
        }
        let Ok(meta) = item.metadata() else { continue };
        if !meta.file_type().is_file() {
            continue;
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if best.as_ref().is_none_or(|(t, _)| modified > *t) {
            best = Some((modified, item.path()));
        }
    }
    Ok(best.map(|(_, p)| p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_names() {
        assert_eq!(parse_dir_name("0b1c-22_main"), Some(("0b1c-22", "main")));
        for bad in ["nounderscore", "_main", "uid_", "uid_a_b"] {
            assert_eq!(parse_dir_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn newest_cache_file_wins_and_others_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(find_cache_file(dir.path()).unwrap(), None);
        std::fs::write(dir.path().join("libvgpu.so"), b"").unwrap();
        std::fs::create_dir(dir.path().join("d.cache")).unwrap();
        let old = dir.path().join("a.cache");
        std::fs::write(&old, b"").unwrap();
        assert_eq!(find_cache_file(dir.path()).unwrap(), Some(old.clone()));
        let new = dir.path().join("b.cache");
        std::fs::write(&new, b"").unwrap();
        let past = SystemTime::now() - Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(past)
            .unwrap();
        assert_eq!(find_cache_file(dir.path()).unwrap(), Some(new));
    }
}
