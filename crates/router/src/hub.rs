//! Shared merged upstreams (RFC 0003, "Shared upstreams (hubs)"). Client watches with the same collection, filters and representation
//! share one [`upstream`](crate::upstream): K shard streams and one merge, whatever the number
//! of clients. The shards still filter (selectors, label transitions) and render (JSON, Table),
//! so the router never decodes an object.
//!
//! A hub keeps the events it merged in a bounded ring, so a client can join at any RV the ring
//! still covers: it is sent the ring's events after its RV, then the live ones, in one order.
//! Bounds and what happens at them:
//! - the ring holds at most [`RING_EVENTS`] events and [`RING_BYTES`] bytes, and never more than
//!   half the history any shard keeps (half its event count, half its window): the router never
//!   serves an RV its shards could not, so a too-old RV gets the same 410 Expired through the
//!   router as from a shard. A client asking for an RV below the ring gets its own upstream.
//! - each client may fall at most [`FANOUT_BUFFER`] items behind the hub; past that its watch
//!   ends cleanly at the last event it was sent, and it resumes from there;
//! - a hub with no clients for [`LINGER`] closes its shard streams.
//!
//! A hub for an index (RFC 0015, "Indexed dispatch") serves every client that watches one value
//! of an indexed field (a kubelet's `spec.nodeName=<node>`, a watch of one object by
//! `metadata.name`) with the rest of its filters equal: its shard streams carry addressed lines,
//! and each event goes only to the clients of its value, each on a channel of its own (at most
//! [`FANOUT_BUFFER`] items; a client that falls that far behind is ended). Progress marks go to
//! those clients at most every [`INDEXED_MARK_EVERY`].
//!
//! When the upstream ends (a shard broke, or sent an ERROR, passed on to every client) the hub
//! ends and every client's watch ends cleanly after the last event it was sent. A change of the
//! range map does not end a hub: its upstream switches shards under it (RFC 0006).

use crate::state::{HistoryBound, RouterState};
use crate::upstream::{self, Merged, UpstreamSpec};
use axum::body::Body;
use axum::http::Response;
use bytes::Bytes;
use shardplane_apimachinery::ApiError;
use shardplane_apimachinery::watch_event::parse_addressed;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// Most events a hub keeps for clients that join late.
pub const RING_EVENTS: usize = 4096;
/// Most bytes of events a hub keeps.
pub const RING_BYTES: usize = 32 << 20;
/// Items a client may be behind the hub before its watch is ended.
pub const FANOUT_BUFFER: usize = 2048;
/// How long a hub with no clients keeps its shard streams open.
pub const LINGER: Duration = Duration::from_secs(5);
/// Progress marks reach the clients of an indexed hub at most this often: each is a wake-up of
/// every client, and marks only feed bookmarks.
pub const INDEXED_MARK_EVERY: Duration = Duration::from_secs(1);

/// How a hub hands what it merged to its clients.
enum Fanout {
    /// Every client gets every item: one broadcast.
    All(broadcast::Sender<Merged>),
    /// The lines are addressed: each event goes to the clients of its value only.
    Indexed(Clients),
}

/// The clients of an indexed hub by value, each with a channel of its own.
#[derive(Default)]
struct Clients {
    by_value: HashMap<Arc<str>, Vec<mpsc::Sender<Merged>>>,
    /// When a mark was last passed on, and which.
    marked_at: Option<tokio::time::Instant>,
    marked: u64,
}

impl Clients {
    /// Sends `item` to `value`'s clients; a client whose channel is full is let go (its watch
    /// ends after what it was sent, and it resumes), as is one that left.
    fn send(&mut self, value: &str, item: &Merged) {
        if let Some(clients) = self.by_value.get_mut(value) {
            clients.retain(|c| keep(c.try_send(item.clone())));
            if clients.is_empty() {
                self.by_value.remove(value);
            }
        }
    }

    /// Sends `item` to every client.
    fn send_all(&mut self, item: &Merged) {
        for clients in self.by_value.values_mut() {
            clients.retain(|c| keep(c.try_send(item.clone())));
        }
        self.by_value.retain(|_, c| !c.is_empty());
    }

    /// How many clients are attached (those that left are forgotten).
    fn count(&mut self) -> usize {
        for clients in self.by_value.values_mut() {
            clients.retain(|c| !c.is_closed());
        }
        self.by_value.retain(|_, c| !c.is_empty());
        self.by_value.values().map(Vec::len).sum()
    }
}

