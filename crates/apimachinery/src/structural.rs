//! The value rules of a custom resource's structural schema, applied to an object being written
//! after pruning ([`crate::field_validation::drop_unknown_fields`]): nulls of non-nullable fields
//! dropped, `default`s filled in (on every read from storage too), then `required`, `enum`,
//! numeric bounds, string lengths, `pattern` and `format` ([`crate::formats`]), item counts and
//! `x-kubernetes-list-type` uniqueness checked, each failure a Status cause with upstream's
//! field path and message.
//!
//! Written here rather than with a JSON Schema crate: the rules are OpenAPI v3's subset that
//! Kubernetes allows in a CRD, the causes must carry upstream's paths (`spec.items[0].name`) and
//! wording, and pruning, nulls and defaulting are Kubernetes' own steps around them.

use crate::resources::ResourceInfo;
use crate::status::{cause, StatusCause};
use regex::{Regex, RegexBuilder};
use serde_json::Value;
use std::sync::Arc;

/// The most memory one compiled `pattern` may take (its program and its lazy DFA each): a
/// pattern past it is refused at the CRD's write as too complex.
pub const MAX_PATTERN_BYTES: usize = 1 << 20;
/// The most compiled patterns kept; past it the least used are dropped and compiled again when
/// next needed.
const PATTERNS_KEPT: u64 = 4096;

/// Compiled patterns by their text: each schema's patterns are compiled once, not for every
/// string of every write.
static PATTERNS: std::sync::LazyLock<moka::sync::Cache<String, Arc<Result<Regex, String>>>> = std::sync::LazyLock::new(|| moka::sync::Cache::new(PATTERNS_KEPT));

/// The compiled `pattern`, or why it does not compile (or is too complex).
pub fn pattern(p: &str) -> Arc<Result<Regex, String>> {
    PATTERNS.get_with_by_ref(p, || Arc::new(RegexBuilder::new(p).size_limit(MAX_PATTERN_BYTES).dfa_size_limit(MAX_PATTERN_BYTES).build().map_err(|e| e.to_string())))
}

