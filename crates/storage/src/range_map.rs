//! The stored range map: one etcd key holding which shard owns which hash ranges in which epoch
//! (decision 7). Shards follow it to know their epoch and what they may serve; routers read it
//! to route, and read it again when a shard refuses a key. Writers (the coordinator) replace it
//! by compare-and-swap on the key's `mod_revision`.
//!
//! This module owns only the document's format and how it is read, written and followed; whether
//! a map is valid (every hash owned exactly once) is the coordinator's rule.

use crate::{Result, Storage, StorageError, WatchItem};
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
}

/// The whole map as stored.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredRangeMap {
    /// Raised whenever a range changes owner; addresses may change within an epoch.
    pub epoch: u64,
    pub shards: Vec<StoredShard>,
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

fn decode(value: &[u8]) -> Result<StoredRangeMap> {
    serde_json::from_slice(value).map_err(|e| StorageError::Etcd(format!("the stored range map is unreadable: {e}")))
}

impl Storage {
    /// The current range map, if one was ever written (a quorum read).
    pub async fn load_range_map(&self) -> Result<Option<VersionedRangeMap>> {
        let (kv, _) = self.get(RANGE_MAP_KEY).await?;
        kv.map(|kv| Ok(VersionedRangeMap { map: decode(&kv.value)?, mod_revision: kv.mod_revision })).transpose()
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

    /// Follows the range map: the receiver always holds the latest map read (`None` until one
    /// exists). Reconnects after errors; ends when every receiver is gone.
    pub fn follow_range_map(&self) -> watch::Receiver<Option<StoredRangeMap>> {
        let (tx, rx) = watch::channel(None);
        let storage = self.clone();
        tokio::spawn(async move {
            while !tx.is_closed() {
                if let Err(e) = storage.follow_once(&tx).await {
                    tracing::warn!(error = %e, "following the range map failed; retrying");
                }
                tokio::select! {
                    _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
                    _ = tx.closed() => return,
                }
            }
        });
        rx
    }

    async fn follow_once(&self, tx: &watch::Sender<Option<StoredRangeMap>>) -> Result<()> {
        let (kv, rev) = self.get(RANGE_MAP_KEY).await?;
        if let Some(kv) = kv {
            tx.send_replace(Some(decode(&kv.value)?));
        }
        let mut end = RANGE_MAP_KEY.to_vec();
        end.push(0);
        let mut w = self.watch_range(RANGE_MAP_KEY, &end, rev).await?;
        loop {
            tokio::select! {
                item = w.next() => match item? {
                    Some(WatchItem::Events(events)) => {
                        if let Some(last) = events.iter().rev().find(|e| !e.deleted) {
                            tx.send_replace(Some(decode(&last.kv.value)?));
                        }
                    }
                    Some(WatchItem::Progress(_)) => {}
                    None => return Ok(()),
                },
                _ = tx.closed() => return Ok(()),
            }
        }
    }
}
