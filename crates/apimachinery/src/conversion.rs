//! Conversions between a built-in's served versions and the version its objects are stored in
//! (RFC 0011, "Several versions of one resource"): autoscaling/v1 HorizontalPodAutoscalers are
//! stored as autoscaling/v2 ones, events.k8s.io/v1 Events as core/v1 Events, resource.k8s.io/v1beta1
//! objects as v1beta2 ones ([`resource`]). Each object is
//! stored once; a request in a converted version is converted to the stored version on the way
//! in and back on the way out, as upstream converts through its internal type.
//!
//! What autoscaling/v1 cannot express (metrics other than a CPU utilization target, scaling
//! behavior, conditions, current metrics) travels in upstream's round-trip annotations, so that
//! a read-modify-write through v1 keeps what a v2 client wrote. A custom resource's versions
//! share one schema (conversion `None`): only its `apiVersion` changes ([`served_bytes`]).

use crate::encode;
use crate::resources::{ResourceInfo, StoredAs};
use serde_json::{json, Map, Value};
use std::borrow::Cow;

/// v2 metrics autoscaling/v1 cannot express, as a JSON list of autoscaling/v1 `MetricSpec`s.
pub const METRIC_SPECS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// `status.currentMetrics`, as a JSON list of autoscaling/v1 `MetricStatus`es.
pub const METRIC_STATUSES_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// `spec.behavior`, as upstream's internal type marshals it (Go field names).
pub const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";
/// `status.conditions`.
pub const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
const ROUND_TRIP: [&str; 4] = [METRIC_SPECS_ANNOTATION, METRIC_STATUSES_ANNOTATION, BEHAVIOR_ANNOTATION, CONDITIONS_ANNOTATION];

/// events.k8s.io/v1 field names and the core/v1 names of the same fields.
const EVENT_RENAMES: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// An object in `info`'s version converted to the version it is stored in (unchanged when
/// `info` is the stored version).
pub fn to_storage(info: &ResourceInfo, obj: Value) -> Value {
    match info.stored_as {
        None => obj,
        Some(StoredAs::CoreEvents) => event_to_core(obj),
        Some(StoredAs::AutoscalingV2) => hpa_v1_to_v2(obj, true),
        Some(StoredAs::ResourceV1beta2) => resource::v1beta1_to_v1beta2(obj),
    }
}

/// A partial object (a server-side apply configuration) in `info`'s version, converted to the
/// stored version without filling what the configuration leaves out (no default metric).
pub fn partial_to_storage(info: &ResourceInfo, obj: Value) -> Value {
    match info.stored_as {
        Some(StoredAs::AutoscalingV2) => hpa_v1_to_v2(obj, false),
        _ => to_storage(info, obj),
    }
}

/// A stored object converted to `info`'s version.
pub fn from_storage(info: &ResourceInfo, obj: Value) -> Value {
    match info.stored_as {
        None => obj,
        Some(StoredAs::CoreEvents) => event_from_core(obj),
        Some(StoredAs::AutoscalingV2) => hpa_v2_to_v1(obj),
        Some(StoredAs::ResourceV1beta2) => resource::v1beta2_to_v1beta1(obj),
    }
}

/// An object's stored bytes as `info`'s version serves them: borrowed when nothing changes, a
/// custom resource's with its `apiVersion` replaced, a converted built-in's converted.
pub fn served_bytes<'a>(info: &ResourceInfo, bytes: &'a [u8]) -> Cow<'a, [u8]> {
    if info.stored_as.is_some() {
        return match serde_json::from_slice::<Value>(bytes) {
            Ok(v) => Cow::Owned(encode::object_bytes(&from_storage(info, v))),
            Err(_) => Cow::Borrowed(bytes),
        };
    }
    match &info.custom {
        Some(_) => encode::in_version(bytes, &info.api_version()),
        None => Cow::Borrowed(bytes),
    }
}

/// The stored version's name of a field selector label of `info`, None when `info` does not
/// accept the label (upstream's field label conversion: events.k8s.io/v1 selects by
/// `regarding.*` and `reportingController`, which are core/v1's `involvedObject.*` and
/// `reportingComponent`).
pub fn field_label<'a>(info: &ResourceInfo, label: &'a str) -> Option<Cow<'a, str>> {
    if info.stored_as != Some(StoredAs::CoreEvents) {
        return Some(Cow::Borrowed(label));
    }
    match label {
        "metadata.name" | "metadata.namespace" | "reason" | "type" => Some(Cow::Borrowed(label)),
        "reportingController" => Some(Cow::Borrowed("reportingComponent")),
        _ => {
            let rest = label.strip_prefix("regarding.")?;
            matches!(rest, "kind" | "namespace" | "name" | "uid" | "apiVersion" | "resourceVersion" | "fieldPath").then(|| Cow::Owned(format!("involvedObject.{rest}")))
        }
    }
}

