//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): the defaults and checks a CRD gets on
//! write, the names and conditions that establish it, and the resources an established CRD
//! serves ([`served_resources`]). Pure functions over JSON: following CRDs in storage is the
//! catalog's job, serving custom objects the shard's.

use crate::resources::{NameRule, ResourceInfo};
use crate::status::{cause, StatusCause};
use serde_json::{json, Value};
use std::sync::Arc;

/// The CRD resource's group.
pub const GROUP: &str = "apiextensions.k8s.io";
/// The CRD resource's plural.
pub const PLURAL: &str = "customresourcedefinitions";
/// The finalizer that makes deleting a CRD delete its objects first (upstream's name).
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// One `additionalPrinterColumns` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// The `scale` subresource's paths: a CRD's, or a built-in workload's
/// ([`ResourceInfo::scale`](crate::resources::ResourceInfo::scale)).
#[derive(Clone, Debug, PartialEq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: ScaleSelector,
}

/// Where a Scale's `status.selector` comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum ScaleSelector {
    /// It has none.
    None,
    /// The string at this path (a CRD's `labelSelectorPath`).
    At(String),
    /// The LabelSelector at `spec.selector`, written as a selector (deployments, replica sets,
    /// stateful sets).
    LabelSelector,
    /// The label map at `spec.selector`, written as a selector (replication controllers).
    Labels,
}

