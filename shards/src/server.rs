//! The HTTP server: routing, request parsing, health, metrics, tracing.

use crate::body;
use crate::discovery;
use crate::handlers;
use shardplane_apimachinery::request_path as path;
use crate::shard::Shard;
use crate::table;
use crate::watch;
use crate::handlers::View;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, Response, StatusCode};
use axum::Router;
use shardplane_apimachinery::list_options::ListOptions;
use shardplane_apimachinery::ApiError;
use shardplane_keyspace::RangeSet;
use shardplane_storage::{Storage, StorageContract, Stores};
use shardplane_watchcache::CacheConfig;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Everything a shard process needs to start.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    pub id: String,
    pub etcd_endpoints: Vec<String>,
    pub listen: SocketAddr,
    pub ranges: RangeSet,
    pub cache: CacheConfig,
    pub compaction_interval: Option<Duration>,
    pub bookmark_interval: Duration,
    /// How often Terminating namespaces and CRDs being deleted are cleaned up.
    pub namespace_sweep: Duration,
    /// A watch without `timeoutSeconds` runs a random time between this and twice this
    /// (upstream `--min-request-timeout`).
    pub min_request_timeout: Duration,
    /// TTL of the shard's membership lease (RFC 0006): a shard that stops renewing it is dead
    /// to the coordinator this long after.
    pub member_ttl: Duration,
    /// Outside any cluster: no range map, no membership; it owns exactly `ranges`.
    pub standalone: bool,
    /// Most concurrent non-mutating, non-watch requests (upstream `--max-requests-inflight`).
    pub max_requests_inflight: usize,
    /// Most concurrent mutating requests (upstream `--max-mutating-requests-inflight`).
    pub max_mutating_inflight: usize,
    /// Which resources are on an etcd of their own (`--storage-config`); the rest, and the
    /// cluster's control data, are on `etcd_endpoints`.
    pub storage_contract: StorageContract,
}

/// The in-flight bounds. Past them a request gets 429 with Retry-After, as upstream; watches are
/// long-running and exempt (each is bounded by its own buffers).
#[derive(Clone)]
pub struct InflightLimits {
    read: Arc<tokio::sync::Semaphore>,
    mutating: Arc<tokio::sync::Semaphore>,
}

impl InflightLimits {
    /// At most `read` non-mutating and `mutating` mutating requests at once.
    pub fn new(read: usize, mutating: usize) -> Self {
        Self { read: Arc::new(tokio::sync::Semaphore::new(read.max(1))), mutating: Arc::new(tokio::sync::Semaphore::new(mutating.max(1))) }
    }

    /// A permit for one request (none needed for a watch), or the 429 to answer.
    pub fn admit(&self, method: &Method, watch: bool) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ApiError> {
        let pool = match *method {
            _ if watch => return Ok(None),
            Method::GET | Method::HEAD => &self.read,
            _ => &self.mutating,
        };
        pool.clone().try_acquire_owned().map(Some).map_err(|_| ApiError::too_many_requests("Too many requests, please try again later.", 1))
    }
}

