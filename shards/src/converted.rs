//! Writes through a version stored as another (RFC 0011): autoscaling/v1 HorizontalPodAutoscalers
//! are stored as autoscaling/v2 ones, events.k8s.io/v1 Events as core/v1 Events,
//! resource.k8s.io/v1beta1 objects as v1beta2 ones. The body is
//! decoded and its fields checked against the version the request names, converted to the
//! stored version, and written by the ordinary verbs on the stored resource; their answer is
//! converted back. A patch applies to the object as the requested version shows it. Reads need
//! nothing here: the cache serves stored bytes through [`shardplane_http::body::served`].

use crate::shard::Shard;
use crate::write::{self, current_from, Call, Reply, Source};
use axum::http::{header, HeaderMap, HeaderValue, Response};
use serde_json::Value;
use shardplane_apimachinery::conversion;
use shardplane_apimachinery::kind_rules;
use shardplane_apimachinery::meta;
use shardplane_apimachinery::patch::{self, PatchType};
use shardplane_apimachinery::request_path::Target;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::ApiError;
use shardplane_http::body;

/// How often a patch is redone when another write changed the object between its read and its
/// write (upstream retries a patch on conflict, too).
const PATCH_ATTEMPTS: usize = 8;

/// A write (`POST`, `PUT`, `PATCH`, `DELETE`) on a converted version.
pub(crate) async fn write(c: Call<'_>, method: &str) -> Reply {
    let t = c.target;
    let stored = stored_target(c.shard, t)?;
    let inner = Call { target: &stored, ..c };
    match method {
        // A delete that answers with the object answers in the requested version.
        "DELETE" if t.name.is_some() => answer(&t.info, write_stored(inner, method, c.headers, c.body).await, &[]).await,
        // The collection's selectors are the requested version's (the cache maps its field
        // labels), and what it answers is listed in that version.
        "DELETE" => write::delete_collection(c).await,
        "POST" | "PUT" => {
            let mut obj = body::decode_object(c.headers, c.body)?;
            body::check_type(&t.info, &mut obj)?;
            let warnings = write::validate_fields(&t.info, c.query, &mut obj, c.body)?;
            in_path_namespace(t, &mut obj);
            let old = if method == "PUT" { existing(c.shard, &stored, t).await? } else { None };
            validate(&t.info, &obj, old.as_ref())?;
            let obj = conversion::to_storage(&t.info, obj);
            let reply = write_stored(inner, method, &json_headers(c.headers), &serde_json::to_vec(&obj).expect("json")).await;
            answer(&t.info, reply, &warnings).await
        }
        "PATCH" => {
            let ct = c.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
            let ty = PatchType::from_content_type(ct).ok_or_else(|| ApiError::unsupported_media_type(ct))?;
            if ty == PatchType::Apply {
                // The configuration is converted as a partial object and applied to the stored
                // version (its managed fields then name that version: RFC 0011).
                let (config, _) = shardplane_apimachinery::apply::parse_config(c.body, false)?;
                let mut config = config;
                body::check_type(&t.info, &mut config)?;
                let config = conversion::partial_to_storage(&t.info, config);
                let reply = write_stored(inner, method, c.headers, &serde_json::to_vec(&config).expect("json")).await;
                return answer(&t.info, reply, &[]).await;
            }
            patch(c, &stored, ty).await
        }
        _ => Err(ApiError::method_not_allowed(&method.to_ascii_lowercase(), &t.info.group, &t.info.plural)),
    }
}

/// A namespaced object the body leaves without a namespace is in the path's (the stored
/// resource's verb refuses one that names another), as the version's own rules must see it.
fn in_path_namespace(t: &Target, obj: &mut Value) {
    if let (true, Some(ns)) = (t.info.namespaced, &t.namespace)
        && meta::meta_str(obj, "namespace").is_empty()
    {
        meta::metadata_mut(obj).insert("namespace".into(), Value::String(ns.clone()));
    }
}

/// The request's target on the stored resource.
fn stored_target(shard: &Shard, t: &Target) -> Result<Target, ApiError> {
    let (group, version) = t.info.stored_as.map(|s| s.group_version()).ok_or_else(|| ApiError::internal("not a converted version"))?;
    let info = shard.resources().iter().find(|r| r.group == group && r.version == version && r.plural == t.info.plural).cloned().ok_or_else(ApiError::path_not_found)?;
    Ok(Target { info, ..t.clone() })
}

