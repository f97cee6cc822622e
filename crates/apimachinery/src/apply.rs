//! Server-side apply (`application/apply-patch+yaml`): the applied configuration is parsed as
//! YAML, merged into the live object by the object's schema, and the fields it sets are recorded
//! as its manager's in `metadata.managedFields` (FieldsV1), so that the next apply by the same
//! manager removes what it no longer sets, and an apply that changes a field another applier
//! owns is a conflict (409) unless forced.
//!
//! The schema says how a list merges, as upstream's structured-merge-diff reads it:
//! `x-kubernetes-list-type: map` by its `x-kubernetes-list-map-keys` (or, on a built-in list
//! without a list type, by its `x-kubernetes-patch-merge-key`), `set` by value, anything else
//! whole; a map marked `x-kubernetes-map-type: atomic` is replaced whole.
//!
//! Written here, not taken from a crate: no Rust implementation of structured-merge-diff exists.
//! RFC 0008 records what it leaves out: writes other than apply do not record a manager, so
//! only appliers own fields and only they conflict.

use crate::status::{cause, ApiError};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// One field path in FieldsV1 spelling: `f:spec`, `k:{"name":"web"}`, `v:"a"`.
pub type FieldPath = Vec<String>;
/// A set of field paths (a FieldsV1 tree, flattened).
pub type FieldSet = BTreeSet<FieldPath>;

/// Parses an applied configuration (YAML, so JSON too). A key repeated in a mapping is refused
/// with `Strict` (upstream's YAML error, with the line), and otherwise the last one wins and the
/// second value is a warning text.
pub fn parse_config(raw: &[u8], strict: bool) -> Result<(Value, Vec<String>), ApiError> {
    let text = std::str::from_utf8(raw).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    let mut options = yaml_options();
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::Error;
    let mut warnings = Vec::new();
    let parsed = match serde_saphyr::from_str_with_options::<Value>(text, options) {
        Ok(v) => v,
        Err(e) => {
            let duplicate = match e.without_snippet() {
                serde_saphyr::Error::DuplicateMappingKey { key, location } => Some(format!("line {}: key {:?} already set in map", location.line(), key.as_deref().unwrap_or(""))),
                _ => None,
            };
            match duplicate {
                Some(d) if strict => return Err(ApiError::bad_request(format!("error converting YAML to JSON: yaml: unmarshal errors:\n  {d}"))),
                Some(d) => {
                    warnings.push(d);
                    let mut last_wins = yaml_options();
                    last_wins.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::LastWins;
                    serde_saphyr::from_str_with_options::<Value>(text, last_wins).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {}", e.without_snippet())))?
                }
                None => return Err(ApiError::bad_request(format!("error decoding YAML: {}", e.without_snippet()))),
            }
        }
    };
    if !parsed.is_object() {
        return Err(ApiError::bad_request("error decoding YAML: an applied configuration must be an object"));
    }
    Ok((parsed, warnings))
}

/// The most string bytes all anchors of one YAML document may hold together.
pub const MAX_YAML_ANCHOR_BYTES: usize = 256 * 1024;
/// The most times one anchor may be expanded by aliases.
pub const MAX_YAML_EXPANSIONS_PER_ANCHOR: usize = 32;
/// The most events aliases may replay in one document.
pub const MAX_YAML_REPLAYED_EVENTS: usize = 100_000;

/// The YAML reader's bounds for a request body. What aliases can add is bounded in bytes: each
/// anchor's retained text (nested expansions included) counts toward [`MAX_YAML_ANCHOR_BYTES`],
/// and each is expanded at most [`MAX_YAML_EXPANSIONS_PER_ANCHOR`] times, so a body's aliases
/// expand to at most 8 MiB of strings (and [`MAX_YAML_REPLAYED_EVENTS`] nodes), however they
/// nest. Past a bound the body is a 400, as upstream answers "excessive aliasing".
fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    let mut budget = options.budget.take().unwrap_or_default();
    budget.max_recorded_anchor_bytes = MAX_YAML_ANCHOR_BYTES;
    options.budget = Some(budget);
    options.alias_limits.max_alias_expansions_per_anchor = MAX_YAML_EXPANSIONS_PER_ANCHOR;
    options.alias_limits.max_total_replayed_events = MAX_YAML_REPLAYED_EVENTS;
    options
}

