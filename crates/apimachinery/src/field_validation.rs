//! Field validation by schema: `fieldValidation` (Ignore, Warn, Strict), unknown fields dropped
//! as decoding into upstream's Go types drops them, values of the wrong type refused as Go's
//! decoder refuses them, duplicate JSON keys found, and a custom resource's pruning.

use crate::openapi::{custom_schema, resolve, schema_name, SCHEMAS};
use crate::resources::ResourceInfo;
use crate::status::ApiError;
use serde_json::Value;

/// `fieldValidation`: what to do with fields the schema does not know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and warn (the default).
    Warn,
    /// Refuse the request.
    Strict,
}

impl FieldValidation {
    /// Parses the query parameter (absent: Warn).
    pub fn parse(v: Option<&str>) -> Result<Self, ApiError> {
        match v.unwrap_or("") {
            "" | "Warn" => Ok(Self::Warn),
            "Ignore" => Ok(Self::Ignore),
            "Strict" => Ok(Self::Strict),
            other => Err(ApiError::bad_request(format!("fieldValidation parameter unsupported: {other:?}; supported values are Ignore, Warn and Strict"))),
        }
    }
}

const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether `v` has the JSON type `schema` asks for (null always fits: Go leaves the zero value).
fn type_fits(schema: &Value, name: Option<&str>, v: &Value) -> Result<(), &'static str> {
    if v.is_null() {
        return Ok(());
    }
    if name == Some(QUANTITY) {
        return if v.is_string() || v.is_number() { Ok(()) } else { Err("resource.Quantity") };
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return if v.is_string() || v.is_i64() || v.is_u64() { Ok(()) } else { Err("intstr.IntOrString") };
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") if !v.is_string() => Err("string"),
        Some("integer") if !(v.is_i64() || v.is_u64()) => Err("integer"),
        Some("number") if !v.is_number() => Err("number"),
        Some("boolean") if !v.is_boolean() => Err("bool"),
        Some("object") if !v.is_object() => Err("object"),
        Some("array") if !v.is_array() => Err("array"),
        _ => Ok(()),
    }
}

/// What a walk of an object against its schema found.
#[derive(Default)]
struct Findings {
    /// Walking a custom resource's schema (structural pruning rules).
    custom: bool,
    unknown: Vec<String>,
    /// (path, JSON type found, type expected)
    mistyped: Vec<(String, &'static str, &'static str)>,
}

fn walk(schema: &Value, v: &mut Value, path: &str, found: &mut Findings) {
    let (schema, name) = resolve(schema);
    if let Err(expected) = type_fits(schema, name, v) {
        found.mistyped.push((path.to_owned(), json_type(v), expected));
        return;
    }
    let flag = |f: &str| schema.get(f) == Some(&Value::Bool(true));
    // A custom resource's schema may keep what it does not name, and an embedded object's
    // apiVersion, kind and metadata are always its own.
    let (preserve, embedded) = (flag("x-kubernetes-preserve-unknown-fields"), flag("x-kubernetes-embedded-resource"));
    match v {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                let keys: Vec<String> = map.keys().cloned().collect();
                for k in keys {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    match props.get(&k) {
                        Some(ps) => walk(ps, map.get_mut(&k).expect("key"), &p, found),
                        None if preserve || (embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata")) => {}
                        None => {
                            found.unknown.push(p);
                            map.remove(&k);
                        }
                    }
                }
            } else if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, item) in map.iter_mut() {
                    walk(ap, item, &format!("{path}.{k}"), found);
                }
            } else if found.custom && name.is_none() && !preserve && schema.get("type").and_then(Value::as_str) == Some("object") {
                // A custom resource's object that names no field keeps none (structural
                // pruning), unless it preserves unknown fields.
                let keys: Vec<String> = map.keys().filter(|k| !(embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))).cloned().collect();
                for k in keys {
                    found.unknown.push(if path.is_empty() { k.clone() } else { format!("{path}.{k}") });
                    map.remove(&k);
                }
            }
            // Otherwise, no properties and no additionalProperties: opaque (RawExtension, FieldsV1).
        }
        Value::Array(items) => {
            if let Some(is) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(is, item, &format!("{path}[{i}]"), found);
                }
            }
        }
        _ => {}
    }
}

