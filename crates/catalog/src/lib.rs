//! # shardplane-catalog
//!
//! Owns the table of served resources: the built-ins, then every established
//! CustomResourceDefinition's served versions ([`Catalog`]). Every shard and every router
//! follows the CRDs in storage — all of them, whatever range a process owns — so that each
//! serves a custom resource as soon as its CRD is established ([`Follower`]).
//!
//! It must never serve HTTP or hold objects other than CRDs: the shard caches custom objects,
//! the router routes to them; both read the table from here.

use serde_json::Value;
use shardplane_apimachinery::crd;
use shardplane_apimachinery::resources::{builtin_resources, ResourceInfo};
use shardplane_keyspace::etcd_layout;
use shardplane_storage::follow::{self, FollowOptions, Followed};
use shardplane_storage::Storage;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

/// How long a request for a resource not served yet waits for the catalog (and a new custom
/// resource's cache) to catch up before it is answered, on shard and router alike.
pub const CATCH_UP: Duration = Duration::from_secs(3);

/// How recently etcd must have confirmed the catalog (a list, a change or a progress mark) for
/// [`Follower::current`] to answer from it without a store round trip.
pub const FRESH: Duration = Duration::from_secs(1);

/// The served resources as of one storage revision.
#[derive(Debug)]
pub struct Catalog {
    /// Every CRD change up to this revision is reflected.
    pub revision: u64,
    /// Built-ins first, in discovery order, then custom resources by CRD name.
    pub resources: Arc<Vec<Arc<ResourceInfo>>>,
    /// Every stored CRD, by name, established or not.
    crds: Arc<BTreeMap<String, Value>>,
}

impl Catalog {
    /// Only the built-ins (before anything is read from storage).
    pub fn builtin() -> Self {
        Self::from_crds(0, Arc::new(BTreeMap::new()))
    }

    fn from_crds(revision: u64, crds: Arc<BTreeMap<String, Value>>) -> Self {
        let mut resources: Vec<Arc<ResourceInfo>> = builtin_resources().into_iter().map(Arc::new).collect();
        resources.extend(crds.values().flat_map(crd::served_resources).map(Arc::new));
        Self { revision, resources: Arc::new(resources), crds }
    }

    /// The stored CRD of that name.
    pub fn crd(&self, name: &str) -> Option<&Value> {
        self.crds.get(name)
    }

    /// Every stored CRD.
    pub fn crds(&self) -> impl Iterator<Item = &Value> {
        self.crds.values()
    }

    /// Another CRD that already has `candidate`'s plural or kind in its group accepted, or a
    /// built-in with that group and plural: names `candidate` may not take.
    pub fn conflict(&self, candidate: &Value) -> Option<String> {
        let (group, plural, kind) = crd::claims(candidate);
        let name = candidate.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        if builtin_resources().iter().any(|r| r.group == group && r.plural == plural) {
            return Some(format!("the built-in resource {plural}.{group}"));
        }
        self.crds.iter().filter(|(n, _)| n.as_str() != name).find_map(|(n, other)| {
            let accepted = other.pointer("/status/acceptedNames")?;
            let same_group = other.pointer("/spec/group").and_then(Value::as_str) == Some(group.as_str());
            let taken = accepted["plural"].as_str() == Some(plural.as_str()) || accepted["kind"].as_str() == Some(kind.as_str());
            (same_group && taken && !plural.is_empty()).then(|| n.clone())
        })
    }

    /// The served resource (group, version, plural).
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&Arc<ResourceInfo>> {
        self.resources.iter().find(|r| r.group == group && r.version == version && r.plural == plural)
    }
}

/// Follows the stored CRDs and publishes the [`Catalog`] each change makes.
#[derive(Clone)]
pub struct Follower {
    rx: watch::Receiver<Arc<Catalog>>,
    storage: Storage,
    /// Asks the follow loop for a progress mark (a reader waits for a revision).
    want_progress: Arc<Notify>,
    /// etcd's revision, read for many callers at once.
    revisions: Arc<SharedRevisionReads>,
    /// When etcd last confirmed the catalog, and the CRD writes noted ([`Follower::current`]).
    freshness: Arc<Freshness>,
}

/// What [`Follower::current`] needs to answer without a store round trip.
struct Freshness {
    /// The follower's start: `heard` counts from it.
    born: std::time::Instant,
    /// Milliseconds after `born` when etcd last confirmed the catalog.
    heard: std::sync::atomic::AtomicU64,
    /// CRD writes this process acknowledged ([`Follower::note_write`]).
    notes: std::sync::atomic::AtomicU64,
    /// How many of them a catalog caught up with etcd has been seen to include.
    confirmed: std::sync::atomic::AtomicU64,
}

