//! The shard's HTTP server: its configuration, start-up, and its routes onto the shared
//! request surface (`shardplane-http`).

use crate::write::{self, Call};
use crate::shard::Shard;
use crate::watch;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, Response, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use shardplane_apimachinery::list_options::ListOptions;
use shardplane_apimachinery::openapi;
use shardplane_apimachinery::patch::PatchType;
use shardplane_apimachinery::ApiError;
use shardplane_http::negotiation::View;
use shardplane_apimachinery::resources::{Backing, ResourceInfo};
use shardplane_http::request::prologue;
use shardplane_http::{body, discovery, protocol, readiness, Api, Reply, RequestContext, Surface};
use shardplane_keyspace::RangeSet;
use shardplane_storage::{Storage, StorageContract, Stores};
use shardplane_watchcache::CacheConfig;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

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
    /// How often Terminating namespaces and CRDs being deleted are cleaned up, and how often
    /// the garbage collector passes (RFC 0014).
    pub namespace_sweep: Duration,
    /// A watch without `timeoutSeconds` runs a random time between this and twice this
    /// (upstream `--min-request-timeout`).
    pub min_request_timeout: Duration,
    /// TTL of the shard's membership lease (RFC 0006): a shard that stops renewing it is dead
    /// to the coordinator this long after.
    pub member_ttl: Duration,
    /// Outside any cluster: no range map, no membership; it owns exactly `ranges`.
    pub standalone: bool,
    /// Priority and fairness, or the two in-flight bounds (upstream's flags; RFC 0013).
    pub flow_control: shardplane_flowcontrol::Flags,
    /// Which resources are on an etcd of their own (`--storage-config`); the rest, and the
    /// cluster's control data, are on `etcd_endpoints`.
    pub storage_contract: StorageContract,
    /// Who may reach the shard's port, and over what (RFC 0012).
    pub access: crate::access::Access,
    /// The service IP and node-port ranges Services are given addresses from (RFC 0014).
    pub service_network: shardplane_apimachinery::service_network::ServiceNetwork,
    /// How often the Service address repair loop passes (RFC 0014).
    pub address_repair: Duration,
    /// How often every ResourceQuota's usage is counted again (RFC 0014; upstream's
    /// `--resource-quota-sync-period`).
    pub quota_sync: Duration,
    /// How often every PodDisruptionBudget's status is counted again (RFC 0014).
    pub disruption_sync: Duration,
    /// How long an Event lives after its last write (upstream's `--event-ttl`; RFC 0015).
    pub event_ttl: Duration,
}

/// Connects to etcd, starts the caches and background loops, and serves HTTP until `shutdown`.
/// Calls `on_listen` with the bound address (port 0 picks a free one).
pub async fn serve(config: ShardConfig, shutdown: CancellationToken, on_listen: impl FnOnce(SocketAddr)) -> std::io::Result<()> {
    let storage = Storage::connect(&config.etcd_endpoints).await.map_err(std::io::Error::other)?;
    let stores = Stores::connect(storage, &config.etcd_endpoints, &config.storage_contract).await.map_err(std::io::Error::other)?;
    let shard = Shard::start(&config, stores.clone(), shutdown.clone());
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
    tokio::spawn(crate::garbage_collector::run(shard.clone(), config.namespace_sweep));
    tokio::spawn(crate::service_addresses::repair::run(shard.clone(), config.address_repair));
    tokio::spawn(crate::resource_quota::controller::run(shard.clone(), config.quota_sync));
    tokio::spawn(crate::disruption::run(shard.clone(), config.disruption_sync));
    tokio::spawn(crate::bootstrap::bootstrap(shard.clone()));
    tokio::spawn(crate::rbac_aggregation::run(shard.clone()));
    let shard_for_members = shard.clone();
    let app = router(shard, config.flow_control, config.access.clone());
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let url = format!("{}://{}", config.access.scheme(), listener.local_addr()?);
    shard_for_members.set_url(url.clone());
    on_listen(listener.local_addr()?);
    tracing::info!(id = %config.id, addr = %listener.local_addr()?, ranges = %config.ranges, access = ?config.access, "shard serving");
    let member = (!config.standalone).then(|| crate::membership::register(shard_for_members, url, config.member_ttl, shutdown.clone()));
    let served = match config.access.tls() {
        None => shardplane_http::serve::serve(listener, app, Default::default(), shutdown.clone()).await,
        Some(tls) => shardplane_http::serve::serve_tls(listener, app, tls, Default::default(), shutdown.clone()).await,
    };
    // The member key goes before the process does (a coordinator would otherwise take the shard
    // for live, or for one that joined, until its lease ran out).
    if let Some(member) = member {
        let _ = tokio::time::timeout(Duration::from_secs(2), member).await;
    }
    served
}

