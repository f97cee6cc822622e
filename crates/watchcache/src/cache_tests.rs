//! Property tests of the watch cache against a BTreeMap model.
use super::*;
use crate::object::decode_object;
use proptest::prelude::*;
use shardplane_apimachinery::resources::{builtin_resources, find};
use shardplane_apimachinery::selectors::LabelSelector;
use std::collections::BTreeMap as Model;

fn obj(ns: &str, name: &str, color: &str, rv: u64) -> CachedObject {
    let all = builtin_resources();
    let info = find(&all, "", "v1", "configmaps").unwrap();
    let mut v = serde_json::json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"), "labels": {"color": color}}});
    decode_object(info, &mut v, rv).unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    Put { ns: u8, name: u8, color: bool },
    Delete { ns: u8, name: u8 },
    Progress,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0u8..6, any::<bool>()).prop_map(|(ns, name, color)| Op::Put { ns, name, color }),
        2 => (0u8..3, 0u8..6).prop_map(|(ns, name)| Op::Delete { ns, name }),
        1 => Just(Op::Progress),
    ]
}

type State = Model<(String, String), String>;

/// Runs ops against the cache and returns the model state after every revision.
fn run(cache: &WatchCache, ops: &[Op]) -> Model<u64, State> {
    let mut states = Model::new();
    let mut state = State::new();
    let mut rv = 10;
    cache.replace(vec![], rv);
    states.insert(rv, state.clone());
    for op in ops {
        rv += 1;
        match op {
            Op::Put { ns, name, color } => {
                let (ns, name, color) = (format!("ns{ns}"), format!("o{name}"), if *color { "red" } else { "blue" });
                cache.record(obj(&ns, &name, color, rv), false);
                state.insert((ns, name), color.to_owned());
            }
            Op::Delete { ns, name } => {
                let key = (format!("ns{ns}"), format!("o{name}"));
                if let Some(color) = state.remove(&key) {
                    cache.record(obj(&key.0, &key.1, &color, rv), true);
                } else {
                    cache.progress(rv);
                }
            }
            Op::Progress => cache.progress(rv),
        }
        states.insert(rv, state.clone());
    }
    states
}

fn names(items: &[Arc<CachedObject>]) -> Vec<(String, String)> {
    items.iter().map(|o| (o.namespace().to_owned(), o.name().to_owned())).collect()
}

