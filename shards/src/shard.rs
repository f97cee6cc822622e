//! The shard's state: its ranges, storage, and one watch cache per served resource — the
//! built-ins and, as the catalog publishes them, every established CRD's resources.

use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::request_path::Target;
use shardplane_apimachinery::ApiError;
use shardplane_keyspace::{etcd_layout, HashRange, ObjectKey, RangeSet};
use shardplane_storage::range_map::StoredRangeMap;
use shardplane_storage::{Storage, Stores};
use shardplane_watchcache::reflector::{self, KeyRange};
use shardplane_watchcache::{CacheConfig, ObjectCodec, WatchCache};
use std::collections::HashMap;
use std::sync::Arc;
use shardplane_catalog::CATCH_UP;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One served resource: its facts, codec and cache, and the reflector that fills it.
pub struct Served {
    pub info: Arc<ResourceInfo>,
    pub codec: ObjectCodec,
    pub cache: Arc<WatchCache>,
    /// Asks the reflector to take over or let go of a range.
    commands: tokio::sync::mpsc::Sender<reflector::Command>,
    /// Stops the reflector (its CRD is gone).
    stop: CancellationToken,
}

/// What the shard serves now: the resources in discovery order, and the cache of each
/// (group, plural) — one for all served versions of a custom resource.
#[derive(Clone, Default)]
struct Table {
    /// The catalog revision served.
    revision: u64,
    resources: Arc<Vec<Arc<ResourceInfo>>>,
    by_resource: HashMap<(String, String), Arc<Served>>,
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

/// A running shard.
pub struct Shard {
    pub id: String,
    /// The main store: the range map, membership, and every resource the storage contract does
    /// not put elsewhere.
    pub storage: Storage,
    /// Each resource's store (RFC 0008's storage contract).
    pub stores: Stores,
    /// The ranges every cache of this shard holds: `--range` at start, then as the range map's
    /// moves ask (RFC 0006).
    ranges: std::sync::RwLock<RangeSet>,
    /// Revision from which each range taken over while running is held (for the member key).
    adopted: std::sync::Mutex<Vec<(HashRange, u64)>>,
    /// One range change at a time.
    changing: tokio::sync::Mutex<()>,
    /// Signalled when the held ranges change, so the member key says so at once.
    pub ranges_changed: tokio::sync::Notify,
    /// Whether a range has been taken over or let go while running.
    moved: std::sync::atomic::AtomicBool,
    /// What the stored range map says about this shard (followed from etcd).
    map: std::sync::RwLock<MapView>,
    /// The URL this process serves at, once it listens: a stored map that lists this shard at
    /// another URL was written for an earlier process and is not followed (see `apply_map`).
    url: std::sync::OnceLock<String>,
    /// An etcd revision from before this process followed the map: a map whose epoch began
    /// after it was written knowing this process could be running.
    started: std::sync::atomic::AtomicU64,
    /// The served resources, followed from the stored CRDs.
    pub catalog: shardplane_catalog::Follower,
    table: std::sync::RwLock<Table>,
    pub shutdown: CancellationToken,
    pub metrics: shardplane_http::metrics::Metrics,
    pub bookmark_interval: Duration,
    /// A watch without `timeoutSeconds` runs between this and twice this.
    pub min_request_timeout: Duration,
    /// How long an Event lives after its last write (RFC 0015).
    pub event_ttl: Duration,
    /// Every committed write, counted for the axis diagnosis (RFC 0015).
    pub write_load: crate::write_load::WriteLoad,
    /// The caches' settings (their history bounds decide which RVs a watch can resume from).
    pub cache_config: CacheConfig,
    /// The configuration objects admission reads (priority, storage, ingress and runtime
    /// classes, limit ranges, service CIDRs), followed across the whole hash space.
    pub informers: crate::informer::Informers,
    /// The service IP and node-port ranges (RFC 0014).
    pub service_network: shardplane_apimachinery::service_network::ServiceNetwork,
    /// Every namespace's state, followed from etcd: creates are admitted on it (RFC 0017).
    pub namespaces: crate::namespace_admission::Namespaces,
}

impl Shard {
    /// Builds the shard and starts one reflector per resource. The caches load in the background;
    /// [`Shard::ready`] says when all have.
    /// A `standalone` shard ignores the range map: it owns exactly what it caches and never
    /// loads or lets go of a range (a single-shard deployment, or a baseline beside a cluster).
    pub fn start(config: &crate::server::ShardConfig, stores: Stores, shutdown: CancellationToken) -> Arc<Self> {
        let catalog = shardplane_catalog::Follower::start(stores.of(shardplane_apimachinery::crd::GROUP, shardplane_apimachinery::crd::PLURAL).clone(), shutdown.clone());
        let informers = crate::informer::Informers::start(|g, p| stores.of(g, p).clone(), &shutdown);
        let metrics = shardplane_http::metrics::Metrics::new();
        let write_load = crate::write_load::WriteLoad::new(metrics.registry());
        let shard = Arc::new(Self {
            write_load,
            informers,
            id: config.id.clone(),
            storage: stores.main().clone(),
            stores,
            ranges: std::sync::RwLock::new(config.ranges.clone()),
            adopted: std::sync::Mutex::new(Vec::new()),
            changing: tokio::sync::Mutex::new(()),
            ranges_changed: tokio::sync::Notify::new(),
            moved: std::sync::atomic::AtomicBool::new(false),
            url: std::sync::OnceLock::new(),
            started: std::sync::atomic::AtomicU64::new(u64::MAX),
            map: std::sync::RwLock::new(MapView::default()),
            table: std::sync::RwLock::new(Table::default()),
            catalog,
            shutdown,
            metrics,
            bookmark_interval: config.bookmark_interval,
            cache_config: config.cache.clone(),
            min_request_timeout: config.min_request_timeout,
            event_ttl: config.event_ttl,
            service_network: config.service_network.clone(),
            namespaces: Default::default(),
        });
        shard.serve_catalog(&shardplane_catalog::Catalog::builtin());
        tokio::spawn(follow_catalog(shard.clone()));
        if !config.standalone {
            tokio::spawn(follow_range_map(shard.clone()));
        }
        shard
    }

