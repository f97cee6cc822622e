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
use shardplane_storage::follow::{self, FollowOptions, Followed, Follower};
use shardplane_storage::{Storage, StorageError, WatchEvent};
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

/// Runs until `shutdown`: keeps `cache` equal to etcd's `range`, decoded by `codec`, and
/// carries out `commands`. The loop is storage's list–watch–relist follower
/// ([`follow::follow_with`]); a command or a finished load that changes the followed ranges
/// makes it watch the new ranges from the revision the cache has reached, without relisting.
pub async fn run(storage: Storage, cache: Arc<WatchCache>, codec: ObjectCodec, range: KeyRange, commands: mpsc::Receiver<Command>, shutdown: CancellationToken) {
    let options = FollowOptions {
        what: format!("watch cache of {}", codec.info().plural),
        retry: Duration::from_millis(100),
        max_retry: Duration::from_secs(5),
        progress: Some(cache.progress_wanted()),
        stop: shutdown,
    };
    let evict = tokio::time::interval(Duration::from_secs(1));
    let reflecting = Reflecting { storage: &storage, cache: &cache, codec: &codec, range: &range, commands, loads: Loads::new(), evict };
    follow::follow_with(&storage, reflecting, options).await;
}

/// A reflector's state while it follows etcd.
struct Reflecting<'a> {
    storage: &'a Storage,
    cache: &'a WatchCache,
    codec: &'a ObjectCodec,
    range: &'a KeyRange,
    commands: mpsc::Receiver<Command>,
    loads: Loads,
    /// Expired history is dropped once a second.
    evict: tokio::time::Interval,
}

/// What a reflector waits on besides etcd.
enum Signal {
    Command(Command),
    Loaded(Loaded),
    Evict,
}

impl Follower for Reflecting<'_> {
    type Signal = Signal;

    fn keys(&self) -> (Vec<u8>, Vec<u8>) {
        self.range.hull()
    }

    async fn take(&mut self, followed: Followed) -> Result<(), String> {
        let (cache, codec, range) = (self.cache, self.codec, self.range);
        match followed {
            Followed::Listed { kvs, revision } => {
                // Consumed here: the stored bytes must not outlive the decode (the follower
                // runs for as long as the shard does and would keep a second copy of every
                // object).
                let objects = decode_all(codec, kvs.into_iter().filter(|kv| range.owns_key(&kv.key)).collect()).await;
                // The history before the list goes in with it, in one step (RFC 0016).
                let (from, past) = adopt::past_on_load(self.storage, codec, range, revision).await;
                cache.replace_with_past(objects, (revision, from), past);
                tracing::debug!(resource = %codec.info().plural, revision, history_from = from, "watch cache loaded");
            }
            Followed::Changed(events) => {
                for e in events {
                    record(cache, codec, range, e);
                }
            }
            Followed::Progress(r) => cache.progress_answer(r),
        }
        Ok(())
    }

    async fn next_signal(&mut self) -> Signal {
        // Each arm is cancel-safe (a received value is returned at once).
        tokio::select! {
            Some(command) = self.commands.recv() => Signal::Command(command),
            Some(done) = self.loads.done.recv() => Signal::Loaded(done),
            _ = self.evict.tick() => Signal::Evict,
        }
    }

    async fn on_signal(&mut self, signal: Signal) -> Result<Option<u64>, String> {
        Ok(match signal {
            Signal::Command(command) => carry_out(self.storage, self.cache, self.codec, self.range, command, self.loads.sender()).await,
            // Everything up to the answer is applied, the new range included.
            Signal::Loaded(done) => adopt::finish(self.storage, self.cache, self.codec, self.range, done).await,
            Signal::Evict => {
                self.cache.evict_expired();
                None
            }
        })
    }
}

/// Decodes `kvs` on tokio's blocking pool, not on an async worker: a list of tens of thousands
/// of objects is seconds of CPU, and with a load on each of a shard's workers no other task of
/// the shard ran for as long, its membership lease's keepalive among them. The lease (10 s)
/// ran out during loads and the shard dropped out of the membership (RFC 0006).
pub(crate) async fn decode_all(codec: &ObjectCodec, kvs: Vec<shardplane_storage::Kv>) -> Vec<crate::object::CachedObject> {
    let (codec, span) = (codec.clone(), tracing::Span::current());
    let decode = move || {
        let _in = span.enter();
        kvs.into_iter().filter_map(|kv| codec.decode(&kv.value, kv.mod_revision).map_err(|e| tracing::error!(key = %String::from_utf8_lossy(&kv.key), error = %e, "skipping undecodable object")).ok()).collect()
    };
    match tokio::task::spawn_blocking(decode).await {
        Ok(objects) => objects,
        // A panic in a decoder goes on here, as it would have inline.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Cancelled: the runtime is shutting down and drops this task too.
        Err(_) => std::future::pending().await,
    }
}

/// Records one change of the followed keys in the cache (a key outside them only moves the
/// cache's revision on).
fn record(cache: &WatchCache, codec: &ObjectCodec, range: &KeyRange, e: WatchEvent) {
    if !range.owns_key(&e.kv.key) {
        cache.progress(e.revision);
        return;
    }
    let decoded = if e.deleted {
        // The deleted object: its last state, stamped with the deletion revision (from etcd's
        // prev_kv, or from the cache if etcd sent none).
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
            adopt::start_load(storage.clone(), codec.clone(), range, followed, adopt::Asked { r, at: cache.synced(), reply }, loaded.clone());
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
