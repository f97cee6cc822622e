//! Per-kind validation rules of upstream's `pkg/apis/*/validation` that clients rely on, with
//! upstream's field paths and messages, returned as Status causes for a 422: ConfigMap and
//! Secret ([`config`]), PriorityClass ([`scheduling`]); CustomResourceDefinitions' rules live in
//! [`crate::crd`].

mod config;
mod scheduling;

pub use config::MAX_DATA_BYTES;
pub use scheduling::{system_priority_class, SYSTEM_PRIORITY_CLASSES};

use crate::resources::ResourceInfo;
use crate::status::StatusCause;
use serde_json::Value;

/// Whether `info` is the CustomResourceDefinition resource.
pub fn is_crd(info: &ResourceInfo) -> bool {
    info.group == crate::crd::GROUP && info.plural == crate::crd::PLURAL
}

/// Rules on one object, on create and update.
pub fn validate(info: &ResourceInfo, obj: &Value) -> Vec<StatusCause> {
    match (info.group.as_str(), info.plural.as_str()) {
        (crate::crd::GROUP, crate::crd::PLURAL) => crate::crd::validate(obj),
        ("", "configmaps" | "secrets") => config::validate(info, obj),
        ("scheduling.k8s.io", "priorityclasses") => scheduling::validate_priority_class(obj),
        _ => Vec::new(),
    }
}

/// Rules on an update from `old` to `new` (beyond those on `new` alone).
pub fn validate_update(info: &ResourceInfo, old: &Value, new: &Value) -> Vec<StatusCause> {
    match (info.group.as_str(), info.plural.as_str()) {
        (crate::crd::GROUP, crate::crd::PLURAL) => crate::crd::validate_update(old, new),
        ("", "configmaps" | "secrets") => config::validate_update(info, old, new),
        ("scheduling.k8s.io", "priorityclasses") => scheduling::validate_priority_class_update(old, new),
        _ => Vec::new(),
    }
}
