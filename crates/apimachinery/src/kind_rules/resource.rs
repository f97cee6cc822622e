//! Dynamic Resource Allocation (resource.k8s.io), checked on the stored v1beta2 shape, which is
//! upstream's internal one (so a v1beta1 request's errors carry the same paths as upstream's:
//! `spec.devices.requests[0].exactly.count`): DeviceClasses, ResourceClaims and their
//! templates, ResourceSlices, with upstream's limits (32 requests, 8 alternatives, 32 selectors,
//! 128 devices, 32 attributes and capacities per device) and the fields an update may not
//! change. A selector's CEL expression is not compiled (RFC 0011): only that a selector has one.

use super::errors::{duplicate, forbidden, invalid, invalid_shown, not_supported, required};
use crate::meta::{validate_dns1123_label, validate_dns1123_subdomain, validate_qualified_name};
use crate::status::{cause, StatusCause};
use serde_json::Value;
use super::fields::{check, items, required_name, s, too_many};

const MAX_REQUESTS: usize = 32;
const MAX_FIRST_AVAILABLE: usize = 8;
const MAX_SELECTORS: usize = 32;
const MAX_CONSTRAINTS: usize = 32;
const MAX_CONFIG: usize = 32;
const MAX_DEVICES: usize = 128;
const MAX_ATTRIBUTES_AND_CAPACITIES: usize = 32;
const MAX_RESERVED_FOR: usize = 256;
const MAX_POOL_NAME: usize = 253;
const ALLOCATION_MODES: [&str; 2] = ["All", "ExactCount"];

/// A list with at most `max` entries whose `name`s are unique DNS labels.
fn named_list(list: &[Value], max: usize, path: &str, causes: &mut Vec<StatusCause>, each: impl Fn(&Value, &str, &mut Vec<StatusCause>)) {
    if list.len() > max {
        causes.push(too_many(path, list.len(), max));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, item) in list.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = s(item, "name");
        required_name(&format!("{at}.name"), name, validate_dns1123_label, causes);
        if !name.is_empty() && !seen.insert(name) {
            causes.push(duplicate(&format!("{at}.name"), name));
        }
        each(item, &at, causes);
    }
}

fn selectors(parent: &Value, path: &str, causes: &mut Vec<StatusCause>) {
    let list = items(parent, "selectors");
    if list.len() > MAX_SELECTORS {
        causes.push(too_many(&format!("{path}.selectors"), list.len(), MAX_SELECTORS));
    }
    for (i, sel) in list.iter().enumerate() {
        let at = format!("{path}.selectors[{i}].cel");
        if sel.get("cel").is_none_or(|c| !c.is_object()) {
            causes.push(required(&at));
        }
    }
}

fn tolerations(parent: &Value, path: &str, causes: &mut Vec<StatusCause>) {
    for (i, t) in items(parent, "tolerations").iter().enumerate() {
        let at = format!("{path}.tolerations[{i}]");
        let key = s(t, "key");
        if !key.is_empty() {
            check(&format!("{at}.key"), key, validate_qualified_name, causes);
        }
        match s(t, "operator") {
            "Exists" if !s(t, "value").is_empty() => causes.push(invalid(&format!("{at}.value"), &t["value"], "must be empty for operator `Exists`")),
            "Equal" | "Exists" => {}
            op => causes.push(not_supported(&format!("{at}.operator"), op, &["Equal", "Exists"])),
        }
        match s(t, "effect") {
            "" | "NoSchedule" | "NoExecute" => {}
            e => causes.push(not_supported(&format!("{at}.effect"), e, &["NoExecute", "NoSchedule"])),
        }
    }
}

/// An exact request or one alternative: its class, selectors, allocation mode and count.
fn exact_request(r: &Value, path: &str, causes: &mut Vec<StatusCause>) {
    required_name(&format!("{path}.deviceClassName"), s(r, "deviceClassName"), validate_dns1123_subdomain, causes);
    selectors(r, path, causes);
    let count = r.get("count").cloned().unwrap_or(Value::from(0));
    match s(r, "allocationMode") {
        "All" if count.as_i64().unwrap_or(0) != 0 => causes.push(invalid(&format!("{path}.count"), &count, "must not be specified when allocationMode is 'All'")),
        "ExactCount" if count.as_i64().unwrap_or(0) <= 0 => causes.push(invalid(&format!("{path}.count"), &count, "must be greater than zero")),
        "All" | "ExactCount" => {}
        mode => causes.push(not_supported(&format!("{path}.allocationMode"), mode, &ALLOCATION_MODES)),
    }
    tolerations(r, path, causes);
}

