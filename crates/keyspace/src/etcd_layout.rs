//! The etcd key layout: `/registry/{group}/{resource}/{hash as 16 hex digits}/{namespace}/{name}`.
//!
//! Because the hash comes right after the resource, one hash range of one resource is one
//! contiguous etcd key range, so a shard lists and watches exactly its own keys. Lowercase hex sorts
//! like the numbers it writes, so key order within a resource is hash order.

use crate::{HashRange, ObjectKey, HASH_SPACE_END};

/// Prefix of every object key in etcd.
pub const REGISTRY_PREFIX: &str = "/registry/";

/// The prefix of the keys that hold node ports, one key per port (RFC 0014): under
/// `/registry/`, where the shards may write, and outside every resource's prefix (no API group
/// is named `ranges`: a group with no dot is a built-in's, and none is).
pub const NODE_PORTS_PREFIX: &str = "/registry/ranges/servicenodeports/";

/// `/registry/{group}/{resource}/`: the prefix of all keys of one resource.
pub fn resource_prefix(group: &str, resource: &str) -> String {
    format!("{REGISTRY_PREFIX}{group}/{resource}/")
}

/// The etcd key of an object.
pub fn object_key(key: &ObjectKey) -> String {
    format!("{}{:016x}/{}/{}", resource_prefix(&key.group, &key.resource), key.hash(), key.namespace, key.name)
}

/// The etcd key range `[start, end)` holding exactly the keys of `resource` whose hash is in `range`.
pub fn range_keys(group: &str, resource: &str, range: HashRange) -> (Vec<u8>, Vec<u8>) {
    let prefix = resource_prefix(group, resource);
    let start = format!("{prefix}{:016x}", range.start()).into_bytes();
    let end = if range.end() == HASH_SPACE_END {
        // Every key of the resource starts with `prefix`; its successor ends the range.
        prefix_end(prefix.as_bytes())
    } else {
        format!("{prefix}{:016x}", range.end()).into_bytes()
    };
    (start, end)
}

/// The smallest key greater than every key starting with `prefix` (etcd's "range end" for a prefix).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0] // whole keyspace
}

/// Keys that cut `[start, end)` into at most `pieces` parts holding about as many object keys
/// each: sorted, each strictly between `start` and `end`, so the parts `[start, c1)`, `[c1, c2)`,
/// …, `[cn, end)` cover the range exactly whatever keys it holds. Cuts are found only where the
/// range is one resource's hash range or the whole resource (as [`range_keys`] and
/// [`resource_prefix`] write them); for any other range there are none. Reading a large range
/// piece by piece keeps each of etcd's paged reads cheap (RFC 0018).
pub fn hash_cuts(start: &[u8], end: &[u8], pieces: u64) -> Vec<Vec<u8>> {
    let Some((prefix, lo, hi)) = hash_bounds(start, end) else { return Vec::new() };
    let pieces = pieces.max(1) as u128;
    let step = (hi - lo as u128) / pieces;
    if step == 0 {
        return Vec::new();
    }
    let mut cuts: Vec<Vec<u8>> = (1..pieces)
        .map(|i| lo as u128 + i * step)
        .filter(|&h| h > lo as u128 && h < hi)
        .map(|h| [prefix, format!("{h:016x}").as_bytes()].concat())
        .filter(|c| c.as_slice() > start && c.as_slice() < end)
        .collect();
    cuts.dedup();
    cuts
}

/// The resource prefix and hash bounds `[lo, hi)` of a key range written by [`range_keys`] (or
/// the whole resource: its prefix to the prefix's end).
fn hash_bounds<'a>(start: &'a [u8], end: &[u8]) -> Option<(&'a [u8], u64, u128)> {
    let hex16 = |b: &[u8]| -> Option<u64> {
        (b.len() == 16 && b.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))).then(|| u64::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok()).flatten()
    };
    let (prefix, lo) = match start.len().checked_sub(16).map(|at| start.split_at(at)) {
        Some((p, h)) if p.ends_with(b"/") && hex16(h).is_some() => (p, hex16(h)?),
        _ if start.ends_with(b"/") => (start, 0),
        _ => return None,
    };
    let hi = if end == prefix_end(prefix).as_slice() { HASH_SPACE_END } else { hex16(end.strip_prefix(prefix)?)? as u128 };
    (hi > lo as u128).then_some((prefix, lo, hi))
}