impl Freshness {
    fn heard_now(&self) {
        self.heard.fetch_max(self.born.elapsed().as_millis() as u64, std::sync::atomic::Ordering::SeqCst);
    }

    /// How long ago etcd last confirmed the catalog.
    fn age(&self) -> Duration {
        self.born.elapsed().saturating_sub(Duration::from_millis(self.heard.load(std::sync::atomic::Ordering::SeqCst)))
    }
}

/// Reads of etcd's current revision shared by the callers that arrive together: a caller takes
/// the result of a read that started after it arrived (so a write it saw acknowledged is
/// included), and at most one read is in flight. A burst of requests for resources nobody
/// serves (each asks whether a CRD has just been created) costs etcd one or two reads per
/// round trip, not one per request.
struct SharedRevisionReads {
    /// One read at a time; holds the ticket and result of the last completed read.
    last: tokio::sync::Mutex<(u64, Option<u64>)>,
    /// Tickets handed to reads as they start.
    started: std::sync::atomic::AtomicU64,
}

impl SharedRevisionReads {
    async fn current(&self, storage: &Storage) -> Option<u64> {
        use std::sync::atomic::Ordering;
        let arrived = self.started.load(Ordering::SeqCst);
        let mut last = self.last.lock().await;
        if last.0 > arrived {
            return last.1;
        }
        let ticket = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        let revision = storage.current_revision().await.ok();
        *last = (ticket, revision);
        revision
    }
}

/// The etcd key range holding every CRD.
fn crd_keys() -> (Vec<u8>, Vec<u8>) {
    let prefix = etcd_layout::resource_prefix(crd::GROUP, crd::PLURAL).into_bytes();
    let end = etcd_layout::prefix_end(&prefix);
    (prefix, end)
}

impl Follower {
    /// Starts following until `shutdown`. The catalog holds only the built-ins until the first
    /// read of the CRDs.
    pub fn start(storage: Storage, shutdown: CancellationToken) -> Self {
        let (tx, rx) = watch::channel(Arc::new(Catalog::builtin()));
        let want_progress = Arc::new(Notify::new());
        let freshness = Arc::new(Freshness { born: std::time::Instant::now(), heard: Default::default(), notes: Default::default(), confirmed: Default::default() });
        tokio::spawn(follow(storage.clone(), tx, want_progress.clone(), freshness.clone(), shutdown));
        let revisions = Arc::new(SharedRevisionReads { last: tokio::sync::Mutex::new((0, None)), started: Default::default() });
        Self { rx, storage, want_progress, revisions, freshness }
    }

    /// Notes a CRD write this process has just acknowledged: until a catalog caught up with
    /// etcd is seen, [`Follower::current`] does not answer from the catalog as it stands, so
    /// the writer's next request sees the write.
    pub fn note_write(&self) {
        self.freshness.notes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// The catalog a request for a resource not served is answered from, without a store round
    /// trip when etcd confirmed the catalog within [`FRESH`] (it is asked to confirm again as
    /// the confirmation ages) and every CRD write this process acknowledged is known to be in
    /// it; else [`Follower::caught_up`]. What it may miss is a CRD change made through another
    /// process within about [`FRESH`], which a client sees as upstream's servers show it: once
    /// their own informer has it.
    pub async fn current(&self, within: Duration) -> Arc<Catalog> {
        use std::sync::atomic::Ordering;
        let notes = self.freshness.notes.load(Ordering::SeqCst);
        let age = self.freshness.age();
        if age > FRESH / 2 {
            self.want_progress.notify_one();
        }
        if age <= FRESH && self.freshness.confirmed.load(Ordering::SeqCst) >= notes {
            return self.now();
        }
        let (catalog, reached) = self.caught_up_to(within).await;
        if reached {
            self.freshness.confirmed.fetch_max(notes, Ordering::SeqCst);
        }
        catalog
    }

    /// The catalog now.
    pub fn now(&self) -> Arc<Catalog> {
        self.rx.borrow().clone()
    }

    /// A receiver of every new catalog.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Catalog>> {
        self.rx.clone()
    }

    /// The catalog once it reflects every CRD change committed before this call, or the latest
    /// one after `within` (storage unreachable, or the follow loop relisting).
    pub async fn caught_up(&self, within: Duration) -> Arc<Catalog> {
        self.caught_up_to(within).await.0
    }

