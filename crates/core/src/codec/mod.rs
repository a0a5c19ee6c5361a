//! Byte-exact encoders and decoders of HAMi's annotation values.
//!
//! Every decoder takes untrusted text (annotations are written by other programs and by
//! people) and returns a typed [`CodecError`] naming the offending text; none panics. Every
//! encoder writes what HAMi's Go components write, so a cluster can mix our components with
//! HAMi's.

mod error;
mod gofmt;
mod json;

pub mod gobool;
pub mod handshake;
pub mod mig;
pub mod node_lock;
pub mod node_register;
pub mod pod_devices;
pub mod scoring_weights;
pub mod selectors;
pub mod topology;

pub use error::{CodecError, GoNumError, NumErrorKind};
pub use gobool::parse_go_bool;
pub use handshake::{Handshake, decode_handshake, encode_requesting};
pub use mig::{MigAllocation, decode_mig_allocations, encode_mig_allocations};
pub use node_lock::{LockOwner, NodeLock, decode_node_lock, encode_node_lock, release_allowed};
pub use node_register::{
    decode_node_register, decode_node_register_json, decode_node_register_legacy,
    encode_node_register_json, encode_node_register_legacy,
};
pub use pod_devices::{
    decode_container_devices, decode_pod_single_device, encode_container_devices,
    encode_pod_single_device,
};
pub use scoring_weights::{ScoringWeights, decode_scoring_weights, encode_scoring_weights};
pub use selectors::{DeviceSelector, SelectorKeys, parse_comma_list, parse_device_cordon};
pub use topology::{
    DeviceTopologyScore, PairScores, decode_topology_scores, encode_topology_scores,
};
