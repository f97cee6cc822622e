//! The cache proper: current objects, bounded history, LIST at a revision, watcher fan-out.

use crate::filter::{Filter, Owned};
use crate::object::CachedObject;
use shardplane_keyspace::RangeSet;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Notify};

/// Bounds of one cache.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// At most this many events are kept; the oldest is evicted past it.
    pub history_max_events: usize,
    /// Events older than this are evicted (keeps an idle cache small). At least 75 s, as upstream.
    pub history_window: Duration,
    /// Buffer of each watcher; a watcher whose buffer is full is closed.
    pub watcher_buffer: usize,
}

/// How many notes of the synced revision a cache keeps, one a second: two minutes, more than
/// any age [`WatchCache::revision_before`] is asked for (a move's backfill is 30 s).
pub const MARKS_KEPT: usize = 120;

impl Default for CacheConfig {
    fn default() -> Self {
        Self { history_max_events: 100_000, history_window: Duration::from_secs(150), watcher_buffer: 1024 }
    }
}

/// The type of a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// The watch event `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in the history.
#[derive(Debug)]
pub struct CacheEvent {
    /// Revision of the change.
    pub rv: u64,
    pub kind: EventType,
    /// The object after the change; for a delete, the last state stamped with the deletion RV.
    pub object: Arc<CachedObject>,
    /// The object before the change.
    pub prev: Option<Arc<CachedObject>>,
    at: Instant,
}

/// A change of a range before its cache took it over, read from etcd (see
/// [`WatchCache::adopt`]).
#[derive(Debug)]
pub struct PastChange {
    /// The object after the change; for a delete, its last state stamped with the deletion RV.
    pub object: CachedObject,
    /// The object before the change (none for a create).
    pub prev: Option<CachedObject>,
    pub deleted: bool,
}

impl PastChange {
    fn into_event(self, at: Instant) -> Arc<CacheEvent> {
        let kind = match (self.deleted, &self.prev) {
            (true, _) => EventType::Deleted,
            (false, Some(_)) => EventType::Modified,
            (false, None) => EventType::Added,
        };
        Arc::new(CacheEvent { rv: self.object.rv, kind, object: Arc::new(self.object), prev: self.prev.map(Arc::new), at })
    }
}

/// What a watcher receives.
#[derive(Clone, Debug)]
pub enum WatchMsg {
    /// A change as this watcher's filter sees it (selector transitions become ADDED/DELETED).
    Event(EventType, Arc<CachedObject>),
    /// Every change up to this revision has been delivered.
    Progress(u64),
    /// A change at this revision for a watcher with an index (RFC 0015): for each value of the
    /// indexed field it concerns, the event the watchers of that value see, as if each had the
    /// filter narrowed to that value. One or two entries, never two for one value.
    Addressed(u64, Vec<Addressed>),
}

/// One change as the watchers of one value of an indexed field see it.
#[derive(Clone, Debug)]
pub struct Addressed {
    /// The field's value.
    pub to: Box<str>,
    pub kind: EventType,
    pub object: Arc<CachedObject>,
}

/// Why a read could not be served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheError {
    /// The revision is older than the history holds.
    TooOld { requested: u64, oldest: u64 },
    /// The revision is newer than the cache has reached.
    TooNew { requested: u64, current: u64 },
    /// The cache has not loaded yet.
    NotReady,
}

/// One page of a LIST.
#[derive(Debug)]
pub struct ListPage {
    pub items: Vec<Arc<CachedObject>>,
    /// The revision the page shows.
    pub rv: u64,
    /// When more items match: the key of the last item returned (resume after it).
    pub continue_after: Option<Box<str>>,
    /// How many more items match, when counted.
    pub remaining: Option<u64>,
}

/// An open watch: the backlog (history replay or initial state), then live messages.
pub struct Watcher {
    backlog: VecDeque<WatchMsg>,
    rx: mpsc::Receiver<WatchMsg>,
    /// The revision the watch starts after (the initial state's revision, if it sent state).
    pub start_rv: u64,
    /// How many initial-state events the backlog starts with.
    pub initial_events: usize,
}

