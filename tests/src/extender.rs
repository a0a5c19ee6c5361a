//! The real extender (hami-scheduler) on a fixed loopback port, and the emulated
//! kube-scheduler configured the way the chart's `KubeSchedulerConfiguration` is.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hami_core::config::DeviceConfig;
use hami_core::engine::SchedulerDefaults;
use hami_core::vendor::Vendor;
use hami_core::vendor::amd::Amd;
use hami_core::vendor::hygon::Hygon;
use hami_scheduler::cli::DEFAULT_BODY_LIMIT;
use hami_scheduler::run::{Service, serve_service, serve_service_at};
use hami_scheduler::service::Settings;
use hami_server::TlsConfig;
use hami_server::supervise::RestartPolicy;
use hami_testkit::scheduler::{ExtenderConfig, ManagedResource, SchedulerConfig};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::component::{HarnessError, Running};
use crate::spec::{ClusterSpec, NodeVendor};

/// The extender as it runs now: its task and its admin address (/readyz, /metrics).
#[derive(Debug)]
pub(crate) struct RunningExtender {
    pub running: Running,
    pub admin: SocketAddr,
}

#[derive(Debug)]
pub(crate) struct ExtenderSetup {
    pub addr: SocketAddr,
    devices: DeviceConfig,
    settings: Settings,
    registry_interval: Duration,
}

impl ExtenderSetup {
    /// Reserves the extender's port (kube-scheduler's configuration names it, so it never
    /// changes) and returns its first listener.
    pub async fn prepare(spec: &ClusterSpec) -> Result<(Self, TcpListener), HarnessError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(HarnessError::io("binding the extender port"))?;
        let addr = listener
            .local_addr()
            .map_err(HarnessError::io("extender address"))?;
        // The binary's defaults (see `hami-scheduler --help`), except where the spec's
        // timing says otherwise.
        let settings = Settings {
            scheduler_name: spec.scheduler_name.clone(),
            defaults: SchedulerDefaults::default(),
            node_lock_timeout: Duration::from_secs(300),
            node_lock_wait: spec.timing.node_lock_wait,
            reservation_timeout: Duration::from_secs(120),
            body_limit: DEFAULT_BODY_LIMIT,
            sync_wait: Duration::from_secs(10),
        };
        Ok((
            Self {
                addr,
                devices: spec.devices.clone(),
                settings,
                registry_interval: spec.timing.registry_interval,
            },
            listener,
        ))
    }

    /// Starts with empty memory (it rebuilds its ledger from the pods' annotations) and
    /// waits until it is ready.
    pub async fn start(
        &self,
        api: impl Into<Connect>,
        listener: Option<TcpListener>,
    ) -> Result<RunningExtender, HarnessError> {
        let ext = self.spawn(api, listener).await?;
        wait_ready(&ext).await?;
        Ok(ext)
    }

    /// Starts with empty memory, without waiting for it to be ready.
    pub async fn spawn(
        &self,
        api: impl Into<Connect>,
        listener: Option<TcpListener>,
    ) -> Result<RunningExtender, HarnessError> {
        let listener = match listener {
            Some(l) => l,
            None => crate::rebind(self.addr, "extender").await?,
        };
        let admin_listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(HarnessError::io("binding the extender admin port"))?;
        let admin = admin_listener
            .local_addr()
            .map_err(HarnessError::io("extender admin address"))?;
        let svc = Service {
            listener,
            admin_listener,
            tls: TlsConfig::None,
            devices: self.devices.clone(),
            settings: self.settings.clone(),
            node_label_selector: None,
            registry_interval: self.registry_interval,
            handshake_timeout: Duration::from_secs(60),
            leader_lease: None,
            legacy_metrics: false,
            dedicated_http_thread: true,
            // The dashboard on the admin port: `cargo xtask demo --ui` and the browser
            // tests open it.
            ui: true,
            admin_tls: TlsConfig::None,
            restart: RestartPolicy::default(),
        };
        let stop = CancellationToken::new();
        let running = match api.into() {
            Connect::Client(client) => Running::spawn(
                "hami-scheduler",
                stop.clone(),
                serve_service(svc, client, stop),
            ),
            Connect::Config(config) => Running::spawn(
                "hami-scheduler",
                stop.clone(),
                serve_service_at(svc, *config, stop),
            ),
        };
        Ok(RunningExtender { running, admin })
    }
}