/// Splits an etcd object key back into (hash, namespace, name); `None` if it is not one.
pub fn parse_object_key<'a>(group: &str, resource: &str, etcd_key: &'a [u8]) -> Option<(u64, &'a str, &'a str)> {
    let prefix = resource_prefix(group, resource);
    let rest = std::str::from_utf8(etcd_key.strip_prefix(prefix.as_bytes())?).ok()?;
    let (hash, rest) = rest.split_once('/')?;
    let (namespace, name) = rest.split_once('/')?;
    if hash.len() != 16 {
        return None;
    }
    Some((u64::from_str_radix(hash, 16).ok()?, namespace, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A key is inside the etcd key range of a hash range exactly when its hash is in the range.
        #[test]
        fn key_in_etcd_range_iff_hash_in_range(ns in "[a-z0-9-]{0,12}", name in "[a-z0-9.-]{1,20}", cut in any::<u64>(), upper in any::<bool>()) {
            let key = ObjectKey::new("apps", "deployments", &ns, &name);
            let range = if upper { HashRange::new(cut, HASH_SPACE_END).unwrap() } else { HashRange::new(0, cut.max(1) as u128).unwrap() };
            let (start, end) = range_keys("apps", "deployments", range);
            let k = object_key(&key).into_bytes();
            prop_assert_eq!(k >= start && k < end, range.contains(key.hash()));
            let (h, n, m) = parse_object_key("apps", "deployments", &k).unwrap();
            prop_assert_eq!((h, n, m), (key.hash(), ns.as_str(), name.as_str()));
        }
    }

    proptest! {
        /// Cuts are sorted, strictly inside the range and no more than asked; with them, every
        /// key of the range falls in exactly one piece (so reading the pieces reads the range).
        #[test]
        fn hash_cuts_partition_the_range(a in any::<u64>(), b in any::<u64>(), whole in any::<bool>(), pieces in 1u64..600, hashes in proptest::collection::vec(any::<u64>(), 0..200)) {
            let (lo, hi) = (a.min(b), (a.max(b) as u128 + 1).min(HASH_SPACE_END));
            let range = if whole { HashRange::FULL } else { HashRange::new(lo, hi).unwrap() };
            let (start, end) = if whole {
                let p = resource_prefix("", "pods").into_bytes();
                (p.clone(), prefix_end(&p))
            } else {
                range_keys("", "pods", range)
            };
            let cuts = hash_cuts(&start, &end, pieces);
            prop_assert!(cuts.len() < pieces as usize);
            prop_assert!(cuts.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(cuts.iter().all(|c| c.as_slice() > start.as_slice() && c.as_slice() < end.as_slice()));
            let bounds: Vec<&[u8]> = std::iter::once(start.as_slice()).chain(cuts.iter().map(Vec::as_slice)).chain(std::iter::once(end.as_slice())).collect();
            for h in hashes {
                let k = format!("{}{h:016x}/ns/n", resource_prefix("", "pods")).into_bytes();
                let inside = k.as_slice() >= start.as_slice() && k.as_slice() < end.as_slice();
                let holding = bounds.windows(2).filter(|w| k.as_slice() >= w[0] && k.as_slice() < w[1]).count();
                prop_assert_eq!(holding, usize::from(inside));
            }
        }

        /// Whatever the range, a cut is strictly inside it (reading the pieces reads it).
        #[test]
        fn hash_cuts_are_inside_any_range(start in "[ -~]{0,30}", end in "[ -~]{0,30}", pieces in 1u64..100) {
            let cuts = hash_cuts(start.as_bytes(), end.as_bytes(), pieces);
            prop_assert!(cuts.iter().all(|c| c.as_slice() > start.as_bytes() && c.as_slice() < end.as_bytes()));
        }
    }

    #[test]
    fn hash_cuts_spread_keys_evenly() {
        // 40,000 real placement hashes of one resource in the whole range, cut in 20.
        let p = resource_prefix("", "pods");
        let (start, end) = (p.clone().into_bytes(), prefix_end(p.as_bytes()));
        let cuts = hash_cuts(&start, &end, 20);
        assert_eq!(cuts.len(), 19);
        let mut per = vec![0usize; 20];
        for i in 0..40_000 {
            let k = object_key(&ObjectKey::new("", "pods", "ns", &format!("pod-{i}"))).into_bytes();
            per[cuts.partition_point(|c| c.as_slice() <= k.as_slice())] += 1;
        }
        assert!(per.iter().all(|&n| (1_600..2_400).contains(&n)), "{per:?}");
        assert!(hash_cuts(b"/shardplane/rangemap", b"/shardplane/rangemaq", 10).is_empty());
    }

    #[test]
    fn other_resources_are_outside_the_full_range() {
        let (start, end) = range_keys("", "pods", HashRange::FULL);
        let other = object_key(&ObjectKey::new("", "podtemplates", "a", "b")).into_bytes();
        let mine = object_key(&ObjectKey::new("", "pods", "a", "b")).into_bytes();
        assert!(!(other >= start && other < end));
        assert!(mine >= start && mine < end);
    }
}