impl Watcher {
    /// The next message; `None` once the cache closed this watcher (slow, or relisting).
    pub async fn next(&mut self) -> Option<WatchMsg> {
        if let Some(m) = self.backlog.pop_front() {
            return Some(m);
        }
        self.rx.recv().await
    }
}

struct Slot {
    filter: Filter,
    tx: mpsc::Sender<WatchMsg>,
    progress: bool,
}

/// What the cache holds, under its lock: the objects, the bounded history, and the revisions
/// they reach.
struct Contents {
    objects: BTreeMap<Box<str>, Arc<CachedObject>>,
    history: VecDeque<Arc<CacheEvent>>,
    /// Every event with a revision above this is in `history`...
    history_start: u64,
    /// ...except for ranges taken over while running (RFC 0006), whose changes are there only
    /// from the revision each joined at: a LIST or watch that may show such a range is refused
    /// below it. Dropped once the history starts above it.
    joined: Vec<(Owned, u64)>,
    /// The last revision of history read back from etcd rather than seen live
    /// ([`WatchCache::replace_with_past`]): when those changes happened is unknown, so they count as
    /// older than any age.
    backfilled_to: u64,
    /// The synced revision as it was at moments a second or more apart, oldest first, at most
    /// [`MARKS_KEPT`]: what [`WatchCache::revision_before`] answers when the history holds no
    /// change as old as asked (a cache whose keys are idle still moves its revision on).
    marks: VecDeque<(Instant, u64)>,
    synced: u64,
    ready: bool,
    bytes: usize,
    watchers: Vec<Slot>,
    terminated_watchers: u64,
}

/// Counters for /metrics.
#[derive(Clone, Debug, Default)]
pub struct CacheStats {
    pub objects: usize,
    pub bytes: usize,
    pub history: usize,
    pub watchers: usize,
    pub synced: u64,
    pub terminated_watchers: u64,
}

/// The watch cache of one resource over one set of ranges.
pub struct WatchCache {
    inner: RwLock<Contents>,
    config: CacheConfig,
    synced_tx: watch::Sender<u64>,
    progress_wanted: Arc<Notify>,
}

fn convert(kind: EventType, object: &Arc<CachedObject>, prev: Option<&Arc<CachedObject>>, filter: &Filter) -> Option<WatchMsg> {
    if let Some(field) = &filter.index {
        return addressed(kind, object, prev, filter, field);
    }
    let now = filter.matches(object);
    match kind {
        EventType::Added => now.then(|| WatchMsg::Event(EventType::Added, object.clone())),
        EventType::Deleted => now.then(|| WatchMsg::Event(EventType::Deleted, object.clone())),
        EventType::Modified => {
            let before = prev.is_some_and(|p| filter.matches(p));
            match (before, now) {
                (true, true) => Some(WatchMsg::Event(EventType::Modified, object.clone())),
                (false, true) => Some(WatchMsg::Event(EventType::Added, object.clone())),
                (true, false) => Some(WatchMsg::Event(EventType::Deleted, object.clone())),
                (false, false) => None,
            }
        }
    }
}

/// [`convert`] for every value of `field` at once: the same transitions a filter narrowed to
/// each value would give (an object whose value changes leaves one value's watchers, DELETED,
/// and joins the other's, ADDED).
fn addressed(kind: EventType, object: &Arc<CachedObject>, prev: Option<&Arc<CachedObject>>, filter: &Filter, field: &str) -> Option<WatchMsg> {
    let to = |kind, value: &str| Addressed { to: value.into(), kind, object: object.clone() };
    let now = filter.matches(object).then(|| object.field(field));
    let mut out = Vec::new();
    match kind {
        EventType::Added | EventType::Deleted => out.extend(now.map(|v| to(kind, v))),
        EventType::Modified => match (prev.filter(|p| filter.matches(p)).map(|p| p.field(field)), now) {
            (Some(before), Some(now)) if before == now => out.push(to(EventType::Modified, now)),
            (before, now) => {
                out.extend(before.map(|v| to(EventType::Deleted, v)));
                out.extend(now.map(|v| to(EventType::Added, v)));
            }
        },
    }
    (!out.is_empty()).then(|| WatchMsg::Addressed(object.rv, out))
}