/// Every `pattern` keyword of a schema and its sub-schemas, with its field path as upstream
/// writes it (`…properties[spec].properties[name].pattern`) under `at`.
pub fn patterns<'a>(schema: &'a Value, at: &str, out: &mut Vec<(String, &'a str)>) {
    if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
        out.push((format!("{at}.pattern"), p));
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, ps) in props {
            patterns(ps, &format!("{at}.properties[{k}]"), out);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(sub) = schema.get(key).filter(|x| x.is_object()) {
            patterns(sub, &format!("{at}.{key}"), out);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for (i, sub) in schema.get(key).and_then(Value::as_array).into_iter().flatten().enumerate() {
            patterns(sub, &format!("{at}.{key}[{i}]"), out);
        }
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

/// Drops null values of fields whose schema is not `nullable` (upstream does so before
/// defaulting, so that a default then applies), then fills the schema's `default`s where the
/// object has no value; level by level, so defaults inside a default value apply too.
fn drop_nulls_and_default(schema: &Value, v: &mut Value) {
    match v {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                map.retain(|k, x| !(x.is_null() && props.get(k).is_some_and(|ps| ps.get("nullable") != Some(&Value::Bool(true)))));
                for (k, ps) in props {
                    if !map.contains_key(k)
                        && let Some(d) = ps.get("default")
                    {
                        map.insert(k.clone(), d.clone());
                    }
                    if let Some(x) = map.get_mut(k) {
                        drop_nulls_and_default(ps, x);
                    }
                }
            } else if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for x in map.values_mut() {
                    drop_nulls_and_default(ap, x);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = schema.get("items").filter(|i| i.is_object()) {
                for x in items {
                    drop_nulls_and_default(is, x);
                }
            }
        }
        _ => {}
    }
}

fn check(schema: &Value, v: &Value, path: &str, causes: &mut Vec<StatusCause>) {
    let n = |k: &str| schema.get(k).and_then(Value::as_f64);
    let flag = |k: &str| schema.get(k) == Some(&Value::Bool(true));
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !v.is_null()
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        causes.push(cause("FieldValueNotSupported", path, format!("Unsupported value: {v}: supported values: {}", list.join(", "))));
    }
    match v {
        Value::Object(map) => {
            for r in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
                if !map.contains_key(r) {
                    causes.push(cause("FieldValueRequired", &child(path, r), "Required value"));
                }
            }
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, ps) in props {
                    if let Some(x) = map.get(k) {
                        check(ps, x, &child(path, k), causes);
                    }
                }
            } else if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, x) in map {
                    check(ap, x, &child(path, k), causes);
                }
            }
        }
        Value::Array(items) => {
            if let Some(min) = n("minItems").filter(|m| (items.len() as f64) < *m) {
                causes.push(cause("FieldValueInvalid", path, format!("Invalid value: {}: {path} in body should have at least {min} items", items.len())));
            }
            if let Some(max) = n("maxItems").filter(|m| (items.len() as f64) > *m) {
                causes.push(cause("FieldValueTooMany", path, format!("Too many: {}: must have at most {max} items", items.len())));
            }
            if let Some(is) = schema.get("items").filter(|i| i.is_object()) {
                for (i, x) in items.iter().enumerate() {
                    check(is, x, &format!("{path}[{i}]"), causes);
                }
            }
            check_list_type(schema, items, path, causes);
        }
        Value::String(s) => {
            let len = s.chars().count() as f64;
            if let Some(min) = n("minLength").filter(|m| len < *m) {
                causes.push(cause("FieldValueInvalid", path, format!("Invalid value: {v}: {path} in body should be at least {min} chars long")));
            }
            if let Some(max) = n("maxLength").filter(|m| len > *m) {
                causes.push(cause("FieldValueInvalid", path, format!("Invalid value: {v}: {path} in body should be at most {max} chars long")));
            }
            // A pattern that does not compile (a CRD stored before patterns were checked at
            // its write) matches nothing: the rule fails closed.
            if let Some(p) = schema.get("pattern").and_then(Value::as_str)
                && !pattern(p).as_ref().as_ref().is_ok_and(|re| re.is_match(s))
            {
                causes.push(cause("FieldValueInvalid", path, format!("Invalid value: {v}: {path} in body should match '{p}'")));
            }
            if let Some(f) = schema.get("format").and_then(Value::as_str)
                && !crate::formats::matches(f, s)
            {
                causes.push(cause("FieldValueInvalid", path, format!("Invalid value: {v}: {path} in body must be of type {f}: {v}")));
            }
        }
        Value::Number(x) => {
            let x = x.as_f64().unwrap_or(0.0);
            if let Some(min) = n("minimum") {
                let (low, words) = if flag("exclusiveMinimum") { (x <= min, "greater than") } else { (x < min, "greater than or equal to") };
                if low {
                    causes.push(cause("FieldValueInvalid", path, format!("Invalid value: {v}: {path} in body should be {words} {min}")));
                }
            }
            if let Some(max) = n("maximum") {
                let (high, words) = if flag("exclusiveMaximum") { (x >= max, "less than") } else { (x > max, "less than or equal to") };
                if high {
                    causes.push(cause("FieldValueInvalid", path, format!("Invalid value: {v}: {path} in body should be {words} {max}")));
                }
            }
        }
        _ => {}
    }
}

/// `x-kubernetes-list-type`: a `set`'s items, and a `map`'s items' `x-kubernetes-list-map-keys`,
/// must be unique; each repeat is a `Duplicate value` at its index, as upstream words it.
fn check_list_type(schema: &Value, items: &[Value], path: &str, causes: &mut Vec<StatusCause>) {
    let key_of = |x: &Value| -> Option<Value> {
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str)? {
            "set" => Some(x.clone()),
            "map" => {
                let keys = schema.get("x-kubernetes-list-map-keys").and_then(Value::as_array)?;
                let fields: serde_json::Map<String, Value> = keys.iter().filter_map(Value::as_str).filter_map(|k| Some((k.to_owned(), x.get(k)?.clone()))).collect();
                Some(Value::Object(fields))
            }
            _ => None,
        }
    };
    // Keys by their JSON text (maps' keys are sorted, so equal values write equally): one
    // lookup per item, not a scan of the items before it.
    let mut seen = std::collections::HashSet::new();
    for (i, x) in items.iter().enumerate() {
        let Some(key) = key_of(x) else { return };
        if !seen.insert(key.to_string()) {
            causes.push(cause("FieldValueDuplicate", &format!("{path}[{i}]"), format!("Duplicate value: {}", go_value(&key))));
        }
    }
}

/// A value as Go's `%#v` prints the unstructured value upstream reports (a map's keys sorted).
fn go_value(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys.into_iter().map(|k| format!("{k:?}:{}", go_value(&m[k]))).collect();
            format!("map[string]interface {{}}{{{}}}", fields.join(", "))
        }
        Value::Array(a) => format!("[]interface {{}}{{{}}}", a.iter().map(go_value).collect::<Vec<_>>().join(", ")),
        Value::Null => "interface {}(nil)".to_owned(),
        other => other.to_string(),
    }
}

