//! The router's state: the shards and who owns what (the range map read from etcd, refreshed
//! when a shard refuses a request routed under an older epoch, republished when a supervised
//! shard comes back at a new address), the served resources, the shared watch upstreams, and
//! which epochs merged watches still read.

use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::ApiError;
use shardplane_coordinator::map_store::{self, ShardAddr};
use shardplane_coordinator::range_map::RangeMap;
use shardplane_keyspace::{placement_hash, HashRange};
use shardplane_storage::range_map::StoredShard;
use shardplane_storage::{Storage, Stores};
use std::sync::Arc;
use std::time::Duration;

/// The shards and who owns what: the range map read from etcd, refreshed when a shard refuses
/// a request routed under an older epoch (421), and republished when a supervised shard comes
/// back at a new address.
pub struct RouterState {
    map: std::sync::RwLock<RangeMap<ShardAddr>>,
    /// The main store (the range map, membership) and each resource's (the storage contract).
    pub(crate) stores: Stores,
    pub http: reqwest::Client,
    /// The served resources: the built-ins and every established CRD's (followed from etcd).
    pub catalog: shardplane_catalog::Follower,
    /// Bookmarks to clients that allow them, this often.
    pub bookmark_interval: std::time::Duration,
    /// Merged watch upstreams shared by client watches.
    pub hubs: Arc<crate::hub::Hubs>,
    /// Watch streams open to shards (`shardplane_router_shard_watch_streams`): K per merged
    /// upstream, whatever the number of clients (RFC 0015 states the bound).
    pub shard_streams: prometheus::IntGauge,
    /// The epoch routed by and the revision it was cut over at, for merged watches to switch
    /// to the new map's shards (RFC 0006).
    epochs: tokio::sync::watch::Sender<MapEpoch>,
    /// How many merged watch upstreams still read each epoch's shards: the router has switched
    /// to an epoch once none reads an older one.
    upstreams: std::sync::Mutex<std::collections::BTreeMap<u64, usize>>,
}

/// A range-map epoch and the revision of the write that made it (0 when unknown): every change
/// after that revision is the new owners' to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapEpoch {
    pub epoch: u64,
    pub cutover: u64,
}

/// Counts one merged upstream as reading one epoch's shards while it lives.
pub struct UpstreamEpoch {
    shards: Arc<RouterState>,
    epoch: u64,
}

impl Drop for UpstreamEpoch {
    fn drop(&mut self) {
        RouterState::uncount(&mut self.shards.upstream_counts(), self.epoch);
    }
}

/// A raised gauge, lowered when dropped: counts a thing (a client's watch, a shard stream) while
/// it lives.
pub(crate) struct Raised(prometheus::IntGauge);

impl Raised {
    pub(crate) fn new(g: prometheus::IntGauge) -> Self {
        g.inc();
        Self(g)
    }
}

impl Drop for Raised {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Tries of one request while shards refuse it for a stale map.
const ROUTING_ATTEMPTS: u32 = 5;
/// How long `connect` waits for a shard to answer who it is.
const DESCRIBE_WITHIN: Duration = Duration::from_secs(60);

impl RouterState {
    /// Fronts the shards at `urls`: asks each who it is and what it caches, publishes the range
    /// map those answers make (a new epoch only if ownership changed) and routes by it.
    /// `shard_tls`: how the router proves itself to shards that serve HTTPS (its front-proxy
    /// client certificate, RFC 0012).
    pub async fn connect(stores: Stores, urls: Vec<String>, bookmark_interval: Duration, shard_tls: Option<Arc<rustls::ClientConfig>>) -> std::io::Result<Arc<Self>> {
        let storage = stores.main();
        // A shard that does not accept within seconds is down; keepalive notices a connection
        // whose shard vanished without closing it (watch streams stay open for minutes).
        let mut http = shardplane_http::outbound::client_builder().connect_timeout(std::time::Duration::from_secs(5)).tcp_keepalive(std::time::Duration::from_secs(15));
        if let Some(tls) = shard_tls {
            http = http.tls_backend_preconfigured((*tls).clone());
        }
        let http = http.build().map_err(std::io::Error::other)?;
        let mut described = Vec::new();
        let mut history = HistoryBound { events: usize::MAX, window: Duration::MAX };
        for url in &urls {
            let (shard, h) = describe(&http, url.trim_end_matches('/')).await?;
            described.push(shard);
            history = HistoryBound { events: history.events.min(h.events), window: history.window.min(h.window) };
        }
        let stored = map_store::publish(storage, described).await.map_err(std::io::Error::other)?;
        let map = map_store::address_map(&stored).map_err(std::io::Error::other)?;
        tracing::info!(epoch = map.epoch(), shards = stored.shards.len(), "range map published");
        // Followed for the process's life (a router's RouterState live as long as it serves).
        let catalog = shardplane_catalog::Follower::start(stores.of(shardplane_apimachinery::crd::GROUP, shardplane_apimachinery::crd::PLURAL).clone(), tokio_util::sync::CancellationToken::new());
        Ok(Arc::new(Self {
            map: std::sync::RwLock::new(map),
            stores,
            http,
            catalog,
            bookmark_interval,
            hubs: Arc::new(crate::hub::Hubs::new(history)),
            shard_streams: prometheus::IntGauge::new("shardplane_router_shard_watch_streams", "Watch streams this router holds open to shards.").expect("a valid metric"),
            epochs: tokio::sync::watch::channel(MapEpoch { epoch: stored.epoch, cutover: stored.cutover }).0,
            upstreams: Default::default(),
        }))
    }

