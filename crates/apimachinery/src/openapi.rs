//! OpenAPI documents for the served kinds (v3 per group-version, protobuf v2), and the bundled
//! schemas the field rules ([`crate::field_validation`]) check objects against.
//!
//! Schemas are Kubernetes v1.33's (`openapi/schemas-v1.33.json`, made by
//! `deploy/local/gen-openapi.sh`). The documents give kubectl what it checks: a PATCH operation per
//! kind carrying `x-kubernetes-group-version-kind` and a `fieldValidation` parameter (so it
//! validates on the server, with `fieldValidation=Strict`), the schemas with their
//! `x-kubernetes-patch-merge-key`s (client-side apply) and descriptions (`kubectl explain`).

use crate::resources::{Backing, ResourceInfo};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

pub(crate) static SCHEMAS: LazyLock<Map<String, Value>> = LazyLock::new(|| {
    let doc: Value = serde_json::from_str(include_str!("../openapi/schemas-v1.33.json")).expect("bundled schemas parse");
    doc["schemas"].as_object().expect("schemas object").clone()
});

/// Each kind's schema name by `group/version/kind`: the first schema, in name order, whose
/// `x-kubernetes-group-version-kind` lists it. Built once, because every write looks its kind up
/// (field validation) and a scan of the ~700 schemas was a tenth of a shard's CPU per create.
static SCHEMA_NAMES: LazyLock<HashMap<String, &'static str>> = LazyLock::new(|| {
    let mut names = HashMap::new();
    for (name, s) in SCHEMAS.iter() {
        for g in s.get("x-kubernetes-group-version-kind").and_then(Value::as_array).into_iter().flatten() {
            if let (Some(group), Some(version), Some(kind)) = (g["group"].as_str(), g["version"].as_str(), g["kind"].as_str()) {
                names.entry(gvk_key(group, version, kind)).or_insert(name.as_str());
            }
        }
    }
    names
});

fn gvk_key(group: &str, version: &str, kind: &str) -> String {
    format!("{group}/{version}/{kind}")
}

/// The schema name of a kind (`io.k8s.api.apps.v1.Deployment`).
pub fn schema_name(group: &str, version: &str, kind: &str) -> Option<&'static str> {
    SCHEMA_NAMES.get(&gvk_key(group, version, kind)).copied()
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// A custom resource's schema as published and used for pruning: its CRD's `openAPIV3Schema`
/// with `apiVersion`, `kind` and `metadata` (ObjectMeta) added, under upstream's name for it
/// (the group reversed, the version, the kind: `com.example.agents.v1.AgentSession`).
pub fn custom_schema(r: &ResourceInfo) -> Option<(String, Value)> {
    let c = r.custom.as_ref()?;
    let reversed: Vec<&str> = r.group.split('.').rev().collect();
    let name = format!("{}.{}.{}", reversed.join("."), r.version, r.kind);
    let mut schema = if c.schema.is_object() { c.schema.clone() } else { json!({}) };
    schema["type"] = json!("object");
    if !schema.get("properties").is_some_and(Value::is_object) {
        schema["properties"] = json!({});
    }
    let props = schema["properties"].as_object_mut().expect("an object");
    props.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
    props.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
    props.insert("metadata".into(), json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}));
    schema["x-kubernetes-group-version-kind"] = json!([{"group": r.group, "version": r.version, "kind": r.kind}]);
    Some((name, schema))
}

/// `GET /openapi/v3`: one entry per served group-version.
pub fn index(resources: &[Arc<ResourceInfo>]) -> Value {
    let mut paths = Map::new();
    for r in resources {
        let p = gv_path(&r.group, &r.version);
        if !paths.contains_key(&p) {
            let hash = format!("{:016X}", xxhash_rust::xxh3::xxh3_64(format!("{p}/{}", env!("CARGO_PKG_VERSION")).as_bytes()));
            paths.insert(p.clone(), json!({ "serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}") }));
        }
    }
    json!({ "paths": paths })
}

