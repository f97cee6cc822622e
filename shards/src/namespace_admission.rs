//! Namespace admission for creates (RFC 0017): the namespace must exist and not be Terminating.
//!
//! The shard follows every namespace key ([`crate::namespaces`] runs the follower) and keeps
//! each namespace's name, mod_revision and whether it is Terminating: a few dozen bytes per
//! namespace. A create into a namespace known here as Active costs no read: its transaction
//! carries a compare that the namespace key still has the mod_revision seen, so it commits only
//! if the namespace has not changed since, and no object can be created after its namespace
//! became Terminating or was deleted, however late the follower is. Everything else (a
//! namespace not known yet, one known as Terminating, a compare that failed, an object on
//! another store than the namespaces) is decided by a linearizable read, as before.
//!
//! This module must never refuse a create on what the follower alone says: the follower can be
//! behind, so every refusal is confirmed by a read.

use crate::shard::Shard;
use serde_json::Value;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::status::StatusCause;
use shardplane_apimachinery::ApiError;
use shardplane_http::storage_errors::status_of as storage_err;
use shardplane_storage::Companion;
use std::collections::HashMap;
use std::sync::Mutex;

/// What the follower last saw of one namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The namespace key's mod_revision.
    pub mod_revision: u64,
    /// Whether its phase is Terminating.
    pub terminating: bool,
}

/// Every namespace the follower has seen, by name.
#[derive(Default)]
pub struct Namespaces {
    seen: Mutex<HashMap<String, Seen>>,
}

impl Namespaces {
    /// Replaces everything known with a listing.
    pub fn replace(&self, listed: impl IntoIterator<Item = (String, Seen)>) {
        *self.lock() = listed.into_iter().collect();
    }

    /// Records a change of one namespace (`None`: deleted).
    pub fn record(&self, name: &str, seen: Option<Seen>) {
        let mut map = self.lock();
        match seen {
            Some(s) => {
                map.insert(name.to_owned(), s);
            }
            None => {
                map.remove(name);
            }
        }
    }

    /// What the follower last saw of `name`.
    pub fn get(&self, name: &str) -> Option<Seen> {
        self.lock().get(name).copied()
    }

    /// The Terminating namespaces, with their mod_revisions.
    pub fn terminating(&self) -> Vec<(String, u64)> {
        self.lock().iter().filter(|(_, s)| s.terminating).map(|(n, s)| (n.clone(), s.mod_revision)).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Seen>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a stored namespace's bytes say (`None` for bytes that are not a namespace).
pub fn seen_in(value: &[u8], mod_revision: u64) -> Option<(String, Seen)> {
    let ns: Value = serde_json::from_slice(value).ok()?;
    let name = ns.pointer("/metadata/name").and_then(Value::as_str)?.to_owned();
    Some((name, Seen { mod_revision, terminating: is_terminating(&ns) }))
}

fn is_terminating(ns: &Value) -> bool {
    ns.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating")
}

/// Admits a create of `name` (a `info` object) into namespace `ns`: the compare its
/// transaction must carry, or `None` when the namespace was read and the object lives on another
/// store than the namespaces (no transaction can span two stores). 404 for a namespace that does
/// not exist, 403 for one being terminated.
pub async fn admit_create(shard: &Shard, info: &ResourceInfo, ns: &str, name: &str) -> Result<Option<Companion>, ApiError> {
    let same_store = shares_namespace_store(shard, info);
    if same_store && let Some(seen) = shard.namespaces.get(ns).filter(|s| !s.terminating) {
        return Ok(Some(guard(shard, ns, seen.mod_revision)));
    }
    read(shard, info, ns, name).await
}

/// Decides by a linearizable read (a namespace the follower has not seen, or one that changed
/// since the compare was taken).
pub async fn read(shard: &Shard, info: &ResourceInfo, ns: &str, name: &str) -> Result<Option<Companion>, ApiError> {
    let ns_info = shard.builtin("", "namespaces");
    let (kv, _) = shard.store(&ns_info).get(&Shard::any_key(&ns_info, "", ns)).await.map_err(storage_err)?;
    let Some(kv) = kv else { return Err(ApiError::not_found("", "namespaces", ns)) };
    let v: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
    if is_terminating(&v) {
        return Err(terminating(info, ns, name));
    }
    Ok(shares_namespace_store(shard, info).then(|| guard(shard, ns, kv.mod_revision)))
}

/// Whether `info`'s objects are on the store that holds the namespaces.
fn shares_namespace_store(shard: &Shard, info: &ResourceInfo) -> bool {
    shard.store(info).is_same_store(shard.stores.of("", "namespaces"))
}

fn guard(shard: &Shard, ns: &str, mod_revision: u64) -> Companion {
    let ns_info = shard.builtin("", "namespaces");
    Companion::Unchanged { key: Shard::any_key(&ns_info, "", ns), expected: mod_revision }
}

/// 403 for a create into a namespace being terminated, with the cause upstream names.
fn terminating(info: &ResourceInfo, ns: &str, name: &str) -> ApiError {
    let mut e = ApiError::forbidden(&info.group, &info.plural, name, &format!("unable to create new content in namespace {ns} because it is being terminated"));
    if let Some(d) = e.details.as_mut() {
        d.causes.push(StatusCause { reason: "NamespaceTerminating".into(), message: format!("namespace {ns} is being terminated"), field: "metadata.namespace".into() });
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_reads_name_and_phase() {
        let active = br#"{"metadata":{"name":"a"},"status":{"phase":"Active"}}"#;
        let ending = br#"{"metadata":{"name":"b"},"status":{"phase":"Terminating"}}"#;
        assert_eq!(seen_in(active, 7), Some(("a".into(), Seen { mod_revision: 7, terminating: false })));
        assert_eq!(seen_in(ending, 9), Some(("b".into(), Seen { mod_revision: 9, terminating: true })));
        assert_eq!(seen_in(b"not json", 1), None);
    }

    #[test]
    fn record_and_replace_keep_the_latest_state() {
        let n = Namespaces::default();
        n.replace([("a".to_owned(), Seen { mod_revision: 1, terminating: false })]);
        n.record("b", Some(Seen { mod_revision: 2, terminating: true }));
        assert_eq!(n.terminating(), [("b".to_owned(), 2)]);
        n.record("a", None);
        assert_eq!(n.get("a"), None);
        n.replace([]);
        assert_eq!(n.get("b"), None);
    }
}
