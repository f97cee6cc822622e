//! # shardplane-shard
//!
//! Owns the shard process: the Kubernetes REST surface (discovery, CRUD, LIST, WATCH, status
//! subresources, namespace lifecycle, custom resources from CRDs) for the object keys whose placement hash falls in this
//! shard's ranges, served from one watch cache per resource and written through to etcd.
//!
//! It must never serve or cache a key outside its ranges (those get a 421 `NotOwned` Status that a
//! router acts on), never answer a read from a cache that has not reached the requested revision,
//! and never write to etcd except by compare-and-swap on the object's own key.

pub mod access;
mod admission;
mod apply;
mod binding;
mod component_status;
mod converted;
pub mod bootstrap;
pub mod cli;
pub mod crds;
mod disruption;
mod eviction;
mod flow_control;
mod garbage_collector;
pub mod informer;
pub mod rbac_aggregation;
mod kubelet;
pub mod membership;
pub mod namespace_admission;
pub mod namespaces;
pub mod read;
pub mod render;
pub mod resource_quota;
pub mod scale;
pub mod server;
mod service_accounts;
pub mod service_addresses;
pub mod shard;
mod sweep;
mod transaction;
pub mod watch;
pub mod write;
pub mod write_load;

pub use server::{serve, ShardConfig};
pub use shard::Shard;