/// For a custom resource: drops nulls of non-nullable fields and fills defaults — on write and
/// on every read from storage, as upstream, so a default added to a CRD shows on objects stored
/// before it. Nothing for a built-in.
pub fn default_custom(info: &ResourceInfo, obj: &mut Value) {
    if let Some(c) = &info.custom {
        drop_nulls_and_default(&c.schema, obj);
    }
}

/// For a custom resource: [`default_custom`], then the value rules; the causes of a 422 (none
/// for a valid object, or for a built-in).
pub fn admit_custom(info: &ResourceInfo, obj: &mut Value) -> Vec<StatusCause> {
    let Some(c) = &info.custom else { return Vec::new() };
    default_custom(info, obj);
    let mut causes = Vec::new();
    check(&c.schema, obj, "", &mut causes);
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["agent"], "properties": {
            "agent": {"type": "string", "minLength": 1, "maxLength": 8, "pattern": "^[a-z]+$"},
            "phase": {"type": "string", "enum": ["Running", "Suspended"], "default": "Running"},
            "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
            "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": true},
            "tags": {"type": "array", "maxItems": 2, "items": {"type": "string", "minLength": 2}},
            "note": {"type": "string", "nullable": true}
        }}}})
    }

    fn run(spec: Value) -> (Value, Vec<(String, String)>) {
        let mut obj = json!({"spec": spec});
        drop_nulls_and_default(&schema(), &mut obj);
        let mut causes = Vec::new();
        check(&schema(), &obj, "", &mut causes);
        (obj, causes.into_iter().map(|c| (c.field, c.message)).collect())
    }

    #[test]
    fn every_rule_reports_upstreams_path_and_message() {
        let (_, causes) = run(json!({"phase": "Gone", "replicas": 11, "ratio": 0, "tags": ["a", "bb", "cc"]}));
        assert_eq!(
            causes,
            [
                ("spec.agent".to_owned(), "Required value".to_owned()),
                ("spec.phase".to_owned(), "Unsupported value: \"Gone\": supported values: \"Running\", \"Suspended\"".to_owned()),
                ("spec.ratio".to_owned(), "Invalid value: 0: spec.ratio in body should be greater than 0".to_owned()),
                ("spec.replicas".to_owned(), "Invalid value: 11: spec.replicas in body should be less than or equal to 10".to_owned()),
                ("spec.tags".to_owned(), "Too many: 3: must have at most 2 items".to_owned()),
                ("spec.tags[0]".to_owned(), "Invalid value: \"a\": spec.tags[0] in body should be at least 2 chars long".to_owned()),
            ]
        );
        let (_, causes) = run(json!({"agent": "Planner9"}));
        assert_eq!(causes, [("spec.agent".to_owned(), "Invalid value: \"Planner9\": spec.agent in body should match '^[a-z]+$'".to_owned())]);
    }

    #[test]
    fn formats_and_list_types_are_checked() {
        let schema = json!({"type": "object", "properties": {
            "at": {"type": "string", "format": "date-time"},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["protocol", "containerPort"],
                      "items": {"type": "object", "properties": {"containerPort": {"type": "integer"}, "protocol": {"type": "string"}, "name": {"type": "string"}}}}
        }});
        let obj = json!({"at": "noon", "tags": ["a", "b", "a"], "ports": [
            {"containerPort": 80, "protocol": "TCP", "name": "x"}, {"containerPort": 80, "protocol": "UDP"}, {"containerPort": 80, "protocol": "TCP", "name": "y"}]});
        let mut causes = Vec::new();
        check(&schema, &obj, "spec", &mut causes);
        let got: Vec<(String, String, String)> = causes.into_iter().map(|c| (c.reason, c.field, c.message)).collect();
        assert_eq!(got, [
            ("FieldValueInvalid".to_owned(), "spec.at".to_owned(), "Invalid value: \"noon\": spec.at in body must be of type date-time: \"noon\"".to_owned()),
            ("FieldValueDuplicate".to_owned(), "spec.ports[2]".to_owned(), "Duplicate value: map[string]interface {}{\"containerPort\":80, \"protocol\":\"TCP\"}".to_owned()),
            ("FieldValueDuplicate".to_owned(), "spec.tags[2]".to_owned(), "Duplicate value: \"a\"".to_owned()),
        ]);
        let mut causes = Vec::new();
        check(&schema, &json!({"at": "2026-11-30T15:04:05Z", "tags": ["a", "b"], "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443, "protocol": "TCP"}]}), "spec", &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
    }

    #[test]
    fn nulls_go_unless_nullable_and_defaults_fill_the_gaps() {
        let (obj, causes) = run(json!({"agent": "coder", "phase": null, "note": null}));
        assert!(causes.is_empty(), "{causes:?}");
        assert_eq!(obj["spec"], json!({"agent": "coder", "phase": "Running", "note": null}));
    }
}
