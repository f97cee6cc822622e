//! Merged LIST (decision 5): one revision R for every shard, exact reads at R, a k-way merge by
//! (namespace, name), and continue tokens carrying R, the last key and the range-map epoch.

use crate::forward::{passthrough, Shards};
use axum::body::Body;
use axum::http::{header, HeaderMap, Response, StatusCode};
use serde_json::{json, Value};
use shardplane_apimachinery::continue_token::ContinueToken;
use shardplane_apimachinery::list_options::{ListOptions, ListSemantics};
use shardplane_apimachinery::request_path::Target;
use shardplane_apimachinery::ApiError;
use shardplane_coordinator::list_merge::{merge, ShardPage};

/// Query parameters the router sets itself for every shard.
const OWNED_PARAMS: [&str; 6] = ["resourceVersion", "resourceVersionMatch", "continue", "limit", "watch", "allowWatchBookmarks"];

/// The client's query without the parameters the router sets.
pub fn passed_query(query: &str, also_drop: &[&str]) -> String {
    form_urlencoded_filter(query, |k| !OWNED_PARAMS.contains(&k) && !also_drop.contains(&k))
}

fn form_urlencoded_filter(query: &str, keep: impl Fn(&str) -> bool) -> String {
    query.split('&').filter(|p| !p.is_empty()).filter(|p| keep(p.split('=').next().unwrap_or(""))).collect::<Vec<_>>().join("&")
}

/// (namespace, name) of a list entry: an object, a PartialObjectMetadata, or a Table row.
fn entry_key(e: &Value) -> (String, String) {
    let meta = e.get("metadata").or_else(|| e.pointer("/object/metadata")).cloned().unwrap_or(Value::Null);
    let s = |f: &str| meta.get(f).and_then(Value::as_str).unwrap_or("").to_owned();
    (s("namespace"), s("name"))
}

/// The revision a LIST reads every shard at, and the key it resumes after.
pub async fn revision_and_start(shards: &Shards, o: &ListOptions) -> Result<(u64, Option<(String, String)>), ApiError> {
    if let Some(t) = &o.continue_token {
        if t.epoch.is_some_and(|e| e != shards.epoch()) {
            // The ranges moved since the first page: the pages are no longer one snapshot.
            return Err(ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.", None));
        }
        let rv = match t.rv {
            Some(rv) => rv,
            None => shards.current_revision().await?,
        };
        return Ok((rv, Some(t.after.clone())));
    }
    let rv = match o.list_semantics() {
        ListSemantics::Exact(rv) => rv,
        ListSemantics::NotOlderThan(rv) => rv.max(shards.current_revision().await?),
        ListSemantics::MostRecent | ListSemantics::Any => shards.current_revision().await?,
    };
    Ok((rv, None))
}

/// One merged page at `rv` after `after`. Returns the first shard's response with the merged
/// entries, or a shard's error answer verbatim.
pub async fn merged_page(shards: &Shards, t: &Target, query: &str, headers: &HeaderMap, rv: u64, after: Option<(String, String)>, limit: Option<u64>) -> Result<Result<(Value, Option<axum::http::HeaderValue>, Option<(String, String)>), Response<Body>>, ApiError> {
    let path = target_path(t);
    let mut q = passed_query(query, &[]);
    let mut push = |kv: String| {
        if !q.is_empty() {
            q.push('&');
        }
        q.push_str(&kv);
    };
    match &after {
        Some(a) => push(format!("continue={}", ContinueToken { rv: Some(rv), after: a.clone(), epoch: None }.encode())),
        None => push(format!("resourceVersion={rv}&resourceVersionMatch=Exact")),
    }
    if let Some(l) = limit {
        push(format!("limit={l}"));
    }
    let accept = headers.get(header::ACCEPT);
    let pq = format!("{path}?{q}");
    let urls = shards.urls();
    let answers = futures::future::join_all(urls.iter().map(|u| shards.get_json(u, &pq, accept))).await;
    let mut pages = Vec::new();
    let mut template: Option<(Value, Option<axum::http::HeaderValue>)> = None;
    let mut remaining: Option<u64> = Some(0);
    for a in answers {
        let (status, ct, body) = a?;
        if !status.is_success() {
            return Ok(Err(passthrough(status, &body)));
        }
        let field = if body.get("rows").is_some() { "rows" } else { "items" };
        let entries: Vec<Value> = body[field].as_array().cloned().unwrap_or_default();
        let more = body.pointer("/metadata/continue").and_then(Value::as_str).is_some_and(|c| !c.is_empty());
        remaining = match (remaining, body.pointer("/metadata/remainingItemCount").and_then(Value::as_u64)) {
            (Some(r), Some(x)) => Some(r + x),
            (Some(r), None) if !more => Some(r),
            _ => None,
        };
        pages.push(ShardPage { items: entries.into_iter().map(|e| (entry_key(&e), e)).collect(), more });
        template.get_or_insert((body, ct));
    }
    let fetched: usize = pages.iter().map(|p| p.items.len()).sum();
    let merged = merge(pages, limit.map(|l| l as usize)).map_err(|e| ApiError::internal(format!("shard pages do not merge: {e}")))?;
    let (mut body, ct) = template.expect("at least one shard");
    let field = if body.get("rows").is_some() { "rows" } else { "items" };
    let returned = merged.items.len();
    body[field] = Value::Array(merged.items.into_iter().map(|(_, e)| e).collect());
    let meta = body["metadata"].as_object_mut().expect("list metadata");
    meta.insert("resourceVersion".into(), json!(rv.to_string()));
    meta.remove("continue");
    meta.remove("remainingItemCount");
    if let Some(last) = &merged.continue_after {
        meta.insert("continue".into(), json!(ContinueToken { rv: Some(rv), after: last.clone(), epoch: Some(shards.epoch()) }.encode()));
        if let Some(r) = remaining {
            meta.insert("remainingItemCount".into(), json!(r + (fetched - returned) as u64));
        }
    }
    Ok(Ok((body, ct, merged.continue_after)))
}

/// The resource path of a target (collection).
pub fn target_path(t: &Target) -> String {
    let base = if t.info.group.is_empty() { format!("/api/{}", t.info.version) } else { format!("/apis/{}/{}", t.info.group, t.info.version) };
    match &t.namespace {
        Some(ns) => format!("{base}/namespaces/{ns}/{}", t.info.plural),
        None => format!("{base}/{}", t.info.plural),
    }
}

/// A merged LIST.
pub async fn list(shards: &Shards, t: &Target, o: &ListOptions, query: &str, headers: &HeaderMap) -> Result<Response<Body>, ApiError> {
    let (rv, after) = revision_and_start(shards, o).await?;
    match merged_page(shards, t, query, headers, rv, after, o.limit).await? {
        Err(shard_error) => Ok(shard_error),
        Ok((body, ct, _)) => {
            let mut r = Response::new(Body::from(serde_json::to_vec(&body).expect("json")));
            *r.status_mut() = StatusCode::OK;
            r.headers_mut().insert(header::CONTENT_TYPE, ct.unwrap_or(axum::http::HeaderValue::from_static("application/json")));
            Ok(r)
        }
    }
}
