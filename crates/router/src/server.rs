//! The router's HTTP surface: discovery and OpenAPI from a shard, single-object verbs to the
//! owner, LIST and WATCH merged, deletecollection on every shard.

use crate::forward::{passthrough, Forwarded};
use crate::state::RouterState;
use crate::{list, watch};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, Method, Response, StatusCode};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use serde_json::Value;
use shardplane_apimachinery::list_options::ListOptions;
use shardplane_apimachinery::request_path::Target;
use shardplane_apimachinery::resources::{Backing, ResourceInfo};
use shardplane_apimachinery::{kind_rules, meta};
use shardplane_apimachinery::{request_path, ApiError};
use shardplane_http::metrics::Metrics;
use shardplane_http::protocol::GENERATED_NAME_HEADER;
use shardplane_http::request::prologue;
use shardplane_http::{body, readiness, Api, Reply, RequestContext, Surface};
use crate::authz::Authorizer;
use shardplane_identity::user::UserInfo;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

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
    /// How clients connect and are named (RFC 0012).
    pub client_facing: ClientFacing,
    /// How the router proves itself to shards serving HTTPS (RFC 0012); plain HTTP without.
    pub shard_tls: Option<Arc<rustls::ClientConfig>>,
}

/// How the router meets its clients (RFC 0012): over TLS or plain HTTP, and who each request
/// comes from.
#[derive(Clone, Debug, Default)]
pub struct ClientFacing {
    /// TLS to serve with; plain HTTP without.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The authenticators, in upstream's order.
    pub authenticator: Arc<shardplane_identity::authn::Authenticator>,
    /// `--authorization-mode` (empty: upstream's default, `AlwaysAllow`).
    pub authorization: Vec<crate::authz::Mode>,
    /// The audit policy and log (`--audit-policy-file`, `--audit-log-path`); none: no audit.
    pub auditor: Option<Arc<crate::audit::Auditor>>,
    /// Priority and fairness, or the two in-flight bounds (RFC 0013).
    pub flow_control: shardplane_flowcontrol::Flags,
}

/// The router's state: the shards and its request surface (seats on fan-out, metrics).
#[derive(Clone)]
struct App {
    shards: Arc<RouterState>,
    surface: Surface,
    /// Decides every request after authentication.
    authz: Arc<Authorizer>,
    /// Names every request's user.
    authn: Arc<crate::authn::Authentication>,
    /// Records requests as the audit policy says.
    auditor: Option<Arc<crate::audit::Auditor>>,
    /// Priority and fairness's seats and queues, when it is on.
    gate: Option<Arc<shardplane_flowcontrol::Gate>>,
}

impl axum::extract::FromRef<App> for Arc<crate::authn::Authentication> {
    fn from_ref(app: &App) -> Self {
        app.authn.clone()
    }
}

impl axum::extract::FromRef<App> for Arc<Authorizer> {
    fn from_ref(app: &App) -> Self {
        app.authz.clone()
    }
}

impl Api for App {
    fn surface(&self) -> &Surface {
        &self.surface
    }

    async fn target(&self, path: &str) -> Option<request_path::Target> {
        self.shards.target(path).await
    }
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
    serve_shards(RouterState::connect(stores, config.shard_urls, config.bookmark_interval, config.shard_tls).await?, config.listen, config.client_facing, shutdown, on_listen).await
}

/// Serves over `shards` (whose URLs a topology supervisor may update) until `shutdown`, meeting
/// clients as `clients` says.
pub async fn serve_shards(shards: Arc<RouterState>, listen: SocketAddr, clients: ClientFacing, shutdown: CancellationToken, on_listen: impl FnOnce(SocketAddr)) -> std::io::Result<()> {
    let count = shards.urls().len();
    // The router bounds what it fans out as a shard bounds what it serves (upstream defaults).
    let modes = if clients.authorization.is_empty() { vec![crate::authz::Mode::AlwaysAllow] } else { clients.authorization.clone() };
    let authz = Arc::new(Authorizer::start(modes, &shards.stores, &shutdown));
    let authn = Arc::new(crate::authn::Authentication::new(clients.authenticator.clone(), shards.clone(), clients.auditor.clone()));
    let metrics = Metrics::new();
    let fc = clients.flow_control;
    let gate = fc.enable_priority_and_fairness.then(|| crate::flow_control::start(&shards, fc.server_seats(), metrics.registry(), &shutdown));
    let app = App { shards, surface: Surface { server: "router".into(), limits: fc.inflight(), metrics }, authz, authn, auditor: clients.auditor.clone(), gate };
    let listener = tokio::net::TcpListener::bind(listen).await?;
    on_listen(listener.local_addr()?);
    tracing::info!(addr = %listener.local_addr()?, shards = count, "router serving");
    // Registered once per process; a second router in one process (tests) keeps its own count.
    let _ = app.surface.metrics.registry().register(Box::new(app.shards.shard_streams.clone()));
    crate::membership::start(app.shards.clone(), format!("router-{}", listener.local_addr()?), app.surface.metrics.registry(), shutdown.clone());
    let routes = routes(app);
    match clients.tls {
        None => shardplane_http::serve::serve(listener, routes, Default::default(), shutdown).await,
        Some(tls) => shardplane_http::serve::serve_tls(listener, routes, tls, Default::default(), shutdown).await,
    }
}

