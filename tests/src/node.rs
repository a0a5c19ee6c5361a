//! One emulated node: a kubelet emulator in its own device-plugin directory, our real
//! NVIDIA device plugin on the fake backend, the node agent, the fake workload (HAMi-core
//! shared regions for the running containers) and our real vGPU monitor. An AMD or DCU
//! node runs that vendor's real plugin on a fake sysfs/dev tree instead, and no workload
//! or monitor (both read HAMi-core's NVIDIA shared regions).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hami_device_plugin::{Metrics, Plugin, PluginConfig, PluginStatus};
use hami_device_plugin_nvidia::cli::ConfigArgs;
use hami_device_plugin_nvidia::fake::FakeBackend;
use hami_device_plugin_nvidia::settings::{self, Loaded};
use hami_device_plugin_nvidia::workload::WorkloadSettings;
use hami_server::supervise::RestartPolicy;
use hami_testkit::kubelet::{Kubelet, KubeletOptions};
use hami_vgpu_monitor::run::Settings as MonitorSettings;
use hami_vgpu_monitor::scan::ScanSettings;
use kube::Client;
use prometheus_client::registry::Registry;
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::component::{HarnessError, Running};
use crate::spec::{ClusterSpec, NodeSpec};
use crate::vendor_plugin::VendorPlugin;

/// How long a device plugin may take to register and publish its GPUs.
const PLUGIN_START: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub(crate) struct RunningPlugin {
    pub running: Running,
    pub status: watch::Receiver<PluginStatus>,
}

/// A node and its parts.
#[derive(Debug)]
pub struct EmulatedNode {
    pub spec: NodeSpec,
    /// Kubelet's device plugin directory (holds `kubelet.sock` and the plugin's socket).
    pub plugin_dir: PathBuf,
    /// The fake backend's device file (edit it to change the GPUs' health).
    pub device_file: PathBuf,
    /// HAMi-core's host directory (`HOOK_PATH`).
    pub hook_path: PathBuf,
    pub(crate) plugin_cfg: PluginConfig,
    /// The AMD or DCU plugin this node runs instead of the NVIDIA one.
    pub(crate) vendor_plugin: Option<VendorPlugin>,
    pub(crate) kubelet: Arc<Kubelet>,
    pub(crate) plugin: Option<RunningPlugin>,
    pub(crate) agent: Option<Running>,
    pub(crate) workload: Option<Running>,
    pub(crate) monitor: Option<RunningMonitor>,
}

#[derive(Debug)]
pub(crate) struct RunningMonitor {
    pub running: Running,
    /// `/metrics`, `/readyz`.
    pub addr: SocketAddr,
}

