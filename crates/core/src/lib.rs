//! hami-core: the pure domain of hami-rs.
//!
//! No I/O, no async, no Kubernetes client: services feed it objects and get back decisions.

pub mod annotations;
pub mod codec;
pub mod model;
