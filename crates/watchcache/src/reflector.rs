//! Keeps a [`WatchCache`] in step with one resource's keys in a set of hash ranges: list at a
//! revision, then watch from it; apply events in order; turn in-band progress marks into the
//! synced revision; request progress when a reader waits; relist when the watch breaks or its
//! revision was compacted. While it runs, it can take over a range and let one go
//! ([`Command`], RFC 0006) without relisting what it already holds.

use crate::adopt::{self, Loaded, Loads};
use crate::cache::WatchCache;
use crate::object::ObjectCodec;
use shardplane_keyspace::etcd_layout::{parse_object_key, range_keys};
use shardplane_keyspace::{placement_hash, HashRange, RangeSet};
use shardplane_storage::{Storage, StorageError, WatchItem};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// The keys a cache follows: one resource's keys whose placement hash is in the set. The set is
/// the reflector's to change (by [`Command`]s); others may read it.
#[derive(Clone)]
pub struct KeyRange {
    pub group: String,
    pub plural: String,
    pub ranges: Arc<RwLock<RangeSet>>,
}

impl KeyRange {
    /// `group`/`plural` keys in `ranges`.
    pub fn new(group: &str, plural: &str, ranges: RangeSet) -> Self {
        Self { group: group.to_owned(), plural: plural.to_owned(), ranges: Arc::new(RwLock::new(ranges)) }
    }

