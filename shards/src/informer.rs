//! What admission reads of other objects (RFC 0011, "Admission plugins"): every object of the
//! few configuration kinds upstream's admission plugins consult (priority classes, storage
//! classes, ingress classes, runtime classes, limit ranges), followed from the store across the
//! whole hash space, as each kube-apiserver's informers follow them. Their objects live on
//! whichever shard owns their keys; every shard needs them all.
//!
//! Bounded: a kind holds at most [`MAX_OBJECTS`] objects. Past that the informer lets what it
//! read go, admission that needs the kind answers 503, and the kind is listed again every few
//! seconds until it fits (a cluster with that many classes is not one these plugins were written
//! for; the limit says so rather than growing without end).

use serde_json::Value;
use shardplane_keyspace::{etcd_layout, HashRange};
use shardplane_storage::follow::{self, FollowOptions, Followed};
use shardplane_storage::Storage;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The most objects of one kind held for admission.
pub const MAX_OBJECTS: usize = 10_000;

/// How long admission waits for a kind's first list before answering 503.
const FIRST_LIST: Duration = Duration::from_secs(5);

/// The kinds followed: (group, plural).
pub const KINDS: [(&str, &str); 5] = [
    ("scheduling.k8s.io", "priorityclasses"),
    ("storage.k8s.io", "storageclasses"),
    ("networking.k8s.io", "ingressclasses"),
    ("node.k8s.io", "runtimeclasses"),
    ("", "limitranges"),
];

/// One kind as last heard from the store.
#[derive(Debug, Default)]
pub enum Held {
    /// Not listed yet.
    #[default]
    Loading,
    /// Every object, by etcd key.
    Objects(BTreeMap<Vec<u8>, Arc<Value>>),
    /// More than the bound ([`MAX_OBJECTS`] unless started with another).
    TooMany,
}

/// One kind's (group, plural) and what is held of it.
type Kind = ((&'static str, &'static str), watch::Receiver<Arc<Held>>);

/// The followed kinds.
pub struct Informers {
    kinds: Vec<Kind>,
    /// The most objects held of one kind.
    max: usize,
}

impl Informers {
    /// Starts one follower per kind of [`KINDS`], each on the store that holds that kind.
    pub fn start(store_of: impl Fn(&str, &str) -> Storage, stop: &CancellationToken) -> Self {
        Self::start_bounded(store_of, stop, MAX_OBJECTS)
    }

    /// [`Informers::start`] holding at most `max` objects per kind (tests use a small bound).
    pub fn start_bounded(store_of: impl Fn(&str, &str) -> Storage, stop: &CancellationToken, max: usize) -> Self {
        let kinds = KINDS
            .iter()
            .map(|&(group, plural)| {
                let (tx, rx) = watch::channel(Arc::new(Held::Loading));
                tokio::spawn(run(store_of(group, plural), group, plural, max, tx, stop.child_token()));
                ((group, plural), rx)
            })
            .collect();
        Self { kinds, max }
    }

    /// Every held object of (group, plural), once listed; 503 while loading past
    /// [`FIRST_LIST`] or when the kind has too many objects.
    pub async fn objects(&self, group: &str, plural: &str) -> Result<Vec<Arc<Value>>, shardplane_apimachinery::ApiError> {
        use shardplane_apimachinery::ApiError;
        let Some((_, rx)) = self.kinds.iter().find(|(k, _)| *k == (group, plural)) else { return Err(ApiError::internal(format!("{plural} are not followed for admission"))) };
        let mut rx = rx.clone();
        let held = tokio::time::timeout(FIRST_LIST, rx.wait_for(|h| !matches!(**h, Held::Loading))).await;
        let held = match held {
            Ok(Ok(h)) => h.clone(),
            _ => return Err(ApiError::unavailable(format!("admission has not read the {plural} yet"))),
        };
        match &*held {
            Held::Objects(m) => Ok(m.values().cloned().collect()),
            Held::TooMany => Err(ApiError::unavailable(format!("more than {} {plural}: too many for admission to hold", self.max))),
            Held::Loading => unreachable!("waited past loading"),
        }
    }
}

fn parsed(bytes: &[u8]) -> Option<Arc<Value>> {
    serde_json::from_slice(bytes).ok().map(Arc::new)
}

async fn run(storage: Storage, group: &'static str, plural: &'static str, max: usize, tx: watch::Sender<Arc<Held>>, stop: CancellationToken) {
    let (start, end) = etcd_layout::range_keys(group, plural, HashRange::FULL);
    let mut objects: BTreeMap<Vec<u8>, Arc<Value>> = BTreeMap::new();
    let options = FollowOptions { max_retry: Duration::from_secs(10), ..FollowOptions::fixed(format!("{plural} for admission"), Duration::from_millis(500), stop) };
    follow::follow(&storage, &start, &end, options, |f| {
        match f {
            Followed::Listed { kvs, .. } => objects = kvs.iter().filter_map(|kv| Some((kv.key.clone(), parsed(&kv.value)?))).collect(),
            Followed::Changed(events) => {
                for e in events {
                    if e.deleted {
                        objects.remove(&e.kv.key);
                    } else if let Some(v) = parsed(&e.kv.value) {
                        objects.insert(e.kv.key.clone(), v);
                    }
                }
            }
            Followed::Progress(_) => return Ok(()),
        }
        if objects.len() > max {
            // Not held: what was read is let go, and the kind is listed again after the
            // follower's pause (up to 10 s) to see whether it has shrunk.
            objects.clear();
            tx.send_replace(Arc::new(Held::TooMany));
            return Err(format!("more than {max} {plural}: not held for admission"));
        }
        tx.send_replace(Arc::new(Held::Objects(objects.clone())));
        Ok(())
    })
    .await;
}
