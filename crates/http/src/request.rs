//! The prologue and epilogue every API request goes through, on a shard and on a router alike,
//! as one axum middleware ([`prologue`]): one query parse, the resource the path names, the
//! request's metric labels, a tracing span, the body read within upstream's limit (413) and the
//! request's deadline, an in-flight seat unless priority and fairness gives seats (429 with
//! Retry-After past the bound), then the route's handler within the request timeout (504;
//! watches excepted), which takes the parsed request as a [`RequestContext`] and answers a
//! [`Reply`] (errors become `Status` responses); last `apiserver_request_total` and
//! `apiserver_request_duration_seconds`. A panic below it is a 500 Status for that request
//! alone (RFC 0010).

use crate::body;
use crate::limits::InflightLimits;
use crate::metrics::{Metrics, RequestLabels};
use crate::query::Query;
use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, Response};
use axum::middleware::Next;
use axum::response::IntoResponse;
use bytes::Bytes;
use futures::FutureExt;
use shardplane_apimachinery::go_duration;
use shardplane_apimachinery::request_path::Target;
use shardplane_apimachinery::ApiError;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// What a process serves requests with: its name in spans, its seats and its metrics.
#[derive(Clone)]
pub struct Surface {
    /// The serving process in every request's span: a shard's id, or `router`.
    pub server: String,
    /// The two in-flight bounds, taken before authentication; `None` when priority and
    /// fairness gives seats instead, after it (RFC 0013).
    pub limits: Option<InflightLimits>,
    pub metrics: Metrics,
}

/// A server's state as the prologue needs it: its surface, and which resource a path names
/// (the shard and the router resolve paths against the served resources they follow).
pub trait Api: Clone + Send + Sync + 'static {
    /// The process's surface.
    fn surface(&self) -> &Surface;
    /// The resource `path` names, if any.
    fn target(&self, path: &str) -> impl Future<Output = Option<Target>> + Send;
}

/// One request, read and parsed: what every handler takes instead of loose arguments.
pub struct RequestContext {
    pub method: Method,
    pub path: String,
    pub query: Query,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The resource the path names, if any (discovery, health and internal paths name none).
    pub target: Option<Target>,
    /// A GET of a collection with `watch` set.
    pub watch: bool,
}

impl RequestContext {
    /// The path with the query as the client sent it, for forwarding.
    pub fn path_and_query(&self) -> String {
        if self.query.raw().is_empty() { self.path.clone() } else { format!("{}?{}", self.path, self.query.raw()) }
    }

    /// A header's value as text ("" when absent or not text).
    pub fn header(&self, name: impl axum::http::header::AsHeaderName) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    /// The `i`th segment of the path (`/apis/{group}/{version}`: 1 and 2), "" past the end.
    pub fn segment(&self, i: usize) -> &str {
        self.path.trim_matches('/').split('/').nth(i).unwrap_or("")
    }
}

/// What the prologue leaves for the handler's [`RequestContext`].
#[derive(Clone)]
struct Parsed {
    query: Query,
    body: Bytes,
    target: Option<Target>,
    watch: bool,
}

/// The body the prologue read and whether the request is a watch, for the layers that run
/// after it (audit records the body); `None` outside the prologue.
pub fn read_by_prologue(extensions: &axum::http::Extensions) -> Option<(&Bytes, bool)> {
    extensions.get::<Parsed>().map(|p| (&p.body, p.watch))
}

impl<S: Send + Sync> FromRequestParts<S> for RequestContext {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Failure> {
        let p = parts.extensions.remove::<Parsed>().ok_or_else(|| ApiError::internal("the request prologue did not run for this route"))?;
        Ok(RequestContext { method: parts.method.clone(), path: parts.uri.path().to_owned(), query: p.query, headers: std::mem::take(&mut parts.headers), body: p.body, target: p.target, watch: p.watch })
    }
}

/// A handler's answer: a response, or the error that becomes a `Status` response.
pub type Reply = Result<Response<Body>, Failure>;

/// An [`ApiError`] as an axum response: the `Status` object with upstream's headers. Server
/// errors are logged (with the request's span).
#[derive(Debug)]
pub struct Failure(pub ApiError);

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
        Failure(e)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> axum::response::Response {
        if self.0.code >= 500 {
            tracing::warn!(code = self.0.code, message = %self.0.message, "request failed");
        }
        body::error(&self.0)
    }
}

/// Upstream's default `--request-timeout`: the longest a request other than a watch may run.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The middleware every route of a shard or router sits behind (see the module doc). A panic
/// anywhere below it ends as a 500 Status for this request alone, and is counted.
pub async fn prologue<A: Api>(State(api): State<A>, req: Request, next: Next) -> Response<Body> {
    let metrics = api.surface().metrics.clone();
    let path = req.uri().path().to_owned();
    match AssertUnwindSafe(serve_request(api, req, next)).catch_unwind().await {
        Ok(resp) => resp,
        Err(panic) => {
            metrics.panics.inc();
            let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_default();
            tracing::error!(%path, panic = %what, "a request's handler panicked");
            body::error(&ApiError::internal("this request caused the server to panic; look in its logs for details"))
        }
    }
}

