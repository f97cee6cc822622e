//! The CSI kinds of storage.k8s.io (CSIDrivers, CSINodes, CSIStorageCapacities,
//! VolumeAttachments) as upstream's storage validation words them: the driver-name rule, a
//! driver's required switches and enums, a node's drivers, a capacity's topology and class, an
//! attachment's one source, and what an update may not change. StorageClasses' rules are in
//! [`super::cluster`].

use super::errors::{duplicate, forbidden, go_label_selector, go_strings, invalid, invalid_shown, not_supported, required, scalar};
use super::fields::{check, immutable, items, label_selector, non_negative, required_name, s, too_long};
use crate::meta::{validate_dns1123_subdomain, validate_qualified_name};
use crate::quantity::Quantity;
use crate::status::{cause, StatusCause};
use serde_json::Value;

/// Sorted, as upstream's set lists them.
const FS_GROUP_POLICIES: [&str; 3] = ["File", "None", "ReadWriteOnceWithFSType"];
/// In upstream's order (not sorted).
const LIFECYCLE_MODES: [&str; 2] = ["Persistent", "Ephemeral"];
const MAX_DRIVER_NAME: usize = 63;
/// A CSINode's node ID limit (upstream allows the longer limit on every write since 1.23).
const MAX_NODE_ID: usize = 256;
const MIN_TOKEN_SECONDS: i64 = 600;
const MAX_TOKEN_SECONDS: i64 = 1 << 32;

/// Upstream's `ValidateCSIDriverName`: required, at most 63 bytes, a DNS subdomain once
/// lowercased.
fn driver_name(field: &str, name: &str, causes: &mut Vec<StatusCause>) {
    if name.is_empty() {
        causes.push(required(field));
    }
    if name.len() > MAX_DRIVER_NAME {
        causes.push(too_long(field, MAX_DRIVER_NAME));
    }
    if let Err(why) = validate_dns1123_subdomain(&name.to_lowercase()) {
        causes.push(invalid(field, &Value::from(name), &why));
    }
}

pub(super) fn validate_csi_driver(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    // Upstream's path says `attachedRequired` for the `attachRequired` field.
    for (key, field) in [("attachRequired", "attachedRequired"), ("podInfoOnMount", "podInfoOnMount"), ("storageCapacity", "storageCapacity")] {
        if spec.get(key).is_none_or(Value::is_null) {
            causes.push(required(&format!("spec.{field}")));
        }
    }
    if let Some(p) = spec.get("fsGroupPolicy").and_then(Value::as_str).filter(|p| !FS_GROUP_POLICIES.contains(p)) {
        causes.push(not_supported("spec.fsGroupPolicy", p, &FS_GROUP_POLICIES));
    }
    let mut audiences = std::collections::BTreeSet::new();
    for (i, t) in items(spec, "tokenRequests").iter().enumerate() {
        let at = format!("spec.tokenRequests[{i}]");
        let audience = s(t, "audience");
        if !audiences.insert(audience) {
            causes.push(duplicate(&format!("{at}.audience"), audience));
            continue;
        }
        match t.get("expirationSeconds").and_then(Value::as_i64) {
            Some(n) if n < MIN_TOKEN_SECONDS => causes.push(invalid(&format!("{at}.expirationSeconds"), &Value::from(n), "may not specify a duration less than 10 minutes")),
            Some(n) if n > MAX_TOKEN_SECONDS => causes.push(invalid(&format!("{at}.expirationSeconds"), &Value::from(n), "may not specify a duration larger than 2^32 seconds")),
            _ => {}
        }
    }
    for mode in items(spec, "volumeLifecycleModes").iter().map(|m| m.as_str().unwrap_or("")) {
        if !LIFECYCLE_MODES.contains(&mode) {
            causes.push(not_supported("spec.volumeLifecycleModes", mode, &LIFECYCLE_MODES));
        }
    }
    if spec.get("seLinuxMount").is_none_or(Value::is_null) {
        causes.push(required("spec.seLinuxMount"));
    }
    causes
}

/// Go's `%#v` of a `[]storage.VolumeLifecycleMode`.
fn lifecycle_modes_go(v: &Value) -> String {
    go_strings(Some(v)).replacen("[]string", "[]storage.VolumeLifecycleMode", 1)
}

pub(super) fn validate_csi_driver_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    immutable("spec.attachedRequired", "/spec/attachRequired", old, new, scalar, &mut causes);
    immutable("spec.volumeLifecycleModes", "/spec/volumeLifecycleModes", old, new, lifecycle_modes_go, &mut causes);
    causes
}

