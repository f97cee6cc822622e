//! The coordinator against a model of everything around it (RFC 0006, "Testing"): random
//! interleavings of the coordinator's steps with shards loading and dropping ranges, routers
//! switching epochs, shards and routers dying and restarting, coordinator failover (a new
//! coordinator knows only what is stored; a deposed one's compare-and-swap is refused) and
//! operator requests. After every step: I1 on the stored map, moves consistent with it, a live
//! shard has loaded every range it owns, the epoch rises exactly when ownership changes, and a
//! drain ends only once it may. Once the failures stop, every move completes or is cancelled.

use super::*;
use crate::map_store::ownership;
use proptest::prelude::*;
use shardplane_storage::members::{LoadedRange, RouterMember};
use std::collections::BTreeMap;

/// Cache bytes of a range: the model's objects are spread evenly over the hash space, 1 GB in all.
fn bytes_of(r: &HashRange) -> u64 {
    ((r.end() - u128::from(r.start())) as f64 / 2f64.powi(64) * 1e9) as u64
}

#[derive(Clone, Debug)]
struct ModelShard {
    live: bool,
    /// Ranges loaded, with the revision each was loaded at.
    loaded: Vec<(HashRange, u64)>,
}

#[derive(Clone, Debug)]
struct ModelRouter {
    id: String,
    live: bool,
    switched: u64,
}

#[derive(Clone, Debug)]
struct World {
    map: StoredRangeMap,
    /// The stored map's mod_revision (compare-and-swap).
    rev: u64,
    /// A map read by a coordinator that has since lost leadership, with the revision it read.
    stale: Option<(StoredRangeMap, u64)>,
    shards: BTreeMap<String, ModelShard>,
    routers: Vec<ModelRouter>,
    next_shard: usize,
    cfg: Config,
}

#[derive(Clone, Debug)]
enum Action {
    Coordinate,
    /// A coordinator takes over from one that read the map earlier; the old one then tries
    /// to write what it had decided.
    Failover,
    Load(usize),
    Sync(usize),
    Switch(usize),
    KillShard(usize),
    RestartShard(usize),
    AddShard,
    KillRouter(usize),
    StartRouter,
    Move(usize, usize, u8),
    Split(usize, u8),
    Merge(usize),
    Drain(usize),
    Add(usize),
    Rebalance,
}

fn action() -> impl Strategy<Value = Action> {
    let i = 0usize..16;
    prop_oneof![
        6 => Just(Action::Coordinate),
        1 => Just(Action::Failover),
        4 => i.clone().prop_map(Action::Load),
        3 => i.clone().prop_map(Action::Sync),
        3 => i.clone().prop_map(Action::Switch),
        1 => i.clone().prop_map(Action::KillShard),
        1 => i.clone().prop_map(Action::RestartShard),
        1 => Just(Action::AddShard),
        1 => i.clone().prop_map(Action::KillRouter),
        1 => Just(Action::StartRouter),
        2 => (i.clone(), i.clone(), 1u8..4).prop_map(|(a, b, q)| Action::Move(a, b, q)),
        1 => (i.clone(), 1u8..255).prop_map(|(a, at)| Action::Split(a, at)),
        1 => i.clone().prop_map(Action::Merge),
        1 => i.clone().prop_map(Action::Drain),
        1 => i.clone().prop_map(Action::Add),
        1 => Just(Action::Rebalance),
    ]
}

fn pick<T: Clone>(v: &[T], i: usize) -> Option<T> {
    (!v.is_empty()).then(|| v[i % v.len()].clone())
}

impl World {
    fn new(k: usize, routers: usize, automatic: bool) -> Self {
        let shards: Vec<StoredShard> = HashRange::split_even(k as u32).into_iter().enumerate().map(|(i, r)| StoredShard { id: format!("s{i}"), url: format!("http://s{i}"), ranges: vec![r], cordoned: false }).collect();
        let model = shards.iter().map(|s| (s.id.clone(), ModelShard { live: true, loaded: s.ranges.iter().map(|r| (*r, 1)).collect() })).collect();
        Self {
            map: StoredRangeMap { epoch: 1, cutover: 1, shards, moves: vec![], balancing: false },
            rev: 1,
            stale: None,
            shards: model,
            routers: (0..routers).map(|i| ModelRouter { id: format!("r{i}"), live: true, switched: 1 }).collect(),
            next_shard: k,
            cfg: Config { automatic, ..Config::default() },
        }
    }

