//! What vendor libraries know and the kernel's files do not (AMD SMI, libdrm, ROCm SMI),
//! read from a JSON file keyed by PCI address: the file-driven stand-in for those
//! libraries that tests, the demo and nodes without them use
//! (`docs/device-plugin.md#vendor-hooks`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::de::DeserializeOwned;

/// Why the facts cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    #[error("cannot read the device facts file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("device facts file {path} is malformed: {error}")]
    Malformed { path: PathBuf, error: String },
    /// A vendor library (or the tree it is asked about) failed; the text names the
    /// library and the call, or the path.
    #[error("{0}")]
    Source(String),
    /// The flags name no usable source.
    #[error("{0}")]
    Choice(String),
}

/// Where a vendor plugin's device facts come from (`--facts-source`): the vendor
/// libraries (`docs/device-plugin.md#vendor-libraries`) or a [`FactsFile`]. The variants'
/// doc lines are the `--help` text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FactsSourceKind {
    /// the vendor libraries, loaded at start-up (also accepted: smi)
    #[value(alias = "smi")]
    Library,
    /// a JSON file standing in for them
    File,
}

/// The source the flags choose: `--facts-source` when given, else the facts file when
/// one is named (`file_flag`), else the libraries. A facts file named alongside
/// `--facts-source=library` is refused rather than ignored.
pub fn choose_source(
    explicit: Option<FactsSourceKind>,
    file: Option<&Path>,
    file_flag: &'static str,
) -> Result<Option<FactsFile>, FactsError> {
    match (explicit, file) {
        (Some(FactsSourceKind::File) | None, Some(path)) => Ok(Some(FactsFile::new(path))),
        (Some(FactsSourceKind::File), None) => Err(FactsError::Choice(format!(
            "--facts-source=file needs {file_flag}"
        ))),
        (Some(FactsSourceKind::Library), Some(path)) => Err(FactsError::Choice(format!(
            "{file_flag} {} is not read with --facts-source=library: drop one of them",
            path.display()
        ))),
        (Some(FactsSourceKind::Library) | None, None) => Ok(None),
    }
}

/// A JSON object `{"<pci address>": <facts>}`, re-read on every lookup so an edited file
/// applies at the next discovery.
#[derive(Debug, Clone)]
pub struct FactsFile {
    path: PathBuf,
}

impl FactsFile {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FactsFile { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every entry of the file, keys lower-cased.
    pub fn load<T: DeserializeOwned>(&self) -> Result<BTreeMap<String, T>, FactsError> {
        let text = std::fs::read_to_string(&self.path).map_err(|source| FactsError::Read {
            path: self.path.clone(),
            source,
        })?;
        let map: BTreeMap<String, T> =
            serde_json::from_str(&text).map_err(|e| FactsError::Malformed {
                path: self.path.clone(),
                error: e.to_string(),
            })?;
        Ok(map
            .into_iter()
            .map(|(k, v)| (k.to_lowercase(), v))
            .collect())
    }

    /// The entry of `pci_address` (any case); `None` when the file does not name it.
    pub fn get<T: DeserializeOwned>(&self, pci_address: &str) -> Result<Option<T>, FactsError> {
        Ok(self.load()?.remove(&pci_address.to_lowercase()))
    }
}

/// A source of per-device facts, keyed by PCI address: a vendor library, or a
/// [`FactsFile`] standing in for it.
pub trait FactsSource<T>: Send + Sync + 'static {
    fn name(&self) -> &str;
    /// The facts of the device at `pci_address`; `None` when the source does not know it
    /// (the device is then not registered).
    fn facts(&self, pci_address: &str) -> Result<Option<T>, FactsError>;
}

impl<T: DeserializeOwned> FactsSource<T> for FactsFile {
    fn name(&self) -> &str {
        "file"
    }

    fn facts(&self, pci_address: &str) -> Result<Option<T>, FactsError> {
        self.get(pci_address)
    }
}

/// The devices of a backend's last discovery by registered ID, shared with the vendor's
/// hook (which needs the DRM nodes, PCI address or CU count behind an ID).
#[derive(Debug)]
pub struct Catalog<T> {
    devices: RwLock<BTreeMap<String, T>>,
}

impl<T> Default for Catalog<T> {
    fn default() -> Self {
        Catalog {
            devices: RwLock::new(BTreeMap::new()),
        }
    }
}

impl<T: Clone> Catalog<T> {
    pub fn get(&self, id: &str) -> Option<T> {
        self.devices.read().ok()?.get(id).cloned()
    }

    /// Replaces the catalog with `devices`, keyed by `id`.
    pub fn replace<'a>(&self, devices: impl IntoIterator<Item = &'a T>, id: impl Fn(&T) -> String)
    where
        T: 'a,
    {
        if let Ok(mut map) = self.devices.write() {
            *map = devices.into_iter().map(|d| (id(d), d.clone())).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_facts_file_is_chosen_when_named_or_asked_for_and_never_ignored() {
        let f = Path::new("/etc/facts.json");
        let flag = "--gpu-facts";
        let chosen = |e, f| choose_source(e, f, flag).map(|c| c.map(|c| c.path().to_path_buf()));
        assert_eq!(chosen(None, None).unwrap(), None);
        assert_eq!(chosen(None, Some(f)).unwrap(), Some(f.to_path_buf()));
        assert_eq!(
            chosen(Some(FactsSourceKind::File), Some(f)).unwrap(),
            Some(f.to_path_buf())
        );
        assert_eq!(chosen(Some(FactsSourceKind::Library), None).unwrap(), None);
        let err = chosen(Some(FactsSourceKind::File), None).unwrap_err();
        assert_eq!(err.to_string(), "--facts-source=file needs --gpu-facts");
        let err = chosen(Some(FactsSourceKind::Library), Some(f)).unwrap_err();
        assert!(
            err.to_string()
                .contains("/etc/facts.json is not read with --facts-source=library"),
            "{err}"
        );
    }
}