/// The HTTP routes of a shard: health and metrics, discovery, OpenAPI, the router protocol's
/// internal paths, and every resource path (the fallback), all behind the shared request
/// prologue (`shardplane_http::request::prologue`), then the check of who is calling
/// ([`crate::access`]), then priority and fairness when `flow_control` turns it on (RFC 0013:
/// the router's own requests, naming no user, are exempt).
pub fn router(shard: Arc<Shard>, flow_control: shardplane_flowcontrol::Flags, access: crate::access::Access) -> Router {
    let surface = Surface { server: shard.id.clone(), limits: flow_control.inflight(), metrics: shard.metrics.clone() };
    let gate = flow_control.enable_priority_and_fairness.then(|| crate::flow_control::start(&shard, flow_control.server_seats()));
    let app = App { shard, surface };
    let mut r = Router::new();
    // Clients ask for the roots with and without a trailing slash (the Python client's `/apis/`).
    for (path, route) in [
        ("/healthz", get(health)),
        ("/livez", get(health)),
        ("/readyz", get(readyz)),
        ("/metrics", get(metrics)),
        ("/version", get(version)),
        ("/api", get(core_discovery)),
        ("/apis", get(group_discovery)),
        ("/api/v1", get(core_resources)),
        ("/apis/{group}", get(group)),
        ("/apis/{group}/{version}", get(group_version)),
        ("/openapi/v2", get(openapi_v2)),
        ("/openapi/v3", get(openapi_index)),
        ("/openapi/v3/api/{version}", get(openapi_core)),
        ("/openapi/v3/apis/{group}/{version}", get(openapi_group)),
        (protocol::SHARD_INFO_PATH, get(shard_info)),
        (protocol::PROGRESS_PATH, post(progress)),
    ] {
        // Another method on a fixed path is answered as a resource path would be (404 or 405).
        let route = route.fallback(resource);
        r = r.route(&format!("{path}/"), route.clone()).route(path, route);
    }
    let mut r = r.fallback(resource);
    if let Some(gate) = gate {
        r = r.merge(shardplane_flowcontrol::debug::routes(gate.clone())).layer(axum::middleware::from_fn_with_state(gate, shardplane_flowcontrol::gate));
    }
    r.layer(axum::middleware::from_fn_with_state(Arc::new(access), crate::access::admit))
        .layer(axum::middleware::from_fn_with_state(app.clone(), prologue::<App>))
        .with_state(app)
}

/// The shard and its request surface: the state every route shares.
#[derive(Clone)]
struct App {
    shard: Arc<Shard>,
    surface: Surface,
}

impl Api for App {
    fn surface(&self) -> &Surface {
        &self.surface
    }

    async fn target(&self, path: &str) -> Option<shardplane_apimachinery::request_path::Target> {
        self.shard.target(path).await
    }
}

async fn health() -> Response<Body> {
    body::text(StatusCode::OK, "ok")
}

/// Ready when every store answers and every cache has loaded.
async fn readyz(State(app): State<App>) -> Response<Body> {
    let caches = ("watch-caches-synced".to_owned(), (!app.shard.ready()).then(|| "not synced".to_owned()));
    let stores = app.shard.stores.all();
    readiness::answer(&[readiness::stores(stores).await, readiness::store_space(stores).await, caches])
}

async fn metrics(State(app): State<App>) -> Response<Body> {
    let shard = &app.shard;
    for s in shard.all_served() {
        let st = s.cache.stats();
        shard.metrics.storage_objects.with_label_values(&[&s.info.plural.to_string()]).set(st.objects as i64);
        shard.metrics.cache_bytes.with_label_values(&[&s.info.plural.to_string()]).set(st.bytes as i64);
        shard.metrics.terminated_watchers.with_label_values(&[&s.info.plural.to_string()]).set(st.terminated_watchers as i64);
        shard.metrics.history_events.with_label_values(&[&s.info.plural.to_string()]).set(st.history as i64);
    }
    let mut r = Response::new(Body::from(shard.metrics.render()));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    r
}

async fn version() -> Response<Body> {
    body::json_value(StatusCode::OK, &discovery::version())
}

async fn core_discovery(State(app): State<App>, ctx: RequestContext) -> Response<Body> {
    if discovery::wants_aggregated(ctx.header(header::ACCEPT)) {
        return aggregated(discovery::aggregated(&app.shard.resources(), true));
    }
    body::json_value(StatusCode::OK, &discovery::api_versions())
}