/// Whether a client stays after a send: not if it left, nor if it fell [`FANOUT_BUFFER`] behind.
fn keep(sent: Result<(), mpsc::error::TrySendError<Merged>>) -> bool {
    match sent {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Full(_)) => {
            tracing::info!("watch client fell behind its indexed hub; ending its watch so it resumes");
            false
        }
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    }
}

/// One event a hub keeps: its RV, the value it is addressed to (in an indexed hub), the line,
/// and when it arrived.
type RingEntry = (u64, Option<Arc<str>>, Bytes, tokio::time::Instant);

struct HubState {
    /// Events in RV order, every event after `floor` included.
    ring: VecDeque<RingEntry>,
    /// Most events, bytes and oldest age the ring keeps.
    max_events: usize,
    max_bytes: usize,
    max_age: Duration,
    ring_bytes: usize,
    floor: u64,
    /// The newest progress mark: every event up to it has been published.
    mark: u64,
    /// Dropped when the hub ends, which ends every client's stream.
    fanout: Option<Fanout>,
    /// When the last client left (None while some are attached).
    idle_since: Option<tokio::time::Instant>,
}

impl HubState {
    /// Drops the oldest events past the ring's bounds; the floor rises to the last one dropped.
    fn evict(&mut self) {
        while let Some((rv, _, old, at)) = self.ring.front() {
            if self.ring.len() <= self.max_events && self.ring_bytes <= self.max_bytes && at.elapsed() < self.max_age {
                break;
            }
            self.ring_bytes -= old.len();
            self.floor = *rv;
            self.ring.pop_front();
        }
    }
}

struct Hub {
    state: Mutex<HubState>,
}

/// A client's place in a hub: the ring's events after its RV, then the live ones.
pub struct Subscription {
    backlog: VecDeque<Merged>,
    live: Live,
    after: u64,
}

/// Where a client's live items come from.
enum Live {
    All(broadcast::Receiver<Merged>),
    Own(mpsc::Receiver<Merged>),
}

#[cfg(test)]
impl Live {
    fn try_recv(&mut self) -> Option<Merged> {
        match self {
            Live::All(rx) => rx.try_recv().ok(),
            Live::Own(rx) => rx.try_recv().ok(),
        }
    }
}

