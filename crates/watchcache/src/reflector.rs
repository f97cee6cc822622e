//! Keeps a [`WatchCache`] in step with one resource's keys in a set of hash ranges: list at a
//! revision, then watch from it; apply events in order; turn in-band progress marks into the
//! synced revision; request progress when a reader waits; relist when the watch breaks or its
//! revision was compacted. While it runs, it can take over a range and let one go
//! ([`Command`], RFC 0006) without relisting what it already holds.

use crate::cache::{PastChange, WatchCache};
use crate::filter::Owned;
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
    pub group: &'static str,
    pub plural: &'static str,
    pub ranges: Arc<RwLock<RangeSet>>,
}

impl KeyRange {
    /// `group`/`plural` keys in `ranges`.
    pub fn new(group: &'static str, plural: &'static str, ranges: RangeSet) -> Self {
        Self { group, plural, ranges: Arc::new(RwLock::new(ranges)) }
    }

    /// The ranges now followed.
    pub fn ranges(&self) -> RangeSet {
        self.ranges.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, ranges: RangeSet) {
        *self.ranges.write().unwrap_or_else(|p| p.into_inner()) = ranges;
    }

    /// The etcd key range spanning every followed range (one watch stream; keys in a gap
    /// between ranges are dropped by [`KeyRange::owns_key`]).
    fn hull(&self) -> (Vec<u8>, Vec<u8>) {
        let set = self.ranges();
        let rs = set.ranges();
        let hull = match (rs.first(), rs.last()) {
            (Some(a), Some(b)) => HashRange::new(a.start(), b.end()).expect("a non-empty hull"),
            // Nothing followed: a key range no object key falls in (hashes are hex digits, and
            // "x" sorts after them). Not "\0" to "\0", which etcd reads as every key.
            _ => {
                let prefix = shardplane_keyspace::etcd_layout::resource_prefix(self.group, self.plural);
                return (format!("{prefix}x").into_bytes(), format!("{prefix}y").into_bytes());
            }
        };
        range_keys(self.group, self.plural, hull)
    }

    fn owns_key(&self, key: &[u8]) -> bool {
        parse_object_key(self.group, self.plural, key).is_some_and(|(h, _, _)| self.ranges.read().unwrap_or_else(|p| p.into_inner()).contains(h))
    }
}

