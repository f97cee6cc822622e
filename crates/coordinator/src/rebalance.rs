//! The coordinator's decisions (RFC 0006): given the stored range map and the live members,
//! the next map to write, if any; and the operator's requests (move, split, merge, drain, add,
//! rebalance) as edits of the map, refused with a clear error when they cannot be done.
//!
//! Pure functions: no I/O, no clock. Every decision depends only on what is stored in etcd, so
//! a coordinator that takes over from a dead one continues exactly where it stopped.

use crate::map_store::coalesce;
use shardplane_keyspace::HashRange;
use shardplane_storage::members::{Members, ShardMember};
use shardplane_storage::range_map::{MovePhase, StoredMove, StoredRangeMap, StoredShard};
use std::collections::HashMap;

/// How the coordinator plans.
#[derive(Clone, Debug)]
pub struct Config {
    /// Moves the planner starts at once (reassignments of a dead shard's ranges are not
    /// counted: they cannot wait).
    pub max_moves: usize,
    /// Automatic rebalancing starts when the most loaded shard is above this × the mean…
    pub start_above: f64,
    /// …and stops once it is at or below this × the mean.
    pub stop_at: f64,
    /// Whether the coordinator rebalances by itself (else only when asked).
    pub automatic: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self { max_moves: 1, start_above: 1.2, stop_at: 1.1, automatic: true }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("unknown shard {0:?}: it is neither in the range map nor a live member")]
    UnknownShard(String),
    #[error("shard {0:?} is not live (no member key: its lease has expired or it never registered)")]
    NotLive(String),
    #[error("shard {0:?} is being drained; it takes no ranges")]
    Cordoned(String),
    #[error("range {0} is not owned by one shard as a whole; its owners' ranges are {1}")]
    NotOwned(String, String),
    #[error("range {0} already belongs to shard {1:?}")]
    AlreadyThere(String, String),
    #[error("a move of {0} is already in flight ({1} → {2})")]
    MoveInFlight(String, String, String),
    #[error("{0} moves are in flight, the most allowed at once; wait for one to finish")]
    TooManyMoves(usize),
    #[error("cannot split {0} at 0x{1:016x}: the point must lie strictly inside the range")]
    BadSplitPoint(String, u64),
    #[error("ranges {0} and {1} cannot merge: they must be adjacent and owned by one shard")]
    NotMergeable(String, String),
}

/// A shard's load: the cache bytes of its owned ranges, as its member key reports them (ranges
/// the map cut differently from what the shard loaded are estimated by their share of the hash
/// space: keys spread uniformly by hash).
pub fn range_load(member: Option<&ShardMember>, range: &HashRange) -> f64 {
    let Some(m) = member else { return 0.0 };
    m.loaded
        .iter()
        .map(|l| {
            let lo = u128::from(l.range.start()).max(u128::from(range.start()));
            let hi = l.range.end().min(range.end());
            if hi <= lo {
                return 0.0;
            }
            let width = (l.range.end() - u128::from(l.range.start())) as f64;
            l.cache_bytes as f64 * ((hi - lo) as f64 / width)
        })
        .sum()
}

/// Whether `member` has loaded all of `range` (it can serve the range's events after the load).
pub fn has_loaded(member: &ShardMember, range: &HashRange) -> bool {
    let loaded = coalesce(member.loaded.iter().map(|l| l.range).collect());
    loaded.iter().any(|l| l.start() <= range.start() && l.end() >= range.end())
}

fn live(members: &Members) -> HashMap<&str, &ShardMember> {
    members.shards.iter().map(|s| (s.id.as_str(), s)).collect()
}

fn owner_of<'a>(map: &'a StoredRangeMap, range: &HashRange) -> Option<&'a StoredShard> {
    map.shards.iter().find(|s| s.ranges.contains(range))
}

fn overlaps(a: &HashRange, b: &HashRange) -> bool {
    u128::from(a.start()) < b.end() && u128::from(b.start()) < a.end()
}