impl Subscription {
    /// The next item, or None when the hub ended or this client fell too far behind.
    pub async fn next(&mut self) -> Option<Merged> {
        if let Some(m) = self.backlog.pop_front() {
            return Some(m);
        }
        loop {
            let item = match &mut self.live {
                Live::Own(rx) => rx.recv().await?,
                Live::All(rx) => match rx.recv().await {
                    Ok(m) => m,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::info!(missed = n, "watch client fell behind its hub; ending its watch so it resumes");
                        return None;
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            };
            match item {
                Merged::Event(rv, _) if rv <= self.after => continue,
                m => return Some(m),
            }
        }
    }
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins after `after` (as a client of `value` in an indexed hub), or None if the ring no
    /// longer reaches back that far or the hub ended.
    fn subscribe(&self, after: u64, value: Option<&str>) -> Option<Subscription> {
        let mut st = self.lock();
        if after < st.floor {
            return None;
        }
        let live = match (st.fanout.as_mut()?, value) {
            (Fanout::All(tx), _) => Live::All(tx.subscribe()),
            (Fanout::Indexed(clients), Some(value)) => {
                let (tx, rx) = mpsc::channel(FANOUT_BUFFER);
                clients.by_value.entry(value.into()).or_default().push(tx);
                Live::Own(rx)
            }
            (Fanout::Indexed(_), None) => return None,
        };
        st.idle_since = None;
        let from = st.ring.partition_point(|(rv, _, _, _)| *rv <= after);
        let mine = |to: &Option<Arc<str>>| to.as_deref() == value || to.is_none();
        let mut backlog: VecDeque<Merged> = st.ring.range(from..).filter(|(_, to, _, _)| mine(to)).map(|(rv, _, b, _)| Merged::Event(*rv, b.clone())).collect();
        if st.mark > after {
            backlog.push_back(Merged::Mark(st.mark));
        }
        Some(Subscription { backlog, live, after })
    }

    fn publish(&self, item: Merged) {
        let mut st = self.lock();
        let now = tokio::time::Instant::now();
        match (&item, matches!(st.fanout, Some(Fanout::Indexed(_)))) {
            (Merged::Event(rv, line), false) => {
                st.ring_bytes += line.len();
                st.ring.push_back((*rv, None, line.clone(), now));
                st.evict();
            }
            (Merged::Event(rv, line), true) => {
                let Some((_, events)) = parse_addressed(line) else {
                    tracing::warn!(rv, "an indexed hub's shard sent a line that is not addressed; dropped");
                    return;
                };
                for (to, line) in events {
                    let to: Arc<str> = to.into();
                    st.ring_bytes += line.len();
                    st.ring.push_back((*rv, Some(to.clone()), line.clone(), now));
                    if let Some(Fanout::Indexed(clients)) = &mut st.fanout {
                        clients.send(&to, &Merged::Event(*rv, line));
                    }
                }
                st.evict();
                return;
            }
            (Merged::Mark(rv), _) => st.mark = st.mark.max(*rv),
            (Merged::Error(_), _) => {}
        }
        match &mut st.fanout {
            Some(Fanout::All(tx)) => {
                let _ = tx.send(item);
            }
            Some(Fanout::Indexed(clients)) => {
                if let Merged::Mark(rv) = item {
                    // A mark held back here goes out at the hub's next tick (`pass_mark`).
                    if clients.marked_at.is_some_and(|at| at.elapsed() < INDEXED_MARK_EVERY) {
                        return;
                    }
                    (clients.marked_at, clients.marked) = (Some(now), rv);
                }
                clients.send_all(&item);
            }
            None => {}
        }
    }

    fn evict(&self) {
        self.lock().evict();
    }

    /// Passes on to an indexed hub's clients the newest mark if it was held back.
    fn pass_mark(&self) {
        let mut st = self.lock();
        let mark = st.mark;
        if let Some(Fanout::Indexed(clients)) = &mut st.fanout
            && clients.marked < mark
            && clients.marked_at.is_none_or(|at| at.elapsed() >= INDEXED_MARK_EVERY)
        {
            (clients.marked_at, clients.marked) = (Some(tokio::time::Instant::now()), mark);
            clients.send_all(&Merged::Mark(mark));
        }
    }

    fn end(&self) {
        self.lock().fanout = None;
    }

    /// Whether the hub has had no client for `LINGER`.
    fn idle(&self) -> bool {
        let mut st = self.lock();
        let clients = match &mut st.fanout {
            Some(Fanout::All(tx)) => tx.receiver_count(),
            Some(Fanout::Indexed(clients)) => clients.count(),
            None => 0,
        };
        match (clients, st.idle_since) {
            (0, None) => {
                st.idle_since = Some(tokio::time::Instant::now());
                false
            }
            (0, Some(t)) => t.elapsed() >= LINGER,
            _ => {
                st.idle_since = None;
                false
            }
        }
    }
}

/// The router's hubs, by what they watch.
pub struct Hubs {
    map: Mutex<HashMap<String, Arc<Hub>>>,
    /// The ring's bounds: at most half of the shards' history.
    max_events: usize,
    max_age: Duration,
}

/// The key of a hub: the collection, filters and representation its clients share.
fn key(spec: &UpstreamSpec) -> String {
    let mut params: Vec<&str> = spec.query.split('&').filter(|p| !p.is_empty()).collect();
    params.sort_unstable();
    format!("{}?{}#{}", spec.path, params.join("&"), spec.accept.as_ref().and_then(|a| a.to_str().ok()).unwrap_or(""))
}

impl Hubs {
    /// Hubs for shards that keep `history`.
    pub fn new(history: HistoryBound) -> Self {
        Self { map: Default::default(), max_events: (history.events / 2).min(RING_EVENTS), max_age: history.window / 2 }
    }

    /// A place after `after` in the hub for `spec` (as a client of `value` when the spec is
    /// indexed), starting the hub (its upstream after `after`) if there is none.
    /// `Ok(Ok(None))`: the hub's ring does not reach back to `after`; `Ok(Err(answer))`: a shard
    /// refused the watch with this answer.
    pub async fn subscribe(self: &Arc<Self>, shards: &Arc<RouterState>, spec: &UpstreamSpec, after: u64, value: Option<&str>) -> Result<Result<Option<Subscription>, Response<Body>>, ApiError> {
        let key = key(spec);
        if let Some(joined) = self.join(&key, after, value) {
            return Ok(Ok(joined));
        }
        // No live hub: open one. The map's lock is not held across the shard requests; if
        // another client started the same hub meanwhile, join that one and drop this upstream.
        let rx = match upstream::open(shards, spec, after).await? {
            Ok(rx) => rx,
            Err(answer) => return Ok(Err(answer)),
        };
        let fanout = if value.is_some() { Fanout::Indexed(Clients::default()) } else { Fanout::All(broadcast::channel(FANOUT_BUFFER).0) };
        let hub = Arc::new(Hub { state: Mutex::new(HubState { ring: VecDeque::new(), max_events: self.max_events, max_bytes: RING_BYTES, max_age: self.max_age, ring_bytes: 0, floor: after, mark: after, fanout: Some(fanout), idle_since: None }) });
        let sub = hub.subscribe(after, value).expect("a new hub takes its first client");
        {
            let mut map = self.lock();
            if let Some(joined) = Self::join_locked(&map, &key, after, value) {
                return Ok(Ok(joined));
            }
            map.insert(key.clone(), hub.clone());
        }
        tracing::debug!(%key, after, "watch hub started");
        tokio::spawn(self.clone().run(key, hub, rx));
        Ok(Ok(Some(sub)))
    }