/// The paths of keys that occur twice in one object of a JSON document (`spec.replicas`,
/// `spec.containers[0].name`), in document order. A parsed `Value` keeps only the last, as Go's
/// decoder does, so strict validation has to read the bytes.
pub fn duplicate_fields(json: &[u8]) -> Vec<String> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    use std::cell::RefCell;

    /// Where a value is: a chain of steps up to the document, written out only for a duplicate
    /// (building every key's full path would cost the path's length per key).
    enum Step<'a> {
        Root,
        Key(&'a Step<'a>, &'a str),
        Index(&'a Step<'a>, usize),
    }
    impl Step<'_> {
        fn write(&self, out: &mut String) {
            match self {
                Step::Root => {}
                Step::Key(parent, key) => {
                    parent.write(out);
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(key);
                }
                Step::Index(parent, i) => {
                    parent.write(out);
                    out.push_str(&format!("[{i}]"));
                }
            }
        }
    }
    struct Walk<'a> {
        at: &'a Step<'a>,
        found: &'a RefCell<Vec<String>>,
    }
    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                let step = Step::Key(self.at, &key);
                if seen.contains(&key) {
                    let mut path = String::new();
                    step.write(&mut path);
                    self.found.borrow_mut().push(path);
                }
                map.next_value_seed(Walk { at: &step, found: self.found })?;
                seen.insert(key);
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0;
            while seq.next_element_seed(Walk { at: &Step::Index(self.at, i), found: self.found })?.is_some() {
                i += 1;
            }
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }
    let found = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_slice(json);
    // A body that does not parse was refused before; nothing to report then.
    let _ = Walk { at: &Step::Root, found: &found }.deserialize(&mut de);
    found.into_inner()
}

/// Decodes `obj` as the typed object would be decoded upstream: a value of the wrong JSON type is
/// a 400 (`cannot unmarshal … into Go struct field …`); fields the schema does not know are
/// dropped. Those, and the `duplicates` found in the body, are refused with `Strict` and returned
/// as warning texts (`unknown field "…"`, `duplicate field "…"`) with `Warn`.
pub fn drop_unknown_fields(info: &ResourceInfo, obj: &mut Value, mode: FieldValidation, duplicates: &[String]) -> Result<Vec<String>, ApiError> {
    let unknown = prune(info, obj)?;
    let problems: Vec<String> = unknown.iter().map(|u| format!("unknown field {u:?}")).chain(duplicates.iter().map(|d| format!("duplicate field {d:?}"))).collect();
    if mode == FieldValidation::Strict && !problems.is_empty() {
        return Err(ApiError::bad_request(format!("strict decoding error: {}", problems.join(", "))));
    }
    Ok(if mode == FieldValidation::Warn { problems } else { vec![] })
}

