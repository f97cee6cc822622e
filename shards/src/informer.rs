//! What admission reads of other objects (RFC 0011, "Admission plugins"): every object of the
//! few configuration kinds upstream's admission plugins consult (priority classes, storage
//! classes, ingress classes, runtime classes, limit ranges; the ServiceCIDRs Service
//! addresses come from; the ResourceQuotas writes are charged to; the PodDisruptionBudgets evictions ask), followed from the store across the
//! whole hash space by the storage crate's informers.
//!
//! Bounded: a kind holds at most [`MAX_OBJECTS`] objects. Past that admission that needs the
//! kind answers 503, and the kind is listed again every few seconds until it fits (a cluster
//! with that many classes is not one these plugins were written for; the limit says so rather
//! than growing without end).

use shardplane_apimachinery::ApiError;
use shardplane_storage::informer::{InformerOptions, Informers as Followed};
use shardplane_storage::Storage;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The most objects of one kind held for admission.
pub const MAX_OBJECTS: usize = 10_000;

/// The kinds followed: (group, plural).
pub const KINDS: [(&str, &str); 8] = [
    ("scheduling.k8s.io", "priorityclasses"),
    ("storage.k8s.io", "storageclasses"),
    ("networking.k8s.io", "ingressclasses"),
    ("node.k8s.io", "runtimeclasses"),
    ("", "limitranges"),
    // The ranges Service addresses come from (RFC 0014).
    ("networking.k8s.io", "servicecidrs"),
    // The quotas a write is charged to, and their controller's trigger (RFC 0014).
    ("", "resourcequotas"),
    // The budgets an eviction asks, and their controller's trigger (RFC 0014).
    ("policy", "poddisruptionbudgets"),
];

/// The followed kinds.
pub struct Informers(Followed);

impl Informers {
    /// Starts one follower per kind of [`KINDS`], each on the store that holds that kind.
    pub fn start(store_of: impl Fn(&str, &str) -> Storage, stop: &CancellationToken) -> Self {
        Self::start_bounded(store_of, stop, MAX_OBJECTS)
    }

    /// [`Informers::start`] holding at most `max` objects per kind (tests use a small bound).
    pub fn start_bounded(store_of: impl Fn(&str, &str) -> Storage, stop: &CancellationToken, max: usize) -> Self {
        Self(Followed::start(&KINDS, store_of, stop, InformerOptions { max, progress_every: None }))
    }

    /// Every held object of (group, plural), once listed; 503 while loading past a few seconds
    /// or when the kind has too many objects.
    pub async fn objects(&self, group: &str, plural: &str) -> Result<Vec<Arc<serde_json::Value>>, ApiError> {
        self.0.objects(group, plural).await.map_err(|why| ApiError::unavailable(format!("admission: {why}")))
    }

    /// Changes of (group, plural), one of [`KINDS`]: the receiver sees each new state.
    pub fn subscribe(&self, group: &str, plural: &str) -> Option<tokio::sync::watch::Receiver<Arc<shardplane_storage::informer::Held>>> {
        self.0.subscribe(group, plural).ok()
    }
}

/// The held objects of (group, plural) whose keys are in `shard`'s ranges: the ones a
/// per-shard controller looks after (an empty list while the kind cannot be read).
pub(crate) async fn owned(shard: &crate::shard::Shard, group: &str, plural: &str) -> Vec<Arc<serde_json::Value>> {
    use shardplane_apimachinery::meta::meta_str;
    let Ok(held) = shard.informers.objects(group, plural).await else { return Vec::new() };
    held.into_iter().filter(|o| shard.owns(shardplane_keyspace::ObjectKey::new(group, plural, meta_str(o, "namespace"), meta_str(o, "name")).hash())).collect()
}

/// Each of `objects` (of `info`) as etcd holds it now: its key, revision and value, for a
/// decision that must compare on the current revision; objects gone since are left out.
pub(crate) async fn current(shard: &crate::shard::Shard, info: &shardplane_apimachinery::resources::ResourceInfo, objects: &[&serde_json::Value]) -> Result<Vec<(Vec<u8>, u64, serde_json::Value)>, shardplane_storage::StorageError> {
    use shardplane_apimachinery::meta::meta_str;
    let mut out = Vec::new();
    for o in objects.iter().copied() {
        let key = crate::shard::Shard::any_key(info, meta_str(o, "namespace"), meta_str(o, "name"));
        if let (Some(kv), _) = shard.store(info).get(&key).await?
            && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&kv.value)
        {
            out.push((key, kv.mod_revision, v));
        }
    }
    Ok(out)
}
