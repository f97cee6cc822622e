//! The write verbs on one resource: create, update, patch, delete, deletecollection (and
//! server-side apply's shared steps). Writes go to etcd by compare-and-swap and come back to the
//! cache through the watch; reads are `read.rs`.

use shardplane_http::body;
use shardplane_http::protocol::GENERATED_NAME_HEADER;
pub use shardplane_http::query::form_value;
use shardplane_http::query::form_values;
use crate::render;
use shardplane_http::storage_errors::status_of as storage_err;
use shardplane_apimachinery::request_path::Target;
use crate::shard::Shard;
use axum::body::Body;
use axum::http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Value};
use shardplane_apimachinery::encode;
use shardplane_apimachinery::delete_options;
use shardplane_apimachinery::list_options::ListOptions;
use shardplane_apimachinery::meta;
use shardplane_apimachinery::strategy::{self, Subresource};
use shardplane_apimachinery::field_validation::{drop_unknown_fields, duplicate_fields, FieldValidation};
use shardplane_apimachinery::patch::{self, PatchType};
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::status::cause;
use shardplane_apimachinery::ApiError;
use shardplane_storage::{Kv, StorageError};
use crate::read::{cache_err, filter, WAIT};

pub(crate) type Reply = Result<Response<Body>, ApiError>;

/// One write's request as the verbs take it: the shard, the resource path's target, and the
/// request's headers, raw query and body.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    pub shard: &'a Shard,
    pub target: &'a Target,
    pub headers: &'a HeaderMap,
    pub query: &'a str,
    pub body: &'a [u8],
}

impl Call<'_> {
    /// The object's name from the path ("" for a collection).
    pub fn name(&self) -> &str {
        self.target.name.as_deref().unwrap_or("")
    }
}


/// Whether the query asks for a dry run. `options` names what upstream decodes the query as
/// (`CreateOptions`, `UpdateOptions`, `PatchOptions`, `DeleteOptions`): a value other than `All`
/// is a 422 naming it, as upstream's options validation answers.
pub(crate) fn dry_run(query: &str, options: &str) -> Result<bool, ApiError> {
    dry_run_values(&form_values(query, "dryRun"), options)
}

/// Whether `values` (an options object's `dryRun` list) ask for a dry run; 422 for any value
/// but `All` (an empty value asks for none).
pub(crate) fn dry_run_values(values: &[String], options: &str) -> Result<bool, ApiError> {
    let asked: Vec<&String> = values.iter().filter(|v| !v.is_empty()).collect();
    if asked.iter().all(|v| *v == "All") {
        return Ok(!asked.is_empty());
    }
    // Go's %#v of the []string, as upstream's NotSupported error prints it.
    let shown = format!("[]string{{{}}}", values.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", "));
    Err(ApiError::invalid("meta.k8s.io", options, "", vec![shardplane_apimachinery::status::cause("FieldValueNotSupported", "dryRun", &format!("Unsupported value: {shown}: supported values: \"All\""))]))
}

/// Where a write reads the object it changes from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// etcd: authoritative, one more round trip.
    Etcd,
    /// The watch cache when it holds the object (else etcd). As upstream's GuaranteedUpdate with
    /// a cached suggestion: the write's compare-and-swap on the object's revision proves the
    /// state was current; a lost CAS, and any error decided on cached state, is redone from etcd.
    CacheFirst,
}

/// The object a write changes, with its revision (the write's CAS compares on it).
pub(crate) async fn current_from(shard: &Shard, info: &ResourceInfo, key: &[u8], ns: &str, name: &str, source: Source) -> Result<(Value, Kv), ApiError> {
    if source == Source::CacheFirst && let Some(o) = shard.served(info)?.cache.get(ns, name) {
        let mut v: Value = serde_json::from_slice(&o.bytes).map_err(|e| ApiError::internal(format!("cached object is not JSON: {e}")))?;
        as_requested(info, &mut v);
        return Ok((v, Kv { key: key.to_vec(), value: o.bytes.clone(), mod_revision: o.rv, create_revision: 0 }));
    }
    let (kv, _) = shard.store(info).get(key).await.map_err(storage_err)?;
    let kv = kv.ok_or_else(|| ApiError::not_found(&info.group, &info.plural, name))?;
    let mut v: Value = serde_json::from_slice(&kv.value).map_err(|e| ApiError::internal(format!("stored object is not JSON: {e}")))?;
    meta::set_resource_version(&mut v, kv.mod_revision);
    as_requested(info, &mut v);
    Ok((v, kv))
}

