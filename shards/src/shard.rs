//! The shard's state: its ranges, storage, and one watch cache per served resource.

use shardplane_apimachinery::resources::{builtin_resources, ResourceInfo};
use shardplane_apimachinery::ApiError;
use shardplane_keyspace::{etcd_layout, HashRange, ObjectKey, RangeSet};
use shardplane_storage::Storage;
use shardplane_watchcache::reflector::{self, KeyRange};
use shardplane_watchcache::{CacheConfig, ObjectCodec, WatchCache};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One served resource: its facts, codec and cache.
pub struct Served {
    pub info: Arc<ResourceInfo>,
    pub codec: ObjectCodec,
    pub cache: Arc<WatchCache>,
}

/// A running shard.
pub struct Shard {
    pub id: String,
    pub storage: Storage,
    pub ranges: RangeSet,
    /// Range-map epoch this shard was started with (static until the coordinator exists).
    pub epoch: u64,
    pub resources: Vec<Arc<ResourceInfo>>,
    served: HashMap<(&'static str, &'static str), Served>,
    pub shutdown: CancellationToken,
    pub metrics: crate::metrics::Metrics,
    pub bookmark_interval: Duration,
}

impl Shard {
    /// Builds the shard and starts one reflector per resource. The caches load in the background;
    /// [`Shard::ready`] says when all have.
    pub fn start(id: String, storage: Storage, ranges: RangeSet, cache: CacheConfig, bookmark_interval: Duration, shutdown: CancellationToken) -> Arc<Self> {
        let resources: Vec<Arc<ResourceInfo>> = builtin_resources().into_iter().map(Arc::new).collect();
        let mut served = HashMap::new();
        for info in &resources {
            let codec = ObjectCodec::new(info.clone());
            let c = Arc::new(WatchCache::new(cache.clone()));
            served.insert((info.group, info.plural), Served { info: info.clone(), codec: codec.clone(), cache: c.clone() });
            let range = Self::key_range(info, &ranges);
            tokio::spawn(reflector::run(storage.clone(), c, codec, range, shutdown.clone()));
        }
        Arc::new(Self {
            id,
            storage,
            ranges,
            epoch: 0,
            resources,
            served,
            shutdown,
            metrics: crate::metrics::Metrics::new(),
            bookmark_interval,
        })
    }

    /// The etcd key range of `info` the shard follows: the hull of its ranges (one watch stream;
    /// keys of a gap between ranges are dropped by the ownership filter).
    fn key_range(info: &ResourceInfo, ranges: &RangeSet) -> KeyRange {
        let rs = ranges.ranges();
        let hull = HashRange::new(rs.first().map_or(0, |r| r.start()), rs.last().map_or(0, |r| r.end())).unwrap_or(HashRange::FULL);
        let (start, end) = etcd_layout::range_keys(info.group, info.plural, hull);
        let owned = ranges.clone();
        KeyRange { start, end, owns: Some(Arc::new(move |h| owned.contains(h))) }
    }

    /// The served resource for (group, plural).
    pub fn served(&self, info: &ResourceInfo) -> &Served {
        self.served.get(&(info.group, info.plural)).expect("every resource has a cache")
    }

    /// Whether every cache has loaded.
    pub fn ready(&self) -> bool {
        self.served.values().all(|s| s.cache.ready())
    }

    /// All served resources with their caches.
    pub fn all_served(&self) -> impl Iterator<Item = &Served> {
        self.served.values()
    }

    /// The etcd key of an object, or 421 if this shard does not own it.
    pub fn owned_key(&self, info: &ResourceInfo, namespace: &str, name: &str) -> Result<Vec<u8>, ApiError> {
        let key = ObjectKey::new(info.group, info.plural, namespace, name);
        let h = key.hash();
        if !self.ranges.contains(h) {
            return Err(ApiError::not_owned(&key.to_string(), h, &self.ranges.to_string(), self.epoch));
        }
        Ok(etcd_layout::object_key(&key).into_bytes())
    }

    /// The etcd key of any object (for reads of keys other shards own, such as namespaces).
    pub fn any_key(info: &ResourceInfo, namespace: &str, name: &str) -> Vec<u8> {
        etcd_layout::object_key(&ObjectKey::new(info.group, info.plural, namespace, name)).into_bytes()
    }
}