fn shard_mut<'a>(map: &'a mut StoredRangeMap, id: &str, url: &str) -> &'a mut StoredShard {
    if let Some(i) = map.shards.iter().position(|s| s.id == id) {
        return &mut map.shards[i];
    }
    map.shards.push(StoredShard { id: id.to_owned(), url: url.to_owned(), ranges: vec![], cordoned: false });
    map.shards.last_mut().expect("pushed")
}

/// Load by live, uncordoned shard (with the ranges moving to it counted as its own).
fn loads(map: &StoredRangeMap, members: &Members) -> Vec<(String, f64)> {
    let live = live(members);
    let mut out: Vec<(String, f64)> = members.shards.iter().filter(|m| !map.shards.iter().any(|s| s.id == m.id && s.cordoned)).map(|m| (m.id.clone(), 0.0)).collect();
    for s in &map.shards {
        for r in &s.ranges {
            let load = range_load(live.get(s.id.as_str()).copied(), r);
            let moving_to = map.moves.iter().find(|m| m.range == *r && m.phase == MovePhase::Loading).map(|m| m.to.as_str());
            let holder = moving_to.unwrap_or(&s.id);
            if let Some(e) = out.iter_mut().find(|(id, _)| id == holder) {
                e.1 += load;
            }
        }
    }
    out.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    out
}

/// The least loaded live shard that may take a range, other than `not`.
fn least_loaded(map: &StoredRangeMap, members: &Members, not: &str) -> Option<String> {
    loads(map, members).into_iter().map(|(id, _)| id).find(|id| id != not)
}

/// The next map to write, if anything is to be done: one step of RFC 0006, in order —
/// cancel loads whose target died, finish drains, flip what has loaded, reassign a dead
/// shard's ranges, move a drained shard's ranges away, rebalance, refresh addresses.
pub fn step(map: &StoredRangeMap, members: &Members, cfg: &Config) -> Option<StoredRangeMap> {
    let live = live(members);
    let mut next = map.clone();

    // A load whose target is gone or cordoned cannot finish, and a reassignment whose owner came
    // back is not needed: cancel them (the owner never changed).
    next.moves.retain(|m| m.phase == MovePhase::Draining || live.contains_key(m.to.as_str()) && (m.reassign || !map.shards.iter().any(|s| s.id == m.to && s.cordoned)) && !(m.reassign && live.contains_key(m.from.as_str())));
    // A drain ends when every live router has switched past its flip, or when the old owner,
    // whose copy it keeps serving, is gone.
    next.moves.retain(|m| m.phase == MovePhase::Loading || (live.contains_key(m.from.as_str()) && !members.routers.iter().all(|r| r.switched_epoch >= m.epoch)));

    // Flip every move whose target has loaded its range: one new epoch for all of them.
    let ready: Vec<usize> = (0..next.moves.len()).filter(|&i| next.moves[i].phase == MovePhase::Loading && live.get(next.moves[i].to.as_str()).is_some_and(|m| has_loaded(m, &next.moves[i].range))).collect();
    if !ready.is_empty() {
        next.epoch += 1;
        next.cutover = 0;
        for i in ready {
            let StoredMove { range, from, to, .. } = next.moves[i].clone();
            if let Some(s) = next.shards.iter_mut().find(|s| s.id == from) {
                s.ranges.retain(|r| *r != range);
            }
            let url = live[to.as_str()].url.clone();
            shard_mut(&mut next, &to, &url).ranges.push(range);
            next.moves[i].phase = MovePhase::Draining;
            next.moves[i].epoch = next.epoch;
        }
        next.shards.retain(|s| !s.ranges.is_empty() || live.contains_key(s.id.as_str()));
        return Some(next);
    }

    // A dead owner's ranges go to live shards now, whatever else is in flight.
    let busy = |next: &StoredRangeMap, r: &HashRange| next.moves.iter().any(|m| overlaps(&m.range, r));
    let dead: Vec<(String, HashRange)> = next.shards.iter().filter(|s| !live.contains_key(s.id.as_str())).flat_map(|s| s.ranges.iter().map(|r| (s.id.clone(), *r))).collect();
    for (from, range) in dead {
        if busy(&next, &range) {
            continue;
        }
        // A shard being drained is still better than no copy at all.
        let to = least_loaded(&next, members, &from).or_else(|| members.shards.iter().map(|m| m.id.clone()).find(|id| *id != from));
        if let Some(to) = to {
            next.moves.push(StoredMove { range, from, to, phase: MovePhase::Loading, epoch: 0, reassign: true });
        }
    }

    // A cordoned shard's ranges leave it, within the bound on moves.
    let cordoned: Vec<(String, HashRange)> = next.shards.iter().filter(|s| s.cordoned && live.contains_key(s.id.as_str())).flat_map(|s| s.ranges.iter().map(|r| (s.id.clone(), *r))).collect();
    for (from, range) in cordoned {
        if next.moves.len() >= cfg.max_moves || busy(&next, &range) {
            break;
        }
        if let Some(to) = least_loaded(&next, members, &from) {
            next.moves.push(StoredMove { range, from, to, phase: MovePhase::Loading, epoch: 0, reassign: false });
        }
    }

    if cfg.automatic || next.balancing {
        balance(&mut next, members, cfg);
    }

    // Addresses follow the members (a restarted shard at a new port keeps its epoch).
    for s in &mut next.shards {
        if let Some(m) = live.get(s.id.as_str()) {
            s.url.clone_from(&m.url);
        }
    }
    (next != *map).then_some(next)
}

