//! The shard's membership key (RFC 0006): its URL and what it has loaded, on an etcd lease the
//! shard renews, refreshed as its caches change. The coordinator reads it to know the shard is
//! alive, where it is, and how much it holds.

use crate::shard::Shard;
use shardplane_keyspace::HashRange;
use shardplane_storage::members::{LoadedRange, ShardMember, SHARDS_PREFIX};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the shard says about itself now. Its ranges count as loaded once every cache has
/// loaded; objects and bytes are split between its ranges by their share of the hash space
/// (keys spread uniformly by hash).
pub fn describe(shard: &Shard, url: &str) -> ShardMember {
    let ready = shard.ready();
    let (mut objects, mut bytes, mut since) = (0u64, 0u64, 0u64);
    for served in shard.all_served() {
        let cache = &served.cache;
        let stats = cache.stats();
        objects += stats.objects as u64;
        bytes += stats.bytes as u64;
        since = since.max(cache.oldest());
    }
    // Ranges taken over while running are held from their load; the rest since the caches loaded.
    let adopted: Vec<(HashRange, u64)> = shard.adopted();
    let held = shard.ranges();
    let rest = adopted.iter().fold(held.clone(), |set, (r, _)| set.without(*r));
    let pieces: Vec<(HashRange, u64)> = rest.ranges().iter().map(|r| (*r, since)).chain(adopted.into_iter().filter(|(r, _)| held.covers(r))).collect();
    let total: f64 = pieces.iter().map(|(r, _)| (r.end() - u128::from(r.start())) as f64).sum();
    let loaded = if !ready {
        vec![]
    } else {
        pieces
            .iter()
            .map(|(r, revision)| {
                let share = (r.end() - u128::from(r.start())) as f64 / total;
                LoadedRange { range: *r, revision: *revision, objects: (objects as f64 * share) as u64, cache_bytes: (bytes as f64 * share) as u64 }
            })
            .collect()
    };
    ShardMember { id: shard.id.clone(), url: url.to_owned(), capacity_bytes: 0, loaded, load: crate::write_load::snapshot(shard) }
}

/// Keeps the shard's member key alive until `stop`, refreshed every third of the TTL and as
/// soon as the shard's ranges change. The returned task ends once the key is deleted after
/// `stop`.
pub fn register(shard: Arc<Shard>, url: String, ttl: Duration, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    let bytes = move |shard: &Shard| serde_json::to_vec(&describe(shard, &url)).expect("member serializes");
    let (tx, rx) = tokio::sync::watch::channel(bytes(&shard));
    let key = shard.storage.register(format!("{SHARDS_PREFIX}{}", shard.id), rx, ttl, stop.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval((ttl / 3).max(Duration::from_millis(200)));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shard.ranges_changed.notified() => {}
                _ = stop.cancelled() => return,
            }
            let now = bytes(&shard);
            tx.send_if_modified(|v| {
                let changed = *v != now;
                *v = now;
                changed
            });
        }
    });
    key
}
