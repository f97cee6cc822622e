//! Taking over a range while the cache runs (RFC 0006, step 2). The range is read at one
//! revision in the background, page by page and paced, while the reflector goes on following
//! what it holds; then, between two events, it is brought up to the cache's revision with its
//! changes since the load, and its recent history joins the cache's ([`BACKFILL`]), so that a
//! watch resumed from a little before the move still serves.

use crate::cache::{PastChange, WatchCache};
use crate::filter::Owned;
use crate::object::{CachedObject, ObjectCodec};
use crate::reflector::{decode_all, KeyRange};
use shardplane_keyspace::etcd_layout::{parse_object_key, range_keys};
use shardplane_keyspace::{HashRange, RangeSet};
use shardplane_storage::{HistoryBound, RangeReader, Storage, StorageError};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// How far back a range taken over joins the cache's history: watches resumed from before
/// that, which may show the range, get 410 (those after a shard's death resume within its
/// lease, seconds).
pub const BACKFILL: Duration = Duration::from_secs(30);
/// How far back a cache that has just listed reads its keys' history from etcd: as far as the
/// store's last 10,000 changes (of every key) reach, or fewer if they wrote more than 64 MiB.
/// Bounded by changes, not revisions, because that is what the read costs etcd; by bytes,
/// because that is what the history holds (about twice them: each change with the state before
/// it). `Storage::history_floor`, RFC 0016.
pub const HISTORY_ON_LOAD: HistoryBound = HistoryBound { changes: 10_000, bytes: 64 << 20 };
/// Keys read per page of a load.
const PAGE: i64 = 50;

/// A load that came back.
pub(crate) struct Loaded {
    r: HashRange,
    /// The revision it was read at, and what was read.
    at: u64,
    objects: Result<Vec<CachedObject>, StorageError>,
    reply: oneshot::Sender<Result<u64, StorageError>>,
}

/// Loads under way: each sends its result here.
pub(crate) struct Loads {
    tx: mpsc::Sender<Loaded>,
    pub(crate) done: mpsc::Receiver<Loaded>,
}

impl Loads {
    pub(crate) fn new() -> Self {
        // One load per range at a time (the shard asks for one range at a time).
        let (tx, done) = mpsc::channel(4);
        Self { tx, done }
    }

    pub(crate) fn sender(&self) -> &mpsc::Sender<Loaded> {
        &self.tx
    }
}

/// A range to take over, read at revision `at`; `reply` is answered once it has joined.
pub(crate) struct Asked {
    pub r: HashRange,
    pub at: u64,
    pub reply: oneshot::Sender<Result<u64, StorageError>>,
}

/// Starts reading the asked range (less what `followed` already covers) in the background; the
/// result comes back on `done`.
pub(crate) fn start_load(storage: Storage, codec: ObjectCodec, range: &KeyRange, followed: RangeSet, asked: Asked, done: mpsc::Sender<Loaded>) {
    let Asked { r, at, reply } = asked;
    let (group, plural) = (range.group.clone(), range.plural.clone());
    tokio::spawn(async move {
        let objects = load_paced(&storage, &codec, &group, &plural, &followed, r, at).await;
        let _ = done.send(Loaded { r, at, objects, reply }).await;
    });
}

/// The turn to read a page of a load: one page at a time in the whole process, held through
/// the rest after it, so that the loads of every cache together (a shard takes a range over in
/// all its caches at once) use at most about half a core, as one load alone does.
static PAGE_TURN: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Reads `r`'s objects at `at`, page by page (in pieces when it is large: RFC 0018), decoding
/// as it goes; after each page it rests as long as the page took, still holding the page turn,
/// so loads use at most about half a core and the shard's requests (and everything else on the
/// machine) keep their share.
async fn load_paced(storage: &Storage, codec: &ObjectCodec, group: &str, plural: &str, followed: &RangeSet, r: HashRange, at: u64) -> Result<Vec<CachedObject>, StorageError> {
    let (start, end) = range_keys(group, plural, r);
    let mut reader = RangeReader::new(&start, &end, at, PAGE);
    let mut out = Vec::new();
    loop {
        let _turn = PAGE_TURN.acquire().await.expect("never closed");
        let began = Instant::now();
        let Some(kvs) = reader.next_page(storage).await? else { return Ok(out) };
        out.extend(decode_all(codec, kvs.into_iter().filter(|kv| new_key(group, plural, followed, &kv.key)).collect()).await);
        tokio::time::sleep(began.elapsed()).await;
    }
}

/// Whether `key` is an object key of the resource outside `followed` (keys the cache already
/// follows are not taken twice).
fn new_key(group: &str, plural: &str, followed: &RangeSet, key: &[u8]) -> bool {
    parse_object_key(group, plural, key).is_some_and(|(h, _, _)| !followed.contains(h))
}