/// A custom object read from storage, in the version the request names (its versions share one
/// schema: conversion `None`).
fn as_requested(info: &ResourceInfo, v: &mut Value) {
    if info.custom.is_some() {
        v["apiVersion"] = Value::String(info.api_version());
    }
}

/// The bytes to store: without a resourceVersion, and a custom object in its storage version.
pub(crate) fn stored_bytes(info: &ResourceInfo, obj: &Value) -> Vec<u8> {
    let mut o = obj.clone();
    if let Some(c) = &info.custom {
        o["apiVersion"] = Value::String(format!("{}/{}", info.group, c.storage_version));
    }
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    encode::object_bytes(&o)
}

fn respond(code: StatusCode, mut obj: Value, rv: Option<u64>) -> Reply {
    respond_warning(code, &mut obj, rv, &[])
}

/// The object response, with a `Warning` header per unknown field dropped (fieldValidation=Warn).
fn respond_warning(code: StatusCode, obj: &mut Value, rv: Option<u64>, unknown: &[String]) -> Reply {
    if let Some(rv) = rv {
        meta::set_resource_version(obj, rv);
    }
    let mut r = body::json(code, encode::object_bytes(obj));
    for problem in unknown {
        let text = format!("299 - {problem:?}");
        if let Ok(v) = axum::http::HeaderValue::from_str(&text) {
            r.headers_mut().append(axum::http::header::WARNING, v);
        }
    }
    Ok(r)
}

/// Applies `fieldValidation` (default Warn): unknown fields are dropped, as decoding into the
/// typed object drops them upstream; Strict refuses them. Then a custom resource's schema
/// defaults are filled in and its value rules checked (422). Returns the fields to warn about.
pub(crate) fn validate_fields(info: &ResourceInfo, query: &str, obj: &mut Value, raw: &[u8]) -> Result<Vec<String>, ApiError> {
    let mode = FieldValidation::parse(form_value(query, "fieldValidation").as_deref())?;
    // Duplicate keys exist only in JSON bytes (protobuf bodies start with "k8s\0").
    let json = raw.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let duplicates = if json && mode != FieldValidation::Ignore { duplicate_fields(raw) } else { vec![] };
    let unknown = drop_unknown_fields(info, obj, mode, &duplicates)?;
    // A custom resource's defaults and value rules apply after pruning, as upstream.
    let causes = shardplane_apimachinery::structural::admit_custom(info, obj);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&info.group, &info.kind, meta::meta_str(obj, "name"), causes));
    }
    Ok(unknown)
}

/// POST to a collection.
pub async fn create(c: Call<'_>) -> Reply {
    let Call { shard, target: t, headers, query, body: raw } = c;
    let info = &t.info;
    let mut obj = body::decode_object(headers, raw)?;
    body::check_type(info, &mut obj)?;
    let unknown = validate_fields(info, query, &mut obj, raw)?;
    insert(shard, t, headers, query, obj, &unknown).await
}