/// The part of an object an apply manages: the main resource's fields but its status, or (on
/// the status subresource) the status only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Main { has_status: bool },
    Status,
}

/// Metadata the server owns: never a manager's field.
const SERVER_METADATA: [&str; 10] = ["name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"];

/// How a list merges.
#[derive(Debug, PartialEq)]
enum ListKind {
    Map(Vec<String>),
    Set,
    Atomic,
}

fn resolved(schema: Option<&Value>) -> Option<&Value> {
    schema.map(crate::openapi::resolved)
}

fn child<'a>(schema: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    let s = resolved(schema)?;
    s.get("properties").and_then(|p| p.get(key)).or_else(|| s.get("additionalProperties").filter(|a| a.is_object())).map(crate::openapi::resolved)
}

fn items(schema: Option<&Value>) -> Option<&Value> {
    resolved(schema)?.get("items").map(crate::openapi::resolved)
}

fn list_kind(schema: Option<&Value>) -> ListKind {
    let Some(s) = resolved(schema) else { return ListKind::Atomic };
    let strings = |v: Option<&Value>| -> Vec<String> { v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect() };
    match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => ListKind::Map(strings(s.get("x-kubernetes-list-map-keys"))),
        Some("set") => ListKind::Set,
        Some(_) => ListKind::Atomic,
        None => match s.get("x-kubernetes-patch-merge-key").and_then(Value::as_str) {
            Some(k) if s.get("x-kubernetes-patch-strategy").and_then(Value::as_str).is_some_and(|p| p.split(',').any(|x| x == "merge")) => ListKind::Map(vec![k.to_owned()]),
            _ => ListKind::Atomic,
        },
    }
}

/// A struct (a schema naming its fields) is not a field of its own; a map's or a list item's
/// node is (FieldsV1's `"."`).
fn is_struct(schema: Option<&Value>) -> bool {
    resolved(schema).is_some_and(|s| s.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty()))
}

