//! Where and as whom a pod runs, as upstream's core validation words it: security contexts
//! (the pod's and each container's user and group IDs, FS group change policy, seccomp
//! profiles, privilege escalation) and affinity (node selector terms and their requirements,
//! preference weights, pod (anti-)affinity terms' topology keys and selectors).

use super::errors::{invalid, invalid_shown, not_supported};
use super::fields::{check, items, label_selector, s, selector_requirement};
use crate::meta::validate_qualified_name;
use crate::status::{cause, StatusCause};
use serde_json::Value;

const MAX_ID: i64 = 2_147_483_647;
const FS_GROUP_CHANGE_POLICIES: [&str; 2] = ["Always", "OnRootMismatch"];
/// In upstream's order (not sorted).
const SECCOMP_TYPES: [&str; 3] = ["Localhost", "RuntimeDefault", "Unconfined"];

/// A user or group ID in upstream's range, if present.
fn id(v: Option<&Value>, field: &str, causes: &mut Vec<StatusCause>) {
    if let Some(n) = v.filter(|n| n.as_i64().is_some_and(|n| !(0..=MAX_ID).contains(&n))) {
        causes.push(invalid(field, n, &format!("must be between 0 and {MAX_ID}, inclusive")));
    }
}

fn seccomp(sc: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    let Some(p) = sc.get("seccompProfile").filter(|p| !p.is_null()) else { return };
    match s(p, "type") {
        "Localhost" if p.get("localhostProfile").is_none_or(Value::is_null) => {
            causes.push(cause("FieldValueRequired", &format!("{at}.seccompProfile.localhostProfile"), "Required value: must be set when seccomp type is Localhost"));
        }
        "Localhost" | "RuntimeDefault" | "Unconfined" => {}
        other => causes.push(not_supported(&format!("{at}.seccompProfile.type"), other, &SECCOMP_TYPES)),
    }
}

/// The pod's security context at `{path}.securityContext`.
pub(super) fn pod_security_context(spec: &Value, path: &str, causes: &mut Vec<StatusCause>) {
    let Some(sc) = spec.get("securityContext").filter(|v| v.is_object()) else { return };
    let at = format!("{path}.securityContext");
    for field in ["runAsUser", "runAsGroup", "fsGroup"] {
        id(sc.get(field), &format!("{at}.{field}"), causes);
    }
    for (i, g) in items(sc, "supplementalGroups").iter().enumerate() {
        id(Some(g), &format!("{at}.supplementalGroups[{i}]"), causes);
    }
    if let Some(p) = sc.get("fsGroupChangePolicy").and_then(Value::as_str).filter(|p| !FS_GROUP_CHANGE_POLICIES.contains(p)) {
        causes.push(not_supported(&format!("{at}.fsGroupChangePolicy"), p, &FS_GROUP_CHANGE_POLICIES));
    }
    seccomp(sc, &at, causes);
}

/// A container's security context at `{at}.securityContext`.
pub(super) fn container_security_context(c: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    let Some(sc) = c.get("securityContext").filter(|v| v.is_object()) else { return };
    let at = format!("{at}.securityContext");
    for field in ["runAsUser", "runAsGroup"] {
        id(sc.get(field), &format!("{at}.{field}"), causes);
    }
    if sc.get("allowPrivilegeEscalation") == Some(&Value::Bool(false)) {
        // Upstream quotes the whole context (Go's %#v of pointers); a shortened form is given.
        if sc.get("privileged") == Some(&Value::Bool(true)) {
            causes.push(invalid_shown(&at, "core.SecurityContext{...}", "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"));
        }
        if items(sc.get("capabilities").unwrap_or(&Value::Null), "add").iter().any(|c| c == "CAP_SYS_ADMIN" || c == "SYS_ADMIN") {
            causes.push(invalid_shown(&at, "core.SecurityContext{...}", "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN"));
        }
    }
    seccomp(sc, &at, causes);
}

fn node_selector_term(term: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    for (j, r) in items(term, "matchExpressions").iter().enumerate() {
        selector_requirement(r, &format!("{at}.matchExpressions[{j}]"), true, causes);
    }
    for (j, r) in items(term, "matchFields").iter().enumerate() {
        selector_requirement(r, &format!("{at}.matchFields[{j}]"), true, causes);
    }
}