proptest! {
    /// LIST at every retained revision equals the model's state at that revision, with and
    /// without selectors and namespaces, and paging yields every object exactly once.
    #[test]
    fn list_at_revision_equals_model(ops in proptest::collection::vec(op(), 0..60), limit in 1usize..5, max_events in 5usize..80) {
        let cache = WatchCache::new(CacheConfig { history_max_events: max_events, ..Default::default() });
        let states = run(&cache, &ops);
        let oldest = cache.oldest();
        for (rv, state) in &states {
            let red = Filter { labels: LabelSelector::parse("color=red").unwrap(), ..Default::default() };
            let ns1 = Filter { namespace: Some("ns1".into()), ..Default::default() };
            if *rv < oldest {
                prop_assert_eq!(cache.list(Some(*rv), &Filter::default(), None, None, false).unwrap_err(), CacheError::TooOld { requested: *rv, oldest });
                continue;
            }
            for (filter, want) in [
                (Filter::default(), state.keys().cloned().collect::<Vec<_>>()),
                (red, state.iter().filter(|(_, c)| *c == "red").map(|(k, _)| k.clone()).collect()),
                (ns1, state.keys().filter(|k| k.0 == "ns1").cloned().collect()),
            ] {
                let all = cache.list(Some(*rv), &filter, None, None, false).unwrap();
                prop_assert_eq!(all.rv, *rv);
                prop_assert_eq!(&names(&all.items), &want);
                // Paged walk at the same revision.
                let mut got = Vec::new();
                let mut after: Option<Box<str>> = None;
                loop {
                    let page = cache.list(Some(*rv), &filter, after.as_deref(), Some(limit), true).unwrap();
                    prop_assert!(page.items.len() <= limit);
                    got.extend(names(&page.items));
                    if let Some(r) = page.remaining {
                        prop_assert_eq!(r as usize, want.len() - got.len());
                    }
                    match page.continue_after {
                        Some(k) => after = Some(k),
                        None => break,
                    }
                }
                prop_assert_eq!(&got, &want);
            }
        }
    }

    /// A watch from any retained revision replays exactly the model's changes after it, in
    /// order, then receives live changes; selector transitions become ADDED/DELETED.
    #[test]
    fn watch_replays_model_changes(ops in proptest::collection::vec(op(), 1..60), split in 0usize..60, from_pick in 0usize..60) {
        let cache = WatchCache::new(CacheConfig::default());
        let split = split.min(ops.len());
        // Model event log: (rv, key, color before, color after).
        let mut log: Vec<(u64, (String, String), Option<String>, Option<String>)> = Vec::new();
        let mut state = State::new();
        let mut rv = 10;
        cache.replace(vec![], rv);
        let mut watchers = None;
        let from = 10 + from_pick.min(split) as u64;
        for (i, op) in ops.iter().enumerate() {
            if i == split {
                let red = Filter { labels: LabelSelector::parse("color=red").unwrap(), ..Default::default() };
                watchers = Some((cache.watch(Some(from), Filter::default(), false).unwrap(), cache.watch(Some(from), red, false).unwrap()));
            }
            rv += 1;
            match op {
                Op::Put { ns, name, color } => {
                    let (key, color) = ((format!("ns{ns}"), format!("o{name}")), if *color { "red" } else { "blue" }.to_owned());
                    cache.record(obj(&key.0, &key.1, &color, rv), false);
                    log.push((rv, key.clone(), state.insert(key, color.clone()), Some(color)));
                }
                Op::Delete { ns, name } => {
                    let key = (format!("ns{ns}"), format!("o{name}"));
                    match state.remove(&key) {
                        Some(color) => {
                            cache.record(obj(&key.0, &key.1, &color, rv), true);
                            log.push((rv, key, Some(color), None));
                        }
                        None => cache.progress(rv),
                    }
                }
                Op::Progress => cache.progress(rv),
            }
        }
        let (mut w_all, mut w_red) = watchers.unwrap_or_else(|| {
            let red = Filter { labels: LabelSelector::parse("color=red").unwrap(), ..Default::default() };
            (cache.watch(Some(from), Filter::default(), false).unwrap(), cache.watch(Some(from), red, false).unwrap())
        });
        let expect = |pred: &dyn Fn(&str) -> bool| -> Vec<(&'static str, (String, String), u64)> {
            log.iter().filter(|(r, ..)| *r > from).filter_map(|(r, k, before, after)| {
                let was = before.as_deref().is_some_and(pred);
                let is = after.as_deref().is_some_and(pred);
                let t = match (before.is_some(), after.is_some(), was, is) {
                    (_, _, false, true) => "ADDED",
                    (_, true, true, true) => "MODIFIED",
                    (_, _, true, false) => "DELETED",
                    _ => return None,
                };
                Some((t, k.clone(), *r))
            }).collect()
        };
        let drain = |w: &mut Watcher| {
            let mut out = Vec::new();
            while let Some(m) = w.backlog.pop_front().or_else(|| w.rx.try_recv().ok()) {
                if let WatchMsg::Event(t, o) = m {
                    out.push((t.as_str(), (o.namespace().to_owned(), o.name().to_owned()), o.rv));
                }
            }
            out
        };
        let got_all = drain(&mut w_all);
        prop_assert!(got_all.windows(2).all(|w| w[0].2 < w[1].2));
        prop_assert_eq!(got_all, expect(&|_| true));
        prop_assert_eq!(drain(&mut w_red), expect(&|c| c == "red"));
    }

    /// A watcher that does not read is closed when its buffer fills; the others keep going.
    #[test]
    fn slow_watcher_is_closed_alone(n in 3usize..20) {
        let cache = WatchCache::new(CacheConfig { watcher_buffer: 2, ..Default::default() });
        cache.replace(vec![], 1);
        let mut slow = cache.watch(Some(1), Filter::default(), false).unwrap();
        let mut fast = cache.watch(Some(1), Filter::default(), false).unwrap();
        let mut seen = 0;
        for i in 0..n {
            cache.record(obj("ns", &format!("o{i}"), "red", 2 + i as u64), false);
            while let Ok(WatchMsg::Event(..)) = fast.rx.try_recv() { seen += 1; }
        }
        prop_assert_eq!(seen, n);
        prop_assert_eq!(cache.stats().watchers, 1);
        let mut got = 0;
        while let Ok(_) = slow.rx.try_recv() { got += 1; }
        prop_assert_eq!(got, 2);
        prop_assert!(slow.rx.try_recv().is_err());
    }
}


