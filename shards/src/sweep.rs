//! Delete-then-finalize, the pattern namespace deletion and CRD deletion share (as upstream's
//! namespace controller): every shard deletes the objects it owns ([`delete_cached`]); the shard
//! that owns the parent's key removes the parent's finalizer once etcd holds none of its objects
//! on any shard ([`drop_finalizer`]), which deletes the parent when no finalizer is left.

use crate::write::{self, Call};
use crate::shard::{Served, Shard};
use axum::http::HeaderMap;
use serde_json::Value;
use shardplane_apimachinery::request_path::Target;
use shardplane_apimachinery::{encode, meta};
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_storage::StorageError;
use shardplane_watchcache::Filter;

/// Deletes every cached object of `served` that `filter` selects, as a client's DELETE with a
/// zero grace period would (finalizers on them are honoured: such objects wait). An object gone
/// meanwhile (404) or moved to another shard (421) is another sweep's.
pub async fn delete_cached(shard: &Shard, served: &Served, filter: &Filter) {
    let Ok(page) = served.cache.list(None, filter, None, None, false) else { return };
    for obj in page.items {
        let ns = (!obj.namespace().is_empty()).then(|| obj.namespace().to_owned());
        let t = Target { info: served.info.clone(), namespace: ns, name: Some(obj.name().to_owned()), subresource: None };
        if let Err(e) = write::delete(Call { shard, target: &t, headers: &HeaderMap::new(), query: "gracePeriodSeconds=0", body: b"" }).await
            && e.code != 404
            && e.code != 421
        {
            tracing::warn!(resource = %served.info.plural, namespace = obj.namespace(), name = obj.name(), error = %e, "cleanup delete failed");
        }
    }
}

/// Removes `finalizer` from the list at `pointer` (`/spec/finalizers`, `/metadata/finalizers`)
/// of the object at `key`, by compare-and-swap; with no finalizer left there or in its metadata,
/// deletes the object instead. `expected`: do nothing unless the object is still at that
/// revision (it changed meanwhile: the next sweep looks again). A lost race is not an error.
pub async fn drop_finalizer(shard: &Shard, info: &ResourceInfo, key: &[u8], pointer: &str, finalizer: &str, expected: Option<u64>) -> Result<(), StorageError> {
    let store = shard.store(info);
    let (Some(kv), _) = store.get(key).await? else { return Ok(()) };
    if expected.is_some_and(|rev| rev != kv.mod_revision) {
        return Ok(());
    }
    let Ok(mut obj) = serde_json::from_slice::<Value>(&kv.value) else { return Ok(()) };
    if let Some(list) = obj.pointer_mut(pointer).and_then(Value::as_array_mut) {
        list.retain(|f| f != finalizer);
    }
    let listed_none = obj.pointer(pointer).and_then(Value::as_array).is_none_or(|a| a.is_empty());
    let result = if listed_none && !meta::has_finalizers(&obj) {
        crate::transaction::remove(shard, info, key, &kv, &obj).await.map(|_| ())
    } else {
        store.update(key, encode::object_bytes(&obj), kv.mod_revision).await.map(|_| ())
    };
    match result {
        Err(StorageError::Conflict { .. }) => Ok(()),
        other => other,
    }
}