/// Drops the fields of `obj` its schema does not know and returns their paths (`spec.bogus`); a
/// value of the wrong type is an error, as [`drop_unknown_fields`] says.
pub fn prune(info: &ResourceInfo, obj: &mut Value) -> Result<Vec<String>, ApiError> {
    let mut found = Findings::default();
    if let Some((_, schema)) = custom_schema(info) {
        found.custom = true;
        walk(&schema, obj, "", &mut found);
        // A custom object of the wrong shape is invalid (422), as upstream's schema validation
        // says, not undecodable.
        if !found.mistyped.is_empty() {
            let causes = found.mistyped.iter().map(|(path, got, expected)| crate::status::cause("FieldValueTypeInvalid", path, format!("Invalid value: {got:?}: {path} in body must be of type {expected}: {got:?}"))).collect();
            let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
            return Err(ApiError::invalid(&info.group, &info.kind, name, causes));
        }
    } else if let Some(name) = schema_name(&info.group, &info.version, &info.kind) {
        walk(&SCHEMAS[name], obj, "", &mut found);
    }
    if let Some((path, got, expected)) = found.mistyped.first() {
        let field = if path.is_empty() { String::new() } else { format!(" field {}.{path}", info.kind) };
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: json: cannot unmarshal {got} into Go struct{field} of type {expected}",
            kind = info.kind,
            version = info.version
        )));
    }
    Ok(found.unknown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{builtin_resources, find};
    use serde_json::json;

    #[test]
    fn unknown_fields_are_found_at_every_depth() {
        let all = builtin_resources();
        let deploy = find(&all, "apps", "v1", "deployments").unwrap();
        let mut obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {"a": "b"}, "bogus": 1},
            "spec": {"unknownField": 1, "template": {"spec": {"containers": [{"name": "c", "image": "i", "wat": true, "resources": {"limits": {"cpu": "1"}}}]}}},
            "status": {"conditions": [{"type": "Available", "nope": 1}]}});
        let e = drop_unknown_fields(deploy, &mut obj.clone(), FieldValidation::Strict, &[]).unwrap_err();
        assert_eq!(e.code, 400);
        assert!(e.message.starts_with("strict decoding error: unknown field \"metadata.bogus\""), "{}", e.message);
        let warned = drop_unknown_fields(deploy, &mut obj, FieldValidation::Warn, &[]).unwrap();
        assert_eq!(warned, [r#"unknown field "metadata.bogus""#, r#"unknown field "spec.template.spec.containers[0].wat""#, r#"unknown field "spec.unknownField""#, r#"unknown field "status.conditions[0].nope""#]);
        assert_eq!(obj["spec"], json!({"template": {"spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}}}]}}}));
        assert_eq!(obj["metadata"]["labels"], json!({"a": "b"}));
    }

    #[test]
    fn values_of_the_wrong_type_are_refused_like_go_decoding() {
        let all = builtin_resources();
        let cm = find(&all, "", "v1", "configmaps").unwrap();
        for bad in [json!({"data": 5}), json!({"data": {"k": 1}}), json!({"metadata": "x"}), json!({"metadata": {"labels": {"a": true}}}), json!({"immutable": "yes"})] {
            let e = drop_unknown_fields(cm, &mut bad.clone(), FieldValidation::Ignore, &[]).unwrap_err();
            assert_eq!(e.code, 400, "{bad}");
            assert!(e.message.starts_with("ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal"), "{}", e.message);
        }
        let deploy = find(&all, "apps", "v1", "deployments").unwrap();
        let ok = json!({"spec": {"replicas": null, "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"}},
            "template": {"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": 1, "memory": "1Gi"}}}]}}}});
        assert!(drop_unknown_fields(deploy, &mut ok.clone(), FieldValidation::Strict, &[]).is_ok());
        let e = drop_unknown_fields(deploy, &mut json!({"spec": {"replicas": "3"}}), FieldValidation::Ignore, &[]).unwrap_err();
        assert_eq!(e.message, "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field Deployment.spec.replicas of type integer");
    }

    #[test]
    fn duplicate_keys_are_found_by_path_and_refused_or_warned() {
        let body = br#"{"spec": {"unknownField": "x", "replicas": 1, "replicas": 2, "template": {"spec": {"containers": [{"name": "a", "name": "b"}]}}}}"#;
        let dups = duplicate_fields(body);
        assert_eq!(dups, ["spec.replicas", "spec.template.spec.containers[0].name"]);
        let all = builtin_resources();
        let deploy = find(&all, "apps", "v1", "deployments").unwrap();
        let mut obj: Value = serde_json::from_slice(body).unwrap();
        let e = drop_unknown_fields(deploy, &mut obj.clone(), FieldValidation::Strict, &dups).unwrap_err();
        assert_eq!(e.message, r#"strict decoding error: unknown field "spec.unknownField", duplicate field "spec.replicas", duplicate field "spec.template.spec.containers[0].name""#);
        let warned = drop_unknown_fields(deploy, &mut obj, FieldValidation::Warn, &dups).unwrap();
        assert_eq!(warned.len(), 3);
        assert!(duplicate_fields(br#"{"a": {"b": 1}, "c": [{"b": 1}, {"b": 2}]}"#).is_empty());
    }
}