/// The range of hashes from `a`'s to `b`'s (inclusive), in either order.
fn range_between(a: u64, b: u64) -> shardplane_keyspace::HashRange {
    shardplane_keyspace::HashRange::new(a.min(b), a.max(b) as u128 + 1).unwrap()
}

/// A range taken over joins the cache as the state at the synced revision, without events.
/// Without its past changes, revisions before it are refused only to LISTs and watches that may show the new range; open
/// watchers never start seeing it; letting a range go drops its objects without events and ends
/// open watchers.
#[test]
fn adopt_and_release_move_objects_without_events() {
    use shardplane_keyspace::{placement_hash, RangeSet};
    let h = |name: &str| placement_hash("", "configmaps", "ns", name);
    let r = range_between(h("moved"), h("moved2"));
    assert!(!r.contains(h("mine")), "the test's names put `mine` outside the moved range");
    let only = |set: RangeSet| Filter { owned: Some(Owned { group: String::new(), plural: "configmaps".into(), ranges: set }), ..Filter::default() };
    let before_move = RangeSet::full().without(r);
    let cache = WatchCache::new(CacheConfig::default());
    cache.replace(vec![obj("ns", "mine", "red", 5)], 10);
    cache.record(obj("ns", "mine", "blue", 11), false);
    let mut w = cache.watch(Some(11), Filter::default(), false).unwrap();
    let joining = || Owned { group: String::new(), plural: "configmaps".into(), ranges: RangeSet::from_disjoint(vec![r]).unwrap() };
    // Not at the synced revision: refused, nothing changes.
    assert!(!cache.adopt(vec![obj("ns", "moved", "red", 3)], 10, joining(), 10, vec![]));
    assert!(cache.get("ns", "moved").is_none());
    assert!(cache.adopt(vec![obj("ns", "moved", "red", 3), obj("ns", "moved2", "red", 4)], 11, joining(), 11, vec![]));
    assert_eq!(cache.stats().objects, 3);
    assert!(w.rx.try_recv().is_err(), "adopted objects are not events");
    let names = |p: ListPage| p.items.iter().map(|o| o.name().to_owned()).collect::<Vec<_>>();
    assert_eq!(names(cache.list(None, &Filter::default(), None, None, false).unwrap()), ["mine", "moved", "moved2"]);
    // Before the adoption: refused to what may show the new range, served to what may not.
    assert!(matches!(cache.list(Some(10), &Filter::default(), None, None, false), Err(CacheError::TooOld { requested: 10, oldest: 11 })));
    assert!(matches!(cache.watch(Some(10), only(RangeSet::full()), false), Err(CacheError::TooOld { requested: 10, oldest: 11 })));
    assert_eq!(names(cache.list(Some(10), &only(before_move.clone()), None, None, false).unwrap()), ["mine"]);
    let mut old_keys = cache.watch(Some(10), only(before_move), false).unwrap();
    assert!(matches!(old_keys.backlog.pop_front(), Some(WatchMsg::Event(EventType::Modified, o)) if o.name() == "mine"), "the history before the adoption serves what it has");
    let mut new_watch = cache.watch(Some(11), Filter::default(), false).unwrap();
    // Changes after the adoption are events to watches opened since, never to older ones.
    cache.record(obj("ns", "moved", "blue", 12), false);
    cache.record(obj("ns", "mine", "green", 13), false);
    assert!(matches!(new_watch.rx.try_recv(), Ok(WatchMsg::Event(EventType::Modified, o)) if o.name() == "moved"));
    assert!(matches!(new_watch.rx.try_recv(), Ok(WatchMsg::Event(EventType::Modified, o)) if o.name() == "mine"));
    assert!(matches!(w.rx.try_recv(), Ok(WatchMsg::Event(EventType::Modified, o)) if o.name() == "mine"), "the open watcher skips the adopted key's change");
    assert!(matches!(old_keys.rx.try_recv(), Ok(WatchMsg::Event(EventType::Modified, o)) if o.name() == "mine"));
    let bytes_before = cache.stats().bytes;
    assert_eq!(cache.release(|o| o.name().starts_with("moved")), 2);
    assert_eq!(names(cache.list(None, &Filter::default(), None, None, false).unwrap()), ["mine"]);
    assert!(cache.stats().bytes < bytes_before);
    assert_eq!(cache.stats().watchers, 0);
    assert!(matches!(w.rx.try_recv(), Err(tokio::sync::mpsc::error::TryRecvError::Disconnected)));
}