    fn members(&self) -> Members {
        Members {
            shards: self
                .shards
                .iter()
                .filter(|(_, s)| s.live)
                .map(|(id, s)| ShardMember { id: id.clone(), url: format!("http://{id}"), capacity_bytes: 0, loaded: s.loaded.iter().map(|(r, rev)| LoadedRange { range: *r, revision: *rev, objects: 0, cache_bytes: bytes_of(r) }).collect(), load: Default::default() })
                .collect(),
            routers: self.routers.iter().filter(|r| r.live).map(|r| RouterMember { id: r.id.clone(), switched_epoch: r.switched }).collect(),
            revision: self.rev,
        }
    }

    /// A compare-and-swap of the stored map; reading fills the cut-over, as storage does.
    fn cas(&mut self, expected: u64, mut next: StoredRangeMap) -> bool {
        if expected != self.rev {
            return false;
        }
        check(&next).unwrap_or_else(|e| panic!("the coordinator wrote a bad map: {e}\n{next:#?}"));
        let before = ownership(&self.map.shards);
        let raised = next.epoch > self.map.epoch;
        assert_eq!(raised, before != ownership(&next.shards), "the epoch must rise exactly when ownership changes");
        assert!(next.epoch >= self.map.epoch && next.epoch <= self.map.epoch + 1);
        // A drain ends only once every live router has switched past its flip or its old owner is gone.
        for m in self.map.moves.iter().filter(|m| m.phase == MovePhase::Draining) {
            if !next.moves.contains(m) {
                let from_live = self.shards.get(&m.from).is_some_and(|s| s.live);
                assert!(!from_live || self.routers.iter().filter(|r| r.live).all(|r| r.switched >= m.epoch), "drain of {} ended while a router still needs {}", m.range, m.from);
            }
        }
        self.rev += 1;
        if next.cutover == 0 {
            next.cutover = self.rev;
        }
        self.map = next;
        true
    }

    fn coordinate(&mut self) -> bool {
        match step(&self.map, &self.members(), &self.cfg) {
            Some(next) => self.cas(self.rev, next),
            None => false,
        }
    }