fn rename(obj: &mut Value, from: &str, to: &str) {
    if let Some(o) = obj.as_object_mut() {
        match o.remove(from) {
            Some(Value::Null) | None => {}
            Some(v) => {
                o.insert(to.to_owned(), v);
            }
        }
    }
}

fn event_to_core(mut obj: Value) -> Value {
    for (v1, core) in EVENT_RENAMES {
        rename(&mut obj, v1, core);
    }
    obj["apiVersion"] = json!("v1");
    obj
}

fn event_from_core(mut obj: Value) -> Value {
    for (v1, core) in EVENT_RENAMES {
        rename(&mut obj, core, v1);
    }
    obj["apiVersion"] = json!("events.k8s.io/v1");
    if let Some(o) = obj.as_object_mut() {
        // What Go's encoder writes for zero values of events.k8s.io/v1's fields: structs as
        // `{}`, times as null (eventTime is not even omitempty).
        for field in ["regarding", "deprecatedSource"] {
            o.entry(field).or_insert_with(|| json!({}));
        }
        for field in ["eventTime", "deprecatedFirstTimestamp", "deprecatedLastTimestamp"] {
            o.entry(field).or_insert(Value::Null);
        }
    }
    obj
}

/// `obj` with the fields of `pairs` whose values are present (not absent, not null).
fn present(pairs: &[(&str, Option<&Value>)]) -> Value {
    let mut m = Map::new();
    for (k, v) in pairs {
        if let Some(v) = v.filter(|v| !v.is_null()) {
            m.insert((*k).to_owned(), v.clone());
        }
    }
    Value::Object(m)
}

/// A required Quantity of autoscaling/v1 (a Go value, so "0" when v2 leaves it unset).
fn quantity(v: Option<&Value>) -> Option<Value> {
    Some(v.filter(|v| !v.is_null()).cloned().unwrap_or_else(|| json!("0")))
}

fn is_cpu_resource(m: &Value) -> bool {
    m["type"] == "Resource" && m["resource"]["name"] == "cpu"
}

/// One v2 `MetricSpec` as autoscaling/v1's `MetricSpec` (the v2beta1 shape).
fn metric_spec_to_v1(m: &Value) -> Value {
    let mut out = json!({"type": m["type"]});
    if let Some(o) = m.get("object").filter(|o| o.is_object()) {
        out["object"] = present(&[
            ("target", o.get("describedObject")),
            ("metricName", o.pointer("/metric/name")),
            ("targetValue", quantity(o.pointer("/target/value")).as_ref()),
            ("selector", o.pointer("/metric/selector")),
            ("averageValue", o.pointer("/target/averageValue")),
        ]);
    }
    if let Some(p) = m.get("pods").filter(|p| p.is_object()) {
        out["pods"] = present(&[("metricName", p.pointer("/metric/name")), ("targetAverageValue", quantity(p.pointer("/target/averageValue")).as_ref()), ("selector", p.pointer("/metric/selector"))]);
    }
    for field in ["resource", "containerResource"] {
        if let Some(r) = m.get(field).filter(|r| r.is_object()) {
            out[field] = present(&[
                ("name", r.get("name")),
                ("targetAverageUtilization", r.pointer("/target/averageUtilization")),
                ("targetAverageValue", r.pointer("/target/averageValue")),
                ("container", r.get("container")),
            ]);
        }
    }
    if let Some(e) = m.get("external").filter(|e| e.is_object()) {
        out["external"] = present(&[
            ("metricName", e.pointer("/metric/name")),
            ("metricSelector", e.pointer("/metric/selector")),
            ("targetValue", e.pointer("/target/value")),
            ("targetAverageValue", e.pointer("/target/averageValue")),
        ]);
    }
    out
}

/// The v2 target type upstream picks from which v1 fields are set.
fn target(ty_if_first: &str, first: Option<&Value>, ty_else: &str, pairs: &[(&str, Option<&Value>)]) -> Value {
    let ty = if first.is_some_and(|v| !v.is_null()) { ty_if_first } else { ty_else };
    let mut t = present(pairs);
    t["type"] = json!(ty);
    t
}

