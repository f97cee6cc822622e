//! # shardplane-ctl
//!
//! Owns the operator's tools (RFC 0006): `shardctl`, which shows the shards, their ranges and
//! the moves in flight, asks for moves, splits, merges, drains and rebalancing, names the
//! axis the cluster is loaded along ([`axes`], RFC 0015, from what the shards publish), and
//! shows and maintains the store itself ([`store`], RFC 0016); and the
//! standalone `shardplane-coordinator` process. Both find the cluster through etcd
//! (`--etcd-endpoints`), as the router does.
//!
//! It must never talk to a shard or a router directly, nor decide anything itself: a request is
//! an edit of the stored range map, computed by `shardplane-coordinator::rebalance` (which
//! refuses what cannot be done) and written by compare-and-swap; the coordinator carries it out.

pub mod axes;
pub mod store;

use serde::Serialize;
use shardplane_coordinator::rebalance::{self, Config, RequestError};
use shardplane_keyspace::HashRange;
use shardplane_storage::members::Members;
use shardplane_storage::range_map::{MovePhase, StoredRangeMap};
use shardplane_storage::{Storage, StorageError};

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// The request cannot be done (unknown shard, range not owned, move in flight, …).
    #[error("{0}")]
    Refused(RequestError),
    /// etcd could not be reached, or answered with an error.
    #[error("etcd: {0}")]
    Storage(StorageError),
    /// No range map is stored: no router or coordinator has published one.
    #[error("no range map is stored in this etcd: start a router (shard-router) first")]
    NoMap,
    /// The map kept changing under the request.
    #[error("the range map kept changing while the request was being written; try again")]
    Contended,
    /// The arguments do not parse.
    #[error("{0}")]
    Usage(String),
    /// `--wait` ran out of time.
    #[error("{0}")]
    Timeout(String),
}

impl From<StorageError> for CtlError {
    fn from(e: StorageError) -> Self {
        CtlError::Storage(e)
    }
}

impl From<RequestError> for CtlError {
    fn from(e: RequestError) -> Self {
        CtlError::Refused(e)
    }
}

/// One shard as `status` shows it.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    pub id: String,
    pub url: String,
    /// `live` (its lease is alive) or `dead`.
    pub health: String,
    /// Being drained.
    pub cordoned: bool,
    pub ranges: Vec<String>,
    pub objects: u64,
    pub cache_bytes: u64,
}

/// One move as `status` shows it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MoveStatus {
    pub range: String,
    pub from: String,
    pub to: String,
    pub phase: String,
}

/// Everything `status` shows.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub epoch: u64,
    pub cutover: u64,
    pub leader: Option<String>,
    pub balancing: bool,
    pub shards: Vec<ShardStatus>,
    pub moves: Vec<MoveStatus>,
    pub routers: Vec<(String, u64)>,
    /// Members whose NOSPACE alarm is raised (writes refused until `shardctl recover-space`).
    pub space_alarms: Vec<u64>,
}

