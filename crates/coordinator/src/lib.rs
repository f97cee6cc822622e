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
//!   resourceVersion only below every shard's in-band progress mark (I2, I5);
//! - [`handover`]: switching a merged watch stream to a new map's shards at its watermark with
//!   no gap and no repeat (RFC 0006);
//! - [`rebalance`]: membership and rebalancing decisions (RFC 0006): the next map from the
//!   stored one and the live members, and the operator's requests as map edits;
//! - [`service`]: the coordinator process: leader election on an etcd lease, then
//!   [`rebalance::step`] applied by compare-and-swap whenever the map or the members change.
//!
//! It must never speak HTTP: the router feeds it what shards said and acts on what it returns.
//! Only [`map_store`] and [`service`] talk to etcd, and only [`service`] reads a clock; the
//! decisions themselves are pure functions, tested against models.

pub mod handover;
pub mod list_merge;
pub mod map_store;
pub mod range_map;
pub mod rebalance;
pub mod service;
pub mod watch_merge;