/// One planning step of automatic rebalancing: if the most loaded shard is over the bound,
/// start moving (part of) one of its ranges to the least loaded shard.
fn balance(next: &mut StoredRangeMap, members: &Members, cfg: &Config) {
    if !next.moves.is_empty() {
        return;
    }
    let loads = loads(next, members);
    let (Some((low_id, low)), Some((high_id, high))) = (loads.first().cloned(), loads.last().cloned()) else { return };
    let total: f64 = loads.iter().map(|(_, l)| l).sum();
    if total <= 0.0 || loads.len() < 2 {
        next.balancing = false;
        return;
    }
    let mean = total / loads.len() as f64;
    let bound = if next.balancing { cfg.stop_at } else { cfg.start_above };
    if high <= bound * mean {
        next.balancing = false;
        return;
    }
    next.balancing = true;
    // Move what brings the two closest to the mean without swapping their places.
    let want = (high - mean).min(mean - low);
    let live = live(members);
    let high_member = live.get(high_id.as_str()).copied();
    let Some(owner) = next.shards.iter().position(|s| s.id == high_id) else { return };
    // Ranges that hold nothing would not help.
    let mut ranges: Vec<(HashRange, f64)> = next.shards[owner].ranges.iter().map(|r| (*r, range_load(high_member, r))).filter(|(_, l)| *l > 0.0).collect();
    ranges.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (range, load) = match ranges.iter().rev().find(|(_, l)| *l <= want) {
        Some(r) => *r,
        None => match ranges.first() {
            Some(r) => *r,
            None => return,
        },
    };
    let range = if load > want && load > 0.0 {
        // Too big to move whole: cut off the share that moves (keys spread uniformly by hash).
        let width = range.end() - u128::from(range.start());
        let cut = u128::from(range.start()) + ((width as f64) * (want / load)) as u128;
        if cut <= u128::from(range.start()) || cut >= range.end() {
            return;
        }
        let (a, b) = (HashRange::new(range.start(), cut).expect("inside"), HashRange::new(cut as u64, range.end()).expect("inside"));
        let s = &mut next.shards[owner];
        s.ranges.retain(|r| *r != range);
        s.ranges.extend([a, b]);
        a
    } else {
        range
    };
    next.moves.push(StoredMove { range, from: high_id, to: low_id, phase: MovePhase::Loading, epoch: 0, reassign: false });
}

