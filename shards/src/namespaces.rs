//! Namespace lifecycle: when a namespace is Terminating, every shard deletes its own objects in
//! it; the shard that owns the namespace key removes the `kubernetes` finalizer once etcd holds
//! no object of the namespace on any shard, and then the namespace itself.

use crate::handlers;
use crate::path::Target;
use crate::shard::Shard;
use axum::http::HeaderMap;
use serde_json::Value;
use shardplane_keyspace::{etcd_layout, HashRange};
use shardplane_watchcache::Filter;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// Runs until shutdown, checking every `period`.
pub async fn run(shard: Arc<Shard>, period: Duration) {
    let mut tick = tokio::time::interval(period);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shard.shutdown.cancelled() => return,
        }
        if let Err(e) = sweep(&shard).await {
            tracing::warn!(error = %e, "namespace sweep failed");
        }
    }
}

async fn sweep(shard: &Shard) -> Result<(), String> {
    let ns_info = shard.resources.iter().find(|r| r.plural == "namespaces" && r.group.is_empty()).expect("namespaces served").clone();
    let (start, end) = etcd_layout::range_keys("", "namespaces", HashRange::FULL);
    let (kvs, _) = shard.storage.list_range(&start, &end, 0).await.map_err(|e| e.to_string())?;
    for kv in kvs {
        let ns: Value = serde_json::from_slice(&kv.value).map_err(|e| e.to_string())?;
        if ns.pointer("/status/phase").and_then(Value::as_str) != Some("Terminating") {
            continue;
        }
        let name = ns.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_owned();
        let span = tracing::info_span!("namespace_cleanup", namespace = %name, shard = %shard.id);
        async {
            delete_own_objects(shard, &name).await;
            if shard.owned_key(&ns_info, "", &name).is_ok() && namespace_empty(shard, &name).await? {
                finalize(shard, &ns_info, &name, kv.mod_revision).await;
            }
            Ok::<(), String>(())
        }
        .instrument(span)
        .await?;
    }
    Ok(())
}

async fn delete_own_objects(shard: &Shard, ns: &str) {
    for served in shard.all_served().filter(|s| s.info.namespaced) {
        let filter = Filter { namespace: Some(ns.to_owned()), ..Default::default() };
        let Ok(page) = served.cache.list(None, &filter, None, None, false) else { continue };
        for obj in page.items {
            let t = Target { info: served.info.clone(), namespace: Some(ns.to_owned()), name: Some(obj.name().to_owned()), subresource: None };
            if let Err(e) = handlers::delete(shard, &t, obj.name(), &HeaderMap::new(), "gracePeriodSeconds=0", b"").await {
                if e.code != 404 {
                    tracing::warn!(namespace = ns, name = obj.name(), error = %e, "namespace cleanup delete failed");
                }
            }
        }
    }
}

/// Whether etcd holds no object of any served namespaced resource in `ns`, on any shard.
async fn namespace_empty(shard: &Shard, ns: &str) -> Result<bool, String> {
    for info in shard.resources.iter().filter(|r| r.namespaced) {
        let (start, end) = etcd_layout::range_keys(info.group, info.plural, HashRange::FULL);
        let keys = shard.storage.list_keys(&start, &end).await.map_err(|e| e.to_string())?;
        if keys.iter().any(|k| etcd_layout::parse_object_key(info.group, info.plural, k).is_some_and(|(_, n, _)| n == ns)) {
            return Ok(false);
        }
    }
    Ok(true)
}

async fn finalize(shard: &Shard, ns_info: &shardplane_apimachinery::resources::ResourceInfo, name: &str, expected: u64) {
    let key = Shard::any_key(ns_info, "", name);
    let Ok((Some(kv), _)) = shard.storage.get(&key).await else { return };
    if kv.mod_revision != expected {
        return; // changed meanwhile: the next sweep looks again
    }
    let Ok(mut ns) = serde_json::from_slice::<Value>(&kv.value) else { return };
    if let Some(f) = ns.pointer_mut("/spec/finalizers").and_then(Value::as_array_mut) {
        f.retain(|x| x != "kubernetes");
    }
    let spec_done = ns.pointer("/spec/finalizers").and_then(Value::as_array).is_none_or(|a| a.is_empty());
    let result = if spec_done && !shardplane_apimachinery::meta::has_finalizers(&ns) {
        shard.storage.delete(&key, kv.mod_revision).await
    } else {
        shard.storage.update(&key, serde_json::to_vec(&ns).expect("namespace"), kv.mod_revision).await
    };
    if let Err(e) = result {
        tracing::debug!(namespace = name, error = %e, "namespace finalize lost a race; retrying next sweep");
    }
}
