//! The per-kind write strategies (upstream's registry strategies' `PrepareForCreate` and
//! `PrepareForUpdate`): the server-owned metadata of a new object, defaulting, what each kind
//! starts with (a namespace's finalizer and phase, a pod's Pending status, a Job's selector),
//! and what an update may change (status only through its subresource, generation only with the
//! spec).

use crate::meta::{metadata_mut, new_uid, now_rfc3339};
use crate::resources::ResourceInfo;
use serde_json::Value;

/// Sets the server-owned fields of a new object (`resourceVersion` is added when it is read back).
pub fn prepare_for_create(info: &ResourceInfo, obj: &mut Value) {
    let meta = metadata_mut(obj);
    meta.insert("uid".into(), Value::String(new_uid()));
    meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
    for f in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
        meta.remove(f);
    }
    if info.tracks_generation {
        meta.insert("generation".into(), Value::from(1));
    } else {
        meta.remove("generation");
    }
    crate::defaults::set_defaults(info, obj);
    if info.kind == "Job" && info.group == "batch" {
        crate::defaults::generate_job_selector(obj);
    }
    if info.plural == "namespaces" && info.group.is_empty() {
        // The `kubernetes` finalizer is required on create, after any the namespace asks for.
        let mut finalizers: Vec<Value> = obj.pointer("/spec/finalizers").and_then(Value::as_array).cloned().unwrap_or_default();
        if !finalizers.iter().any(|f| f == "kubernetes") {
            finalizers.push(Value::String("kubernetes".into()));
        }
        obj["spec"] = serde_json::json!({"finalizers": finalizers});
        obj["status"] = serde_json::json!({"phase": "Active"});
    } else if info.has_status && info.plural != "services" && info.plural != "pods" {
        // Status is written through the status subresource; a create starts without one.
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
    }
    crate::defaults::zero_status(info, obj);
    if info.plural == "pods" && info.group.is_empty() {
        crate::admission::default_toleration_seconds(obj);
        let status = obj.as_object_mut().expect("object").entry("status").or_insert_with(|| serde_json::json!({}));
        if let Some(s) = status.as_object_mut() {
            s.entry("phase").or_insert_with(|| Value::String("Pending".into()));
            s.entry("qosClass").or_insert_with(|| Value::String("BestEffort".into()));
        }
    }
}

/// Puts back the stored object's `fields` (absent where it has none).
fn keep_stored(new_obj: &mut serde_json::Map<String, Value>, old: &Value, fields: &[&str]) {
    for field in fields {
        match old.get(*field) {
            Some(v) => new_obj.insert((*field).into(), v.clone()),
            None => new_obj.remove(*field),
        };
    }
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    /// The main resource: status is kept from the stored object (when a status subresource exists).
    Main,
    /// The status subresource: spec is kept from the stored object.
    Status,
    /// A CertificateSigningRequest's `approval` subresource: only the status conditions change.
    Approval,
    /// A pod's `ephemeralcontainers` subresource: only `spec.ephemeralContainers` changes.
    EphemeralContainers,
}

/// The conditions upstream lets only the `approval` subresource set on a CSR.
const APPROVAL_CONDITIONS: [&str; 2] = ["Approved", "Denied"];

/// Gives each condition of `status` the update and transition times it lacks (a CSR's,
/// as upstream's CSR strategies do).
fn stamp_conditions(status: &mut Value) {
    let now = crate::meta::now_rfc3339();
    for c in status.get_mut("conditions").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(c) = c.as_object_mut() {
            for field in ["lastUpdateTime", "lastTransitionTime"] {
                if c.get(field).is_none_or(Value::is_null) {
                    c.insert(field.into(), Value::String(now.clone()));
                }
            }
        }
    }
}

/// A Service update that leaves out its cluster IPs keeps them (upstream's `patchAllocatedValues`:
/// a client that does not know its addresses must not release them), unless either side is an
/// ExternalName Service, which has none.
fn keep_cluster_ips(old: &Value, new: &mut Value) {
    let external = |v: &Value| crate::service_network::service_type(v) == "ExternalName";
    if external(old) || external(new) {
        return;
    }
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else { return };
    for field in ["clusterIP", "clusterIPs"] {
        let unset = spec.get(field).is_none_or(|v| v.is_null() || v.as_str() == Some("") || v.as_array().is_some_and(|a| a.is_empty()));
        if unset && let Some(kept) = old.pointer(&format!("/spec/{field}")) {
            spec.insert(field.into(), kept.clone());
        }
    }
}

