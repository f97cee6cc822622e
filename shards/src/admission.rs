//! The admission plugins that read other objects (RFC 0011, "Admission plugins"): LimitRanger,
//! ServiceAccount, Priority, RuntimeClass, DefaultStorageClass, DefaultIngressClass and
//! TaintNodesByCondition,
//! run in upstream's order on a create (the priority-class and claim rules on an update too),
//! after the object's own defaults. The decisions are `shardplane_apimachinery::admission`'s and
//! `limit_ranger`'s; the objects they read come from the shard's informers
//! ([`crate::informer`]). A class a pod names is also looked up in the store when the informer
//! has not heard of it yet, so a class created just before is found; the service account a pod
//! runs as is read from the store ([`crate::service_accounts`]).

use crate::shard::Shard;
use serde_json::Value;
use shardplane_apimachinery::{admission, limit_ranger, service_accounts};
use shardplane_apimachinery::meta;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::ApiError;
use shardplane_http::storage_errors::status_of as storage_err;
use std::sync::Arc;

/// The configuration objects of (group, plural) as admission reads them, with `named` read
/// from the store too when the informer does not hold it.
async fn objects(shard: &Shard, group: &str, plural: &str, named: Option<&str>) -> Result<Vec<Arc<Value>>, ApiError> {
    let mut held = shard.informers.objects(group, plural).await?;
    if let Some(name) = named.filter(|n| !held.iter().any(|o| meta::meta_str(o, "name") == *n)) {
        let info = shard.builtin(group, plural);
        let (kv, _) = shard.store(&info).get(&Shard::any_key(&info, "", name)).await.map_err(storage_err)?;
        if let Some(v) = kv.and_then(|kv| serde_json::from_slice(&kv.value).ok()) {
            held.push(Arc::new(v));
        }
    }
    Ok(held)
}

/// The plugins for a create of `obj`.
pub(crate) async fn admit_create(shard: &Shard, info: &ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
    let name = meta::meta_str(obj, "name").to_owned();
    let forbidden = |why: String| ApiError::forbidden(&info.group, &info.plural, &name, &why);
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => {
            let ranges = namespace_limit_ranges(shard, obj).await?;
            let ranges: Vec<&Value> = ranges.iter().map(|r| &**r).collect();
            limit_ranger::apply_defaults(obj, &ranges);
            let account_name = service_accounts::service_account_name(obj).map_err(forbidden)?;
            if !account_name.is_empty() {
                let ns = meta::meta_str(obj, "namespace").to_owned();
                let account = crate::service_accounts::account(shard, &ns, &account_name).await.map_err(|why| forbidden(service_accounts::lookup_failure(&ns, &account_name, &why)))?;
                service_accounts::admit(obj, &account, &meta::generate_name(service_accounts::TOKEN_VOLUME_PREFIX));
            }
            let class = obj.pointer("/spec/priorityClassName").and_then(Value::as_str).filter(|n| !n.is_empty()).map(str::to_owned);
            let classes = objects(shard, "scheduling.k8s.io", "priorityclasses", class.as_deref()).await?;
            admission::pod_priority(obj, classes.iter().map(|c| &**c)).map_err(forbidden)?;
            if let Some(runtime) = obj.pointer("/spec/runtimeClassName").and_then(Value::as_str).filter(|n| !n.is_empty()).map(str::to_owned) {
                let classes = objects(shard, "node.k8s.io", "runtimeclasses", Some(&runtime)).await?;
                let found = classes.iter().find(|c| meta::meta_str(c, "name") == runtime);
                admission::runtime_class(obj, &runtime, found.map(|c| &**c)).map_err(forbidden)?;
            }
            // Validating, after every mutating step (a runtime class's overhead counts).
            limit_ranger::validate_pod(obj, &ranges).map_err(forbidden)?;
        }
        ("", "nodes") => admission::taint_new_node(obj),
        ("", "persistentvolumeclaims") => {
            let classes = objects(shard, "storage.k8s.io", "storageclasses", None).await?;
            admission::default_storage_class(obj, classes.iter().map(|c| &**c));
            validate_claim(shard, info, obj).await?;
        }
        ("networking.k8s.io", "ingresses") => {
            let classes = objects(shard, "networking.k8s.io", "ingressclasses", None).await?;
            admission::default_ingress_class(obj, classes.iter().map(|c| &**c));
        }
        ("scheduling.k8s.io", "priorityclasses") => admit_priority_class(shard, info, obj).await?,
        _ => {}
    }
    Ok(())
}

/// The plugins for an update of the main resource to `obj`.
pub(crate) async fn admit_update(shard: &Shard, info: &ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
    match (info.group.as_str(), info.plural.as_str()) {
        ("scheduling.k8s.io", "priorityclasses") => admit_priority_class(shard, info, obj).await?,
        // Pods are not checked again: their containers' resources cannot change (upstream
        // skips them too); a claim's request can grow.
        ("", "persistentvolumeclaims") => validate_claim(shard, info, obj).await?,
        _ => {}
    }
    Ok(())
}

/// The LimitRanges of the object's namespace.
async fn namespace_limit_ranges(shard: &Shard, obj: &Value) -> Result<Vec<Arc<Value>>, ApiError> {
    let ns = meta::meta_str(obj, "namespace");
    Ok(objects(shard, "", "limitranges", None).await?.into_iter().filter(|r| meta::meta_str(r, "namespace") == ns).collect())
}

async fn validate_claim(shard: &Shard, info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let ranges = namespace_limit_ranges(shard, obj).await?;
    let ranges: Vec<&Value> = ranges.iter().map(|r| &**r).collect();
    limit_ranger::validate_claim(obj, &ranges).map_err(|why| ApiError::forbidden(&info.group, &info.plural, meta::meta_str(obj, "name"), &why))
}

/// Every object of a kind as the store holds it now (for a rule on writes of that kind, which
/// are rare, so that one written a moment before counts).
async fn stored_objects(shard: &Shard, info: &ResourceInfo) -> Result<Vec<Value>, ApiError> {
    let (start, end) = shardplane_keyspace::etcd_layout::range_keys(info.storage_group(), &info.plural, shardplane_keyspace::HashRange::FULL);
    let (kvs, _) = shard.store(info).list_range(&start, &end, 0).await.map_err(storage_err)?;
    Ok(kvs.iter().filter_map(|kv| serde_json::from_slice(&kv.value).ok()).collect())
}

/// At most one global default class: read from the store, not the informer, so that two
/// defaults written one after the other are caught (two written at the same moment through two
/// shards can both pass, as through two upstream API servers).
async fn admit_priority_class(shard: &Shard, info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let classes = stored_objects(shard, info).await?;
    admission::one_global_default(obj, classes.iter()).map_err(|why| ApiError::forbidden(&info.group, &info.plural, meta::meta_str(obj, "name"), &why))
}