/// The status of a map and its members: every shard of the map, then live members the map
/// does not list yet.
pub fn status(map: &StoredRangeMap, members: &Members, leader: Option<String>) -> Status {
    let mut shards: Vec<ShardStatus> = map
        .shards
        .iter()
        .map(|s| {
            let m = members.shards.iter().find(|m| m.id == s.id);
            ShardStatus {
                id: s.id.clone(),
                url: m.map_or_else(|| s.url.clone(), |m| m.url.clone()),
                health: if m.is_some() { "live" } else { "dead" }.into(),
                cordoned: s.cordoned,
                ranges: s.ranges.iter().map(HashRange::to_string).collect(),
                objects: m.map_or(0, |m| m.loaded.iter().map(|l| l.objects).sum()),
                cache_bytes: m.map_or(0, |m| m.loaded.iter().map(|l| l.cache_bytes).sum()),
            }
        })
        .collect();
    shards.sort_by_key(|s| s.ranges.first().cloned().unwrap_or_default());
    for m in &members.shards {
        if !map.shards.iter().any(|s| s.id == m.id) {
            shards.push(ShardStatus { id: m.id.clone(), url: m.url.clone(), health: "live".into(), cordoned: false, ranges: vec![], objects: m.loaded.iter().map(|l| l.objects).sum(), cache_bytes: m.loaded.iter().map(|l| l.cache_bytes).sum() });
        }
    }
    let moves = map.moves.iter().map(|m| MoveStatus { range: m.range.to_string(), from: m.from.clone(), to: m.to.clone(), phase: if m.phase == MovePhase::Loading { "loading" } else { "draining" }.into() }).collect();
    Status { epoch: map.epoch, cutover: map.cutover, leader, balancing: map.balancing, shards, moves, space_alarms: Vec::new(), routers: members.routers.iter().map(|r| (r.id.clone(), r.switched_epoch)).collect() }
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// Rows padded into columns.
fn columns(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    rows.iter().map(|r| r.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect::<Vec<_>>().join("   ").trim_end().to_owned() + "\n").collect()
}

/// `status` as a table.
/// The line `status` shows while etcd's NOSPACE alarm is raised on `members`.
pub fn render_space_alarms(members: &[u64]) -> String {
    let members: Vec<String> = members.iter().map(|m| format!("{m:x}")).collect();
    format!("ALARM NOSPACE on etcd member(s) {}: writes are refused; run `shardctl recover-space`\n\n", members.join(", "))
}

pub fn render_status(s: &Status) -> String {
    let mut out = format!("EPOCH {}   CUTOVER {}   LEADER {}   BALANCING {}\n\n", s.epoch, s.cutover, s.leader.as_deref().unwrap_or("none"), if s.balancing { "yes" } else { "no" });
    if !s.space_alarms.is_empty() {
        out.push_str(&render_space_alarms(&s.space_alarms));
    }
    let mut rows = vec![["SHARD", "HEALTH", "STATE", "RANGES", "OBJECTS", "CACHE", "URL"].map(str::to_owned).to_vec()];
    for sh in &s.shards {
        rows.push(vec![sh.id.clone(), sh.health.clone(), if sh.cordoned { "draining" } else { "active" }.into(), if sh.ranges.is_empty() { "-".into() } else { sh.ranges.join(",") }, sh.objects.to_string(), human_bytes(sh.cache_bytes), sh.url.clone()]);
    }
    out.push_str(&columns(&rows));
    if !s.moves.is_empty() {
        out.push('\n');
        let mut rows = vec![["MOVE", "FROM", "TO", "PHASE"].map(str::to_owned).to_vec()];
        rows.extend(s.moves.iter().map(|m| vec![m.range.clone(), m.from.clone(), m.to.clone(), m.phase.clone()]));
        out.push_str(&columns(&rows));
    }
    out
}

/// Parses a hash: `0x` and 16 hex digits.
pub fn parse_hash(s: &str) -> Result<u64, CtlError> {
    let digits = s.strip_prefix("0x").filter(|d| d.len() == 16).ok_or_else(|| CtlError::Usage(format!("invalid hash {s:?}: expected 0x and 16 hex digits")))?;
    u64::from_str_radix(digits, 16).map_err(|_| CtlError::Usage(format!("invalid hash {s:?}: expected 0x and 16 hex digits")))
}

/// Parses a range: `0xSTART-0xEND`.
pub fn parse_range(s: &str) -> Result<HashRange, CtlError> {
    s.parse().map_err(|e| CtlError::Usage(format!("{e}")))
}

/// Reads the map, applies `edit` and writes the result by compare-and-swap, again from the start
/// when the map changed meanwhile. Returns the map written.
pub async fn edit_map(storage: &Storage, edit: impl Fn(&StoredRangeMap, &Members) -> Result<StoredRangeMap, RequestError>) -> Result<StoredRangeMap, CtlError> {
    for _ in 0..5 {
        let current = storage.load_range_map().await?.ok_or(CtlError::NoMap)?;
        let members = storage.members().await?;
        let next = edit(&current.map, &members)?;
        if next == current.map {
            return Ok(next);
        }
        match storage.store_range_map(&next, Some(current.mod_revision)).await {
            Ok(_) => return Ok(next),
            Err(StorageError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(CtlError::Contended)
}

/// The current status, read from etcd.
pub async fn read_status(storage: &Storage) -> Result<Status, CtlError> {
    let map = storage.load_range_map().await?.ok_or(CtlError::NoMap)?.map;
    let members = storage.members().await?;
    let mut s = status(&map, &members, storage.leader().await?);
    s.space_alarms = storage.space_alarms().await?;
    Ok(s)
}

/// The planner's settings shardctl assumes (those of the coordinator by default).
pub fn plan() -> Config {
    Config::default()
}

/// What `rebalance --dry-run` would start: the moves of the planned map that are not in flight.
pub fn planned_moves(map: &StoredRangeMap, members: &Members) -> Vec<MoveStatus> {
    let next = rebalance::request_rebalance(map, members, &plan());
    status(&next, members, None).moves.into_iter().filter(|m| !map.moves.iter().any(|o| o.range.to_string() == m.range)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardplane_storage::members::{LoadedRange, ShardMember};
    use shardplane_storage::range_map::StoredShard;

    fn map() -> (StoredRangeMap, Members) {
        let ranges = HashRange::split_even(2);
        let shards = ranges.iter().enumerate().map(|(i, r)| StoredShard { id: format!("s{i}"), url: format!("http://127.0.0.1:{}", 9000 + i), ranges: vec![*r], cordoned: false }).collect();
        let members = Members { shards: vec![ShardMember { id: "s0".into(), url: "http://127.0.0.1:9100".into(), capacity_bytes: 0, loaded: vec![LoadedRange { range: ranges[0], revision: 5, objects: 10, cache_bytes: 2048 }], load: Default::default() }, ShardMember { id: "s9".into(), url: "http://127.0.0.1:9200".into(), capacity_bytes: 0, loaded: vec![], load: Default::default() }], routers: vec![], revision: 9 };
        (StoredRangeMap { epoch: 3, cutover: 7, shards, moves: vec![], balancing: false }, members)
    }

    #[test]
    fn status_shows_live_dead_and_unplaced_shards() {
        let (m, members) = map();
        let s = status(&m, &members, Some("r0".into()));
        assert_eq!(s.shards.iter().map(|s| (s.id.as_str(), s.health.as_str(), s.objects)).collect::<Vec<_>>(), vec![("s0", "live", 10), ("s1", "dead", 0), ("s9", "live", 0)]);
        assert_eq!(s.shards[0].url, "http://127.0.0.1:9100", "a live shard's address is its own");
        let text = render_status(&s);
        assert!(text.starts_with("EPOCH 3   CUTOVER 7   LEADER r0   BALANCING no\n"), "{text}");
        assert!(text.contains("s0      live     active   0x0000000000000000-0x8000000000000000    10        2.0 KiB   http://127.0.0.1:9100\n"), "{text}");
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["shards"][1]["health"], "dead");
        assert_eq!(json["shards"][0]["cacheBytes"], 2048);
    }

    #[test]
    fn hashes_and_ranges_parse_or_say_why_not() {
        assert_eq!(parse_hash("0x8000000000000000").unwrap(), 1 << 63);
        assert!(parse_hash("8000").unwrap_err().to_string().contains("16 hex digits"));
        assert!(parse_range("0x0000000000000000-0x10000000000000000").is_ok());
        assert!(parse_range("nonsense").is_err());
    }
}