/// A range taken over with its past changes joins the history too: a watch from before the
/// adoption gets them, in revision order among the cache's own, and nothing is refused.
#[test]
fn a_range_adopted_with_its_past_serves_watches_from_before() {
    use shardplane_keyspace::{placement_hash, RangeSet};
    let h = |name: &str| placement_hash("", "configmaps", "ns", name);
    let r = range_between(h("moved"), h("moved2"));
    assert!(!r.contains(h("mine")));
    let cache = WatchCache::new(CacheConfig::default());
    cache.replace(vec![obj("ns", "mine", "red", 5)], 10);
    cache.record(obj("ns", "mine", "blue", 12), false);
    cache.progress(14);
    let past = vec![
        PastChange { object: obj("ns", "moved", "red", 11), prev: None, deleted: false },
        PastChange { object: obj("ns", "moved", "blue", 13), prev: Some(obj("ns", "moved", "red", 11)), deleted: false },
        PastChange { object: obj("ns", "moved2", "red", 14), prev: Some(obj("ns", "moved2", "red", 3)), deleted: true },
        // Not after the history's start: already in the state, never an event.
        PastChange { object: obj("ns", "moved2", "red", 9), prev: None, deleted: false },
    ];
    let joining = Owned { group: String::new(), plural: "configmaps".into(), ranges: RangeSet::from_disjoint(vec![r]).unwrap() };
    assert!(cache.adopt(vec![obj("ns", "moved", "blue", 13)], 14, joining, 10, past));
    let mut w = cache.watch(Some(10), Filter::default(), false).unwrap();
    let mut got = Vec::new();
    while let Some(WatchMsg::Event(kind, o)) = w.backlog.pop_front() {
        got.push((kind, o.name().to_owned(), o.rv));
    }
    assert_eq!(got, [(EventType::Added, "moved".to_owned(), 11), (EventType::Modified, "mine".to_owned(), 12), (EventType::Modified, "moved".to_owned(), 13), (EventType::Deleted, "moved2".to_owned(), 14)]);
    let names = |p: ListPage| p.items.iter().map(|o| o.name().to_owned()).collect::<Vec<_>>();
    // moved2 lived from before the history (RV 3) to its delete at 14; moved from 11.
    assert_eq!(names(cache.list(Some(11), &Filter::default(), None, None, false).unwrap()), ["mine", "moved", "moved2"]);
    assert_eq!(names(cache.list(Some(10), &Filter::default(), None, None, false).unwrap()), ["mine", "moved2"]);
}

