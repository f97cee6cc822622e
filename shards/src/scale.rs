//! The `scale` subresource of deployments, replica sets, stateful sets, replication controllers
//! and every custom resource whose CRD declares one: an `autoscaling/v1` Scale read from the
//! object's replica paths (a CRD's `specReplicasPath`, `statusReplicasPath`,
//! `labelSelectorPath`; a workload's `spec.replicas`, `status.replicas` and `spec.selector`), and
//! written back to its spec replicas path by PUT or PATCH (merge, JSON or strategic patches of
//! the Scale), as upstream's scale subresource does.

use shardplane_http::body;
use crate::write::{current_from, dry_run, stored_bytes, Source};
use crate::shard::Shard;
use axum::body::Body;
use axum::http::{Response, StatusCode};
use serde_json::{json, Value};
use shardplane_apimachinery::crd::{ScalePaths, ScaleSelector};
use shardplane_apimachinery::meta;
use shardplane_apimachinery::strategy::{self, Subresource};
use shardplane_apimachinery::patch::{self, PatchType};
use shardplane_apimachinery::request_path::Target;
use shardplane_apimachinery::status::cause;
use shardplane_apimachinery::ApiError;
use shardplane_storage::StorageError;

type Reply = Result<Response<Body>, ApiError>;

/// The path's segments: `.spec.replicas` → `spec`, `replicas`.
fn segments(path: &str) -> impl Iterator<Item = &str> {
    path.trim_start_matches('.').split('.').filter(|s| !s.is_empty())
}

fn value_at<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    segments(path).try_fold(obj, |at, s| at.get(s))
}

/// Sets `path` in `obj`, making the objects on the way.
fn set_at(obj: &mut Value, path: &str, v: Value) {
    let parts: Vec<&str> = segments(path).collect();
    let Some((last, parents)) = parts.split_last() else { return };
    let mut at = obj;
    for p in parents {
        if !at.get(*p).is_some_and(Value::is_object) {
            at[*p] = json!({});
        }
        at = &mut at[*p];
    }
    at[*last] = v;
}

/// The object's Scale.
fn scale_of(obj: &Value, paths: &ScalePaths) -> Value {
    let m = |f: &str| obj.pointer(&format!("/metadata/{f}")).cloned();
    let mut metadata = json!({"name": m("name"), "uid": m("uid"), "resourceVersion": m("resourceVersion"), "creationTimestamp": m("creationTimestamp")});
    if let Some(ns) = m("namespace") {
        metadata["namespace"] = ns;
    }
    let mut scale = json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": metadata, "spec": {}, "status": {"replicas": value_at(obj, &paths.status_replicas).and_then(Value::as_i64).unwrap_or(0)}});
    if let Some(r) = value_at(obj, &paths.spec_replicas).and_then(Value::as_i64).filter(|r| *r != 0) {
        scale["spec"]["replicas"] = json!(r);
    }
    let selector = match &paths.label_selector {
        ScaleSelector::None => None,
        ScaleSelector::At(p) => value_at(obj, p).and_then(Value::as_str).map(str::to_owned),
        ScaleSelector::LabelSelector => obj.pointer("/spec/selector").map(shardplane_apimachinery::selectors::label_selector_text),
        ScaleSelector::Labels => obj.pointer("/spec/selector").map(shardplane_apimachinery::selectors::labels_text),
    };
    if let Some(selector) = selector {
        scale["status"]["selector"] = json!(selector);
    }
    scale
}

fn paths(t: &Target) -> Result<ScalePaths, ApiError> {
    t.info.scale().ok_or_else(ApiError::path_not_found)
}

fn respond(scale: &Value) -> Reply {
    Ok(body::json(StatusCode::OK, serde_json::to_vec(scale).expect("json")))
}

/// GET of `.../{name}/scale`.
pub async fn get(shard: &Shard, t: &Target, name: &str) -> Reply {
    let paths = paths(t)?;
    let ns = t.namespace.clone().unwrap_or_default();
    let key = shard.owned_key(&t.info, &ns, name)?;
    // A quorum read, as upstream's GET without a resourceVersion: the cache may not have seen a
    // write already acknowledged.
    let (mut obj, _) = current_from(shard, &t.info, &key, &ns, name, Source::Etcd).await?;
    shardplane_apimachinery::structural::default_custom(&t.info, &mut obj);
    respond(&scale_of(&obj, &paths))
}