fn atomic_map(schema: Option<&Value>) -> bool {
    resolved(schema).is_some_and(|s| s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"))
}

/// The key of a list-map item: its key fields, as FieldsV1 spells them (`k:{"name":"web"}`).
fn item_key(item: &Value, keys: &[String]) -> Option<String> {
    let mut m = Map::new();
    for k in keys {
        m.insert(k.clone(), item.get(k)?.clone());
    }
    Some(format!("k:{}", Value::Object(m)))
}

/// The fields `config` sets, by `schema` (the object's, resolved as it goes), in `scope`.
pub fn fields_of(schema: Option<&Value>, config: &Value, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(top) = config.as_object() else { return out };
    for (k, v) in top {
        let keep = match (k.as_str(), scope) {
            ("apiVersion" | "kind", _) => false,
            ("metadata", Scope::Main { .. }) => true,
            ("status", Scope::Main { has_status }) => !has_status,
            (_, Scope::Main { .. }) => true,
            ("status", Scope::Status) => true,
            (_, Scope::Status) => false,
        };
        if !keep {
            continue;
        }
        let mut path = vec![format!("f:{k}")];
        if k == "metadata" {
            if let Some(m) = v.as_object() {
                for (mk, mv) in m.iter().filter(|(mk, _)| !SERVER_METADATA.contains(&mk.as_str())) {
                    path.push(format!("f:{mk}"));
                    collect(child(child(schema, "metadata"), mk), mv, &mut path, &mut out);
                    path.pop();
                }
            }
            continue;
        }
        collect(child(schema, k), v, &mut path, &mut out);
    }
    out
}

fn collect(schema: Option<&Value>, v: &Value, path: &mut FieldPath, out: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() && !atomic_map(schema) => {
            if !is_struct(schema) {
                out.insert(path.clone());
            }
            for (k, x) in m {
                path.push(format!("f:{k}"));
                collect(child(schema, k), x, path, out);
                path.pop();
            }
        }
        Value::Array(list) if !list.is_empty() => match list_kind(schema) {
            ListKind::Map(keys) => {
                for item in list {
                    let Some(key) = item_key(item, &keys) else {
                        out.insert(path.clone());
                        return;
                    };
                    path.push(key);
                    out.insert(path.clone());
                    if let Some(m) = item.as_object() {
                        for (k, x) in m {
                            path.push(format!("f:{k}"));
                            collect(child(items(schema), k), x, path, out);
                            path.pop();
                        }
                    }
                    path.pop();
                }
            }
            ListKind::Set => {
                for item in list {
                    path.push(format!("v:{item}"));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            ListKind::Atomic => {
                out.insert(path.clone());
            }
        },
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The value at `path`, if the object has one.
fn get<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let Some((first, rest)) = path.split_first() else { return Some(v) };
    let next = step(v, first)?;
    get(next, rest)
}

fn step<'a>(v: &'a Value, seg: &str) -> Option<&'a Value> {
    if let Some(f) = seg.strip_prefix("f:") {
        return v.get(f);
    }
    let list = v.as_array()?;
    list.iter().find(|x| matches_segment(x, seg))
}

fn matches_segment(item: &Value, seg: &str) -> bool {
    if let Some(k) = seg.strip_prefix("k:") {
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(k) else { return false };
        return keys.iter().all(|(name, want)| item.get(name) == Some(want));
    }
    if let Some(x) = seg.strip_prefix("v:") {
        return serde_json::from_str::<Value>(x).is_ok_and(|want| *item == want);
    }
    false
}

/// Removes the field at `path` (a map key, or a list item), if present.
fn remove(v: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else { return };
    let mut at = v;
    for seg in parent {
        let next = if let Some(f) = seg.strip_prefix("f:") {
            at.get_mut(f)
        } else {
            at.as_array_mut().and_then(|l| l.iter_mut().find(|x| matches_segment(x, seg)))
        };
        match next {
            Some(n) => at = n,
            None => return,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = at.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(l) = at.as_array_mut() {
        l.retain(|x| !matches_segment(x, last));
    }
}

/// Merges `config` into `live` by `schema`: maps field by field, list-maps item by key, sets by
/// value; everything else (scalars, atomic lists and maps) is replaced.
fn merge(schema: Option<&Value>, live: &mut Value, config: &Value) {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) if !atomic_map(schema) => {
            for (k, cv) in c {
                match l.get_mut(k) {
                    Some(lv) => merge(child(schema, k), lv, cv),
                    None => {
                        l.insert(k.clone(), cv.clone());
                    }
                }
            }
        }
        (Value::Array(l), Value::Array(c)) => match list_kind(schema) {
            // The configuration's items first, in its order (merged into the live item with
            // their key), then the live items it does not name.
            ListKind::Map(keys) => {
                let mut rest = std::mem::take(l);
                for item in c {
                    let key = item_key(item, &keys);
                    match rest.iter().position(|x| key.is_some() && item_key(x, &keys) == key) {
                        Some(i) => {
                            let mut x = rest.remove(i);
                            merge(items(schema), &mut x, item);
                            l.push(x);
                        }
                        None => l.push(item.clone()),
                    }
                }
                l.extend(rest);
            }
            ListKind::Set => {
                let rest: Vec<Value> = std::mem::take(l).into_iter().filter(|x| !c.contains(x)).collect();
                l.extend(c.iter().cloned());
                l.extend(rest);
            }
            ListKind::Atomic => *l = c.clone(),
        },
        (live, config) => *live = config.clone(),
    }
}

/// A FieldsV1 tree of `set`: a path with fields under it and in the set itself gets `"."`.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut at = &mut root;
        for seg in path {
            at = at.entry(seg.clone()).or_insert_with(|| Value::Object(Map::new())).as_object_mut().expect("a tree of objects");
        }
        at.insert(".".into(), Value::Object(Map::new()));
    }
    // A leaf's "." is implied by the leaf itself: only nodes with children keep it.
    fn tidy(m: &mut Map<String, Value>) {
        for v in m.values_mut() {
            if let Some(inner) = v.as_object_mut() {
                if inner.len() == 1 && inner.contains_key(".") {
                    inner.clear();
                } else {
                    tidy(inner);
                }
            }
        }
    }
    tidy(&mut root);
    Value::Object(root)
}

