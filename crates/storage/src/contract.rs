//! The storage contract (RFC 0008): which etcd holds which resource. Upstream's
//! `--etcd-servers-overrides` puts a built-in resource on its own etcd; the contract does the
//! same for any resource, built-in or custom, and every shard and router reads the same file.
//!
//! A resource on its own etcd takes its resourceVersions from that etcd: its objects, lists and
//! watches are consistent among themselves, as upstream's are with overrides, and their RVs are
//! not comparable with another store's. Everything else — the range map, membership, the
//! compaction claim — and every resource the contract does not name stay on the main store.

use crate::{Result, Storage, StorageError};
use serde::Deserialize;
use std::path::Path;
use std::sync::Arc;

/// The parsed contract: a list of resources, each with the endpoints of its etcd.
///
/// ```json
/// {"resources": [
///   {"group": "agents.example.com", "resource": "agentsessions", "endpoints": ["http://127.0.0.1:22379"]},
///   {"group": "", "resource": "events", "endpoints": ["http://127.0.0.1:22379"]}
/// ]}
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageContract {
    /// The resources that are not on the main store.
    #[serde(default)]
    pub resources: Vec<ResourceStore>,
}

/// One resource (its group and plural; the core group is `""`) and its etcd endpoints.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceStore {
    #[serde(default)]
    pub group: String,
    pub resource: String,
    pub endpoints: Vec<String>,
}

impl StorageContract {
    /// Parses and checks a contract: every entry names a resource and at least one endpoint, and
    /// no resource is named twice.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let contract: Self = serde_json::from_str(text).map_err(|e| format!("not a storage contract: {e}"))?;
        for (i, r) in contract.resources.iter().enumerate() {
            let name = r.name();
            if r.resource.is_empty() || r.resource.contains(['/', '.']) || r.resource != r.resource.to_ascii_lowercase() {
                return Err(format!("resources[{i}]: {:?} is not a resource's plural name (lower case, no dots; the group goes in \"group\")", r.resource));
            }
            if r.endpoints.is_empty() || r.endpoints.iter().any(|e| e.trim().is_empty()) {
                return Err(format!("resources[{i}] ({name}): needs at least one etcd endpoint"));
            }
            if contract.resources[..i].iter().any(|o| o.group == r.group && o.resource == r.resource) {
                return Err(format!("resources[{i}]: {name} is named twice"));
            }
        }
        Ok(contract)
    }

    /// The contract a `--storage-config` flag names: empty without one.
    pub fn from_flag(path: Option<&Path>) -> std::result::Result<Self, String> {
        path.map(Self::load).transpose().map(Option::unwrap_or_default)
    }

    /// Reads and parses the contract file at `path`.
    pub fn load(path: &Path) -> std::result::Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

impl ResourceStore {
    /// `resource.group` (just `resource` in the core group), as upstream names a group resource.
    pub fn name(&self) -> String {
        if self.group.is_empty() { self.resource.clone() } else { format!("{}.{}", self.resource, self.group) }
    }
}

/// A connection to each store the contract names; cheap to clone. Endpoints named more than once
/// (several resources on one etcd, or an entry naming the main store) share one client.
#[derive(Clone)]
pub struct Stores {
    main: Storage,
    /// (group, resource) → its store; a handful of entries, searched in order.
    overrides: Arc<[(String, String, Storage)]>,
    /// The main store, then each other store once.
    distinct: Arc<[Storage]>,
}

impl Stores {
    /// Every resource on `main`.
    pub fn single(main: Storage) -> Self {
        Self { distinct: Arc::new([main.clone()]), main, overrides: Arc::new([]) }
    }

    /// Connects to every store `contract` names; `main_endpoints` are those `main` was
    /// connected with.
    pub async fn connect(main: Storage, main_endpoints: &[String], contract: &StorageContract) -> Result<Self> {
        let mut connected: Vec<(Vec<String>, Storage)> = vec![(normalized(main_endpoints), main.clone())];
        let mut overrides = Vec::new();
        for r in &contract.resources {
            let endpoints = normalized(&r.endpoints);
            let storage = match connected.iter().find(|(e, _)| *e == endpoints) {
                Some((_, s)) => s.clone(),
                None => {
                    let s = Storage::connect(&r.endpoints).await.map_err(|e| StorageError::Etcd(format!("the store of {}: {e}", r.name())))?;
                    connected.push((endpoints, s.clone()));
                    s
                }
            };
            overrides.push((r.group.clone(), r.resource.clone(), storage));
        }
        Ok(Self { main, overrides: overrides.into(), distinct: connected.into_iter().map(|(_, s)| s).collect() })
    }

    /// The main store: resources the contract does not name, and the cluster's own control data.
    pub fn main(&self) -> &Storage {
        &self.main
    }

    /// The store of `group`/`resource`.
    pub fn of(&self, group: &str, resource: &str) -> &Storage {
        self.overrides.iter().find(|(g, r, _)| g == group && r == resource).map_or(&self.main, |(_, _, s)| s)
    }

    /// Whether `group`/`resource` is on a store of its own (not the main one).
    pub fn is_overridden(&self, group: &str, resource: &str) -> bool {
        self.overrides.iter().any(|(g, r, _)| g == group && r == resource)
    }

    /// Every store once, the main one first (each is compacted on its own).
    pub fn all(&self) -> &[Storage] {
        &self.distinct
    }
}

/// Endpoints compared as a set, without trailing slashes.
fn normalized(endpoints: &[String]) -> Vec<String> {
    let mut e: Vec<String> = endpoints.iter().map(|s| s.trim().trim_end_matches('/').to_owned()).collect();
    e.sort();
    e.dedup();
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contract_names_resources_with_their_endpoints() {
        let c = StorageContract::parse(r#"{"resources": [{"group": "agents.example.com", "resource": "agentsessions", "endpoints": ["http://127.0.0.1:1"]}, {"resource": "events", "endpoints": ["http://127.0.0.1:2"]}]}"#).unwrap();
        assert_eq!(c.resources.len(), 2);
        assert_eq!(c.resources[0].name(), "agentsessions.agents.example.com");
        assert_eq!(c.resources[1].group, "");
        assert_eq!(c.resources[1].name(), "events");
        assert_eq!(StorageContract::parse("{}").unwrap(), StorageContract::default());
    }

    #[test]
    fn a_bad_contract_says_what_is_wrong() {
        for (text, says) in [
            (r#"{"resources": [{"resource": "events", "endpoints": []}]}"#, "needs at least one etcd endpoint"),
            (r#"{"resources": [{"resource": "events.events.k8s.io", "endpoints": ["x"]}]}"#, "is not a resource's plural name"),
            (r#"{"resources": [{"resource": "Pods", "endpoints": ["x"]}]}"#, "is not a resource's plural name"),
            (r#"{"resources": [{"resource": "pods", "endpoints": ["x"]}, {"resource": "pods", "endpoints": ["y"]}]}"#, "pods is named twice"),
            (r#"{"resources": [{"resource": "pods", "endpoint": ["x"]}]}"#, "unknown field `endpoint`"),
            (r#"{"resources": "#, "not a storage contract"),
        ] {
            let e = StorageContract::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn endpoints_compare_as_a_set() {
        assert_eq!(normalized(&["http://b/".into(), "http://a".into(), "http://b".into()]), vec!["http://a".to_owned(), "http://b".to_owned()]);
    }
}