fn param(name: &str, location: &str, description: &str) -> Value {
    json!({"name": name, "in": location, "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn write_params() -> Vec<Value> {
    vec![
        param("dryRun", "query", "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed"),
        param("fieldManager", "query", "fieldManager is a name associated with the actor or entity that is making these changes."),
        param(
            "fieldValidation",
            "query",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: - Ignore - Warn (the default) - Strict",
        ),
    ]
}

/// `GET /openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`.
pub fn group_version_document(resources: &[Arc<ResourceInfo>], group: &str, version: &str) -> Option<Value> {
    let served: Vec<&Arc<ResourceInfo>> = resources.iter().filter(|r| r.group == group && r.version == version).collect();
    if served.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let mut schemas = SCHEMAS.clone();
    for r in served {
        let schema = match custom_schema(r) {
            Some((name, s)) => {
                schemas.insert(name.clone(), s);
                name
            }
            None => match schema_name(&r.group, &r.version, &r.kind) {
                Some(name) => name.to_owned(),
                None => continue,
            },
        };
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let obj_ref = json!({"$ref": format!("#/components/schemas/{schema}")});
        let ok = json!({"200": {"description": "OK", "content": {"application/json": {"schema": obj_ref}}}});
        let base = format!("/{}", gv_path(&r.group, &r.version));
        let coll = if r.namespaced { format!("{base}/namespaces/{{namespace}}/{}", r.plural) } else { format!("{base}/{}", r.plural) };
        let scope_params: Vec<Value> = if r.namespaced {
            vec![json!({"name": "namespace", "in": "path", "required": true, "description": "object name and auth scope, such as for teams and projects", "schema": {"type": "string", "uniqueItems": true}})]
        } else {
            vec![]
        };
        let mut item_params = scope_params.clone();
        item_params.push(json!({"name": "name", "in": "path", "required": true, "description": format!("name of the {}", r.kind), "schema": {"type": "string", "uniqueItems": true}}));
        let op = |action: &str, verb: &str, body: Option<Value>, params: Vec<Value>| {
            let mut o = json!({
                "operationId": format!("{verb}{}", r.kind),
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": ok,
            });
            if let Some(b) = body {
                o["requestBody"] = b;
            }
            o
        };
        let json_body = json!({"content": {"*/*": {"schema": obj_ref}}, "required": true});
        let patch_body = json!({"content": {
            "application/json-patch+json": {"schema": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}},
            "application/merge-patch+json": {"schema": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}},
            "application/strategic-merge-patch+json": {"schema": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}}
        }, "required": true});
        match r.backing {
            Backing::Stored => {}
            Backing::CreateOnly | Backing::Review => {
                // Only created (core/v1 bindings, the reviews): a POST and nothing else.
                paths.insert(coll.clone(), json!({"post": op("post", "create", Some(json_body.clone()), write_params()), "parameters": scope_params}));
                continue;
            }
            Backing::Probed => {
                // Only read (core/v1 componentstatuses): GET of the list and of one.
                paths.insert(coll.clone(), json!({"get": op("list", "list", None, vec![]), "parameters": scope_params}));
                paths.insert(format!("{coll}/{{name}}"), json!({"get": op("get", "read", None, vec![]), "parameters": item_params}));
                continue;
            }
        }
        paths.insert(coll.clone(), json!({
            "get": op("list", "list", None, vec![]),
            "post": op("post", "create", Some(json_body.clone()), write_params()),
            "parameters": scope_params,
        }));
        paths.insert(format!("{coll}/{{name}}"), json!({
            "get": op("get", "read", None, vec![]),
            "put": op("put", "replace", Some(json_body.clone()), write_params()),
            "patch": op("patch", "patch", Some(patch_body.clone()), write_params()),
            "delete": op("delete", "delete", None, vec![param("dryRun", "query", "When present, indicates that modifications should not be persisted.")]),
            "parameters": item_params.clone(),
        }));
        if r.has_status {
            paths.insert(format!("{coll}/{{name}}/status"), json!({
                "get": op("get", "read", None, vec![]),
                "put": op("put", "replace", Some(json_body), write_params()),
                "patch": op("patch", "patch", Some(patch_body), write_params()),
                "parameters": item_params,
            }));
        }
    }
    schemas.insert("io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(), json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}));
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The Content-Type of the protobuf `/openapi/v2` document.
/// (Clients ask with `spec.v2@v1.0`; upstream answers with `spec.v2.v1.0`, which Go can parse.)
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

fn vendor_extensions(s: &Map<String, Value>) -> Vec<Value> {
    // gnostic keeps extension values as YAML; JSON text is YAML.
    s.iter().filter(|(k, _)| k.starts_with("x-")).map(|(k, v)| json!({"name": k, "value": {"yaml": v.to_string()}})).collect()
}

/// A v3 component schema in gnostic's OpenAPI v2 `Schema` form (proto field names).
fn schema_v2(s: &Value) -> Value {
    let Some(m) = s.as_object() else { return json!({}) };
    let mut out = Map::new();
    let reference = m.get("$ref").or_else(|| m.get("allOf").and_then(|a| a.get(0)).and_then(|x| x.get("$ref")));
    if let Some(r) = reference.and_then(Value::as_str) {
        out.insert("_ref".into(), Value::String(r.replace("#/components/schemas/", "#/definitions/")));
    }
    for k in ["description", "format"] {
        if let Some(v) = m.get(k).filter(|v| v.is_string()) {
            out.insert(k.into(), v.clone());
        }
    }
    if let Some(t) = m.get("type").and_then(Value::as_str) {
        out.insert("type".into(), json!({"value": [t]}));
    }
    if let Some(r) = m.get("required").filter(|r| r.is_array()) {
        out.insert("required".into(), r.clone());
    }
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        let named: Vec<Value> = props.iter().map(|(k, v)| json!({"name": k, "value": schema_v2(v)})).collect();
        out.insert("properties".into(), json!({"additional_properties": named}));
    }
    match m.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            out.insert("additional_properties".into(), json!({"boolean": b}));
        }
        Some(ap @ Value::Object(_)) => {
            out.insert("additional_properties".into(), json!({"schema": schema_v2(ap)}));
        }
        _ => {}
    }
    if let Some(items) = m.get("items") {
        out.insert("items".into(), json!({"schema": [schema_v2(items)]}));
    }
    let ext = vendor_extensions(m);
    if !ext.is_empty() {
        out.insert("vendor_extension".into(), Value::Array(ext));
    }
    Value::Object(out)
}