fn weight(term: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    let w = term.get("weight").cloned().unwrap_or(Value::from(0));
    if !w.as_i64().is_some_and(|n| (1..=100).contains(&n)) {
        causes.push(invalid(&format!("{at}.weight"), &w, "must be in the range 1-100"));
    }
}

fn pod_affinity_term(term: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    label_selector(term.get("labelSelector"), &format!("{at}.labelSelector"), causes);
    label_selector(term.get("namespaceSelector"), &format!("{at}.namespaceSelector"), causes);
    match s(term, "topologyKey") {
        "" => causes.push(cause("FieldValueRequired", &format!("{at}.topologyKey"), "Required value: can not be empty")),
        key => check(&format!("{at}.topologyKey"), key, validate_qualified_name, causes),
    }
}

/// The pod's affinity at `{path}.affinity`.
pub(super) fn affinity(spec: &Value, path: &str, causes: &mut Vec<StatusCause>) {
    let Some(a) = spec.get("affinity").filter(|v| v.is_object()) else { return };
    let at = format!("{path}.affinity");
    const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
    const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";
    if let Some(node) = a.get("nodeAffinity").filter(|v| v.is_object()) {
        let nat = format!("{at}.nodeAffinity");
        if let Some(req) = node.get(REQUIRED).filter(|v| !v.is_null()) {
            let terms = items(req, "nodeSelectorTerms");
            if terms.is_empty() {
                causes.push(cause("FieldValueRequired", &format!("{nat}.{REQUIRED}.nodeSelectorTerms"), "Required value: must have at least one node selector term"));
            }
            for (i, t) in terms.iter().enumerate() {
                node_selector_term(t, &format!("{nat}.{REQUIRED}.nodeSelectorTerms[{i}]"), causes);
            }
        }
        for (i, t) in items(node, PREFERRED).iter().enumerate() {
            let tat = format!("{nat}.{PREFERRED}[{i}]");
            weight(t, &tat, causes);
            node_selector_term(t.get("preference").unwrap_or(&Value::Null), &format!("{tat}.preference"), causes);
        }
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        let Some(pa) = a.get(kind).filter(|v| v.is_object()) else { continue };
        let pat = format!("{at}.{kind}");
        for (i, t) in items(pa, REQUIRED).iter().enumerate() {
            pod_affinity_term(t, &format!("{pat}.{REQUIRED}[{i}]"), causes);
        }
        for (i, t) in items(pa, PREFERRED).iter().enumerate() {
            let tat = format!("{pat}.{PREFERRED}[{i}]");
            weight(t, &tat, causes);
            pod_affinity_term(t.get("podAffinityTerm").unwrap_or(&Value::Null), &format!("{tat}.podAffinityTerm"), causes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::errors::fields;
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_policies_and_profiles_are_in_range() {
        let spec = json!({"securityContext": {"runAsUser": -1, "supplementalGroups": [1, 3000000000i64], "fsGroupChangePolicy": "Never",
            "seccompProfile": {"type": "Localhost"}}, "containers": [{"securityContext": {"runAsGroup": -5, "allowPrivilegeEscalation": false, "privileged": true}}]});
        let mut causes = Vec::new();
        pod_security_context(&spec, "spec", &mut causes);
        container_security_context(&spec["containers"][0], "spec.containers[0]", &mut causes);
        assert_eq!(fields(&causes), ["spec.securityContext.runAsUser", "spec.securityContext.supplementalGroups[1]", "spec.securityContext.fsGroupChangePolicy",
            "spec.securityContext.seccompProfile.localhostProfile", "spec.containers[0].securityContext.runAsGroup", "spec.containers[0].securityContext"]);
        assert_eq!(causes[0].message, "Invalid value: -1: must be between 0 and 2147483647, inclusive");
    }

    #[test]
    fn affinity_terms_need_operators_values_weights_and_topology() {
        let spec = json!({"affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "zone", "operator": "Gt", "values": ["1", "2"]}, {"key": "zone", "operator": "Near"}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "x"}}}]}}});
        let mut causes = Vec::new();
        affinity(&spec, "spec", &mut causes);
        let n = "spec.affinity.nodeAffinity";
        assert_eq!(fields(&causes), [
            format!("{n}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values"),
            format!("{n}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[1].operator"),
            format!("{n}.preferredDuringSchedulingIgnoredDuringExecution[0].weight"),
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey".to_owned(),
        ]);
        assert_eq!(causes[0].message, "Required value: must be specified single value when `operator` is 'Lt' or 'Gt'");
    }
}