/// One autoscaling/v1 `MetricSpec` (from the annotation) as v2's.
fn metric_spec_from_v1(m: &Value) -> Value {
    let mut out = json!({"type": m["type"]});
    if let Some(o) = m.get("object").filter(|o| o.is_object()) {
        out["object"] = present(&[
            ("describedObject", o.get("target")),
            ("metric", Some(&present(&[("name", o.get("metricName")), ("selector", o.get("selector"))]))),
            ("target", Some(&target("AverageValue", o.get("averageValue"), "Value", &[("value", o.get("targetValue")), ("averageValue", o.get("averageValue"))]))),
        ]);
    }
    if let Some(p) = m.get("pods").filter(|p| p.is_object()) {
        out["pods"] = json!({
            "metric": present(&[("name", p.get("metricName")), ("selector", p.get("selector"))]),
            "target": present(&[("type", Some(&json!("AverageValue"))), ("averageValue", p.get("targetAverageValue"))]),
        });
    }
    for field in ["resource", "containerResource"] {
        if let Some(r) = m.get(field).filter(|r| r.is_object()) {
            let t = target("Utilization", r.get("targetAverageUtilization"), "AverageValue", &[("averageUtilization", r.get("targetAverageUtilization")), ("averageValue", r.get("targetAverageValue"))]);
            out[field] = present(&[("name", r.get("name")), ("target", Some(&t)), ("container", r.get("container"))]);
        }
    }
    if let Some(e) = m.get("external").filter(|e| e.is_object()) {
        out["external"] = json!({
            "metric": present(&[("name", e.get("metricName")), ("selector", e.get("metricSelector"))]),
            "target": target("Value", e.get("targetValue"), "AverageValue", &[("value", e.get("targetValue")), ("averageValue", e.get("targetAverageValue"))]),
        });
    }
    out
}

/// One v2 `MetricStatus` as autoscaling/v1's.
fn metric_status_to_v1(m: &Value) -> Value {
    let mut out = json!({"type": m["type"]});
    if let Some(o) = m.get("object").filter(|o| o.is_object()) {
        out["object"] = present(&[
            ("target", o.get("describedObject")),
            ("metricName", o.pointer("/metric/name")),
            ("currentValue", quantity(o.pointer("/current/value")).as_ref()),
            ("selector", o.pointer("/metric/selector")),
            ("averageValue", o.pointer("/current/averageValue")),
        ]);
    }
    if let Some(p) = m.get("pods").filter(|p| p.is_object()) {
        out["pods"] = present(&[("metricName", p.pointer("/metric/name")), ("currentAverageValue", quantity(p.pointer("/current/averageValue")).as_ref()), ("selector", p.pointer("/metric/selector"))]);
    }
    for field in ["resource", "containerResource"] {
        if let Some(r) = m.get(field).filter(|r| r.is_object()) {
            out[field] = present(&[
                ("name", r.get("name")),
                ("currentAverageUtilization", r.pointer("/current/averageUtilization")),
                ("currentAverageValue", quantity(r.pointer("/current/averageValue")).as_ref()),
                ("container", r.get("container")),
            ]);
        }
    }
    if let Some(e) = m.get("external").filter(|e| e.is_object()) {
        out["external"] = present(&[
            ("metricName", e.pointer("/metric/name")),
            ("metricSelector", e.pointer("/metric/selector")),
            ("currentValue", quantity(e.pointer("/current/value")).as_ref()),
            ("currentAverageValue", e.pointer("/current/averageValue")),
        ]);
    }
    out
}

/// One autoscaling/v1 `MetricStatus` (from the annotation) as v2's.
fn metric_status_from_v1(m: &Value) -> Value {
    let mut out = json!({"type": m["type"]});
    let metric = |name: Option<&Value>, selector: Option<&Value>| present(&[("name", name), ("selector", selector)]);
    if let Some(o) = m.get("object").filter(|o| o.is_object()) {
        out["object"] = json!({
            "describedObject": o.get("target").cloned().unwrap_or(json!({})),
            "metric": metric(o.get("metricName"), o.get("selector")),
            "current": present(&[("value", o.get("currentValue")), ("averageValue", o.get("averageValue"))]),
        });
    }
    if let Some(p) = m.get("pods").filter(|p| p.is_object()) {
        out["pods"] = json!({"metric": metric(p.get("metricName"), p.get("selector")), "current": present(&[("averageValue", p.get("currentAverageValue"))])});
    }
    for field in ["resource", "containerResource"] {
        if let Some(r) = m.get(field).filter(|r| r.is_object()) {
            let current = present(&[("averageValue", r.get("currentAverageValue")), ("averageUtilization", r.get("currentAverageUtilization"))]);
            out[field] = present(&[("name", r.get("name")), ("current", Some(&current)), ("container", r.get("container"))]);
        }
    }
    if let Some(e) = m.get("external").filter(|e| e.is_object()) {
        out["external"] = json!({
            "metric": metric(e.get("metricName"), e.get("metricSelector")),
            "current": present(&[("value", e.get("currentValue")), ("averageValue", e.get("currentAverageValue"))]),
        });
    }
    out
}

