//! # shardplane-router
//!
//! Owns the HTTP front of a sharded cluster: it parses a request, sends single-object verbs to
//! the owner of the key's hash, fans LIST and WATCH out to every shard and merges the answers
//! with the coordinator crate, and streams the result back, so every client sees one
//! kube-apiserver.
//!
//! It serves on the request surface the shards serve on (`shardplane-http`: one query parser,
//! one prologue, the same metrics), so a router and a shard read and count requests alike; it
//! holds the range map, the served resources and the shared watch upstreams ([`RouterState`]).
//! Where a client connects is where its identity is settled, once (RFC 0012): authentication
//! ([`authn`]), audit ([`audit`]), impersonation ([`impersonation`]), priority and fairness
//! (`flow_control`, RFC 0013) and authorization ([`authz`]) run in that order before a request
//! is routed, and the shards learn the user from the router's front-proxy headers alone.
//! It must stay thin: no object cache, no writes to objects, no merge logic of its own (that is
//! `shardplane-coordinator`'s), and it must never present a partial LIST as whole or a watch with
//! a gap: a shard that fails turns into a 503 Status or the clean end of a watch. The
//! `shard-router` binary, which also runs shards as its child processes, is a package of its own.

pub mod audit;
pub mod authn;
pub mod authz;
mod flow_control;
mod forward;
mod hub;
pub mod impersonation;
mod list;
mod list_stream;
mod membership;
mod reviews;
mod server;
mod state;
mod tokens;
mod upstream;
mod watch;
mod whoami;

pub use state::RouterState;
pub use server::{connect_stores, serve, serve_shards, ClientFacing, RouterConfig};
pub mod topology;
