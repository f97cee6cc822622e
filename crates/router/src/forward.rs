//! Talking to shards: one request forwarded, a shard's answer read, a refusal for a stale map
//! (421) turned into the error [`RouterState::routed`] retries on.

use crate::state::RouterState;
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use bytes::Bytes;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::ApiError;
use shardplane_http::protocol::{EPOCH_HEADER, GENERATED_NAME_HEADER, LIST_FRAMING_HEADER};

/// The longest a call to a shard other than a watch may take.
const SHARD_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(shardplane_http::request::REQUEST_TIMEOUT.as_secs() + 5);

/// Request headers worth passing to a shard.
const PASSED: [&str; 3] = ["accept", "content-type", GENERATED_NAME_HEADER];

/// A client's request as the router passes it on to a shard.
pub struct Forwarded<'a> {
    pub method: &'a Method,
    pub path_and_query: &'a str,
    /// The client's headers; only [`PASSED`] ones go on, and the front-proxy headers naming
    /// the user the router authenticated.
    pub headers: &'a HeaderMap,
    pub body: Bytes,
}

impl RouterState {
    /// Sends one request to the shard owning the object under the current map.
    pub async fn forward_to_owner(&self, info: &ResourceInfo, namespace: &str, name: &str, request: &Forwarded<'_>) -> Result<Response<Body>, ApiError> {
        let owner = self.owner(info, namespace, name);
        self.forward(&owner, request).await
    }

    /// The core/v1 object `plural/name` of `namespace` ("" for a cluster-scoped one) as its owner
    /// has it now, or `None` when it does not exist (what the router itself reads: a token's
    /// ServiceAccount and bound object).
    pub async fn core_object(&self, plural: &str, namespace: &str, name: &str) -> Result<Option<serde_json::Value>, ApiError> {
        let info = self.catalog.now().find("", "v1", plural).cloned().ok_or_else(|| ApiError::internal(format!("{plural} are not served")))?;
        let path = if namespace.is_empty() { format!("/api/v1/{plural}/{name}") } else { format!("/api/v1/namespaces/{namespace}/{plural}/{name}") };
        let (status, _, v) = self.routed(|| async { self.get_json(&self.owner(&info, namespace, name), &path, None).await }).await?;
        match status {
            StatusCode::OK => Ok(Some(v)),
            StatusCode::NOT_FOUND => Ok(None),
            other => Err(ApiError::unavailable(format!("reading {plural} {namespace}/{name}: the shard answered {other}"))),
        }
    }

    /// A request to a shard, stamped with the epoch it is routed under.
    pub fn request(&self, method: Method, url: String) -> reqwest::RequestBuilder {
        self.http.request(method, url).header(EPOCH_HEADER, self.epoch())
    }

    /// A request to a shard that is not a watch: bounded by the request timeout and a little
    /// more, so that the shard's own 504 (it applies the same timeout) is what the client sees.
    fn bounded(&self, method: Method, url: String) -> reqwest::RequestBuilder {
        self.request(method, url).timeout(SHARD_CALL_TIMEOUT)
    }

    /// Sends `req` to the shard at `base`: 503 when the shard cannot be reached, and a refusal
    /// for a stale map (421) as the error [`RouterState::routed`] retries on; every other answer as
    /// the shard gave it.
    pub async fn send(&self, base: &str, req: reqwest::RequestBuilder) -> Result<reqwest::Response, ApiError> {
        let resp = req.send().await.map_err(|e| unavailable(base, &e))?;
        if resp.status() == StatusCode::MISDIRECTED_REQUEST {
            let body = resp.bytes().await.map_err(|e| unavailable(base, &e))?;
            return Err(refusal(&body));
        }
        Ok(resp)
    }

    /// Sends one request to `base` and returns the shard's response as is, except a refusal for
    /// a stale map, which is an error (code 421) for [`RouterState::routed`] to retry.
    pub async fn forward(&self, base: &str, request: &Forwarded<'_>) -> Result<Response<Body>, ApiError> {
        let mut req = self.bounded(request.method.clone(), format!("{base}{}", request.path_and_query)).body(request.body.clone());
        for h in PASSED {
            if let Some(v) = request.headers.get(h) {
                req = req.header(h, v);
            }
        }
        // The user, named by the router (a client's own `X-Remote-*` headers were removed
        // before the router set these, RFC 0012).
        for (k, v) in request.headers.iter().filter(|(k, _)| shardplane_identity::front_proxy::is_front_proxy_header(k.as_str())) {
            req = req.header(k, v);
        }
        let resp = self.send(base, req).await?;
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
        let mut req = self.bounded(Method::GET, format!("{base}{path_and_query}"));
        if let Some(a) = accept {
            req = req.header(header::ACCEPT, a);
        }
        let resp = self.send(base, req).await?;
        let status = resp.status();
        let content_type = resp.headers().get(header::CONTENT_TYPE).cloned();
        let body = resp.bytes().await.map_err(|e| unavailable(base, &e))?;
        Ok((status, content_type, body))
    }

    /// GET whose body the caller streams; a refusal for a stale map is an error (code 421) for
    /// [`RouterState::routed`] to retry, as in [`RouterState::get_bytes`]. `split`: the caller splits a
    /// list into its entries, so the shard is asked to write them one per line.
    pub async fn get_streaming(&self, base: &str, path_and_query: &str, accept: Option<&HeaderValue>, split: bool) -> Result<reqwest::Response, ApiError> {
        let mut req = self.bounded(Method::GET, format!("{base}{path_and_query}"));
        if split {
            req = req.header(LIST_FRAMING_HEADER, "lines");
        }
        if let Some(a) = accept {
            req = req.header(header::ACCEPT, a);
        }
        self.send(base, req).await
    }

}

/// The error for a shard's 421 answer: carries the shard's epoch for the logs.
pub fn refusal(body: &[u8]) -> ApiError {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let message = v["message"].as_str().unwrap_or("the shard refused the request for a stale range map");
    tracing::debug!(shard_epoch = ?ApiError::refusal_epoch(&v), %message, "shard refused a routed request");
    ApiError::stale_range_map(0, ApiError::refusal_epoch(&v).unwrap_or(0))
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