    /// A place after `after` in the live hub for `spec`, if there is one whose ring reaches back
    /// to `after`: a client on an upstream of its own moves to it once it has caught up.
    pub fn join_live(&self, spec: &UpstreamSpec, after: u64, value: Option<&str>) -> Option<Subscription> {
        self.join(&key(spec), after, value).flatten()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Hub>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Some(Some(sub))`: joined the live hub for `key`; `Some(None)`: a live hub exists but its
    /// ring does not reach back to `after`; `None`: no live hub.
    fn join(&self, key: &str, after: u64, value: Option<&str>) -> Option<Option<Subscription>> {
        Self::join_locked(&self.lock(), key, after, value)
    }

    fn join_locked(map: &HashMap<String, Arc<Hub>>, key: &str, after: u64, value: Option<&str>) -> Option<Option<Subscription>> {
        let hub = map.get(key)?;
        match hub.subscribe(after, value) {
            Some(sub) => Some(Some(sub)),
            None if hub.lock().fanout.is_some() => Some(None),
            // An ended hub is replaced (its run() removes it, or the insert overwrites it).
            None => None,
        }
    }

    async fn run(self: Arc<Self>, key: String, hub: Arc<Hub>, mut rx: tokio::sync::mpsc::Receiver<Merged>) {
        let mut check = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                item = rx.recv() => match item {
                    Some(item) => {
                        let last = matches!(item, Merged::Error(_));
                        hub.publish(item);
                        if last {
                            break;
                        }
                    }
                    None => break,
                },
                _ = check.tick() => {
                    hub.evict();
                    hub.pass_mark();
                    // Decided under the map's lock: no client can be joining meanwhile.
                    let mut map = self.lock();
                    if hub.idle() {
                        if map.get(&key).is_some_and(|h| Arc::ptr_eq(h, &hub)) {
                            map.remove(&key);
                        }
                        hub.end();
                        tracing::debug!(%key, "watch hub closed: no clients");
                        return;
                    }
                }
            }
        }
        hub.end();
        let mut map = self.lock();
        if map.get(&key).is_some_and(|h| Arc::ptr_eq(h, &hub)) {
            map.remove(&key);
        }
        tracing::debug!(%key, "watch hub ended with its upstream");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hub(start: u64, max_events: usize, max_bytes: usize) -> Hub {
        hub_with_fanout(start, max_events, max_bytes, FANOUT_BUFFER)
    }

    fn hub_with_fanout(start: u64, max_events: usize, max_bytes: usize, fanout: usize) -> Hub {
        let (tx, _) = broadcast::channel(fanout);
        Hub { state: Mutex::new(HubState { ring: VecDeque::new(), max_events, max_bytes, max_age: Duration::from_secs(3600), ring_bytes: 0, floor: start, mark: start, fanout: Some(Fanout::All(tx)), idle_since: None }) }
    }

    /// Everything a subscription has received so far, as `Subscription::next` yields it (the
    /// backlog as is, live events after the client's RV): event RVs, marks as negative numbers.
    fn drain(sub: &mut Subscription) -> Vec<i64> {
        let mut out = Vec::new();
        let mut take = |m: Merged| match m {
            Merged::Event(rv, _) => out.push(rv as i64),
            Merged::Mark(rv) => out.push(-(rv as i64)),
            Merged::Error(_) => out.push(0),
        };
        while let Some(m) = sub.backlog.pop_front() {
            take(m);
        }
        while let Some(m) = sub.live.try_recv() {
            if !matches!(m, Merged::Event(rv, _) if rv <= sub.after) {
                take(m);
            }
        }
        out
    }

    proptest! {
        /// A client joining at any RV the ring covers gets exactly the events after it, in
        /// order, across the ring and the live stream; below the ring it is refused, never
        /// given a history with a hole.
        #[test]
        fn joining_clients_get_exactly_the_events_after_their_rv(
            gaps in proptest::collection::vec(1u64..4, 1..60),
            joins in proptest::collection::vec((any::<prop::sample::Index>(), 0u64..3), 1..8),
            max_events in 1usize..12,
        ) {
            let start = 100;
            let rvs: Vec<u64> = gaps.iter().scan(start, |rv, g| { *rv += g; Some(*rv) }).collect();
            let h = hub(start, max_events, usize::MAX);
            let mut subs = Vec::new();
            let mut joins_at: Vec<(usize, u64)> = joins.iter().map(|(i, back)| (i.index(rvs.len()), *back)).collect();
            joins_at.sort();
            let mut next_join = 0;
            for (i, rv) in rvs.iter().enumerate() {
                while next_join < joins_at.len() && joins_at[next_join].0 == i {
                    // Join at an RV already published, up to `back` events back (or the start).
                    let back = joins_at[next_join].1 as usize;
                    let after = if i > back { rvs[i - 1 - back] } else { start };
                    let floor = if i > max_events { rvs[i - 1 - max_events] } else { start };
                    let sub = h.subscribe(after, None);
                    prop_assert_eq!(sub.is_some(), after >= floor, "after {} floor {}", after, floor);
                    if let Some(s) = sub {
                        subs.push(s);
                    }
                    next_join += 1;
                }
                h.publish(Merged::Event(*rv, Bytes::from_static(b"x")));
            }
            for mut s in subs {
                let want: Vec<i64> = rvs.iter().filter(|rv| **rv > s.after).map(|rv| *rv as i64).collect();
                prop_assert_eq!(drain(&mut s), want);
            }
            prop_assert!(h.lock().ring.len() <= max_events);
        }
    }

    fn indexed_hub(start: u64, max_events: usize) -> Hub {
        Hub { state: Mutex::new(HubState { ring: VecDeque::new(), max_events, max_bytes: usize::MAX, max_age: Duration::from_secs(3600), ring_bytes: 0, floor: start, mark: start, fanout: Some(Fanout::Indexed(Clients::default())), idle_since: None }) }
    }

    /// The line a shard sends for a change at `rv` concerning `values`: each value's event
    /// carries the value and the RV, so what a client received says where it came from.
    fn addressed(rv: u64, values: &[&str]) -> Bytes {
        let events: Vec<(&str, Bytes)> = values.iter().map(|v| (*v, shardplane_apimachinery::watch_event::line("ADDED", format!("{{\"v\":\"{v}\",\"rv\":{rv}}}").as_bytes()))).collect();
        shardplane_apimachinery::watch_event::addressed_line(rv, &events)
    }

    proptest! {
        /// In an indexed hub (RFC 0015), a client of one value joining at any RV the ring
        /// covers gets exactly the events addressed to its value after its RV, in order, and
        /// nothing addressed to another value.
        #[test]
        fn indexed_clients_get_exactly_their_values_events(
            changes in proptest::collection::vec((1u64..3, proptest::collection::btree_set(0usize..4, 1..3)), 1..50),
            joins in proptest::collection::vec((any::<prop::sample::Index>(), 0usize..4), 1..8),
            max_events in 2usize..40,
        ) {
            let values = ["n0", "n1", "n2", ""];
            let start = 100;
            let mut rv = start;
            let changes: Vec<(u64, Vec<&str>)> = changes.iter().map(|(gap, vs)| { rv += gap; (rv, vs.iter().map(|i| values[*i]).collect()) }).collect();
            let h = indexed_hub(start, max_events);
            let mut joins: Vec<(usize, usize)> = joins.iter().map(|(i, v)| (i.index(changes.len()), *v)).collect();
            joins.sort();
            let mut subs = Vec::new();
            let mut next = 0;
            for (i, (rv, vs)) in changes.iter().enumerate() {
                while next < joins.len() && joins[next].0 == i {
                    let after = if i > 0 { changes[i - 1].0 } else { start };
                    if let Some(sub) = h.subscribe(after, Some(values[joins[next].1])) {
                        subs.push((values[joins[next].1], sub));
                    }
                    next += 1;
                }
                h.publish(Merged::Event(*rv, addressed(*rv, vs)));
            }
            prop_assert!(h.lock().ring.len() <= max_events);
            for (value, mut sub) in subs {
                let want: Vec<i64> = changes.iter().filter(|(rv, vs)| *rv > sub.after && vs.contains(&value)).map(|(rv, _)| *rv as i64).collect();
                let mut got = Vec::new();
                while let Some(m) = sub.backlog.pop_front().or_else(|| sub.live.try_recv()) {
                    if let Merged::Event(rv, line) = m {
                        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
                        prop_assert_eq!(&v["object"]["v"], value);
                        prop_assert_eq!(v["object"]["rv"].as_u64(), Some(rv));
                        got.push(rv as i64);
                    }
                }
                prop_assert_eq!(got, want);
            }
        }
    }

    #[tokio::test]
    async fn an_indexed_client_that_falls_behind_is_ended_alone_and_marks_are_spaced() {
        let h = indexed_hub(0, 10_000);
        let mut slow = h.subscribe(0, Some("a")).unwrap();
        let mut other = h.subscribe(0, Some("b")).unwrap();
        for rv in 1..=(FANOUT_BUFFER as u64 + 1) {
            h.publish(Merged::Event(rv, addressed(rv, &["a"])));
        }
        h.publish(Merged::Event(FANOUT_BUFFER as u64 + 2, addressed(FANOUT_BUFFER as u64 + 2, &["b"])));
        // The slow client gets what fit, then its watch ends; the other was never woken for
        // "a"'s events and gets its own.
        let mut got = 0;
        while let Some(m) = slow.next().await {
            assert!(matches!(m, Merged::Event(..)));
            got += 1;
        }
        assert_eq!(got, FANOUT_BUFFER);
        assert!(matches!(other.next().await, Some(Merged::Event(rv, _)) if rv == FANOUT_BUFFER as u64 + 2));
        // Two marks in a row: the second waits for INDEXED_MARK_EVERY.
        h.publish(Merged::Mark(5000));
        h.publish(Merged::Mark(5001));
        assert!(matches!(other.next().await, Some(Merged::Mark(5000))));
        assert!(other.live.try_recv().is_none());
        assert_eq!(h.lock().mark, 5001);
        // The one held back goes out at a tick once the interval has passed, and only once.
        if let Some(Fanout::Indexed(c)) = h.lock().fanout.as_mut() {
            c.marked_at = Some(tokio::time::Instant::now() - INDEXED_MARK_EVERY);
        }
        h.pass_mark();
        h.pass_mark();
        assert!(matches!(other.next().await, Some(Merged::Mark(5001))));
        assert!(other.live.try_recv().is_none());
        assert_eq!(h.lock().fanout.as_mut().map(|f| match f { Fanout::Indexed(c) => c.count(), Fanout::All(_) => 0 }), Some(1));
    }

    #[test]
    fn the_ring_is_bounded_in_bytes_and_joiners_get_the_latest_mark() {
        let h = hub(10, 1000, 10);
        for rv in 11..=15 {
            h.publish(Merged::Event(rv, Bytes::from_static(b"1234")));
        }
        // 4 bytes each, 10 at most: the two newest stay; the floor is the last one dropped.
        let st = h.lock();
        assert_eq!((st.ring.len(), st.ring_bytes, st.floor), (2, 8, 13));
        drop(st);
        assert!(h.subscribe(12, None).is_none());
        h.publish(Merged::Mark(15));
        let mut s = h.subscribe(13, None).unwrap();
        assert_eq!(drain(&mut s), vec![14, 15, -15]);
        // A hub that ended takes no one.
        h.end();
        assert!(h.subscribe(15, None).is_none());
    }

    #[tokio::test]
    async fn a_client_that_falls_behind_is_ended_and_the_others_go_on() {
        let h = hub_with_fanout(0, 100, usize::MAX, 4);
        let mut slow = h.subscribe(0, None).unwrap();
        let mut fast = h.subscribe(0, None).unwrap();
        for rv in 1..=3 {
            h.publish(Merged::Event(rv, Bytes::from_static(b"x")));
        }
        for rv in 1..=3 {
            assert!(matches!(fast.next().await, Some(Merged::Event(r, _)) if r == rv));
        }
        for rv in 4..=8 {
            h.publish(Merged::Event(rv, Bytes::from_static(b"x")));
            assert!(matches!(fast.next().await, Some(Merged::Event(r, _)) if r == rv), "rv {rv}");
        }
        // Eight behind with room for four: the slow client's watch ends (it resumes from its
        // last RV) while the one that kept up got everything.
        assert!(slow.next().await.is_none());
    }
}