async fn serve_request<A: Api>(api: A, req: Request, next: Next) -> Response<Body> {
    let started = Instant::now();
    let (mut parts, raw_body) = req.into_parts();
    let query = Query::parse(parts.uri.query().unwrap_or(""));
    let path = parts.uri.path().to_owned();
    let target = api.target(&path).await;
    let watch = target.as_ref().is_some_and(|t| t.name.is_none()) && parts.method == Method::GET && query.is_watch();
    let labels = RequestLabels::of(&parts.method, target.as_ref(), watch);
    let counted = !labels.resource.is_empty() || matches!(path.as_str(), "/api" | "/apis" | "/version");
    let surface = api.surface();
    let span = tracing::info_span!("request", server = %surface.server, verb = %labels.verb, %path, resource = %labels.resource, user = tracing::field::Empty);
    let resp = async {
        // A watch runs until its own timeout (timeoutSeconds, or the server's minimum request
        // timeout); everything else within the request timeout, which `timeout` may shorten.
        let deadline = if watch { None } else {
            match request_timeout(&query) {
                Ok(d) => Some(tokio::time::Instant::now() + d),
                Err(e) => return body::error(&e),
            }
        };
        // The body is read before a seat is taken, so a client that sends it slowly holds no
        // seat; what it may send is capped (413, from Content-Length before reading any).
        // A watch's body (it should have none) is read within the request timeout too.
        let body_deadline = deadline.unwrap_or_else(|| tokio::time::Instant::now() + REQUEST_TIMEOUT);
        let body = match read_body(raw_body, &parts.headers, body_deadline).await {
            Ok(b) => b,
            Err(e) => return body::error(&e),
        };
        let _seat = match surface.limits.as_ref().map(|l| l.admit(&parts.method, watch)).transpose() {
            Ok(seat) => seat,
            Err(e) => return body::error(&e),
        };
        parts.extensions.insert(Parsed { query, body, target, watch });
        let handled = next.run(Request::from_parts(parts, Body::empty()));
        match deadline {
            None => handled.await,
            Some(at) => match tokio::time::timeout_at(at, handled).await {
                Ok(resp) => resp,
                Err(_) => body::error(&timed_out()),
            },
        }
    }
    .instrument(span)
    .await;
    if counted {
        surface.metrics.observe(&labels, resp.status().as_u16(), (!watch).then(|| started.elapsed()));
    }
    resp
}

/// Upstream's Status for a request past its deadline.
fn timed_out() -> ApiError {
    let mut e = ApiError::timeout("Timeout: request did not complete within requested timeout - context deadline exceeded");
    e.details = None;
    e
}

/// How long a request other than a watch may run: [`REQUEST_TIMEOUT`], or less when the
/// `timeout` parameter (a Go duration) asks for less; 400 when it is not a duration, as
/// upstream.
pub fn request_timeout(query: &Query) -> Result<Duration, ApiError> {
    let Some(value) = query.get("timeout").filter(|v| !v.is_empty()) else { return Ok(REQUEST_TIMEOUT) };
    match go_duration::parse(value) {
        Ok(go_duration::GoDuration::NonNegative(d)) if !d.is_zero() => Ok(d.min(REQUEST_TIMEOUT)),
        Ok(_) => Ok(REQUEST_TIMEOUT),
        Err(e) => Err(ApiError::bad_request(format!("invalid timeout specified in the request URL - {e}"))),
    }
}

/// The largest refused body that is read (and dropped) before the 413 goes out.
const DRAIN_LIMIT: u64 = 8 * 1024 * 1024;

/// Reads a body to its end, keeping nothing.
async fn drain(raw: Body) {
    use futures::StreamExt;
    let mut chunks = raw.into_data_stream();
    while let Some(Ok(_)) = chunks.next().await {}
}

/// Reads the request body within [`body::MAX_BODY`] and by `deadline`.
async fn read_body(raw: Body, headers: &HeaderMap, deadline: tokio::time::Instant) -> Result<Bytes, ApiError> {
    let declared = headers.get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > body::MAX_BODY as u64) {
        // Read and dropped first when it is not much past the limit, so that the client, still
        // sending, reads the 413 instead of a reset connection; past that it is cut off.
        if n <= DRAIN_LIMIT {
            let _ = tokio::time::timeout_at(deadline, drain(raw)).await;
        }
        return Err(ApiError::too_large(body::MAX_BODY));
    }
    tokio::time::timeout_at(deadline, body::read(raw)).await.unwrap_or_else(|_| Err(timed_out()))
}
