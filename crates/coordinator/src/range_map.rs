//! The range map: in one epoch, every hash has exactly one owner (I1).

use shardplane_keyspace::{HashRange, HASH_SPACE_END};

/// Why a map was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeMapError {
    #[error("the range map is empty")]
    Empty,
    #[error("ranges leave a gap or overlap at 0x{0:016x}")]
    NotContiguous(u128),
    #[error("ranges end at 0x{0:x}, not at 2^64")]
    Short(u128),
}

/// One epoch of the map: contiguous ranges covering `[0, 2^64)`, each with an owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeMap<O> {
    epoch: u64,
    entries: Vec<(HashRange, O)>,
}

impl<O> RangeMap<O> {
    /// Builds an epoch's map; the ranges must tile the hash space exactly (in any order).
    pub fn new(epoch: u64, mut entries: Vec<(HashRange, O)>) -> Result<Self, RangeMapError> {
        entries.sort_by_key(|(r, _)| r.start());
        let mut next: u128 = 0;
        for (r, _) in &entries {
            if u128::from(r.start()) != next {
                return Err(RangeMapError::NotContiguous(next));
            }
            next = r.end();
        }
        match next {
            0 => Err(RangeMapError::Empty),
            HASH_SPACE_END => Ok(Self { epoch, entries }),
            short => Err(RangeMapError::Short(short)),
        }
    }

    /// `k` equal ranges owned by `owners[i]`.
    pub fn even(epoch: u64, owners: Vec<O>) -> Self {
        let ranges = HashRange::split_even(owners.len() as u32);
        Self { epoch, entries: ranges.into_iter().zip(owners).collect() }
    }

    /// The epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The owner of `hash`.
    pub fn owner(&self, hash: u64) -> &O {
        let i = self.entries.partition_point(|(r, _)| r.start() <= hash) - 1;
        &self.entries[i].1
    }

    /// The ranges and their owners, by start.
    pub fn entries(&self) -> &[(HashRange, O)] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// I1: a map built from any tiling gives every hash exactly the owner of its range.
        #[test]
        fn every_hash_has_exactly_one_owner(cuts in proptest::collection::btree_set(1u64.., 0..10), hash in any::<u64>()) {
            let bounds: Vec<u128> = std::iter::once(0).chain(cuts.iter().map(|c| u128::from(*c))).chain([HASH_SPACE_END]).collect();
            let entries: Vec<(HashRange, usize)> = bounds.windows(2).enumerate().map(|(i, w)| (HashRange::new(w[0] as u64, w[1]).unwrap(), i)).rev().collect();
            let map = RangeMap::new(7, entries.clone()).unwrap();
            let owners: Vec<usize> = entries.iter().filter(|(r, _)| r.contains(hash)).map(|(_, o)| *o).collect();
            prop_assert_eq!(owners.len(), 1);
            prop_assert_eq!(*map.owner(hash), owners[0]);
        }
    }

    #[test]
    fn gaps_overlaps_and_short_maps_are_refused() {
        let r = |a: u64, b: u128| HashRange::new(a, b).unwrap();
        assert_eq!(RangeMap::<u8>::new(1, vec![]).unwrap_err(), RangeMapError::Empty);
        assert!(matches!(RangeMap::new(1, vec![(r(0, 10), 0), (r(11, HASH_SPACE_END), 1)]), Err(RangeMapError::NotContiguous(10))));
        assert!(matches!(RangeMap::new(1, vec![(r(0, 10), 0), (r(5, HASH_SPACE_END), 1)]), Err(RangeMapError::NotContiguous(10))));
        assert!(matches!(RangeMap::new(1, vec![(r(0, 10), 0)]), Err(RangeMapError::Short(10))));
        let even = RangeMap::even(3, vec!["a", "b", "c", "d"]);
        assert_eq!((*even.owner(0), *even.owner(u64::MAX), even.epoch()), ("a", "d", 3));
    }
}
