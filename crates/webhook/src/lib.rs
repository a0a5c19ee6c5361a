//! hami-webhook: the mutating admission webhook of hami-rs.
//!
//! Pods that ask for shared GPUs are routed to hami-scheduler, get HAMi's defaults
//! (GPU count, exclusive cores, HAMi-core environment), and are refused when they are
//! unsafe (privileged containers, a preset node) or try to forge the scheduler's
//! allocation annotations. [`rules`] holds the decisions as pure functions,
//! [`handler`] the HTTP side, [`run`] the service, [`certgen`] the certificate
//! bootstrap.

pub mod certgen;
pub mod cli;
pub mod handler;
pub mod metrics;
pub mod patch;
pub mod review;
pub mod rules;
pub mod run;
