//! RBAC roles and bindings, leases, autoscalers and volume claims: the rules clients meet most, as
//! upstream's validation words them.

use super::errors::{forbidden, go_strings, invalid, invalid_shown, not_supported, required};
use super::fields::{items, label_selector};
use crate::status::{cause, StatusCause};
use serde_json::Value;

/// What upstream says of a claim update that changes its spec.
pub const CLAIM_SPEC_FORBIDDEN: &str = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";

fn role_ref_go(r: Option<&Value>) -> String {
    let s = |k: &str| r.and_then(|r| r.get(k)).and_then(Value::as_str).unwrap_or("").to_owned();
    format!("rbac.RoleRef{{APIGroup:{:?}, Kind:{:?}, Name:{:?}}}", s("apiGroup"), s("kind"), s("name"))
}

/// RoleBindings and ClusterRoleBindings: what the reference and each subject name.
pub(super) fn validate_binding(cluster: bool, obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let kinds: &[&str] = if cluster { &["ClusterRole"] } else { &["Role", "ClusterRole"] };
    match obj.pointer("/roleRef/kind").and_then(Value::as_str) {
        Some(k) if kinds.contains(&k) => {}
        Some(k) => causes.push(not_supported("roleRef.kind", k, kinds)),
        None => causes.push(not_supported("roleRef.kind", "", kinds)),
    }
    if obj.pointer("/roleRef/name").and_then(Value::as_str).unwrap_or("").is_empty() {
        causes.push(required("roleRef.name"));
    }
    for (i, s) in obj.get("subjects").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
        if !["ServiceAccount", "User", "Group"].contains(&kind) {
            causes.push(not_supported(&format!("subjects[{i}].kind"), kind, &["ServiceAccount", "User", "Group"]));
        }
        if s.get("name").and_then(Value::as_str).unwrap_or("").is_empty() {
            causes.push(required(&format!("subjects[{i}].name")));
        }
        if kind == "ServiceAccount" && cluster && s.get("namespace").and_then(Value::as_str).unwrap_or("").is_empty() {
            causes.push(required(&format!("subjects[{i}].namespace")));
        }
    }
    causes
}

/// Roles and ClusterRoles: each rule's verbs and what it applies to (resources or, in a cluster
/// role only, non-resource URLs, never both); a cluster role's aggregation selectors.
pub(super) fn validate_role(cluster: bool, obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    for (i, rule) in items(obj, "rules").iter().enumerate() {
        let at = format!("rules[{i}]");
        let has = |key: &str| !items(rule, key).is_empty();
        if !has("verbs") {
            causes.push(cause("FieldValueRequired", &format!("{at}.verbs"), "Required value: verbs must contain at least one value"));
        }
        if has("nonResourceURLs") {
            let urls = go_strings(rule.get("nonResourceURLs"));
            if !cluster {
                causes.push(invalid_shown(&format!("{at}.nonResourceURLs"), &urls, "namespaced rules cannot apply to non-resource URLs"));
            }
            if has("apiGroups") || has("resources") || has("resourceNames") {
                causes.push(invalid_shown(&format!("{at}.nonResourceURLs"), &urls, "rules cannot apply to both regular resources and non-resource URLs"));
            }
            continue;
        }
        if !has("apiGroups") {
            causes.push(cause("FieldValueRequired", &format!("{at}.apiGroups"), "Required value: resource rules must supply at least one api group"));
        }
        if !has("resources") {
            causes.push(cause("FieldValueRequired", &format!("{at}.resources"), "Required value: resource rules must supply at least one resource"));
        }
    }
    if let Some(rule) = obj.get("aggregationRule").filter(|r| cluster && !r.is_null()) {
        let selectors = items(rule, "clusterRoleSelectors");
        if selectors.is_empty() {
            causes.push(cause("FieldValueRequired", "aggregationRule.clusterRoleSelectors", "Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"));
        }
        for (i, sel) in selectors.iter().enumerate() {
            label_selector(Some(sel), &format!("aggregationRule.clusterRoleSelectors[{i}]"), &mut causes);
        }
    }
    causes
}

/// A binding's role reference may not change.
pub(super) fn validate_binding_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    if old.get("roleRef") != new.get("roleRef") {
        return vec![invalid_shown("roleRef", &role_ref_go(new.get("roleRef")), "cannot change roleRef")];
    }
    Vec::new()
}

/// Leases: durations and counts.
pub(super) fn validate_lease(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    if let Some(d) = obj.pointer("/spec/leaseDurationSeconds").filter(|d| d.as_i64().is_some_and(|n| n <= 0)) {
        causes.push(invalid("spec.leaseDurationSeconds", d, "must be greater than 0"));
    }
    if let Some(t) = obj.pointer("/spec/leaseTransitions").filter(|t| t.as_i64().is_some_and(|n| n < 0)) {
        causes.push(invalid("spec.leaseTransitions", t, "must be greater than or equal to 0"));
    }
    causes
}