/// Connects to etcd, starts the caches and background loops, and serves HTTP until `shutdown`.
/// Calls `on_listen` with the bound address (port 0 picks a free one).
pub async fn serve(config: ShardConfig, shutdown: CancellationToken, on_listen: impl FnOnce(SocketAddr)) -> std::io::Result<()> {
    let storage = Storage::connect(&config.etcd_endpoints).await.map_err(std::io::Error::other)?;
    let stores = Stores::connect(storage, &config.etcd_endpoints, &config.storage_contract).await.map_err(std::io::Error::other)?;
    let shard = Shard::start(config.id.clone(), stores.clone(), config.ranges.clone(), config.cache.clone(), config.bookmark_interval, config.min_request_timeout, config.standalone, shutdown.clone());
    if let Some(interval) = config.compaction_interval {
        // Each store is compacted on its own: its revisions are its own.
        for storage in stores.all().iter().cloned() {
            let token = shutdown.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = shardplane_storage::run_compactor(storage, interval) => {}
                    _ = token.cancelled() => {}
                }
            });
        }
    }
    tokio::spawn(crate::namespaces::run(shard.clone(), config.namespace_sweep));
    tokio::spawn(crate::crds::run_cleanup(shard.clone(), config.namespace_sweep));
    tokio::spawn(crate::namespaces::bootstrap(shard.clone()));
    let limits = InflightLimits::new(config.max_requests_inflight, config.max_mutating_inflight);
    let shard_for_members = shard.clone();
    let app = router(shard, limits);
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    shard_for_members.set_url(format!("http://{}", listener.local_addr()?));
    on_listen(listener.local_addr()?);
    tracing::info!(id = %config.id, addr = %listener.local_addr()?, ranges = %config.ranges, "shard serving");
    let url = format!("http://{}", listener.local_addr()?);
    let member = (!config.standalone).then(|| crate::membership::register(shard_for_members, url, config.member_ttl, shutdown.clone()));
    let listener = axum::serve::ListenerExt::tap_io(listener, |s| {
        let _ = s.set_nodelay(true);
    });
    let served = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
    // The member key goes before the process does (a coordinator would otherwise take the shard
    // for live, or for one that joined, until its lease ran out).
    if let Some(member) = member {
        let _ = tokio::time::timeout(Duration::from_secs(2), member).await;
    }
    served
}

/// The HTTP routes of a shard.
pub fn router(shard: Arc<Shard>, limits: InflightLimits) -> Router {
    Router::new().fallback(dispatch).with_state((shard, limits))
}

/// The upstream metric labels of a request: (verb, group, version, resource, subresource, scope).
pub fn labels_for(method: &Method, target: Option<&path::Target>, watch: bool) -> (String, String, String, String, String, String) {
    let Some(t) = target else { return (method.as_str().to_owned(), String::new(), String::new(), String::new(), String::new(), String::new()) };
    let verb = match (method.as_str(), t.name.is_some(), watch) {
        ("GET", _, true) => "WATCH",
        ("GET", false, _) => "LIST",
        ("GET", true, _) => "GET",
        ("POST", _, _) => "POST",
        ("PUT", _, _) => "PUT",
        ("PATCH", _, _) => "PATCH",
        ("DELETE", false, _) => "DELETECOLLECTION",
        ("DELETE", true, _) => "DELETE",
        (m, _, _) => m,
    };
    let scope = if t.name.is_some() { "resource" } else if t.namespace.is_some() { "namespace" } else { "cluster" };
    (verb.to_owned(), t.info.group.to_owned(), t.info.version.to_owned(), t.info.plural.to_owned(), t.subresource.clone().unwrap_or_default(), scope.to_owned())
}