async fn group_discovery(State(app): State<App>, ctx: RequestContext) -> Response<Body> {
    let resources = app.shard.resources();
    if discovery::wants_aggregated(ctx.header(header::ACCEPT)) {
        return aggregated(discovery::aggregated(&resources, false));
    }
    body::json_value(StatusCode::OK, &discovery::api_group_list(&resources))
}

async fn core_resources(State(app): State<App>) -> Reply {
    found(discovery::resource_list(&app.shard.resources(), "", "v1"))
}

/// A group not served yet may be a CRD established a moment ago: look again once the catalog has
/// every change committed before now.
async fn with_fresh<T>(shard: &Shard, find: impl Fn(&[Arc<ResourceInfo>]) -> Option<T>) -> Option<T> {
    match find(&shard.resources()) {
        None => find(&shard.fresh_resources().await),
        found => found,
    }
}

/// A discovery or OpenAPI document, or 404.
fn found(v: Option<serde_json::Value>) -> Reply {
    v.map_or_else(|| Err(ApiError::path_not_found().into()), |v| Ok(body::json_value(StatusCode::OK, &v)))
}

async fn group(State(app): State<App>, ctx: RequestContext) -> Reply {
    found(with_fresh(&app.shard, |r| discovery::api_group(r, ctx.segment(1))).await)
}

async fn group_version(State(app): State<App>, ctx: RequestContext) -> Reply {
    found(with_fresh(&app.shard, |r| discovery::resource_list(r, ctx.segment(1), ctx.segment(2))).await)
}

async fn openapi_index(State(app): State<App>) -> Response<Body> {
    body::json_value(StatusCode::OK, &openapi::index(&app.shard.resources()))
}

async fn openapi_v2(State(app): State<App>, ctx: RequestContext) -> Reply {
    let accept = ctx.header(header::ACCEPT);
    if !accept.contains("protobuf") {
        return Err(ApiError::not_acceptable(accept).into());
    }
    let mut r = Response::new(Body::from(openapi::v2_protobuf(&app.shard.resources())));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(openapi::V2_PROTOBUF));
    Ok(r)
}

async fn openapi_core(State(app): State<App>, ctx: RequestContext) -> Reply {
    found(openapi::group_version_document(&app.shard.resources(), "", ctx.segment(3)))
}

async fn openapi_group(State(app): State<App>, ctx: RequestContext) -> Reply {
    found(with_fresh(&app.shard, |r| openapi::group_version_document(r, ctx.segment(3), ctx.segment(4))).await)
}

/// Who this shard is and what it caches: a router builds the range map from these.
async fn shard_info(State(app): State<App>) -> Response<Body> {
    let shard = &app.shard;
    let ranges: Vec<String> = shard.ranges().ranges().iter().map(|r| r.to_string()).collect();
    let history = &shard.cache_config;
    body::json_value(StatusCode::OK, &serde_json::json!({
        "id": shard.id, "ranges": ranges, "epoch": shard.epoch(),
        "historyEvents": history.history_max_events, "historySeconds": history.history_window.as_secs(),
    }))
}

/// A router asks for a progress mark; it arrives in-band on progressBookmarks watches.
async fn progress(State(app): State<App>, ctx: RequestContext) -> Reply {
    let (group, resource) = (ctx.query.get("group").unwrap_or(""), ctx.query.get("resource").unwrap_or(""));
    let resources = app.shard.resources();
    let info = resources.iter().find(|r| r.group == group && r.plural == resource).ok_or_else(ApiError::path_not_found)?;
    app.shard.served(info)?.cache.progress_wanted().notify_one();
    Ok(body::text(StatusCode::ACCEPTED, "progress requested"))
}