/// HorizontalPodAutoscalers (autoscaling/v2 as stored): the target and the replica bounds.
pub(super) fn validate_autoscaler(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    for f in ["kind", "name"] {
        if obj.pointer(&format!("/spec/scaleTargetRef/{f}")).and_then(Value::as_str).unwrap_or("").is_empty() {
            causes.push(required(&format!("spec.scaleTargetRef.{f}")));
        }
    }
    let max = obj.pointer("/spec/maxReplicas").cloned().unwrap_or(Value::from(0));
    if max.as_i64().unwrap_or(0) < 1 {
        causes.push(invalid("spec.maxReplicas", &max, "must be greater than 0"));
    }
    if let Some(min) = obj.pointer("/spec/minReplicas").filter(|m| m.is_number()) {
        if min.as_i64().unwrap_or(0) < 1 {
            causes.push(invalid("spec.minReplicas", min, "must be greater than or equal to 1"));
        }
        if max.as_i64() < min.as_i64() {
            causes.push(invalid("spec.maxReplicas", &max, "must be greater than or equal to `minReplicas`"));
        }
    }
    causes
}

/// A claim's spec may change only in its requests (and volume attributes class).
pub(super) fn validate_claim_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let rest = |v: &Value| {
        let mut s = v.get("spec").cloned().unwrap_or(Value::Null);
        if let Some(m) = s.as_object_mut() {
            m.remove("volumeAttributesClassName");
            if let Some(r) = m.get_mut("resources").and_then(Value::as_object_mut) {
                r.remove("requests");
            }
        }
        s
    };
    if rest(old) != rest(new) {
        return vec![forbidden("spec", CLAIM_SPEC_FORBIDDEN)];
    }
    Vec::new()
}

/// StorageClasses: a provisioner, and what an update may not change.
pub(super) fn validate_storage_class(obj: &Value) -> Vec<StatusCause> {
    if obj.get("provisioner").and_then(Value::as_str).unwrap_or("").is_empty() {
        return vec![required("provisioner")];
    }
    Vec::new()
}

pub(super) fn validate_storage_class_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    for field in ["parameters", "provisioner", "reclaimPolicy"] {
        if old.get(field) != new.get(field) {
            causes.push(forbidden(field, &format!("updates to {field} are forbidden.")));
        }
    }
    if old.get("volumeBindingMode") != new.get("volumeBindingMode") {
        // Upstream quotes the pointer it compares (an address); the value is given here.
        causes.push(invalid("volumeBindingMode", new.get("volumeBindingMode").unwrap_or(&Value::Null), "field is immutable"));
    }
    causes
}

/// One string field that may not change, as `ValidateImmutableField` words it.
pub(super) fn immutable_string(field: &str, pointer: &str, old: &Value, new: &Value) -> Vec<StatusCause> {
    let (was, is) = (old.pointer(pointer), new.pointer(pointer));
    if was != is {
        return vec![invalid(field, is.unwrap_or(&Value::String(String::new())), "field is immutable")];
    }
    Vec::new()
}

/// IngressClasses and RuntimeClasses: the controller or handler they name.
pub(super) fn validate_class(plural: &str, obj: &Value) -> Vec<StatusCause> {
    match plural {
        "ingressclasses" if obj.pointer("/spec/controller").and_then(Value::as_str).unwrap_or("").is_empty() => vec![required("spec.controller")],
        "runtimeclasses" => {
            let handler = obj.get("handler").and_then(Value::as_str).unwrap_or("");
            match crate::meta::validate_dns1123_label(handler) {
                Err(e) => vec![invalid("handler", &Value::String(handler.to_owned()), &e)],
                Ok(()) => Vec::new(),
            }
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::errors::fields;
    use super::*;
    use serde_json::json;

    #[test]
    fn role_rules_need_verbs_and_targets_and_urls_only_in_cluster_roles() {
        let role = json!({"rules": [
            {"apiGroups": [""], "resources": ["pods"]},
            {"verbs": ["get"], "nonResourceURLs": ["/healthz"]},
            {"verbs": ["get"], "resources": ["pods"]}]});
        let causes = validate_role(false, &role);
        assert_eq!(fields(&causes), ["rules[0].verbs", "rules[1].nonResourceURLs", "rules[2].apiGroups"]);
        assert_eq!(causes[1].message, "Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs");
        let both = json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"], "resources": ["pods"]}], "aggregationRule": {"clusterRoleSelectors": []}});
        assert_eq!(fields(&validate_role(true, &both)), ["rules[0].nonResourceURLs", "aggregationRule.clusterRoleSelectors"]);
        let ok = json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/x"]}], "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]}});
        assert!(validate_role(true, &ok).is_empty());
    }
}
