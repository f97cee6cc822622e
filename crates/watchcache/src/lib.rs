//! # shardplane-watchcache
//!
//! Owns the in-memory view of one resource over one set of hash ranges: every object as its
//! serialized JSON bytes (plus the few fields selectors need), a bounded history of changes that
//! serves watches from an older resourceVersion and LISTs at an exact recent one, and watchers
//! with bounded buffers. A [`reflector`] keeps it in step with etcd and knows its *synced
//! revision*, pushed forward by events and by in-band etcd progress marks requested on demand.
//!
//! It must never write to etcd, hold a lock across an `.await`, decode objects on the read path,
//! or let one watcher slow another: a watcher whose buffer is full is closed (the client
//! re-watches from its last resourceVersion).

mod adopt;
mod cache;
mod filter;
mod object;
pub mod reflector;

pub use cache::{Addressed, CacheConfig, CacheError, CacheEvent, CacheStats, EventType, ListPage, PastChange, WatchCache, WatchMsg, Watcher};
pub use filter::{Filter, Owned};
pub use object::{cache_key, decode_object, split_cache_key, CachedObject, ObjectCodec};