    /// Starts a cache and its reflector for each resource of `catalog` not served yet, stops
    /// those of custom resources it no longer has (or whose CRD changed), and publishes its
    /// resources. Called with
    /// the range lock held (or before anything else runs), so a new cache starts with the
    /// ranges every other cache holds.
    fn serve_catalog(&self, catalog: &shardplane_catalog::Catalog) {
        let mut table = self.table.write().unwrap_or_else(|p| p.into_inner()).clone();
        let ranges = self.ranges();
        // One cache per stored resource, decoding with the storage version's facts (the first
        // served version's when storage is not served); a converted version (RFC 0011) reads
        // the cache of the resource it is stored as.
        let mut decoders: Vec<&Arc<ResourceInfo>> = Vec::new();
        for info in catalog.resources.iter().filter(|i| i.is_stored()) {
            let storage = info.is_storage_version();
            match decoders.iter().position(|d| d.storage_group() == info.storage_group() && d.plural == info.plural) {
                Some(i) if storage => decoders[i] = info,
                Some(_) => {}
                None => decoders.push(info),
            }
        }
        // A cache whose CRD is gone, or changed what decoding depends on (its schema's defaults
        // apply to every object read from storage), ends — its reflector stopped, its open
        // watches ended, as upstream restarts a CRD's storage when the CRD changes — and, if the
        // resource is still served, starts again below with the new facts.
        table.by_resource.retain(|k, served| {
            let keep = decoders.iter().any(|d| d.storage_group() == k.0 && d.plural == k.1 && ***d == *served.info);
            if !keep {
                tracing::info!(group = %k.0, resource = %k.1, "a custom resource's cache ends: its CustomResourceDefinition is gone or changed");
                served.stop.cancel();
                served.cache.release(|_| true);
            }
            keep
        });
        for info in decoders {
            let k = (info.storage_group().to_owned(), info.plural.clone());
            if table.by_resource.contains_key(&k) {
                continue;
            }
            let codec = ObjectCodec::new(info.clone());
            let cache = Arc::new(WatchCache::new(self.cache_config.clone()));
            let (commands, rx) = tokio::sync::mpsc::channel(4);
            let stop = self.shutdown.child_token();
            let range = KeyRange::new(info.storage_group(), &info.plural, ranges.clone());
            tokio::spawn(reflector::run(self.store(info).clone(), cache.clone(), codec.clone(), range, rx, stop.clone()));
            if info.custom.is_some() {
                tracing::info!(group = %info.group, resource = %info.plural, "serving a custom resource");
            }
            table.by_resource.insert(k, Arc::new(Served { info: info.clone(), codec, cache, commands, stop }));
        }
        table.resources = catalog.resources.clone();
        table.revision = catalog.revision;
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = table;
    }

