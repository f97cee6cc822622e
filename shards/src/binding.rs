//! Binding a pod to a node, as kube-scheduler does it: a Binding POSTed to
//! `pods/{name}/binding` (or to the legacy `bindings` collection, naming the pod) sets the
//! pod's `spec.nodeName`, adds the Binding's annotations and marks the pod `PodScheduled`, in one
//! compare-and-swap on the pod; a pod already bound is upstream's 409.

use crate::write::{current_from, dry_run, stored_bytes, Call, Source};
use axum::body::Body;
use axum::http::{Response, StatusCode};
use serde_json::{json, Value};
use shardplane_apimachinery::meta;
use shardplane_apimachinery::status::cause;
use shardplane_apimachinery::ApiError;
use shardplane_http::body;
use shardplane_storage::StorageError;

type Reply = Result<Response<Body>, ApiError>;

/// Upstream's checks of a Binding (`ValidatePodBinding`): a target node is named, and a target
/// kind, if any, is `Node`.
fn validate(binding: &Value) -> Vec<shardplane_apimachinery::status::StatusCause> {
    let mut causes = Vec::new();
    match binding.pointer("/target/kind").and_then(Value::as_str).unwrap_or("") {
        "" | "Node" => {}
        other => causes.push(cause("FieldValueNotSupported", "target.kind", format!("Unsupported value: {other:?}: supported values: \"Node\", \"<empty>\""))),
    }
    if binding.pointer("/target/name").and_then(Value::as_str).unwrap_or("").is_empty() {
        causes.push(cause("FieldValueRequired", "target.name", "Required value"));
    }
    causes
}

/// Sets the pod's `PodScheduled` condition to True, moving its transition time only when the
/// status changes (upstream's `UpdatePodCondition`).
fn mark_scheduled(pod: &mut Value, now: &str) {
    let status = pod.as_object_mut().expect("a pod is an object").entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let conditions = status.as_object_mut().expect("object").entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let list = conditions.as_array_mut().expect("array");
    match list.iter_mut().find(|c| c["type"] == "PodScheduled") {
        Some(c) if c["status"] == "True" => {}
        Some(c) => {
            c["status"] = json!("True");
            c["lastTransitionTime"] = json!(now);
        }
        None => list.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now})),
    }
}

/// POST of a Binding to `pods/{name}/binding` or to `bindings`.
pub async fn bind(c: Call<'_>) -> Reply {
    let Call { shard, target: t, headers, query, body: raw } = c;
    let dry = dry_run(query, "CreateOptions")?;
    let binding = body::decode_object(headers, raw)?;
    let named = meta::meta_str(&binding, "name");
    let pod_name = match t.name.as_deref() {
        Some(n) if !named.is_empty() && named != n => return Err(ApiError::bad_request("name in URL does not match name in Binding object")),
        Some(n) => n.to_owned(),
        None => named.to_owned(),
    };
    let ns = t.namespace.clone().unwrap_or_default();
    let sent_ns = meta::meta_str(&binding, "namespace");
    if !sent_ns.is_empty() && sent_ns != ns {
        return Err(ApiError::bad_request("the namespace of the provided object does not match the namespace sent on the request"));
    }
    if pod_name.is_empty() {
        return Err(ApiError::invalid("", "Binding", "", vec![cause("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")]));
    }
    let causes = validate(&binding);
    if !causes.is_empty() {
        return Err(ApiError::invalid("", "Binding", &pod_name, causes));
    }
    let node = binding.pointer("/target/name").and_then(Value::as_str).unwrap_or("").to_owned();
    let pods = shard.builtin("", "pods");
    let key = shard.owned_key(&pods, &ns, &pod_name)?;
    loop {
        let (mut pod, kv) = current_from(shard, &pods, &key, &ns, &pod_name, Source::Etcd).await?;
        // The Binding's uid and resourceVersion, when given, are preconditions on the pod.
        let uid = meta::meta_str(&pod, "uid").to_owned();
        let want_uid = meta::meta_str(&binding, "uid");
        if !want_uid.is_empty() && want_uid != uid {
            return Err(ApiError::conflict_msg("", "pods", &pod_name, &format!("Precondition failed: UID in precondition: {want_uid}, UID in object meta: {uid}")));
        }
        let want_rv = meta::meta_str(&binding, "resourceVersion");
        if !want_rv.is_empty() && want_rv != kv.mod_revision.to_string() {
            return Err(ApiError::conflict("", "pods", &pod_name));
        }
        if pod.pointer("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null()) {
            return Err(ApiError::internal(format!("pod {pod_name} is being deleted, cannot be assigned to a host")));
        }
        let bound = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        if !bound.is_empty() {
            return Err(ApiError::conflict_msg("", "pods/binding", &pod_name, &format!("pod {pod_name} is already assigned to node {bound:?}")));
        }
        pod["spec"]["nodeName"] = json!(node);
        if let Some(annotations) = binding.pointer("/metadata/annotations").and_then(Value::as_object).filter(|a| !a.is_empty()) {
            let m = meta::metadata_mut(&mut pod);
            let into = m.entry("annotations").or_insert_with(|| json!({}));
            if !into.is_object() {
                *into = json!({});
            }
            for (k, v) in annotations {
                into[k] = v.clone();
            }
        }
        mark_scheduled(&mut pod, &meta::now_rfc3339());
        if dry {
            return Ok(created());
        }
        match shard.store(&pods).update(&key, stored_bytes(&pods, &pod), kv.mod_revision).await {
            Ok(_) => return Ok(created()),
            Err(StorageError::Conflict { .. }) => continue,
            Err(e) => return Err(shardplane_http::storage_errors::status_of(e)),
        }
    }
}

/// Upstream's answer to a binding: a Success Status with code 201.
fn created() -> Response<Body> {
    body::json(StatusCode::CREATED, serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})).expect("json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_names_a_node_and_scheduling_is_marked_once() {
        assert!(validate(&json!({"target": {"kind": "Node", "name": "n1"}})).is_empty());
        let fields: Vec<String> = validate(&json!({"target": {"kind": "Pod"}})).into_iter().map(|c| c.field).collect();
        assert_eq!(fields, ["target.kind", "target.name"]);
        let mut pod = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": "t0"}]}});
        mark_scheduled(&mut pod, "t1");
        assert_eq!((&pod["status"]["conditions"][0]["status"], &pod["status"]["conditions"][0]["lastTransitionTime"]), (&json!("True"), &json!("t1")));
        mark_scheduled(&mut pod, "t2");
        assert_eq!(pod["status"]["conditions"][0]["lastTransitionTime"], "t1", "no change, no new transition time");
        let mut fresh = json!({});
        mark_scheduled(&mut fresh, "t3");
        assert_eq!(fresh["status"]["conditions"][0]["type"], "PodScheduled");
    }
}
