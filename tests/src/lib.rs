//! hami-e2e: the demo cluster behind `cargo xtask demo` and the end-to-end tests.
//!
//! [`DemoCluster::start`] runs, in this process and with no real cluster:
//!
//! - the test kit's API server emulator, which calls mutating admission webhooks on pod
//!   creation exactly as kube-apiserver does;
//! - our real **hami-webhook** over HTTPS with a CA made at start, registered through a
//!   `MutatingWebhookConfiguration` like the chart's (`caBundle`, `hami.io/webhook NotIn
//!   [ignore]` selectors, `failurePolicy: Fail`);
//! - our real **hami-scheduler** (the extender) and the test kit's kube-scheduler emulator
//!   configured as the chart configures kube-scheduler (`filterVerb: filter`, `bindVerb:
//!   bind`, `nodeCacheCapable: true`, every managed resource `ignoredByScheduler`);
//! - per node: a kubelet emulator in its own device-plugin directory, our real
//!   **hami-device-plugin-nvidia** on the fake backend, and a node agent that does what
//!   kubelet does after a pod is bound (device-manager admission, which calls the plugin's
//!   GetPreferredAllocation and Allocate, then the pod's status; node allocatable from the
//!   registered devices), a fake workload writing HAMi-core shared regions for the
//!   running containers, and our real **hami-vgpu-monitor** reading them.
//!
//! Every component can be stopped, started and restarted on its own. [`scenario`] holds
//! the example pods with what each must get, [`report`] reads back where pods landed,
//! which GPUs and environment they got, and per-GPU usage, and checks the invariants;
//! [`usage`] scrapes the monitors and checks each container's use against its grant.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use hami_e2e::{ClusterSpec, DemoCluster, scenario};
//! let cluster = DemoCluster::start(ClusterSpec::demo()).await?;
//! let outcome = scenario::run(&cluster, &scenario::demo_examples()).await;
//! println!("{}", outcome.report.render_text());
//! cluster.shutdown().await?;
//! # Ok(()) }
//! ```

mod agent;
pub mod chaos;
pub mod cluster;
mod component;
mod extender;
pub mod http;
pub mod node;
pub mod quota;
pub mod report;
pub mod scenario;
pub mod spec;
pub mod usage;
pub mod vendor_examples;
mod vendor_plugin;
pub mod webhook;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;

pub use cluster::{DemoCluster, Settled};
pub use component::HarnessError;
pub use extender::StandaloneExtender;
pub use node::EmulatedNode;
pub use spec::{ClusterSpec, GpuSpec, NodeSpec, Timing};

/// Installs rustls' ring provider once per process (the webhook's TLS and the emulator's
/// webhook client need one).
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Binds `addr` again after the component that held it stopped: a restarted component
/// keeps its address, as a Service or a fixed container port does.
pub(crate) async fn rebind(addr: SocketAddr, what: &str) -> Result<TcpListener, HarnessError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(%addr, error = %e, "{what}: address still busy; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                return Err(HarnessError::Io {
                    what: format!("binding {addr} again for the {what}"),
                    source: e,
                });
            }
        }
    }
}