    /// The store that holds `info`'s objects (its revisions are their resourceVersions).
    pub fn store(&self, info: &ResourceInfo) -> &Storage {
        self.stores.of(info.storage_group(), &info.plural)
    }

    /// The served resources, in discovery order.
    pub fn resources(&self) -> Arc<Vec<Arc<ResourceInfo>>> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).resources.clone()
    }

    /// The served resources once every CRD change committed before now is served (bounded by
    /// [`CATCH_UP`]): what a request for a resource not served yet looks at before it is
    /// answered 404, since its CRD may have been established a moment ago. While a range is
    /// being loaded, the catalog's own follower serves the change once the load is done.
    pub async fn fresh_resources(&self) -> Arc<Vec<Arc<ResourceInfo>>> {
        let catalog = self.catalog.caught_up(CATCH_UP).await;
        let behind = self.table.read().unwrap_or_else(|p| p.into_inner()).revision < catalog.revision;
        if behind && let Ok(_one) = self.changing.try_lock() {
            self.serve_catalog(&catalog);
        }
        self.resources()
    }

    /// The resource a request path names (looked up again in a fresh catalog when it is not
    /// served yet). A custom resource's cache gets [`CATCH_UP`] to load first, so that the
    /// first request after its CRD is established is answered, not sent 429.
    pub async fn target(&self, path: &str) -> Option<Target> {
        let t = match shardplane_apimachinery::request_path::parse(path, &self.resources()) {
            Some(t) => t,
            None if path.starts_with("/apis/") => shardplane_apimachinery::request_path::parse(path, &self.fresh_resources().await)?,
            None => return None,
        };
        if t.info.custom.is_some() && let Ok(served) = self.served(&t.info) {
            let _ = served.cache.wait_synced(0, CATCH_UP).await;
        }
        Some(t)
    }

    /// The served resource (group, plural) of a built-in (always served).
    pub fn builtin(&self, group: &str, plural: &str) -> Arc<ResourceInfo> {
        self.resources().iter().find(|r| r.group == group && r.plural == plural && r.is_storage_version()).expect("built-ins are always served").clone()
    }

    /// The range-map epoch this shard is at.
    pub fn epoch(&self) -> u64 {
        self.map.read().unwrap_or_else(|p| p.into_inner()).epoch
    }

    /// Records the URL this process serves at.
    pub fn set_url(&self, url: String) {
        let _ = self.url.set(url);
    }

    /// Whether `map` was written for this process: it lists this shard at its URL; or it does
    /// not list it, and either the shard holds nothing (it joined with no range; moves bring
    /// ranges to it) or the map's epoch began after this process started (a layout without
    /// it). A map that lists it at another URL, or leaves it out while it holds its `--range`
    /// from before it started, predates it (a restart with another shard count, before the
    /// router publishes the new layout; a restart on a new port, before the new address is
    /// stored): following it would let go of ranges the shard was started with.
    fn written_for_me(&self, map: &StoredRangeMap) -> bool {
        match map.shards.iter().find(|s| s.id == self.id) {
            Some(entry) => self.url.get().is_some_and(|url| *url == entry.url),
            None => self.ranges().ranges().is_empty() || map.cutover > self.started.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Follows `map` if it was written for this process; false if it was not.
    fn apply_map(&self, map: &StoredRangeMap) -> bool {
        if !self.written_for_me(map) {
            return false;
        }
        let assigned = map.ranges_of(&self.id);
        let mut view = self.map.write().unwrap_or_else(|p| p.into_inner());
        if map.epoch < view.epoch {
            return true;
        }
        if view.epoch != map.epoch {
            let cached = self.ranges();
            if assigned.ranges().iter().any(|r| !cached.covers(r)) {
                tracing::info!(shard = %self.id, epoch = map.epoch, %assigned, %cached, "the stored range map gives this shard ranges it does not cache yet; it refuses their keys until it has loaded them");
            }
            tracing::info!(shard = %self.id, epoch = map.epoch, %assigned, "range map epoch");
        }
        *view = MapView { epoch: map.epoch, assigned: Some(assigned) };
        true
    }

    /// Reads the stored range map now (a router routed under a newer epoch than ours).
    pub async fn refresh_map(&self) -> Result<(), ApiError> {
        let stored = self.storage.load_range_map().await.map_err(|e| ApiError::unavailable(format!("storage is unavailable: {e}")))?;
        if let Some(v) = stored {
            let _ = self.apply_map(&v.map);
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
        self.ranges.read().unwrap_or_else(|p| p.into_inner()).contains(hash) && self.map.read().unwrap_or_else(|p| p.into_inner()).assigned.as_ref().is_none_or(|a| a.contains(hash))
    }

    /// The filter that keeps LISTs and new watches to what the map gives this shard. Needed
    /// while the caches hold hashes the map does not give it (a range being loaded or drained,
    /// RFC 0006) and, once a range has left, for the events it left in the history; None
    /// otherwise (no map, or the shard owns all it holds and never moved a range), so that the
    /// common case costs no hash per object.
    pub fn owned_filter(&self, info: &ResourceInfo) -> Option<shardplane_watchcache::Owned> {
        let assigned = self.map.read().unwrap_or_else(|p| p.into_inner()).assigned.clone()?;
        let owns_all_it_holds = self.ranges().ranges().iter().all(|r| assigned.covers(r));
        if owns_all_it_holds && !self.moved.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        Some(shardplane_watchcache::Owned { group: info.storage_group().to_owned(), plural: info.plural.clone(), ranges: assigned })
    }

    /// The ranges every cache holds.
    pub fn ranges(&self) -> RangeSet {
        self.ranges.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The ranges taken over while running, with the revision each is held from.
    pub fn adopted(&self) -> Vec<(HashRange, u64)> {
        self.adopted.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes over `r` in every cache (RFC 0006, step 2): each loads it at its synced revision and
    /// follows it from there. Returns the revision from which every cache holds it. The shard
    /// serves none of its keys until the map gives it the range.
    ///
    /// Every cache is asked at once: their loads share one pace (about half a core in all), and
    /// the many caches with little or nothing in the range join together, so etcd sends their
    /// recent changes in one catch-up of its history rather than one per resource, each about
    /// 100 ms apart (asked one after another, the ~70 built-in resources took 7–10 s per move).
    pub async fn adopt(&self, r: HashRange) -> Result<u64, ApiError> {
        let _one = self.changing.lock().await;
        if self.ranges().covers(&r) {
            return Ok(self.adopted().iter().find(|(a, _)| *a == r).map_or(0, |(_, at)| *at));
        }
        self.moved.store(true, std::sync::atomic::Ordering::Relaxed);
        let unavailable = |plural: &str| ApiError::unavailable(format!("the {plural} cache stopped"));
        let mut asked = Vec::new();
        for s in self.all_served() {
            let (tx, rx) = tokio::sync::oneshot::channel();
            s.commands.send(reflector::Command::Adopt(r, tx)).await.map_err(|_| unavailable(&s.info.plural))?;
            asked.push((s, rx));
        }
        let mut at = 0;
        for (s, rx) in asked {
            at = at.max(rx.await.map_err(|_| unavailable(&s.info.plural))?.map_err(|e| ApiError::unavailable(format!("loading {r}: {e}")))?);
        }
        *self.ranges.write().unwrap_or_else(|p| p.into_inner()) = self.ranges().with(r);
        self.adopted.lock().unwrap_or_else(|p| p.into_inner()).push((r, at));
        tracing::info!(shard = %self.id, range = %r, revision = at, "range loaded");
        self.ranges_changed.notify_one();
        Ok(at)
    }

    /// Lets `r` go from every cache (RFC 0006, step 5): its keys are refused from now on and its
    /// objects dropped, without events (they moved, they did not change).
    pub async fn release(&self, r: HashRange) {
        let _one = self.changing.lock().await;
        self.moved.store(true, std::sync::atomic::Ordering::Relaxed);
        *self.ranges.write().unwrap_or_else(|p| p.into_inner()) = self.ranges().without(r);
        self.adopted.lock().unwrap_or_else(|p| p.into_inner()).retain(|(a, _)| *a != r);
        let mut gone = 0;
        for s in self.all_served() {
            let (tx, rx) = tokio::sync::oneshot::channel();
            if s.commands.send(reflector::Command::Release(r, tx)).await.is_ok() {
                gone += rx.await.unwrap_or(0);
            }
        }
        tracing::info!(shard = %self.id, range = %r, objects = gone, "range released");
        self.ranges_changed.notify_one();
    }

    /// The served resource for `info`'s stored (group, plural); 404 if it is no longer served (its CRD was
    /// deleted since the request was parsed).
    pub fn served(&self, info: &ResourceInfo) -> Result<Arc<Served>, ApiError> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).by_resource.get(&(info.storage_group().to_owned(), info.plural.clone())).cloned().ok_or_else(ApiError::path_not_found)
    }

    /// The served cache of `info` once it has synced to `rv`, waiting at most `wait`: 504 (too
    /// large a resourceVersion) if it has not by then, or 429 with Retry-After if it has not
    /// even loaded (a shard just started, or relisting). A cache that ends while it is awaited
    /// (its CustomResourceDefinition changed and a new cache replaced it) is left for the one
    /// that replaced it, which is waited for in the time that is left.
    pub async fn synced(&self, info: &ResourceInfo, rv: u64, wait: Duration) -> Result<Arc<Served>, ApiError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut ended: Option<Arc<Served>> = None;
        loop {
            let served = self.served(info)?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let waited = async { served.cache.wait_synced(rv, left).await.map_err(|e| crate::read::cache_err(e, false)) };
            // The same ended cache again (nothing replaced it: the shard is stopping): waited
            // for without looking for another.
            if ended.as_ref().is_some_and(|e| Arc::ptr_eq(e, &served)) {
                waited.await?;
                return Ok(served);
            }
            tokio::select! {
                r = waited => {
                    r?;
                    return Ok(served);
                }
                _ = served.stop.cancelled() => ended = Some(served.clone()),
            }
        }
    }

    /// Whether every cache has loaded.
    pub fn ready(&self) -> bool {
        self.all_served().iter().all(|s| s.cache.ready())
    }

    /// How many objects of (group, plural) this shard's cache holds, if it serves them.
    pub fn stored_objects(&self, group: &str, plural: &str) -> Option<u64> {
        let table = self.table.read().unwrap_or_else(|p| p.into_inner());
        table.by_resource.get(&(group.to_owned(), plural.to_owned())).map(|s| s.cache.stats().objects as u64)
    }

    /// All served resources with their caches.
    pub fn all_served(&self) -> Vec<Arc<Served>> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).by_resource.values().cloned().collect()
    }

    /// The etcd key of an object, or 421 if this shard does not own it.
    pub fn owned_key(&self, info: &ResourceInfo, namespace: &str, name: &str) -> Result<Vec<u8>, ApiError> {
        let key = ObjectKey::new(info.storage_group(), &info.plural, namespace, name);
        let h = key.hash();
        if !self.owns(h) {
            let view = self.map.read().unwrap_or_else(|p| p.into_inner()).clone();
            let ranges = view.assigned.unwrap_or_else(|| self.ranges());
            return Err(ApiError::not_owned(&key.to_string(), h, &ranges.to_string(), view.epoch));
        }
        Ok(etcd_layout::object_key(&key).into_bytes())
    }

    /// The etcd key of any object (for reads of keys other shards own, such as namespaces).
    pub fn any_key(info: &ResourceInfo, namespace: &str, name: &str) -> Vec<u8> {
        etcd_layout::object_key(&ObjectKey::new(info.storage_group(), &info.plural, namespace, name)).into_bytes()
    }
}

