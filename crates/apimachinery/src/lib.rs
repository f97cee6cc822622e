//! # shardplane-apimachinery
//!
//! Owns the Kubernetes API conventions every shardplane process speaks: the `Status` error objects
//! ([`status`]), the table of served resources ([`resources`]) and request paths to them
//! ([`request_path`]), list and watch options with upstream's resourceVersion rules
//! ([`list_options`]), label and field selectors ([`selectors`]), continue tokens
//! ([`continue_token`]), object metadata rules ([`meta`]), DELETE options ([`delete_options`]), CustomResourceDefinitions and what they serve ([`crd`]), per-kind validation rules
//! ([`kind_rules`]) and field defaults ([`defaults`]), the
//! three patch formats ([`patch`]), protobuf request bodies ([`protobuf`]), OpenAPI documents and
//! schema-driven field validation ([`openapi`]), custom resources' value rules ([`structural`]), and watch event framing ([`watch_event`]).
//!
//! It must never do I/O or hold state: it turns requests into validated values and objects into
//! objects, so the shard, the router and the conformance suite all agree on one reading of the API.

pub mod apply;
pub mod continue_token;
pub mod crd;
pub mod defaults;
pub mod delete_options;
pub mod encode;
pub mod formats;
pub mod kind_rules;
pub mod list_options;
pub mod meta;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod request_path;
pub mod resources;
pub mod selectors;
pub mod status;
pub mod structural;
pub mod watch_event;

pub use status::ApiError;