/// A range whose past is known only from some revision on: from before it, reads that may show
/// the range get 410, the others still serve; the history keeps its time order for
/// `revision_before`.
#[test]
fn a_range_adopted_with_part_of_its_past_is_refused_only_before_that_part() {
    use shardplane_keyspace::{placement_hash, RangeSet};
    let h = |name: &str| placement_hash("", "configmaps", "ns", name);
    let r = range_between(h("moved"), h("moved2"));
    let cache = WatchCache::new(CacheConfig::default());
    cache.replace(vec![obj("ns", "mine", "red", 5)], 10);
    cache.record(obj("ns", "mine", "blue", 11), false);
    cache.record(obj("ns", "mine", "green", 13), false);
    assert_eq!(cache.revision_before(Duration::from_secs(3600)), 10, "nothing in the history is that old");
    assert_eq!(cache.revision_before(Duration::ZERO), 13);
    let past = vec![PastChange { object: obj("ns", "moved", "red", 12), prev: None, deleted: false }];
    let joining = Owned { group: String::new(), plural: "configmaps".into(), ranges: RangeSet::from_disjoint(vec![r]).unwrap() };
    assert!(cache.adopt(vec![obj("ns", "moved", "red", 12)], 13, joining, 11, past));
    assert!(matches!(cache.watch(Some(10), Filter::default(), false), Err(CacheError::TooOld { requested: 10, oldest: 11 })));
    let outside = Filter { owned: Some(Owned { group: String::new(), plural: "configmaps".into(), ranges: RangeSet::full().without(r) }), ..Filter::default() };
    assert!(cache.watch(Some(10), outside, false).is_ok());
    let mut w = cache.watch(Some(11), Filter::default(), false).unwrap();
    let mut got = Vec::new();
    while let Some(WatchMsg::Event(_, o)) = w.backlog.pop_front() {
        got.push((o.name().to_owned(), o.rv));
    }
    assert_eq!(got, [("moved".to_owned(), 12), ("mine".to_owned(), 13)]);
    assert_eq!(cache.revision_before(Duration::ZERO), 13);
}

/// History read back from etcd on load counts as older than any age: a range taken over soon
/// after a load must not read the whole backfilled history from etcd again between two events
/// (that stalled the cache, and writes waiting on it, for hundreds of milliseconds per move).
#[test]
fn backfilled_history_counts_as_older_than_any_age() {
    let cache = WatchCache::new(CacheConfig::default());
    cache.replace_with_past(vec![obj("ns", "a", "red", 5)], (20, 10), vec![PastChange { object: obj("ns", "a", "red", 15), prev: None, deleted: false }]);
    assert_eq!(cache.revision_before(Duration::from_secs(30)), 20);
    cache.record(obj("ns", "a", "blue", 21), false);
    assert_eq!(cache.revision_before(Duration::ZERO), 21);
    assert_eq!(cache.revision_before(Duration::from_secs(3600)), 20);
}

