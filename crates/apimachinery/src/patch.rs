//! PATCH bodies: JSON patch (RFC 6902) and JSON merge patch (RFC 7386) through the `json-patch`
//! crate, and strategic merge patch written here with the list merge keys of the kinds we serve.
//!
//! Strategic merge patch has no maintained Rust implementation; ours covers what kubectl sends:
//! maps merge recursively, `null` deletes, lists with a merge key merge element-wise (`$patch:
//! delete` removes one), `finalizers` merge as a set, other lists replace; `$patch: replace`,
//! `$retainKeys`, `$setElementOrder/…` and `$deleteFromPrimitiveList/…` directives are honoured.

use crate::status::ApiError;
use serde_json::{Map, Value};

/// The patch formats, by request `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    /// The patch type for a `Content-Type` (parameters ignored).
    pub fn from_content_type(ct: &str) -> Option<Self> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/json-patch+json" => Some(Self::Json),
            "application/merge-patch+json" => Some(Self::Merge),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Patches `target` with `patch` (the raw body) of type `ty`.
pub fn patch_object(ty: PatchType, target: &mut Value, patch: &[u8]) -> Result<(), ApiError> {
    match ty {
        PatchType::Json => {
            let p: json_patch::Patch = serde_json::from_slice(patch).map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::patch(target, &p).map_err(|e| ApiError::unprocessable(e.to_string()))
        }
        PatchType::Merge => {
            let p: Value = parse_object(patch)?;
            json_patch::merge(target, &p);
            Ok(())
        }
        PatchType::Strategic => {
            let p: Value = parse_object(patch)?;
            strategic_merge(target, &p, "");
            Ok(())
        }
        // Server-side apply needs the object's schema and managed fields: `crate::apply` does it.
        PatchType::Apply => Err(ApiError::unsupported_media_type("application/apply-patch+yaml")),
    }
}

fn parse_object(patch: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(patch).map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request("error decoding patch: a merge patch must be a JSON object"));
    }
    Ok(v)
}

/// What a strategic merge patch does with a list field.
enum ListStrategy {
    /// Merge elements by this key.
    MergeKey(&'static str),
    /// A set of scalars (`finalizers`).
    PrimitiveSet,
    /// Replace the whole list.
    Replace,
}

/// The upstream `patchMergeKey`s of the kinds served (field name under its parent).
fn list_strategy(field: &str, sample: Option<&Value>) -> ListStrategy {
    match field {
        "containers" | "initContainers" | "ephemeralContainers" | "volumes" | "imagePullSecrets" | "env" | "resourceClaims" | "schedulingGates" => ListStrategy::MergeKey("name"),
        "volumeMounts" => ListStrategy::MergeKey("mountPath"),
        "volumeDevices" => ListStrategy::MergeKey("devicePath"),
        "hostAliases" => ListStrategy::MergeKey("ip"),
        "conditions" => ListStrategy::MergeKey("type"),
        "ownerReferences" => ListStrategy::MergeKey("uid"),
        "topologySpreadConstraints" => ListStrategy::MergeKey("topologyKey"),
        "finalizers" => ListStrategy::PrimitiveSet,
        // Container ports merge by containerPort, Service ports by port.
        "ports" => match sample {
            Some(v) if v.get("containerPort").is_some() => ListStrategy::MergeKey("containerPort"),
            _ => ListStrategy::MergeKey("port"),
        },
        _ => ListStrategy::Replace,
    }
}

/// Applies a strategic merge patch object to `target` (which is replaced if not an object).
pub fn strategic_merge(target: &mut Value, patch: &Value, _path: &str) {
    let Some(pmap) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if pmap.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut p = pmap.clone();
        p.remove("$patch");
        *target = Value::Object(strip_directives(p));
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let tmap = target.as_object_mut().expect("object");
    if let Some(retain) = pmap.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        tmap.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, pv) in pmap {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(list), Some(del)) = (tmap.get_mut(field).and_then(Value::as_array_mut), pv.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        match pv {
            Value::Null => {
                tmap.remove(k);
            }
            Value::Object(_) => {
                let t = tmap.entry(k.clone()).or_insert(Value::Null);
                strategic_merge(t, pv, k);
            }
            Value::Array(items) => {
                let sample = items.first().or_else(|| tmap.get(k).and_then(|t| t.as_array()).and_then(|a| a.first()));
                match list_strategy(k, sample) {
                    ListStrategy::Replace => {
                        tmap.insert(k.clone(), pv.clone());
                    }
                    ListStrategy::PrimitiveSet => {
                        let list = tmap.entry(k.clone()).or_insert_with(|| Value::Array(vec![]));
                        if let Some(arr) = list.as_array_mut() {
                            for it in items {
                                if !arr.contains(it) {
                                    arr.push(it.clone());
                                }
                            }
                        } else {
                            *list = pv.clone();
                        }
                    }
                    ListStrategy::MergeKey(mk) => merge_keyed_list(tmap, k, items, mk),
                }
            }
            _ => {
                tmap.insert(k.clone(), pv.clone());
            }
        }
    }
}