/// How the extender reaches the API server: a client, or the config of one, from which
/// /bind makes its own client on the HTTP thread as the binary does.
pub enum Connect {
    Client(kube::Client),
    Config(Box<kube::Config>),
}

impl From<kube::Client> for Connect {
    fn from(client: kube::Client) -> Self {
        Connect::Client(client)
    }
}

impl From<kube::Config> for Connect {
    fn from(config: kube::Config) -> Self {
        Connect::Config(Box::new(config))
    }
}

/// The real extender alone over an API server, without kube-scheduler, nodes or device
/// plugins: for tests that only read it (the dashboard of a large cluster).
#[derive(Debug)]
pub struct StandaloneExtender {
    running: RunningExtender,
}

impl StandaloneExtender {
    /// Starts it as the demo cluster does (`spec`'s settings, dashboard on), ready.
    pub async fn start(spec: &ClusterSpec, client: kube::Client) -> Result<Self, HarnessError> {
        let (setup, listener) = ExtenderSetup::prepare(spec).await?;
        let running = setup.start(client, Some(listener)).await?;
        Ok(StandaloneExtender { running })
    }

    /// The admin address (/readyz, /metrics, /ui, /api/v1).
    pub fn admin(&self) -> SocketAddr {
        self.running.admin
    }

    pub async fn stop(self) -> Result<(), HarnessError> {
        self.running.running.stop().await
    }
}

/// Waits for /readyz (node, pod and resourcequota caches synced).
pub(crate) async fn wait_ready(ext: &RunningExtender) -> Result<(), HarnessError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok((200, _)) = crate::http::get(ext.admin, "/readyz").await {
            return Ok(());
        }
        if ext.running.is_finished() {
            return Err(HarnessError::Setup(
                "hami-scheduler stopped before it was ready".into(),
            ));
        }
        if Instant::now() > deadline {
            return Err(HarnessError::Setup(
                "hami-scheduler not ready after 30s".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The resources of the cluster's AMD and DCU nodes' vendors (the chart's
/// `scheduler.extraManagedResources` when those plugins are enabled).
fn vendor_resources(spec: &ClusterSpec) -> Vec<String> {
    spec.nodes
        .iter()
        .flat_map(|n| match n.vendor {
            NodeVendor::Nvidia => Vec::new(),
            NodeVendor::Amd { .. } => Amd::new(spec.devices.amd.clone()).resource_names(),
            NodeVendor::Dcu { .. } => Hygon::new(spec.devices.hygon.clone()).resource_names(),
        })
        .collect()
}

/// kube-scheduler's configuration as the chart renders it: one profile, one extender
/// with `filterVerb: filter`, `bindVerb: bind`, `nodeCacheCapable: true` and every
/// resource the extender owns `ignoredByScheduler`.
pub(crate) fn scheduler_config(spec: &ClusterSpec, extender: SocketAddr) -> SchedulerConfig {
    let nv = &spec.devices.nvidia;
    let managed = [
        &nv.resource_count_name,
        &nv.resource_memory_name,
        &nv.resource_core_name,
        &nv.resource_memory_percentage_name,
        &nv.resource_priority_name,
    ]
    .into_iter()
    .cloned()
    .chain(vendor_resources(spec))
    .fold(Vec::<String>::new(), |mut names, name| {
        if !names.contains(&name) {
            names.push(name);
        }
        names
    })
    .into_iter()
    .map(|name| ManagedResource {
        name,
        ignored_by_scheduler: true,
    })
    .collect();
    let mut cfg = SchedulerConfig::new(&spec.scheduler_name).with_extender(ExtenderConfig {
        url_prefix: format!("http://{extender}"),
        filter_verb: "filter".into(),
        bind_verb: "bind".into(),
        node_cache_capable: true,
        managed_resources: managed,
        ignorable: false,
        http_timeout: Duration::from_secs(30),
        ca_pem: None,
    });
    cfg.initial_backoff = spec.timing.initial_backoff;
    cfg.max_backoff = spec.timing.max_backoff;
    cfg
}