/// What serving one version of a custom resource needs beyond the common [`ResourceInfo`].
#[derive(Clone, Debug, PartialEq)]
pub struct CustomVersion {
    /// The CRD's name (`plural.group`).
    pub crd: String,
    /// The version objects are stored at.
    pub storage_version: String,
    /// `openAPIV3Schema` (an empty object when the version has none).
    pub schema: Value,
    pub scale: Option<ScalePaths>,
    pub printer_columns: Vec<PrinterColumn>,
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

/// Fills what upstream defaults in a CRD: `names.singular` (the lower-case kind),
/// `names.listKind` (kind + "List") and `conversion.strategy` (None).
pub fn apply_defaults(crd: &mut Value) {
    let kind = s(crd, "/spec/names/kind").to_owned();
    if let Some(names) = crd.pointer_mut("/spec/names").and_then(Value::as_object_mut) {
        if names.get("singular").and_then(Value::as_str).is_none_or(str::is_empty) && !kind.is_empty() {
            names.insert("singular".into(), Value::String(kind.to_ascii_lowercase()));
        }
        if names.get("listKind").and_then(Value::as_str).is_none_or(str::is_empty) && !kind.is_empty() {
            names.insert("listKind".into(), Value::String(format!("{kind}List")));
        }
    }
    if let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut)
        && spec.get("conversion").is_none_or(Value::is_null)
    {
        spec.insert("conversion".into(), json!({"strategy": "None"}));
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') && !s.starts_with('-') && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Upstream's checks of a CRD that clients meet (`apiextensions/validation`): the name is
/// `plural.group`, the group a domain with a dot, the scope one of two, the names DNS labels,
/// the versions unique with exactly one stored and a schema each.
pub fn validate(crd: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let mut invalid = |field: &str, value: &str, why: &str| causes.push(cause("FieldValueInvalid", field, format!("Invalid value: {value:?}: {why}")));
    let (group, plural) = (s(crd, "/spec/group"), s(crd, "/spec/names/plural"));
    let name = s(crd, "/metadata/name");
    if name != format!("{plural}.{group}") {
        invalid("metadata.name", name, "must be spec.names.plural+\".\"+spec.group");
    }
    if !group.contains('.') {
        invalid("spec.group", group, "should be a domain with at least one dot");
    } else if !is_dns_subdomain(group) {
        invalid("spec.group", group, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character");
    }
    // An empty singular is defaulted from the kind.
    for (field, value) in [("spec.names.plural", plural), ("spec.names.singular", s(crd, "/spec/names/singular"))] {
        if !is_dns_label(value) && !(field == "spec.names.singular" && value.is_empty()) {
            invalid(field, value, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character");
        }
    }
    let kind = s(crd, "/spec/names/kind");
    if kind.is_empty() {
        causes.push(cause("FieldValueRequired", "spec.names.kind", "Required value"));
    }
    // Conversion webhooks are not called here (RFC 0008): a CRD that needs one is refused
    // rather than served without the conversion it asks for.
    let strategy = s(crd, "/spec/conversion/strategy");
    if !matches!(strategy, "" | "None") {
        causes.push(cause("FieldValueNotSupported", "spec.conversion.strategy", format!("Unsupported value: {strategy:?}: supported values: \"None\" (shardplane does not call conversion webhooks)")));
    }
    let scope = s(crd, "/spec/scope");
    if !matches!(scope, "Cluster" | "Namespaced") {
        causes.push(cause("FieldValueNotSupported", "spec.scope", format!("Unsupported value: {scope:?}: supported values: \"Cluster\", \"Namespaced\"")));
    }
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(cause("FieldValueInvalid", "spec.versions", "Invalid value: \"null\": must have exactly one version marked as storage version"));
    } else if versions.iter().filter(|v| v["storage"] == true).count() != 1 {
        causes.push(cause("FieldValueInvalid", "spec.versions", "Invalid value: must have exactly one version marked as storage version"));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, v) in versions.iter().enumerate() {
        let vname = v["name"].as_str().unwrap_or("");
        if !is_dns_label(vname) {
            causes.push(cause("FieldValueInvalid", &format!("spec.versions[{i}].name"), format!("Invalid value: {vname:?}: a DNS-1035 label must consist of lower case alphanumeric characters or '-'")));
        }
        if !seen.insert(vname) {
            causes.push(cause("FieldValueInvalid", &format!("spec.versions[{i}].name"), format!("Invalid value: {vname:?}: must be unique")));
        }
        if v.pointer("/schema/openAPIV3Schema").is_none_or(Value::is_null) {
            causes.push(cause("FieldValueRequired", &format!("spec.versions[{i}].schema.openAPIV3Schema"), "Required value: schemas are required"));
        } else if v.pointer("/schema/openAPIV3Schema/type").and_then(Value::as_str) != Some("object") {
            causes.push(cause("FieldValueRequired", &format!("spec.versions[{i}].schema.openAPIV3Schema.type"), "Required value: must not be empty at the root"));
        }
        // Every pattern must compile, within the complexity bound, before any object is checked
        // against it.
        let mut found = Vec::new();
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            crate::structural::patterns(schema, &format!("spec.versions[{i}].schema.openAPIV3Schema"), &mut found);
        }
        for (field, p) in found {
            if let Err(e) = crate::structural::pattern(p).as_ref() {
                causes.push(cause("FieldValueInvalid", &field, format!("Invalid value: {p:?}: must be a valid regular expression, but isn't: {}", e.lines().last().unwrap_or(e).trim())));
            }
        }
    }
    if !versions.is_empty() && !versions.iter().any(|v| v["served"] == true) {
        causes.push(cause("FieldValueInvalid", "spec.versions", "Invalid value: must have at least one served version"));
    }
    causes
}

/// What may not change on update: the group, the scope.
pub fn validate_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    for (field, pointer) in [("spec.group", "/spec/group"), ("spec.scope", "/spec/scope")] {
        if old.pointer(pointer) != new.pointer(pointer) {
            causes.push(cause("FieldValueInvalid", field, format!("Invalid value: {:?}: field is immutable", s(new, pointer))));
        }
    }
    causes
}

/// Sets the condition of `type_` in `conditions`, keeping every other; its transition time
/// moves only when its status does.
fn set_condition(conditions: &mut Vec<Value>, type_: &str, status: bool, reason: &str, message: &str, now: &str) {
    let status = if status { "True" } else { "False" };
    let since = conditions.iter().find(|c| c["type"] == type_ && c["status"] == status).and_then(|c| c["lastTransitionTime"].as_str()).unwrap_or(now).to_owned();
    conditions.retain(|c| c["type"] != type_);
    conditions.push(json!({"type": type_, "status": status, "lastTransitionTime": since, "reason": reason, "message": message}));
}

/// Accepts the CRD's names and establishes it, as upstream's naming and establishing
/// controllers do once no other CRD claims its names: `status.acceptedNames`, the
/// `NamesAccepted` and `Established` conditions (other conditions are kept), and the storage
/// version in `status.storedVersions`. `conflict` names a CRD that serves the same plural or
/// kind in the group, if any: then the names are refused and the CRD is not established.
pub fn establish(crd: &mut Value, conflict: Option<&str>, now: &str) {
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let storage = crd.pointer("/spec/versions").and_then(Value::as_array).and_then(|vs| vs.iter().find(|v| v["storage"] == true)).and_then(|v| v["name"].as_str()).unwrap_or("").to_owned();
    let Some(obj) = crd.as_object_mut() else { return };
    let status = obj.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let status = status.as_object_mut().expect("an object");
    let mut stored = strings(status.get("storedVersions"));
    if !storage.is_empty() && !stored.contains(&storage) {
        stored.push(storage);
    }
    status.insert("storedVersions".into(), json!(stored));
    let mut conditions = status.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    match conflict {
        None => {
            status.insert("acceptedNames".into(), names);
            set_condition(&mut conditions, "NamesAccepted", true, "NoConflicts", "no conflicts found", now);
            set_condition(&mut conditions, "Established", true, "InitialNamesAccepted", "the initial names have been accepted", now);
        }
        Some(other) => {
            status.insert("acceptedNames".into(), json!({"kind": "", "plural": ""}));
            set_condition(&mut conditions, "NamesAccepted", false, "NameConflict", &format!("names are already in use by {other}"), now);
            set_condition(&mut conditions, "Established", false, "NotAccepted", "not all names are accepted", now);
        }
    }
    status.insert("conditions".into(), Value::Array(conditions));
}

/// Sets the `Terminating` condition of a CRD being deleted.
pub fn mark_terminating(crd: &mut Value, now: &str) {
    let Some(obj) = crd.as_object_mut() else { return };
    let status = obj.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let mut conditions = status.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    set_condition(&mut conditions, "Terminating", true, "InstanceDeletionInProgress", "CustomResource deletion is in progress", now);
    status["conditions"] = Value::Array(conditions);
}

/// Whether the CRD's `type` condition is True.
pub fn condition_true(crd: &Value, type_: &str) -> bool {
    crd.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == type_ && c["status"] == "True"))
}

