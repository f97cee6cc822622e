//! PATCH bodies: JSON patch (RFC 6902) and JSON merge patch (RFC 7386) through the `json-patch`
//! crate, and strategic merge patch written here with the list merge keys of the kinds we serve.
//!
//! Strategic merge patch has no maintained Rust implementation; ours covers what kubectl sends:
//! maps merge recursively, `null` deletes, lists with a merge key merge element-wise (`$patch:
//! delete` removes one), `finalizers` merge as a set, other lists replace; `$patch: replace`,
//! `$retainKeys`, `$setElementOrder/…` and `$deleteFromPrimitiveList/…` directives are honoured.

use crate::status::ApiError;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet, VecDeque};

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
            json_patch_bounded(target, &p.0)
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

/// Upstream's most operations in one JSON patch (413 past it).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;
/// The most bytes `copy` operations of one JSON patch may add together: the request body limit,
/// so that a patch cannot grow an object past what a client could have sent (each `copy` of the
/// whole object would otherwise double it).
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 * 1024 * 1024;

/// Applies a JSON patch within upstream's bounds. The target is the caller's copy: on an error
/// it is left part-patched and must be dropped.
fn json_patch_bounded(target: &mut Value, ops: &[json_patch::PatchOperation]) -> Result<(), ApiError> {
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(ApiError::too_large_message(format!("The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}", ops.len())));
    }
    let mut copied = 0usize;
    for (i, op) in ops.iter().enumerate() {
        if let json_patch::PatchOperation::Copy(c) = op {
            copied = copied.saturating_add(target.pointer(c.from.as_str()).map_or(0, encoded_len));
            if copied > MAX_JSON_PATCH_COPY_BYTES {
                return Err(ApiError::unprocessable(format!("Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}")));
            }
        }
        json_patch::patch_unsafe(target, std::slice::from_ref(op)).map_err(|mut e| {
            // Applied one at a time: the failing operation's index is its place in the patch.
            e.operation = i;
            ApiError::unprocessable(e.to_string())
        })?;
    }
    Ok(())
}

/// The length of `v` as compact JSON, without building it.
fn encoded_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
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
        let keep: HashSet<&str> = retain.iter().filter_map(Value::as_str).collect();
        tmap.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, pv) in pmap {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(list), Some(del)) = (tmap.get_mut(field).and_then(Value::as_array_mut), pv.as_array()) {
                let del: HashSet<String> = del.iter().map(Value::to_string).collect();
                list.retain(|x| !del.contains(&x.to_string()));
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
                            let mut present: HashSet<String> = arr.iter().map(Value::to_string).collect();
                            for it in items {
                                if present.insert(it.to_string()) {
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
    // Elements by merge key, so that each patch item finds its element at once (a scan per item
    // is quadratic in the list's length); deleted ones are dropped at the end.
    let mut at: HashMap<String, VecDeque<usize>> = HashMap::new();
    for (i, e) in arr.iter().enumerate() {
        if let Some(k) = e.get(mk) {
            at.entry(k.to_string()).or_default().push_back(i);
        }
    }
    let mut deleted = HashSet::new();
    for item in items {
        let Some(key) = item.get(mk).map(Value::to_string) else {
            arr.push(strip_directives_value(item));
            continue;
        };
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        let first = at.get(&key).and_then(|q| q.front().copied());
        match (first, delete) {
            (Some(i), true) => {
                // The next element with the same key (if any) is the one found next, as after
                // a removal.
                deleted.insert(i);
                at.get_mut(&key).map(VecDeque::pop_front);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge(&mut arr[i], item, field),
            (None, false) => {
                at.entry(key).or_default().push_back(arr.len());
                arr.push(strip_directives_value(item));
            }
        }
    }
    if !deleted.is_empty() {
        let mut i = 0;
        arr.retain(|_| {
            i += 1;
            !deleted.contains(&(i - 1))
        });
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

    /// The keyed-list merge as written first: a scan of the list per patch item (quadratic, but
    /// plainly what a strategic merge means).
    fn keyed_merge_model(list: &mut Vec<Value>, items: &[Value], mk: &str) {
        for item in items {
            let Some(key) = item.get(mk) else {
                list.push(strip_directives_value(item));
                continue;
            };
            let pos = list.iter().position(|e| e.get(mk) == Some(key));
            match (pos, item.get("$patch").and_then(Value::as_str) == Some("delete")) {
                (Some(i), true) => {
                    list.remove(i);
                }
                (None, true) => {}
                (Some(i), false) => strategic_merge(&mut list[i], item, "containers"),
                (None, false) => list.push(strip_directives_value(item)),
            }
        }
    }

    proptest::proptest! {
        /// The indexed keyed-list merge gives what the scan per item gives, duplicates in the
        /// list, deletes and merges of the same key included.
        #[test]
        fn keyed_list_merge_equals_the_scanning_model(
            list in proptest::collection::vec((0u8..6, 0u8..3), 0..12),
            items in proptest::collection::vec((0u8..8, 0u8..3, proptest::bool::ANY), 0..12),
        ) {
            let list: Vec<Value> = list.iter().map(|(k, v)| json!({"name": format!("c{k}"), "image": format!("i{v}")})).collect();
            let items: Vec<Value> = items.iter().map(|(k, v, del)| if *del { json!({"name": format!("c{k}"), "$patch": "delete"}) } else { json!({"name": format!("c{k}"), "tag": v}) }).collect();
            let mut want = list.clone();
            keyed_merge_model(&mut want, &items, "name");
            let mut tmap = Map::new();
            tmap.insert("containers".into(), Value::Array(list));
            merge_keyed_list(&mut tmap, "containers", &items, "name");
            proptest::prop_assert_eq!(&tmap["containers"], &Value::Array(want));
        }
    }

    #[test]
    fn json_patch_bombs_are_refused_within_their_bounds() {
        // Each copy doubles the object: refused once the copies add up past the body limit.
        let mut d = json!({"a": "x".repeat(1000)});
        let mut ops = vec![json!({"op": "add", "path": "/b", "value": {"x": "y".repeat(1000)}})];
        for i in 0..40 {
            ops.push(json!({"op": "copy", "from": "", "path": format!("/c{i}")}));
        }
        let e = patch_object(PatchType::Json, &mut d, &serde_json::to_vec(&ops).unwrap()).unwrap_err();
        assert_eq!((e.code, e.reason), (422, "Invalid"), "{}", e.message);
        assert!(e.message.contains("accumulated size increase of copy"), "{}", e.message);
        // Too many operations: 413 before any is applied.
        let many: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS).map(|_| json!({"op": "test", "path": "/a", "value": "x"})).collect();
        let mut d = json!({"a": "x"});
        let e = patch_object(PatchType::Json, &mut d, &serde_json::to_vec(&many).unwrap()).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (413, "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"));
        // The failing operation is named by its place in the whole patch.
        let mut d = json!({"a": 1});
        let e = patch_object(PatchType::Json, &mut d, br#"[{"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/zz"}]"#).unwrap_err();
        assert!(e.message.starts_with("operation '/1' failed"), "{}", e.message);
        // Copies within the bound apply.
        let mut d = json!({"a": {"b": 1}});
        patch_object(PatchType::Json, &mut d, br#"[{"op": "copy", "from": "/a", "path": "/c"}]"#).unwrap();
        assert_eq!(d, json!({"a": {"b": 1}, "c": {"b": 1}}));
    }

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