pub(super) fn validate_csi_node(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for (i, d) in items(obj.get("spec").unwrap_or(&Value::Null), "drivers").iter().enumerate() {
        let at = format!("spec.drivers[{i}]");
        let name = s(d, "name");
        driver_name(&format!("{at}.name"), name, &mut causes);
        let node_id = s(d, "nodeID");
        if node_id.is_empty() {
            causes.push(required(&format!("{at}.nodeID")));
        }
        if node_id.len() > MAX_NODE_ID {
            causes.push(invalid(&format!("{at}.nodeID"), &Value::from(node_id), &format!("must be {MAX_NODE_ID} characters or less")));
        }
        non_negative(&format!("{at}.allocatable.count"), d.pointer("/allocatable/count"), &mut causes);
        if !names.insert(name) {
            causes.push(duplicate(&format!("{at}.name"), name));
        }
        let mut keys = std::collections::BTreeSet::new();
        for key in items(d, "topologyKeys").iter().map(|k| k.as_str().unwrap_or("")) {
            if key.is_empty() {
                causes.push(required(&at));
            }
            if !keys.insert(key) {
                causes.push(duplicate(&at, key));
            }
            check(&at, key, validate_qualified_name, &mut causes);
        }
    }
    causes
}

/// A driver already on a node may not change (its allocatable count included: upstream's
/// `MutableCSINodeAllocatableCount` gate is off in 1.33).
pub(super) fn validate_csi_node_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let drivers = |v: &Value| items(v.get("spec").unwrap_or(&Value::Null), "drivers").to_vec();
    let mut causes = Vec::new();
    for was in drivers(old) {
        for is in drivers(new).iter().filter(|d| s(d, "name") == s(&was, "name")) {
            if *is != was {
                let allocatable = if is.get("allocatable").is_some_and(|a| !a.is_null()) { "(*storage.VolumeNodeResources)(...)" } else { "(*storage.VolumeNodeResources)(nil)" };
                let shown = format!("storage.CSINodeDriver{{Name:{:?}, NodeID:{:?}, TopologyKeys:{}, Allocatable:{allocatable}}}", s(is, "name"), s(is, "nodeID"), go_strings(is.get("topologyKeys")));
                causes.push(invalid_shown("spec.drivers", &shown, "field is immutable"));
            }
        }
    }
    causes
}

pub(super) fn validate_storage_capacity(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    label_selector(obj.get("nodeTopology"), "nodeTopology", &mut causes);
    check("storageClassName", s(obj, "storageClassName"), validate_dns1123_subdomain, &mut causes);
    if let Some(q) = obj.get("capacity").and_then(Value::as_str) && Quantity::parse(q).is_some_and(|q| q.nanos < 0) {
        causes.push(invalid("capacity", &Value::from(q), "must be greater than or equal to 0"));
    }
    causes
}

pub(super) fn validate_storage_capacity_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    immutable("nodeTopology", "/nodeTopology", old, new, go_label_selector, &mut causes);
    immutable("storageClassName", "/storageClassName", old, new, scalar, &mut causes);
    causes
}

pub(super) fn validate_volume_attachment(obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let attacher = s(spec, "attacher");
    if attacher.is_empty() {
        causes.push(required("spec.attacher"));
    }
    let source = spec.get("source").unwrap_or(&Value::Null);
    let (inline, pv) = (source.get("inlineVolumeSpec").filter(|v| !v.is_null()), source.get("persistentVolumeName").filter(|v| !v.is_null()));
    const ONE_SOURCE: &str = "must specify exactly one of inlineVolumeSpec and persistentVolumeName";
    match (inline, pv) {
        (None, None) => causes.push(cause("FieldValueRequired", "spec.source", format!("Required value: {ONE_SOURCE}"))),
        (Some(_), Some(_)) => causes.push(forbidden("spec.source", ONE_SOURCE)),
        (None, Some(name)) if name.as_str().unwrap_or("").is_empty() => {
            causes.push(cause("FieldValueRequired", "spec.source.persistentVolumeName", "Required value: must specify non empty persistentVolumeName"));
        }
        _ => {}
    }
    check("spec.nodeName", s(spec, "nodeName"), validate_dns1123_subdomain, &mut causes);
    for which in ["attachError", "detachError"] {
        if let Some(code) = obj.pointer(&format!("/status/{which}/errorCode")).filter(|c| c.as_i64().is_some_and(|c| c < 0)) {
            causes.push(invalid(&format!("status.{which}.errorCode"), code, "must be between 0 and 2147483647, inclusive"));
        }
    }
    // v1's own checks come after the shared ones upstream.
    if !attacher.is_empty() {
        driver_name("spec.attacher", attacher, &mut causes);
    }
    if let Some(name) = pv.and_then(Value::as_str).filter(|n| !n.is_empty()) {
        required_name("spec.source.persistentVolumeName", name, validate_dns1123_subdomain, &mut causes);
    }
    causes
}

