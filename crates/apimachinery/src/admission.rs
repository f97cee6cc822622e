//! The admission steps kube-apiserver runs by default that change an object (mutating admission
//! plugins), as shardplane runs them on create. Only those that need no other object are here;
//! the rest (the default ServiceAccount, quota, limit ranges) need the objects they read. The
//! validating steps that need no other object are here too ([`validate_delete`]).

use crate::resources::ResourceInfo;
use crate::ApiError;
use serde_json::{json, Value};

/// The namespaces upstream's NamespaceLifecycle admission plugin never lets go.
pub const IMMORTAL_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// What upstream refuses to delete, 403 Forbidden as upstream words it: the immortal
/// namespaces (its NamespaceLifecycle plugin) and the system priority classes (their storage).
pub fn validate_delete(info: &ResourceInfo, name: &str) -> Result<(), ApiError> {
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "namespaces") if IMMORTAL_NAMESPACES.contains(&name) => Err(ApiError::forbidden("", "namespaces", name, "this namespace may not be deleted")),
        ("scheduling.k8s.io", "priorityclasses") if crate::kind_rules::SYSTEM_PRIORITY_CLASSES.iter().any(|(n, _, _)| *n == name) => {
            Err(ApiError::forbidden(&info.group, &info.plural, name, "this is a system priority class and cannot be deleted"))
        }
        _ => Ok(()),
    }
}

/// Upstream's DefaultTolerationSeconds admission plugin (on by default): a new pod tolerates
/// `not-ready` and `unreachable` nodes for 300 s unless it says otherwise for those keys.
pub fn default_toleration_seconds(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = tolerations.as_array_mut() else { return };
    for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
        let covered = list.iter().any(|t| {
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (effect.is_empty() || effect == "NoExecute") && (t.get("key").and_then(Value::as_str) == Some(key) || (t.get("key").is_none() && t.get("operator").and_then(Value::as_str) == Some("Exists")))
        });
        if !covered {
            list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
}
