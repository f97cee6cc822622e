//! # shardplane-kvstore
//!
//! The zero-setup default (issue #7, RFC 0007): a store inside the router process that speaks
//! the part of the etcd v3 gRPC API the shards use, so the shards keep one storage path
//! (etcd-client) and `--etcd-endpoints` switches to a real etcd with no other change — as k3s
//! does with kine.
//! - [`mvcc`]: the multi-version key space with etcd's revision semantics (pure, in memory);
//! - [`store`]: durability: every write transaction's changes appended to a redb database
//!   before it is acknowledged, compaction folding old changes into a base, leases;
//! - [`server`]: the gRPC services (KV, Watch, Lease, Maintenance) on 127.0.0.1.
//!
//! It owns nothing of Kubernetes: keys and values are bytes. It must never acknowledge a write
//! before it is durable — except when opened with grouped commits (the liveness tier, RFC 0015),
//! whose bounded loss it states and whose restart never serves a lost revision — and never
//! answer a call it does not implement with anything but `Unimplemented` naming the call.

pub mod mvcc;
pub mod server;
pub mod store;