/// For a list at `rev`: the followed keys' changes among the store's last [`HISTORY_ON_LOAD`]
/// changes (back to etcd's compaction at most), and the revision they start after, for the
/// cache's history ([`WatchCache::replace_with_past`]), so that a client resuming a watch from
/// an RV it had before this shard started (or relisted) is served, not sent 410. Best effort:
/// without them (`rev` and nothing) the history simply starts at `rev`.
pub(crate) async fn past_on_load(storage: &Storage, codec: &ObjectCodec, range: &KeyRange, rev: u64) -> (u64, Vec<PastChange>) {
    let (start, end) = range.hull();
    let mut from = match storage.history_floor(rev, HISTORY_ON_LOAD).await {
        Ok(floor) => floor.max(1),
        Err(e) => {
            tracing::debug!(resource = %range.plural, error = %e, "no history read on load");
            return (rev, Vec::new());
        }
    };
    for _ in 0..2 {
        if from >= rev {
            break;
        }
        match past_changes(storage, codec, &start, &end, from, rev).await {
            Ok(changes) => {
                let mine: Vec<PastChange> = changes.into_iter().filter(|(key, _)| range.owns_key(key)).map(|(_, c)| c).collect();
                tracing::debug!(resource = %range.plural, from, to = rev, changes = mine.len(), "history read on load");
                return (from, mine);
            }
            // Compacted: from the compaction point on.
            Err(StorageError::Compacted { compacted, .. }) if compacted > from => from = compacted,
            Err(e) => {
                tracing::debug!(resource = %range.plural, error = %e, "no history read on load");
                break;
            }
        }
    }
    (rev, Vec::new())
}

/// Joins a loaded range to the cache at its synced revision S, between two events: reads the
/// range's changes since the load (and since [`BACKFILL`] ago) from etcd, applies those after
/// the load to it, and hands state and changes to [`WatchCache::adopt`]. Answers the caller
/// and returns S (the reflector then watches from S with the range), or None if it failed.
pub(crate) async fn finish(storage: &Storage, cache: &WatchCache, codec: &ObjectCodec, range: &KeyRange, loaded: Loaded) -> Option<u64> {
    let Loaded { r, at, objects, reply } = loaded;
    let fail = |reply: oneshot::Sender<Result<u64, StorageError>>, e: StorageError| {
        tracing::warn!(resource = %range.plural, range = %r, error = %e, "could not take over a range");
        let _ = reply.send(Err(e));
        None
    };
    let objects = match objects {
        Ok(o) => o,
        Err(e) => return fail(reply, e),
    };
    let followed = range.ranges();
    let now = cache.synced();
    let (start, end) = range_keys(&range.group, &range.plural, r);
    // The recent history, if etcd still has it; the changes since the load in any case.
    let recent = cache.revision_before(BACKFILL).max(cache.oldest()).min(at);
    let (past_from, changes) = match past_changes(storage, codec, &start, &end, recent, now).await {
        Ok(c) => (recent, c),
        Err(e) if recent < at => {
            tracing::info!(resource = %range.plural, range = %r, error = %e, "the range's recent changes are gone from etcd; older watches of it will get 410");
            match past_changes(storage, codec, &start, &end, at, now).await {
                Ok(c) => (at, c),
                Err(e) => return fail(reply, e),
            }
        }
        Err(e) => return fail(reply, e),
    };
    let changes: Vec<PastChange> = changes.into_iter().filter(|(key, _)| new_key(&range.group, &range.plural, &followed, key)).map(|(_, c)| c).collect();
    // The state at `now`: the load, with the changes after it.
    let mut state: BTreeMap<Box<str>, CachedObject> = objects.into_iter().map(|o| (o.key.clone(), o)).collect();
    for c in changes.iter().filter(|c| c.object.rv > at) {
        if c.deleted {
            state.remove(&c.object.key);
        } else {
            state.insert(c.object.key.clone(), c.object.clone());
        }
    }
    let joining = Owned { group: range.group.clone(), plural: range.plural.clone(), ranges: RangeSet::from_disjoint(vec![r]).expect("one range") };
    if !cache.adopt(state.into_values().collect(), now, joining, past_from, changes) {
        // Only the reflector's loop moves the cache, and it is here.
        return fail(reply, StorageError::Etcd(format!("the cache moved past revision {now} while taking over {r}")));
    }
    range.set(followed.with(r));
    tracing::info!(resource = %range.plural, range = %r, loaded_at = at, revision = now, history_from = past_from, "took over a range");
    let _ = reply.send(Ok(now));
    Some(now)
}

/// How long reading a range's past changes from etcd may take.
const PAST_WITHIN: Duration = Duration::from_secs(10);

/// The changes of `[start, end)` after `from` up to `to`, from etcd's history, each with its
/// key; an error if etcd has compacted them away, cannot be read, or a change cannot be decoded.
pub(crate) async fn past_changes(storage: &Storage, codec: &ObjectCodec, start: &[u8], end: &[u8], from: u64, to: u64) -> Result<Vec<(Vec<u8>, PastChange)>, StorageError> {
    let mut out = Vec::new();
    let decode = |bytes: &[u8], rv: u64| codec.decode(bytes, rv).map_err(|e| StorageError::Etcd(format!("undecodable past change: {e}")));
    storage
        .changes_between((start, end, true), (from, to), PAST_WITHIN, |e| {
            let prev = e.prev.as_ref().map(|p| decode(&p.value, p.mod_revision)).transpose()?;
            let object = match (e.deleted, &e.prev) {
                (false, _) => decode(&e.kv.value, e.revision)?,
                (true, Some(p)) => decode(&p.value, e.revision)?,
                (true, None) => return Err(StorageError::Etcd("a past delete came without its object".into())),
            };
            out.push((e.kv.key, PastChange { object, prev, deleted: e.deleted }));
            Ok(())
        })
        .await?;
    Ok(out)
}
