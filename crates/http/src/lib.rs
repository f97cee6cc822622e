//! # shardplane-http
//!
//! Owns the Kubernetes HTTP surface that a shard and a router both serve: the one query parser
//! ([`query`]), the request prologue (span, in-flight seats, body limit, `Status` errors,
//! request metrics: [`request`], [`limits`], [`metrics`]), request bodies and responses
//! ([`body`]), content negotiation and the representations (JSON, Table, PartialObjectMetadata:
//! [`negotiation`], [`printing`]), watch-event framing ([`watch_frame`]), the discovery documents
//! ([`discovery`]), the one mapping of storage errors to a `Status` ([`storage_errors`]), and
//! the router↔shard protocol ([`protocol`]), and serving connections with their time bounds
//! ([`serve`]), the shared `/readyz` checks ([`readiness`]), and the one way an outbound client
//! is built ([`outbound`]).
//!
//! It must never hold objects, talk to storage or know where a key lives: it turns HTTP into
//! parsed requests and answers into HTTP, so that the shard and the router can never read a
//! request, or write an answer, differently.

pub mod body;
pub mod discovery;
pub mod limits;
pub mod metrics;
pub mod negotiation;
pub mod outbound;
pub mod printing;
pub mod protocol;
pub mod query;
pub mod readiness;
pub mod request;
pub mod serve;
pub mod storage_errors;
pub mod watch_frame;

pub use query::Query;
pub use request::{Api, Failure, Reply, RequestContext, Surface};