/// The (group, plural, kind) a CRD claims.
pub fn claims(crd: &Value) -> (String, String, String) {
    (s(crd, "/spec/group").to_owned(), s(crd, "/spec/names/plural").to_owned(), s(crd, "/spec/names/kind").to_owned())
}

fn printer_columns(v: &Value) -> Vec<PrinterColumn> {
    v.get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|cols| {
            cols.iter()
                .map(|c| PrinterColumn {
                    name: s(c, "/name").to_owned(),
                    type_: s(c, "/type").to_owned(),
                    format: s(c, "/format").to_owned(),
                    description: s(c, "/description").to_owned(),
                    priority: c["priority"].as_i64().unwrap_or(0),
                    json_path: s(c, "/jsonPath").to_owned(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The resources an established CRD serves: one per served version, under its accepted names.
/// None for a CRD that is not established.
pub fn served_resources(crd: &Value) -> Vec<ResourceInfo> {
    if !condition_true(crd, "Established") {
        return Vec::new();
    }
    let accepted = crd.pointer("/status/acceptedNames").cloned().unwrap_or(Value::Null);
    let (group, plural, kind) = (s(crd, "/spec/group"), s(&accepted, "/plural"), s(&accepted, "/kind"));
    if plural.is_empty() || kind.is_empty() {
        return Vec::new();
    }
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    let storage_version = versions.iter().find(|v| v["storage"] == true).and_then(|v| v["name"].as_str()).unwrap_or("").to_owned();
    let singular = match s(&accepted, "/singular") {
        "" => kind.to_ascii_lowercase(),
        x => x.to_owned(),
    };
    let list_kind = match s(&accepted, "/listKind") {
        "" => format!("{kind}List"),
        x => x.to_owned(),
    };
    versions
        .iter()
        .filter(|v| v["served"] == true)
        .map(|v| {
            let scale = v.pointer("/subresources/scale").filter(|x| x.is_object()).map(|sc| ScalePaths {
                spec_replicas: s(sc, "/specReplicasPath").to_owned(),
                status_replicas: s(sc, "/statusReplicasPath").to_owned(),
                label_selector: sc.get("labelSelectorPath").and_then(Value::as_str).map_or(ScaleSelector::None, |p| ScaleSelector::At(p.to_owned())),
            });
            ResourceInfo {
                group: group.to_owned(),
                version: v["name"].as_str().unwrap_or("").to_owned(),
                kind: kind.to_owned(),
                list_kind: list_kind.clone(),
                plural: plural.to_owned(),
                singular: singular.clone(),
                namespaced: s(crd, "/spec/scope") == "Namespaced",
                short_names: strings(accepted.get("shortNames")),
                categories: strings(accepted.get("categories")),
                has_status: v.pointer("/subresources/status").is_some_and(Value::is_object),
                tracks_generation: true,
                returns_deleted_object: true,
                allow_create_on_update: false,
                selectable_fields: v.get("selectableFields").and_then(Value::as_array).map(|fs| fs.iter().filter_map(|f| f["jsonPath"].as_str().map(|p| p.trim_start_matches('.').to_owned())).collect()).unwrap_or_else(|| Arc::from(Vec::new())),
                name_rule: NameRule::Subdomain,
                backing: crate::resources::Backing::Stored,
                stored_as: None,
                custom: Some(Arc::new(CustomVersion {
                    crd: s(crd, "/metadata/name").to_owned(),
                    storage_version: storage_version.clone(),
                    schema: v.pointer("/schema/openAPIV3Schema").cloned().unwrap_or(json!({})),
                    scale,
                    printer_columns: printer_columns(v),
                })),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "agentsessions.agents.example.com"},
            "spec": {"group": "agents.example.com", "scope": "Namespaced",
                "names": {"plural": "agentsessions", "kind": "AgentSession", "shortNames": ["as"]},
                "versions": [
                    {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}, "subresources": {"status": {}}},
                    {"name": "v1beta1", "served": false, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}}
                ]}
        })
    }

    #[test]
    fn an_established_crd_serves_its_served_versions() {
        let mut c = crd();
        apply_defaults(&mut c);
        assert!(validate(&c).is_empty(), "{:?}", validate(&c));
        assert!(served_resources(&c).is_empty(), "not established yet");
        establish(&mut c, None, "2026-01-01T00:00:00Z");
        let rs = served_resources(&c);
        assert_eq!(rs.len(), 1);
        let r = &rs[0];
        assert_eq!((r.group.as_str(), r.version.as_str(), r.plural.as_str(), r.kind.as_str(), r.list_kind.as_str(), r.singular.as_str()), ("agents.example.com", "v1", "agentsessions", "AgentSession", "AgentSessionList", "agentsession"));
        assert!(r.namespaced && r.has_status && r.short_names == ["as"]);
        assert_eq!(c["status"]["storedVersions"], json!(["v1"]));
    }

    #[test]
    fn a_name_conflict_is_not_established() {
        let mut c = crd();
        apply_defaults(&mut c);
        establish(&mut c, Some("other.agents.example.com"), "2026-01-01T00:00:00Z");
        assert!(!condition_true(&c, "NamesAccepted") && !condition_true(&c, "Established"));
        assert!(served_resources(&c).is_empty());
    }

    #[test]
    fn upstream_checks_name_group_scope_and_versions() {
        let mut c = crd();
        c["metadata"]["name"] = json!("wrong");
        c["spec"]["group"] = json!("nodot");
        c["spec"]["scope"] = json!("Everywhere");
        c["spec"]["versions"][0]["storage"] = json!(false);
        c["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"]}});
        let fields: Vec<String> = validate(&c).into_iter().map(|c| c.field).collect();
        assert_eq!(fields, ["metadata.name", "spec.group", "spec.conversion.strategy", "spec.scope", "spec.versions"]);
        let mut moved = crd();
        moved["spec"]["scope"] = json!("Cluster");
        assert_eq!(validate_update(&crd(), &moved).len(), 1);
    }

    #[test]
    fn patterns_must_compile_within_the_bound_at_the_crd_write() {
        let mut c = crd();
        c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "ok": {"type": "string", "pattern": "^[a-z]+$"},
            "open": {"type": "string", "pattern": "(a"},
            "huge": {"type": "array", "items": {"type": "string", "pattern": "(\\w{100}){100}"}}
        }}}});
        let causes = validate(&c);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[huge].items.pattern", "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[open].pattern"]);
        assert!(causes[1].message.starts_with("Invalid value: \"(a\": must be a valid regular expression, but isn't: "), "{}", causes[1].message);
    }
}