/// The router's routes: its own health and metrics; every other path is a resource to route,
/// or (naming none: discovery, OpenAPI, `/version`) the same on every shard and asked of one.
fn routes(app: App) -> Router {
    let mut r = Router::new();
    for (path, route) in [("/healthz", get(health)), ("/livez", get(health)), ("/readyz", get(readyz)), ("/metrics", get(metrics))] {
        let route = route.fallback(route_request);
        r = r.route(&format!("{path}/"), route.clone()).route(path, route);
    }
    r = r.route(crate::whoami::PATH, axum::routing::post(crate::whoami::self_subject_review).fallback(route_request));
    {
        use crate::reviews::*;
        r = r
            .route(SELF_SUBJECT_ACCESS, axum::routing::post(self_subject_access).fallback(route_request))
            .route(SUBJECT_ACCESS, axum::routing::post(subject_access).fallback(route_request))
            .route(LOCAL_SUBJECT_ACCESS, axum::routing::post(local_subject_access).fallback(route_request))
            .route(SELF_SUBJECT_RULES, axum::routing::post(self_subject_rules).fallback(route_request));
    }
    {
        use crate::tokens::*;
        r = r
            .route(TOKEN_REVIEWS, axum::routing::post(token_review).fallback(route_request))
            .route(OPENID_CONFIGURATION, get(openid_configuration).fallback(route_request))
            .route(JWKS, get(jwks).fallback(route_request));
    }
    if let Some(gate) = &app.gate {
        r = r.merge(shardplane_flowcontrol::debug::routes(gate.clone()));
    }
    // Layers run last-added first: the prologue, then authentication, then audit, then
    // impersonation, then priority and fairness, then authorization (upstream's order).
    let r = r.fallback(route_request).layer(axum::middleware::from_fn_with_state(app.authz.clone(), crate::authz::authorize));
    let r = match &app.gate {
        Some(gate) => r.layer(axum::middleware::from_fn_with_state(gate.clone(), shardplane_flowcontrol::gate)),
        None => r,
    };
    r.layer(axum::middleware::from_fn_with_state(app.authz.clone(), crate::impersonation::impersonate))
        .layer(axum::middleware::from_fn_with_state(app.auditor.clone(), crate::audit::audit))
        .layer(axum::middleware::from_fn_with_state(app.authn.clone(), crate::authn::authenticate))
        .layer(axum::middleware::from_fn_with_state(app.clone(), prologue::<App>))
        .with_state(app)
}

async fn health() -> Response<Body> {
    body::text(StatusCode::OK, "ok")
}

/// Ready when its store answers, every shard is ready, and (with RBAC) the bootstrap policy is
/// in place.
async fn readyz(State(app): State<App>) -> Response<Body> {
    let stores = app.shards.stores.all();
    let mut checks = vec![readiness::stores(stores).await, readiness::store_space(stores).await];
    checks.push(("poststarthook/rbac/bootstrap-roles".to_owned(), app.authz.bootstrap_pending().await));
    for u in app.shards.urls() {
        let ready = app.shards.http.get(format!("{u}/readyz")).timeout(readiness::STORE_CHECK * 2).send().await.is_ok_and(|r| r.status().is_success());
        checks.push((format!("shard {u}"), (!ready).then(|| "not ready".to_owned())));
    }
    readiness::answer(&checks)
}

async fn metrics(State(app): State<App>) -> Response<Body> {
    let mut r = Response::new(Body::from(app.surface.metrics.render()));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    r
}