/// PUT (`patch` None) or PATCH of `.../{name}/scale`: the Scale's `spec.replicas` goes to the
/// object's spec replicas path; a resourceVersion in it is a precondition.
pub async fn update(c: crate::write::Call<'_>, patch: Option<PatchType>) -> Reply {
    let crate::write::Call { shard, target: t, headers, query, body: raw } = c;
    let name = c.name();
    let paths = paths(t)?;
    let info = &t.info;
    let dry = dry_run(query, if patch.is_some() { "PatchOptions" } else { "UpdateOptions" })?;
    let ns = t.namespace.clone().unwrap_or_default();
    let key = shard.owned_key(info, &ns, name)?;
    let sent = match patch {
        None => Some(body::decode_object(headers, raw)?),
        Some(_) => None,
    };
    loop {
        let (old, kv) = current_from(shard, info, &key, &ns, name, Source::Etcd).await?;
        let wanted = match (&sent, patch) {
            (Some(s), _) => s.clone(),
            (None, Some(ty)) => {
                let mut s = scale_of(&old, &paths);
                patch::patch_object(ty, &mut s, raw)?;
                s
            }
            (None, None) => unreachable!("a PUT has a body"),
        };
        let precondition = wanted.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("");
        if !precondition.is_empty() && precondition != kv.mod_revision.to_string() {
            return Err(ApiError::conflict(&info.group, &info.plural, name));
        }
        let replicas = match wanted.pointer("/spec/replicas") {
            None | Some(Value::Null) => 0,
            Some(v) => v.as_i64().filter(|r| *r >= 0 && *r <= i32::MAX as i64).ok_or_else(|| {
                ApiError::invalid("autoscaling", "Scale", name, vec![cause("FieldValueInvalid", "spec.replicas", format!("Invalid value: {v}: must be greater than or equal to 0"))])
            })?,
        };
        let mut new = old.clone();
        set_at(&mut new, &paths.spec_replicas, json!(replicas));
        // The object must still meet its schema (a maximum on the replicas, say).
        let causes = shardplane_apimachinery::structural::admit_custom(info, &mut new);
        if !causes.is_empty() {
            return Err(ApiError::invalid(&info.group, &info.kind, name, causes));
        }
        strategy::prepare_for_update(info, &old, &mut new, Subresource::Main);
        if dry {
            return respond(&scale_of(&new, &paths));
        }
        match shard.store(info).update(&key, stored_bytes(info, &new), kv.mod_revision).await {
            Ok(rev) => {
                meta::set_resource_version(&mut new, rev);
                return respond(&scale_of(&new, &paths));
            }
            Err(StorageError::Conflict { .. }) if precondition.is_empty() => continue,
            Err(StorageError::Conflict { .. }) => return Err(ApiError::conflict(&info.group, &info.plural, name)),
            Err(e) => return Err(shardplane_http::storage_errors::status_of(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_read_and_written_at_the_crd_paths() {
        let paths = ScalePaths { spec_replicas: ".spec.replicas".into(), status_replicas: ".status.replicas".into(), label_selector: ScaleSelector::At(".status.selector".into()) };
        let mut o = json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"replicas": 3}, "status": {"replicas": 2, "selector": "app=a"}});
        let s = scale_of(&o, &paths);
        assert_eq!((s["spec"]["replicas"].as_i64(), s["status"]["replicas"].as_i64(), s["status"]["selector"].as_str()), (Some(3), Some(2), Some("app=a")));
        let mut empty = json!({});
        set_at(&mut empty, ".spec.replicas", json!(5));
        assert_eq!(empty, json!({"spec": {"replicas": 5}}));
        set_at(&mut o, ".spec.replicas", json!(0));
        assert!(scale_of(&o, &paths)["spec"].get("replicas").is_none(), "0 is omitted, as autoscaling/v1 does");
    }
}