/// An attachment's spec is read-only.
pub(super) fn validate_volume_attachment_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    if old.get("spec") != new.get("spec") {
        return vec![invalid_shown("spec", "storage.VolumeAttachmentSpec{...}", "field is immutable")];
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::super::errors::fields;
    use super::*;
    use serde_json::json;

    fn defaulted_driver(spec: Value) -> Value {
        let mut obj = json!({"metadata": {"name": "d.example.com"}, "spec": spec});
        let info = crate::resources::builtin_resources().into_iter().find(|r| r.plural == "csidrivers").expect("served");
        crate::defaults::set_defaults(&info, &mut obj);
        obj
    }

    #[test]
    fn a_defaulted_driver_is_valid_and_its_enums_and_tokens_are_checked() {
        assert!(validate_csi_driver(&defaulted_driver(json!({}))).is_empty());
        let bad = defaulted_driver(json!({"fsGroupPolicy": "Sometimes", "volumeLifecycleModes": ["Forever"],
            "tokenRequests": [{"audience": "a", "expirationSeconds": 60}, {"audience": "a"}]}));
        let causes = validate_csi_driver(&bad);
        assert_eq!(fields(&causes), ["spec.fsGroupPolicy", "spec.tokenRequests[0].expirationSeconds", "spec.tokenRequests[1].audience", "spec.volumeLifecycleModes"]);
        assert_eq!(causes[3].message, "Unsupported value: \"Forever\": supported values: \"Persistent\", \"Ephemeral\"");
        let old = defaulted_driver(json!({}));
        let new = defaulted_driver(json!({"attachRequired": false}));
        assert_eq!(validate_csi_driver_update(&old, &new)[0].message, "Invalid value: false: field is immutable");
    }

    #[test]
    fn node_drivers_are_named_unique_and_immutable() {
        let node = json!({"spec": {"drivers": [
            {"name": "Good.Driver", "nodeID": "n1", "topologyKeys": ["zone", "zone"]},
            {"name": "Good.Driver", "nodeID": "", "allocatable": {"count": -1}}]}});
        let causes = validate_csi_node(&node);
        assert_eq!(fields(&causes), ["spec.drivers[0]", "spec.drivers[1].nodeID", "spec.drivers[1].allocatable.count", "spec.drivers[1].name"]);
        let old = json!({"spec": {"drivers": [{"name": "d", "nodeID": "n1"}]}});
        let new = json!({"spec": {"drivers": [{"name": "d", "nodeID": "n2"}]}});
        assert_eq!(validate_csi_node_update(&old, &new)[0].message, "Invalid value: storage.CSINodeDriver{Name:\"d\", NodeID:\"n2\", TopologyKeys:[]string(nil), Allocatable:(*storage.VolumeNodeResources)(nil)}: field is immutable");
    }

    #[test]
    fn an_attachment_has_exactly_one_source_and_a_valid_attacher_and_node() {
        let causes = validate_volume_attachment(&json!({"spec": {"attacher": "Bad_Attacher", "nodeName": "node-1", "source": {}}}));
        assert_eq!(fields(&causes), ["spec.source", "spec.attacher"]);
        let both = json!({"spec": {"attacher": "csi.example.com", "nodeName": "n", "source": {"persistentVolumeName": "pv", "inlineVolumeSpec": {}}}});
        assert_eq!(validate_volume_attachment(&both)[0].message, "Forbidden: must specify exactly one of inlineVolumeSpec and persistentVolumeName");
        let good = json!({"spec": {"attacher": "csi.example.com", "nodeName": "n", "source": {"persistentVolumeName": "pv"}}});
        assert!(validate_volume_attachment(&good).is_empty());
    }

    #[test]
    fn a_capacity_is_not_negative_and_its_topology_and_class_are_fixed() {
        let causes = validate_storage_capacity(&json!({"storageClassName": "Fast", "capacity": "-1Gi", "nodeTopology": {"matchExpressions": [{"key": "z", "operator": "In"}]}}));
        assert_eq!(fields(&causes), ["nodeTopology.matchExpressions[0].values", "storageClassName", "capacity"]);
        let old = json!({"storageClassName": "fast"});
        assert_eq!(validate_storage_capacity_update(&old, &json!({"storageClassName": "slow"}))[0].message, "Invalid value: \"slow\": field is immutable");
    }
}
