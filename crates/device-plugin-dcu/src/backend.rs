//! The DCU backend: DCUs from the DRM nodes joined with the SMI facts, health from the
//! device nodes, and a catalog the Allocate hook reads (DRM nodes, PCI address, SMI
//! index, CUs).

use std::sync::Arc;

use hami_device_plugin::tree_backend::{TreeBackend, TreeDevices};
use hami_device_plugin::{BackendError, PhysicalDevice};

use crate::facts::{DcuFacts, FactsSource};
use crate::sysfs::{self, SysDcu};

/// One registered DCU: the kernel's facts and SMI's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dcu {
    pub sys: SysDcu,
    pub facts: DcuFacts,
}

impl Dcu {
    /// The registered ID, `DCU-<serial>`.
    pub fn id(&self) -> String {
        format!("DCU-{}", self.facts.serial)
    }

    /// The registered type, `DCU-<model>`.
    pub fn dev_type(&self) -> String {
        format!("DCU-{}", self.facts.model)
    }
}

/// The DCUs of the last discovery, by registered ID.
pub type Catalog = hami_device_plugin::facts_file::Catalog<Dcu>;

/// The framework's backend over [`DcuTree`].
pub type DcuBackend = TreeBackend<DcuTree>;

pub use hami_device_plugin::tree_backend::Roots;

/// DCUs as the node's files and the SMI facts show them.
pub struct DcuTree {
    roots: Roots,
    facts: Arc<dyn FactsSource<DcuFacts>>,
}

impl std::fmt::Debug for DcuTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcuTree")
            .field("roots", &self.roots)
            .field("facts", &self.facts.name())
            .finish()
    }
}

impl DcuTree {
    pub fn new(roots: Roots, facts: Arc<dyn FactsSource<DcuFacts>>) -> Self {
        DcuTree { roots, facts }
    }
}

fn discovery_error(detail: impl ToString) -> BackendError {
    hami_device_plugin::tree_backend::discovery_error("dcu", detail)
}

/// Why SMI's facts cannot register a DCU, if they cannot: without a serial number its
/// ID would be `DCU-N/A` for every such card (HAMi registers that; the scheduler then
/// sees one ID twice); a field holding `,` `:` or `;` would break the register string;
/// a DCU reporting no memory is skipped as HAMi does.
fn unusable(f: &DcuFacts) -> Option<&'static str> {
    let separator = |s: &str| s.contains([',', ':', ';']);
    if f.serial.trim().is_empty() || f.serial == "N/A" {
        Some("no serial number")
    } else if separator(&f.serial) || separator(&f.model) || f.model.is_empty() {
        Some("a serial number or model the register string cannot carry")
    } else if f.memory_mib == 0 {
        Some("no memory")
    } else {
        None
    }
}

/// A DCU is healthy while `/dev/kfd` and its DRM nodes exist.
fn healthy(roots: &Roots, d: &SysDcu) -> bool {
    roots.dev.join("kfd").exists()
        && roots.dev.join("dri").join(&d.card).exists()
        && roots.dev.join("dri").join(&d.render).exists()
}

impl TreeDevices for DcuTree {
    type Device = Dcu;

    fn name(&self) -> &'static str {
        "dcu"
    }

    /// The kernel's DCUs joined with SMI's facts, in SMI index order. A DCU SMI does not
    /// know, cannot register (see [`unusable`]) or gives the serial number or index of
    /// another is skipped with a warning.
    fn list(&self) -> Result<Vec<Dcu>, BackendError> {
        let mut out: Vec<Dcu> = Vec::new();
        for sys in sysfs::dcus(&self.roots.sysfs).map_err(discovery_error)? {
            let Some(f) = self.facts.facts(&sys.pci_bdf).map_err(discovery_error)? else {
                tracing::warn!(pci = %sys.pci_bdf, source = self.facts.name(), "DCU unknown to ROCm SMI: not registered");
                continue;
            };
            if let Some(why) = unusable(&f) {
                tracing::warn!(pci = %sys.pci_bdf, serial = %f.serial, model = %f.model, "DCU with {why}: not registered");
                continue;
            }
            if let Some(other) = out
                .iter()
                .find(|d| d.facts.serial == f.serial || d.facts.index == f.index)
            {
                tracing::warn!(pci = %sys.pci_bdf, other = %other.sys.pci_bdf, serial = %f.serial, index = f.index, "DCU with the serial number or SMI index of another: not registered");
                continue;
            }
            out.push(Dcu { sys, facts: f });
        }
        out.sort_by_key(|d| d.facts.index);
        Ok(out)
    }

    fn id(dcu: &Dcu) -> String {
        dcu.id()
    }

    fn physical(&self, dcus: &[Dcu]) -> Vec<PhysicalDevice> {
        dcus.iter()
            .map(|d| PhysicalDevice {
                uuid: d.id(),
                index: d.facts.index,
                model: d.dev_type(),
                memory_mib: d.facts.memory_mib,
                numa: d.sys.numa,
                healthy: healthy(&self.roots, &d.sys),
            })
            .collect()
    }
}
