//! hami-core: the pure domain of hami-rs.
//!
//! No I/O, no async, no Kubernetes client: services feed it objects and get back
//! decisions. Layers, bottom up: [`model`] and [`codec`] (HAMi's wire formats),
//! [`config`], [`request`] and [`resources`] (what pods ask for), [`vendor`] (what differs per
//! accelerator), [`fit`], [`score`] and [`policy`] (one node), [`accounting`],
//! [`holding`] and [`ledger`] (usage), [`quota`] (namespace limits), [`engine`] (one pod
//! over many nodes), [`explain`] and [`view`] (placements and usage as people read them).
//! [`pod`] holds the rules about pods every component shares, [`sync`] the one
//! poison-tolerant locking rule every crate uses. Beside them, [`shared_region`]:
//! HAMi-core's per-container cache file, as the node monitor reads it.

pub mod accounting;
pub mod annotations;
pub mod codec;
pub mod config;
pub mod engine;
pub mod explain;
pub mod fit;
pub mod frag;
pub mod holding;
pub mod ledger;
pub mod model;
pub mod pod;
pub mod policy;
pub mod quota;
pub mod reason;
pub mod request;
pub mod resources;
pub mod score;
pub mod shared_region;
pub mod sync;
pub mod vendor;
pub mod view;
