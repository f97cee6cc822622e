//! The router's HTTP surface: discovery and OpenAPI from a shard, single-object verbs to the
//! owner, LIST and WATCH merged, deletecollection on every shard.

use crate::forward::{passthrough, Shards};
use crate::{list, watch};
use shardplane_shard::metrics::Metrics;
use shardplane_shard::server::{labels_for, InflightLimits};
use shardplane_shard::handlers::{form_value, GENERATED_NAME_HEADER};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, Response, StatusCode};
use axum::Router;
use bytes::Bytes;
use serde_json::Value;
use shardplane_apimachinery::list_options::ListOptions;
use shardplane_apimachinery::meta;
use shardplane_apimachinery::{request_path, ApiError};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// What a router needs to start.
#[derive(Clone, Debug)]
pub struct RouterConfig {
    pub listen: SocketAddr,
    /// Base URLs of running shards; each says which ranges it caches, and together they must
    /// cover the hash space once.
    pub shard_urls: Vec<String>,
    /// The etcd the shards use: the range map is stored there.
    pub etcd_endpoints: Vec<String>,
    /// Bookmarks to watch clients that allow them, this often.
    pub bookmark_interval: std::time::Duration,
    /// Which resources are on an etcd of their own: the shards' contract, which this router
    /// reads revisions by.
    pub storage_contract: shardplane_storage::StorageContract,
}

/// Per-router state besides the shards: the in-flight bound on fan-out and the metrics.
struct Front {
    shards: Arc<Shards>,
    limits: InflightLimits,
    metrics: Metrics,
}

/// Connects to the main store at `endpoints` and to each store `contract` names.
pub async fn connect_stores(endpoints: &[String], contract: &shardplane_storage::StorageContract) -> std::io::Result<shardplane_storage::Stores> {
    let main = shardplane_storage::Storage::connect(endpoints).await.map_err(std::io::Error::other)?;
    shardplane_storage::Stores::connect(main, endpoints, contract).await.map_err(std::io::Error::other)
}

/// Serves until `shutdown`; calls `on_listen` with the bound address.
pub async fn serve(config: RouterConfig, shutdown: CancellationToken, on_listen: impl FnOnce(SocketAddr)) -> std::io::Result<()> {
    if config.shard_urls.is_empty() {
        return Err(std::io::Error::other("no shards: pass --shard-urls"));
    }
    let stores = connect_stores(&config.etcd_endpoints, &config.storage_contract).await?;
    serve_shards(Shards::connect(stores, config.shard_urls, config.bookmark_interval).await?, config.listen, shutdown, on_listen).await
}

/// Serves over `shards` (whose URLs a topology supervisor may update) until `shutdown`.
pub async fn serve_shards(shards: Arc<Shards>, listen: SocketAddr, shutdown: CancellationToken, on_listen: impl FnOnce(SocketAddr)) -> std::io::Result<()> {
    // The router bounds what it fans out like a shard bounds what it serves (upstream defaults).
    let count = shards.urls().len();
    let front = Arc::new(Front { shards, limits: InflightLimits::new(400, 200), metrics: Metrics::new() });
    let app = Router::new().fallback(dispatch).with_state(front.clone());
    let listener = tokio::net::TcpListener::bind(listen).await?;
    on_listen(listener.local_addr()?);
    tracing::info!(addr = %listener.local_addr()?, shards = count, "router serving");
    crate::membership::start(front.shards.clone(), format!("router-{}", listener.local_addr()?), front.metrics.registry(), shutdown.clone());
    axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await
}

