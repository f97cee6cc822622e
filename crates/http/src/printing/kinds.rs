//! The printer columns of the built-in kinds, as upstream's printers
//! (`pkg/printers/internalversion`) define them: each column's definition and how a row's cell
//! is read from the object. [`of`] finds a kind's columns; [`workloads`](super::workloads) and
//! [`cluster`](super::cluster) hold them.

use serde_json::{json, Value};

/// One printer column: its definition and how a row's cell is read.
pub(super) struct Column {
    pub name: &'static str,
    pub ty: &'static str,
    /// 0: shown by default; 1: with `-o wide`.
    pub priority: u8,
    pub description: &'static str,
    pub cell: fn(&Value) -> Value,
}

/// A column shown by default.
pub(super) const fn col(name: &'static str, description: &'static str, cell: fn(&Value) -> Value) -> Column {
    Column { name, ty: "string", priority: 0, description, cell }
}

/// A column of type integer, shown by default.
pub(super) const fn int(name: &'static str, description: &'static str, cell: fn(&Value) -> Value) -> Column {
    Column { name, ty: "integer", priority: 0, description, cell }
}

/// A column shown with `-o wide`.
pub(super) const fn wide(name: &'static str, description: &'static str, cell: fn(&Value) -> Value) -> Column {
    Column { name, ty: "string", priority: 1, description, cell }
}

pub(super) const NAME: Column = Column { name: "Name", ty: "string", priority: 0, description: super::NAME_DESC, cell: name };
pub(super) const AGE: Column = Column { name: "Age", ty: "string", priority: 0, description: super::AGE_DESC, cell: age_cell };
/// What upstream prints for kinds with no more to show than when they were made.
pub(super) const CREATED_AT: Column = col("Created At", super::AGE_DESC, created_at);

/// The columns of a built-in kind, if upstream prints more than Name and Age for it.
pub(super) fn of(group: &str, plural: &str) -> Option<&'static [Column]> {
    super::workloads::of(group, plural).or_else(|| super::cluster::of(group, plural))
}

pub(super) fn name(obj: &Value) -> Value {
    json!(s(obj, "/metadata/name"))
}

pub(super) fn age_cell(obj: &Value) -> Value {
    json!(super::age(obj.pointer("/metadata/creationTimestamp").and_then(Value::as_str)))
}

/// `creationTimestamp` as upstream prints a time (RFC 3339, seconds, UTC).
fn created_at(obj: &Value) -> Value {
    json!(s(obj, "/metadata/creationTimestamp"))
}

/// The age since the time at `ptr`, or `<none>` where there is none.
pub(super) fn age_at(obj: &Value, ptr: &str) -> Value {
    match obj.pointer(ptr).and_then(Value::as_str) {
        Some(t) => json!(super::age(Some(t))),
        None => json!("<none>"),
    }
}

pub(super) fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

pub(super) fn n(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}

/// The string at `ptr`, `<none>` where empty.
pub(super) fn text_or_none(v: &Value, ptr: &str) -> Value {
    json!(none_if_empty(s(v, ptr).to_owned()))
}

/// The value at `ptr` as text (a number or a string, as Go's `%v` prints it), `<none>` where absent.
pub(super) fn shown(v: &Value, ptr: &str) -> String {
    match v.pointer(ptr) {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Null) | None => "<none>".into(),
        Some(other) => other.to_string(),
    }
}

pub(super) fn none_if_empty(x: String) -> String {
    if x.is_empty() { "<none>".into() } else { x }
}

/// The strings of the array at `ptr`.
pub(super) fn strings<'a>(v: &'a Value, ptr: &str) -> Vec<&'a str> {
    v.pointer(ptr).and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

/// A label map as a selector (`a=b,c=d`, sorted).
pub(super) fn selector_text(m: Option<&Value>) -> String {
    let mut parts: Vec<String> = m.and_then(Value::as_object).map(|o| o.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect()).unwrap_or_default();
    parts.sort();
    parts.join(",")
}

/// A LabelSelector as upstream's `metav1.FormatLabelSelector` writes it (`<none>` for none or
/// an empty one).
pub(super) fn label_selector(sel: Option<&Value>) -> String {
    let Some(sel) = sel.filter(|s| s.is_object()) else { return "<none>".into() };
    let mut parts: Vec<String> = Vec::new();
    if let Some(m) = sel.get("matchLabels") {
        let t = selector_text(Some(m));
        if !t.is_empty() {
            parts.push(t);
        }
    }
    for e in sel.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or("");
        let values: Vec<&str> = e["values"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        parts.push(match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other}"),
        });
    }
    if parts.is_empty() { "<none>".into() } else { parts.join(",") }
}

/// A pod template's containers' names and images (`-o wide` columns of the workloads).
pub(super) fn containers(obj: &Value, template: &str) -> (String, String) {
    let list = obj.pointer(template).and_then(Value::as_array).cloned().unwrap_or_default();
    let names: Vec<&str> = list.iter().filter_map(|c| c["name"].as_str()).collect();
    let images: Vec<&str> = list.iter().filter_map(|c| c["image"].as_str()).collect();
    (names.join(","), images.join(","))
}