/// Creates `obj` (decoded, typed and its fields validated; `unknown` are the warnings to send):
/// namespace and name rules, admission, then a create-if-absent in etcd.
pub(crate) async fn insert(shard: &Shard, t: &Target, headers: &HeaderMap, query: &str, mut obj: Value, unknown: &[String]) -> Reply {
    let info = &t.info;
    let dry = dry_run(query, "CreateOptions")?;
    let path_ns = t.namespace.clone().unwrap_or_default();
    if info.namespaced {
        let body_ns = meta::meta_str(&obj, "namespace").to_owned();
        if !body_ns.is_empty() && body_ns != path_ns {
            return Err(ApiError::bad_request("the namespace of the provided object does not match the namespace sent on the request"));
        }
        if path_ns.is_empty() {
            return Err(ApiError::bad_request("the server could not find the requested resource: a namespace is required"));
        }
        meta::metadata_mut(&mut obj).insert("namespace".into(), Value::String(path_ns.clone()));
    } else {
        meta::metadata_mut(&mut obj).remove("namespace");
    }
    if meta::meta_str(&obj, "name").is_empty() {
        let prefix = meta::meta_str(&obj, "generateName").to_owned();
        if !prefix.is_empty() {
            // A router picked the name already (it needs it to find the owner).
            let picked = headers.get(GENERATED_NAME_HEADER).and_then(|v| v.to_str().ok()).filter(|n| n.starts_with(&prefix)).map(str::to_owned);
            meta::metadata_mut(&mut obj).insert("name".into(), Value::String(picked.unwrap_or_else(|| meta::generate_name(&prefix))));
        }
    }
    let name = meta::meta_str(&obj, "name").to_owned();
    strategy::prepare_for_create(info, &mut obj);
    // Checked as upstream checks it: after defaulting (RFC 0011), so that a field a default
    // fills is never reported missing; and before the name picks an owner, since an invalid
    // name (a generated one included) must be a 422 rather than a key to route.
    let causes = meta::validate_object(info, &obj);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&info.group, &info.kind, &name, causes));
    }
    let key = shard.owned_key(info, &path_ns, &name)?;
    // The namespace must exist and not be terminating (RFC 0017).
    let namespace = if info.namespaced { crate::namespace_admission::admit_create(shard, info, &path_ns, &name).await? } else { None };
    crate::crds::refuse_create_if_terminating(shard, info)?;
    crate::crds::admit(shard, info, &mut obj, Subresource::Main).await;
    crate::admission::admit_create(shard, info, &mut obj).await?;
    // A Service's addresses, taken in the create's own transaction (RFC 0014).
    let addresses = crate::service_addresses::plan(shard, info, None, &mut obj).await?;
    if dry {
        crate::transaction::check_dry_run(shard, info, None, &obj, &addresses).await?;
        return respond_warning(StatusCode::CREATED, &mut obj, None, unknown);
    }
    // Written with its addresses and its quotas' usage (RFC 0014).
    match crate::transaction::create(shard, info, &key, &mut obj, addresses, namespace).await? {
        Ok(rev) => {
            if info.group.is_empty() && info.plural == "namespaces"
                && let Err(e) = crate::service_accounts::ensure_default(shard, &name).await
            {
                // The namespace stands; its account is the controller's job upstream, which
                // retries: here the pod's admission reads it a few times and then says why.
                tracing::warn!(namespace = %name, error = %e, "default service account not created");
            }
            respond_warning(StatusCode::CREATED, &mut obj, Some(rev), unknown)
        }
        Err(StorageError::AlreadyExists) => Err(ApiError::already_exists(&info.group, &info.plural, &name)),
        Err(e) => Err(storage_err(e)),
    }
}

pub(crate) fn subresource(t: &Target) -> Result<Subresource, ApiError> {
    match t.subresource.as_deref() {
        None => Ok(Subresource::Main),
        Some("status") if t.info.has_status => Ok(Subresource::Status),
        Some("finalize") if t.info.plural == "namespaces" && t.info.group.is_empty() => Ok(Subresource::Main),
        Some("approval") if t.info.plural == "certificatesigningrequests" => Ok(Subresource::Approval),
        Some("ephemeralcontainers") if t.info.plural == "pods" && t.info.group.is_empty() => Ok(Subresource::EphemeralContainers),
        Some(_) => Err(ApiError::path_not_found()),
    }
}

/// The stored object an update replaces: its key, its entry as read, and that entry decoded.
pub(crate) struct Stored<'a> {
    pub key: &'a [u8],
    pub kv: &'a Kv,
    pub old: &'a Value,
}