/// `GET /openapi/v2` as kubectl 1.27 and 1.28 read it: gnostic's `openapi_v2.Document` in
/// protobuf, with every served kind's definitions and a PATCH operation per kind that carries its
/// `x-kubernetes-group-version-kind` and a `fieldValidation` parameter.
pub fn v2_protobuf(resources: &[Arc<ResourceInfo>]) -> Vec<u8> {
    let query = |name: &str, description: &str| json!({"parameter": {"non_body_parameter": {"query_parameter_sub_schema": {"name": name, "in": "query", "type": "string", "unique_items": true, "description": description}}}});
    let mut paths = Vec::new();
    for r in resources {
        let Some(schema) = schema_name(&r.group, &r.version, &r.kind) else { continue };
        let base = format!("/{}", gv_path(&r.group, &r.version));
        let coll = if r.namespaced { format!("{base}/namespaces/{{namespace}}/{}", r.plural) } else { format!("{base}/{}", r.plural) };
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind}).to_string();
        let ok = json!({"response_code": [{"name": "200", "value": {"response": {"description": "OK", "schema": {"schema": {"_ref": format!("#/definitions/{schema}")}}}}}]});
        let op = |action: &str, id: &str, params: Vec<Value>| {
            json!({
                "operation_id": format!("{id}{}", r.kind),
                "consumes": ["application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json"],
                "produces": ["application/json"],
                "parameters": params,
                "responses": ok,
                "vendor_extension": [
                    {"name": "x-kubernetes-action", "value": {"yaml": action}},
                    {"name": "x-kubernetes-group-version-kind", "value": {"yaml": gvk}},
                ],
            })
        };
        let write = || vec![query("dryRun", "When present, indicates that modifications should not be persisted."), query("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."), query("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields.")];
        paths.push(json!({"name": format!("{coll}/{{name}}"), "value": {"get": op("get", "read", vec![]), "patch": op("patch", "patch", write()), "put": op("put", "replace", write())}}));
    }
    let definitions: Vec<Value> = SCHEMAS.iter().map(|(name, s)| json!({"name": name, "value": schema_v2(s)})).collect();
    let doc = json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": {"path": paths},
        "definitions": {"additional_properties": definitions},
    });
    crate::protobuf::encode_message("openapi.v2.Document", &doc).expect("the v2 document matches gnostic's schema")
}

/// `s` with its `$ref` (or single `allOf` ref) followed into the bundled schemas.
pub fn resolved(s: &Value) -> &Value {
    resolve(s).0
}