fn owners_text(map: &StoredRangeMap, range: &HashRange) -> String {
    let parts: Vec<String> = map.shards.iter().flat_map(|s| s.ranges.iter().filter(|r| overlaps(r, range)).map(move |r| format!("{r} on {}", s.id))).collect();
    if parts.is_empty() { "none".into() } else { parts.join(", ") }
}

fn check_no_move(map: &StoredRangeMap, range: &HashRange) -> Result<(), RequestError> {
    match map.moves.iter().find(|m| overlaps(&m.range, range)) {
        Some(m) => Err(RequestError::MoveInFlight(m.range.to_string(), m.from.clone(), m.to.clone())),
        None => Ok(()),
    }
}

/// `shardctl move RANGE TO`: moves a range to a live shard. A range inside one of the owner's
/// ranges is split off first.
pub fn request_move(map: &StoredRangeMap, members: &Members, range: HashRange, to: &str, cfg: &Config) -> Result<StoredRangeMap, RequestError> {
    let member = members.shards.iter().find(|m| m.id == to);
    if member.is_none() {
        return Err(if map.shards.iter().any(|s| s.id == to) { RequestError::NotLive(to.into()) } else { RequestError::UnknownShard(to.into()) });
    }
    if map.shards.iter().any(|s| s.id == to && s.cordoned) {
        return Err(RequestError::Cordoned(to.into()));
    }
    check_no_move(map, &range)?;
    if map.moves.len() >= cfg.max_moves {
        return Err(RequestError::TooManyMoves(map.moves.len()));
    }
    let mut next = map.clone();
    let owner = next.shards.iter().position(|s| s.ranges.iter().any(|r| r.start() <= range.start() && r.end() >= range.end())).ok_or_else(|| RequestError::NotOwned(range.to_string(), owners_text(map, &range)))?;
    if next.shards[owner].id == to {
        return Err(RequestError::AlreadyThere(range.to_string(), to.into()));
    }
    let whole = *next.shards[owner].ranges.iter().find(|r| r.start() <= range.start() && r.end() >= range.end()).expect("found above");
    if whole != range {
        let s = &mut next.shards[owner];
        s.ranges.retain(|r| *r != whole);
        s.ranges.push(range);
        if whole.start() < range.start() {
            s.ranges.push(HashRange::new(whole.start(), u128::from(range.start())).expect("left part"));
        }
        if range.end() < whole.end() {
            s.ranges.push(HashRange::new(range.end() as u64, whole.end()).expect("right part"));
        }
    }
    let from = next.shards[owner].id.clone();
    next.moves.push(StoredMove { range, from, to: to.into(), phase: MovePhase::Loading, epoch: 0, reassign: false });
    Ok(next)
}

/// `shardctl split RANGE AT`: one owner's range cut in two (no hash changes owner: same epoch).
pub fn request_split(map: &StoredRangeMap, range: HashRange, at: u64) -> Result<StoredRangeMap, RequestError> {
    let owner = map.shards.iter().position(|s| s.ranges.contains(&range)).ok_or_else(|| RequestError::NotOwned(range.to_string(), owners_text(map, &range)))?;
    if at <= range.start() || u128::from(at) >= range.end() {
        return Err(RequestError::BadSplitPoint(range.to_string(), at));
    }
    check_no_move(map, &range)?;
    let mut next = map.clone();
    let s = &mut next.shards[owner];
    s.ranges.retain(|r| *r != range);
    s.ranges.extend([HashRange::new(range.start(), u128::from(at)).expect("left"), HashRange::new(at, range.end()).expect("right")]);
    Ok(next)
}

