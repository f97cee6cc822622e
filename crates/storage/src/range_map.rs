//! The stored range map: one etcd key holding which shard owns which hash ranges in which epoch
//! (RFC 0003, "The range map"). Shards follow it to know their epoch and what they may serve; routers read it
//! to route, and read it again when a shard refuses a key. Writers (the coordinator) replace it
//! by compare-and-swap on the key's `mod_revision`.
//!
//! This module owns only the document's format and how it is read, written and followed; whether
//! a map is valid (every hash owned exactly once) is the coordinator's rule.

use crate::{Result, Storage, StorageError};
use shardplane_keyspace::{HashRange, RangeSet};
use tokio::sync::watch;

/// The etcd key of the range map.
pub const RANGE_MAP_KEY: &[u8] = b"/shardplane/rangemap";

/// One shard's entry in the map.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredShard {
    /// The shard's stable name (`--id`).
    pub id: String,
    /// Where it serves HTTP.
    pub url: String,
    /// The hash ranges it owns in this epoch (`0xLO-0xHI`).
    #[serde(with = "ranges_as_strings")]
    pub ranges: Vec<HashRange>,
    /// Being drained (`shardctl drain`): its ranges move away and it is given none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cordoned: bool,
}

/// Where a move of a range stands (RFC 0006).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MovePhase {
    /// `to` loads and follows the range; `from` still owns it.
    Loading,
    /// After the flip: `to` owns the range; `from` still serves it to routers that have not
    /// switched yet.
    Draining,
}

/// A range moving from one shard to another.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredMove {
    #[serde(with = "range_as_string")]
    pub range: HashRange,
    pub from: String,
    pub to: String,
    pub phase: MovePhase,
    /// The epoch the flip raised the map to (0 while loading).
    #[serde(default)]
    pub epoch: u64,
    /// Reassigning a dead owner's range (cancelled if the owner comes back first).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reassign: bool,
}

/// The whole map as stored.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredRangeMap {
    /// Raised whenever a range changes owner; addresses may change within an epoch.
    pub epoch: u64,
    /// The revision of the write that raised the map to this epoch: from it on, this epoch's
    /// owners are the source of their ranges' events (RFC 0006). Writers leave it 0 when they
    /// raise the epoch; reading fills it with the write's revision.
    #[serde(default)]
    pub cutover: u64,
    pub shards: Vec<StoredShard>,
    /// Moves in flight.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<StoredMove>,
    /// Automatic rebalancing is moving ranges (it starts above 1.2× the mean load and stops at
    /// 1.1×, RFC 0006).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub balancing: bool,
}

impl StoredRangeMap {
    /// The ranges the map gives to shard `id` (empty if it is not in the map).
    pub fn ranges_of(&self, id: &str) -> RangeSet {
        let ranges = self.shards.iter().filter(|s| s.id == id).flat_map(|s| s.ranges.iter().copied()).collect();
        // A map with overlapping ranges for one shard is refused by its writer; read it as none.
        RangeSet::from_disjoint(ranges).unwrap_or_default()
    }
}

/// The map and the `mod_revision` to compare against when replacing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionedRangeMap {
    pub map: StoredRangeMap,
    pub mod_revision: u64,
}

pub(crate) mod range_as_string {
    use serde::{Deserialize, Deserializer, Serializer};
    use shardplane_keyspace::HashRange;

