//! What the device manager knows: endpoints, device sets per resource, and the devices given
//! to each pod's containers (kubelet's checkpoint, which survives a kubelet restart).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use hami_kubelet_api::v1beta1::device_plugin_client::DevicePluginClient;
use hami_kubelet_api::v1beta1::{ContainerAllocateResponse, Device, DevicePluginOptions};
use tokio::task::AbortHandle;
use tonic::transport::Channel;

/// One registered plugin, or the stopped placeholder kubelet keeps for a resource after a
/// restart until its plugin registers again.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// Unique per registration; ties ListAndWatch updates to the registration they belong to.
    pub id: u64,
    pub socket: Option<PathBuf>,
    pub client: Option<DevicePluginClient<Channel>>,
    /// What `GetDevicePluginOptions` answered (kubelet ignores the options sent in Register).
    pub options: Option<DevicePluginOptions>,
    pub stopped_at: Option<Instant>,
    pub watch_task: Option<AbortHandle>,
}

impl Endpoint {
    pub fn is_stopped(&self) -> bool {
        self.stopped_at.is_some() || self.client.is_none()
    }
}

/// Devices of one resource handed to one container, with the plugin's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceAllocation {
    /// Device IDs kubelet chose, sorted.
    pub devices: Vec<String>,
    /// The `ContainerAllocateResponse` the plugin returned for them.
    pub response: ContainerAllocateResponse,
}

/// Everything one container was given, keyed by resource name.
pub type ContainerResources = BTreeMap<String, ResourceAllocation>;

/// A registration attempt and how kubelet answered it.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistrationRecord {
    pub version: String,
    pub endpoint: String,
    pub resource_name: String,
    /// The options sent with Register (kubelet does not use them; see `GetDevicePluginOptions`).
    pub options: Option<DevicePluginOptions>,
    /// `None` while in progress, then `Ok` or kubelet's error text.
    pub result: Option<Result<(), String>>,
}

/// One call kubelet made to a plugin, for assertions.
#[derive(Debug, Clone, PartialEq)]
pub enum PluginCall {
    GetDevicePluginOptions {
        resource: String,
        result: Result<DevicePluginOptions, String>,
    },
    GetPreferredAllocation {
        resource: String,
        available: Vec<String>,
        must_include: Vec<String>,
        size: i32,
        result: Result<Vec<String>, String>,
    },
    Allocate {
        resource: String,
        pod_uid: String,
        container: String,
        devices: Vec<String>,
        result: Result<ContainerAllocateResponse, String>,
    },
    PreStartContainer {
        resource: String,
        container: String,
        devices: Vec<String>,
        result: Result<(), String>,
    },
}

/// The device sets of one resource as kubelet holds them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceState {
    pub healthy: BTreeSet<String>,
    pub unhealthy: BTreeSet<String>,
    /// The last device list the plugin sent (with topology), by ID.
    pub devices: BTreeMap<String, Device>,
    /// Devices given to pods.
    pub allocated: BTreeSet<String>,
    /// A plugin is registered and its endpoint is not stopped.
    pub connected: bool,
    /// The socket of the current (or last) registration.
    pub socket: Option<PathBuf>,
    /// The options of the current registration.
    pub options: Option<DevicePluginOptions>,
    /// How many ListAndWatch responses the current registration has delivered.
    pub updates: u64,
}

/// Capacity and allocatable of one resource as kubelet would write them into the node status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceCapacity {
    pub capacity: u64,
    pub allocatable: u64,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    next_id: u64,
    pub endpoints: BTreeMap<String, Endpoint>,
    pub all_devices: BTreeMap<String, BTreeMap<String, Device>>,
    pub healthy: BTreeMap<String, BTreeSet<String>>,
    pub unhealthy: BTreeMap<String, BTreeSet<String>>,
    pub updates: BTreeMap<String, u64>,
    /// pod UID → container name → resource → allocation.
    pub pods: BTreeMap<String, BTreeMap<String, ContainerResources>>,
    pub registrations: Vec<RegistrationRecord>,
    pub calls: Vec<PluginCall>,
}

impl State {
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// `genericDeviceUpdateCallback`: every response replaces the resource's device sets.
    pub fn replace_devices(&mut self, resource: &str, devices: Vec<Device>) {
        let mut healthy = BTreeSet::new();
        let mut unhealthy = BTreeSet::new();
        let mut all = BTreeMap::new();
        for dev in devices {
            if dev.health == hami_kubelet_api::HEALTHY {
                healthy.insert(dev.id.clone());
            } else {
                unhealthy.insert(dev.id.clone());
            }
            all.insert(dev.id.clone(), dev);
        }
        self.healthy.insert(resource.to_owned(), healthy);
        self.unhealthy.insert(resource.to_owned(), unhealthy);
        self.all_devices.insert(resource.to_owned(), all);
        *self.updates.entry(resource.to_owned()).or_default() += 1;
    }

    /// `PluginDisconnected`: every device of the resource becomes unhealthy and the endpoint
    /// is stopped (its resource disappears once the stop grace period has passed).
    pub fn disconnect(&mut self, resource: &str) {
        let Some(endpoint) = self.endpoints.get_mut(resource) else {
            return;
        };
        if endpoint.stopped_at.is_none() {
            endpoint.stopped_at = Some(Instant::now());
        }
        endpoint.client = None;
        let healthy = std::mem::take(self.healthy.entry(resource.to_owned()).or_default());
        self.unhealthy
            .entry(resource.to_owned())
            .or_default()
            .extend(healthy);
    }

    /// Devices of `resource` held by any pod (`podDevices.devices()`).
    pub fn allocated(&self, resource: &str) -> BTreeSet<String> {
        self.pods
            .values()
            .flat_map(|containers| containers.values())
            .filter_map(|resources| resources.get(resource))
            .flat_map(|a| a.devices.iter().cloned())
            .collect()
    }

    /// `isDevicePluginResource`: registered now, or still held by a pod.
    pub fn is_device_plugin_resource(&self, resource: &str) -> bool {
        self.healthy.contains_key(resource)
            || self
                .pods
                .values()
                .flat_map(|c| c.values())
                .any(|r| r.contains_key(resource))
    }

    pub fn resource_state(&self, resource: &str) -> Option<ResourceState> {
        let known = self.endpoints.contains_key(resource)
            || self.healthy.contains_key(resource)
            || self.unhealthy.contains_key(resource);
        if !known {
            return None;
        }
        let endpoint = self.endpoints.get(resource);
        Some(ResourceState {
            healthy: self.healthy.get(resource).cloned().unwrap_or_default(),
            unhealthy: self.unhealthy.get(resource).cloned().unwrap_or_default(),
            devices: self.all_devices.get(resource).cloned().unwrap_or_default(),
            allocated: self.allocated(resource),
            connected: endpoint.is_some_and(|e| !e.is_stopped()),
            socket: endpoint.and_then(|e| e.socket.clone()),
            options: endpoint.and_then(|e| e.options),
            updates: self.updates.get(resource).copied().unwrap_or_default(),
        })
    }
}
