//! PriorityClass (scheduling.k8s.io/v1): the classes kube-apiserver creates and keeps, the
//! `system-` prefix reserved for them, the highest value a user may give, and the fields an
//! update may not change.

use crate::status::{cause, StatusCause};
use serde_json::{json, Value};

/// The most a priority class not of the system's may be worth.
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i64 = 1_000_000_000;
const SYSTEM_PREFIX: &str = "system-";

/// The system priority classes (name, value, description) kube-apiserver creates at start and
/// refuses to delete.
pub const SYSTEM_PRIORITY_CLASSES: [(&str, i64, &str); 2] = [
    ("system-node-critical", 2_000_001_000, "Used for system critical pods that must not be moved from their current node."),
    ("system-cluster-critical", 2_000_000_000, "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."),
];

/// A system priority class as kube-apiserver creates it.
pub fn system_priority_class(name: &str, value: i64, description: &str) -> Value {
    json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value, "description": description, "preemptionPolicy": "PreemptLowerPriority"})
}

/// Why `name` with `value` and `global_default` is not one of the system classes, if it is not.
fn unknown_system_class(name: &str, value: i64, global_default: bool) -> Option<String> {
    let Some((_, want, _)) = SYSTEM_PRIORITY_CLASSES.iter().find(|(n, _, _)| *n == name) else {
        return Some(format!("{name} is not a known system priority class"));
    };
    if value != *want {
        return Some(format!("value of {name} PriorityClass must be {want}"));
    }
    global_default.then(|| format!("globalDefault of {name} PriorityClass must be false"))
}

pub(super) fn validate_priority_class(obj: &Value) -> Vec<StatusCause> {
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let value = obj.get("value").and_then(Value::as_i64).unwrap_or(0);
    let global_default = obj.get("globalDefault").and_then(Value::as_bool).unwrap_or(false);
    let mut causes = Vec::new();
    if name.starts_with(SYSTEM_PREFIX) {
        if let Some(why) = unknown_system_class(name, value, global_default) {
            causes.push(cause("FieldValueForbidden", "metadata.name", format!("Forbidden: priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only. error: {why}")));
        }
    } else if value > HIGHEST_USER_DEFINABLE_PRIORITY {
        causes.push(cause("FieldValueForbidden", "value", format!("Forbidden: maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}")));
    }
    match obj.get("preemptionPolicy").and_then(Value::as_str) {
        None | Some("PreemptLowerPriority" | "Never") => {}
        Some(other) => causes.push(cause("FieldValueNotSupported", "preemptionPolicy", format!("Unsupported value: {other:?}: supported values: \"Never\", \"PreemptLowerPriority\""))),
    }
    causes
}

pub(super) fn validate_priority_class_update(old: &Value, new: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    if old.get("value") != new.get("value") {
        causes.push(cause("FieldValueForbidden", "value", "Forbidden: may not be changed in an update."));
    }
    if old.get("preemptionPolicy") != new.get("preemptionPolicy") {
        causes.push(cause("FieldValueInvalid", "preemptionPolicy", format!("Invalid value: {}: field is immutable", new.get("preemptionPolicy").map_or("null".to_owned(), |v| v.to_string()))));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_prefix_and_the_user_maximum() {
        let pc = |name: &str, value: i64| json!({"metadata": {"name": name}, "value": value});
        assert!(validate_priority_class(&pc("high", 1000)).is_empty());
        assert!(validate_priority_class(&pc("system-node-critical", 2_000_001_000)).is_empty());
        let bad = validate_priority_class(&pc("system-mine", 5));
        assert_eq!(bad[0].field, "metadata.name");
        assert!(bad[0].message.ends_with("error: system-mine is not a known system priority class"), "{}", bad[0].message);
        assert_eq!(validate_priority_class(&pc("system-cluster-critical", 7))[0].message, "Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: value of system-cluster-critical PriorityClass must be 2000000000");
        assert_eq!(validate_priority_class(&pc("huge", 1_000_000_001))[0].field, "value");
        let old = json!({"value": 1, "preemptionPolicy": "Never"});
        let fields: Vec<String> = validate_priority_class_update(&old, &json!({"value": 2, "preemptionPolicy": "PreemptLowerPriority"})).into_iter().map(|c| c.field).collect();
        assert_eq!(fields, ["value", "preemptionPolicy"]);
    }
}
