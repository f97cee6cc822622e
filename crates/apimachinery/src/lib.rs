//! # shardplane-apimachinery
//!
//! Owns the Kubernetes API conventions every shardplane process speaks, with no I/O. By concern:
//!
//! - **Request vocabulary**: the served resources ([`resources`]) and request paths to them
//!   ([`request_path`]), list and watch options with upstream's resourceVersion rules
//!   ([`list_options`]), DELETE options ([`delete_options`]), label and field selectors
//!   ([`selectors`]), continue tokens ([`continue_token`]), `Status` errors ([`status`]).
//! - **Codecs**: upstream's key order on the wire and readers of it ([`encode`]), protobuf request
//!   bodies ([`protobuf`]), watch event lines ([`watch_event`]), OpenAPI documents and the bundled
//!   schemas ([`openapi`]).
//! - **Write rules**: object metadata ([`meta`]), per-kind create and update strategies
//!   ([`strategy`]), field validation by schema
//!   ([`field_validation`]), per-kind validation ([`kind_rules`]), upstream's defaulting ([`defaults`]),
//!   the admission plugins' decisions ([`admission`], [`limit_ranger`], [`service_accounts`]), resource quantities ([`quantity`]), string formats ([`formats`]), custom
//!   resources' value rules ([`structural`]), conversions between served versions ([`conversion`]), CustomResourceDefinitions and what they serve
//!   ([`crd`]), the three patch formats ([`patch`]) and server-side apply ([`apply`]).
//!
//! One crate rather than three: every write rule reads the vocabulary and the codecs, and none of
//! them does I/O, so a split would add crate boundaries without a dependency it could cut
//! (RFCS/README.md).
//!
//! It must never do I/O or hold state: it turns requests into validated values and objects into
//! objects, so the shard, the router and the conformance suite all agree on one reading of the API.

pub mod admission;
pub mod apply;
pub mod continue_token;
pub mod conversion;
pub mod crd;
pub mod defaults;
pub mod delete_options;
pub mod disruption;
pub mod encode;
pub mod field_validation;
pub mod formats;
pub mod go_duration;
pub mod kind_rules;
pub mod limit_ranger;
pub mod list_options;
pub mod meta;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod quantity;
pub mod quota;
pub mod request_path;
pub mod resources;
pub mod selectors;
pub mod service_accounts;
pub mod service_network;
pub mod status;
pub mod strategy;
pub mod structural;
pub mod watch_event;

pub use status::ApiError;
