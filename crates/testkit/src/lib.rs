//! Test kit for hami-rs: an in-process Kubernetes API server emulator that the
//! real `kube::Client` talks to over plain HTTP on 127.0.0.1, and a kubelet
//! device-manager emulator ([`kubelet`]) that device plugins talk to over unix sockets.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let server = hami_testkit::ApiServer::start().await?;
//! println!("point kube::Config::new at {}", server.url());
//! # Ok(()) }
//! ```

pub mod admission;
pub mod defaulting;
pub mod discovery;
pub mod emulator;
pub mod faults;
pub mod fixture;
mod http;
pub mod httpclient;
pub mod kubelet;
pub mod negotiate;
pub mod openapi;
pub mod patch;
pub mod plugin_node;
pub mod resources;
mod routes;
pub mod scale;
pub mod scheduler;
pub mod selectors;
pub mod status;
pub mod store;
pub mod table;
pub mod vendor_node;
mod watch;

pub use admission::Services;
pub use faults::{Fault, Faults, RequestRecord};
pub use http::{ApiServer, Options};
pub use status::ApiError;
pub use store::{DeleteOptions, GraceExpiry, Store};
