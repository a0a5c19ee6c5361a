//! The AMD [`DeviceBackend`]: GPUs from sysfs joined with the library facts, health from
//! the device nodes, and a catalog the Allocate hook reads (DRM minors, ROCr UUIDs, CUs).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hami_device_plugin::{
    BackendError, BackendEvent, DeviceBackend, PhysicalDevice, spawn_rediscovery,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::facts::{FactsSource, GpuFacts};
use crate::sysfs::{self, SysGpu};

/// One registered GPU: the kernel's facts and the library's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdGpu {
    pub sys: SysGpu,
    pub facts: GpuFacts,
}

/// The GPUs of the last discovery, by registered ID (AMD SMI UUID).
pub type Catalog = hami_device_plugin::facts_file::Catalog<AmdGpu>;

/// Where the node's files are (`--sysfs-root`, `--dev-root`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub sysfs: PathBuf,
    pub dev: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots {
            sysfs: "/sys".into(),
            dev: "/dev".into(),
        }
    }
}

pub struct AmdBackend {
    roots: Roots,
    facts: Arc<dyn FactsSource>,
    catalog: Arc<Catalog>,
    poll: Duration,
}

impl std::fmt::Debug for AmdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmdBackend")
            .field("roots", &self.roots)
            .field("facts", &self.facts.name())
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl AmdBackend {
    pub fn new(roots: Roots, facts: Arc<dyn FactsSource>, poll: Duration) -> Self {
        AmdBackend {
            roots,
            facts,
            catalog: Arc::default(),
            poll,
        }
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.clone()
    }

    /// The GPUs the node would register: those with a renderD known to KFD and facts from
    /// the library.
    pub fn gpus(&self) -> Result<Vec<AmdGpu>, BackendError> {
        gpus(&self.roots, self.facts.as_ref())
    }
}

fn discovery_error(detail: impl ToString) -> BackendError {
    BackendError::Discovery {
        backend: "amd".into(),
        detail: detail.to_string(),
    }
}

fn gpus(roots: &Roots, facts: &dyn FactsSource) -> Result<Vec<AmdGpu>, BackendError> {
    let mut out = Vec::new();
    for sys in sysfs::gpus(&roots.sysfs).map_err(discovery_error)? {
        match facts
            .facts(&sys.pci_bdf, sys.card)
            .map_err(discovery_error)?
        {
            Some(f) => out.push(AmdGpu { sys, facts: f }),
            None => {
                tracing::warn!(pci = %sys.pci_bdf, source = facts.name(), "GPU unknown to the GPU library: not registered")
            }
        }
    }
    Ok(out)
}

/// A GPU is healthy while `/dev/kfd` and its DRM nodes exist.
fn healthy(roots: &Roots, g: &SysGpu) -> bool {
    roots.dev.join("kfd").exists()
        && roots.dev.join(format!("dri/card{}", g.card)).exists()
        && roots.dev.join(format!("dri/renderD{}", g.render)).exists()
}

fn physical(roots: &Roots, gpus: &[AmdGpu]) -> Vec<PhysicalDevice> {
    gpus.iter()
        .map(|g| PhysicalDevice {
            uuid: g.facts.uuid.clone(),
            index: g.sys.card,
            model: g.facts.market_name.clone(),
            memory_mib: g.facts.vram_mib,
            numa: Some(g.sys.numa),
            healthy: healthy(roots, &g.sys),
        })
        .collect()
}

impl DeviceBackend for AmdBackend {
    fn name(&self) -> &str {
        "amd"
    }

    fn discover(&self) -> Result<Vec<PhysicalDevice>, BackendError> {
        let gpus = self.gpus()?;
        self.catalog.replace(&gpus, |g| g.facts.uuid.clone());
        Ok(physical(&self.roots, &gpus))
    }

    /// Re-reads the tree every poll interval and sends the device list when it changed
    /// (a GPU or device node gone, a partition change).
    fn watch(
        &self,
        devices: &[PhysicalDevice],
        events: mpsc::Sender<BackendEvent>,
        shutdown: CancellationToken,
    ) -> Result<(), BackendError> {
        let (roots, facts, catalog) =
            (self.roots.clone(), self.facts.clone(), self.catalog.clone());
        spawn_rediscovery("amd", self.poll, devices, events, shutdown, move || {
            let g = gpus(&roots, facts.as_ref())?;
            // The hook's facts follow every discovery, also when the devices the
            // kubelet sees stay the same.
            catalog.replace(&g, |g| g.facts.uuid.clone());
            Ok(physical(&roots, &g))
        });
        Ok(())
    }
}