fn json_text(v: Option<&Value>) -> String {
    v.map_or_else(|| "null".to_owned(), Value::to_string)
}

/// `spec.behavior` as upstream's annotation holds it: its internal Go type marshalled, which
/// has no JSON tags (field names as in Go, every field written, nil as null).
fn behavior_annotation(b: &Value) -> String {
    let rules = |r: Option<&Value>| -> String {
        let Some(r) = r.filter(|r| r.is_object()) else { return "null".to_owned() };
        let policies = match r.get("policies").and_then(Value::as_array) {
            Some(ps) => {
                let each: Vec<String> = ps.iter().map(|p| format!("{{\"Type\":{},\"Value\":{},\"PeriodSeconds\":{}}}", json_text(p.get("type")), json_text(p.get("value")), json_text(p.get("periodSeconds")))).collect();
                format!("[{}]", each.join(","))
            }
            None => "null".to_owned(),
        };
        format!(
            "{{\"StabilizationWindowSeconds\":{},\"SelectPolicy\":{},\"Policies\":{policies},\"Tolerance\":{}}}",
            json_text(r.get("stabilizationWindowSeconds")),
            json_text(r.get("selectPolicy")),
            json_text(r.get("tolerance"))
        )
    };
    format!("{{\"ScaleUp\":{},\"ScaleDown\":{}}}", rules(b.get("scaleUp")), rules(b.get("scaleDown")))
}

/// A field of a Go-marshalled object, matched as Go's decoder matches: case-insensitively.
fn go_field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v.as_object()?.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v).filter(|v| !v.is_null())
}

/// `spec.behavior` read back from the annotation; None when it holds nothing (upstream ignores
/// an empty or unreadable one).
fn behavior_from_annotation(text: &str) -> Option<Value> {
    let b: Value = serde_json::from_str(text).ok()?;
    let rules = |r: &Value| {
        let policies = go_field(r, "Policies").and_then(Value::as_array).map(|ps| {
            Value::Array(ps.iter().map(|p| present(&[("type", go_field(p, "Type")), ("value", go_field(p, "Value")), ("periodSeconds", go_field(p, "PeriodSeconds"))])).collect())
        });
        present(&[
            ("stabilizationWindowSeconds", go_field(r, "StabilizationWindowSeconds")),
            ("selectPolicy", go_field(r, "SelectPolicy")),
            ("policies", policies.as_ref()),
            ("tolerance", go_field(r, "Tolerance")),
        ])
    };
    let out = present(&[("scaleUp", go_field(&b, "ScaleUp").map(rules).as_ref()), ("scaleDown", go_field(&b, "ScaleDown").map(rules).as_ref())]);
    out.as_object().is_some_and(|o| !o.is_empty()).then_some(out)
}

/// The annotations with upstream's round-trip ones removed (`annotations` dropped when empty).
fn drop_round_trip(obj: &mut Value) -> Map<String, Value> {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else { return Map::new() };
    let mut taken = Map::new();
    if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        for k in ROUND_TRIP {
            if let Some(v) = a.remove(k) {
                taken.insert(k.to_owned(), v);
            }
        }
        if a.is_empty() {
            meta.remove("annotations");
        }
    }
    taken
}

fn annotation_list(taken: &Map<String, Value>, key: &str) -> Option<Vec<Value>> {
    serde_json::from_str::<Vec<Value>>(taken.get(key)?.as_str()?).ok()
}

