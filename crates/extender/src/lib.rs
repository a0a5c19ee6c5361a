//! hami-scheduler: the kube-scheduler extender of hami-rs.
//!
//! kube-scheduler calls [`service::Extender::filter`] and [`service::Extender::bind`]
//! over HTTP ([`wire`] has the protocol). Decisions come from hami-core's placement
//! engine over [`state::SchedState`], which watches of nodes and pods keep current
//! ([`watch`]); [`housekeeping`] takes nodes whose device plugin stopped reporting out of
//! scheduling ([`health`]) and expires reservations that were never bound. The `frag`
//! policies read each node's CPU and memory ([`pod_resources`]) and a typical workload
//! learnt from the pods seen ([`frag_workload`]).

pub mod bind;
pub mod bind_mark;
pub mod cli;
pub mod dashboard;
pub mod filter;
pub mod filter_report;
pub mod frag_workload;
pub mod health;
mod hot_client;
pub mod housekeeping;
pub mod leader;
pub mod metrics;
pub mod pod_resources;
pub mod run;
mod scrape_blocks;
mod scrape_view;
pub mod service;
pub mod slim;
pub mod state;
pub mod unschedulable;
pub mod watch;
pub mod wire;
