//! Talking to shards: the range map, forwarding one request, reading a shard's answer.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};
use bytes::Bytes;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::ApiError;
use shardplane_coordinator::range_map::RangeMap;
use shardplane_keyspace::placement_hash;
use std::sync::Arc;

/// The shards and who owns what.
pub struct Shards {
    pub map: RangeMap<String>,
    pub http: reqwest::Client,
    pub resources: Vec<Arc<ResourceInfo>>,
}

/// Request headers worth passing to a shard.
const PASSED: [header::HeaderName; 2] = [header::ACCEPT, header::CONTENT_TYPE];

impl Shards {
    /// Every shard URL, in range order.
    pub fn urls(&self) -> Vec<&str> {
        self.map.entries().iter().map(|(_, u)| u.as_str()).collect()
    }

    /// The URL of the shard owning an object.
    pub fn owner(&self, info: &ResourceInfo, namespace: &str, name: &str) -> &str {
        self.map.owner(placement_hash(info.group, info.plural, namespace, name))
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
        let mut req = self.http.get(format!("{base}{path_and_query}"));
        if let Some(a) = accept {
            req = req.header(header::ACCEPT, a);
        }
        let resp = req.send().await.map_err(|e| unavailable(base, &e))?;
        let status = resp.status();
        let content_type = resp.headers().get(header::CONTENT_TYPE).cloned();
        let body = resp.bytes().await.map_err(|e| unavailable(base, &e))?;
        let json = serde_json::from_slice(&body).map_err(|e| ApiError::unavailable(format!("shard {base} answered with invalid JSON: {e}")))?;
        Ok((status, content_type, json))
    }

    /// etcd's current revision, as a shard reads it.
    pub async fn current_revision(&self) -> Result<u64, ApiError> {
        let base = self.urls()[0].to_owned();
        let (status, _, v) = self.get_json(&base, "/shardplane/v1/revision", None).await?;
        v["revision"].as_str().and_then(|r| r.parse().ok()).filter(|_| status.is_success()).ok_or_else(|| ApiError::unavailable(format!("shard {base} did not report the revision")))
    }
}

/// 503 for a shard that cannot be reached.
pub fn unavailable(base: &str, e: &reqwest::Error) -> ApiError {
    ApiError::unavailable(format!("shard {base} is unavailable: {e}"))
}

/// A shard's non-success answer, passed on verbatim (the same Status a single server gives).
pub fn passthrough(code: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let mut r = Response::new(Body::from(serde_json::to_vec(body).expect("json")));
    *r.status_mut() = code;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}