fn merge_keyed_list(tmap: &mut Map<String, Value>, field: &str, items: &[Value], mk: &str) {
    if items.iter().any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace")) {
        let kept: Vec<Value> = items.iter().filter(|i| i.get("$patch").is_none()).cloned().collect();
        tmap.insert(field.to_owned(), Value::Array(kept));
        return;
    }
    let list = tmap.entry(field.to_owned()).or_insert_with(|| Value::Array(vec![]));
    if !list.is_array() {
        *list = Value::Array(vec![]);
    }
    let arr = list.as_array_mut().expect("array");
    for item in items {
        let Some(key) = item.get(mk) else {
            arr.push(strip_directives_value(item));
            continue;
        };
        let pos = arr.iter().position(|e| e.get(mk) == Some(key));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                arr.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge(&mut arr[i], item, field),
            (None, false) => arr.push(strip_directives_value(item)),
        }
    }
}

fn strip_directives(m: Map<String, Value>) -> Map<String, Value> {
    m.into_iter().filter(|(k, _)| !k.starts_with('$')).map(|(k, v)| (k, strip_directives_value(&v))).collect()
}

fn strip_directives_value(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_directives(m.clone())),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives_value).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merges_containers_by_name_and_deletes() {
        let mut d = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}
        ]}}}, "metadata": {"labels": {"x": "1", "y": "2"}, "finalizers": ["f1"]}});
        let p = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}]}, {"name": "b", "$patch": "delete"}]
        }}}, "metadata": {"labels": {"y": null, "z": "3"}, "finalizers": ["f2"]}});
        patch_object(PatchType::Strategic, &mut d, &serde_json::to_vec(&p).unwrap()).unwrap();
        assert_eq!(
            d,
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "a:2", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}
            ]}}}, "metadata": {"labels": {"x": "1", "z": "3"}, "finalizers": ["f1", "f2"]}})
        );
    }

    #[test]
    fn merge_and_json_patch() {
        let mut d = json!({"a": {"b": 1, "c": [1, 2]}});
        patch_object(PatchType::Merge, &mut d, br#"{"a": {"b": null, "c": [3]}}"#).unwrap();
        assert_eq!(d, json!({"a": {"c": [3]}}));
        patch_object(PatchType::Json, &mut d, br#"[{"op": "add", "path": "/a/d", "value": "x"}]"#).unwrap();
        assert_eq!(d["a"]["d"], "x");
        let e = patch_object(PatchType::Json, &mut d, br#"[{"op": "test", "path": "/a/d", "value": "y"}]"#).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(patch_object(PatchType::Merge, &mut d, b"[1]").unwrap_err().code, 400);
        assert_eq!(patch_object(PatchType::Json, &mut d, b"{").unwrap_err().code, 400);
    }
}
