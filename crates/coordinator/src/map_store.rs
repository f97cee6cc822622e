//! The range map as stored in etcd, under the coordinator's rules: a stored map is used only if
//! it tiles the hash space with one owner per hash and distinct shard ids (I1), and a new map
//! raises the epoch exactly when some range changes owner. A shard that comes back at a new
//! address keeps its epoch, so continue tokens and routed requests of that epoch stay valid.

use crate::range_map::{RangeMap, RangeMapError};
use shardplane_keyspace::HashRange;
use shardplane_storage::range_map::{StoredRangeMap, StoredShard};
use shardplane_storage::{Storage, StorageError};

/// A shard as the router addresses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardAddr {
    pub id: String,
    pub url: String,
}

/// Why a map cannot be used or written.
#[derive(Debug, thiserror::Error)]
pub enum MapStoreError {
    #[error("invalid range map: {0}")]
    Invalid(#[from] RangeMapError),
    #[error("two shards are named {0:?}; give each a distinct --id")]
    DuplicateId(String),
    #[error("no range map is stored")]
    Missing,
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// A stored map as the map of shard addresses routers route by, if the map is valid.
pub fn address_map(stored: &StoredRangeMap) -> Result<RangeMap<ShardAddr>, MapStoreError> {
    let mut ids: Vec<&str> = stored.shards.iter().map(|s| s.id.as_str()).collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(MapStoreError::DuplicateId(w[0].to_owned()));
    }
    let entries = stored.shards.iter().flat_map(|s| s.ranges.iter().map(|r| (*r, ShardAddr { id: s.id.clone(), url: s.url.clone() }))).collect();
    Ok(RangeMap::new(stored.epoch, entries)?)
}

/// Who owns which hashes, ignoring addresses and how the ranges are cut (a split or a merge of
/// one owner's ranges changes no hash's owner): the part of a map whose change raises the epoch.
pub fn ownership(shards: &[StoredShard]) -> Vec<(String, Vec<HashRange>)> {
    let mut o: Vec<(String, Vec<HashRange>)> = shards.iter().map(|s| (s.id.clone(), coalesce(s.ranges.clone()))).filter(|(_, r)| !r.is_empty()).collect();
    o.sort();
    o
}

/// `ranges` sorted, with adjacent ones joined.
pub fn coalesce(mut ranges: Vec<HashRange>) -> Vec<HashRange> {
    ranges.sort();
    let mut out: Vec<HashRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if last.end() == u128::from(r.start()) => *last = HashRange::new(last.start(), r.end()).expect("joined ranges are not empty"),
            _ => out.push(r),
        }
    }
    out
}

/// The map that follows `current` when the shards are `shards`: the same epoch if only
/// addresses changed, the next one if any range changed owner (epoch 1 for the first map).
pub fn next_map(current: Option<&StoredRangeMap>, mut shards: Vec<StoredShard>) -> StoredRangeMap {
    shards.sort_by_key(|s| s.ranges.iter().map(|r| r.start()).min());
    match current {
        // Same owners: the epoch and whatever the coordinator has in flight stay.
        Some(c) if ownership(&c.shards) == ownership(&shards) => {
            let cordoned = |id: &str| c.shards.iter().any(|s| s.id == id && s.cordoned);
            let shards = shards.into_iter().map(|s| StoredShard { cordoned: s.cordoned || cordoned(&s.id), ..s }).collect();
            StoredRangeMap { shards, ..c.clone() }
        }
        // Another topology: a new epoch, and nothing of the old one's plans.
        Some(c) => StoredRangeMap { epoch: c.epoch + 1, cutover: 0, shards, moves: vec![], balancing: false },
        None => StoredRangeMap { epoch: 1, cutover: 0, shards, moves: vec![], balancing: false },
    }
}

