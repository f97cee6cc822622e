//! Half-open ranges of the 64-bit hash space and sets of them.

use std::fmt;
use std::str::FromStr;

/// The exclusive end of the hash space, 2^64.
pub const HASH_SPACE_END: u128 = 1 << 64;

/// Why a range or range set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// A bound is not `0x` followed by exactly 16 lowercase hex digits (or `0x10000000000000000`
    /// as an end).
    #[error("invalid hash bound {0:?}: must be 0x followed by 16 hex digits, or 0x10000000000000000 as an end")]
    BadBound(String),
    /// The text is not `START-END`.
    #[error("invalid hash range {0:?}: expected 0xSTART-0xEND")]
    BadSyntax(String),
    /// start >= end.
    #[error("empty hash range {0}: start must be below end")]
    Empty(String),
    /// Two ranges of a set overlap.
    #[error("hash ranges {0} and {1} overlap")]
    Overlap(String, String),
}

/// The half-open range `[start, end)` of placement hashes; `end` may be 2^64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HashRange {
    start: u64,
    end: u128,
}

impl HashRange {
    /// The whole hash space `[0, 2^64)`.
    pub const FULL: HashRange = HashRange { start: 0, end: HASH_SPACE_END };

    /// `[start, end)`; `None` if `start >= end` or `end > 2^64`.
    pub fn new(start: u64, end: u128) -> Option<Self> {
        ((start as u128) < end && end <= HASH_SPACE_END).then_some(Self { start, end })
    }

    /// Inclusive start.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Exclusive end, at most 2^64.
    pub fn end(&self) -> u128 {
        self.end
    }

    /// Whether `hash` falls in the range.
    pub fn contains(&self, hash: u64) -> bool {
        hash >= self.start && (hash as u128) < self.end
    }

    /// Splits the hash space into `k` contiguous ranges of equal size (the last takes the rest).
    pub fn split_even(k: u32) -> Vec<HashRange> {
        assert!(k > 0, "cannot split into zero ranges");
        let step = HASH_SPACE_END / k as u128;
        (0..k as u128)
            .map(|i| HashRange {
                start: (i * step) as u64,
                end: if i + 1 == k as u128 { HASH_SPACE_END } else { (i + 1) * step },
            })
            .collect()
    }
}

/// Formats a bound as KEP-5866 does: `0x` and 16 lowercase hex digits, or `0x10000000000000000`.
pub(crate) fn format_bound(v: u128) -> String {
    if v == HASH_SPACE_END { "0x10000000000000000".to_owned() } else { format!("0x{v:016x}") }
}

/// Parses a bound written with exactly 16 hex digits (or 2^64 written as `0x10000000000000000`).
pub(crate) fn parse_bound(s: &str) -> Result<u128, RangeError> {
    if s == "0x10000000000000000" {
        return Ok(HASH_SPACE_END);
    }
    let hex = s.strip_prefix("0x").filter(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    match hex {
        Some(h) => u64::from_str_radix(h, 16).map(u128::from).map_err(|_| RangeError::BadBound(s.to_owned())),
        None => Err(RangeError::BadBound(s.to_owned())),
    }
}

impl fmt::Display for HashRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", format_bound(self.start as u128), format_bound(self.end))
    }
}

impl FromStr for HashRange {
    type Err = RangeError;

    fn from_str(s: &str) -> Result<Self, RangeError> {
        let (a, b) = s.split_once('-').ok_or_else(|| RangeError::BadSyntax(s.to_owned()))?;
        let start = parse_bound(a.trim())?;
        let end = parse_bound(b.trim())?;
        if start == HASH_SPACE_END {
            return Err(RangeError::BadBound(a.to_owned()));
        }
        HashRange::new(start as u64, end).ok_or_else(|| RangeError::Empty(s.to_owned()))
    }
}

/// A set of disjoint hash ranges, kept sorted; adjacent ranges are merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSet {
    ranges: Vec<HashRange>,
}

