//! Events (core/v1 and events.k8s.io/v1, one stored object): upstream's legacy rules, which
//! every event passes whichever version wrote it, and the strict rules events.k8s.io/v1 adds
//! on create and update. Field paths are upstream's: mostly the stored (core) names, the
//! reporting controller under the name the request's version gives it.

use crate::meta;
use crate::status::{cause, StatusCause};
use serde_json::Value;

const REPORTING_INSTANCE_LIMIT: usize = 128;
const ACTION_LIMIT: usize = 128;
const REASON_LIMIT: usize = 128;
const NOTE_LIMIT: usize = 1024;

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

fn set(v: &Value, field: &str) -> bool {
    v.get(field).is_some_and(|f| !f.is_null() && f != "" && f != 0)
}

fn required(field: &str) -> StatusCause {
    cause("FieldValueRequired", field, "Required value")
}

fn invalid(field: &str, value: &str, detail: &str) -> StatusCause {
    cause("FieldValueInvalid", field, format!("Invalid value: {value:?}: {detail}"))
}

/// Upstream's `legacyValidateEvent` on a core-shaped event; `controller_field` is what the
/// request's version calls the reporting controller (`reportingComponent` in core/v1).
pub(super) fn validate_legacy(event: &Value, controller_field: &str) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let ns = meta::meta_str(event, "namespace");
    let involved_ns = event.pointer("/involvedObject/namespace").and_then(Value::as_str).unwrap_or("");
    let mismatch = || invalid("involvedObject.namespace", involved_ns, "does not match event.namespace");
    if !set(event, "eventTime") {
        // An old-style event: its namespace and its object's agree (or "default", for old
        // clients writing cluster objects' events).
        if (involved_ns.is_empty() && !ns.is_empty() && ns != "default") || (!involved_ns.is_empty() && ns != involved_ns) {
            causes.push(mismatch());
        }
    } else {
        if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
            causes.push(mismatch());
        }
        let controller = text(event, "reportingComponent");
        if controller.is_empty() {
            causes.push(required(controller_field));
        }
        if let Err(e) = meta::validate_qualified_name(controller) {
            causes.push(invalid(controller_field, controller, &e));
        }
        for (field, limit) in [("reportingInstance", REPORTING_INSTANCE_LIMIT), ("action", ACTION_LIMIT), ("reason", REASON_LIMIT)] {
            let v = text(event, field);
            if v.is_empty() {
                causes.push(required(field));
            }
            if v.len() > limit {
                causes.push(invalid(field, "", &format!("can have at most {limit} characters")));
            }
        }
        if text(event, "message").len() > NOTE_LIMIT {
            causes.push(invalid("message", "", &format!("can have at most {NOTE_LIMIT} characters")));
        }
    }
    if !ns.is_empty()
        && let Err(e) = meta::validate_dns1123_subdomain(ns)
    {
        causes.push(invalid("namespace", ns, &e));
    }
    causes
}

fn validate_series(event: &Value) -> Vec<StatusCause> {
    let Some(series) = event.get("series").filter(|s| s.is_object()) else { return Vec::new() };
    let mut causes = Vec::new();
    if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
        causes.push(invalid("series.count", "", "should be at least 2"));
    }
    if !set(series, "lastObservedTime") {
        causes.push(required("series.lastObservedTime"));
    }
    causes
}

/// An events.k8s.io/v1 create: the legacy rules, then the strict ones (`event` is core-shaped).
pub(super) fn validate_v1_create(event: &Value) -> Vec<StatusCause> {
    let mut causes = validate_legacy(event, "reportingController");
    let name = meta::meta_str(event, "name");
    if let Err(e) = meta::validate_dns1123_subdomain(name) {
        causes.push(invalid("metadata.name", name, &e));
    }
    causes.extend(validate_series(event));
    if !set(event, "eventTime") {
        causes.push(required("eventTime"));
    }
    let ty = text(event, "type");
    if ty != "Normal" && ty != "Warning" {
        causes.push(invalid("type", "", &format!("has invalid value: {ty}")));
    }
    for (core, v1) in [("firstTimestamp", "deprecatedFirstTimestamp"), ("lastTimestamp", "deprecatedLastTimestamp"), ("count", "deprecatedCount")] {
        if set(event, core) {
            causes.push(invalid(v1, "", "needs to be unset"));
        }
    }
    if event.get("source").is_some_and(|s| set(s, "component") || set(s, "host")) {
        causes.push(invalid("deprecatedSource", "", "needs to be unset"));
    }
    causes
}

/// An events.k8s.io/v1 update from `old` to `new` (both core-shaped): the legacy rules, the
/// series when it changed, and the fields an event may not change.
pub(super) fn validate_v1_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let mut causes = validate_legacy(new, "reportingController");
    if old.get("series") != new.get("series") {
        causes.extend(validate_series(new));
    }
    for field in ["involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp", "count", "type", "eventTime", "action", "related", "reportingComponent", "reportingInstance"] {
        let (was, is) = (old.get(field).filter(|v| !v.is_null()), new.get(field).filter(|v| !v.is_null()));
        if was != is {
            let shown = is.map_or("null".to_owned(), |v| v.to_string());
            let path = if field == "reportingComponent" { "reportingController" } else { field };
            causes.push(cause("FieldValueInvalid", path, format!("Invalid value: {shown}: field is immutable")));
        }
    }
    causes
}
