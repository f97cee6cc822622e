//! Server-side printing: `as=Table` responses (meta.k8s.io/v1 and v1beta1) with upstream's
//! printer columns for the built-in kinds ([`kinds`]) and each custom resource's
//! `additionalPrinterColumns`, and PartialObjectMetadata.

mod cluster;
mod kinds;
mod workloads;

use crate::negotiation::IncludeObject;
use serde_json::{json, Value};
use shardplane_apimachinery::crd::CustomVersion;
use shardplane_apimachinery::resources::ResourceInfo;

fn col(name: &str, ty: &str, format: &str, description: &str, priority: u8) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": description, "priority": priority})
}

const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// A custom resource's columns: Name, then its CRD's `additionalPrinterColumns` (Age when it
/// has none), as upstream's CRD table convertor.
fn custom_columns(c: &CustomVersion) -> Vec<Value> {
    let name = col("Name", "string", "name", NAME_DESC, 0);
    if c.printer_columns.is_empty() {
        return vec![name, col("Age", "date", "", AGE_DESC, 0)];
    }
    std::iter::once(name).chain(c.printer_columns.iter().map(|p| json!({"name": p.name, "type": p.type_, "format": p.format, "description": p.description, "priority": p.priority}))).collect()
}

/// The value at a printer column's JSONPath (`.spec.replicas`, `.status.conditions[0].type`):
/// the simple paths CRDs use; None where the object has nothing there.
fn json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut at = obj;
    for part in path.trim_start_matches('.').split('.').filter(|p| !p.is_empty()) {
        let (field, indices) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !field.is_empty() {
            at = at.get(field)?;
        }
        for index in indices.split('[').filter(|x| !x.is_empty()) {
            at = at.get(index.trim_end_matches(']').parse::<usize>().ok()?)?;
        }
    }
    Some(at)
}

/// A custom object's cells for [`custom_columns`]: dates shown as ages, absent values null.
fn custom_cells(c: &CustomVersion, obj: &Value) -> Vec<Value> {
    let name = Value::String(kinds::s(obj, "/metadata/name").to_owned());
    if c.printer_columns.is_empty() {
        return vec![name, Value::String(age(obj.pointer("/metadata/creationTimestamp").and_then(Value::as_str)))];
    }
    std::iter::once(name)
        .chain(c.printer_columns.iter().map(|p| match json_path(obj, &p.json_path) {
            Some(Value::String(t)) if p.type_ == "date" => Value::String(age(Some(t))),
            Some(v) => v.clone(),
            None => Value::Null,
        }))
        .collect()
}

/// The column definitions of a kind: a custom resource's from its CRD, a built-in's as
/// upstream prints it ([`kinds`]), else Name and Age.
pub fn columns(info: &ResourceInfo) -> Vec<Value> {
    if let Some(c) = &info.custom {
        return custom_columns(c);
    }
    match kinds::of(info.storage_group(), &info.plural) {
        Some(cols) => cols.iter().map(|k| col(k.name, k.ty, if k.name == "Name" { "name" } else { "" }, k.description, k.priority)).collect(),
        None => vec![col("Name", "string", "name", NAME_DESC, 0), col("Age", "string", "", AGE_DESC, 0)],
    }
}

/// The cells of one object's row.
pub fn cells(info: &ResourceInfo, obj: &Value) -> Vec<Value> {
    if let Some(c) = &info.custom {
        return custom_cells(c, obj);
    }
    // A converted version prints as the version it is stored in (upstream prints its internal
    // type, whatever version was asked), from stored bytes or, at a router, served ones.
    let stored;
    let obj = if info.stored_as.is_some() && obj["apiVersion"] == info.api_version().as_str() {
        stored = shardplane_apimachinery::conversion::to_storage(info, obj.clone());
        &stored
    } else {
        obj
    };
    match kinds::of(info.storage_group(), &info.plural) {
        Some(cols) => cols.iter().map(|k| (k.cell)(obj)).collect(),
        None => vec![kinds::name(obj), kinds::age_cell(obj)],
    }
}

/// Upstream's `HumanDuration` of the time since an RFC 3339 timestamp.
pub fn age(created: Option<&str>) -> String {
    let Some(ts) = created.and_then(|c| c.parse::<jiff::Timestamp>().ok()) else { return "<unknown>".into() };
    human_duration(jiff::Timestamp::now().as_second() - ts.as_second())
}

fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let s = seconds.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        return if s % 60 == 0 { format!("{m}m") } else { format!("{m}m{}s", s % 60) };
    }
    if m < 180 {
        return format!("{m}m");
    }
    let h = m / 60;
    if h < 8 {
        return if m % 60 == 0 { format!("{h}h") } else { format!("{h}h{}m", m % 60) };
    }
    if h < 48 {
        return format!("{h}h");
    }
    if h < 24 * 8 {
        return if h % 24 == 0 { format!("{}d", h / 24) } else { format!("{}d{}h", h / 24, h % 24) };
    }
    if h < 24 * 365 * 2 {
        return format!("{}d", h / 24);
    }
    let y = h / 24 / 365;
    let d = h / 24 % 365;
    if h < 24 * 365 * 8 && d != 0 { format!("{y}y{d}d") } else { format!("{y}y") }
}

fn row(info: &ResourceInfo, obj: Value, include: IncludeObject) -> Value {
    let mut r = json!({"cells": cells(info, &obj)});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            r["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))});
        }
        IncludeObject::Object => r["object"] = obj,
    }
    r
}

/// A Table of `objects` (each the object's JSON bytes).
pub fn table(info: &ResourceInfo, version: &str, objects: &[&[u8]], list_meta: Value, include: IncludeObject) -> Vec<u8> {
    let rows: Vec<Value> = objects.iter().filter_map(|b| serde_json::from_slice::<Value>(b).ok()).map(|o| row(info, o, include)).collect();
    serde_json::to_vec(&json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": list_meta,
        "columnDefinitions": columns(info),
        "rows": rows,
    }))
    .expect("table serializes")
}

/// One object as PartialObjectMetadata.
pub fn partial_metadata(version: &str, obj: &[u8]) -> Value {
    let v: Value = serde_json::from_slice(obj).unwrap_or(Value::Null);
    json!({"kind": "PartialObjectMetadata", "apiVersion": format!("meta.k8s.io/{version}"), "metadata": v.get("metadata").cloned().unwrap_or(json!({}))})
}

/// The Content-Type of a Table response.
pub fn content_type(version: &str) -> String {
    format!("application/json;as=Table;v={version};g=meta.k8s.io")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_match_upstream() {
        for (s, want) in [(5, "5s"), (119, "119s"), (120, "2m"), (125, "2m5s"), (600, "10m"), (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"), (30 * 3600, "30h"), (50 * 3600, "2d2h"), (400 * 24 * 3600, "400d"), (3 * 365 * 24 * 3600 + 5 * 24 * 3600, "3y5d")] {
            assert_eq!(human_duration(s), want, "{s}");
        }
    }

    #[test]
    fn printer_column_paths_reach_fields_and_list_items() {
        let o = json!({"spec": {"replicas": 3, "agents": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(json_path(&o, ".spec.replicas"), Some(&json!(3)));
        assert_eq!(json_path(&o, ".spec.agents[1].name"), Some(&json!("b")));
        assert_eq!(json_path(&o, ".spec.missing"), None);
        assert_eq!(json_path(&o, ".spec.agents[7].name"), None);
    }

    #[test]
    fn every_built_in_kind_prints_as_many_cells_as_it_has_columns() {
        for info in shardplane_apimachinery::resources::builtin_resources() {
            let obj = json!({"metadata": {"name": "x", "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}, "status": {}});
            let (cols, row) = (columns(&info), cells(&info, &obj));
            assert_eq!(cols.len(), row.len(), "{}", info.plural);
            assert!(cols.iter().any(|c| c["name"] == "Name"), "{}", info.plural);
        }
    }

    #[test]
    fn nodes_and_storage_classes_print_as_upstream() {
        let all = shardplane_apimachinery::resources::builtin_resources();
        let find = |plural: &str| all.iter().find(|r| r.plural == plural).unwrap();
        let node = json!({"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": ""}}, "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.33.0"}}});
        let row = cells(find("nodes"), &node);
        assert_eq!((&row[1], &row[2], &row[4]), (&json!("Ready,SchedulingDisabled"), &json!("control-plane"), &json!("v1.33.0")));
        let sc = json!({"metadata": {"name": "fast", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}, "provisioner": "p", "reclaimPolicy": "Delete"});
        assert_eq!(cells(find("storageclasses"), &sc)[0], json!("fast (default)"));
        let hpa = json!({"metadata": {"name": "h"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}, "minReplicas": 1, "maxReplicas": 5,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]}});
        let row = cells(find("horizontalpodautoscalers"), &hpa);
        assert_eq!((&row[1], &row[2]), (&json!("Deployment/d"), &json!("cpu: <unknown>/80%")));
    }
}