async fn dispatch(State((shard, limits)): State<(Arc<Shard>, InflightLimits)>, req: Request) -> Response<Body> {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let target = shard.target(&path).await;
    let watch = target.as_ref().is_some_and(|t| t.name.is_none()) && method == Method::GET && handlers::form_value(&query, "watch").is_some_and(|v| matches!(v.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True"));
    let (verb, group, version, resource, sub, scope) = labels_for(&method, target.as_ref(), watch);
    let span = tracing::info_span!("request", %verb, %path, resource = %resource, shard = %shard.id);
    let _permit = match limits.admit(&method, watch) {
        Ok(p) => p,
        Err(e) => {
            shard.metrics.requests.with_label_values(&[&verb, &group, &version, &resource, &sub, &scope, "apiserver", "429"]).inc();
            return body::error(&e);
        }
    };
    let resp = async {
        let (parts, body) = req.into_parts();
        let raw = match axum::body::to_bytes(body, body::MAX_BODY + 1).await {
            Ok(b) if b.len() > body::MAX_BODY => return body::error(&ApiError::too_large(body::MAX_BODY)),
            Ok(b) => b,
            Err(_) => return body::error(&ApiError::too_large(body::MAX_BODY)),
        };
        match handle(&shard, &method, &path, &query, &parts.headers, &raw, target).await {
            Ok(r) => r,
            Err(e) => {
                if e.code >= 500 {
                    tracing::warn!(code = e.code, message = %e.message, "request failed");
                }
                body::error(&e)
            }
        }
    }
    .instrument(span)
    .await;
    if !resource.is_empty() || matches!(path.as_str(), "/api" | "/apis" | "/version") {
        let code = resp.status().as_u16().to_string();
        shard.metrics.requests.with_label_values(&[&verb, &group, &version, &resource, &sub, &scope, "apiserver", &code]).inc();
        if !watch {
            shard.metrics.duration.with_label_values(&[&verb, &group, &version, &resource, &sub, &scope, "apiserver"]).observe(started.elapsed().as_secs_f64());
        }
    }
    resp
}

async fn handle(shard: &Arc<Shard>, method: &Method, path: &str, query: &str, headers: &axum::http::HeaderMap, raw: &[u8], target: Option<path::Target>) -> Result<Response<Body>, ApiError> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let get = *method == Method::GET;
    let resources = shard.resources();
    let json_ok = |v: serde_json::Value| Ok(body::json(StatusCode::OK, serde_json::to_vec(&v).expect("json")));
    match path.trim_end_matches('/') {
        "/healthz" | "/livez" if get => return Ok(text(StatusCode::OK, "ok")),
        "/readyz" if get => {
            return Ok(if shard.ready() { text(StatusCode::OK, "ok") } else { text(StatusCode::INTERNAL_SERVER_ERROR, "[-]watch-caches not synced\nreadyz check failed") });
        }
        "/metrics" if get => {
            for s in shard.all_served() {
                let st = s.cache.stats();
                shard.metrics.storage_objects.with_label_values(&[&s.info.plural.to_string()]).set(st.objects as i64);
                shard.metrics.cache_bytes.with_label_values(&[&s.info.plural.to_string()]).set(st.bytes as i64);
                shard.metrics.terminated_watchers.with_label_values(&[&s.info.plural.to_string()]).set(st.terminated_watchers as i64);
            }
            let mut r = Response::new(Body::from(shard.metrics.render()));
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
            return Ok(r);
        }
        "/version" if get => return json_ok(discovery::version()),
        "/api" if get => {
            if discovery::wants_aggregated(accept) {
                return Ok(aggregated(discovery::aggregated(&resources, true)));
            }
            return json_ok(discovery::api_versions());
        }
        "/apis" if get => {
            if discovery::wants_aggregated(accept) {
                return Ok(aggregated(discovery::aggregated(&resources, false)));
            }
            return json_ok(discovery::api_group_list(&resources));
        }
        "/api/v1" if get => return json_ok(discovery::resource_list(&resources, "", "v1").expect("core")),
        _ => {}
    }
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    if *method == Method::POST && segs.as_slice() == ["shardplane", "v1", "progress"] {
        // A router asks for a progress mark; it arrives in-band on progressBookmarks watches.
        let group = handlers::form_value(query, "group").unwrap_or_default();
        let resource = handlers::form_value(query, "resource").unwrap_or_default();
        let info = resources.iter().find(|r| r.group == group && r.plural == resource).ok_or_else(ApiError::path_not_found)?;
        shard.served(info)?.cache.progress_wanted().notify_one();
        return Ok(text(StatusCode::ACCEPTED, "progress requested"));
    }
    if get && segs.as_slice() == ["shardplane", "v1", "shard"] {
        // Who this shard is and what it caches: a router builds the range map from these.
        let ranges: Vec<String> = shard.ranges().ranges().iter().map(|r| r.to_string()).collect();
        let history = &shard.cache_config;
        return json_ok(serde_json::json!({
            "id": shard.id, "ranges": ranges, "epoch": shard.epoch(),
            "historyEvents": history.history_max_events, "historySeconds": history.history_window.as_secs(),
        }));
    }
    if get {
        use shardplane_apimachinery::openapi;
        match segs.as_slice() {
            ["openapi", "v3"] => return json_ok(openapi::index(&resources)),
            ["openapi", "v2"] if accept.contains("protobuf") => {
                let mut r = Response::new(Body::from(openapi::v2_protobuf(&resources)));
                r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(openapi::V2_PROTOBUF));
                return Ok(r);
            }
            ["openapi", "v2"] => return Err(ApiError::not_acceptable(accept)),
            ["openapi", "v3", "api", v] => return openapi::group_version_document(&resources, "", v).map_or_else(|| Err(ApiError::path_not_found()), json_ok),
            // A group not served yet may be a CRD established a moment ago: look again once the
            // catalog has every change committed before now.
            ["openapi", "v3", "apis", g, v] => {
                let doc = match openapi::group_version_document(&resources, g, v) {
                    None => openapi::group_version_document(&shard.fresh_resources().await, g, v),
                    found => found,
                };
                return doc.map_or_else(|| Err(ApiError::path_not_found()), json_ok);
            }
            ["apis", g] => {
                let group = match discovery::api_group(&resources, g) {
                    None => discovery::api_group(&shard.fresh_resources().await, g),
                    found => found,
                };
                return group.map_or_else(|| Err(ApiError::path_not_found()), json_ok);
            }
            ["apis", g, v] => {
                let list = match discovery::resource_list(&resources, g, v) {
                    None => discovery::resource_list(&shard.fresh_resources().await, g, v),
                    found => found,
                };
                return list.map_or_else(|| Err(ApiError::path_not_found()), json_ok);
            }
            _ => {}
        }
    }
    let Some(t) = target else { return Err(ApiError::path_not_found()) };
    if let Some(sent) = headers.get(crate::shard::EPOCH_HEADER).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()) {
        shard.check_epoch(sent).await?;
    }
    // Negotiated before anything is done, for writes too (their answer is transformed alike).
    let repr = table::negotiate(headers).ok_or_else(|| ApiError::not_acceptable(accept))?;
    let lines = headers.get(crate::shard::LIST_FRAMING_HEADER).is_some_and(|v| v == "lines");
    let view = View { repr, include: table::IncludeObject::parse(handlers::form_value(query, "includeObject").as_deref())?, lines };
    let name = t.name.clone();
    if t.subresource.as_deref() == Some("scale") {
        let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        return match (method.as_str(), name.as_deref()) {
            ("GET", Some(n)) => crate::scale::get(shard, &t, n).await,
            ("PUT", Some(n)) => crate::scale::update(shard, &t, n, headers, query, raw, None).await,
            ("PATCH", Some(n)) => {
                let ty = shardplane_apimachinery::patch::PatchType::from_content_type(ct).filter(|t| *t != shardplane_apimachinery::patch::PatchType::Apply).ok_or_else(|| ApiError::unsupported_media_type(ct))?;
                crate::scale::update(shard, &t, n, headers, query, raw, Some(ty)).await
            }
            (m, _) => Err(ApiError::method_not_allowed(&m.to_ascii_lowercase(), &t.info.group, &t.info.plural)),
        };
    }
    match (method.as_str(), name.as_deref()) {
        ("GET", None) => {
            let o = ListOptions::parse(query, &t.info)?;
            if o.watch { watch::watch(shard.clone(), t, o, view).await } else { handlers::list(shard, &t, &o, view).await }
        }
        ("GET", Some(n)) => {
            if t.subresource.as_deref().is_some_and(|s| s != "status") {
                return Err(ApiError::method_not_allowed("get", &t.info.group, &t.info.plural));
            }
            handlers::get(shard, &t, n, query, view).await
        }
        ("POST", None) => view.transform_write(&t.info, handlers::create(shard, &t, headers, query, raw).await).await,
        ("PUT", Some(n)) => view.transform_write(&t.info, handlers::update(shard, &t, n, headers, query, raw).await).await,
        ("PATCH", Some(n)) => view.transform_write(&t.info, handlers::patch(shard, &t, n, headers, query, raw).await).await,
        ("DELETE", Some(n)) => view.transform_write(&t.info, handlers::delete(shard, &t, n, headers, query, raw).await).await,
        ("DELETE", None) => view.transform_write(&t.info, handlers::delete_collection(shard, &t, headers, query, raw).await).await,
        (m, _) => Err(ApiError::method_not_allowed(&m.to_ascii_lowercase(), &t.info.group, &t.info.plural)),
    }
}

fn text(code: StatusCode, s: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::from(s));
    *r.status_mut() = code;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

fn aggregated(v: serde_json::Value) -> Response<Body> {
    let mut r = body::json(StatusCode::OK, serde_json::to_vec(&v).expect("json"));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(discovery::AGGREGATED_V2));
    r
}