/// `shardctl merge A B`: two adjacent ranges of one owner joined (same epoch).
pub fn request_merge(map: &StoredRangeMap, a: HashRange, b: HashRange) -> Result<StoredRangeMap, RequestError> {
    let (a, b) = if a.start() <= b.start() { (a, b) } else { (b, a) };
    let owner = map.shards.iter().position(|s| s.ranges.contains(&a) && s.ranges.contains(&b));
    let Some(owner) = owner.filter(|_| a.end() == u128::from(b.start())) else { return Err(RequestError::NotMergeable(a.to_string(), b.to_string())) };
    check_no_move(map, &a)?;
    check_no_move(map, &b)?;
    let mut next = map.clone();
    let s = &mut next.shards[owner];
    s.ranges.retain(|r| *r != a && *r != b);
    s.ranges.push(HashRange::new(a.start(), b.end()).expect("joined"));
    Ok(next)
}

/// `shardctl drain ID`: the shard takes no more ranges and its own move away, one at a time.
pub fn request_drain(map: &StoredRangeMap, id: &str) -> Result<StoredRangeMap, RequestError> {
    let mut next = map.clone();
    let s = next.shards.iter_mut().find(|s| s.id == id).ok_or_else(|| RequestError::UnknownShard(id.into()))?;
    s.cordoned = true;
    Ok(next)
}

/// `shardctl add ID`: a live shard (uncordoned if it was drained) takes ranges from the most
/// loaded shards until the balance bound holds.
pub fn request_add(map: &StoredRangeMap, members: &Members, id: &str) -> Result<StoredRangeMap, RequestError> {
    let Some(m) = members.shards.iter().find(|m| m.id == id) else {
        return Err(if map.shards.iter().any(|s| s.id == id) { RequestError::NotLive(id.into()) } else { RequestError::UnknownShard(id.into()) });
    };
    let mut next = map.clone();
    shard_mut(&mut next, id, &m.url).cordoned = false;
    next.balancing = true;
    Ok(next)
}

/// `shardctl rebalance`: start balancing now (with `--dry-run`, the moves it would start are
/// those of the returned map).
pub fn request_rebalance(map: &StoredRangeMap, members: &Members, cfg: &Config) -> StoredRangeMap {
    let mut next = map.clone();
    next.balancing = true;
    balance(&mut next, members, &Config { start_above: cfg.stop_at, ..cfg.clone() });
    next
}

/// How the moves changed from one map to the next: (started, completed, cancelled) ranges. A
/// move that leaves while draining completed; one that leaves while loading was cancelled.
pub fn transitions(before: &StoredRangeMap, after: &StoredRangeMap) -> (Vec<HashRange>, Vec<HashRange>, Vec<HashRange>) {
    let same = |a: &StoredMove, b: &StoredMove| a.range == b.range && a.to == b.to && a.from == b.from;
    let started = after.moves.iter().filter(|m| !before.moves.iter().any(|b| same(b, m))).map(|m| m.range).collect();
    let (mut completed, mut cancelled) = (Vec::new(), Vec::new());
    for m in before.moves.iter().filter(|m| !after.moves.iter().any(|a| same(a, m))) {
        if m.phase == MovePhase::Draining { completed.push(m.range) } else { cancelled.push(m.range) }
    }
    (started, completed, cancelled)
}

/// Whether the ranges of `map` tile the hash space with one owner per hash (I1), and its moves
/// are consistent with it: a loading move's range belongs to `from`, a draining one's to `to`,
/// and no two moves overlap.
pub fn check(map: &StoredRangeMap) -> Result<(), String> {
    crate::map_store::address_map(map).map_err(|e| e.to_string())?;
    for (i, m) in map.moves.iter().enumerate() {
        let holder = if m.phase == MovePhase::Loading { &m.from } else { &m.to };
        if owner_of(map, &m.range).map(|s| &s.id) != Some(holder) {
            return Err(format!("move {i} of {} ({:?}) is not on {holder}", m.range, m.phase));
        }
        if map.moves[..i].iter().any(|o| overlaps(&o.range, &m.range)) {
            return Err(format!("move {i} of {} overlaps another", m.range));
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "rebalance_tests.rs"]
mod tests;
