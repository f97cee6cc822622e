//! Keeps a [`WatchCache`] in step with one etcd key range: list at a revision, then watch from
//! it; apply events in order; turn in-band progress marks into the synced revision; request
//! progress when a reader waits; relist when the watch breaks or its revision was compacted.

use crate::cache::WatchCache;
use crate::object::ObjectCodec;
use shardplane_keyspace::etcd_layout::parse_object_key;
use shardplane_storage::{Storage, StorageError, WatchItem};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The etcd key range a cache follows.
#[derive(Clone)]
pub struct KeyRange {
    pub start: Vec<u8>,
    pub end: Vec<u8>,
    /// Keeps only keys whose placement hash this predicate accepts (None: every key).
    pub owns: Option<Arc<dyn Fn(u64) -> bool + Send + Sync>>,
}

impl KeyRange {
    fn owns_key(&self, group: &str, plural: &str, key: &[u8]) -> bool {
        match &self.owns {
            None => true,
            Some(f) => parse_object_key(group, plural, key).is_some_and(|(h, _, _)| f(h)),
        }
    }
}

/// Runs until `shutdown`: keeps `cache` equal to etcd's `range`, decoded by `codec`.
pub async fn run(storage: Storage, cache: Arc<WatchCache>, codec: ObjectCodec, range: KeyRange, shutdown: CancellationToken) {
    let resource = codec.info().plural;
    let mut backoff = Duration::from_millis(100);
    while !shutdown.is_cancelled() {
        match sync_once(&storage, &cache, &codec, &range, &shutdown).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(resource, error = %e, "watch cache lost etcd; relisting");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.cancelled() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn sync_once(storage: &Storage, cache: &WatchCache, codec: &ObjectCodec, range: &KeyRange, shutdown: &CancellationToken) -> Result<(), StorageError> {
    let (kvs, rev) = storage.list_range(&range.start, &range.end, 0).await?;
    // Consumed here: the stored bytes must not outlive the decode (this function then follows
    // the watch for as long as the shard runs, and would keep a second copy of every object).
    let objects = kvs
        .into_iter()
        .filter(|kv| range.owns_key(codec.info().group, codec.info().plural, &kv.key))
        .filter_map(|kv| codec.decode(&kv.value, kv.mod_revision).map_err(|e| tracing::error!(key = %String::from_utf8_lossy(&kv.key), error = %e, "skipping undecodable object")).ok())
        .collect();
    cache.replace(objects, rev);
    tracing::debug!(resource = codec.info().plural, revision = rev, "watch cache loaded");
    let watch = storage.watch_range(&range.start, &range.end, rev).await?;
    let (mut requester, mut stream) = watch.into_parts();
    let wanted = cache.progress_wanted();
    let progress_task = tokio::spawn(async move {
        loop {
            wanted.notified().await;
            if requester.request().await.is_err() {
                return;
            }
        }
    });
    let _abort = AbortOnDrop(progress_task);
    let mut evict = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            item = stream.next() => match item? {
                Some(WatchItem::Events(events)) => {
                    for e in events {
                        if !range.owns_key(codec.info().group, codec.info().plural, &e.kv.key) {
                            cache.progress(e.revision);
                            continue;
                        }
                        let decoded = if e.deleted {
                            // The deleted object: its last state, stamped with the deletion revision
                            // (from etcd's prev_kv, or from the cache if etcd sent none).
                            let info = codec.info();
                            let cached = || {
                                let (_, ns, name) = parse_object_key(info.group, info.plural, &e.kv.key)?;
                                cache.get(ns, name)
                            };
                            match &e.prev {
                                Some(p) => Some(codec.decode(&p.value, e.revision)),
                                None => cached().map(|o| codec.decode(&o.bytes, e.revision)),
                            }
                        } else {
                            Some(codec.decode(&e.kv.value, e.revision))
                        };
                        match decoded {
                            Some(Ok(obj)) => cache.apply(obj, e.deleted),
                            Some(Err(err)) => tracing::error!(key = %String::from_utf8_lossy(&e.kv.key), error = %err, "skipping undecodable object"),
                            None => cache.progress(e.revision),
                        }
                    }
                }
                Some(WatchItem::Progress(r)) => cache.progress(r),
                None => return Err(StorageError::Etcd("watch stream ended".into())),
            },
            _ = evict.tick() => cache.evict_expired(),
            _ = shutdown.cancelled() => return Ok(()),
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
