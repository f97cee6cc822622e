//! Server-side printing: `as=Table` responses (meta.k8s.io/v1 and v1beta1) with upstream's
//! printer columns for pods, deployments, namespaces, configmaps and services, and each custom
//! resource's `additionalPrinterColumns` (other kinds get Name and Age), and PartialObjectMetadata.

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
    let name = Value::String(s(obj, "/metadata/name").to_owned());
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

/// The column definitions of a kind.
pub fn columns(info: &ResourceInfo) -> Vec<Value> {
    if let Some(c) = &info.custom {
        return custom_columns(c);
    }
    let name = col("Name", "string", "name", NAME_DESC, 0);
    let age = col("Age", "string", "", AGE_DESC, 0);
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => vec![
            name,
            col("Ready", "string", "", "The aggregate readiness state of this pod for accepting traffic.", 0),
            col("Status", "string", "", "The aggregate status of the containers in this pod.", 0),
            col("Restarts", "string", "", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.", 0),
            age,
            col("IP", "string", "", "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.", 1),
            col("Node", "string", "", "NodeName is a request to schedule this pod onto a specific node. If it is non-empty, the scheduler simply schedules this pod onto that node, assuming that it fits resource requirements.", 1),
            col("Nominated Node", "string", "", "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.", 1),
            col("Readiness Gates", "string", "", "If specified, all readiness gates will be evaluated for pod readiness.", 1),
        ],
        ("apps", "deployments") => vec![
            name,
            col("Ready", "string", "", "Number of the pod with ready state", 0),
            col("Up-to-date", "integer", "", "Total number of non-terminated pods targeted by this deployment that have the desired template spec.", 0),
            col("Available", "integer", "", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.", 0),
            age,
            col("Containers", "string", "", "Names of each container in the template.", 1),
            col("Images", "string", "", "Images referenced by each container in the template.", 1),
            col("Selector", "string", "", "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.", 1),
        ],
        ("", "namespaces") => vec![name, col("Status", "string", "", "The status of the namespace", 0), age],
        ("", "configmaps") => vec![name, col("Data", "string", "", "Data contains the configuration data.", 0), age],
        ("", "services") => vec![
            name,
            col("Type", "string", "", "type determines how the Service is exposed.", 0),
            col("Cluster-IP", "string", "", "clusterIP is the IP address of the service and is usually assigned randomly.", 0),
            col("External-IP", "string", "", "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.", 0),
            col("Port(s)", "string", "", "The list of ports that are exposed by this service.", 0),
            age,
            col("Selector", "string", "", "Route service traffic to pods with label keys and values matching this selector.", 1),
        ],
        _ => vec![name, age],
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

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn n(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}

fn none_if_empty(x: String) -> String {
    if x.is_empty() { "<none>".into() } else { x }
}

fn selector_text(m: Option<&Value>) -> String {
    let mut parts: Vec<String> = m.and_then(Value::as_object).map(|o| o.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect()).unwrap_or_default();
    parts.sort();
    parts.join(",")
}

/// The cells of one object's row.
pub fn cells(info: &ResourceInfo, obj: &Value) -> Vec<Value> {
    if let Some(c) = &info.custom {
        return custom_cells(c, obj);
    }
    let name = Value::String(s(obj, "/metadata/name").to_owned());
    let age = Value::String(age(obj.pointer("/metadata/creationTimestamp").and_then(Value::as_str)));
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => {
            let total = obj.pointer("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
            let statuses = obj.pointer("/status/containerStatuses").and_then(Value::as_array).cloned().unwrap_or_default();
            let ready = statuses.iter().filter(|c| c["ready"] == true).count();
            let restarts: i64 = statuses.iter().map(|c| c["restartCount"].as_i64().unwrap_or(0)).sum();
            let mut status = s(obj, "/status/reason").to_owned();
            if status.is_empty() {
                status = s(obj, "/status/phase").to_owned();
            }
            if obj.pointer("/metadata/deletionTimestamp").is_some() {
                status = "Terminating".into();
            }
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(status),
                json!(restarts.to_string()),
                age,
                json!(none_if_empty(s(obj, "/status/podIP").to_owned())),
                json!(none_if_empty(s(obj, "/spec/nodeName").to_owned())),
                json!(none_if_empty(s(obj, "/status/nominatedNodeName").to_owned())),
                json!("<none>"),
            ]
        }
        ("apps", "deployments") => {
            let containers = obj.pointer("/spec/template/spec/containers").and_then(Value::as_array).cloned().unwrap_or_default();
            let names: Vec<&str> = containers.iter().filter_map(|c| c["name"].as_str()).collect();
            let images: Vec<&str> = containers.iter().filter_map(|c| c["image"].as_str()).collect();
            let desired = obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
            vec![
                name,
                json!(format!("{}/{desired}", n(obj, "/status/readyReplicas"))),
                json!(n(obj, "/status/updatedReplicas")),
                json!(n(obj, "/status/availableReplicas")),
                age,
                json!(names.join(",")),
                json!(images.join(",")),
                json!(none_if_empty(selector_text(obj.pointer("/spec/selector/matchLabels")))),
            ]
        }
        ("", "namespaces") => vec![name, json!(s(obj, "/status/phase")), age],
        ("", "configmaps") => {
            let count = |p: &str| obj.pointer(p).and_then(Value::as_object).map_or(0, |m| m.len());
            vec![name, json!(count("/data") + count("/binaryData")), age]
        }
        ("", "services") => {
            let ty = match s(obj, "/spec/type") {
                "" => "ClusterIP",
                t => t,
            };
            let ports: Vec<String> = obj
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .map(|ps| {
                    ps.iter()
                        .map(|p| {
                            let proto = p["protocol"].as_str().unwrap_or("TCP");
                            match p["nodePort"].as_i64() {
                                Some(np) if np != 0 => format!("{}:{np}/{proto}", p["port"]),
                                _ => format!("{}/{proto}", p["port"]),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            let external: Vec<&str> = obj.pointer("/spec/externalIPs").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
            vec![
                name,
                json!(ty),
                json!(none_if_empty(s(obj, "/spec/clusterIP").to_owned())),
                json!(none_if_empty(external.join(","))),
                json!(none_if_empty(ports.join(","))),
                age,
                json!(none_if_empty(selector_text(obj.pointer("/spec/selector")))),
            ]
        }
        _ => vec![name, age],
    }
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
}