    /// The resource a request path names; a path under `/apis/` not served yet is looked up
    /// again in the catalog as [`Follower::current`](shardplane_catalog::Follower::current)
    /// keeps it (its CRD may have been established a moment ago): confirmed by etcd within a
    /// second and holding every CRD write made through this router, at no store round trip.
    pub async fn target(&self, path: &str) -> Option<shardplane_apimachinery::request_path::Target> {
        use shardplane_apimachinery::request_path::parse;
        match parse(path, &self.catalog.now().resources) {
            None if path.starts_with("/apis/") => parse(path, &self.catalog.current(shardplane_catalog::CATCH_UP).await.resources),
            found => found,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, RangeMap<ShardAddr>> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The etcd the map is read from (the main store).
    pub fn storage(&self) -> &Storage {
        self.stores.main()
    }

    /// The range-map epoch this router routes by.
    pub fn epoch(&self) -> u64 {
        self.read().epoch()
    }

    /// Every shard URL once, in range order.
    pub fn urls(&self) -> Vec<String> {
        let mut urls: Vec<String> = Vec::new();
        for (_, s) in self.read().entries() {
            if !urls.contains(&s.url) {
                urls.push(s.url.clone());
            }
        }
        urls
    }

    /// Shard `id` now serves at `url` (a restarted process on the same ranges): the map is
    /// republished with the new address under the same epoch.
    pub async fn set_url(&self, id: &str, url: String) -> Result<(), ApiError> {
        let stored = map_store::load(self.storage()).await.map_err(map_unavailable)?.0;
        let shards = stored.shards.into_iter().map(|s| if s.id == id { StoredShard { url: url.clone(), ..s } } else { s }).collect();
        let next = map_store::publish(self.storage(), shards).await.map_err(map_unavailable)?;
        self.install(map_store::address_map(&next).map_err(map_unavailable)?, next.cutover);
        Ok(())
    }

    fn install(&self, next: RangeMap<ShardAddr>, cutover: u64) -> bool {
        let mut current = self.map.write().unwrap_or_else(|p| p.into_inner());
        if next.epoch() < current.epoch() || *current == next {
            return false;
        }
        tracing::info!(from = current.epoch(), to = next.epoch(), "range map refreshed");
        let (before, after) = (current.epoch(), next.epoch());
        *current = next;
        drop(current);
        if after != before {
            // Ranges moved: every merged watch switches to the new map's shards at its mark.
            self.epochs.send_replace(MapEpoch { epoch: after, cutover });
        }
        true
    }

    /// Follows the epoch routed by.
    pub fn epoch_changes(&self) -> tokio::sync::watch::Receiver<MapEpoch> {
        self.epochs.subscribe()
    }

    /// Counts a merged upstream as reading `epoch`'s shards until the guard is dropped.
    pub fn upstream_epoch(self: &Arc<Self>, epoch: u64) -> UpstreamEpoch {
        *self.upstream_counts().entry(epoch).or_default() += 1;
        UpstreamEpoch { shards: self.clone(), epoch }
    }

    fn upstream_counts(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<u64, usize>> {
        self.upstreams.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn uncount(counts: &mut std::collections::BTreeMap<u64, usize>, epoch: u64) {
        if let Some(n) = counts.get_mut(&epoch) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&epoch);
            }
        }
    }

    /// The epoch this router has switched to: the one it routes by, unless a merged watch
    /// still reads an older epoch's shards (the old owner of a range must keep it until then).
    pub fn switched_epoch(&self) -> u64 {
        let routed = self.epoch();
        self.upstream_counts().keys().next().map_or(routed, |oldest| routed.min(*oldest))
    }

    /// Reads the stored map again; true if it differs from the one in use.
    pub async fn refresh(&self) -> Result<bool, ApiError> {
        let (stored, map) = map_store::load(self.storage()).await.map_err(map_unavailable)?;
        Ok(self.install(map, stored.cutover))
    }

    /// Runs `attempt` (which routes by the current map) until no shard refuses it for a stale
    /// map: after a 421 the map is read again, and if it has not changed (the shard is ahead of
    /// what etcd returned, or behind us) the next try waits a little longer.
    pub async fn routed<T, F, Fut>(&self, mut attempt: F) -> Result<T, ApiError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ApiError>>,
    {
        for i in 0..ROUTING_ATTEMPTS {
            match attempt().await {
                Err(e) if e.code == 421 => {
                    if !self.refresh().await? {
                        tokio::time::sleep(Duration::from_millis(10 << i)).await;
                    }
                }
                other => return other,
            }
        }
        Err(ApiError::unavailable("the range map is changing; retry the request"))
    }

    /// The URL of the shard owning an object.
    pub fn owner(&self, info: &ResourceInfo, namespace: &str, name: &str) -> String {
        self.read().owner(placement_hash(info.storage_group(), &info.plural, namespace, name)).url.clone()
    }

    /// The current revision of the store that holds `info`, read from it directly (one round
    /// trip, not a hop through a shard that reads it the same way).
    pub async fn current_revision(&self, info: &ResourceInfo) -> Result<u64, ApiError> {
        self.stores.of(info.storage_group(), &info.plural).current_revision().await.map_err(shardplane_http::storage_errors::status_of)
    }

    /// Where a merged watch of `resource` (group, plural) switches to a new map's shards, given
    /// the map's cut-over revision `cutover` on the main store. A resource on a store of its own
    /// counts in that store's revisions: the new owners loaded it before the map changed, so its
    /// store's revision read now is one they hold it from (if it cannot be read, the main
    /// store's cut-over stands, and a switch the new shards refuse ends the watch).
    pub async fn cutover_in_store(&self, resource: &(String, String), cutover: u64) -> u64 {
        if !self.stores.is_overridden(&resource.0, &resource.1) {
            return cutover;
        }
        self.stores.of(&resource.0, &resource.1).current_revision().await.unwrap_or(cutover)
    }
}

/// How far back a shard's watch history reaches: its newest `events` events, none older than
/// `window`.
#[derive(Clone, Copy, Debug)]
pub struct HistoryBound {
    pub events: usize,
    pub window: Duration,
}

/// Asks the shard at `url` who it is and how much history it keeps, waiting for it to come up.
async fn describe(http: &reqwest::Client, url: &str) -> std::io::Result<(StoredShard, HistoryBound)> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Described {
        id: String,
        ranges: Vec<String>,
        history_events: usize,
        history_seconds: u64,
    }
    let deadline = tokio::time::Instant::now() + DESCRIBE_WITHIN;
    loop {
        match http.get(format!("{url}/shardplane/v1/shard")).send().await {
            Ok(resp) if resp.status().is_success() => {
                let d: Described = resp.json().await.map_err(|e| std::io::Error::other(format!("shard {url} described itself unreadably: {e}")))?;
                let ranges = d.ranges.iter().map(|r| r.parse()).collect::<Result<Vec<HashRange>, _>>().map_err(|e| std::io::Error::other(format!("shard {url}: {e}")))?;
                let history = HistoryBound { events: d.history_events, window: Duration::from_secs(d.history_seconds) };
                return Ok((StoredShard { id: d.id, url: url.to_owned(), ranges, cordoned: false }, history));
            }
            Ok(resp) => return Err(std::io::Error::other(format!("shard {url} answered {} to /shardplane/v1/shard", resp.status()))),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(std::io::Error::other(format!("shard {url} is unreachable: {e}"))),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}


fn map_unavailable(e: map_store::MapStoreError) -> ApiError {
    ApiError::unavailable(format!("the range map is unavailable: {e}"))
}