/// The verbs on a resource path.
async fn resource(State(app): State<App>, ctx: RequestContext) -> Reply {
    let shard = &app.shard;
    let Some(t) = ctx.target.clone() else { return Err(ApiError::path_not_found().into()) };
    // A subresource the resource does not serve is a path that does not exist, whatever the verb.
    match t.subresource.as_deref() {
        None | Some("scale") => {}
        Some("status") if t.info.has_status => {}
        Some("binding") if t.info.group.is_empty() && t.info.plural == "pods" => {}
        Some("eviction") if t.info.group.is_empty() && t.info.plural == "pods" => {}
        Some("approval") if t.info.plural == "certificatesigningrequests" => {}
        Some("ephemeralcontainers") if t.info.group.is_empty() && t.info.plural == "pods" => {}
        Some(crate::kubelet::LOG | crate::kubelet::EXEC | crate::kubelet::ATTACH | crate::kubelet::PORTFORWARD | crate::kubelet::PROXY) if t.info.group.is_empty() && t.info.plural == "pods" => {
            return Ok(crate::kubelet::serve(&app.shard, &t, ctx.method.as_str(), &ctx.path, &ctx.query).await?);
        }
        Some("finalize") if t.info.group.is_empty() && t.info.plural == "namespaces" => {}
        Some(_) => return Err(ApiError::path_not_found().into()),
    }
    if let Some(sent) = ctx.headers.get(protocol::EPOCH_HEADER).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()) {
        shard.check_epoch(sent).await?;
    }
    // Negotiated before anything is done, for writes too (their answer is transformed alike).
    let view = View::of_request(&ctx.headers, &ctx.query)?;
    let call = Call { shard, target: &t, headers: &ctx.headers, query: ctx.query.raw(), body: &ctx.body };
    let query = call.query;
    let not_allowed = |m: &str| ApiError::method_not_allowed(&m.to_ascii_lowercase(), &t.info.group, &t.info.plural);
    let name = t.name.as_deref();
    if t.info.backing == Backing::Probed {
        return Ok(crate::component_status::serve(shard, &t, ctx.method.as_str(), query, view).await?);
    }
    if t.info.backing == Backing::Review {
        // Answered by the router, which authenticates and authorizes (RFC 0012); a shard
        // stores nothing for one and decides nothing.
        return Err(ApiError::unavailable(format!("{} are answered by the router, not by a shard", t.info.plural)).into());
    }
    let create_only = t.info.backing == Backing::CreateOnly;
    if create_only || t.subresource.as_deref() == Some("binding") {
        // Binding a pod (`pods/{name}/binding`, or the `bindings` collection): POST only.
        return match (ctx.method.as_str(), name, create_only) {
            ("POST", Some(_), false) | ("POST", None, true) => Ok(crate::binding::bind(call).await?),
            (m, _, _) => Err(not_allowed(m).into()),
        };
    }
    if t.subresource.as_deref() == Some("eviction") {
        // Evicting a pod (RFC 0014): POST only.
        return match (ctx.method.as_str(), name) {
            ("POST", Some(_)) => Ok(crate::eviction::evict(call).await?),
            (m, _) => Err(not_allowed(m).into()),
        };
    }
    if t.subresource.as_deref() == Some("scale") {
        return Ok(match (ctx.method.as_str(), name) {
            ("GET", Some(n)) => crate::scale::get(shard, &t, n).await?,
            ("PUT", Some(_)) => crate::scale::update(call, None).await?,
            ("PATCH", Some(_)) => {
                let ct = ctx.header(header::CONTENT_TYPE);
                let ty = PatchType::from_content_type(ct).filter(|t| *t != PatchType::Apply).ok_or_else(|| ApiError::unsupported_media_type(ct))?;
                crate::scale::update(call, Some(ty)).await?
            }
            (m, _) => return Err(not_allowed(m).into()),
        });
    }
    let answer = match (ctx.method.as_str(), name) {
        ("POST" | "PUT" | "PATCH" | "DELETE", _) if t.info.stored_as.is_some() => crate::converted::write(call, ctx.method.as_str()).await,
        ("GET", None) => {
            let o = ListOptions::parse(query, &t.info)?;
            return Ok(if o.watch { watch::watch(shard.clone(), t, o, view).await? } else { crate::read::list(shard, &t, &o, view).await? });
        }
        ("GET", Some(n)) => {
            if t.subresource.as_deref().is_some_and(|s| !matches!(s, "status" | "approval" | "ephemeralcontainers")) {
                return Err(not_allowed("get").into());
            }
            return Ok(crate::read::get(shard, &t, n, query, view).await?);
        }
        ("POST", None) => write::create(call).await,
        ("PUT", Some(_)) => write::update(call).await,
        ("PATCH", Some(_)) => write::patch(call).await,
        ("DELETE", Some(_)) => write::delete(call).await,
        ("DELETE", None) => write::delete_collection(call).await,
        (m, _) => return Err(not_allowed(m).into()),
    };
    // A write's answer goes out in the representation asked for, as a read's does.
    Ok(view.transform_write(&t.info, answer).await?)
}

fn aggregated(v: serde_json::Value) -> Response<Body> {
    let mut r = body::json_value(StatusCode::OK, &v);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(discovery::AGGREGATED_V2));
    r
}
