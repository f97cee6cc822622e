//! The shard's state: its ranges, storage, and one watch cache per served resource.

use shardplane_apimachinery::resources::{builtin_resources, ResourceInfo};
use shardplane_apimachinery::ApiError;
use shardplane_keyspace::{etcd_layout, HashRange, ObjectKey, RangeSet};
use shardplane_storage::range_map::StoredRangeMap;
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

/// This shard's reading of the stored range map.
#[derive(Clone, Debug, Default)]
struct MapView {
    /// The map's epoch (0 before any map is stored).
    epoch: u64,
    /// The ranges the map gives this shard; `None` while no map is stored (then the shard owns
    /// what it caches, as a standalone shard does).
    assigned: Option<RangeSet>,
}

/// The request header carrying the range-map epoch a router routed the request under.
pub const EPOCH_HEADER: &str = "shardplane-range-epoch";

/// The request header with which a router asks for a JSON list's entries one per line (value
/// `lines`), so that it can split them with one memchr each instead of scanning every byte.
/// Only a router merging several shards asks; every other client gets upstream's compact layout.
pub const LIST_FRAMING_HEADER: &str = "shardplane-list-framing";

/// A running shard.
pub struct Shard {
    pub id: String,
    pub storage: Storage,
    /// The ranges this shard's caches hold (`--range`).
    pub ranges: RangeSet,
    /// What the stored range map says about this shard (followed from etcd).
    map: std::sync::RwLock<MapView>,
    pub resources: Vec<Arc<ResourceInfo>>,
    served: HashMap<(&'static str, &'static str), Served>,
    pub shutdown: CancellationToken,
    pub metrics: crate::metrics::Metrics,
    pub bookmark_interval: Duration,
    /// A watch without `timeoutSeconds` runs between this and twice this.
    pub min_request_timeout: Duration,
    /// The caches' settings (their history bounds decide which RVs a watch can resume from).
    pub cache_config: CacheConfig,
}

impl Shard {
    /// Builds the shard and starts one reflector per resource. The caches load in the background;
    /// [`Shard::ready`] says when all have.
    pub fn start(id: String, storage: Storage, ranges: RangeSet, cache: CacheConfig, bookmark_interval: Duration, min_request_timeout: Duration, shutdown: CancellationToken) -> Arc<Self> {
        let resources: Vec<Arc<ResourceInfo>> = builtin_resources().into_iter().map(Arc::new).collect();
        let mut served = HashMap::new();
        for info in &resources {
            let codec = ObjectCodec::new(info.clone());
            let c = Arc::new(WatchCache::new(cache.clone()));
            served.insert((info.group, info.plural), Served { info: info.clone(), codec: codec.clone(), cache: c.clone() });
            let range = Self::key_range(info, &ranges);
            tokio::spawn(reflector::run(storage.clone(), c, codec, range, shutdown.clone()));
        }
        let shard = Arc::new(Self {
            id,
            storage,
            ranges,
            map: std::sync::RwLock::new(MapView::default()),
            resources,
            served,
            shutdown,
            metrics: crate::metrics::Metrics::new(),
            bookmark_interval,
            cache_config: cache,
            min_request_timeout,
        });
        tokio::spawn(follow_range_map(shard.clone()));
        shard
    }

    /// The range-map epoch this shard is at.
    pub fn epoch(&self) -> u64 {
        self.map.read().unwrap_or_else(|p| p.into_inner()).epoch
    }

    fn apply_map(&self, map: &StoredRangeMap) {
        let assigned = map.ranges_of(&self.id);
        let mut view = self.map.write().unwrap_or_else(|p| p.into_inner());
        if map.epoch < view.epoch {
            return;
        }
        if view.epoch != map.epoch {
            if assigned.ranges().iter().any(|r| !self.ranges.covers(r)) {
                tracing::info!(shard = %self.id, epoch = map.epoch, %assigned, cached = %self.ranges, "the stored range map gives this shard ranges it does not cache; it refuses their keys until a map matching its ranges is published");
            }
            tracing::info!(shard = %self.id, epoch = map.epoch, %assigned, "range map epoch");
        }
        *view = MapView { epoch: map.epoch, assigned: Some(assigned) };
    }

    /// Reads the stored range map now (a router routed under a newer epoch than ours).
    pub async fn refresh_map(&self) -> Result<(), ApiError> {
        let stored = self.storage.load_range_map().await.map_err(|e| ApiError::unavailable(format!("storage is unavailable: {e}")))?;
        if let Some(v) = stored {
            self.apply_map(&v.map);
        }
        Ok(())
    }

    /// Refuses a request routed under an older epoch than this shard's (421, the router
    /// refreshes); reads the map first if the router's is newer.
    pub async fn check_epoch(&self, sent: u64) -> Result<(), ApiError> {
        if sent > self.epoch() {
            self.refresh_map().await?;
        }
        let epoch = self.epoch();
        if sent < epoch {
            return Err(ApiError::stale_range_map(sent, epoch));
        }
        Ok(())
    }

    /// Whether this shard owns `hash` now: it caches it and the map (if any) gives it to it.
    pub fn owns(&self, hash: u64) -> bool {
        self.ranges.contains(hash) && self.map.read().unwrap_or_else(|p| p.into_inner()).assigned.as_ref().is_none_or(|a| a.contains(hash))
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
        if !self.owns(h) {
            let view = self.map.read().unwrap_or_else(|p| p.into_inner()).clone();
            let ranges = view.assigned.unwrap_or_else(|| self.ranges.clone());
            return Err(ApiError::not_owned(&key.to_string(), h, &ranges.to_string(), view.epoch));
        }
        Ok(etcd_layout::object_key(&key).into_bytes())
    }

    /// The etcd key of any object (for reads of keys other shards own, such as namespaces).
    pub fn any_key(info: &ResourceInfo, namespace: &str, name: &str) -> Vec<u8> {
        etcd_layout::object_key(&ObjectKey::new(info.group, info.plural, namespace, name)).into_bytes()
    }
}

/// Keeps the shard's view of the range map current until the shard shuts down.
async fn follow_range_map(shard: Arc<Shard>) {
    let mut rx = shard.storage.follow_range_map();
    loop {
        let map = rx.borrow_and_update().clone();
        if let Some(m) = map {
            shard.apply_map(&m);
        }
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            _ = shard.shutdown.cancelled() => return,
        }
    }
}