    /// [`Follower::caught_up`], and whether the catalog did catch up.
    async fn caught_up_to(&self, within: Duration) -> (Arc<Catalog>, bool) {
        let Some(target) = self.revisions.current(&self.storage).await else { return (self.now(), false) };
        let mut rx = self.rx.clone();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let now = rx.borrow_and_update().clone();
            if now.revision >= target {
                return (now, true);
            }
            self.want_progress.notify_one();
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return (self.now(), false) },
                _ = tokio::time::sleep_until(deadline) => return (self.now(), false),
                // A progress request can be lost while etcd is still sending history: ask again.
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }
}

/// Follows the CRDs (listed, then watched; listed again after a second on any failure),
/// publishing a catalog for every change and every progress mark past the last one.
async fn follow(storage: Storage, tx: watch::Sender<Arc<Catalog>>, want_progress: Arc<Notify>, freshness: Arc<Freshness>, shutdown: CancellationToken) {
    let (start, end) = crd_keys();
    let mut crds: Arc<BTreeMap<String, Value>> = Arc::default();
    let options = FollowOptions { progress: Some(want_progress), ..FollowOptions::fixed("CustomResourceDefinitions", Duration::from_secs(1), shutdown) };
    follow::follow(&storage, &start, &end, options, |f| {
        match f {
            Followed::Listed { kvs, revision } => {
                crds = Arc::new(kvs.iter().filter_map(|kv| parse(&kv.value)).collect());
                tx.send_replace(Arc::new(Catalog::from_crds(revision, crds.clone())));
            }
            Followed::Progress(rev) => {
                let now = tx.borrow().clone();
                if rev > now.revision {
                    tx.send_replace(Arc::new(Catalog { revision: rev, resources: now.resources.clone(), crds: now.crds.clone() }));
                }
            }
            Followed::Changed(events) => {
                let map = Arc::make_mut(&mut crds);
                let mut last = 0;
                for e in events {
                    last = e.revision;
                    let name = etcd_key_name(&e.kv.key);
                    if e.deleted {
                        map.remove(&name);
                    } else if let Some((name, v)) = parse(&e.kv.value) {
                        map.insert(name, v);
                    }
                }
                tx.send_replace(Arc::new(Catalog::from_crds(last, crds.clone())));
            }
        }
        // Confirmed once what etcd said is published.
        freshness.heard_now();
        Ok(())
    })
    .await;
}

/// A CRD's name from its etcd key.
fn etcd_key_name(key: &[u8]) -> String {
    etcd_layout::parse_object_key(crd::GROUP, crd::PLURAL, key).map(|(_, _, name)| name.to_owned()).unwrap_or_default()
}

/// A stored CRD and its name; None (logged) for bytes that are not one.
fn parse(bytes: &[u8]) -> Option<(String, Value)> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => {
            let name = v.pointer("/metadata/name").and_then(Value::as_str)?.to_owned();
            Some((name, v))
        }
        Err(e) => {
            tracing::warn!(error = %e, "a stored CustomResourceDefinition is not JSON; ignored");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(name: &str, plural: &str, kind: &str) -> Value {
        let mut c = json!({
            "metadata": {"name": name},
            "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": plural, "kind": kind},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
                             {"name": "v2", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}}]}
        });
        crd::apply_defaults(&mut c);
        crd::establish(&mut c, None, "2026-01-01T00:00:00Z");
        c
    }

    #[test]
    fn established_crds_add_their_served_versions_after_the_builtins() {
        let crds = BTreeMap::from([("foos.example.com".to_owned(), crd("foos.example.com", "foos", "Foo"))]);
        let c = Catalog::from_crds(7, Arc::new(crds));
        let builtins = builtin_resources().len();
        assert_eq!(c.resources.len(), builtins + 2);
        assert!(c.find("example.com", "v1", "foos").is_some() && c.find("example.com", "v2", "foos").is_some());
        assert_eq!(c.revision, 7);
    }

    #[test]
    fn names_taken_in_the_group_or_by_a_builtin_conflict() {
        let crds = BTreeMap::from([("foos.example.com".to_owned(), crd("foos.example.com", "foos", "Foo"))]);
        let c = Catalog::from_crds(1, Arc::new(crds));
        assert_eq!(c.conflict(&crd("bars.example.com", "bars", "Foo")).as_deref(), Some("foos.example.com"), "the kind is taken");
        assert_eq!(c.conflict(&crd("bars.example.com", "bars", "Bar")), None);
        assert_eq!(c.conflict(&crd("foos.example.com", "foos", "Foo")), None, "a CRD does not conflict with itself");
        let mut deployments = crd("deployments.apps", "deployments", "Deployment");
        deployments["spec"]["group"] = json!("apps");
        assert!(c.conflict(&deployments).is_some_and(|c| c.contains("built-in")));
    }
}
