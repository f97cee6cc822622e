//! Request bodies and responses: reading a body within upstream's limit, decoding it (JSON, or
//! Kubernetes protobuf as client-go sends it) with upstream's errors, and the JSON, text and
//! `Status` responses with every header upstream sends on them.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use bytes::Bytes;
use serde_json::Value;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::ApiError;

/// Upstream's request body limit (3 MiB).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Reads a whole request body, refusing one past [`MAX_BODY`] with 413 as upstream.
pub async fn read(body: Body) -> Result<Bytes, ApiError> {
    match axum::body::to_bytes(body, MAX_BODY + 1).await {
        Ok(b) if b.len() <= MAX_BODY => Ok(b),
        // Past the limit, or the body could not be read (the limit is what cut it short).
        _ => Err(ApiError::too_large(MAX_BODY)),
    }
}

/// A JSON response.
pub fn json(code: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Body::from(body.into()));
    *r.status_mut() = code;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// A JSON response of a value.
pub fn json_value(code: StatusCode, v: &Value) -> Response<Body> {
    json(code, serde_json::to_vec(v).expect("a JSON value serializes"))
}

/// A plain-text response (health checks).
pub fn text(code: StatusCode, s: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Body::from(s.into()));
    *r.status_mut() = code;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// A `Status` error response, with `Retry-After` when the Status carries one (429, 503, 504).
pub fn error(e: &ApiError) -> Response<Body> {
    let mut r = json(StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), e.to_json());
    if let Some(s) = e.details.as_ref().and_then(|d| d.retry_after_seconds) {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

/// Decodes a request body (JSON, or Kubernetes protobuf) into a JSON object, refusing other
/// media types with 415.
pub fn decode_object(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("application/json");
    let media = ct.split(';').next().unwrap_or("").trim();
    if body.len() > MAX_BODY {
        return Err(ApiError::too_large(MAX_BODY));
    }
    if media == shardplane_apimachinery::protobuf::CONTENT_TYPE {
        return shardplane_apimachinery::protobuf::decode(body);
    }
    if media == "application/yaml" {
        // Within the YAML reader's alias bounds, duplicate keys last-wins as upstream's YAML
        // decoding does for a create or update.
        return shardplane_apimachinery::apply::parse_config(body, false).map(|(v, _)| v);
    }
    if !matches!(media, "application/json" | "" | "*/*") {
        return Err(ApiError::unsupported_media_type(ct));
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request("couldn't get version/kind; json parse error: the body must be a JSON object"));
    }
    Ok(v)
}

/// Checks the body's `apiVersion` and `kind` against the resource (400 as upstream). Absent ones
/// default to the endpoint's, as upstream decodes with the endpoint's kind as the default.
pub fn check_type(info: &ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_owned();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("").to_owned();
    if api_version.is_empty() {
        obj["apiVersion"] = Value::String(info.api_version());
    } else if api_version != info.api_version() {
        return Err(ApiError::bad_request(format!("the API version in the data ({api_version}) does not match the expected API version ({})", info.api_version())));
    }
    if kind.is_empty() {
        obj["kind"] = Value::String(info.kind.to_owned());
    } else if kind != info.kind {
        return Err(ApiError::bad_request(format!("the kind in the data ({kind}) does not match the expected kind ({})", info.kind)));
    }
    Ok(())
}

/// An object's stored bytes as the version `info` names serves them: a custom resource's objects
/// are stored in its storage version and answered in whichever served version was asked
/// (conversion `None`); a converted built-in version's are converted (RFC 0011); other
/// built-ins' pass unchanged.
pub fn served<'a>(info: &ResourceInfo, bytes: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
    shardplane_apimachinery::conversion::served_bytes(info, bytes)
}