fn error(e: &ApiError) -> Response<Body> {
    let mut r = Response::new(Body::from(e.to_json()));
    *r.status_mut() = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

async fn dispatch(State(front): State<Arc<Front>>, req: Request) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let shards = front.shards.clone();
    if method == Method::GET && path == "/metrics" {
        let mut r = Response::new(Body::from(front.metrics.render()));
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
        return r;
    }
    let target = shards.target(&path).await;
    let watch = target.as_ref().is_some_and(|t| t.name.is_none()) && method == Method::GET && form_value(&query, "watch").is_some_and(|v| matches!(v.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True"));
    let (verb, group, version, resource, sub, scope) = labels_for(&method, target.as_ref(), watch);
    let started = std::time::Instant::now();
    let _permit = match front.limits.admit(&method, watch) {
        Ok(p) => p,
        Err(e) => return error(&e),
    };
    let span = tracing::info_span!("route", %method, %path);
    let metrics = front.metrics.clone();
    let route_target = target.clone();
    let resp = async move {
        let (parts, body) = req.into_parts();
        let body = match axum::body::to_bytes(body, 3 * 1024 * 1024 + 1).await {
            Ok(b) if b.len() <= 3 * 1024 * 1024 => b,
            _ => return error(&ApiError::too_large(3 * 1024 * 1024)),
        };
        match route(&shards, &metrics, &method, &path, &query, &parts.headers, body, route_target).await {
            Ok(r) => r,
            Err(e) => error(&e),
        }
    }
    .instrument(span)
    .await;
    if !resource.is_empty() {
        let code = resp.status().as_u16().to_string();
        front.metrics.requests.with_label_values(&[&verb, &group, &version, &resource, &sub, &scope, "apiserver", &code]).inc();
        if !watch {
            front.metrics.duration.with_label_values(&[&verb, &group, &version, &resource, &sub, &scope, "apiserver"]).observe(started.elapsed().as_secs_f64());
        }
    }
    resp
}

#[allow(clippy::too_many_arguments)]
async fn route(shards: &Arc<Shards>, metrics: &Metrics, method: &Method, path: &str, query: &str, headers: &axum::http::HeaderMap, body: Bytes, target: Option<request_path::Target>) -> Result<Response<Body>, ApiError> {
    let pq = if query.is_empty() { path.to_owned() } else { format!("{path}?{query}") };
    match path.trim_end_matches('/') {
        "/healthz" | "/livez" => return Ok(Response::new(Body::from("ok"))),
        "/readyz" => {
            for u in shards.urls() {
                let ok = shards.http.get(format!("{u}/readyz")).send().await.is_ok_and(|r| r.status().is_success());
                if !ok {
                    let mut r = Response::new(Body::from(format!("[-]shard {u} not ready\nreadyz check failed")));
                    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                    return Ok(r);
                }
            }
            return Ok(Response::new(Body::from("ok")));
        }
        _ => {}
    }
    let Some(t) = target else {
        // Discovery, OpenAPI and /version are the same on every shard.
        return shards.forward(&shards.urls()[0], method, &pq, headers, body).await;
    };
    let ns = t.namespace.clone().unwrap_or_default();
    match (method, t.name.as_deref()) {
        (&Method::GET, None) => {
            let o = ListOptions::parse(query, &t.info)?;
            if o.watch {
                // apiserver_registered_watchers counts the router's client watches while they run.
                let gauge = metrics.watchers.with_label_values(&[&t.info.group, &t.info.version, &t.info.kind]);
                shards.routed(|| watch::watch(shards.clone(), t.clone(), o.clone(), query, headers, gauge.clone())).await
            } else {
                shards.routed(|| list::list(shards, &t, &o, query, headers)).await
            }
        }
        (&Method::POST, None) => {
            // The name decides the shard: read it (or pick it for generateName) first.
            let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("application/json");
            let media = ct.split(';').next().unwrap_or("").trim();
            let obj: Value = if media == shardplane_apimachinery::protobuf::CONTENT_TYPE {
                shardplane_apimachinery::protobuf::decode(&body)?
            } else if !matches!(media, "application/json" | "" | "*/*") {
                return Err(ApiError::unsupported_media_type(ct));
            } else {
                serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}")))?
            };
            // The body goes on as the client sent it (the shard validates its exact bytes, e.g.
            // duplicate fields); a name picked here for generateName travels in a header.
            let mut fwd_headers = headers.clone();
            let mut name = meta::meta_str(&obj, "name").to_owned();
            if name.is_empty() {
                let prefix = meta::meta_str(&obj, "generateName").to_owned();
                if !prefix.is_empty() {
                    name = meta::generate_name(&prefix);
                    fwd_headers.insert(GENERATED_NAME_HEADER, HeaderValue::from_str(&name).expect("generated names are header-safe"));
                }
            }
            shards.routed(|| shards.forward_to_owner(&t.info, &ns, &name, method, &pq, &fwd_headers, body.clone())).await
        }
        (&Method::DELETE, None) => {
            // Every shard deletes what it owns; the answer lists everything deleted.
            shards.routed(|| delete_collection(shards, &pq, headers, body.clone())).await
        }
        (_, Some(name)) => shards.routed(|| shards.forward_to_owner(&t.info, &ns, name, method, &pq, headers, body.clone())).await,
        (m, None) => Err(ApiError::method_not_allowed(&m.as_str().to_ascii_lowercase(), &t.info.group, &t.info.plural)),
    }
}

/// Where a list answer keeps its entries: a Table's rows, any other list's items.
fn list_field(list: &Value) -> &'static str {
    if list["kind"] == "Table" { "rows" } else { "items" }
}

/// DELETE of a collection on every shard (the client's DeleteOptions body as sent, JSON or
/// protobuf); the answer lists everything deleted.
async fn delete_collection(shards: &Shards, pq: &str, headers: &axum::http::HeaderMap, body: Bytes) -> Result<Response<Body>, ApiError> {
    let mut all = Vec::new();
    let mut template: Option<Value> = None;
    // The body's type and the representation asked for go on (the answers are JSON lists,
    // Tables or PartialObjectMetadataLists, merged here).
    let mut passed = axum::http::HeaderMap::new();
    for h in [header::CONTENT_TYPE, header::ACCEPT] {
        if let Some(v) = headers.get(&h) {
            passed.insert(h, v.clone());
        }
    }
    for u in &shards.urls() {
        let resp = shards.forward(u, &Method::DELETE, pq, &passed, body.clone()).await?;
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.map_err(|e| ApiError::unavailable(format!("shard {u}: {e}")))?;
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if !status.is_success() {
            return Ok(passthrough(status, &v));
        }
        all.extend(v[list_field(&v)].as_array().cloned().unwrap_or_default());
        template.get_or_insert(v);
    }
    let mut out = template.unwrap_or(Value::Null);
    let field = list_field(&out);
    out[field] = Value::Array(all);
    Ok(passthrough(StatusCode::OK, &out))
}