    /// The ranges now followed.
    pub fn ranges(&self) -> RangeSet {
        self.ranges.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn set(&self, ranges: RangeSet) {
        *self.ranges.write().unwrap_or_else(|p| p.into_inner()) = ranges;
    }

    /// The etcd key range spanning every followed range (one watch stream; keys in a gap
    /// between ranges are dropped by [`KeyRange::owns_key`]).
    pub(crate) fn hull(&self) -> (Vec<u8>, Vec<u8>) {
        let set = self.ranges();
        let rs = set.ranges();
        let hull = match (rs.first(), rs.last()) {
            (Some(a), Some(b)) => HashRange::new(a.start(), b.end()).expect("a non-empty hull"),
            // Nothing followed: a key range no object key falls in (hashes are hex digits, and
            // "x" sorts after them). Not "\0" to "\0", which etcd reads as every key.
            _ => {
                let prefix = shardplane_keyspace::etcd_layout::resource_prefix(&self.group, &self.plural);
                return (format!("{prefix}x").into_bytes(), format!("{prefix}y").into_bytes());
            }
        };
        range_keys(&self.group, &self.plural, hull)
    }

    pub(crate) fn owns_key(&self, key: &[u8]) -> bool {
        parse_object_key(&self.group, &self.plural, key).is_some_and(|(h, _, _)| self.ranges.read().unwrap_or_else(|p| p.into_inner()).contains(h))
    }
}

/// What a running reflector can be asked.
pub enum Command {
    /// Take over a range: load it in the background, then join it at the synced revision S and
    /// follow it from there (`adopt`). Answers S (the cache holds the range's state from S on).
    Adopt(HashRange, oneshot::Sender<Result<u64, StorageError>>),
    /// Let a range go: stop following it and drop its objects. Answers how many left.
    Release(HashRange, oneshot::Sender<usize>),
}

/// How following the watch ended.
enum Followed {
    /// Shut down.
    Stopped,
    /// The followed ranges changed: watch again, from this revision.
    Restart(u64),
}

/// Runs until `shutdown`: keeps `cache` equal to etcd's `range`, decoded by `codec`, and
/// carries out `commands`.
pub async fn run(storage: Storage, cache: Arc<WatchCache>, codec: ObjectCodec, range: KeyRange, mut commands: mpsc::Receiver<Command>, shutdown: CancellationToken) {
    let resource = codec.info().plural.clone();
    let mut backoff = Duration::from_millis(100);
    let mut loads = Loads::new();
    while !shutdown.is_cancelled() {
        match sync_once(&storage, &cache, &codec, &range, &mut commands, &mut loads, &shutdown).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(resource = %resource, error = %e, "watch cache lost etcd; relisting");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.cancelled() => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Lists the followed keys into the cache, then follows their changes until shutdown.
async fn sync_once(storage: &Storage, cache: &WatchCache, codec: &ObjectCodec, range: &KeyRange, commands: &mut mpsc::Receiver<Command>, loads: &mut Loads, shutdown: &CancellationToken) -> Result<(), StorageError> {
    let (start, end) = range.hull();
    let (kvs, rev) = storage.list_range(&start, &end, 0).await?;
    // Consumed here: the stored bytes must not outlive the decode (this function then follows
    // the watch for as long as the shard runs, and would keep a second copy of every object).
    let objects = decode_all(codec, kvs.into_iter().filter(|kv| range.owns_key(&kv.key)));
    cache.replace(objects, rev);
    tracing::debug!(resource = %codec.info().plural, revision = rev, "watch cache loaded");
    adopt::backfill_on_load(storage, cache, codec, range, rev).await;
    let mut from = rev;
    loop {
        match follow(storage, cache, codec, range, from, commands, loads, shutdown).await? {
            Followed::Stopped => return Ok(()),
            Followed::Restart(at) => from = at,
        }
    }
}

pub(crate) fn decode_all(codec: &ObjectCodec, kvs: impl Iterator<Item = shardplane_storage::Kv>) -> Vec<crate::object::CachedObject> {
    kvs.filter_map(|kv| codec.decode(&kv.value, kv.mod_revision).map_err(|e| tracing::error!(key = %String::from_utf8_lossy(&kv.key), error = %e, "skipping undecodable object")).ok()).collect()
}

/// Follows the watch from `from` until shutdown or until a command changes what is followed.
async fn follow(storage: &Storage, cache: &WatchCache, codec: &ObjectCodec, range: &KeyRange, from: u64, commands: &mut mpsc::Receiver<Command>, loads: &mut Loads, shutdown: &CancellationToken) -> Result<Followed, StorageError> {
    let (start, end) = range.hull();
    let watch = storage.watch_range(&start, &end, from).await?;
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
                        if !range.owns_key(&e.kv.key) {
                            cache.progress(e.revision);
                            continue;
                        }
                        let decoded = if e.deleted {
                            // The deleted object: its last state, stamped with the deletion revision
                            // (from etcd's prev_kv, or from the cache if etcd sent none).
                            let info = codec.info();
                            let cached = || {
                                let (_, ns, name) = parse_object_key(&info.group, &info.plural, &e.kv.key)?;
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
                            Some(Ok(obj)) => cache.record(obj, e.deleted),
                            Some(Err(err)) => tracing::error!(key = %String::from_utf8_lossy(&e.kv.key), error = %err, "skipping undecodable object"),
                            None => cache.progress(e.revision),
                        }
                    }
                }
                Some(WatchItem::Progress(r)) => cache.progress_answer(r),
                None => return Err(StorageError::Etcd("watch stream ended".into())),
            },
            Some(command) = commands.recv() => {
                if let Some(at) = carry_out(storage, cache, codec, range, command, loads.sender()).await {
                    // Everything up to `at` is applied; the stream's later events are dropped
                    // with it and come again on the new one.
                    return Ok(Followed::Restart(at));
                }
            }
            Some(done) = loads.done.recv() => {
                if let Some(at) = adopt::finish(storage, cache, codec, range, done).await {
                    // Everything up to `at` is applied, the new range included; the stream's
                    // later events come again on the new one.
                    return Ok(Followed::Restart(at));
                }
            }
            _ = evict.tick() => cache.evict_expired(),
            _ = shutdown.cancelled() => return Ok(Followed::Stopped),
        }
    }
}

/// Carries out a command between two events; Some(revision) when the watch must be opened
/// again from that revision because the followed keys changed.
async fn carry_out(storage: &Storage, cache: &WatchCache, codec: &ObjectCodec, range: &KeyRange, command: Command, loaded: &mpsc::Sender<Loaded>) -> Option<u64> {
    match command {
        Command::Adopt(r, reply) => {
            let followed = range.ranges();
            if followed.covers(&r) {
                let _ = reply.send(Ok(cache.synced()));
                return None;
            }
            // Loaded in the background while this loop goes on following the other ranges;
            // joined when the load comes back (`adopt::finish`).
            adopt::start_load(storage.clone(), codec.clone(), range, followed, r, cache.synced(), reply, loaded.clone());
            None
        }
        Command::Release(r, reply) => {
            range.set(range.ranges().without(r));
            let gone = cache.release(|o| r.contains(placement_hash(&range.group, &range.plural, o.namespace(), o.name())));
            tracing::info!(resource = %range.plural, range = %r, objects = gone, "let a range go");
            let _ = reply.send(gone);
            // Its keys are dropped by the filter; the watch may go on as it is.
            None
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