impl WatchCache {
    /// An empty, not yet ready cache.
    pub fn new(config: CacheConfig) -> Self {
        Self {
            inner: RwLock::new(Contents {
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                history_start: 0,
                backfilled_to: 0,
                marks: VecDeque::new(),
                joined: Vec::new(),
                synced: 0,
                ready: false,
                bytes: 0,
                watchers: Vec::new(),
                terminated_watchers: 0,
            }),
            config,
            synced_tx: watch::channel(0).0,
            progress_wanted: Arc::new(Notify::new()),
        }
    }

    /// Signalled while a reader waits for the cache to catch up; the reflector answers with an
    /// etcd progress request.
    pub fn progress_wanted(&self) -> Arc<Notify> {
        self.progress_wanted.clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Contents> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Contents> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the whole state with a fresh list at `rv`. History restarts at `rv`; open watchers
    /// are closed because they may have missed changes (they resume or get 410).
    pub fn replace(&self, objects: Vec<CachedObject>, rv: u64) {
        self.replace_with_past(objects, (rv, rv), Vec::new());
    }

    /// [`WatchCache::replace`] of a list at `rv`, with the history starting at `from` and holding
    /// `past` (every change of its keys after `from` up to the list, read from etcd) in the same
    /// step: a watch resumed from before the list is never answered 410 between the
    /// two (a shard that just started, RFC 0016).
    pub fn replace_with_past(&self, objects: Vec<CachedObject>, (rv, from): (u64, u64), past: Vec<PastChange>) {
        let mut g = self.write();
        g.bytes = objects.iter().map(|o| o.bytes.len()).sum();
        g.objects = objects.into_iter().map(|o| (o.key.clone(), Arc::new(o))).collect();
        g.history.clear();
        g.history_start = rv;
        g.joined.clear();
        g.synced = rv;
        g.ready = true;
        let closed = g.watchers.len() as u64;
        g.terminated_watchers += closed;
        g.watchers.clear();
        if from < rv {
            Self::fill(&mut g, &self.config, from, past);
        }
        drop(g);
        self.synced_tx.send_replace(rv);
    }

    /// Takes over `objects`, the state at `rv` of the keys of `joining` (ranges its shard takes
    /// over, RFC 0006), without events: they did not change, they moved. `rv` must be the synced
    /// revision, so the cache stays one snapshot; the caller follows the new keys' changes from
    /// `rv` on. `past`: every change of those keys after `past_from` up to `rv`, read from
    /// etcd, which joins the history so that watches and LISTs from then on still serve; from
    /// before `past_from`, those that may show the new keys are refused (410). Open watchers
    /// never start seeing the new keys: they were opened on what the shard held then, and a
    /// merged stream counts on each shard sending exactly that. Returns false (and changes
    /// nothing) if the cache has moved past `rv`.
    pub fn adopt(&self, objects: Vec<CachedObject>, rv: u64, joining: Owned, past_from: u64, past: Vec<PastChange>) -> bool {
        let mut g = self.write();
        if rv != g.synced || !g.ready {
            return false;
        }
        for o in objects {
            g.bytes += o.bytes.len();
            if let Some(old) = g.objects.insert(o.key.clone(), Arc::new(o)) {
                g.bytes -= old.bytes.len();
            }
        }
        for w in &mut g.watchers {
            let before = w.filter.owned.take().map_or_else(RangeSet::full, |o| o.ranges);
            let ranges = joining.ranges.ranges().iter().fold(before, |set, r| set.without(*r));
            w.filter.owned = Some(Owned { group: joining.group.clone(), plural: joining.plural.clone(), ranges });
        }
        // The past changes join the history in revision order, each dated like the event
        // before it, so the history stays in time order for eviction.
        let start = g.history_start;
        let mut at = g.history.front().map_or_else(Instant::now, |e| e.at);
        let mut merged: VecDeque<Arc<CacheEvent>> = VecDeque::with_capacity(g.history.len() + past.len());
        let mut past = past.into_iter().filter(|c| c.object.rv > start.max(past_from) && c.object.rv <= rv).peekable();
        for e in std::mem::take(&mut g.history) {
            while past.peek().is_some_and(|p| p.object.rv < e.rv) {
                merged.push_back(past.next().expect("peeked").into_event(at));
            }
            at = e.at;
            merged.push_back(e);
        }
        merged.extend(past.map(|p| p.into_event(at)));
        g.history = merged;
        Self::evict(&mut g, &self.config);
        if past_from > g.history_start {
            g.joined.push((joining, past_from));
        }
        true
    }

    /// Gives a freshly listed cache the history that led to its state: `past`, every change of
    /// its keys after `from` up to the synced revision (read from etcd), so that watches and
    /// LISTs from `from` on are served, as after a restart a client resumes from the RV it had.
    fn fill(g: &mut Contents, config: &CacheConfig, from: u64, past: Vec<PastChange>) {
        let now = Instant::now();
        let synced = g.synced;
        g.history = past.into_iter().filter(|c| c.object.rv > from && c.object.rv <= synced).map(|c| c.into_event(now)).collect();
        g.history_start = from;
        g.backfilled_to = synced;
        Self::evict(g, config);
    }

    /// The newest revision the cache had reached `age` ago (the history's start if it knows
    /// nothing that old): every change after it is younger than `age`. Known from the history's
    /// events and from the synced revision noted once a second: a cache whose own keys have not
    /// changed for longer than `age` still answers a revision from about `age` ago, not the one
    /// it loaded at (a range taken over would otherwise read every change since the shard
    /// started from etcd's history, more with every move: RFC 0006). Changes read back by
    /// [`WatchCache::replace_with_past`] count as older than any age (their time is unknown;
    /// stamped with their load time, they would make a range taken over soon after a load read
    /// the whole backfilled history from etcd between two events, stalling the cache).
    pub fn revision_before(&self, age: Duration) -> u64 {
        let g = self.read();
        let Some(cutoff) = Instant::now().checked_sub(age) else { return g.history_start.max(g.backfilled_to) };
        let younger = g.history.partition_point(|e| e.at <= cutoff);
        let before = if younger == 0 { g.history_start } else { g.history[younger - 1].rv };
        let marked = g.marks.iter().rev().find(|(at, _)| *at <= cutoff).map_or(0, |(_, rv)| *rv);
        before.max(g.backfilled_to).max(marked)
    }

    /// The oldest revision from which the history has every change `filter` may select.
    fn history_floor(g: &Contents, filter: &Filter) -> u64 {
        let may_show = |j: &Owned| filter.owned.as_ref().is_none_or(|o| j.ranges.ranges().iter().any(|r| o.ranges.overlaps(r)));
        g.joined.iter().filter(|(j, _)| may_show(j)).map(|(_, at)| *at).fold(g.history_start, u64::max)
    }

    /// Lets go, without events, of the objects `leaving` selects (a range its shard handed to
    /// another, RFC 0006); their past events stay in the history. Open watchers are ended: they
    /// may follow the keys that left, which they would no longer hear of (they resume, and
    /// their shard then shows them only what it owns). Returns how many objects left.
    pub fn release(&self, leaving: impl Fn(&CachedObject) -> bool) -> usize {
        let mut g = self.write();
        let gone: Vec<Box<str>> = g.objects.iter().filter(|(_, o)| leaving(o)).map(|(k, _)| k.clone()).collect();
        for k in &gone {
            if let Some(o) = g.objects.remove(k) {
                g.bytes -= o.bytes.len();
            }
        }
        let closed = g.watchers.len() as u64;
        g.terminated_watchers += closed;
        g.watchers.clear();
        gone.len()
    }

    /// Records a put (`deleted = false`) or a delete of `object` at `object.rv`: the event joins
    /// the history and the object the current state.
    pub fn record(&self, object: CachedObject, deleted: bool) {
        let rv = object.rv;
        let object = Arc::new(object);
        let mut g = self.write();
        let prev = g.objects.get(&object.key).cloned();
        // Already applied: a replayed event after a relist. One revision may change several
        // keys (an etcd lease's expiry deletes all its keys at once, RFC 0015), so an event at
        // the synced revision is applied unless this key already shows it.
        let shows_it = match (&prev, deleted) {
            (Some(p), false) => p.rv >= rv,
            (None, false) => false,
            (Some(p), true) => p.rv >= rv,
            (None, true) => true,
        };
        if rv < g.synced || (rv == g.synced && shows_it) {
            return;
        }
        let kind = match (deleted, &prev) {
            (true, None) => {
                g.synced = rv;
                drop(g);
                self.synced_tx.send_replace(rv);
                return;
            }
            (true, Some(_)) => EventType::Deleted,
            (false, Some(_)) => EventType::Modified,
            (false, None) => EventType::Added,
        };
        if let Some(p) = &prev {
            g.bytes -= p.bytes.len();
        }
        if deleted {
            g.objects.remove(&object.key);
        } else {
            g.bytes += object.bytes.len();
            g.objects.insert(object.key.clone(), object.clone());
        }
        let ev = Arc::new(CacheEvent { rv, kind, object, prev, at: Instant::now() });
        let inner = &mut *g;
        let before = inner.watchers.len();
        inner.watchers.retain(|w| match convert(ev.kind, &ev.object, ev.prev.as_ref(), &w.filter) {
            Some(m) => w.tx.try_send(m).is_ok(),
            None => !w.tx.is_closed(),
        });
        inner.terminated_watchers += (before - inner.watchers.len()) as u64;
        inner.history.push_back(ev);
        inner.synced = rv;
        Self::evict(inner, &self.config);
        drop(g);
        self.synced_tx.send_replace(rv);
    }

    /// Records that every change up to `rv` has been applied, and tells watchers that asked.
    /// `answer`: this is etcd's answer to a progress request, so watchers are told even if the
    /// cache had already reached `rv` (a reader may be waiting on a mark it already has: with
    /// no write since, the revision does not move).
    pub fn progress(&self, rv: u64) {
        self.mark(rv, false);
    }

    /// [`WatchCache::progress`] for etcd's answer to a progress request.
    pub fn progress_answer(&self, rv: u64) {
        self.mark(rv, true);
    }

    fn mark(&self, rv: u64, answer: bool) {
        let mut g = self.write();
        let moved = rv > g.synced;
        if !moved && !answer {
            return;
        }
        g.synced = g.synced.max(rv);
        let mark = g.synced;
        for w in g.watchers.iter().filter(|w| w.progress) {
            // A progress mark is advisory: when the buffer is full the next event closes the watcher.
            let _ = w.tx.try_send(WatchMsg::Progress(mark));
        }
        drop(g);
        if moved {
            self.synced_tx.send_replace(mark);
        }
    }

    fn evict(g: &mut Contents, config: &CacheConfig) {
        let now = Instant::now();
        while let Some(front) = g.history.front() {
            if g.history.len() > config.history_max_events || now.duration_since(front.at) > config.history_window {
                g.history_start = front.rv;
                g.history.pop_front();
            } else {
                break;
            }
        }
        let start = g.history_start;
        g.joined.retain(|(_, at)| *at > start);
    }

    /// Evicts history older than the window (so an idle cache shrinks) and notes the synced
    /// revision for [`WatchCache::revision_before`]; called once a second.
    pub fn evict_expired(&self) {
        self.mark_time(Instant::now());
        let mut g = self.write();
        Self::evict(&mut g, &self.config);
    }

    /// Notes that the synced revision is what it is at `now` (the last [`MARKS_KEPT`] notes are
    /// kept).
    pub(crate) fn mark_time(&self, now: Instant) {
        let mut g = self.write();
        let synced = g.synced;
        if g.marks.len() == MARKS_KEPT {
            g.marks.pop_front();
        }
        g.marks.push_back((now, synced));
    }

    /// The cached object at (namespace, name), if any.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<CachedObject>> {
        self.read().objects.get(&*crate::object::cache_key(namespace, name)).cloned()
    }