fn request(r: &Value, path: &str, causes: &mut Vec<StatusCause>) {
    let alternatives = items(r, "firstAvailable");
    match (r.get("exactly").filter(|e| !e.is_null()), alternatives.is_empty()) {
        (None, true) => causes.push(cause("FieldValueRequired", path, "Required value: exactly one of `exactly` or `firstAvailable` is required")),
        (Some(_), false) => causes.push(invalid_shown(path, "null", "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set")),
        (Some(exactly), true) => exact_request(exactly, &format!("{path}.exactly"), causes),
        (None, false) => named_list(alternatives, MAX_FIRST_AVAILABLE, &format!("{path}.firstAvailable"), causes, exact_request),
    }
}

/// The names a constraint or a configuration may refer to: `request` or `request/alternative`.
fn request_names(devices: &Value) -> Vec<String> {
    let mut names = Vec::new();
    for r in items(devices, "requests") {
        let name = s(r, "name");
        names.push(name.to_owned());
        names.extend(items(r, "firstAvailable").iter().map(|a| format!("{name}/{}", s(a, "name"))));
    }
    names
}

fn request_refs(parent: &Value, path: &str, names: &[String], causes: &mut Vec<StatusCause>) {
    for (i, r) in items(parent, "requests").iter().enumerate() {
        let name = r.as_str().unwrap_or("");
        if !names.iter().any(|n| n == name) {
            causes.push(invalid(&format!("{path}.requests[{i}]"), r, "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'"));
        }
    }
}

fn opaque_config(c: &Value, path: &str, causes: &mut Vec<StatusCause>) {
    let Some(opaque) = c.get("opaque").filter(|o| o.is_object()) else {
        causes.push(required(&format!("{path}.opaque")));
        return;
    };
    required_name(&format!("{path}.opaque.driver"), s(opaque, "driver"), validate_dns1123_subdomain, causes);
    match opaque.get("parameters") {
        None | Some(Value::Null) => causes.push(required(&format!("{path}.opaque.parameters"))),
        Some(Value::Object(_)) => {}
        Some(_) => causes.push(invalid_shown(&format!("{path}.opaque.parameters"), "\"<value omitted>\"", "parameters must be a valid JSON object")),
    }
}

fn configs(parent: &Value, path: &str, names: Option<&[String]>, causes: &mut Vec<StatusCause>) {
    let list = items(parent, "config");
    if list.len() > MAX_CONFIG {
        causes.push(too_many(path, list.len(), MAX_CONFIG));
    }
    for (i, c) in list.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if let Some(names) = names {
            request_refs(c, &at, names, causes);
        }
        opaque_config(c, &at, causes);
    }
}

/// A claim's spec (`spec` of a claim, `spec.spec` of a template).
fn claim_spec(spec: &Value, path: &str, causes: &mut Vec<StatusCause>) {
    let devices = spec.get("devices").cloned().unwrap_or(Value::Null);
    let at = format!("{path}.devices");
    named_list(items(&devices, "requests"), MAX_REQUESTS, &format!("{at}.requests"), causes, request);
    let names = request_names(&devices);
    let constraints = items(&devices, "constraints");
    if constraints.len() > MAX_CONSTRAINTS {
        causes.push(too_many(&format!("{at}.constraints"), constraints.len(), MAX_CONSTRAINTS));
    }
    for (i, c) in constraints.iter().enumerate() {
        let cat = format!("{at}.constraints[{i}]");
        request_refs(c, &cat, &names, causes);
        match c.get("matchAttribute").and_then(Value::as_str) {
            None => causes.push(required(&format!("{cat}.matchAttribute"))),
            Some(a) => check(&format!("{cat}.matchAttribute"), a, validate_qualified_name, causes),
        }
    }
    configs(&devices, &format!("{at}.config"), Some(&names), causes);
}

fn claim_status(status: &Value, causes: &mut Vec<StatusCause>) {
    let reserved = items(status, "reservedFor");
    if reserved.len() > MAX_RESERVED_FOR {
        causes.push(too_many("status.reservedFor", reserved.len(), MAX_RESERVED_FOR));
    }
    let mut uids = std::collections::BTreeSet::new();
    for (i, r) in reserved.iter().enumerate() {
        for f in ["resource", "name", "uid"] {
            if s(r, f).is_empty() {
                causes.push(required(&format!("status.reservedFor[{i}].{f}")));
            }
        }
        if !s(r, "uid").is_empty() && !uids.insert(s(r, "uid")) {
            causes.push(duplicate(&format!("status.reservedFor[{i}]"), s(r, "uid")));
        }
    }
    if !reserved.is_empty() && status.get("allocation").is_none_or(Value::is_null) {
        causes.push(forbidden("status.reservedFor", "may not be specified when `allocated` is not set"));
    }
}