/// What a running reflector can be asked.
pub enum Command {
    /// Take over a range: load it at the synced revision S and follow it from there. Answers S
    /// (the cache holds the range's state from S on).
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
    let resource = codec.info().plural;
    let mut backoff = Duration::from_millis(100);
    while !shutdown.is_cancelled() {
        match sync_once(&storage, &cache, &codec, &range, &mut commands, &shutdown).await {
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

/// Lists the followed keys into the cache, then follows their changes until shutdown.
async fn sync_once(storage: &Storage, cache: &WatchCache, codec: &ObjectCodec, range: &KeyRange, commands: &mut mpsc::Receiver<Command>, shutdown: &CancellationToken) -> Result<(), StorageError> {
    let (start, end) = range.hull();
    let (kvs, rev) = storage.list_range(&start, &end, 0).await?;
    // Consumed here: the stored bytes must not outlive the decode (this function then follows
    // the watch for as long as the shard runs, and would keep a second copy of every object).
    let objects = decode_all(codec, kvs.into_iter().filter(|kv| range.owns_key(&kv.key)));
    cache.replace(objects, rev);
    tracing::debug!(resource = codec.info().plural, revision = rev, "watch cache loaded");
    let mut from = rev;
    loop {
        match follow(storage, cache, codec, range, from, commands, shutdown).await? {
            Followed::Stopped => return Ok(()),
            Followed::Restart(at) => from = at,
        }
    }
}

fn decode_all(codec: &ObjectCodec, kvs: impl Iterator<Item = shardplane_storage::Kv>) -> Vec<crate::object::CachedObject> {
    kvs.filter_map(|kv| codec.decode(&kv.value, kv.mod_revision).map_err(|e| tracing::error!(key = %String::from_utf8_lossy(&kv.key), error = %e, "skipping undecodable object")).ok()).collect()
}

/// Follows the watch from `from` until shutdown or until a command changes what is followed.
async fn follow(storage: &Storage, cache: &WatchCache, codec: &ObjectCodec, range: &KeyRange, from: u64, commands: &mut mpsc::Receiver<Command>, shutdown: &CancellationToken) -> Result<Followed, StorageError> {
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
            Some(command) = commands.recv() => {
                if let Some(at) = carry_out(storage, cache, codec, range, command).await {
                    // Everything up to `at` is applied; the stream's later events are dropped
                    // with it and come again on the new one.
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
async fn carry_out(storage: &Storage, cache: &WatchCache, codec: &ObjectCodec, range: &KeyRange, command: Command) -> Option<u64> {
    match command {
        Command::Adopt(r, reply) => {
            let followed = range.ranges();
            if followed.covers(&r) {
                let _ = reply.send(Ok(cache.synced()));
                return None;
            }
            // No event is applied while this runs, so the cache stays at `at`: the range read at
            // `at` joins it as one snapshot, and its changes come on the watch opened after `at`.
            let at = cache.synced();
            let (start, end) = range_keys(range.group, range.plural, r);
            match storage.list_range(&start, &end, at).await {
                Ok((kvs, _)) => {
                    // Keys of `r` the cache already follows are not read twice.
                    let new_key = |key: &[u8]| parse_object_key(range.group, range.plural, key).is_some_and(|(h, _, _)| !followed.contains(h));
                    let objects = decode_all(codec, kvs.into_iter().filter(|kv| new_key(&kv.key)));
                    // Their changes since the history's start, so that watches from before `at`
                    // still serve them; if etcd no longer has them, such watches get 410.
                    let past = match past_changes(storage, codec, &start, &end, cache.oldest(), at).await {
                        Ok(changes) => Some(changes.into_iter().filter(|(key, _)| new_key(key)).map(|(_, c)| c).collect()),
                        Err(e) => {
                            tracing::info!(resource = range.plural, range = %r, error = %e, "the range's recent changes are gone from etcd; older watches of it will get 410");
                            None
                        }
                    };
                    let joining = Owned { group: range.group, plural: range.plural, ranges: RangeSet::from_disjoint(vec![r]).expect("one range") };
                    if !cache.adopt(objects, at, joining, past) {
                        // Only this loop moves the cache, so this cannot happen; if it did, the
                        // range is refused rather than joined at the wrong revision.
                        let _ = reply.send(Err(StorageError::Etcd(format!("the cache moved past revision {at} while loading {r}"))));
                        return None;
                    }
                    range.set(followed.with(r));
                    tracing::info!(resource = range.plural, range = %r, revision = at, "took over a range");
                    let _ = reply.send(Ok(at));
                    Some(at)
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                    None
                }
            }
        }
        Command::Release(r, reply) => {
            range.set(range.ranges().without(r));
            let (group, plural) = (range.group, range.plural);
            let gone = cache.release(|o| r.contains(placement_hash(group, plural, o.namespace(), o.name())));
            tracing::info!(resource = plural, range = %r, objects = gone, "let a range go");
            let _ = reply.send(gone);
            // Its keys are dropped by the filter; the watch may go on as it is.
            None
        }
    }
}

/// How long reading a range's past changes from etcd may take.
const PAST_WITHIN: Duration = Duration::from_secs(10);

/// The changes of `[start, end)` after `from` up to `to`, from etcd's history, each with its
/// key; an error if etcd has compacted them away, cannot be read, or a change cannot be decoded.
async fn past_changes(storage: &Storage, codec: &ObjectCodec, start: &[u8], end: &[u8], from: u64, to: u64) -> Result<Vec<(Vec<u8>, PastChange)>, StorageError> {
    let mut out = Vec::new();
    if from >= to {
        return Ok(out);
    }
    let decode = |bytes: &[u8], rv: u64| codec.decode(bytes, rv).map_err(|e| StorageError::Etcd(format!("undecodable past change: {e}")));
    let read = async {
        let mut watch = storage.watch_range(start, end, from).await?;
        // etcd answers a progress request only once the watch has sent its history, so the
        // first mark at or past `to` says every change up to `to` has arrived; it drops
        // requests made before then, so they are repeated.
        let mut ask = tokio::time::interval(Duration::from_millis(50));
        loop {
            let item = tokio::select! {
                item = watch.next() => item?,
                _ = ask.tick() => {
                    watch.request_progress().await?;
                    continue;
                }
            };
            match item {
                Some(WatchItem::Events(events)) => {
                    for e in events {
                        if e.revision > to {
                            return Ok(());
                        }
                        let prev = e.prev.as_ref().map(|p| decode(&p.value, p.mod_revision)).transpose()?;
                        let object = match (e.deleted, &e.prev) {
                            (false, _) => decode(&e.kv.value, e.revision)?,
                            (true, Some(p)) => decode(&p.value, e.revision)?,
                            (true, None) => return Err(StorageError::Etcd("a past delete came without its object".into())),
                        };
                        out.push((e.kv.key, PastChange { object, prev, deleted: e.deleted }));
                    }
                }
                Some(WatchItem::Progress(r)) if r >= to => return Ok(()),
                Some(WatchItem::Progress(_)) => {}
                None => return Err(StorageError::Etcd("watch stream ended".into())),
            }
        }
    };
    tokio::time::timeout(PAST_WITHIN, read).await.map_err(|_| StorageError::Etcd(format!("reading changes after {from} took over {PAST_WITHIN:?}")))??;
    Ok(out)
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
