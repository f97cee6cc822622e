//! # shardplane-flowcontrol
//!
//! Owns API Priority and Fairness (RFC 0013): the FlowSchemas and PriorityLevelConfigurations
//! followed from the store ([`config`]), each request classified into a flow and a priority
//! level ([`classify`]), its cost in seats ([`width`]), the seats, queues and fair dispatch
//! ([`model`]), and the middleware that makes a request wait for its seats or refuses it with
//! upstream's 429 ([`gate`]), with upstream's metrics and debug dumps. The router and every
//! shard run the same gate over the same objects, so a request is judged alike at every hop.
//!
//! It must never decide who a request comes from (authentication has, before it), never
//! authorize, and never queue a request the `exempt` level covers.

pub mod model;
pub mod classify;
pub mod config;
pub mod debug;
pub mod flags;
pub mod follow;
pub mod status;
pub mod gate;
pub mod metrics;
pub mod retry_after;
pub mod width;

pub use flags::Flags;
pub use gate::{gate, Admission, Gate, StoredCount, Unnamed};