async fn route_request(State(app): State<App>, user: Option<axum::Extension<UserInfo>>, mut ctx: RequestContext) -> Reply {
    let user = user.map_or_else(shardplane_identity::authn::anonymous, |axum::Extension(u)| u);
    // The shards learn the user from the router alone: what a client sent under those names
    // goes no further, and the router's own are set (RFC 0012, "Inside the cluster").
    let theirs: Vec<_> = ctx.headers.keys().filter(|k| shardplane_identity::front_proxy::is_front_proxy_header(k.as_str())).cloned().collect();
    for k in theirs {
        ctx.headers.remove(k);
    }
    for (k, v) in shardplane_identity::front_proxy::headers(&user) {
        if let (Ok(k), Ok(v)) = (axum::http::HeaderName::try_from(k), HeaderValue::try_from(v)) {
            ctx.headers.append(k, v);
        }
    }
    Ok(route(&app, &user, ctx).await?)
}

async fn route(app: &App, user: &UserInfo, ctx: RequestContext) -> Result<Response<Body>, ApiError> {
    let shards = &app.shards;
    let pq = ctx.path_and_query();
    let (method, headers) = (&ctx.method, &ctx.headers);
    let Some(t) = ctx.target.clone() else {
        // A group, version or resource under /apis/ the catalog does not serve (looked up as
        // the prologue's target was): 404 here, as a shard answers it, at no store round trip.
        if unserved_api_path(&ctx.path, &shards.catalog.now().resources) {
            return Err(ApiError::path_not_found());
        }
        // Discovery, OpenAPI and /version are the same on every shard.
        return shards.forward(&shards.urls()[0], &Forwarded { method, path_and_query: &pq, headers, body: ctx.body.clone() }).await;
    };
    if app.authz.uses_rbac() && t.info.group == RBAC_GROUP && t.subresource.is_none() && matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
        if let Err(refused) = check_rbac_write(app, user, &ctx, &t, &pq).await {
            return refused;
        }
    }
    if t.info.group.is_empty() && t.info.plural == "serviceaccounts" && t.subresource.as_deref() == Some("token") {
        // TokenRequest: signed here, where the key is (a shard has none).
        let (Some(tokens), Some(name), Method::POST) = (app.authn.authenticator.service_accounts.as_deref(), t.name.as_deref(), method.clone()) else {
            return Err(if *method == Method::POST { ApiError::path_not_found() } else { ApiError::method_not_allowed(&method.as_str().to_ascii_lowercase(), "", "serviceaccounts/token") });
        };
        return crate::tokens::token_request(tokens, shards, &ctx, t.namespace.as_deref().unwrap_or(""), name).await;
    }
    let answer = route_resource(app, &ctx, &t, &pq).await;
    // A CRD written through this router is served by it from the writer's next request on.
    if kind_rules::is_crd(&t.info) && method != Method::GET && answer.as_ref().is_ok_and(|r| r.status().is_success()) {
        shards.catalog.note_write();
    }
    answer
}

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// RBAC's escalation check on a write of a role or binding (`Err` holds the answer to give
/// instead: a 403, or the error a patch's dry run met). A create or update is checked as sent; a
/// patch as its dry run (sent to the owner first) says the object would be.
async fn check_rbac_write(app: &App, user: &UserInfo, ctx: &RequestContext, t: &Target, pq: &str) -> Result<(), Result<Response<Body>, ApiError>> {
    let ns = t.namespace.clone().unwrap_or_default();
    let obj = if ctx.method == Method::PATCH {
        let Some(name) = t.name.as_deref() else { return Ok(()) };
        let dry_run = format!("{pq}{}dryRun=All", if pq.contains('?') { '&' } else { '?' });
        let request = Forwarded { method: &ctx.method, path_and_query: &dry_run, headers: &ctx.headers, body: ctx.body.clone() };
        let shards = &app.shards;
        let resp = shards.routed(|| shards.forward_to_owner(&t.info, &ns, name, &request)).await.map_err(Err)?;
        if !resp.status().is_success() {
            return Err(Ok(resp));
        }
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.map_err(|e| Err(ApiError::unavailable(format!("dry run: {e}"))))?;
        serde_json::from_slice(&bytes).map_err(|e| Err(ApiError::internal(format!("dry run answered something other than JSON: {e}"))))?
    } else {
        body::decode_object(&ctx.headers, &ctx.body).map_err(Err)?
    };
    app.authz.check_rbac_write(user, &t.info.plural, &ns, &obj).await.map_err(Err)
}

/// A path under `/apis/` naming a group, a group version or anything below one that none of
/// `resources` is in (what a shard answers 404; discovery of a served group goes on to one).
fn unserved_api_path(path: &str, resources: &[Arc<ResourceInfo>]) -> bool {
    let Some(rest) = path.strip_prefix("/apis/") else { return false };
    let mut segments = rest.split('/').filter(|s| !s.is_empty());
    match (segments.next(), segments.next(), segments.next()) {
        (None, _, _) => false,
        (Some(g), None, _) => !resources.iter().any(|r| r.group == g),
        (Some(g), Some(v), None) => !resources.iter().any(|r| r.group == g && r.version == v),
        // Below a group version: the prologue found no resource there.
        (Some(_), Some(_), Some(_)) => true,
    }
}

