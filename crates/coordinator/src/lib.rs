//! # shardplane-coordinator
//!
//! Owns the logic that spans shards, as a library with no HTTP so it can be tested exhaustively
//! against models:
//! - [`range_map`]: which shard owns which hash range in an epoch (I1);
//! - [`map_store`]: the range map stored in etcd: when the epoch rises, and compare-and-swap
//!   publication (its only I/O, through `shardplane-storage`);
//! - [`list_merge`]: one LIST page from K shard pages read at one revision, in (namespace, name)
//!   order (I3, I4);
//! - [`watch_merge`]: one watch stream from K shard streams, released in strictly increasing
//!   resourceVersion only below every shard's in-band progress mark (I2, I5).
//!
//! It must never speak HTTP or read a clock: the router feeds it what shards said and acts on
//! what it returns; only [`map_store`] talks to etcd. Membership and rebalancing (issue #6) will live beside these modules.

pub mod list_merge;
pub mod map_store;
pub mod range_map;
pub mod watch_merge;