impl EmulatedNode {
    /// Creates the node's directories, files and Node object, and starts its kubelet
    /// emulator (the plugin and the agent are started by [`EmulatedNode::start_plugin`]
    /// and [`EmulatedNode::start_agent`]).
    pub(crate) async fn create(
        spec: &ClusterSpec,
        node: &NodeSpec,
        root: &Path,
        client: &Client,
    ) -> Result<Self, HarnessError> {
        let dir = root.join(&node.name);
        let plugin_dir = dir.join("dp");
        let hook_path = dir.join("hook");
        for d in [&plugin_dir, &hook_path] {
            std::fs::create_dir_all(d)
                .map_err(HarnessError::io(format!("creating {}", d.display())))?;
        }
        let device_file = dir.join("devices.yaml");
        std::fs::write(&device_file, node.device_file()).map_err(HarnessError::io(format!(
            "writing {}",
            device_file.display()
        )))?;
        let args = ConfigArgs {
            config_file: None,
            node_config_file: dir.join("config.json"),
            hook_path: hook_path.clone(),
            libvgpu_version: None,
        };
        let loaded = Loaded {
            nvidia: spec.devices.nvidia.clone(),
            node: None,
        };
        let vendor_plugin = VendorPlugin::prepare(
            node,
            &dir.join("tree"),
            &plugin_dir,
            spec.timing.register_interval,
        )?;
        let plugin_cfg = match &vendor_plugin {
            Some(v) => v.config(&node.name)?,
            None => settings::plugin_config(
                &loaded,
                &args,
                &node.name,
                &plugin_dir,
                spec.timing.register_interval,
            )
            .map_err(|e| HarnessError::Setup(format!("device plugin settings: {e}")))?,
        };

        let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
        let object: k8s_openapi::api::core::v1::Node = serde_json::from_value(node_object(node))
            .map_err(|e| HarnessError::Setup(format!("node object {}: {e}", node.name)))?;
        api.create(&kube::api::PostParams::default(), &object)
            .await
            .map_err(HarnessError::kube(format!("creating node {}", node.name)))?;

        let kubelet = Kubelet::start_in(
            &plugin_dir,
            KubeletOptions {
                node_name: Some(node.name.clone()),
                ..KubeletOptions::default()
            },
        )
        .await
        .map_err(HarnessError::io(format!(
            "kubelet emulator of {}",
            node.name
        )))?;
        Ok(Self {
            spec: node.clone(),
            plugin_dir,
            device_file,
            hook_path,
            plugin_cfg,
            vendor_plugin,
            kubelet: Arc::new(kubelet),
            plugin: None,
            agent: None,
            workload: None,
            monitor: None,
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The kubelet emulator (allocations, plugin calls, registrations).
    pub fn kubelet(&self) -> &Kubelet {
        &self.kubelet
    }

    /// The resource its device plugin publishes and how many of it (devices × split).
    pub fn resource(&self) -> (&str, usize) {
        let devices = self.spec.device_ids().len();
        (
            &self.plugin_cfg.resource_name,
            devices * self.plugin_cfg.split_count as usize,
        )
    }

    /// The device root an AMD or DCU plugin names host paths under (`None` on NVIDIA).
    pub fn vendor_dev_root(&self) -> Option<PathBuf> {
        self.vendor_plugin.as_ref().map(VendorPlugin::dev_root)
    }

    /// Starts the device plugin and waits until it registered with kubelet and
    /// published the node's GPUs.
    pub(crate) async fn start_plugin(&mut self, client: &Client) -> Result<(), HarnessError> {
        if self.plugin.is_some() {
            return Ok(());
        }
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let plugin = match &self.vendor_plugin {
            Some(v) => v.plugin(self.plugin_cfg.clone(), client.clone(), metrics)?,
            None => {
                let backend = Arc::new(FakeBackend::new(&self.device_file));
                let events = hami_k8s::events::Recorder::new(
                    client.clone(),
                    "hami-device-plugin",
                    &self.spec.name,
                );
                Plugin::new(self.plugin_cfg.clone(), backend, client.clone(), metrics)
                    .map_err(|e| {
                        HarnessError::Setup(format!("device plugin of {}: {e}", self.spec.name))
                    })?
                    .with_events(events)
            }
        };
        let mut status = plugin.status();
        let stop = CancellationToken::new();
        let running = Running::spawn(
            format!("hami-device-plugin on {}", self.spec.name),
            stop.clone(),
            plugin.run(stop),
        );
        let ready = tokio::time::timeout(
            PLUGIN_START,
            status.wait_for(|s| s.registered && s.published),
        )
        .await
        .is_ok_and(|r| r.is_ok());
        let last = status.borrow().clone();
        self.plugin = Some(RunningPlugin { running, status });
        if ready {
            Ok(())
        } else {
            Err(HarnessError::Setup(format!(
                "device plugin of {} not registered and published after {PLUGIN_START:?} (last status: {last:?})",
                self.spec.name
            )))
        }
    }

    /// Stops the device plugin gracefully (it withdraws its GPUs and its socket).
    pub(crate) async fn stop_plugin(&mut self) -> Result<(), HarnessError> {
        match self.plugin.take() {
            Some(p) => p.running.stop().await,
            None => Ok(()),
        }
    }

    /// The running plugin's registration and publishing progress (None while it is stopped).
    pub fn plugin_status(&self) -> Option<PluginStatus> {
        self.plugin.as_ref().map(|p| p.status.borrow().clone())
    }

    pub(crate) async fn wait_plugin_registrations(
        &mut self,
        at_least: u64,
        timeout: Duration,
    ) -> Result<(), HarnessError> {
        let Some(p) = self.plugin.as_mut() else {
            return Err(HarnessError::Setup(format!(
                "no device plugin runs on {}",
                self.spec.name
            )));
        };
        match PluginStatus::wait_registered(&mut p.status, at_least, timeout).await {
            Ok(()) => Ok(()),
            Err(last) => Err(HarnessError::Setup(format!(
                "device plugin of {} did not register {at_least} time(s) within {timeout:?} (status: {last:?})",
                self.spec.name,
            ))),
        }
    }

    pub(crate) fn start_agent(&mut self, client: &Client) {
        if self.agent.is_some() {
            return;
        }
        let stop = CancellationToken::new();
        self.agent = Some(Running::spawn(
            format!("node agent of {}", self.spec.name),
            stop.clone(),
            crate::agent::run(
                client.clone(),
                self.spec.name.clone(),
                self.kubelet.clone(),
                stop,
            ),
        ));
    }

    pub(crate) async fn stop_agent(&mut self) -> Result<(), HarnessError> {
        match self.agent.take() {
            Some(a) => a.stop().await,
            None => Ok(()),
        }
    }

    /// Starts the fake workload: HAMi-core shared regions for this node's running
    /// containers that hold GPUs, rewritten every `interval`.
    pub(crate) fn start_workload(&mut self, client: &Client, interval: Duration) {
        if self.workload.is_some() {
            return;
        }
        let stop = CancellationToken::new();
        let settings = WorkloadSettings {
            node: self.spec.name.clone(),
            hook_path: self.hook_path.clone(),
            interval,
        };
        self.workload = Some(Running::spawn(
            format!("fake workload of {}", self.spec.name),
            stop.clone(),
            hami_device_plugin_nvidia::workload::run(client.clone(), settings, stop),
        ));
    }

    /// Starts the vGPU monitor on `<hook>/vgpu/containers` (where the plugin's Allocate
    /// creates the container directories) with the fake backend's device file.
    pub(crate) fn start_monitor(
        &mut self,
        client: &Client,
        interval: Duration,
    ) -> Result<(), HarnessError> {
        if self.monitor.is_some() {
            return Ok(());
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(HarnessError::io("binding the monitor's metrics port"))?;
        let addr = listener
            .local_addr()
            .map_err(HarnessError::io("the monitor's metrics address"))?;
        let vgpu = self.hook_path.join("vgpu");
        let settings = MonitorSettings {
            node: self.spec.name.clone(),
            scan: ScanSettings {
                containers_dir: vgpu.join("containers"),
                resync_interval: Duration::from_secs(300),
                mig_apply_lock: vgpu.join("hami-mig-apply.lock"),
            },
            scan_interval: interval,
            feedback_interval: Some(interval),
            legacy_metrics: false,
            restart: RestartPolicy::default(),
        };
        let stop = CancellationToken::new();
        let activity = Arc::new(FakeBackend::new(&self.device_file));
        let (_, supervisor) = hami_vgpu_monitor::run::start(
            settings,
            activity,
            client.clone(),
            listener,
            stop.clone(),
        )
        .map_err(|e| HarnessError::Setup(format!("vGPU monitor of {}: {e}", self.spec.name)))?;
        self.monitor = Some(RunningMonitor {
            running: Running::spawn(
                format!("hami-vgpu-monitor on {}", self.spec.name),
                stop,
                supervisor.run(),
            ),
            addr,
        });
        Ok(())
    }

    /// The monitor's `/metrics` address, while it runs.
    pub fn monitor_addr(&self) -> Option<SocketAddr> {
        self.monitor.as_ref().map(|m| m.addr)
    }

    /// Stops everything on the node.
    pub(crate) async fn stop(&mut self) -> Result<(), HarnessError> {
        let monitor = match self.monitor.take() {
            Some(m) => m.running.stop().await,
            None => Ok(()),
        };
        let workload = match self.workload.take() {
            Some(w) => w.stop().await,
            None => Ok(()),
        };
        let agent = self.stop_agent().await;
        let plugin = self.stop_plugin().await;
        self.kubelet.stop().await;
        monitor.and(workload).and(agent).and(plugin)
    }
}

/// The Node as kubelet registers it, before any device plugin: no GPUs yet.
fn node_object(node: &NodeSpec) -> Value {
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut labels: Map<String, Value> = node
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
        .collect();
    labels.insert("kubernetes.io/hostname".into(), node.name.clone().into());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.insert("kubernetes.io/arch".into(), "amd64".into());
    let resources =
        json!({"cpu": "32", "memory": "131072Mi", "pods": "110", "ephemeral-storage": "200Gi"});
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }],
            "addresses": [{"type": "Hostname", "address": node.name}],
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "6.8.0",
                "osImage": "Ubuntu 24.04 LTS", "containerRuntimeVersion": "containerd://2.0.0",
                "kubeletVersion": "v1.34.0", "kubeProxyVersion": "",
                "operatingSystem": "linux", "architecture": "amd64",
            },
        },
    })
}