/// Writes `new` over the `stored` entry (CAS), deleting instead when a finalized object lost its
/// last finalizer. Returns the response or `None` when the CAS lost and the caller may retry.
pub(crate) async fn write_over(shard: &Shard, info: &ResourceInfo, stored: Stored<'_>, mut new: Value, dry: bool, unknown: &[String]) -> Result<Option<Response<Body>>, ApiError> {
    let Stored { key, kv, old } = stored;
    let name = meta::meta_str(&new, "name").to_owned();
    let mut causes = meta::validate_object(info, &new);
    causes.extend(shardplane_apimachinery::kind_rules::validate_update(info, old, &new));
    if !causes.is_empty() {
        return Err(ApiError::invalid(&info.group, &info.kind, &name, causes));
    }
    let finished = new.pointer("/metadata/deletionTimestamp").is_some() && !meta::has_finalizers(&new) && !(info.plural == "namespaces" && new.pointer("/spec/finalizers").and_then(Value::as_array).is_some_and(|a| !a.is_empty()));
    // A Service's addresses taken and given back in the update's own transaction (RFC 0014).
    let addresses = if finished { Default::default() } else { crate::service_addresses::plan(shard, info, Some(old), &mut new).await? };
    if dry {
        crate::transaction::check_dry_run(shard, info, Some(old), &new, &addresses).await?;
        return respond_warning(StatusCode::OK, &mut new, Some(kv.mod_revision), unknown).map(Some);
    }
    let result = if finished { crate::transaction::remove(shard, info, key, kv, old).await } else { crate::transaction::update(shard, info, key, kv, old, &mut new, addresses).await? };
    match result {
        Ok(rev) => respond_warning(StatusCode::OK, &mut new, Some(rev), unknown).map(Some),
        Err(StorageError::Conflict { .. }) => Ok(None),
        Err(e) => Err(storage_err(e)),
    }
}

/// A write first tried on the cached object, then, if it failed for any reason, from etcd (a
/// dry run, which proves nothing by a CAS, reads etcd only).
async fn cache_first<'a, F, Fut>(query: &str, options: &str, write: F) -> Reply
where
    F: Fn(Source) -> Fut,
    Fut: std::future::Future<Output = Reply> + 'a,
{
    if dry_run(query, options)? {
        return write(Source::Etcd).await;
    }
    match write(Source::CacheFirst).await {
        Err(_) => write(Source::Etcd).await,
        ok => ok,
    }
}

/// PUT of an object (or its status / finalize subresource).
pub async fn update(c: Call<'_>) -> Reply {
    cache_first(c.query, "UpdateOptions", |source| update_from(c, source)).await
}

async fn update_from(c: Call<'_>, mut source: Source) -> Reply {
    let Call { shard, target: t, headers, query, body: raw } = c;
    let name = c.name();
    let info = &t.info;
    let sub = subresource(t)?;
    let dry = dry_run(query, "UpdateOptions")?;
    let mut obj = body::decode_object(headers, raw)?;
    body::check_type(info, &mut obj)?;
    let unknown = validate_fields(info, query, &mut obj, raw)?;
    let body_name = meta::meta_str(&obj, "name").to_owned();
    if body_name != name {
        return Err(ApiError::bad_request(format!("the name of the object ({body_name}) does not match the name on the URL ({name})")));
    }
    let ns = t.namespace.clone().unwrap_or_default();
    if info.namespaced {
        let body_ns = meta::meta_str(&obj, "namespace");
        if !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request("the namespace of the provided object does not match the namespace sent on the request"));
        }
        meta::metadata_mut(&mut obj).insert("namespace".into(), Value::String(ns.clone()));
    }
    let key = shard.owned_key(info, &ns, name)?;
    let precondition = meta::meta_str(&obj, "resourceVersion").to_owned();
    loop {
        let (old, kv) = match current_from(shard, info, &key, &ns, name, source).await {
            Ok(c) => c,
            Err(e) if e.code == 404 && info.allow_create_on_update && sub == Subresource::Main && t.subresource.is_none() => {
                return create(Call { target: &Target { name: None, ..t.clone() }, ..c }).await;
            }
            Err(e) => return Err(e),
        };
        if !precondition.is_empty() && precondition != kv.mod_revision.to_string() {
            return Err(ApiError::conflict(&info.group, &info.plural, name));
        }
        let mut new = obj.clone();
        if t.subresource.as_deref() == Some("finalize") {
            // finalize may change spec.finalizers only.
            let fin = new.pointer("/spec/finalizers").cloned();
            new = old.clone();
            new["spec"]["finalizers"] = fin.unwrap_or(json!([]));
        }
        strategy::prepare_for_update(info, &old, &mut new, sub);
        crate::crds::admit(shard, info, &mut new, sub).await;
        if sub == Subresource::Main {
            crate::admission::admit_update(shard, info, &mut new).await?;
        }
        if let Some(r) = write_over(shard, info, Stored { key: &key, kv: &kv, old: &old }, new, dry, &unknown).await? {
            return Ok(r);
        }
        if !precondition.is_empty() {
            return Err(ApiError::conflict(&info.group, &info.plural, name));
        }
        source = Source::Etcd;
    }
}