    fn apply(&mut self, a: &Action) {
        let ids: Vec<String> = self.shards.keys().cloned().collect();
        match a {
            Action::Coordinate => {
                if self.stale.is_none() {
                    self.stale = Some((self.map.clone(), self.rev));
                }
                self.coordinate();
            }
            Action::Failover => {
                if let Some((old, rev)) = self.stale.take() {
                    let members = self.members();
                    if let Some(next) = step(&old, &members, &self.cfg) {
                        let stale_write = rev != self.rev;
                        assert!(!(self.cas(rev, next) && stale_write), "a deposed coordinator overwrote a newer map");
                    }
                }
                self.coordinate();
            }
            Action::Load(i) => {
                let loading: Vec<StoredMove> = self.map.moves.iter().filter(|m| m.phase == MovePhase::Loading).cloned().collect();
                if let Some(m) = pick(&loading, *i) {
                    let rev = self.rev;
                    if let Some(s) = self.shards.get_mut(&m.to).filter(|s| s.live) && !s.loaded.iter().any(|(r, _)| *r == m.range) {
                        s.loaded.push((m.range, rev));
                    }
                }
            }
            Action::Sync(i) => {
                // A shard drops what it neither owns nor drains nor is asked to load.
                if let Some(id) = pick(&ids, *i) {
                    let keep: Vec<HashRange> = self.map.shards.iter().filter(|s| s.id == id).flat_map(|s| s.ranges.clone()).chain(self.map.moves.iter().filter(|m| m.from == id || m.to == id).map(|m| m.range)).collect();
                    let s = self.shards.get_mut(&id).expect("listed");
                    s.loaded.retain(|(r, _)| keep.iter().any(|k| overlaps(k, r)));
                }
            }
            Action::Switch(i) => {
                let epoch = self.map.epoch;
                if let Some(r) = pick(&(0..self.routers.len()).collect::<Vec<_>>(), *i) {
                    self.routers[r].switched = epoch;
                }
            }
            Action::KillShard(i) => {
                if let Some(id) = pick(&ids, *i) {
                    let s = self.shards.get_mut(&id).expect("listed");
                    s.live = false;
                    s.loaded.clear();
                }
            }
            Action::RestartShard(i) => {
                if let Some(id) = pick(&ids, *i) {
                    // It loads what the map gives it before it registers.
                    let owned: Vec<HashRange> = self.map.shards.iter().filter(|s| s.id == id).flat_map(|s| s.ranges.clone()).collect();
                    let rev = self.rev;
                    let s = self.shards.get_mut(&id).expect("listed");
                    if !s.live {
                        s.live = true;
                        s.loaded = owned.into_iter().map(|r| (r, rev)).collect();
                    }
                }
            }
            Action::AddShard => {
                if self.shards.len() < 8 {
                    self.shards.insert(format!("s{}", self.next_shard), ModelShard { live: true, loaded: vec![] });
                    self.next_shard += 1;
                }
            }
            Action::KillRouter(i) => {
                if let Some(r) = pick(&(0..self.routers.len()).collect::<Vec<_>>(), *i) {
                    self.routers[r].live = false;
                }
            }
            Action::StartRouter => {
                if self.routers.len() < 6 {
                    // A new router has no watches yet: it is at the map's epoch.
                    self.routers.push(ModelRouter { id: format!("r{}", self.routers.len()), live: true, switched: self.map.epoch });
                }
            }
            Action::Move(r, to, quarter) => {
                let ranges: Vec<HashRange> = self.map.shards.iter().flat_map(|s| s.ranges.clone()).collect();
                if let (Some(range), Some(to)) = (pick(&ranges, *r), pick(&ids, *to)) {
                    // Sometimes a part of a range: the request splits it off.
                    let width = range.end() - u128::from(range.start());
                    let end = u128::from(range.start()) + width * u128::from(*quarter) / 4;
                    let part = HashRange::new(range.start(), end.max(u128::from(range.start()) + 1)).expect("part");
                    if let Ok(next) = request_move(&self.map, &self.members(), part, &to, &self.cfg) {
                        self.cas(self.rev, next);
                    }
                }
            }
            Action::Split(r, at) => {
                let ranges: Vec<HashRange> = self.map.shards.iter().flat_map(|s| s.ranges.clone()).collect();
                if let Some(range) = pick(&ranges, *r) {
                    let width = range.end() - u128::from(range.start());
                    let point = (u128::from(range.start()) + width * u128::from(*at) / 256) as u64;
                    if let Ok(next) = request_split(&self.map, range, point) {
                        self.cas(self.rev, next);
                    }
                }
            }
            Action::Merge(r) => {
                let mut ranges: Vec<HashRange> = self.map.shards.iter().flat_map(|s| s.ranges.clone()).collect();
                ranges.sort();
                if ranges.len() >= 2 {
                    let i = r % (ranges.len() - 1);
                    if let Ok(next) = request_merge(&self.map, ranges[i], ranges[i + 1]) {
                        self.cas(self.rev, next);
                    }
                }
            }
            Action::Drain(i) => {
                if let Some(id) = pick(&ids, *i) && let Ok(next) = request_drain(&self.map, &id) {
                    self.cas(self.rev, next);
                }
            }
            Action::Add(i) => {
                if let Some(id) = pick(&ids, *i) && let Ok(next) = request_add(&self.map, &self.members(), &id) {
                    self.cas(self.rev, next);
                }
            }
            Action::Rebalance => {
                let next = request_rebalance(&self.map, &self.members(), &self.cfg);
                self.cas(self.rev, next);
            }
        }
        self.invariants();
    }

    fn invariants(&self) {
        check(&self.map).unwrap_or_else(|e| panic!("{e}"));
        let members = self.members();
        for s in &self.map.shards {
            if let Some(m) = members.shards.iter().find(|m| m.id == s.id) {
                for r in &s.ranges {
                    assert!(has_loaded(m, r), "live shard {} owns {r} without having loaded it", s.id);
                }
            }
        }
    }