/// The stored object a PUT replaces, as the requested version shows it (None when absent).
async fn existing(shard: &Shard, stored: &Target, t: &Target) -> Result<Option<Value>, ApiError> {
    let ns = t.namespace.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    let key = shard.owned_key(&stored.info, &ns, &name)?;
    match current_from(shard, &stored.info, &key, &ns, &name, Source::Etcd).await {
        Ok((old, _)) => Ok(Some(conversion::from_storage(&t.info, old))),
        Err(e) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// The rules only the requested version has (events.k8s.io/v1's strict event rules).
fn validate(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let causes = kind_rules::validate_version(info, obj, old);
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid(info.storage_group(), &info.kind, meta::meta_str(obj, "name"), causes)) }
}

fn json_headers(headers: &HeaderMap) -> HeaderMap {
    let mut h = headers.clone();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h
}

/// Runs the verb on the stored resource with `body`.
async fn write_stored(c: Call<'_>, method: &str, headers: &HeaderMap, body: &[u8]) -> Reply {
    let c = Call { headers, body, ..c };
    match (method, c.target.name.is_some()) {
        ("POST", false) => write::create(c).await,
        ("PUT", true) => write::update(c).await,
        ("PATCH", true) => write::patch(c).await,
        ("DELETE", true) => write::delete(c).await,
        ("DELETE", false) => write::delete_collection(c).await,
        (m, _) => Err(ApiError::method_not_allowed(&m.to_ascii_lowercase(), &c.target.info.group, &c.target.info.plural)),
    }
}

/// A JSON, merge or strategic merge patch: applied to the object as `c`'s version shows it, then
/// written over the revision it was read at (redone when another write came between).
async fn patch(c: Call<'_>, stored: &Target, ty: PatchType) -> Reply {
    let t = c.target;
    let info = &t.info;
    let ns = t.namespace.clone().unwrap_or_default();
    let name = c.name().to_owned();
    if c.body.len() > body::MAX_BODY {
        return Err(ApiError::too_large(body::MAX_BODY));
    }
    let key = c.shard.owned_key(&stored.info, &ns, &name)?;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (old, kv) = current_from(c.shard, &stored.info, &key, &ns, &name, Source::Etcd).await?;
        let old = conversion::from_storage(info, old);
        let mut new = old.clone();
        patch::patch_object(ty, &mut new, c.body)?;
        if !new.is_object() {
            return Err(ApiError::bad_request("the patch result is not an object"));
        }
        let rv_after = meta::meta_str(&new, "resourceVersion").to_owned();
        let explicit = !rv_after.is_empty() && rv_after != kv.mod_revision.to_string();
        if explicit {
            return Err(ApiError::conflict(info.storage_group(), &info.plural, &name));
        }
        body::check_type(info, &mut new)?;
        let warnings = write::validate_fields(info, c.query, &mut new, &[])?;
        validate(info, &new, Some(&old))?;
        // Written as a PUT over the revision read: a write in between is a conflict, redone.
        meta::set_resource_version(&mut new, kv.mod_revision);
        let stored_obj = conversion::to_storage(info, new);
        let reply = write_stored(Call { target: stored, ..c }, "PUT", &json_headers(c.headers), &serde_json::to_vec(&stored_obj).expect("json")).await;
        match reply {
            Err(e) if e.code == 409 && e.reason == "Conflict" && rv_after.is_empty() && attempts < PATCH_ATTEMPTS => continue,
            reply => return answer(info, reply, &warnings).await,
        }
    }
}

/// The stored resource's answer in the requested version, with the requested version's field
/// warnings.
async fn answer(info: &ResourceInfo, reply: Reply, warnings: &[String]) -> Reply {
    let resp = reply?;
    let (mut parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.map_err(|e| ApiError::internal(e.to_string()))?;
    let converted = if parts.status.is_success() && is_object_of(&bytes, &info.kind) { conversion::served_bytes(info, &bytes).into_owned() } else { bytes.to_vec() };
    parts.headers.remove(header::CONTENT_LENGTH);
    for problem in warnings {
        if let Ok(v) = HeaderValue::from_str(&format!("299 - {problem:?}")) {
            parts.headers.append(header::WARNING, v);
        }
    }
    Ok(Response::from_parts(parts, axum::body::Body::from(converted)))
}

fn is_object_of(bytes: &[u8], kind: &str) -> bool {
    serde_json::from_slice::<Value>(bytes).is_ok_and(|v| v["kind"] == kind)
}
