//! # shardplane-router
//!
//! Owns the HTTP front of a sharded cluster: it parses a request, sends single-object verbs to
//! the owner of the key's hash, fans LIST and WATCH out to every shard and merges the answers
//! with the coordinator crate, and streams the result back, so every client sees one
//! kube-apiserver.
//!
//! It reuses the shard crate's request labels, in-flight bounds and metrics (so a router and a
//! shard count requests alike), and links the shard command line so the `shard-router` binary can
//! run shards as child processes. It must stay thin: no cache, no storage, no merge logic of its own (that is
//! `shardplane-coordinator`'s), and it must never present a partial LIST as whole or a watch with
//! a gap: a shard that fails turns into a 503 Status or the clean end of a watch.

mod forward;
mod hub;
mod list;
mod list_stream;
mod membership;
mod server;
mod upstream;
mod watch;

pub use forward::Shards;
pub use server::{connect_stores, serve, serve_shards, RouterConfig};
pub mod topology;