/// PATCH of an object or its status.
pub async fn patch(c: Call<'_>) -> Reply {
    cache_first(c.query, "PatchOptions", |source| patch_from(c, source)).await
}

async fn patch_from(c: Call<'_>, mut source: Source) -> Reply {
    let Call { shard, target: t, headers, query, body: raw } = c;
    let name = c.name();
    let info = &t.info;
    let sub = subresource(t)?;
    let dry = dry_run(query, "PatchOptions")?;
    let ct = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let ty = PatchType::from_content_type(ct).ok_or_else(|| ApiError::unsupported_media_type(ct))?;
    if raw.len() > body::MAX_BODY {
        return Err(ApiError::too_large(body::MAX_BODY));
    }
    if ty == PatchType::Apply {
        if ct.starts_with("application/apply-patch+cbor") {
            return Err(ApiError::unsupported_media_type(ct));
        }
        return crate::apply::apply(c, source).await;
    }
    let ns = t.namespace.clone().unwrap_or_default();
    let key = shard.owned_key(info, &ns, name)?;
    loop {
        let (old, kv) = current_from(shard, info, &key, &ns, name, source).await?;
        let mut new = old.clone();
        patch::patch_object(ty, &mut new, raw)?;
        if !new.is_object() {
            return Err(ApiError::bad_request("the patch result is not an object"));
        }
        // A resourceVersion in the patch is a precondition.
        let rv_after = meta::meta_str(&new, "resourceVersion");
        let explicit = !rv_after.is_empty() && rv_after != kv.mod_revision.to_string();
        if explicit {
            return Err(ApiError::conflict(&info.group, &info.plural, name));
        }
        if meta::meta_str(&new, "name") != name || (info.namespaced && meta::meta_str(&new, "namespace") != ns) {
            return Err(ApiError::invalid(&info.group, &info.kind, name, vec![cause("FieldValueInvalid", "metadata.name", "Invalid value: the name and namespace of an object cannot be changed by a patch")]));
        }
        body::check_type(info, &mut new)?;
        let unknown = validate_fields(info, query, &mut new, &[])?;
        strategy::prepare_for_update(info, &old, &mut new, sub);
        crate::crds::admit(shard, info, &mut new, sub).await;
        if sub == Subresource::Main {
            crate::admission::admit_update(shard, info, &mut new).await?;
        }
        if let Some(r) = write_over(shard, info, Stored { key: &key, kv: &kv, old: &old }, new, dry, &unknown).await? {
            return Ok(r);
        }
        source = Source::Etcd;
    }
}

/// What a DELETE with `options` does to the stored `old`.
pub(crate) enum Deletion {
    /// The object goes now.
    Remove,
    /// It is marked for deletion already and the options change nothing: answered as it is.
    Unchanged,
    /// It is marked for deletion (this object written): its finalizers, the namespace
    /// controller or its kubelet finish it.
    Mark(Value),
}