/// autoscaling/v1 → v2. `fill` applies the implicit CPU target upstream gives a v1 object with
/// none (80% utilization), which a partial apply configuration must not get.
fn hpa_v1_to_v2(mut obj: Value, fill: bool) -> Value {
    let taken = drop_round_trip(&mut obj);
    obj["apiVersion"] = json!("autoscaling/v2");
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        let cpu = spec.remove("targetCPUUtilizationPercentage").filter(|v| !v.is_null());
        let mut metrics: Vec<Value> = annotation_list(&taken, METRIC_SPECS_ANNOTATION).unwrap_or_default().iter().map(metric_spec_from_v1).collect();
        if let Some(p) = cpu {
            metrics.push(json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": p}}}));
        }
        if metrics.is_empty() && fill {
            metrics.push(json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}));
        }
        if !metrics.is_empty() {
            spec.insert("metrics".into(), Value::Array(metrics));
        }
        if let Some(b) = taken.get(BEHAVIOR_ANNOTATION).and_then(Value::as_str).and_then(behavior_from_annotation) {
            spec.insert("behavior".into(), b);
        }
    }
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
        let cpu = status.remove("currentCPUUtilizationPercentage").filter(|v| !v.is_null());
        if let Some(current) = annotation_list(&taken, METRIC_STATUSES_ANNOTATION) {
            // The annotation's metrics carry more than the CPU figure: they win.
            status.insert("currentMetrics".into(), Value::Array(current.iter().map(metric_status_from_v1).collect()));
        } else if let Some(p) = cpu {
            status.insert("currentMetrics".into(), json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": p}}}]));
        }
        if let Some(conditions) = annotation_list(&taken, CONDITIONS_ANNOTATION) {
            status.insert("conditions".into(), Value::Array(conditions));
        }
    }
    obj
}

/// autoscaling/v2 → v1.
fn hpa_v2_to_v1(mut obj: Value) -> Value {
    drop_round_trip(&mut obj);
    obj["apiVersion"] = json!("autoscaling/v1");
    let mut annotations: Vec<(&str, String)> = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(json!({}));
    let metrics = spec.get("metrics").and_then(Value::as_array).cloned().unwrap_or_default();
    let cpu_target = metrics.iter().find(|m| is_cpu_resource(m)).and_then(|m| m.pointer("/resource/target/averageUtilization")).filter(|v| !v.is_null());
    let others: Vec<Value> = metrics.iter().filter(|m| !(is_cpu_resource(m) && m.pointer("/resource/target/averageUtilization").is_some_and(|v| !v.is_null()))).map(metric_spec_to_v1).collect();
    if !others.is_empty() {
        annotations.push((METRIC_SPECS_ANNOTATION, Value::Array(others).to_string()));
    }
    let mut v1_spec = present(&[("scaleTargetRef", spec.get("scaleTargetRef")), ("minReplicas", spec.get("minReplicas")), ("targetCPUUtilizationPercentage", cpu_target)]);
    v1_spec["maxReplicas"] = spec.get("maxReplicas").cloned().unwrap_or(json!(0));
    v1_spec.as_object_mut().expect("an object").entry("scaleTargetRef").or_insert_with(|| json!({"kind": "", "name": ""}));
    if let Some(b) = spec.get("behavior").filter(|b| b.is_object()) {
        annotations.push((BEHAVIOR_ANNOTATION, behavior_annotation(b)));
    }
    let status = obj.get("status").cloned().unwrap_or(json!({}));
    let current = status.get("currentMetrics").and_then(Value::as_array).cloned().unwrap_or_default();
    let cpu_current = current.iter().filter(|m| is_cpu_resource(m)).filter_map(|m| m.pointer("/resource/current/averageUtilization")).rfind(|v| !v.is_null());
    if !current.is_empty() {
        annotations.push((METRIC_STATUSES_ANNOTATION, Value::Array(current.iter().map(metric_status_to_v1).collect()).to_string()));
    }
    if let Some(c) = status.get("conditions").and_then(Value::as_array).filter(|c| !c.is_empty()) {
        annotations.push((CONDITIONS_ANNOTATION, Value::Array(c.clone()).to_string()));
    }
    let mut v1_status = present(&[("observedGeneration", status.get("observedGeneration")), ("lastScaleTime", status.get("lastScaleTime")), ("currentCPUUtilizationPercentage", cpu_current)]);
    v1_status["currentReplicas"] = status.get("currentReplicas").cloned().unwrap_or(json!(0));
    v1_status["desiredReplicas"] = status.get("desiredReplicas").cloned().unwrap_or(json!(0));
    obj["spec"] = v1_spec;
    obj["status"] = v1_status;
    if !annotations.is_empty() {
        let meta = crate::meta::metadata_mut(&mut obj);
        let a = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = a.as_object_mut() {
            for (k, v) in annotations {
                a.insert(k.to_owned(), Value::String(v));
            }
        }
    }
    obj
}

mod resource;
#[cfg(test)]
mod tests;