/// Carries server-owned fields from `old` into `new` and applies the subresource rules.
pub fn prepare_for_update(info: &ResourceInfo, old: &Value, new: &mut Value, sub: Subresource) {
    crate::defaults::set_defaults(info, new);
    let old_meta = old.get("metadata").cloned().unwrap_or(Value::Null);
    {
        let meta = metadata_mut(new);
        for f in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "namespace", "name"] {
            match old_meta.get(f) {
                Some(v) => {
                    meta.insert(f.into(), v.clone());
                }
                None => {
                    meta.remove(f);
                }
            }
        }
        meta.remove("resourceVersion");
        meta.remove("selfLink");
    }
    if info.plural == "services" && info.group.is_empty() && sub == Subresource::Main {
        keep_cluster_ips(old, new);
        crate::service_network::prepare_update(old, new);
    }
    if info.plural == "pods" && info.group.is_empty() {
        crate::admission::keep_pod_priority(old, new);
        if sub != Subresource::EphemeralContainers {
            // Ephemeral containers are added through their subresource only.
            let kept = old.pointer("/spec/ephemeralContainers").cloned();
            if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
                match kept {
                    Some(k) => spec.insert("ephemeralContainers".into(), k),
                    None => spec.remove("ephemeralContainers"),
                };
            }
        }
    }
    let new_obj = new.as_object_mut().expect("object");
    match sub {
        Subresource::Main if info.has_status => match old.get("status") {
            Some(s) => {
                new_obj.insert("status".into(), s.clone());
            }
            None => {
                new_obj.remove("status");
            }
        },
        Subresource::Status => {
            match old.get("spec") {
                Some(s) => new_obj.insert("spec".into(), s.clone()),
                None => new_obj.remove("spec"),
            };
            if info.plural == "namespaces" && info.group.is_empty() {
                // Namespace phase is server-managed: a status write may add conditions only.
                if let Some(phase) = old.pointer("/status/phase").cloned() && let Some(st) = new_obj.get_mut("status").and_then(Value::as_object_mut) {
                    st.insert("phase".into(), phase);
                }
            }
            if info.plural == "certificatesigningrequests" {
                // Approving or denying is the approval subresource's: those conditions stay.
                let kept: Vec<Value> = old.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten().filter(|c| APPROVAL_CONDITIONS.iter().any(|t| c["type"] == *t)).cloned().collect();
                let status = new_obj.entry("status").or_insert_with(|| serde_json::json!({}));
                if let Some(st) = status.as_object_mut() {
                    let mut conditions: Vec<Value> = st.get("conditions").and_then(Value::as_array).into_iter().flatten().filter(|c| !APPROVAL_CONDITIONS.iter().any(|t| c["type"] == *t)).cloned().collect();
                    conditions.splice(0..0, kept);
                    st.insert("conditions".into(), Value::Array(conditions));
                }
                stamp_conditions(status);
            }
        }
        Subresource::EphemeralContainers => {
            // Everything as stored but the ephemeral containers.
            let added = new_obj.get("spec").and_then(|s| s.get("ephemeralContainers")).cloned();
            keep_stored(new_obj, old, &["spec", "status"]);
            if let (Some(spec), Some(a)) = (new_obj.get_mut("spec").and_then(Value::as_object_mut), added) {
                spec.insert("ephemeralContainers".into(), a);
            }
        }
        Subresource::Approval => {
            // Everything as stored but the status conditions.
            let conditions = new_obj.get("status").and_then(|s| s.get("conditions")).cloned();
            keep_stored(new_obj, old, &["spec", "status"]);
            let status = new_obj.entry("status").or_insert_with(|| serde_json::json!({}));
            if let (Some(st), Some(c)) = (status.as_object_mut(), conditions) {
                st.insert("conditions".into(), c);
            }
            stamp_conditions(status);
        }
        Subresource::Main => {}
    }
    crate::defaults::zero_status(info, new);
    if info.tracks_generation && sub == Subresource::Main && old.get("spec") != new.get("spec") {
        let g = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(0) + 1;
        metadata_mut(new).insert("generation".into(), Value::from(g));
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{builtin_resources, find};

    #[test]
    fn generation_moves_only_with_spec() {
        let all = builtin_resources();
        let deploy = find(&all, "apps", "v1", "deployments").unwrap();
        let mut old = serde_json::json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}});
        prepare_for_create(deploy, &mut old);
        assert_eq!(old["metadata"]["generation"], 1);
        let mut relabel = old.clone();
        relabel["metadata"]["labels"] = serde_json::json!({"a": "b"});
        prepare_for_update(deploy, &old, &mut relabel, Subresource::Main);
        assert_eq!(relabel["metadata"]["generation"], 1);
        let mut scale = old.clone();
        scale["spec"]["replicas"] = 3.into();
        prepare_for_update(deploy, &old, &mut scale, Subresource::Main);
        assert_eq!(scale["metadata"]["generation"], 2);
        assert_eq!(scale["metadata"]["uid"], old["metadata"]["uid"]);
        let mut status = old.clone();
        status["spec"]["replicas"] = 9.into();
        status["status"] = serde_json::json!({"replicas": 1});
        prepare_for_update(deploy, &old, &mut status, Subresource::Status);
        assert_eq!(status["spec"]["replicas"], 1);
        assert_eq!(status["status"]["replicas"], 1);
    }
}
