//! Talking to shards: the range map, forwarding one request, reading a shard's answer.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use bytes::Bytes;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::ApiError;
use shardplane_coordinator::range_map::RangeMap;
use shardplane_keyspace::placement_hash;
use std::sync::Arc;

/// The shards and who owns what. The map's URLs change when a supervised shard restarts.
pub struct Shards {
    map: std::sync::RwLock<RangeMap<String>>,
    pub http: reqwest::Client,
    pub resources: Vec<Arc<ResourceInfo>>,
    /// Bookmarks to clients that allow them, this often.
    pub bookmark_interval: std::time::Duration,
}

/// Request headers worth passing to a shard.
const PASSED: [header::HeaderName; 2] = [header::ACCEPT, header::CONTENT_TYPE];

impl Shards {
    /// Shards at `urls`; shard i owns the i-th of K equal ranges (epoch 0).
    pub fn new(urls: Vec<String>, bookmark_interval: std::time::Duration) -> std::io::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            map: std::sync::RwLock::new(RangeMap::even(0, urls.iter().map(|u| u.trim_end_matches('/').to_owned()).collect())),
            http: reqwest::Client::builder().no_proxy().build().map_err(std::io::Error::other)?,
            resources: shardplane_apimachinery::resources::builtin_resources().into_iter().map(Arc::new).collect(),
            bookmark_interval,
        }))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, RangeMap<String>> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The range-map epoch.
    pub fn epoch(&self) -> u64 {
        self.read().epoch()
    }

    /// Every shard URL, in range order.
    pub fn urls(&self) -> Vec<String> {
        self.read().entries().iter().map(|(_, u)| u.clone()).collect()
    }

    /// Points shard `i` at a new URL (a restarted process on the same range).
    pub fn set_url(&self, i: usize, url: String) {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        let entries: Vec<_> = map.entries().iter().enumerate().map(|(j, (r, u))| (*r, if j == i { url.clone() } else { u.clone() })).collect();
        *map = RangeMap::new(map.epoch(), entries).expect("same ranges");
    }

    /// The URL of the shard owning an object.
    pub fn owner(&self, info: &ResourceInfo, namespace: &str, name: &str) -> String {
        self.read().owner(placement_hash(info.group, info.plural, namespace, name)).clone()
    }

    /// Sends one request to `base` and returns the shard's response as is.
    pub async fn forward(&self, base: &str, method: &Method, path_and_query: &str, headers: &HeaderMap, body: Bytes) -> Result<Response<Body>, ApiError> {
        let mut req = self.http.request(method.clone(), format!("{base}{path_and_query}")).body(body);
        for h in PASSED {
            if let Some(v) = headers.get(&h) {
                req = req.header(h, v);
            }
        }
        let resp = req.send().await.map_err(|e| unavailable(base, &e))?;
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

    /// GET returning the status, content type and raw body.
    pub async fn get_bytes(&self, base: &str, path_and_query: &str, accept: Option<&HeaderValue>) -> Result<(StatusCode, Option<HeaderValue>, Bytes), ApiError> {
        let mut req = self.http.get(format!("{base}{path_and_query}"));
        if let Some(a) = accept {
            req = req.header(header::ACCEPT, a);
        }
        let resp = req.send().await.map_err(|e| unavailable(base, &e))?;
        let status = resp.status();
        let content_type = resp.headers().get(header::CONTENT_TYPE).cloned();
        let body = resp.bytes().await.map_err(|e| unavailable(base, &e))?;
        Ok((status, content_type, body))
    }

    /// etcd's current revision, as a shard reads it.
    pub async fn current_revision(&self) -> Result<u64, ApiError> {
        let base = self.urls()[0].clone();
        let (status, _, v) = self.get_json(&base, "/shardplane/v1/revision", None).await?;
        if !status.is_success() {
            return Err(shard_status(status, &v));
        }
        v["revision"].as_str().and_then(|r| r.parse().ok()).ok_or_else(|| ApiError::unavailable(format!("shard {base} did not report the revision")))
    }
}

/// 503 for a shard that cannot be reached.
pub fn unavailable(base: &str, e: &reqwest::Error) -> ApiError {
    ApiError::unavailable(format!("shard {base} is unavailable: {e}"))
}

/// A shard's error Status as an [`ApiError`] with the same code, reason and message.
pub fn shard_status(code: StatusCode, body: &serde_json::Value) -> ApiError {
    let message = body["message"].as_str().unwrap_or("shard error").to_owned();
    match body["reason"].as_str() {
        Some("TooManyRequests") => ApiError::too_many_requests(message, body.pointer("/details/retryAfterSeconds").and_then(|v| v.as_u64()).unwrap_or(1)),
        Some("Timeout") => ApiError::timeout(message),
        _ if code == StatusCode::SERVICE_UNAVAILABLE => ApiError::unavailable(message),
        _ => ApiError::internal(message),
    }
}

/// A shard's non-success answer, passed on verbatim (the same Status a single server gives).
pub fn passthrough(code: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let mut r = Response::new(Body::from(serde_json::to_vec(body).expect("json")));
    *r.status_mut() = code;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}
