//! The kubelet device plugin API, v1beta1, as tonic/prost types.
//!
//! Both sides live here: the `Registration` service kubelet serves (the test
//! kit's kubelet emulator implements it, device plugins call it) and the
//! `DevicePlugin` service every plugin serves (kubelet calls it), and [`unix`], the
//! unix-socket transport both sides use.

#[allow(
    missing_debug_implementations,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::doc_markdown
)]
pub mod v1beta1 {
    tonic::include_proto!("v1beta1");
}

/// The only API version kubelet accepts in `RegisterRequest.version`.
pub const VERSION: &str = "v1beta1";
/// Kubelet's registration socket, inside the device plugin directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// Kubelet's default device plugin directory.
pub const DEVICE_PLUGIN_PATH: &str = "/var/lib/kubelet/device-plugins";
/// `Device.health` of a usable device.
pub const HEALTHY: &str = "Healthy";
/// `Device.health` of a device kubelet must not hand out.
pub const UNHEALTHY: &str = "Unhealthy";

pub mod unix;
