//! Reads rendered from cached objects: one object or a list in the negotiated representation,
//! a JSON list serialized from the cached bytes without re-encoding them.

use axum::body::Body;
use axum::http::{Response, StatusCode};
use bytes::Bytes;
use serde_json::Value;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::ApiError;
use shardplane_http::body::{json, served};
use shardplane_http::negotiation::{Representation, View};
use shardplane_watchcache::CachedObject;
use std::sync::Arc;

/// Renders cached objects as a list, or as a Table or PartialObjectMetadata(List); `single`
/// renders one object as itself.
pub fn render(view: &View, info: &ResourceInfo, items: &[Arc<CachedObject>], meta: Value, single: bool) -> Result<Response<Body>, ApiError> {
    match view.repr {
        Representation::Json if single => Ok(json(StatusCode::OK, match served(info, &items[0].bytes) {
            std::borrow::Cow::Borrowed(_) => items[0].bytes.clone(),
            std::borrow::Cow::Owned(b) => b.into(),
        })),
        Representation::Json => {
            let rv = meta["resourceVersion"].as_str().and_then(|r| r.parse().ok()).unwrap_or(0);
            Ok(json(StatusCode::OK, list(info, rv, meta["continue"].as_str(), meta["remainingItemCount"].as_u64(), meta["shardInfo"]["selector"].as_str(), items, view.lines)))
        }
        _ => {
            let bytes: Vec<&[u8]> = items.iter().map(|o| o.bytes.as_ref()).collect();
            view.transformed(info, StatusCode::OK, &bytes, meta, single)
        }
    }
}

/// Serializes a list response from cached bytes without re-encoding the items; with `lines`,
/// each item on a line of its own (cached bytes are compact JSON, which has no raw newline).
pub fn list(info: &ResourceInfo, rv: u64, continue_token: Option<&str>, remaining: Option<u64>, shard_info: Option<&str>, items: &[Arc<CachedObject>], lines: bool) -> Bytes {
    let mut meta = serde_json::Map::new();
    meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    if let Some(c) = continue_token {
        meta.insert("continue".into(), Value::String(c.to_owned()));
    }
    if let Some(r) = remaining {
        meta.insert("remainingItemCount".into(), Value::from(r));
    }
    if let Some(s) = shard_info {
        meta.insert("shardInfo".into(), serde_json::json!({ "selector": s }));
    }
    let head = serde_json::json!({"kind": info.list_kind, "apiVersion": info.api_version(), "metadata": meta});
    let mut out = shardplane_apimachinery::encode::object_bytes(&head);
    out.pop(); // reopen the object
    out.extend_from_slice(b",\"items\":[");
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if lines {
            out.push(b'\n');
        }
        out.extend_from_slice(&served(info, &o.bytes));
    }
    if lines {
        out.push(b'\n');
    }
    out.extend_from_slice(b"]}");
    Bytes::from(out)
}