    /// Failures stop: every live party does its part until nothing changes.
    fn settle(&mut self) {
        for _ in 0..400 {
            let before = (self.map.clone(), self.shards.iter().map(|(k, s)| (k.clone(), s.loaded.clone())).collect::<Vec<_>>(), self.routers.iter().map(|r| r.switched).collect::<Vec<_>>());
            self.coordinate();
            for i in 0..self.map.moves.len() {
                self.apply(&Action::Load(i));
            }
            for i in 0..self.routers.len() {
                self.apply(&Action::Switch(i));
            }
            for i in 0..self.shards.len() {
                self.apply(&Action::Sync(i));
            }
            let after = (self.map.clone(), self.shards.iter().map(|(k, s)| (k.clone(), s.loaded.clone())).collect::<Vec<_>>(), self.routers.iter().map(|r| r.switched).collect::<Vec<_>>());
            if before == after {
                return;
            }
        }
        panic!("the coordinator did not settle: {:#?}", self.map);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_interleaving_keeps_i1_and_settles(k in 1usize..5, routers in 0usize..3, automatic in any::<bool>(), actions in proptest::collection::vec(action(), 0..60)) {
        let mut w = World::new(k, routers, automatic);
        for a in &actions {
            w.apply(a);
        }
        w.settle();
        prop_assert!(w.map.moves.is_empty(), "moves left after settling: {:?}", w.map.moves);
        let live: Vec<&String> = w.shards.iter().filter(|(_, s)| s.live).map(|(id, _)| id).collect();
        if !live.is_empty() {
            for s in &w.map.shards {
                prop_assert!(s.ranges.is_empty() || live.contains(&&s.id), "dead shard {} still owns ranges after settling", s.id);
            }
        }
        let takers: Vec<&String> = live.iter().copied().filter(|id| !w.map.shards.iter().any(|s| s.id == **id && s.cordoned)).collect();
        if !takers.is_empty() {
            for s in w.map.shards.iter().filter(|s| s.cordoned && live.contains(&&s.id)) {
                prop_assert!(s.ranges.is_empty(), "drained shard {} still owns {:?}", s.id, s.ranges);
            }
        }
        if automatic && takers.len() >= 2 {
            let loads = loads(&w.map, &w.members());
            let mean = loads.iter().map(|l| l.1).sum::<f64>() / loads.len() as f64;
            let high = loads.last().expect("loads").1;
            prop_assert!(high <= w.cfg.start_above * mean * 1.001, "most loaded shard at {high} against a mean of {mean}");
        }
    }
}

#[test]
fn requests_are_refused_with_clear_errors() {
    let w = World::new(2, 1, false);
    let members = w.members();
    let [a, b] = [w.map.shards[0].ranges[0], w.map.shards[1].ranges[0]];
    assert_eq!(request_move(&w.map, &members, a, "nobody", &w.cfg), Err(RequestError::UnknownShard("nobody".into())));
    assert_eq!(request_move(&w.map, &members, a, "s0", &w.cfg), Err(RequestError::AlreadyThere(a.to_string(), "s0".into())));
    let moved = request_move(&w.map, &members, a, "s1", &w.cfg).unwrap();
    assert!(matches!(request_move(&moved, &members, a, "s1", &w.cfg), Err(RequestError::MoveInFlight(..))));
    assert!(matches!(request_split(&w.map, a, a.start()), Err(RequestError::BadSplitPoint(..))));
    assert!(matches!(request_merge(&w.map, a, b), Err(RequestError::NotMergeable(..))));
    assert!(matches!(request_drain(&w.map, "nobody"), Err(RequestError::UnknownShard(_))));
    // A range across two owners is nobody's as a whole.
    let across = HashRange::new(a.start(), b.end()).unwrap();
    assert!(matches!(request_move(&w.map, &members, across, "s1", &w.cfg), Err(RequestError::NotOwned(..))));
}

#[test]
fn a_move_loads_flips_and_drains_in_order() {
    let mut w = World::new(2, 1, false);
    let a = w.map.shards[0].ranges[0];
    let next = request_move(&w.map, &w.members(), a, "s1", &w.cfg).unwrap();
    assert_eq!(transitions(&w.map, &next), (vec![a], vec![], vec![]));
    assert!(w.cas(w.rev, next));
    let loading = w.map.clone();
    // Nothing to do until s1 has loaded the range.
    assert!(!w.coordinate());
    w.apply(&Action::Load(0));
    assert!(w.coordinate());
    assert_eq!((w.map.epoch, w.map.moves[0].phase, w.map.cutover), (2, MovePhase::Draining, w.rev));
    assert!(w.map.shards.iter().find(|s| s.id == "s1").unwrap().ranges.contains(&a));
    // The drain waits for the router.
    assert!(!w.coordinate());
    w.apply(&Action::Switch(0));
    let draining = w.map.clone();
    assert!(w.coordinate());
    assert!(w.map.moves.is_empty());
    // The flip is no transition; the drain's end completes the move; a load's end cancels it.
    assert_eq!(transitions(&loading, &draining), (vec![], vec![], vec![]));
    assert_eq!(transitions(&draining, &w.map), (vec![], vec![a], vec![]));
    assert_eq!(transitions(&loading, &w.map), (vec![], vec![], vec![a]));
}
