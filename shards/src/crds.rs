//! The shard's part in CustomResourceDefinitions: a CRD written through this shard (it owns
//! the CRD's key) is established at once — its names checked against every other CRD the
//! catalog holds, as upstream's naming and establishing controllers do — so that every shard
//! and router, following the catalog, serves its resources. Deleting a CRD deletes its objects
//! first: every shard deletes its own, and the CRD's owner lets it go once none is left.

use crate::shard::Shard;
use shardplane_catalog::CATCH_UP;
use serde_json::Value;
use shardplane_apimachinery::meta;
use shardplane_apimachinery::strategy::Subresource;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::{crd, kind_rules, ApiError};
use shardplane_keyspace::{etcd_layout, HashRange};
use shardplane_watchcache::Filter;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// Accepts the names of a CRD being created or having its spec written, and establishes it
/// (status writes are the client's own).
pub async fn admit(shard: &Shard, info: &ResourceInfo, obj: &mut Value, sub: Subresource) {
    if !kind_rules::is_crd(info) || sub == Subresource::Status {
        return;
    }
    let catalog = shard.catalog.caught_up(CATCH_UP).await;
    let conflict = catalog.conflict(obj);
    crd::establish(obj, conflict.as_deref(), &meta::now_rfc3339());
}

/// Marks a CRD being deleted as upstream does: the cleanup finalizer (its objects go first) and
/// the `Terminating` condition.
pub fn mark_deleting(info: &ResourceInfo, obj: &mut Value) {
    if !kind_rules::is_crd(info) {
        return;
    }
    let m = meta::metadata_mut(obj);
    let finalizers = m.entry("finalizers").or_insert_with(|| Value::Array(Vec::new()));
    if let Some(list) = finalizers.as_array_mut()
        && !list.iter().any(|f| f == crd::CLEANUP_FINALIZER)
    {
        list.push(Value::String(crd::CLEANUP_FINALIZER.into()));
    }
    crd::mark_terminating(obj, &meta::now_rfc3339());
}

/// Refuses a create of a custom object whose CRD is being deleted, as upstream does.
pub fn refuse_create_if_terminating(shard: &Shard, info: &ResourceInfo) -> Result<(), ApiError> {
    let Some(custom) = &info.custom else { return Ok(()) };
    let catalog = shard.catalog.now();
    if catalog.crd(&custom.crd).is_some_and(|c| c.pointer("/metadata/deletionTimestamp").is_some()) {
        let mut e = ApiError::method_not_allowed("create", &info.group, &info.plural);
        e.message = "create not allowed while custom resource definition is terminating".into();
        return Err(e);
    }
    Ok(())
}

/// Runs until shutdown: every `period`, for each CRD being deleted, deletes this shard's own
/// objects of it (finalizers on them are honoured: such objects wait); the shard that owns the
/// CRD's key then removes the cleanup finalizer once etcd holds no object of it on any shard,
/// which deletes the CRD — the namespace lifecycle's pattern.
pub async fn run_cleanup(shard: Arc<Shard>, period: Duration) {
    let mut tick = tokio::time::interval(period);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shard.shutdown.cancelled() => return,
        }
        let catalog = shard.catalog.now();
        let deleting: Vec<Value> = catalog.crds().filter(|c| c.pointer("/metadata/deletionTimestamp").is_some()).cloned().collect();
        for c in deleting {
            let name = c.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_owned();
            let span = tracing::info_span!("crd_cleanup", crd = %name, shard = %shard.id);
            if let Err(e) = cleanup(&shard, &c).instrument(span).await {
                tracing::warn!(crd = %name, error = %e, "custom resource cleanup failed; retrying");
            }
        }
    }
}

async fn cleanup(shard: &Shard, c: &Value) -> Result<(), String> {
    let (group, plural, _) = crd::claims(c);
    let name = c.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_owned();
    let served = shard.all_served().into_iter().find(|s| s.info.group == group && s.info.plural == plural);
    if let Some(served) = served {
        crate::sweep::delete_cached(shard, &served, &Filter::default()).await;
    }
    let crd_info = shard.builtin(crd::GROUP, crd::PLURAL);
    let Ok(key) = shard.owned_key(&crd_info, "", &name) else { return Ok(()) };
    let (start, end) = etcd_layout::range_keys(&group, &plural, HashRange::FULL);
    if !shard.stores.of(&group, &plural).list_keys(&start, &end).await.map_err(|e| e.to_string())?.is_empty() {
        return Ok(());
    }
    // Every object is gone: drop the finalizer (and, with no other, the CRD).
    crate::sweep::drop_finalizer(shard, &crd_info, &key, "/metadata/finalizers", crd::CLEANUP_FINALIZER, None).await.map_err(|e| e.to_string())
}
