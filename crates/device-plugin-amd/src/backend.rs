//! The AMD backend: GPUs from sysfs joined with the library facts, health from the
//! device nodes, and a catalog the Allocate hook reads (DRM minors, ROCr UUIDs, CUs).

use std::sync::Arc;

use hami_device_plugin::tree_backend::{TreeBackend, TreeDevices};
use hami_device_plugin::{BackendError, PhysicalDevice};

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

/// The framework's backend over [`AmdTree`].
pub type AmdBackend = TreeBackend<AmdTree>;

pub use hami_device_plugin::tree_backend::Roots;

/// AMD GPUs as the node's files and the GPU facts show them.
pub struct AmdTree {
    roots: Roots,
    facts: Arc<dyn FactsSource<GpuFacts>>,
}

impl std::fmt::Debug for AmdTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmdTree")
            .field("roots", &self.roots)
            .field("facts", &self.facts.name())
            .finish()
    }
}

impl AmdTree {
    pub fn new(roots: Roots, facts: Arc<dyn FactsSource<GpuFacts>>) -> Self {
        AmdTree { roots, facts }
    }
}

fn discovery_error(detail: impl ToString) -> BackendError {
    hami_device_plugin::tree_backend::discovery_error("amd", detail)
}

/// A GPU is healthy while `/dev/kfd` and its DRM nodes exist.
fn healthy(roots: &Roots, g: &SysGpu) -> bool {
    roots.dev.join("kfd").exists()
        && roots.dev.join(format!("dri/card{}", g.card)).exists()
        && roots.dev.join(format!("dri/renderD{}", g.render)).exists()
}

impl TreeDevices for AmdTree {
    type Device = AmdGpu;

    fn name(&self) -> &'static str {
        "amd"
    }

    /// The GPUs (partitions of a partitioned GPU each on its own) the node would
    /// register: those with a renderD known to KFD and facts from the library, keyed by
    /// their own address. One whose UUID repeats another's is not registered (a kernel
    /// that does not number partitions in KFD's `location_id` gives every partition of a
    /// GPU the same address, hence the same facts).
    fn list(&self) -> Result<Vec<AmdGpu>, BackendError> {
        let mut out: Vec<AmdGpu> = Vec::new();
        for sys in sysfs::gpus(&self.roots.sysfs).map_err(discovery_error)? {
            let Some(f) = self.facts.facts(&sys.address).map_err(discovery_error)? else {
                tracing::warn!(pci = %sys.address, source = self.facts.name(), "GPU unknown to the GPU library: not registered");
                continue;
            };
            if let Some(other) = out.iter().find(|g| g.facts.uuid == f.uuid) {
                tracing::warn!(pci = %sys.address, render = sys.render, other_render = other.sys.render, uuid = %f.uuid, "GPU with the UUID of another: not registered");
                continue;
            }
            out.push(AmdGpu { sys, facts: f });
        }
        Ok(out)
    }

    fn id(gpu: &AmdGpu) -> String {
        gpu.facts.uuid.clone()
    }

    fn physical(&self, gpus: &[AmdGpu]) -> Vec<PhysicalDevice> {
        gpus.iter()
            .map(|g| PhysicalDevice {
                uuid: g.facts.uuid.clone(),
                index: g.sys.card,
                model: g.facts.market_name.clone(),
                memory_mib: g.facts.vram_mib,
                numa: Some(g.sys.numa),
                healthy: healthy(&self.roots, &g.sys),
            })
            .collect()
    }
}
