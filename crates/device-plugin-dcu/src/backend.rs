//! The DCU [`DeviceBackend`]: DCUs from the DRM nodes joined with the SMI facts, health
//! from the device nodes, and a catalog the Allocate hook reads (DRM nodes, PCI address,
//! SMI index, CUs).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hami_device_plugin::{
    BackendError, BackendEvent, DeviceBackend, PhysicalDevice, spawn_rediscovery,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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

/// Where the node's files are (`--sysfs-root`, `--dev-root`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub sysfs: PathBuf,
    pub dev: PathBuf,
}

pub struct DcuBackend {
    roots: Roots,
    facts: Arc<dyn FactsSource>,
    catalog: Arc<Catalog>,
    poll: Duration,
}

impl std::fmt::Debug for DcuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DcuBackend")
            .field("roots", &self.roots)
            .field("facts", &self.facts.name())
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl DcuBackend {
    pub fn new(roots: Roots, facts: Arc<dyn FactsSource>, poll: Duration) -> Self {
        DcuBackend {
            roots,
            facts,
            catalog: Arc::default(),
            poll,
        }
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.clone()
    }

    /// The DCUs the node would register, in SMI index order.
    pub fn dcus(&self) -> Result<Vec<Dcu>, BackendError> {
        dcus(&self.roots, self.facts.as_ref())
    }
}

fn discovery_error(detail: impl ToString) -> BackendError {
    BackendError::Discovery {
        backend: "dcu".into(),
        detail: detail.to_string(),
    }
}

/// Joins the kernel's DCUs with SMI's facts. A DCU SMI does not know, or knows without
/// a serial number or memory, is skipped with a warning: its ID would be `DCU-N/A` for
/// every such card (HAMi registers that; the scheduler then sees one ID twice).
fn dcus(roots: &Roots, facts: &dyn FactsSource) -> Result<Vec<Dcu>, BackendError> {
    let mut out: Vec<Dcu> = Vec::new();
    for sys in sysfs::dcus(&roots.sysfs).map_err(discovery_error)? {
        let Some(f) = facts.facts(&sys.pci_bdf).map_err(discovery_error)? else {
            tracing::warn!(pci = %sys.pci_bdf, source = facts.name(), "DCU unknown to ROCm SMI: not registered");
            continue;
        };
        let bad_field = [",", ":", ";"]
            .iter()
            .any(|c| f.serial.contains(c) || f.model.contains(c));
        if f.serial.trim().is_empty() || f.serial == "N/A" || bad_field {
            tracing::warn!(pci = %sys.pci_bdf, serial = %f.serial, model = %f.model, "DCU without a usable serial number or model: not registered");
            continue;
        }
        if f.memory_mib == 0 {
            tracing::warn!(pci = %sys.pci_bdf, "DCU reports no memory: not registered");
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

/// A DCU is healthy while `/dev/kfd` and its DRM nodes exist.
fn healthy(roots: &Roots, d: &SysDcu) -> bool {
    roots.dev.join("kfd").exists()
        && roots.dev.join("dri").join(&d.card).exists()
        && roots.dev.join("dri").join(&d.render).exists()
}

fn physical(roots: &Roots, dcus: &[Dcu]) -> Vec<PhysicalDevice> {
    dcus.iter()
        .map(|d| PhysicalDevice {
            uuid: d.id(),
            index: d.facts.index,
            model: d.dev_type(),
            memory_mib: d.facts.memory_mib,
            numa: d.sys.numa,
            healthy: healthy(roots, &d.sys),
        })
        .collect()
}

impl DeviceBackend for DcuBackend {
    fn name(&self) -> &str {
        "dcu"
    }

    fn discover(&self) -> Result<Vec<PhysicalDevice>, BackendError> {
        let dcus = self.dcus()?;
        self.catalog.replace(&dcus, Dcu::id);
        Ok(physical(&self.roots, &dcus))
    }

    /// Re-reads the tree every poll interval and sends the device list when it changed
    /// (a DCU or device node gone).
    fn watch(
        &self,
        devices: &[PhysicalDevice],
        events: mpsc::Sender<BackendEvent>,
        shutdown: CancellationToken,
    ) -> Result<(), BackendError> {
        let (roots, facts, catalog) =
            (self.roots.clone(), self.facts.clone(), self.catalog.clone());
        spawn_rediscovery("dcu", self.poll, devices, events, shutdown, move || {
            let d = dcus(&roots, facts.as_ref())?;
            catalog.replace(&d, Dcu::id);
            Ok(physical(&roots, &d))
        });
        Ok(())
    }
}
