//! Server-side apply requests: `PATCH` with `application/apply-patch+yaml` (RFC 0008). The
//! merge and the managed fields are `shardplane_apimachinery::apply`'s; this module checks the
//! request, creates the object when it does not exist, and otherwise writes the merged object
//! with the same compare-and-swap, admission and validation as every other write.

use shardplane_http::body;
use crate::write::{self, current_from, form_value, insert, subresource, write_over, Call, Reply, Source, Stored};
use serde_json::Value;
use shardplane_apimachinery::apply::{parse_config, Apply, Scope};
use shardplane_apimachinery::meta;
use shardplane_apimachinery::strategy::{self, Subresource};
use shardplane_apimachinery::field_validation::{self, FieldValidation};
use shardplane_apimachinery::openapi;
use shardplane_apimachinery::ApiError;

/// One apply of `raw` to the object `name` (read from `source` first, then from etcd if a write
/// raced it).
pub(crate) async fn apply(c: Call<'_>, mut source: Source) -> Reply {
    let Call { shard, target: t, headers, query, body: raw } = c;
    let name = c.name();
    let info = &t.info;
    let sub = subresource(t)?;
    let manager = form_value(query, "fieldManager").filter(|m| !m.is_empty()).ok_or_else(|| ApiError::invalid("meta.k8s.io", "PatchOptions", "", vec![shardplane_apimachinery::status::cause("FieldValueRequired", "fieldManager", "Required value: is required for apply patch")]))?;
    let force = match form_value(query, "force").as_deref() {
        None | Some("") | Some("false") => false,
        Some("true") => true,
        Some(v) => return Err(ApiError::bad_request(format!("invalid value of force: {v:?}"))),
    };
    let mode = FieldValidation::parse(form_value(query, "fieldValidation").as_deref())?;
    let dry = write::dry_run(query, "PatchOptions")?;
    let (mut config, duplicates) = parse_config(raw, mode == FieldValidation::Strict)?;
    body::check_type(info, &mut config)?;
    let ns = t.namespace.clone().unwrap_or_default();
    let named = meta::meta_str(&config, "name").to_owned();
    if !named.is_empty() && named != name {
        return Err(ApiError::bad_request(format!("the name of the object ({named}) does not match the name on the URL ({name})")));
    }
    let body_ns = meta::meta_str(&config, "namespace").to_owned();
    if info.namespaced && !body_ns.is_empty() && body_ns != ns {
        return Err(ApiError::bad_request("the namespace of the provided object does not match the namespace sent on the request"));
    }
    meta::metadata_mut(&mut config).insert("name".into(), Value::String(name.to_owned()));
    if info.namespaced {
        meta::metadata_mut(&mut config).insert("namespace".into(), Value::String(ns.clone()));
    }
    // Fields the schema does not declare: refused with Strict, as upstream words it for apply.
    let unknown = field_validation::prune(info, &mut config)?;
    if mode == FieldValidation::Strict && !unknown.is_empty() {
        let lines: Vec<String> = unknown.iter().map(|u| format!(".{u}: field not declared in schema")).collect();
        let listed = if lines.len() == 1 { lines[0].clone() } else { format!("errors:\n  {}", lines.join("\n  ")) };
        return Err(ApiError::bad_request(format!("failed to create typed patch object ({}, Kind={}): {listed}", info.api_version(), info.kind)));
    }
    let warnings: Vec<String> = if mode == FieldValidation::Warn { unknown.iter().map(|u| format!("unknown field {u:?}")).chain(duplicates).collect() } else { Vec::new() };
    let schema = openapi::object_schema(info);
    let now = meta::now_rfc3339();
    let api_version = info.api_version();
    let scope = if matches!(sub, Subresource::Status | Subresource::Approval) { Scope::Status } else { Scope::Main { has_status: info.has_status } };
    let applier = Apply { manager: &manager, force, scope, api_version: &api_version, now: &now };
    let key = shard.owned_key(info, &ns, name)?;
    loop {
        let (old, kv) = match current_from(shard, info, &key, &ns, name, source).await {
            Ok(found) => found,
            Err(e) if e.code == 404 && sub == Subresource::Main => {
                // Nothing to merge into: the configuration is the object.
                let mut obj = config.clone();
                meta::metadata_mut(&mut obj).insert("managedFields".into(), applier.created(schema.as_deref(), &config));
                admit_custom(info, &mut obj)?;
                match insert(shard, t, headers, query, obj, &warnings).await {
                    // Created by someone else meanwhile: apply to theirs.
                    Err(e) if e.code == 409 && e.reason == "AlreadyExists" => {
                        source = Source::Etcd;
                        continue;
                    }
                    done => return done,
                }
            }
            Err(e) => return Err(e),
        };
        let precondition = meta::meta_str(&config, "resourceVersion");
        if !precondition.is_empty() && precondition != kv.mod_revision.to_string() {
            return Err(ApiError::conflict(&info.group, &info.plural, name));
        }
        let mut new = applier.to_live(schema.as_deref(), &old, &config)?;
        admit_custom(info, &mut new)?;
        strategy::prepare_for_update(info, &old, &mut new, sub);
        crate::crds::admit(shard, info, &mut new, sub).await;
        if sub == Subresource::Main {
            crate::admission::admit_update(shard, info, &mut new).await?;
        }
        if let Some(r) = write_over(shard, info, Stored { key: &key, kv: &kv, old: &old }, new, dry, &warnings).await? {
            return Ok(r);
        }
        source = Source::Etcd;
    }
}

/// A custom resource's defaults and value rules (nothing for a built-in).
fn admit_custom(info: &shardplane_apimachinery::resources::ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
    let causes = shardplane_apimachinery::structural::admit_custom(info, obj);
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid(&info.group, &info.kind, meta::meta_str(obj, "name"), causes)) }
}