/// A cache whose own keys stay idle still moves its revision on (progress marks, changes of
/// keys it does not hold): asked for the revision of 30 s ago, it answers the synced revision
/// it had then, not the one it loaded at, so a range taken over reads only the last 30 s of
/// etcd's history, not everything since the shard started (which grew with every move).
#[test]
fn an_idle_cache_dates_its_revision_by_the_notes_taken_each_second() {
    let cache = WatchCache::new(CacheConfig::default());
    cache.replace(vec![obj("ns", "a", "red", 5)], 10);
    let now = Instant::now();
    let ago = |s: u64| now.checked_sub(Duration::from_secs(s)).expect("the clock is past a minute");
    cache.mark_time(ago(50));
    cache.progress(20);
    cache.mark_time(ago(40));
    cache.progress(30);
    cache.mark_time(ago(20));
    cache.progress(35);
    assert_eq!(cache.revision_before(Duration::from_secs(30)), 20, "the revision it had 40 s ago, the newest note at least 30 s old");
    assert_eq!(cache.revision_before(Duration::from_secs(45)), 10);
    assert_eq!(cache.revision_before(Duration::from_secs(10)), 30);
    assert_eq!(cache.revision_before(Duration::from_secs(3600)), 10, "nothing noted that old: the history's start");
    // A change of its own keys after the notes dates from now.
    cache.record(obj("ns", "a", "blue", 36), false);
    assert_eq!(cache.revision_before(Duration::ZERO), 36);
    assert_eq!(cache.revision_before(Duration::from_secs(30)), 20);
    // The notes are bounded: the oldest go first.
    for i in 0..MARKS_KEPT {
        cache.mark_time(ago(30).checked_add(Duration::from_millis(i as u64)).unwrap());
    }
    assert_eq!(cache.revision_before(Duration::from_secs(35)), 10, "the notes from 40 s ago and before are gone");
}

fn pod(name: &str, node: &str, color: &str, rv: u64) -> CachedObject {
    let all = builtin_resources();
    let info = find(&all, "", "v1", "pods").unwrap();
    let mut v = serde_json::json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "labels": {"color": color}}, "spec": {"nodeName": node}});
    decode_object(info, &mut v, rv).unwrap()
}

/// What a watcher received: (type, name, rv) per event; progress marks left out.
fn drained(w: &mut Watcher) -> Vec<WatchMsg> {
    let mut out: Vec<WatchMsg> = w.backlog.drain(..).collect();
    while let Ok(m) = w.rx.try_recv() {
        out.push(m);
    }
    out.retain(|m| !matches!(m, WatchMsg::Progress(_)));
    out
}

fn seen(kind: EventType, o: &CachedObject) -> (&'static str, String, u64) {
    (kind.as_str(), o.name().to_owned(), o.rv)
}

proptest! {
    /// One watcher with an index on `spec.nodeName` (RFC 0015) gives the watchers of every
    /// value exactly what a watcher with `spec.nodeName=<value>` and the same other filters
    /// receives — moves between nodes included — from any revision and live, and never
    /// addresses one event to a value twice.
    #[test]
    fn an_indexed_watcher_equals_one_watcher_per_value(
        ops in proptest::collection::vec((0u8..5, prop::option::of(0u8..4), any::<bool>()), 1..60),
        from_pick in 0usize..60,
        red_only in any::<bool>(),
    ) {
        let nodes = ["", "n0", "n1", "n2"];
        let cache = WatchCache::new(CacheConfig::default());
        cache.replace(vec![], 10);
        let mut state: Model<String, (String, String)> = Model::new();
        let labels = if red_only { LabelSelector::parse("color=red").unwrap() } else { LabelSelector::default() };
        let all = builtin_resources();
        let pods = find(&all, "", "v1", "pods").unwrap();
        let narrowed = |v: &str| Filter { labels: labels.clone(), fields: shardplane_apimachinery::selectors::FieldSelector::parse(&format!("spec.nodeName={v}"), pods).unwrap(), ..Default::default() };
        let indexed = Filter { labels: labels.clone(), index: Some("spec.nodeName".into()), ..Default::default() };
        let split = from_pick.min(ops.len());
        let mut rv = 10;
        let mut write = |rv: u64, (name, node, red): &(u8, Option<u8>, bool)| {
            let name = format!("p{name}");
            let color = if *red { "red" } else { "blue" };
            match node {
                Some(n) => {
                    cache.record(pod(&name, nodes[*n as usize], color, rv), false);
                    state.insert(name, (nodes[*n as usize].to_owned(), color.to_owned()));
                }
                None => match state.remove(&name) {
                    Some((node, color)) => cache.record(pod(&name, &node, &color, rv), true),
                    None => cache.progress(rv),
                },
            }
        };
        for op in &ops[..split] {
            rv += 1;
            write(rv, op);
        }
        // Watchers from a revision in the history, then live changes.
        let from = 10 + (from_pick as u64 % (split as u64 + 1));
        let mut per_value: Vec<Watcher> = nodes.iter().map(|v| cache.watch(Some(from), narrowed(v), false).unwrap()).collect();
        let mut one = cache.watch(Some(from), indexed, false).unwrap();
        for op in &ops[split..] {
            rv += 1;
            write(rv, op);
        }
        let addressed = drained(&mut one);
        for (v, w) in nodes.iter().zip(per_value.iter_mut()) {
            let want: Vec<_> = drained(w).into_iter().map(|m| match m {
                WatchMsg::Event(kind, o) => seen(kind, &o),
                other => panic!("{other:?}"),
            }).collect();
            let mut got = Vec::new();
            for m in &addressed {
                let WatchMsg::Addressed(at, to) = m else { panic!("{m:?}") };
                let mine: Vec<_> = to.iter().filter(|a| &*a.to == *v).collect();
                prop_assert!(mine.len() <= 1);
                for a in mine {
                    prop_assert_eq!(a.object.rv, *at);
                    got.push(seen(a.kind, &a.object));
                }
            }
            prop_assert_eq!(got, want, "value {:?}", v);
        }
        prop_assert!(addressed.iter().all(|m| matches!(m, WatchMsg::Addressed(_, to) if !to.is_empty())));
    }
}