    pub fn serialize<S: Serializer>(range: &HashRange, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&range.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HashRange, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

mod ranges_as_strings {
    use serde::{Deserialize, Deserializer, Serializer};
    use shardplane_keyspace::HashRange;

    pub fn serialize<S: Serializer>(ranges: &[HashRange], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(ranges.iter().map(|r| r.to_string()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<HashRange>, D::Error> {
        Vec::<String>::deserialize(d)?.iter().map(|s| s.parse().map_err(serde::de::Error::custom)).collect()
    }
}

/// The stored map at `mod_revision`, with its cut-over filled in if the write that raised the
/// epoch left it for the reader.
fn decode(value: &[u8], mod_revision: u64) -> Result<StoredRangeMap> {
    let mut map: StoredRangeMap = serde_json::from_slice(value).map_err(|e| StorageError::Etcd(format!("the stored range map is unreadable: {e}")))?;
    if map.cutover == 0 {
        map.cutover = mod_revision;
    }
    Ok(map)
}

impl Storage {
    /// The current range map, if one was ever written (a quorum read).
    pub async fn load_range_map(&self) -> Result<Option<VersionedRangeMap>> {
        let (kv, _) = self.get(RANGE_MAP_KEY).await?;
        kv.map(|kv| Ok(VersionedRangeMap { map: decode(&kv.value, kv.mod_revision)?, mod_revision: kv.mod_revision })).transpose()
    }

    /// Writes `map` if the stored one is still at `expected` (`None`: if none is stored).
    /// Returns the new `mod_revision`; [`StorageError::Conflict`] or
    /// [`StorageError::AlreadyExists`] if another writer came first.
    pub async fn store_range_map(&self, map: &StoredRangeMap, expected: Option<u64>) -> Result<u64> {
        let value = serde_json::to_vec(map).expect("range map serializes");
        match expected {
            None => self.create(RANGE_MAP_KEY, value).await,
            Some(rev) => self.update(RANGE_MAP_KEY, value, rev).await,
        }
    }

    /// Writes `map` as [`Storage::store_range_map`] does, but only while `leader_key` still
    /// holds `leader` (one transaction): a coordinator that lost its leadership without noticing
    /// cannot overwrite its successor's map. [`StorageError::Conflict`] otherwise.
    pub async fn store_range_map_as_leader(&self, map: &StoredRangeMap, expected: Option<u64>, leader_key: &str, leader: &str) -> Result<u64> {
        use etcd_client::{Compare, CompareOp, Txn, TxnOp};
        let value = serde_json::to_vec(map).expect("range map serializes");
        let map_cmp = match expected {
            None => Compare::create_revision(RANGE_MAP_KEY, CompareOp::Equal, 0),
            Some(rev) => Compare::mod_revision(RANGE_MAP_KEY, CompareOp::Equal, rev as i64),
        };
        let txn = Txn::new().when([map_cmp, Compare::value(leader_key, CompareOp::Equal, leader)]).and_then([TxnOp::put(RANGE_MAP_KEY, value, None)]);
        let resp = self
            .write(|c| {
                let txn = txn.clone();
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        if !resp.succeeded() {
            return Err(StorageError::Conflict { current: None });
        }
        Ok(resp.header().map_or(0, |h| h.revision() as u64))
    }

    /// Follows the range map: the receiver always holds the latest map read (`None` until one
    /// exists). Reconnects after errors; ends when every receiver is gone.
    pub fn follow_range_map(&self) -> watch::Receiver<Option<StoredRangeMap>> {
        let (tx, rx) = watch::channel(None);
        let storage = self.clone();
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(async move {
            let mut end = RANGE_MAP_KEY.to_vec();
            end.push(0);
            let options = crate::follow::FollowOptions::fixed("range map", std::time::Duration::from_millis(500), stop.clone());
            let following = crate::follow::follow(&storage, RANGE_MAP_KEY, &end, options, |f| {
                let latest = match f {
                    crate::follow::Followed::Listed { kvs, .. } => kvs.into_iter().last(),
                    crate::follow::Followed::Changed(events) => events.into_iter().rev().find(|e| !e.deleted).map(|e| e.kv),
                    crate::follow::Followed::Progress(_) => None,
                };
                if let Some(kv) = latest {
                    tx.send_replace(Some(decode(&kv.value, kv.mod_revision).map_err(|e| e.to_string())?));
                }
                Ok(())
            });
            // Followed until every receiver is gone.
            tokio::select! {
                _ = following => {}
                _ = tx.closed() => stop.cancel(),
            }
        });
        rx
    }
}