/// The paths of a FieldsV1 tree.
pub fn from_fields_v1(tree: &Value) -> FieldSet {
    fn walk(m: &Map<String, Value>, path: &mut FieldPath, out: &mut FieldSet) {
        for (k, v) in m {
            if k == "." {
                out.insert(path.clone());
                continue;
            }
            path.push(k.clone());
            match v.as_object() {
                Some(inner) if !inner.is_empty() => walk(inner, path, out),
                _ => {
                    out.insert(path.clone());
                }
            }
            path.pop();
        }
    }
    let mut out = FieldSet::new();
    if let Some(m) = tree.as_object() {
        walk(m, &mut Vec::new(), &mut out);
    }
    out
}

/// A path as conflicts name it: `.spec.replicas`, `.spec.ports[containerPort=80,protocol="TCP"]`.
fn display(path: &[String]) -> String {
    let mut s = String::new();
    for seg in path {
        if let Some(f) = seg.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = seg.strip_prefix("k:") {
            let keys: Vec<String> = serde_json::from_str::<Map<String, Value>>(k).map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect()).unwrap_or_default();
            s.push_str(&format!("[{}]", keys.join(",")));
        } else if let Some(v) = seg.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        }
    }
    s
}

/// One apply: who applies, whether it may take fields from other managers, which part of the
/// object it manages, and the configuration's apiVersion (recorded with its fields).
pub struct Apply<'a> {
    pub manager: &'a str,
    pub force: bool,
    pub scope: Scope,
    pub api_version: &'a str,
    /// The time to record (RFC 3339).
    pub now: &'a str,
}

