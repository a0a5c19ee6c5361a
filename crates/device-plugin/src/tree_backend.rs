//! A [`DeviceBackend`] over the node's files (`docs/device-plugin.md#vendor-hooks`): the
//! vendor says how to list its devices (sysfs under a root, joined with a facts source)
//! and how each becomes a [`PhysicalDevice`]; this keeps the last list in a [`Catalog`]
//! for the vendor's hook and re-reads it every poll interval.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::backend::{BackendError, BackendEvent, DeviceBackend, PhysicalDevice};
use crate::facts_file::Catalog;

/// Where a vendor's node files are (`--sysfs-root`, `--dev-root`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub sysfs: PathBuf,
    pub dev: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots::from(&crate::vendor_args::RootArgs::default())
    }
}

impl From<&crate::vendor_args::RootArgs> for Roots {
    fn from(args: &crate::vendor_args::RootArgs) -> Self {
        Roots {
            sysfs: args.sysfs_root.clone(),
            dev: args.dev_root.clone(),
        }
    }
}

/// A discovery error of the `backend` vendor's tree (`amd`, `dcu`).
pub fn discovery_error(backend: &str, detail: impl ToString) -> BackendError {
    BackendError::Discovery {
        backend: backend.into(),
        detail: detail.to_string(),
    }
}

/// How a vendor reads its devices from the node's files.
pub trait TreeDevices: Send + Sync + 'static {
    /// What the vendor's hook needs of one device.
    type Device: Clone + Send + Sync + 'static;

    /// Short name for logs and errors (`amd`, `dcu`).
    fn name(&self) -> &'static str;

    /// The devices present now, in registration order.
    fn list(&self) -> Result<Vec<Self::Device>, BackendError>;

    /// The registered ID of `device` (the catalog's key).
    fn id(device: &Self::Device) -> String;

    /// The framework's view of the devices, with their current health.
    fn physical(&self, devices: &[Self::Device]) -> Vec<PhysicalDevice>;
}

/// The backend of a [`TreeDevices`] source.
pub struct TreeBackend<T: TreeDevices> {
    source: Arc<T>,
    catalog: Arc<Catalog<T::Device>>,
    poll: Duration,
}

impl<T: TreeDevices> std::fmt::Debug for TreeBackend<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeBackend")
            .field("source", &self.source.name())
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl<T: TreeDevices> TreeBackend<T> {
    /// Re-reads `source` every `poll` while watching.
    pub fn new(source: T, poll: Duration) -> Self {
        TreeBackend {
            source: Arc::new(source),
            catalog: Arc::default(),
            poll,
        }
    }

    /// The devices of the last discovery, by registered ID (for the vendor's hook).
    pub fn catalog(&self) -> Arc<Catalog<T::Device>> {
        self.catalog.clone()
    }

    /// The devices the node would register now.
    pub fn devices(&self) -> Result<Vec<T::Device>, BackendError> {
        self.source.list()
    }
}

/// Lists the devices, refreshes the catalog (the hook's facts follow every discovery,
/// also when the devices kubelet sees stay the same) and converts them.
fn read<T: TreeDevices>(
    source: &T,
    catalog: &Catalog<T::Device>,
) -> Result<Vec<PhysicalDevice>, BackendError> {
    let devices = source.list()?;
    catalog.replace(&devices, T::id);
    Ok(source.physical(&devices))
}

impl<T: TreeDevices> DeviceBackend for TreeBackend<T> {
    fn name(&self) -> &str {
        self.source.name()
    }

    fn discover(&self) -> Result<Vec<PhysicalDevice>, BackendError> {
        read(self.source.as_ref(), &self.catalog)
    }

    /// Re-reads the tree every poll interval and sends the device list when it changed
    /// (a device or device node gone, a partition change).
    fn watch(
        &self,
        devices: &[PhysicalDevice],
        events: mpsc::Sender<BackendEvent>,
        shutdown: CancellationToken,
    ) -> Result<(), BackendError> {
        let (source, catalog) = (self.source.clone(), self.catalog.clone());
        crate::backend::spawn_rediscovery(
            self.source.name(),
            self.poll,
            devices,
            events,
            shutdown,
            move || read(source.as_ref(), &catalog),
        );
        Ok(())
    }
}