impl RangeSet {
    /// The set holding the whole hash space.
    pub fn full() -> Self {
        Self { ranges: vec![HashRange::FULL] }
    }

    /// Builds a set from ranges that must not overlap (adjacent ones are merged).
    pub fn from_disjoint(mut ranges: Vec<HashRange>) -> Result<Self, RangeError> {
        ranges.sort();
        let mut out: Vec<HashRange> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match out.last_mut() {
                Some(last) if (r.start as u128) < last.end => {
                    return Err(RangeError::Overlap(last.to_string(), r.to_string()));
                }
                Some(last) if (r.start as u128) == last.end => last.end = r.end,
                _ => out.push(r),
            }
        }
        Ok(Self { ranges: out })
    }

    /// The ranges, sorted and disjoint.
    pub fn ranges(&self) -> &[HashRange] {
        &self.ranges
    }

    /// Whether `hash` falls in any range of the set.
    pub fn contains(&self, hash: u64) -> bool {
        // Ranges are sorted by start: the candidate is the last range starting at or below hash.
        let idx = self.ranges.partition_point(|r| r.start <= hash);
        idx > 0 && self.ranges[idx - 1].contains(hash)
    }

    /// Whether every hash of `r` is in the set.
    pub fn covers(&self, r: &HashRange) -> bool {
        // Adjacent ranges are merged, so a covered range lies inside one range of the set.
        let idx = self.ranges.partition_point(|x| x.start <= r.start);
        idx > 0 && self.ranges[idx - 1].end >= r.end
    }

    /// Whether some hash of `r` is in the set.
    pub fn overlaps(&self, r: &HashRange) -> bool {
        self.ranges.iter().any(|x| (x.start as u128) < r.end && (r.start as u128) < x.end)
    }

    /// Whether the set covers the whole hash space.
    pub fn is_full(&self) -> bool {
        self.ranges == [HashRange::FULL]
    }

    /// The set with every hash of `r` added.
    pub fn with(&self, r: HashRange) -> Self {
        let mut ranges: Vec<HashRange> = self.without(r).ranges;
        ranges.push(r);
        Self::from_disjoint(ranges).expect("r was taken out first, so nothing overlaps it")
    }

    /// The set with every hash of `r` taken out (a range it cuts keeps its parts outside `r`).
    pub fn without(&self, r: HashRange) -> Self {
        let mut out = Vec::with_capacity(self.ranges.len() + 1);
        for x in &self.ranges {
            if x.end <= r.start as u128 || r.end <= x.start as u128 {
                out.push(*x);
                continue;
            }
            if x.start < r.start {
                out.push(HashRange { start: x.start, end: r.start as u128 });
            }
            if r.end < x.end {
                out.push(HashRange { start: r.end as u64, end: x.end });
            }
        }
        Self { ranges: out }
    }
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.ranges.iter().map(|r| r.to_string()).collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_prints_the_full_range() {
        let r: HashRange = "0x0000000000000000-0x10000000000000000".parse().unwrap();
        assert_eq!(r, HashRange::FULL);
        assert_eq!(r.to_string(), "0x0000000000000000-0x10000000000000000");
        assert!(r.contains(0) && r.contains(u64::MAX));
    }

    #[test]
    fn refuses_bad_ranges() {
        for bad in ["0x0-0x10", "0x8000000000000000-0x8000000000000000", "0x10000000000000000-0x10000000000000000", "x", "0xABCDEF0123456789-0x10000000000000000", "0x00000000000000000-0x10000000000000000"] {
            assert!(bad.parse::<HashRange>().is_err(), "{bad} should be refused");
        }
        let a: HashRange = "0x0000000000000000-0x8000000000000000".parse().unwrap();
        let b: HashRange = "0x7000000000000000-0x10000000000000000".parse().unwrap();
        assert!(matches!(RangeSet::from_disjoint(vec![a, b]), Err(RangeError::Overlap(..))));
    }

    #[test]
    fn adjacent_ranges_merge() {
        let halves = HashRange::split_even(2);
        let set = RangeSet::from_disjoint(halves).unwrap();
        assert!(set.is_full());
    }

    proptest! {
        /// I1 for a static map: an even split gives every hash exactly one owner.
        #[test]
        fn even_split_owns_every_hash_once(k in 1u32..64, hash in any::<u64>()) {
            let ranges = HashRange::split_even(k);
            prop_assert_eq!(ranges.iter().filter(|r| r.contains(hash)).count(), 1);
            prop_assert!(RangeSet::from_disjoint(ranges).unwrap().is_full());
        }

        /// RangeSet::contains agrees with a linear scan over the ranges it was built from.
        #[test]
        fn set_contains_matches_linear_scan(mut cuts in proptest::collection::btree_set(any::<u64>(), 1..12), pick in any::<u64>(), hash in any::<u64>()) {
            cuts.insert(0);
            let cuts: Vec<u128> = cuts.into_iter().map(u128::from).chain([HASH_SPACE_END]).collect();
            let all: Vec<HashRange> = cuts.windows(2).map(|w| HashRange::new(w[0] as u64, w[1]).unwrap()).collect();
            let chosen: Vec<HashRange> = all.iter().enumerate().filter(|(i, _)| pick >> (i % 64) & 1 == 1).map(|(_, r)| *r).collect();
            let set = RangeSet::from_disjoint(chosen.clone()).unwrap();
            prop_assert_eq!(set.contains(hash), chosen.iter().any(|r| r.contains(hash)));
            // A piece of the space is covered exactly when every piece it spans was chosen.
            for (i, w) in all.windows(2).enumerate() {
                let span = HashRange::new(w[0].start(), w[1].end()).unwrap();
                let both = chosen.contains(&w[0]) && chosen.contains(&w[1]);
                prop_assert_eq!(set.covers(&span), both, "span {} of pieces {} and {}", span, i, i + 1);
                prop_assert_eq!(set.covers(&w[0]), chosen.contains(&w[0]));
            }
        }

        /// Adding and taking out ranges agrees with a model of which hashes are in the set.
        #[test]
        fn with_and_without_match_membership(ops in proptest::collection::vec((any::<bool>(), any::<u64>(), any::<u64>()), 0..12), probes in proptest::collection::vec(any::<u64>(), 16)) {
            let mut set = RangeSet::default();
            let mut applied: Vec<(bool, HashRange)> = Vec::new();
            for (add, a, b) in ops {
                let (lo, hi) = if a < b { (a, b as u128) } else if a > b { (b, a as u128) } else { (a, HASH_SPACE_END) };
                let r = HashRange::new(lo, hi).unwrap();
                set = if add { set.with(r) } else { set.without(r) };
                applied.push((add, r));
                // Still sorted, disjoint and merged: rebuilding it changes nothing.
                prop_assert_eq!(&RangeSet::from_disjoint(set.ranges().to_vec()).unwrap(), &set);
            }
            let probes = probes.into_iter().chain(applied.iter().flat_map(|(_, r)| [r.start(), r.start().wrapping_sub(1), (r.end() - 1) as u64, r.end() as u64]));
            for h in probes {
                let model = applied.iter().rev().find(|(_, r)| r.contains(h)).is_some_and(|(add, _)| *add);
                prop_assert_eq!(set.contains(h), model, "hash {:#x}", h);
            }
        }

        #[test]
        fn text_form_round_trips(a in any::<u64>(), b in any::<u64>()) {
            let (lo, hi) = if a < b { (a, b as u128) } else if a > b { (b, a as u128) } else { (a, HASH_SPACE_END) };
            let r = HashRange::new(lo, hi).unwrap();
            prop_assert_eq!(r.to_string().parse::<HashRange>().unwrap(), r);
        }
    }
}