/// Decides a DELETE of `old` (upstream's graceful deletion and finalizer rules): a namespace,
/// a CRD, an object with finalizers (those it has, or the garbage collector's the options ask
/// for) and a pod on a node (unless the grace period is 0) are marked; anything else goes.
pub(crate) fn deletion(info: &ResourceInfo, old: &Value, parsed: &delete_options::DeleteOptions) -> Deletion {
    let grace = parsed.grace_period_seconds;
    let is_namespace = info.plural == "namespaces" && info.group.is_empty();
    let graceful_pod = info.plural == "pods" && info.group.is_empty() && old.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty()) && grace != Some(0);
    let is_crd = shardplane_apimachinery::kind_rules::is_crd(info);
    // The garbage collector's finalizers the options ask for (RFC 0014).
    let existing = meta::finalizers(old);
    let gc_finalizers = delete_options::finalizers_for_deletion(parsed, &existing);
    let finalized_later = gc_finalizers.as_ref().map_or(!existing.is_empty(), |f| !f.is_empty());
    if !(is_namespace || is_crd || finalized_later || graceful_pod) {
        return Deletion::Remove;
    }
    let marked = old.pointer("/metadata/deletionTimestamp").is_some();
    if marked && gc_finalizers.is_none() {
        return Deletion::Unchanged;
    }
    let mut new = old.clone();
    let m = meta::metadata_mut(&mut new);
    if let Some(f) = gc_finalizers {
        if f.is_empty() {
            m.remove("finalizers");
        } else {
            m.insert("finalizers".into(), json!(f));
        }
    }
    if !marked {
        m.insert("deletionTimestamp".into(), Value::String(meta::now_rfc3339()));
        m.insert("deletionGracePeriodSeconds".into(), json!(if graceful_pod { grace.unwrap_or(30) } else { 0 }));
    }
    if is_namespace {
        new["status"]["phase"] = "Terminating".into();
    }
    if !marked {
        crate::crds::mark_deleting(info, &mut new);
    }
    Deletion::Mark(new)
}

/// DELETE of one object, with DeleteOptions preconditions, finalizers and namespace lifecycle.
pub async fn delete(c: Call<'_>) -> Reply {
    cache_first(c.query, "DeleteOptions", |source| delete_from(c, source)).await
}

async fn delete_from(c: Call<'_>, mut source: Source) -> Reply {
    let Call { shard, target: t, headers, query, body: raw } = c;
    let name = c.name();
    let info = &t.info;
    if t.subresource.is_some() {
        return Err(ApiError::method_not_allowed("delete", &info.group, &info.plural));
    }
    let opts: Value = if raw.iter().all(u8::is_ascii_whitespace) { json!({}) } else { body::decode_object(headers, raw)? };
    // The query's dryRun, when given, takes the place of the body's (upstream decodes the query
    // over the body's DeleteOptions).
    let mut asked = form_values(query, "dryRun");
    if asked.is_empty() {
        asked = opts.get("dryRun").and_then(Value::as_array).map(|a| a.iter().map(|v| v.as_str().unwrap_or_default().to_owned()).collect()).unwrap_or_default();
    }
    let dry = dry_run_values(&asked, "DeleteOptions")?;
    if dry {
        // Nothing proves a dry run's cached state current.
        source = Source::Etcd;
    }
    // Typed as upstream decodes DeleteOptions: a field of the wrong type or range is a 400.
    let (grace_q, policy_q, orphan_q) = (form_value(query, "gracePeriodSeconds"), form_value(query, "propagationPolicy"), form_value(query, "orphanDependents"));
    let parsed = delete_options::parse(&opts, delete_options::QueryOptions { grace_period_seconds: grace_q.as_deref(), propagation_policy: policy_q.as_deref(), orphan_dependents: orphan_q.as_deref() })?;
    shardplane_apimachinery::admission::validate_delete(info, name)?;
    let ns = t.namespace.clone().unwrap_or_default();
    let key = shard.owned_key(info, &ns, name)?;
    loop {
        let (old, kv) = current_from(shard, info, &key, &ns, name, source).await?;
        source = Source::Etcd;
        let uid = meta::meta_str(&old, "uid").to_owned();
        if let Some(p) = opts.pointer("/preconditions/uid").and_then(Value::as_str) && p != uid {
            return Err(ApiError::conflict_msg(&info.group, &info.plural, name, &format!("Precondition failed: UID in precondition: {p}, UID in object meta: {uid}")));
        }
        if let Some(p) = opts.pointer("/preconditions/resourceVersion").and_then(Value::as_str) && p != kv.mod_revision.to_string() {
            return Err(ApiError::conflict_msg(&info.group, &info.plural, name, &format!("Precondition failed: ResourceVersion in precondition: {p}, ResourceVersion in object meta: {}", kv.mod_revision)));
        }
        let new = match deletion(info, &old, &parsed) {
            Deletion::Remove => None,
            Deletion::Unchanged => return respond(StatusCode::OK, old, None),
            Deletion::Mark(new) => Some(new),
        };
        if let Some(new) = new {
            // Marked for deletion; finalizers (or the namespace controller, or a kubelet) finish it.
            if dry {
                return respond(StatusCode::OK, new, None);
            }
            match shard.store(info).update(&key, stored_bytes(info, &new), kv.mod_revision).await {
                // Upstream answers 200 for an object only marked for deletion (202 only with the
                // deprecated orphanDependents=false).
                Ok(rev) => {
                    let orphan_false = opts.get("orphanDependents") == Some(&Value::Bool(false));
                    return respond(if orphan_false { StatusCode::ACCEPTED } else { StatusCode::OK }, new, Some(rev));
                }
                Err(StorageError::Conflict { .. }) => continue,
                Err(e) => return Err(storage_err(e)),
            }
        }
        if !dry {
            match crate::transaction::remove(shard, info, &key, &kv, &old).await {
                Ok(_) if info.group.is_empty() && info.plural == "serviceaccounts" && name == shardplane_apimachinery::service_accounts::DEFAULT_SERVICE_ACCOUNT => {
                    crate::service_accounts::recreate_default(shard, &ns).await;
                }
                Ok(_) => {}
                Err(StorageError::Conflict { current: None }) => return Err(ApiError::not_found(&info.group, &info.plural, name)),
                Err(StorageError::Conflict { .. }) => continue,
                Err(e) => return Err(storage_err(e)),
            }
        }
        if info.returns_deleted_object {
            return respond(StatusCode::OK, old, None);
        }
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": {"name": name, "group": info.group, "kind": info.plural, "uid": uid}});
        return Ok(body::json(StatusCode::OK, serde_json::to_vec(&status).expect("status")));
    }
}

