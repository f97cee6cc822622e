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

    #[test]
    fn other_resources_are_outside_the_full_range() {
        let (start, end) = range_keys("", "pods", HashRange::FULL);
        let other = object_key(&ObjectKey::new("", "podtemplates", "a", "b")).into_bytes();
        let mine = object_key(&ObjectKey::new("", "pods", "a", "b")).into_bytes();
        assert!(!(other >= start && other < end));
        assert!(mine >= start && mine < end);
    }
}
