//! Talking to shards: the range map (read from etcd, refreshed on refusal), forwarding one
//! request, reading a shard's answer.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use bytes::Bytes;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::ApiError;
use shardplane_coordinator::map_store::{self, ShardAddr};
use shardplane_coordinator::range_map::RangeMap;
use shardplane_keyspace::{placement_hash, HashRange};
use shardplane_http::protocol::{EPOCH_HEADER, GENERATED_NAME_HEADER, LIST_FRAMING_HEADER};
use shardplane_storage::range_map::StoredShard;
use shardplane_storage::{Storage, Stores};
use std::sync::Arc;
use std::time::Duration;

/// The shards and who owns what: the range map read from etcd, refreshed when a shard refuses
/// a request routed under an older epoch (421), and republished when a supervised shard comes
/// back at a new address.
pub struct Shards {
    table: std::sync::RwLock<RangeMap<ShardAddr>>,
    /// The main store (the range map, membership) and each resource's (the storage contract).
    stores: Stores,
    pub http: reqwest::Client,
    /// The served resources: the built-ins and every established CRD's (followed from etcd).
    pub catalog: shardplane_catalog::Follower,
    /// Bookmarks to clients that allow them, this often.
    pub bookmark_interval: std::time::Duration,
    /// Merged watch upstreams shared by client watches.
    pub hubs: Arc<crate::hub::Hubs>,
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
    shards: Arc<Shards>,
    epoch: u64,
}

impl Drop for UpstreamEpoch {
    fn drop(&mut self) {
        Shards::uncount(&mut self.shards.upstream_counts(), self.epoch);
    }
}

/// Request headers worth passing to a shard.
const PASSED: [&str; 3] = ["accept", "content-type", GENERATED_NAME_HEADER];
/// Tries of one request while shards refuse it for a stale map.
const ROUTING_ATTEMPTS: u32 = 5;
/// How long `connect` waits for a shard to answer who it is.
const DESCRIBE_WITHIN: Duration = Duration::from_secs(60);

impl Shards {
    /// Fronts the shards at `urls`: asks each who it is and what it caches, publishes the range
    /// map those answers make (a new epoch only if ownership changed) and routes by it.
    pub async fn connect(stores: Stores, urls: Vec<String>, bookmark_interval: Duration) -> std::io::Result<Arc<Self>> {
        let storage = stores.main();
        let http = reqwest::Client::builder().no_proxy().build().map_err(std::io::Error::other)?;
        let mut described = Vec::new();
        let mut history = HistoryBound { events: usize::MAX, window: Duration::MAX };
        for url in &urls {
            let (shard, h) = describe(&http, url.trim_end_matches('/')).await?;
            described.push(shard);
            history = HistoryBound { events: history.events.min(h.events), window: history.window.min(h.window) };
        }
        let stored = map_store::publish(storage, described).await.map_err(std::io::Error::other)?;
        let table = map_store::routing_table(&stored).map_err(std::io::Error::other)?;
        tracing::info!(epoch = table.epoch(), shards = stored.shards.len(), "range map published");
        // Followed for the process's life (a router's Shards live as long as it serves).
        let catalog = shardplane_catalog::Follower::start(stores.of(shardplane_apimachinery::crd::GROUP, shardplane_apimachinery::crd::PLURAL).clone(), tokio_util::sync::CancellationToken::new());
        Ok(Arc::new(Self {
            table: std::sync::RwLock::new(table),
            stores,
            http,
            catalog,
            bookmark_interval,
            hubs: Arc::new(crate::hub::Hubs::new(history)),
            epochs: tokio::sync::watch::channel(MapEpoch { epoch: stored.epoch, cutover: stored.cutover }).0,
            upstreams: Default::default(),
        }))
    }