/// DELETE of a collection: every selected object this shard owns; answers the deleted objects.
pub async fn delete_collection(c: Call<'_>) -> Reply {
    let Call { shard, target: t, query, .. } = c;
    dry_run(query, "DeleteOptions")?;
    let o = ListOptions::parse(query, &t.info)?;
    let rev = shard.store(&t.info).current_revision().await.map_err(storage_err)?;
    let served = shard.synced(&t.info, rev, WAIT).await?;
    let cache = &served.cache;
    let page = cache.list(None, &filter(shard, t, &o), None, None, false).map_err(|e| cache_err(e, false))?;
    let mut deleted = Vec::new();
    for item in &page.items {
        let it = Target { namespace: Some(item.namespace().to_owned()).filter(|_| t.info.namespaced), name: Some(item.name().to_owned()), subresource: None, info: t.info.clone() };
        match delete(Call { target: &it, ..c }).await {
            Ok(_) => deleted.push(item.clone()),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(body::json(StatusCode::OK, render::list(&t.info, shard.served(&t.info)?.cache.synced(), None, None, None, &deleted, false)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Runs `cache_first` with a write that fails on the sources listed in `fail_on`; returns
    /// the sources it was called with and the answer's status.
    fn run(query: &str, fail_on: &[Source]) -> (Vec<&'static str>, u16) {
        let calls = Mutex::new(Vec::new());
        let reply = futures::executor::block_on(cache_first(query, "UpdateOptions", |source| {
            calls.lock().unwrap().push(if source == Source::CacheFirst { "cache" } else { "etcd" });
            let fail = fail_on.contains(&source);
            async move { if fail { Err(ApiError::conflict("", "configmaps", "x")) } else { Ok(body::json(StatusCode::OK, "{}")) } }
        }));
        let code = reply.map_or_else(|e| e.code, |r| r.status().as_u16());
        (calls.into_inner().unwrap(), code)
    }

    #[test]
    fn a_write_on_cached_state_that_fails_is_redone_from_etcd() {
        assert_eq!(run("", &[]), (vec!["cache"], 200));
        assert_eq!(run("", &[Source::CacheFirst]), (vec!["cache", "etcd"], 200));
        // An error etcd confirms stands.
        assert_eq!(run("", &[Source::CacheFirst, Source::Etcd]), (vec!["cache", "etcd"], 409));
        // A dry run proves nothing by a CAS: etcd only.
        assert_eq!(run("dryRun=All", &[]), (vec!["etcd"], 200));
    }
}