    /// The synced revision.
    pub fn synced(&self) -> u64 {
        self.read().synced
    }

    /// Whether the initial list has loaded.
    pub fn ready(&self) -> bool {
        self.read().ready
    }

    /// The oldest revision a watch may start after or a LIST may be read at.
    pub fn oldest(&self) -> u64 {
        self.read().history_start
    }

    /// Counters.
    pub fn stats(&self) -> CacheStats {
        let g = self.read();
        CacheStats {
            objects: g.objects.len(),
            bytes: g.bytes,
            history: g.history.len(),
            watchers: g.watchers.len(),
            synced: g.synced,
            terminated_watchers: g.terminated_watchers,
        }
    }

    /// Waits until the synced revision reaches `rv`, asking the reflector for etcd progress every
    /// 100 ms meanwhile (as kube-apiserver does). At the deadline: [`CacheError::TooNew`] with the
    /// revision reached, or [`CacheError::NotReady`] if the cache has not loaded yet.
    pub async fn wait_synced(&self, rv: u64, timeout: Duration) -> Result<(), CacheError> {
        let mut rx = self.synced_tx.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let cur = *rx.borrow_and_update();
            let ready = self.ready();
            if cur >= rv && ready {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                // A cache still loading is not behind: it is not there yet (upstream's 429
                // "storage is (re)initializing", not a 504 naming revision 0).
                return Err(if ready { CacheError::TooNew { requested: rv, current: cur } } else { CacheError::NotReady });
            }
            self.progress_wanted.notify_one();
            let tick = tokio::time::sleep(Duration::from_millis(100).min(deadline - tokio::time::Instant::now()));
            tokio::select! {
                _ = rx.changed() => {}
                _ = tick => {}
            }
        }
    }

    /// One page of the state at `at` (None: the synced revision), after key `after`, at most
    /// `limit` items; counts the rest when `count_remaining`.
    pub fn list(&self, at: Option<u64>, filter: &Filter, after: Option<&str>, limit: Option<usize>, count_remaining: bool) -> Result<ListPage, CacheError> {
        let g = self.read();
        if !g.ready {
            return Err(CacheError::NotReady);
        }
        let rv = at.unwrap_or(g.synced);
        if rv > g.synced {
            return Err(CacheError::TooNew { requested: rv, current: g.synced });
        }
        let oldest = Self::history_floor(&g, filter);
        if rv < oldest {
            return Err(CacheError::TooOld { requested: rv, oldest });
        }
        // State at rv = current state, except keys changed after rv, which take the value before
        // their first later change.
        let mut overlay: BTreeMap<&str, Option<&Arc<CachedObject>>> = BTreeMap::new();
        if rv < g.synced {
            let first_after = g.history.partition_point(|e| e.rv <= rv);
            for e in g.history.range(first_after..) {
                overlay.entry(&*e.object.key).or_insert(e.prev.as_ref());
            }
        }
        let ns_prefix = filter.namespace.as_ref().map(|ns| format!("{ns}\0"));
        let lower: Bound<&str> = match (after, ns_prefix.as_deref()) {
            (Some(a), Some(p)) if a >= p => Bound::Excluded(a),
            (_, Some(p)) => Bound::Included(p),
            (Some(a), None) => Bound::Excluded(a),
            (None, None) => Bound::Unbounded,
        };
        let mut cur = g.objects.range::<str, _>((lower, Bound::Unbounded)).map(|(k, v)| (&**k, Some(v))).peekable();
        let mut ovl = overlay.range::<&str, _>((lower.map(|s| s), Bound::Unbounded)).map(|(k, v)| (*k, *v)).peekable();
        let merged = std::iter::from_fn(move || {
            let take_cur = match (cur.peek(), ovl.peek()) {
                (None, None) => return None,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((a, _)), Some((b, _))) => a < b,
            };
            if take_cur {
                return cur.next();
            }
            let (k, v) = ovl.next().expect("peeked");
            if cur.peek().is_some_and(|(ck, _)| *ck == k) {
                cur.next(); // the overlay's value replaces the current one
            }
            Some((k, v))
        })
        .take_while(|(k, _)| ns_prefix.as_deref().is_none_or(|p| k.starts_with(p)))
        .filter_map(|(_, v)| v)
        .filter(|o| filter.matches(o));
        let mut items = Vec::new();
        let mut rest = merged;
        let limit = limit.unwrap_or(usize::MAX);
        for o in rest.by_ref() {
            items.push(o.clone());
            if items.len() == limit {
                break;
            }
        }
        let (continue_after, remaining) = if items.len() == limit {
            if count_remaining {
                let n = rest.count() as u64;
                ((n > 0).then(|| items.last().expect("non-empty").key.clone()), (n > 0).then_some(n))
            } else {
                (rest.next().map(|_| items.last().expect("non-empty").key.clone()), None)
            }
        } else {
            (None, None)
        };
        Ok(ListPage { items, rv, continue_after, remaining })
    }

    /// Opens a watch. `after = Some(rv)`: every change after `rv` (replayed from history), then
    /// live ones. `after = None`: ADDED for every selected object at the synced revision, then
    /// live changes. `progress`: also receive progress marks.
    pub fn watch(&self, after: Option<u64>, filter: Filter, progress: bool) -> Result<Watcher, CacheError> {
        let mut g = self.write();
        if !g.ready {
            return Err(CacheError::NotReady);
        }
        let mut backlog = VecDeque::new();
        let (start_rv, initial_events) = match after {
            Some(rv) => {
                let oldest = Self::history_floor(&g, &filter);
                if rv < oldest {
                    return Err(CacheError::TooOld { requested: rv, oldest });
                }
                if rv > g.synced {
                    return Err(CacheError::TooNew { requested: rv, current: g.synced });
                }
                let first = g.history.partition_point(|e| e.rv <= rv);
                backlog.extend(g.history.range(first..).filter_map(|e| convert(e.kind, &e.object, e.prev.as_ref(), &filter)));
                (rv, 0)
            }
            None => {
                let ns_prefix = filter.namespace.as_ref().map(|ns| format!("{ns}\0"));
                let iter: Box<dyn Iterator<Item = &Arc<CachedObject>>> = match &ns_prefix {
                    Some(p) => Box::new(g.objects.range::<str, _>((Bound::Included(p.as_str()), Bound::Unbounded)).take_while(|(k, _)| k.starts_with(p.as_str())).map(|(_, v)| v)),
                    None => Box::new(g.objects.values()),
                };
                backlog.extend(iter.filter(|o| filter.matches(o)).map(|o| WatchMsg::Event(EventType::Added, o.clone())));
                (g.synced, backlog.len())
            }
        };
        let (tx, rx) = mpsc::channel(self.config.watcher_buffer.max(1));
        g.watchers.push(Slot { filter, tx, progress });
        Ok(Watcher { backlog, rx, start_rv, initial_events })
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
