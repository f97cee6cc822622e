//! Namespace lifecycle: when a namespace is Terminating, every shard deletes its own objects in
//! it; the shard that owns the namespace key removes the `kubernetes` finalizer once etcd holds
//! no object of the namespace on any shard, and then the namespace itself.
//!
//! Every shard follows all namespace keys with one etcd watch and keeps each namespace's name,
//! mod_revision and phase (a few dozen bytes per namespace): creates are admitted on it
//! ([`crate::namespace_admission`], RFC 0017) and the Terminating ones are cleaned up here, so
//! no shard polls etcd.

use crate::shard::Shard;
use crate::namespace_admission::seen_in;
use shardplane_keyspace::{etcd_layout, HashRange};
use shardplane_watchcache::Filter;
use shardplane_storage::follow::{self, FollowOptions, Followed};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// Runs until shutdown: follows namespace keys and, every `period` while any namespace is
/// Terminating, cleans up.
pub async fn run(shard: Arc<Shard>, period: Duration) {
    tokio::spawn(follow(shard.clone()));
    let mut tick = tokio::time::interval(period);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shard.shutdown.cancelled() => return,
        }
        for (name, mod_revision) in shard.namespaces.terminating() {
            let span = tracing::info_span!("namespace_cleanup", namespace = %name, shard = %shard.id);
            if let Err(e) = cleanup(&shard, &name, mod_revision).instrument(span).await {
                tracing::warn!(namespace = %name, error = %e, "namespace cleanup failed; retrying");
            }
        }
    }
}

/// Keeps `shard.namespaces` equal to the namespaces in etcd.
async fn follow(shard: Arc<Shard>) {
    let (start, end) = etcd_layout::range_keys("", "namespaces", HashRange::FULL);
    let store = shard.stores.of("", "namespaces").clone();
    let options = FollowOptions::fixed("namespaces", Duration::from_millis(500), shard.shutdown.clone());
    let known = &shard.namespaces;
    follow::follow(&store, &start, &end, options, |f| {
        match f {
            Followed::Listed { kvs, .. } => known.replace(kvs.iter().filter_map(|kv| seen_in(&kv.value, kv.mod_revision))),
            Followed::Changed(events) => {
                for e in events {
                    match (e.deleted, etcd_layout::parse_object_key("", "namespaces", &e.kv.key)) {
                        (true, Some((_, _, name))) => known.record(name, None),
                        (false, _) => {
                            if let Some((name, seen)) = seen_in(&e.kv.value, e.kv.mod_revision) {
                                known.record(&name, Some(seen));
                            }
                        }
                        _ => {}
                    }
                }
            }
            Followed::Progress(_) => {}
        }
        Ok(())
    })
    .await;
}

async fn cleanup(shard: &Shard, name: &str, mod_revision: u64) -> Result<(), String> {
    let ns_info = shard.builtin("", "namespaces");
    delete_own_objects(shard, name).await;
    if shard.owned_key(&ns_info, "", name).is_ok() && namespace_empty(shard, name).await? {
        finalize(shard, &ns_info, name, mod_revision).await;
    }
    Ok(())
}

async fn delete_own_objects(shard: &Shard, ns: &str) {
    let filter = Filter { namespace: Some(ns.to_owned()), ..Default::default() };
    for served in shard.all_served().into_iter().filter(|s| s.info.namespaced) {
        crate::sweep::delete_cached(shard, &served, &filter).await;
    }
}

/// Whether etcd holds no object of any served namespaced resource in `ns`, on any shard.
async fn namespace_empty(shard: &Shard, ns: &str) -> Result<bool, String> {
    for info in shard.resources().iter().filter(|r| r.namespaced) {
        let (start, end) = etcd_layout::range_keys(&info.group, &info.plural, HashRange::FULL);
        let keys = shard.store(info).list_keys(&start, &end).await.map_err(|e| e.to_string())?;
        if keys.iter().any(|k| etcd_layout::parse_object_key(&info.group, &info.plural, k).is_some_and(|(_, n, _)| n == ns)) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Drops the `kubernetes` finalizer of a namespace still at revision `expected` (and, with no
/// other, the namespace).
async fn finalize(shard: &Shard, ns_info: &shardplane_apimachinery::resources::ResourceInfo, name: &str, expected: u64) {
    let key = Shard::any_key(ns_info, "", name);
    if let Err(e) = crate::sweep::drop_finalizer(shard, ns_info, &key, "/spec/finalizers", "kubernetes", Some(expected)).await {
        tracing::debug!(namespace = name, error = %e, "namespace finalize failed; retrying next sweep");
    }
}