/// One revision that deletes several keys (an etcd lease expiring, RFC 0015) removes them all
/// and tells watchers of each; the same events replayed after a relist change nothing.
#[test]
fn one_revision_may_change_several_keys() {
    let cache = WatchCache::new(CacheConfig::default());
    cache.replace(vec![obj("ns", "a", "red", 5), obj("ns", "b", "red", 6), obj("ns", "c", "red", 7)], 10);
    let mut w = cache.watch(Some(10), Filter::default(), false).unwrap();
    for name in ["a", "b", "c"] {
        cache.record(obj("ns", name, "red", 11), true);
    }
    cache.record(obj("ns", "d", "red", 12), false);
    cache.record(obj("ns", "e", "red", 12), false);
    // Replayed: nothing changes twice.
    cache.record(obj("ns", "a", "red", 11), true);
    cache.record(obj("ns", "e", "red", 12), false);
    assert_eq!(names(&cache.list(None, &Filter::default(), None, None, false).unwrap().items), vec![("ns".to_owned(), "d".to_owned()), ("ns".to_owned(), "e".to_owned())]);
    let got: Vec<_> = drained(&mut w).into_iter().map(|m| match m {
        WatchMsg::Event(kind, o) => seen(kind, &o),
        other => panic!("{other:?}"),
    }).collect();
    let want: Vec<_> = [("DELETED", "a", 11), ("DELETED", "b", 11), ("DELETED", "c", 11), ("ADDED", "d", 12), ("ADDED", "e", 12)].iter().map(|(k, n, r)| (*k, n.to_string(), *r)).collect();
    assert_eq!(got, want);
}

/// A read waiting for a revision tells a cache that has not loaded (429 upstream) from one that
/// is behind (504): a shard just started must not answer "too large resource version ...,
/// current: 0" for its whole load.
#[tokio::test(start_paused = true)]
async fn waiting_on_a_cache_tells_not_loaded_from_behind() {
    let cache = WatchCache::new(CacheConfig::default());
    assert!(matches!(cache.wait_synced(5, Duration::from_secs(3)).await, Err(CacheError::NotReady)));
    cache.replace(vec![obj("a", "x", "red", 4)], 4);
    assert!(matches!(cache.wait_synced(5, Duration::from_secs(3)).await, Err(CacheError::TooNew { requested: 5, current: 4 })));
    assert!(cache.wait_synced(4, Duration::from_secs(3)).await.is_ok());
}
