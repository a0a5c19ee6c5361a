//! hami-server: the HTTP plumbing every hami-rs service shares.
//!
//! - [`serve`]: an HTTP/1.1 server on a `TcpListener`, plain or TLS (rustls with the
//!   ring provider, TLS 1.2+), whose certificate and key are re-read when the files
//!   change (cert-manager and Secret volume rotation), with graceful shutdown driven by
//!   a [`CancellationToken`].
//! - [`body::read_bounded`]: request bodies read up to a limit (413 past it).
//! - [`flags`]: Go-style duration and listen-address flag values; [`args`]: the flag
//!   groups every binary flattens (logging, admin listener, Kubernetes client).
//! - [`device_config`]: HAMi's `device-config.yaml` read from a file, for every binary.
//! - [`respond`]: small JSON/text response helpers; [`chunked::ChunkedBody`]: a body sent
//!   as a list of chunks.
//! - [`admin`]: the admin port (`/livez`, `/readyz`, `/metrics`); [`metrics_page`]: the
//!   `/metrics` page as chunks, plain or gzip; [`build_info`]: HAMi's `hami_build_info`
//!   series.
//! - [`listener::Relistener`]: a bound socket a supervised server is started again on.
//! - [`low_priority`]: threads at the lowest CPU priority (`SCHED_IDLE`), for a scrape.
//! - [`trace::init_tracing`]: text or JSON logs; [`pod_span!`]: the span every call
//!   made for one pod runs in (`pod.namespace`, `pod.name`, `pod.uid`).
//! - [`shutdown::shutdown_on_signals`]: a token cancelled by SIGTERM or Ctrl-C.
//! - [`supervise::Supervisor`]: long-running tasks restarted with backoff, readiness
//!   showing why one is down, giving up (and exiting) when one keeps failing.
//! - [`certcheck::watch_certificate`]: readiness follows the validity of the
//!   certificate a TLS server serves.

pub mod admin;
pub mod args;
pub mod body;
pub mod build_info;
pub mod certcheck;
pub mod chunked;
pub mod device_config;
pub mod flags;
pub mod listener;
pub mod low_priority;
pub mod metrics_page;
pub mod respond;
pub mod serve;
pub mod shutdown;
pub mod supervise;
pub mod tls;
pub mod trace;

pub use serve::{Handler, HttpResponse, ServeError, ServeOptions, handler_fn, serve, serve_with};
pub use tls::TlsConfig;
pub use tokio_util::sync::CancellationToken;

#[cfg(feature = "test-support")]
pub mod test_support;