/// Serves what each new catalog holds (one range change or catalog change at a time).
async fn follow_catalog(shard: Arc<Shard>) {
    let mut rx = shard.catalog.subscribe();
    loop {
        let catalog = rx.borrow_and_update().clone();
        {
            let _one = shard.changing.lock().await;
            shard.serve_catalog(&catalog);
        }
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            _ = shard.shutdown.cancelled() => return,
        }
    }
}

/// Keeps the shard's view of the range map current until the shard shuts down, and what its
/// caches hold in line with it (RFC 0006): it loads the ranges a move is bringing to it and
/// the ones the map gives it, and lets go of those it neither owns nor drains. Looks again every
/// few seconds, so a load that failed (etcd unreachable) is retried.
async fn follow_range_map(shard: Arc<Shard>) {
    loop {
        match shard.storage.current_revision().await {
            Ok(rev) => {
                shard.started.store(rev, std::sync::atomic::Ordering::Relaxed);
                break;
            }
            Err(e) => tracing::warn!(error = %e, "reading etcd's revision failed; trying again"),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shard.shutdown.cancelled() => return,
        }
    }
    let mut rx = shard.storage.follow_range_map();
    let mut again = tokio::time::interval(Duration::from_secs(5));
    loop {
        let map = rx.borrow_and_update().clone();
        if let Some(m) = map && shard.apply_map(&m) && shard.ready() {
            reconcile(&shard, &m).await;
        }
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            _ = again.tick() => {}
            _ = shard.shutdown.cancelled() => return,
        }
    }
}