/// The schema objects of `info` are checked against: its CRD's (see [`custom_schema`]) or the
/// bundled built-in one.
pub fn object_schema(info: &ResourceInfo) -> Option<std::borrow::Cow<'static, Value>> {
    match custom_schema(info) {
        Some((_, s)) => Some(std::borrow::Cow::Owned(s)),
        None => schema_name(&info.group, &info.version, &info.kind).map(|n| std::borrow::Cow::Borrowed(&SCHEMAS[n])),
    }
}

/// Follows a `$ref` (or a single `allOf` ref); returns the schema and its name when it had one.
pub(crate) fn resolve(s: &Value) -> (&Value, Option<&'static str>) {
    let target = s.get("$ref").or_else(|| s.get("allOf").and_then(|a| a.get(0)).and_then(|x| x.get("$ref")));
    match target.and_then(Value::as_str).and_then(|r| r.strip_prefix("#/components/schemas/")).and_then(|n| SCHEMAS.get_key_value(n)) {
        Some((name, t)) => (t, Some(name.as_str())),
        None => (s, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;

    #[test]
    fn the_schema_index_finds_what_a_scan_of_the_schemas_finds() {
        let scan = |group: &str, version: &str, kind: &str| {
            SCHEMAS.iter().find_map(|(name, s)| {
                let gvks = s.get("x-kubernetes-group-version-kind")?.as_array()?;
                gvks.iter().any(|g| g["group"] == group && g["version"] == version && g["kind"] == kind).then_some(name.as_str())
            })
        };
        let mut found = 0;
        for r in builtin_resources() {
            assert_eq!(schema_name(&r.group, &r.version, &r.kind), scan(&r.group, &r.version, &r.kind), "{}", r.kind);
            found += usize::from(schema_name(&r.group, &r.version, &r.kind).is_some());
        }
        assert!(found > 50, "{found}");
        assert_eq!(schema_name("", "v1", "NoSuchKind"), None);
        assert_eq!(schema_name("apps", "v1", "Deployment"), Some("io.k8s.api.apps.v1.Deployment"));
    }

    #[test]
    fn every_served_kind_has_a_schema_and_a_patch_operation() {
        let all: Vec<Arc<ResourceInfo>> = builtin_resources().into_iter().map(Arc::new).collect();
        for r in all.iter().filter(|r| r.is_stored()) {
            let name = schema_name(&r.group, &r.version, &r.kind).unwrap_or_else(|| panic!("{} has no schema", r.kind));
            let doc = group_version_document(&all, &r.group, &r.version).unwrap();
            let has_patch = doc["paths"].as_object().unwrap().values().any(|p| {
                p["patch"]["x-kubernetes-group-version-kind"]["kind"] == r.kind && p["patch"]["parameters"].as_array().unwrap().iter().any(|x| x["name"] == "fieldValidation")
            });
            assert!(has_patch, "{name}");
        }
        let index = index(&all);
        let gvs: Vec<&String> = index["paths"].as_object().unwrap().keys().collect();
        let want = [
            "api/v1", "apis/apiextensions.k8s.io/v1", "apis/apps/v1", "apis/authentication.k8s.io/v1", "apis/authorization.k8s.io/v1", "apis/autoscaling/v1", "apis/autoscaling/v2", "apis/batch/v1", "apis/certificates.k8s.io/v1", "apis/coordination.k8s.io/v1",
            "apis/discovery.k8s.io/v1", "apis/events.k8s.io/v1", "apis/flowcontrol.apiserver.k8s.io/v1", "apis/networking.k8s.io/v1", "apis/node.k8s.io/v1", "apis/policy/v1",
            "apis/rbac.authorization.k8s.io/v1", "apis/resource.k8s.io/v1beta1", "apis/resource.k8s.io/v1beta2", "apis/scheduling.k8s.io/v1", "apis/storage.k8s.io/v1",
        ];
        assert_eq!(gvs, want);
    }

    #[test]
    fn v2_document_encodes_and_keeps_kinds_and_merge_keys() {
        let all: Vec<Arc<ResourceInfo>> = builtin_resources().into_iter().map(Arc::new).collect();
        let bytes = v2_protobuf(&all);
        assert!(bytes.len() > 100_000);
        let needle = |s: &str| bytes.windows(s.len()).any(|w| w == s.as_bytes());
        assert!(needle("io.k8s.api.apps.v1.Deployment") && needle("x-kubernetes-patch-merge-key") && needle("fieldValidation"));
        assert!(needle(r#"{"group":"apps","kind":"Deployment","version":"v1"}"#));
    }
}
