//! The AMD [`DeviceBackend`]: GPUs from sysfs joined with the library facts, health from
//! the device nodes, and a catalog the Allocate hook reads (DRM minors, ROCr UUIDs, CUs).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hami_device_plugin::{BackendError, BackendEvent, DeviceBackend, PhysicalDevice};
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
#[derive(Debug, Default)]
pub struct Catalog {
    gpus: RwLock<BTreeMap<String, AmdGpu>>,
}

impl Catalog {
    pub fn get(&self, uuid: &str) -> Option<AmdGpu> {
        self.gpus.read().ok()?.get(uuid).cloned()
    }

    fn replace(&self, gpus: &[AmdGpu]) {
        if let Ok(mut map) = self.gpus.write() {
            *map = gpus
                .iter()
                .map(|g| (g.facts.uuid.clone(), g.clone()))
                .collect();
        }
    }
}

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
        self.catalog.replace(&gpus);
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
        let (roots, facts, catalog, poll) = (
            self.roots.clone(),
            self.facts.clone(),
            self.catalog.clone(),
            self.poll,
        );
        let mut last = devices.to_vec();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(poll) => {}
                }
                match gpus(&roots, facts.as_ref()) {
                    Ok(g) => {
                        // The hook's facts follow every discovery, also when the
                        // devices the kubelet sees stay the same.
                        catalog.replace(&g);
                        let now = physical(&roots, &g);
                        if now != last {
                            if events
                                .send(BackendEvent::Devices(now.clone()))
                                .await
                                .is_err()
                            {
                                return;
                            }
                            last = now;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "AMD GPU re-discovery failed; keeping the last device list")
                    }
                }
            }
        });
        Ok(())
    }
}