/// A request for a resource the catalog serves, routed to the shards that hold it.
async fn route_resource(app: &App, ctx: &RequestContext, t: &Target, pq: &str) -> Result<Response<Body>, ApiError> {
    let shards = &app.shards;
    let (method, headers, query) = (&ctx.method, &ctx.headers, ctx.query.raw());
    let ns = t.namespace.clone().unwrap_or_default();
    let create_only = t.info.backing == Backing::CreateOnly;
    let review = t.info.backing == Backing::Review;
    if (create_only || review) && (method != Method::POST || t.name.is_some()) {
        return Err(ApiError::method_not_allowed(&method.as_str().to_ascii_lowercase(), &t.info.group, &t.info.plural));
    }
    if review {
        // Every review this router answers has its own route ([`routes`]); no shard answers one.
        return Err(ApiError::path_not_found());
    }
    if t.info.backing == Backing::Probed {
        // Computed by whichever shard is asked (the same probes at every one): the first.
        let request = Forwarded { method, path_and_query: pq, headers, body: ctx.body.clone() };
        let first = shards.urls()[0].clone();
        return shards.routed(|| shards.forward(&first, &request)).await;
    }
    match (method, t.name.as_deref()) {
        (&Method::GET, None) => {
            let o = ListOptions::parse(query, &t.info)?;
            if o.watch {
                // apiserver_registered_watchers counts the router's client watches while they run.
                let gauge = app.surface.metrics.watchers.with_label_values(&[&t.info.group, &t.info.version, &t.info.kind]);
                shards.routed(|| watch::watch(shards.clone(), t.clone(), o.clone(), &ctx.query, headers, gauge.clone())).await
            } else {
                shards.routed(|| list::list(shards, t, &o, &ctx.query, headers)).await
            }
        }
        (&Method::POST, None) => {
            // The name decides the shard: read it (or pick it for generateName) first.
            let obj = body::decode_object(headers, &ctx.body)?;
            // The body goes on as the client sent it (the shard validates its exact bytes, e.g.
            // duplicate fields); a name picked here for generateName travels in a header.
            let mut fwd_headers = headers.clone();
            let mut name = meta::meta_str(&obj, "name").to_owned();
            if name.is_empty() {
                let prefix = meta::meta_str(&obj, "generateName").to_owned();
                if !prefix.is_empty() {
                    name = meta::generate_name(&prefix);
                    // A prefix no header can carry is no valid name either: the shard refuses
                    // it (422) whichever shard it reaches.
                    if let Ok(v) = HeaderValue::from_str(&name) {
                        fwd_headers.insert(GENERATED_NAME_HEADER, v);
                    }
                }
            }
            let request = Forwarded { method, path_and_query: pq, headers: &fwd_headers, body: ctx.body.clone() };
            // A Binding is stored nowhere: it goes to the shard of the pod it names.
            let owner = match create_only {
                true => shards.catalog.now().find("", "v1", "pods").cloned().ok_or_else(ApiError::path_not_found)?,
                false => t.info.clone(),
            };
            shards.routed(|| shards.forward_to_owner(&owner, &ns, &name, &request)).await
        }
        (&Method::DELETE, None) => {
            // Every shard deletes what it owns; the answer lists everything deleted.
            shards.routed(|| delete_collection(shards, pq, headers, ctx.body.clone())).await
        }
        (_, Some(name)) => {
            let request = Forwarded { method, path_and_query: pq, headers, body: ctx.body.clone() };
            shards.routed(|| shards.forward_to_owner(&t.info, &ns, name, &request)).await
        }
        (m, None) => Err(ApiError::method_not_allowed(&m.as_str().to_ascii_lowercase(), &t.info.group, &t.info.plural)),
    }
}

/// Where a list answer keeps its entries: a Table's rows, any other list's items.
fn list_field(list: &Value) -> &'static str {
    if list["kind"] == "Table" { "rows" } else { "items" }
}

/// DELETE of a collection on every shard (the client's DeleteOptions body as sent, JSON or
/// protobuf); the answer lists everything deleted.
async fn delete_collection(shards: &RouterState, pq: &str, headers: &axum::http::HeaderMap, body: Bytes) -> Result<Response<Body>, ApiError> {
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
        let resp = shards.forward(u, &Forwarded { method: &Method::DELETE, path_and_query: pq, headers: &passed, body: body.clone() }).await?;
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
