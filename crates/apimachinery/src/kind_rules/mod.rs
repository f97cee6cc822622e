//! Per-kind validation rules of upstream's `pkg/apis/*/validation` that clients rely on, with
//! upstream's field paths and messages, returned as Status causes for a 422: ConfigMap and
//! Secret ([`config`]), Events ([`events`]), PriorityClass ([`scheduling`]);
//! CustomResourceDefinitions' rules live in [`crate::crd`].

mod config;
mod events;
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
        ("", "events") => events::validate_legacy(obj, "reportingComponent"),
        ("scheduling.k8s.io", "priorityclasses") => scheduling::validate_priority_class(obj),
        _ => Vec::new(),
    }
}

/// The rules only a converted version has (RFC 0011), checked on the object in that version
/// before it is converted and written as the stored version (whose own rules then apply too):
/// events.k8s.io/v1's strict event rules. `old` is the object being replaced, if any.
pub fn validate_version(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Vec<StatusCause> {
    match (info.group.as_str(), info.plural.as_str()) {
        ("events.k8s.io", "events") => {
            let core = crate::conversion::to_storage(info, obj.clone());
            match old {
                None => events::validate_v1_create(&core),
                Some(old) => events::validate_v1_update(&crate::conversion::to_storage(info, old.clone()), &core),
            }
        }
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