/// Stores the map for `shards` (see [`next_map`]) by compare-and-swap, retrying when another
/// writer came first. Returns the map now stored. Refuses a map that is not valid.
pub async fn publish(storage: &Storage, shards: Vec<StoredShard>) -> Result<StoredRangeMap, MapStoreError> {
    loop {
        let current = storage.load_range_map().await?;
        let next = next_map(current.as_ref().map(|c| &c.map), shards.clone());
        address_map(&next)?;
        if current.as_ref().is_some_and(|c| c.map == next) {
            return Ok(next);
        }
        match storage.store_range_map(&next, current.map(|c| c.mod_revision)).await {
            Ok(_) => return Ok(next),
            Err(StorageError::Conflict { .. } | StorageError::AlreadyExists) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The stored map and its map of shard addresses.
pub async fn load(storage: &Storage) -> Result<(StoredRangeMap, RangeMap<ShardAddr>), MapStoreError> {
    let stored = storage.load_range_map().await?.ok_or(MapStoreError::Missing)?.map;
    let table = address_map(&stored)?;
    Ok((stored, table))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shard(id: &str, url: &str, ranges: &[HashRange]) -> StoredShard {
        StoredShard { id: id.into(), url: url.into(), ranges: ranges.to_vec(), cordoned: false }
    }

    fn even(k: u32, port: u16) -> Vec<StoredShard> {
        HashRange::split_even(k).iter().enumerate().map(|(i, r)| shard(&format!("s{i}"), &format!("http://127.0.0.1:{}", port + i as u16), &[*r])).collect()
    }

    #[test]
    fn the_epoch_rises_only_when_ownership_changes() {
        let first = next_map(None, even(2, 1000));
        assert_eq!(first.epoch, 1);
        // Same owners at new addresses, listed in another order: same epoch.
        let mut moved = even(2, 2000);
        moved.reverse();
        let again = next_map(Some(&first), moved);
        assert_eq!(again.epoch, 1);
        assert_eq!(again.shards[0].url, "http://127.0.0.1:2000");
        // Four shards instead of two: a new epoch.
        assert_eq!(next_map(Some(&again), even(4, 1000)).epoch, 2);
        // The same owners with one range cut in two: same epoch.
        let mut cut = even(2, 1000);
        let r = cut[0].ranges[0];
        let mid = r.start() + ((r.end() - u128::from(r.start())) / 2) as u64;
        cut[0].ranges = vec![HashRange::new(r.start(), u128::from(mid)).unwrap(), HashRange::new(mid, r.end()).unwrap()];
        assert_eq!(next_map(Some(&again), cut).epoch, 1);
        // The same ranges under other names: a new epoch.
        let renamed: Vec<_> = even(2, 1000).into_iter().map(|mut s| { s.id.push('x'); s }).collect();
        assert_eq!(next_map(Some(&first), renamed).epoch, 2);
    }

    #[test]
    fn invalid_maps_are_refused() {
        let mut dup = even(2, 1000);
        dup[1].id = "s0".into();
        assert!(matches!(address_map(&next_map(None, dup)), Err(MapStoreError::DuplicateId(id)) if id == "s0"));
        let mut gap = even(4, 1000);
        gap.remove(2);
        assert!(matches!(address_map(&next_map(None, gap)), Err(MapStoreError::Invalid(RangeMapError::NotContiguous(_)))));
        let table = address_map(&next_map(None, even(4, 1000))).unwrap();
        assert_eq!(table.owner(u64::MAX).id, "s3");
    }

    proptest! {
        /// Whatever the shards report, the epoch stays the same exactly when every shard keeps
        /// exactly its ranges, and never goes down.
        #[test]
        fn epoch_follows_ownership(k1 in 1u32..6, k2 in 1u32..6, ports in any::<u16>(), shuffle in any::<bool>()) {
            let first = next_map(None, even(k1, 1000));
            let mut shards = even(k2, ports % 60000);
            if shuffle {
                shards.reverse();
            }
            let next = next_map(Some(&first), shards);
            prop_assert_eq!(next.epoch == first.epoch, k1 == k2);
            prop_assert!(next.epoch >= first.epoch);
            prop_assert!(address_map(&next).is_ok());
        }
    }
}
