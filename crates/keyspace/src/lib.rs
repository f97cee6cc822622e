//! # shardplane-keyspace
//!
//! Owns where an object lives: its [`ObjectKey`], the xxh3-64 placement hash of that key, the
//! half-open [`HashRange`]s of the 2^64 hash space and sets of them ([`RangeSet`]), the etcd key
//! layout that keeps one shard's part of one resource contiguous ([`etcd_layout`]), and the
//! KEP-5866 `shardSelector` grammar ([`shard_selector`]), which filters by FNV-1a 64 of an
//! object's uid or namespace and is orthogonal to placement.
//!
//! It must never do I/O, know about HTTP, or depend on any other shardplane crate: everything above
//! it agrees on placement by calling into this crate, so it stays small, pure and exhaustively
//! tested.

pub mod etcd_layout;
mod key;
mod range;
pub mod shard_selector;

pub use key::{ObjectKey, placement_hash};
pub use range::{HashRange, RangeError, RangeSet, HASH_SPACE_END};