/// Loads what `map` wants this shard to hold and lets go of the rest.
async fn reconcile(shard: &Shard, map: &StoredRangeMap) {
    use shardplane_storage::range_map::MovePhase;
    let owned = map.ranges_of(&shard.id);
    let incoming: Vec<HashRange> = map.moves.iter().filter(|m| m.to == shard.id && m.phase == MovePhase::Loading).map(|m| m.range).collect();
    let draining: Vec<HashRange> = map.moves.iter().filter(|m| m.from == shard.id && m.phase == MovePhase::Draining).map(|m| m.range).collect();
    let wanted = incoming.iter().chain(&draining).fold(owned.clone(), |set, r| set.with(*r));
    for r in owned.ranges().iter().chain(&incoming) {
        if !shard.ranges().covers(r) && let Err(e) = shard.adopt(*r).await {
            tracing::warn!(shard = %shard.id, range = %r, error = %e.message, "could not load a range; will try again");
        }
    }
    let held = shard.ranges();
    for r in held.ranges() {
        // What is held outside the wanted set, piece by piece.
        let extra = wanted.ranges().iter().fold(RangeSet::from_disjoint(vec![*r]).expect("one range"), |left, w| left.without(*w));
        for gone in extra.ranges() {
            shard.release(*gone).await;
        }
    }
}