fn resource_slice(spec: &Value, causes: &mut Vec<StatusCause>) {
    required_name("spec.driver", s(spec, "driver"), validate_dns1123_subdomain, causes);
    let pool = spec.get("pool").cloned().unwrap_or(Value::Null);
    let pool_name = s(&pool, "name");
    if pool_name.is_empty() {
        causes.push(required("spec.pool.name"));
    } else {
        if pool_name.len() > MAX_POOL_NAME {
            causes.push(cause("FieldValueTooLong", "spec.pool.name", format!("Too long: may not be more than {MAX_POOL_NAME} bytes")));
        }
        for part in pool_name.split('/') {
            check("spec.pool.name", part, validate_dns1123_subdomain, causes);
        }
    }
    let count = pool.get("resourceSliceCount").cloned().unwrap_or(Value::from(0));
    if count.as_i64().unwrap_or(0) <= 0 {
        causes.push(invalid("spec.pool.resourceSliceCount", &count, "must be greater than zero"));
    }
    if let Some(g) = pool.get("generation").filter(|g| g.as_i64().unwrap_or(0) < 0) {
        causes.push(invalid("spec.pool.generation", g, "must be greater than or equal to zero"));
    }
    let mut set = Vec::new();
    if !s(spec, "nodeName").is_empty() {
        set.push("`nodeName`");
        check("spec.nodeName", s(spec, "nodeName"), validate_dns1123_subdomain, causes);
    }
    if let Some(sel) = spec.get("nodeSelector").filter(|v| !v.is_null()) {
        set.push("`nodeSelector`");
        let terms = items(sel, "nodeSelectorTerms");
        if terms.len() != 1 {
            causes.push(invalid_shown("spec.nodeSelector.nodeSelectorTerms", &format!("[]core.NodeSelectorTerm{{{}}}", if terms.is_empty() { "" } else { "..." }), "must have exactly one node selector term"));
        }
    }
    for flag in ["allNodes", "perDeviceNodeSelection"] {
        if spec.get(flag).and_then(Value::as_bool) == Some(true) {
            set.push(if flag == "allNodes" { "`allNodes`" } else { "`perDeviceNodeSelection`" });
        }
    }
    const WHICH: &str = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required";
    match set.len() {
        0 => causes.push(cause("FieldValueRequired", "spec", format!("Required value: {WHICH}"))),
        1 => {}
        _ => causes.push(invalid_shown("spec", &format!("{:?}", format!("{{{}}}", set.join(", "))), &format!("{WHICH}, but multiple fields are set"))),
    }
    named_list(items(spec, "devices"), MAX_DEVICES, "spec.devices", causes, |d, at, causes| {
        let attrs = d.get("attributes").and_then(Value::as_object);
        let n = attrs.map_or(0, |m| m.len()) + d.get("capacity").and_then(Value::as_object).map_or(0, |m| m.len());
        if n > MAX_ATTRIBUTES_AND_CAPACITIES {
            causes.push(invalid(at, &Value::from(n), &format!("the total number of attributes and capacities must not exceed {MAX_ATTRIBUTES_AND_CAPACITIES}")));
        }
        for (k, v) in attrs.into_iter().flatten() {
            let kinds = ["bool", "int", "string", "version"].iter().filter(|f| v.get(**f).is_some_and(|x| !x.is_null())).count();
            if kinds != 1 {
                causes.push(invalid_shown(&format!("{at}.attributes[{k}]"), "\"\"", "exactly one value must be specified"));
            }
        }
    });
}

/// Rules on one object in the stored version, on create and update, checked (as every kind's)
/// on the object with its defaults set (a request's allocation mode and count).
pub(super) fn validate(plural: &str, obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    match plural {
        "deviceclasses" => {
            selectors(&spec, "spec", &mut causes);
            configs(&spec, "spec.config", None, &mut causes);
        }
        "resourceclaims" => {
            claim_spec(&spec, "spec", &mut causes);
            claim_status(obj.get("status").unwrap_or(&Value::Null), &mut causes);
        }
        "resourceclaimtemplates" => claim_spec(spec.get("spec").unwrap_or(&Value::Null), "spec.spec", &mut causes),
        "resourceslices" => resource_slice(&spec, &mut causes),
        _ => {}
    }
    causes
}