    /// The resource a request path names; a path under `/apis/` not served yet is looked up
    /// again once the catalog has every CRD change committed before now (its CRD may have been
    /// established a moment ago).
    pub async fn target(&self, path: &str) -> Option<shardplane_apimachinery::request_path::Target> {
        use shardplane_apimachinery::request_path::parse;
        match parse(path, &self.catalog.now().resources) {
            None if path.starts_with("/apis/") => parse(path, &self.catalog.caught_up(shardplane_catalog::CATCH_UP).await.resources),
            found => found,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, RangeMap<ShardAddr>> {
        self.table.read().unwrap_or_else(|p| p.into_inner())
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
        self.install(map_store::routing_table(&next).map_err(map_unavailable)?, next.cutover);
        Ok(())
    }

    fn install(&self, table: RangeMap<ShardAddr>, cutover: u64) -> bool {
        let mut current = self.table.write().unwrap_or_else(|p| p.into_inner());
        if table.epoch() < current.epoch() || *current == table {
            return false;
        }
        tracing::info!(from = current.epoch(), to = table.epoch(), "range map refreshed");
        let (before, after) = (current.epoch(), table.epoch());
        *current = table;
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
        let (stored, table) = map_store::load(self.storage()).await.map_err(map_unavailable)?;
        Ok(self.install(table, stored.cutover))
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
        self.read().owner(placement_hash(&info.group, &info.plural, namespace, name)).url.clone()
    }

    /// Sends one request to the shard owning the object under the current map.
    #[allow(clippy::too_many_arguments)]
    pub async fn forward_to_owner(&self, info: &ResourceInfo, namespace: &str, name: &str, method: &Method, path_and_query: &str, headers: &HeaderMap, body: Bytes) -> Result<Response<Body>, ApiError> {
        let owner = self.owner(info, namespace, name);
        self.forward(&owner, method, path_and_query, headers, body).await
    }

    /// A request to a shard, stamped with the epoch it is routed under.
    pub fn request(&self, method: Method, url: String) -> reqwest::RequestBuilder {
        self.http.request(method, url).header(EPOCH_HEADER, self.epoch())
    }

    /// Sends one request to `base` and returns the shard's response as is, except a refusal for
    /// a stale map, which is an error (code 421) for [`Shards::routed`] to retry.
    pub async fn forward(&self, base: &str, method: &Method, path_and_query: &str, headers: &HeaderMap, body: Bytes) -> Result<Response<Body>, ApiError> {
        let mut req = self.request(method.clone(), format!("{base}{path_and_query}")).body(body);
        for h in PASSED {
            if let Some(v) = headers.get(h) {
                req = req.header(h, v);
            }
        }
        let resp = req.send().await.map_err(|e| unavailable(base, &e))?;
        if resp.status() == StatusCode::MISDIRECTED_REQUEST {
            let body = resp.bytes().await.map_err(|e| unavailable(base, &e))?;
            return Err(refusal(&body));
        }
        let mut out = Response::builder().status(resp.status());
        for (k, v) in resp.headers() {
            if matches!(k.as_str(), "content-type" | "warning" | "retry-after") {
                out = out.header(k, v);
            }
        }
        let stream = futures::TryStreamExt::map_err(resp.bytes_stream(), std::io::Error::other);
        Ok(out.body(Body::from_stream(stream)).expect("response"))
    }

    /// GET returning the status, content type and body as JSON.
    pub async fn get_json(&self, base: &str, path_and_query: &str, accept: Option<&HeaderValue>) -> Result<(StatusCode, Option<HeaderValue>, serde_json::Value), ApiError> {
        let (status, content_type, body) = self.get_bytes(base, path_and_query, accept).await?;
        let json = serde_json::from_slice(&body).map_err(|e| ApiError::unavailable(format!("shard {base} answered with invalid JSON: {e}")))?;
        Ok((status, content_type, json))
    }

    /// GET returning the status, content type and raw body; a refusal for a stale map is an
    /// error (code 421).
    pub async fn get_bytes(&self, base: &str, path_and_query: &str, accept: Option<&HeaderValue>) -> Result<(StatusCode, Option<HeaderValue>, Bytes), ApiError> {
        let mut req = self.request(Method::GET, format!("{base}{path_and_query}"));
        if let Some(a) = accept {
            req = req.header(header::ACCEPT, a);
        }
        let resp = req.send().await.map_err(|e| unavailable(base, &e))?;
        let status = resp.status();
        let content_type = resp.headers().get(header::CONTENT_TYPE).cloned();
        let body = resp.bytes().await.map_err(|e| unavailable(base, &e))?;
        if status == StatusCode::MISDIRECTED_REQUEST {
            return Err(refusal(&body));
        }
        Ok((status, content_type, body))
    }

    /// GET whose body the caller streams; a refusal for a stale map is an error (code 421) for
    /// [`Shards::routed`] to retry, as in [`Shards::get_bytes`]. `split`: the caller splits a
    /// list into its entries, so the shard is asked to write them one per line.
    pub async fn get_streaming(&self, base: &str, path_and_query: &str, accept: Option<&HeaderValue>, split: bool) -> Result<reqwest::Response, ApiError> {
        let mut req = self.request(Method::GET, format!("{base}{path_and_query}"));
        if split {
            req = req.header(LIST_FRAMING_HEADER, "lines");
        }
        if let Some(a) = accept {
            req = req.header(header::ACCEPT, a);
        }
        let resp = req.send().await.map_err(|e| unavailable(base, &e))?;
        if resp.status() == StatusCode::MISDIRECTED_REQUEST {
            let body = resp.bytes().await.map_err(|e| unavailable(base, &e))?;
            return Err(refusal(&body));
        }
        Ok(resp)
    }

    /// The current revision of the store that holds `info`, read from it directly (one round
    /// trip, not a hop through a shard that reads it the same way).
    pub async fn current_revision(&self, info: &ResourceInfo) -> Result<u64, ApiError> {
        self.stores.of(&info.group, &info.plural).current_revision().await.map_err(|e| ApiError::unavailable(format!("etcd: {e}")))
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

/// The error for a shard's 421 answer: carries the shard's epoch for the logs.
pub fn refusal(body: &[u8]) -> ApiError {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let message = v["message"].as_str().unwrap_or("the shard refused the request for a stale range map");
    tracing::debug!(shard_epoch = ?ApiError::refusal_epoch(&v), %message, "shard refused a routed request");
    ApiError::stale_range_map(0, ApiError::refusal_epoch(&v).unwrap_or(0))
}

fn map_unavailable(e: map_store::MapStoreError) -> ApiError {
    ApiError::unavailable(format!("the range map is unavailable: {e}"))
}

/// 503 for a shard that cannot be reached.
pub fn unavailable(base: &str, e: &reqwest::Error) -> ApiError {
    ApiError::unavailable(format!("shard {base} is unavailable: {e}"))
}

/// A shard's non-success answer, passed on verbatim (the same Status a single server gives).
pub fn passthrough(code: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let mut r = Response::new(Body::from(shardplane_apimachinery::encode::object_bytes(body)));
    *r.status_mut() = code;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}
