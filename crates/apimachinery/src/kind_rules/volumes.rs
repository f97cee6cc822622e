//! PersistentVolumes and PersistentVolumeClaims (their create rules; a claim's update rule is
//! in [`super::cluster`]) and PodDisruptionBudgets, as upstream's core and policy validation
//! word them: access modes, capacity and requests, one volume source, the policies' enums, a
//! budget's counts and percentages.

use super::errors::{forbidden, go_int_or_string, invalid, invalid_shown, not_supported, required};
use crate::quantity::Quantity;
use crate::status::{cause, StatusCause};
use serde_json::Value;

const ACCESS_MODES: [&str; 4] = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"];
const RECLAIM_POLICIES: [&str; 3] = ["Delete", "Recycle", "Retain"];
const VOLUME_MODES: [&str; 2] = ["Block", "Filesystem"];
/// A PersistentVolume's sources in the order upstream checks them, each with the field its
/// "more than 1" error names (upstream writes `cephFS` there).
const SOURCES: [(&str, &str); 21] = [
    ("hostPath", "hostPath"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("nfs", "nfs"),
    ("rbd", "rbd"),
    ("quobyte", "quobyte"),
    ("cephfs", "cephFS"),
    ("iscsi", "iscsi"),
    ("cinder", "cinder"),
    ("fc", "fc"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("scaleIO", "scaleIO"),
    ("local", "local"),
    ("storageos", "storageos"),
    ("csi", "csi"),
];

fn access_modes(spec: &Value, detail: &str, causes: &mut Vec<StatusCause>) {
    let modes: Vec<&str> = spec.get("accessModes").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    if modes.is_empty() {
        causes.push(if detail.is_empty() { required("spec.accessModes") } else { cause("FieldValueRequired", "spec.accessModes", format!("Required value: {detail}")) });
    }
    for m in &modes {
        if !ACCESS_MODES.contains(m) {
            causes.push(not_supported("spec.accessModes", m, &ACCESS_MODES));
        }
    }
    if modes.contains(&"ReadWriteOncePod") && modes.iter().any(|m| *m != "ReadWriteOncePod" && ACCESS_MODES.contains(m)) {
        causes.push(forbidden("spec.accessModes", "may not use ReadWriteOncePod with other access modes"));
    }
}

/// A quantity that must be positive (upstream's `ValidatePositiveQuantityValue`).
fn positive_quantity(field: &str, v: &Value, causes: &mut Vec<StatusCause>) {
    let text = v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
    if Quantity::parse(&text).is_some_and(|q| q.nanos <= 0) {
        causes.push(invalid(field, &Value::from(text), "must be greater than zero"));
    }
}

pub(super) fn validate_volume(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    access_modes(&spec, "", &mut causes);
    let capacity = spec.get("capacity").and_then(Value::as_object);
    if capacity.is_none_or(|c| c.is_empty()) {
        causes.push(required("spec.capacity"));
    }
    if capacity.is_none_or(|c| !c.contains_key("storage") || c.len() > 1) {
        // Upstream quotes the map (Go's %#v of a ResourceList); an empty one is written so.
        let shown = if capacity.is_none_or(|c| c.is_empty()) { "core.ResourceList{}" } else { "core.ResourceList{...}" };
        causes.push(cause("FieldValueNotSupported", "spec.capacity", format!("Unsupported value: {shown}: supported values: \"storage\"")));
    }
    for (k, q) in capacity.into_iter().flatten() {
        positive_quantity(&format!("spec.capacity[{k}]"), q, &mut causes);
    }
    if let Some(p) = spec.get("persistentVolumeReclaimPolicy").and_then(Value::as_str).filter(|p| !p.is_empty() && !RECLAIM_POLICIES.contains(p)) {
        causes.push(not_supported("spec.persistentVolumeReclaimPolicy", p, &RECLAIM_POLICIES));
    }
    let mut sources = 0;
    for (key, named) in SOURCES {
        if spec.get(key).is_none_or(Value::is_null) {
            continue;
        }
        if sources > 0 {
            causes.push(forbidden(&format!("spec.{named}"), "may not specify more than 1 volume type"));
            continue;
        }
        sources += 1;
        if key == "local" && spec.get("nodeAffinity").is_none_or(Value::is_null) {
            causes.push(cause("FieldValueRequired", "spec.nodeAffinity", "Required value: Local volume requires node affinity"));
        }
    }
    // A flex volume counts without the "more than 1" check, as upstream's.
    if spec.get("flexVolume").is_some_and(|v| !v.is_null()) {
        sources += 1;
    }
    if sources == 0 {
        causes.push(cause("FieldValueRequired", "spec", "Required value: must specify a volume type"));
    }
    if let Some(m) = spec.get("volumeMode").and_then(Value::as_str).filter(|m| !VOLUME_MODES.contains(m)) {
        causes.push(not_supported("spec.volumeMode", m, &VOLUME_MODES));
    }
    causes
}

/// What a volume's update may not change beyond its create rules: its mode.
pub(super) fn validate_volume_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let (was, is) = (old.pointer("/spec/volumeMode"), new.pointer("/spec/volumeMode"));
    if was != is {
        return vec![invalid("volumeMode", is.unwrap_or(&Value::Null), "field is immutable")];
    }
    Vec::new()
}

pub(super) fn validate_claim(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    access_modes(&spec, "at least 1 access mode is required", &mut causes);
    match spec.pointer("/resources/requests/storage") {
        None | Some(Value::Null) => causes.push(required("spec.resources[storage]")),
        Some(q) => positive_quantity("spec.resources[storage]", q, &mut causes),
    }
    if let Some(m) = spec.get("volumeMode").and_then(Value::as_str).filter(|m| !VOLUME_MODES.contains(m)) {
        causes.push(not_supported("spec.volumeMode", m, &VOLUME_MODES));
    }
    causes
}


/// A count or a percentage that may not be negative nor above 100%.
fn int_or_percent(field: &str, v: &Value, causes: &mut Vec<StatusCause>) {
    const PERCENT: &str = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";
    match v {
        Value::String(s) => {
            let digits = s.strip_suffix('%').filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            match digits {
                None => causes.push(invalid_shown(field, &go_int_or_string(v), PERCENT)),
                Some(d) if d.parse::<u64>().map_or(true, |n| n > 100) => causes.push(invalid_shown(field, &go_int_or_string(v), "must not be greater than 100%")),
                Some(_) => {}
            }
        }
        Value::Number(n) if n.as_i64().is_some_and(|n| n < 0) => causes.push(invalid(field, v, "must be greater than or equal to 0")),
        _ => {}
    }
}

pub(super) fn validate_disruption_budget(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let (min, max) = (spec.get("minAvailable").filter(|v| !v.is_null()), spec.get("maxUnavailable").filter(|v| !v.is_null()));
    if min.is_some() && max.is_some() {
        // Upstream quotes the whole spec (Go's %#v); a shortened form is given (RFC 0011).
        causes.push(invalid_shown("spec", "policy.PodDisruptionBudgetSpec{...}", "minAvailable and maxUnavailable cannot be both set"));
    }
    for (field, v) in [("spec.minAvailable", min), ("spec.maxUnavailable", max)] {
        if let Some(v) = v {
            int_or_percent(field, v, &mut causes);
        }
    }
    if let Some(p) = spec.get("unhealthyPodEvictionPolicy").and_then(Value::as_str).filter(|p| !["AlwaysAllow", "IfHealthyBudget"].contains(p)) {
        causes.push(not_supported("spec.unhealthyPodEvictionPolicy", p, &["AlwaysAllow", "IfHealthyBudget"]));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::super::errors::fields;
    use super::*;
    use serde_json::json;

    #[test]
    fn a_volume_needs_modes_capacity_and_one_source() {
        let ok = json!({"spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}, "hostPath": {"path": "/tmp"}}});
        assert!(validate_volume(&ok).is_empty());
        let bad = validate_volume(&json!({"spec": {"accessModes": ["ReadWriteOncePod", "ReadWriteOnce"], "capacity": {"storage": "0"}, "hostPath": {"path": "/"}, "nfs": {"server": "s", "path": "/"}, "persistentVolumeReclaimPolicy": "Keep"}}));
        assert_eq!(fields(&bad), ["spec.accessModes", "spec.capacity[storage]", "spec.persistentVolumeReclaimPolicy", "spec.nfs"]);
        assert_eq!(bad[1].message, "Invalid value: \"0\": must be greater than zero");
        let none = validate_volume(&json!({"spec": {}}));
        assert_eq!(fields(&none), ["spec.accessModes", "spec.capacity", "spec.capacity", "spec"]);
        assert_eq!(none[2].message, "Unsupported value: core.ResourceList{}: supported values: \"storage\"");
    }

    #[test]
    fn a_claim_needs_modes_and_storage() {
        let bad = validate_claim(&json!({"spec": {"resources": {}}}));
        assert_eq!(fields(&bad), ["spec.accessModes", "spec.resources[storage]"]);
        assert_eq!(bad[0].message, "Required value: at least 1 access mode is required");
    }

    #[test]
    fn a_budget_has_one_of_its_counts_within_bounds() {
        let bad = validate_disruption_budget(&json!({"spec": {"minAvailable": "150%", "maxUnavailable": -1}}));
        assert_eq!(fields(&bad), ["spec", "spec.minAvailable", "spec.maxUnavailable"]);
        assert_eq!(bad[1].message, "Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"150%\"}: must not be greater than 100%");
        assert_eq!(bad[2].message, "Invalid value: -1: must be greater than or equal to 0");
        assert!(validate_disruption_budget(&json!({"spec": {"maxUnavailable": "10%"}})).is_empty());
    }
}