impl Apply<'_> {
    fn subresource(&self) -> Option<&'static str> {
        (self.scope == Scope::Status).then_some("status")
    }

    fn is_mine(&self, entry: &Value) -> bool {
        entry.get("manager").and_then(Value::as_str) == Some(self.manager)
            && entry.get("operation").and_then(Value::as_str) == Some("Apply")
            && entry.get("subresource").and_then(Value::as_str) == self.subresource()
    }

    fn entry(&self, fields: &FieldSet) -> Value {
        let mut e = serde_json::json!({"manager": self.manager, "operation": "Apply", "apiVersion": self.api_version, "time": self.now, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(fields)});
        if let Some(s) = self.subresource() {
            e["subresource"] = Value::String(s.into());
        }
        e
    }

    /// The managedFields of an object the apply creates.
    pub fn created(&self, schema: Option<&Value>, config: &Value) -> Value {
        Value::Array(vec![self.entry(&fields_of(schema, config, self.scope))])
    }

    /// Applies `config` to `live`: the merged object with its managedFields, or the 409 naming
    /// each field another manager owns that the apply would change.
    pub fn to_live(&self, schema: Option<&Value>, live: &Value, config: &Value) -> Result<Value, ApiError> {
        let applied = fields_of(schema, config, self.scope);
        let entries: Vec<Value> = live.pointer("/metadata/managedFields").and_then(Value::as_array).cloned().unwrap_or_default();
        let previously = entries.iter().find(|e| self.is_mine(e)).map(|e| from_fields_v1(e.get("fieldsV1").unwrap_or(&Value::Null))).unwrap_or_default();
        let mut others: Vec<(Value, FieldSet)> = entries.into_iter().filter(|e| !self.is_mine(e)).map(|e| {
            let set = from_fields_v1(e.get("fieldsV1").unwrap_or(&Value::Null));
            (e, set)
        }).collect();
        // A field another manager owns that this apply would change is a conflict.
        let mut conflicts = Vec::new();
        for (entry, set) in &mut others {
            // A leaf of the applied set whose live value the configuration changes.
            let leaf = |p: &FieldPath| !applied.iter().any(|q| q.len() > p.len() && q.starts_with(p));
            let theirs: Vec<FieldPath> = set.intersection(&applied).filter(|p| leaf(p) && matches!((get(live, p), get(config, p)), (Some(a), Some(b)) if a != b)).cloned().collect();
            if theirs.is_empty() {
                continue;
            }
            if self.force {
                for p in &theirs {
                    set.remove(p);
                }
            } else {
                let manager = entry.get("manager").and_then(Value::as_str).unwrap_or("").to_owned();
                conflicts.extend(theirs.into_iter().map(|p| (manager.clone(), display(&p))));
            }
        }
        if !conflicts.is_empty() {
            let lines: Vec<String> = conflicts.iter().map(|(m, p)| format!("conflict with {m:?}: {p}")).collect();
            let message = if lines.len() == 1 { format!("Apply failed with 1 conflict: {}", lines[0]) } else { format!("Apply failed with {} conflicts: {}", lines.len(), lines.join("\n")) };
            let causes = conflicts.iter().map(|(m, p)| cause("FieldManagerConflict", p, format!("conflict with {m:?}"))).collect();
            return Err(ApiError::apply_conflict(message, causes));
        }
        // What this manager set before, no longer sets, and nobody else owns, goes.
        let mut merged = live.clone();
        let owned_elsewhere: FieldSet = others.iter().flat_map(|(_, s)| s.iter().cloned()).collect();
        let gone: Vec<&FieldPath> = previously.iter().filter(|p| !applied.contains(*p) && !owned_elsewhere.contains(*p) && !applied.iter().any(|q| q.starts_with(p))).collect();
        // A list item goes whole: its own fields are not removed first (that would unkey it).
        for p in gone.iter().filter(|p| !gone.iter().any(|q| q.len() < p.len() && p.starts_with(q))) {
            remove(&mut merged, p);
            // A list or map the removal emptied goes too, unless someone still sets it (a
            // top-level field such as spec stays).
            for k in (2..p.len()).rev() {
                let q = &p[..k];
                let emptied = get(&merged, q).is_some_and(|v| v.as_array().is_some_and(Vec::is_empty) || v.as_object().is_some_and(Map::is_empty));
                let held = owned_elsewhere.iter().chain(&applied).any(|o| o.starts_with(q));
                if !emptied || held {
                    break;
                }
                remove(&mut merged, q);
            }
        }
        let mut body = config.clone();
        if let Some(m) = body.get_mut("metadata").and_then(Value::as_object_mut) {
            m.retain(|k, _| !SERVER_METADATA.contains(&k.as_str()));
        }
        merge(schema, &mut merged, &body);
        let mut managed: Vec<Value> = others.into_iter().filter(|(_, s)| !s.is_empty()).map(|(mut e, s)| {
            e["fieldsV1"] = to_fields_v1(&s);
            e
        }).collect();
        managed.push(self.entry(&applied));
        merged["metadata"]["managedFields"] = Value::Array(managed);
        Ok(merged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"],
                          "items": {"type": "object", "properties": {"port": {"type": "integer"}, "name": {"type": "string"}}}},
                "args": {"type": "array", "items": {"type": "string"}}
            }}
        }})
    }

    fn apply<'a>(manager: &'a str, force: bool) -> Apply<'a> {
        Apply { manager, force, scope: Scope::Main { has_status: true }, api_version: "v1", now: "2026-11-30T00:00:00Z" }
    }

    #[test]
    fn yaml_alias_bombs_are_refused_and_plain_aliases_expand() {
        // Billion laughs: nine levels of nine aliases each.
        let mut bomb = String::from("a0: &a0 \"lol\"\n");
        for i in 1..10 {
            bomb.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 9].join(", ")));
        }
        assert_eq!(parse_config(bomb.as_bytes(), true).unwrap_err().code, 400);
        // One large anchor replayed many times.
        let big = format!("x: &x \"{}\"\nys: [{}]\n", "y".repeat(200_000), vec!["*x"; 100].join(", "));
        assert_eq!(parse_config(big.as_bytes(), true).unwrap_err().code, 400);
        // An ordinary alias still expands.
        let (v, _) = parse_config(b"base: &b {k: v}\nother: *b\n", true).unwrap();
        assert_eq!(v["other"], json!({"k": "v"}));
    }

    #[test]
    fn a_yaml_config_parses_and_a_repeated_key_is_refused_with_its_line() {
        let (v, w) = parse_config(b"a: 1\nb:\n  c: [x, z]\n", true).unwrap();
        assert_eq!((v, w.len()), (json!({"a": 1, "b": {"c": ["x", "z"]}}), 0));
        let e = parse_config(b"\nspec:\n  foo: 1\n  foo: 2\n", true).unwrap_err();
        assert!(e.message.contains("line 4: key \"foo\" already set in map"), "{}", e.message);
        let (v, w) = parse_config(b"spec:\n  foo: 1\n  foo: 2\n", false).unwrap();
        assert_eq!((v["spec"]["foo"].clone(), w.len()), (json!(2), 1));
        assert_eq!(parse_config(b"- a\n", true).unwrap_err().code, 400);
    }

    #[test]
    fn fields_are_recorded_in_fields_v1_spelling() {
        let config = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "n", "labels": {"app": "a"}}, "spec": {"replicas": 2, "tags": ["t"], "ports": [{"port": 80, "name": "web"}], "args": ["x"]}, "status": {"ignored": true}});
        let got = to_fields_v1(&fields_of(Some(&schema()), &config, Scope::Main { has_status: true }));
        assert_eq!(got, json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:replicas": {}, "f:tags": {"v:\"t\"": {}}, "f:ports": {"k:{\"port\":80}": {".": {}, "f:port": {}, "f:name": {}}}, "f:args": {}}
        }));
        assert_eq!(from_fields_v1(&got), fields_of(Some(&schema()), &config, Scope::Main { has_status: true }));
    }

    #[test]
    fn a_reapply_removes_what_it_no_longer_sets_and_merges_lists_by_their_type() {
        let s = schema();
        let first = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"replicas": 1, "tags": ["x"], "ports": [{"port": 80, "name": "web"}, {"port": 81}], "args": ["p", "q"]}});
        let mut live = json!({"metadata": {"name": "n", "labels": {"other": "kept"}}, "spec": {"tags": ["mine"]}});
        let m = apply("one", false);
        live = m.to_live(Some(&s), &live, &first).unwrap();
        assert_eq!(live["spec"]["tags"], json!(["x", "mine"]), "a set is a union, the configuration's first");
        let second = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 1, "ports": [{"port": 80, "name": "http"}], "args": ["r"]}});
        live = m.to_live(Some(&s), &live, &second).unwrap();
        assert_eq!(live["metadata"]["labels"], json!({"a": "1", "other": "kept"}), "b was only ours");
        assert_eq!(live["spec"]["ports"], json!([{"port": 80, "name": "http"}]), "the item keyed 81 was only ours");
        assert_eq!(live["spec"]["args"], json!(["r"]), "an atomic list is replaced");
        assert_eq!(live["spec"]["tags"], json!(["mine"]), "x was only ours; mine was not");
        assert_eq!(live["metadata"]["managedFields"].as_array().unwrap().len(), 1);
    }

    /// A small configuration of `schema()`'s shape: labels, replicas, a set and a list-map.
    fn config() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        (
            proptest::collection::btree_map("[a-c]", "[x-z]", 0..3),
            proptest::option::of(0i64..4),
            proptest::collection::vec("[p-r]", 0..3),
            proptest::collection::btree_map(80i64..83, proptest::option::of("[m-n]"), 0..3),
        )
            .prop_map(|(labels, replicas, tags, ports)| {
                let mut spec = Map::new();
                if let Some(r) = replicas {
                    spec.insert("replicas".into(), json!(r));
                }
                let mut tags_unique: Vec<String> = Vec::new();
                for t in tags {
                    if !tags_unique.contains(&t) {
                        tags_unique.push(t);
                    }
                }
                if !tags_unique.is_empty() {
                    spec.insert("tags".into(), json!(tags_unique));
                }
                if !ports.is_empty() {
                    spec.insert("ports".into(), Value::Array(ports.into_iter().map(|(p, n)| match n { Some(n) => json!({"port": p, "name": n}), None => json!({"port": p}) }).collect()));
                }
                json!({"metadata": {"labels": labels}, "spec": spec})
            })
    }

    proptest::proptest! {
        /// FieldsV1 round-trips; an apply leaves every value the configuration sets in place, is
        /// idempotent, and a manager's re-apply leaves exactly what the other configuration and
        /// the untouched live fields hold (nothing of the first that the second dropped).
        #[test]
        fn apply_matches_its_model(first in config(), second in config()) {
            let s = schema();
            let scope = Scope::Main { has_status: true };
            let set = fields_of(Some(&s), &first, scope);
            proptest::prop_assert_eq!(from_fields_v1(&to_fields_v1(&set)), set.clone());
            let live = json!({"metadata": {"name": "n", "labels": {"keep": "me"}}, "spec": {}});
            let once = apply("m", false).to_live(Some(&s), &live, &first).unwrap();
            // (An empty map or list merges into what is there, as upstream: nothing to compare.)
            let empty = |v: Option<&Value>| v.is_some_and(|v| v.as_object().is_some_and(Map::is_empty) || v.as_array().is_some_and(Vec::is_empty));
            let leaf = |p: &FieldPath| !set.iter().any(|q| q.len() > p.len() && q.starts_with(p));
            for p in set.iter().filter(|p| leaf(p) && !empty(get(&first, p))) {
                proptest::prop_assert_eq!(get(&once, p), get(&first, p), "{:?}", p);
            }
            let twice = apply("m", false).to_live(Some(&s), &once, &first).unwrap();
            proptest::prop_assert_eq!(&twice, &once);
            let after = apply("m", false).to_live(Some(&s), &once, &second).unwrap();
            let fresh = apply("m", false).to_live(Some(&s), &live, &second).unwrap();
            let strip = |mut v: Value| { v["metadata"].as_object_mut().unwrap().remove("managedFields"); v };
            proptest::prop_assert_eq!(strip(after), strip(fresh), "a re-apply equals applying the second config to the untouched object");
        }
    }

    #[test]
    fn changing_another_appliers_field_conflicts_unless_forced() {
        let s = schema();
        let mut live = json!({"metadata": {"name": "n"}});
        live = apply("one", false).to_live(Some(&s), &live, &json!({"spec": {"replicas": 1, "args": ["a"]}})).unwrap();
        // The same value is shared ownership, not a conflict.
        live = apply("two", false).to_live(Some(&s), &live, &json!({"spec": {"replicas": 1}})).unwrap();
        let e = apply("two", false).to_live(Some(&s), &live, &json!({"spec": {"replicas": 3}})).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (409, "Apply failed with 1 conflict: conflict with \"one\": .spec.replicas"));
        let forced = apply("two", true).to_live(Some(&s), &live, &json!({"spec": {"replicas": 3}})).unwrap();
        assert_eq!(forced["spec"]["replicas"], 3);
        let one = forced["metadata"]["managedFields"].as_array().unwrap().iter().find(|e| e["manager"] == "one").unwrap();
        assert_eq!(one["fieldsV1"], json!({"f:spec": {"f:args": {}}}), "the forced field changed hands");
    }
}
