//! ConfigMap and Secret: their keys, what they may hold together, and the `immutable` field.

use crate::resources::ResourceInfo;
use crate::status::{cause, StatusCause};
use serde_json::Value;

const CONFIG_KEY_MAX: usize = 253;
const IMMUTABLE: &str = "Forbidden: field is immutable when `immutable` is set";

fn is_config_key(k: &str) -> bool {
    !k.is_empty() && k.len() <= CONFIG_KEY_MAX && k.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) && k != "." && k != ".."
}

/// The most bytes a ConfigMap's or Secret's data may hold together (upstream's MaxSecretSize).
pub const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The data maps of a ConfigMap or Secret, if `info` is one of them.
pub(super) fn data_fields(info: &ResourceInfo) -> Option<&'static [&'static str]> {
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "configmaps") => Some(&["data", "binaryData"]),
        ("", "secrets") => Some(&["data", "stringData"]),
        _ => None,
    }
}

/// A ConfigMap's or Secret's keys and size, on create and update.
pub(super) fn validate(info: &ResourceInfo, obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let Some(fields) = data_fields(info) else { return causes };
    for field in fields {
        for k in obj.get(*field).and_then(Value::as_object).into_iter().flat_map(|m| m.keys()) {
            if !is_config_key(k) {
                let why = if k.len() > CONFIG_KEY_MAX {
                    format!("must be no more than {CONFIG_KEY_MAX} characters")
                } else {
                    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')".to_owned()
                };
                causes.push(cause("FieldValueInvalid", &format!("{field}[{k}]"), format!("Invalid value: {k:?}: {why}")));
            }
        }
    }
    // Upstream's limit on what a ConfigMap or Secret holds (binary values counted decoded).
    let held: usize = fields
        .iter()
        .flat_map(|f| obj.get(*f).and_then(Value::as_object).into_iter().flat_map(|m| m.values()).map(move |v| (f, v)))
        .map(|(f, v)| {
            let len = v.as_str().map_or(0, str::len);
            if *f == "binaryData" || (info.plural == "secrets" && *f == "data") { len / 4 * 3 } else { len }
        })
        .sum();
    if held > MAX_DATA_BYTES {
        causes.push(cause("FieldValueTooLong", "", format!("Too long: may not be more than {MAX_DATA_BYTES} bytes")));
    }
    if info.plural == "configmaps" {
        let data = obj.get("data").and_then(Value::as_object);
        for k in obj.get("binaryData").and_then(Value::as_object).into_iter().flat_map(|m| m.keys()) {
            if data.is_some_and(|d| d.contains_key(k)) {
                causes.push(cause("FieldValueInvalid", &format!("data[{k}]"), format!("Invalid value: {k:?}: duplicate of key present in binaryData")));
            }
        }
    }
    causes
}

/// An immutable ConfigMap or Secret keeps its data and stays immutable.
pub(super) fn validate_update(info: &ResourceInfo, old: &Value, new: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let Some(fields) = data_fields(info) else { return causes };
    if old.get("immutable") != Some(&Value::Bool(true)) {
        return causes;
    }
    if new.get("immutable") != Some(&Value::Bool(true)) {
        causes.push(cause("FieldValueForbidden", "immutable", IMMUTABLE));
    }
    for field in fields.iter().copied().chain(info.plural.eq("secrets").then_some("type")) {
        if old.get(field) != new.get(field) {
            causes.push(cause("FieldValueForbidden", field, IMMUTABLE));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::super::{validate, validate_update};
    use crate::resources::{builtin_resources, find};
    use serde_json::json;

    #[test]
    fn config_keys_follow_upstream() {
        let all = builtin_resources();
        let cm = find(&all, "", "v1", "configmaps").unwrap();
        assert!(validate(cm, &json!({"data": {"a.b_c-D9": "x"}, "binaryData": {"bin": "eA=="}})).is_empty());
        let bad = validate(cm, &json!({"data": {"": "x", "a/b": "y", "..": "z", "dup": "1"}, "binaryData": {"dup": "eA=="}}));
        let fields: Vec<&str> = bad.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["data[]", "data[..]", "data[a/b]", "data[dup]"]);
        let secret = find(&all, "", "v1", "secrets").unwrap();
        assert_eq!(validate(secret, &json!({"stringData": {"": "x"}}))[0].field, "stringData[]");
    }

    #[test]
    fn immutable_objects_keep_their_data_and_stay_immutable() {
        let all = builtin_resources();
        let cm = find(&all, "", "v1", "configmaps").unwrap();
        let old = json!({"immutable": true, "data": {"a": "1"}, "metadata": {"labels": {}}});
        assert!(validate_update(cm, &old, &json!({"immutable": true, "data": {"a": "1"}, "metadata": {"labels": {"x": "y"}}})).is_empty());
        assert_eq!(validate_update(cm, &old, &json!({"immutable": true, "data": {"a": "2"}}))[0].field, "data");
        assert_eq!(validate_update(cm, &old, &json!({"immutable": false, "data": {"a": "1"}}))[0].field, "immutable");
        assert!(validate_update(cm, &json!({"data": {"a": "1"}}), &json!({"data": {"a": "2"}})).is_empty());
    }
}