/// What an update may not change: a claim's or a template's spec, a claim's allocation once
/// made, a slice's driver, pool and node.
pub(super) fn validate_update(plural: &str, old: &Value, new: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let changed = |ptr: &str| old.pointer(ptr) != new.pointer(ptr);
    match plural {
        // Upstream quotes the whole spec (Go's %#v); a shortened form is given (RFC 0011).
        "resourceclaims" | "resourceclaimtemplates" if changed("/spec") => {
            let ty = if plural == "resourceclaims" { "resource.ResourceClaimSpec{...}" } else { "resource.ResourceClaimTemplateSpec{...}" };
            causes.push(invalid_shown("spec", ty, "field is immutable"));
        }
        "resourceclaims" if old.pointer("/status/allocation").is_some_and(|a| !a.is_null()) && new.pointer("/status/allocation").is_some_and(|a| !a.is_null()) && changed("/status/allocation") => {
            causes.push(invalid_shown("status.allocation", "resource.AllocationResult{...}", "field is immutable"));
        }
        "resourceslices" => {
            for (field, ptr) in [("spec.pool.name", "/spec/pool/name"), ("spec.driver", "/spec/driver"), ("spec.nodeName", "/spec/nodeName")] {
                if changed(ptr) {
                    causes.push(invalid(field, new.pointer(ptr).unwrap_or(&Value::from("")), "field is immutable"));
                }
            }
        }
        _ => {}
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::super::errors::fields;
    use super::*;
    use serde_json::json;

    #[test]
    fn claims_need_one_kind_of_request_each_with_a_class_and_a_count() {
        let claim = |requests: Value| json!({"spec": {"devices": {"requests": requests}}});
        assert!(validate("resourceclaims", &claim(json!([{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "ExactCount", "count": 1}}]))).is_empty());
        let bad = validate("resourceclaims", &claim(json!([
            {"name": "a"},
            {"name": "a", "exactly": {"allocationMode": "ExactCount", "count": -1}},
            {"name": "Bad", "firstAvailable": [{"name": "x", "deviceClassName": "c", "allocationMode": "Some"}]},
        ])));
        assert_eq!(fields(&bad), [
            "spec.devices.requests[0]",
            "spec.devices.requests[1].name",
            "spec.devices.requests[1].exactly.deviceClassName",
            "spec.devices.requests[1].exactly.count",
            "spec.devices.requests[2].name",
            "spec.devices.requests[2].firstAvailable[0].allocationMode",
        ]);
        assert_eq!(bad[0].message, "Required value: exactly one of `exactly` or `firstAvailable` is required");
        assert_eq!(bad[3].message, "Invalid value: -1: must be greater than zero");
        assert_eq!(bad[5].message, "Unsupported value: \"Some\": supported values: \"All\", \"ExactCount\"");
    }

    #[test]
    fn a_slice_names_its_driver_pool_and_exactly_one_node_choice() {
        let ok = json!({"spec": {"driver": "gpu.example.com", "pool": {"name": "p", "resourceSliceCount": 1}, "nodeName": "n1", "devices": [{"name": "d0"}]}});
        assert!(validate("resourceslices", &ok).is_empty());
        let bad = json!({"spec": {"driver": "", "pool": {"name": "", "resourceSliceCount": 0}, "devices": [{"name": "d0"}, {"name": "d0"}]}});
        assert_eq!(fields(&validate("resourceslices", &bad)), ["spec.driver", "spec.pool.name", "spec.pool.resourceSliceCount", "spec", "spec.devices[1].name"]);
        let mut moved = ok.clone();
        moved["spec"]["nodeName"] = json!("n2");
        assert_eq!(fields(&validate_update("resourceslices", &ok, &moved)), ["spec.nodeName"]);
    }

    #[test]
    fn a_claims_spec_is_immutable_and_reservations_need_an_allocation() {
        let old = json!({"spec": {"devices": {"requests": []}}});
        let new = json!({"spec": {"devices": {"requests": [{"name": "x"}]}}});
        assert_eq!(validate_update("resourceclaims", &old, &new)[0].message, "Invalid value: resource.ResourceClaimSpec{...}: field is immutable");
        let reserved = json!({"spec": {}, "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}});
        assert_eq!(fields(&validate("resourceclaims", &reserved)), ["status.reservedFor"]);
    }
}
