//! The kernel's view of Hygon DCUs (`docs/device-plugin.md#hygon-dcu`), read under
//! configurable roots so tests use a fake tree:
//!
//! - `<sysfs>/class/drm/card*` and `renderD*`, the kernel's DRM nodes (the device files
//!   of the same names under `<dev>/dri` are what containers get; the backend reads a DCU
//!   whose files are gone as unhealthy, not as gone);
//! - `<sysfs>/class/drm/<name>/device/vendor`: a node is a DCU's when it reads `0x1d94`;
//! - `<sysfs>/class/drm/<name>/device`: the PCI device (its resolved directory name is
//!   the PCI address, which joins a card with its render node and with ROCm SMI's facts);
//!   its `numa_node`, when present.
//!
//! A node whose vendor file is missing or unreadable is skipped with a warning naming
//! the path, as is one whose PCI address cannot be told and a DCU without both a card
//! and a render node.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why the tree cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    #[error("cannot list the DRM nodes in {path}: {source}")]
    NoDrm {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// One DCU as the kernel shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysDcu {
    /// PCI address, lower case (`0000:03:00.0`).
    pub pci_bdf: String,
    /// DRM card node name (`card1`).
    pub card: String,
    /// DRM render node name (`renderD128`).
    pub render: String,
    pub numa: Option<i32>,
}

/// A PCI device's card node, render node and NUMA node, as found so far.
type DrmNodes = (Option<String>, Option<String>, Option<i32>);

/// `card<N>` or `renderD<N>`: the kind and the minor.
fn drm_node(name: &str) -> Option<(&'static str, u32)> {
    if let Some(n) = name.strip_prefix("renderD") {
        return Some(("render", n.parse().ok()?));
    }
    let n = name.strip_prefix("card")?;
    Some(("card", n.parse().ok()?))
}

/// The PCI device behind a DRM node, when its vendor is Hygon's: its PCI address and
/// NUMA node. `None` (with a warning naming the path) when the node cannot be read.
fn hygon_pci(sysfs: &Path, name: &str) -> Option<(String, Option<i32>)> {
    let device = sysfs.join("class/drm").join(name).join("device");
    let vendor_path = device.join("vendor");
    let vendor = match std::fs::read_to_string(&vendor_path) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(path = %vendor_path.display(), error = %e, "DRM node skipped: its PCI vendor cannot be read");
            return None;
        }
    };
    if vendor.trim() != crate::HYGON_VENDOR_ID {
        return None;
    }
    let pci = std::fs::canonicalize(&device)
        .ok()
        .and_then(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .map(str::to_lowercase)
        })
        .filter(|p| is_pci_address(p));
    let Some(pci) = pci else {
        tracing::warn!(path = %device.display(), "DCU DRM node skipped: its PCI address cannot be told");
        return None;
    };
    let numa = std::fs::read_to_string(device.join("numa_node"))
        .ok()
        .and_then(|n| n.trim().parse::<i32>().ok())
        .filter(|n| *n >= 0);
    Some((pci, numa))
}

/// `dddd:bb:dd.f`, hexadecimal.
fn is_pci_address(s: &str) -> bool {
    let parts: Vec<&str> = s.split([':', '.']).collect();
    parts.len() == 4
        && [4, 2, 2, 1]
            .iter()
            .zip(&parts)
            .all(|(len, p)| p.len() == *len && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The node's DCUs, by PCI address: each with its card and render node (the lowest
/// minor of each kind when a device shows several).
pub fn dcus(sysfs: &Path) -> Result<Vec<SysDcu>, SysfsError> {
    let drm = sysfs.join("class/drm");
    let entries = std::fs::read_dir(&drm).map_err(|source| SysfsError::NoDrm {
        path: drm.clone(),
        source,
    })?;
    let mut nodes: Vec<(&'static str, u32, String)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|name| drm_node(&name).map(|(kind, minor)| (kind, minor, name)))
        .collect();
    nodes.sort_by_key(|(kind, minor, _)| (*kind, *minor));
    let mut by_pci: BTreeMap<String, DrmNodes> = BTreeMap::new();
    for (kind, _, name) in nodes {
        let Some((pci, numa)) = hygon_pci(sysfs, &name) else {
            continue;
        };
        let entry = by_pci.entry(pci).or_default();
        let slot = if kind == "card" {
            &mut entry.0
        } else {
            &mut entry.1
        };
        slot.get_or_insert(name);
        entry.2 = entry.2.or(numa);
    }
    let mut out = Vec::new();
    for (pci, (card, render, numa)) in by_pci {
        match (card, render) {
            (Some(card), Some(render)) => out.push(SysDcu {
                pci_bdf: pci,
                card,
                render,
                numa,
            }),
            (card, render) => {
                tracing::warn!(%pci, ?card, ?render, "DCU without both a DRM card and render node skipped")
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drm_names_and_pci_addresses() {
        assert_eq!(drm_node("card12"), Some(("card", 12)));
        assert_eq!(drm_node("renderD128"), Some(("render", 128)));
        assert_eq!(drm_node("card1-DP-1"), None);
        assert_eq!(drm_node("by-path"), None);
        assert!(is_pci_address("0000:03:00.0"));
        assert!(!is_pci_address("pci0000:00"));
        assert!(!is_pci_address("0000:03:00"));
    }
}
