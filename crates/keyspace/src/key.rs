//! Object keys and the placement hash.

use std::fmt;

/// The identity of a stored object: `{group}/{resource}/{namespace}/{name}`.
///
/// The core group is the empty string and cluster-scoped objects have an empty namespace, so a
/// core namespaced key reads `/configmaps/default/app-config`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// API group (`""` for core, `apps`, `batch`, ...).
    pub group: String,
    /// Plural resource name (`pods`, `deployments`).
    pub resource: String,
    /// Namespace, empty for cluster-scoped objects.
    pub namespace: String,
    /// Object name.
    pub name: String,
}

impl ObjectKey {
    /// Builds a key from its four parts.
    pub fn new(group: &str, resource: &str, namespace: &str, name: &str) -> Self {
        Self {
            group: group.to_owned(),
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The placement hash of this key (xxh3-64 of [`Display`](fmt::Display)'s bytes).
    pub fn hash(&self) -> u64 {
        placement_hash(&self.group, &self.resource, &self.namespace, &self.name)
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}/{}", self.group, self.resource, self.namespace, self.name)
    }
}

/// xxh3-64 of `{group}/{resource}/{namespace}/{name}` without building an [`ObjectKey`].
pub fn placement_hash(group: &str, resource: &str, namespace: &str, name: &str) -> u64 {
    use xxhash_rust::xxh3::Xxh3;
    let mut h = Xxh3::new();
    h.update(group.as_bytes());
    h.update(b"/");
    h.update(resource.as_bytes());
    h.update(b"/");
    h.update(namespace.as_bytes());
    h.update(b"/");
    h.update(name.as_bytes());
    h.digest()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_hash_equals_hash_of_joined_key() {
        let k = ObjectKey::new("apps", "deployments", "default", "web");
        assert_eq!(k.to_string(), "apps/deployments/default/web");
        assert_eq!(k.hash(), xxhash_rust::xxh3::xxh3_64(b"apps/deployments/default/web"));
        let core = ObjectKey::new("", "namespaces", "", "kube-system");
        assert_eq!(core.to_string(), "/namespaces//kube-system");
        assert_eq!(core.hash(), xxhash_rust::xxh3::xxh3_64(b"/namespaces//kube-system"));
    }
}
