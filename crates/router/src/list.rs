//! Merged LIST (decision 5): one revision R for every shard, exact reads at R, a k-way merge by
//! (namespace, name), and continue tokens carrying R, the last key and the range-map epoch.

use crate::forward::{passthrough, Shards};
use axum::body::Body;
use axum::http::{header, HeaderMap, Response, StatusCode};
use serde_json::value::RawValue;
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

/// A shard's list answer with its entries left as raw JSON: a JSON list, a
/// PartialObjectMetadataList or a Table. Only each entry's key is parsed.
#[derive(serde::Deserialize)]
struct RawList {
    kind: String,
    #[serde(rename = "apiVersion")]
    api_version: String,
    #[serde(default)]
    metadata: Value,
    #[serde(default)]
    items: Option<Vec<Box<RawValue>>>,
    #[serde(default)]
    rows: Option<Vec<Box<RawValue>>>,
    #[serde(rename = "columnDefinitions", default)]
    column_definitions: Option<Box<RawValue>>,
}

#[derive(serde::Deserialize, Default)]
struct KeyMeta {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

#[derive(serde::Deserialize)]
struct KeyObject {
    #[serde(default)]
    metadata: KeyMeta,
}

#[derive(serde::Deserialize)]
struct Keyed {
    #[serde(default)]
    metadata: Option<KeyMeta>,
    #[serde(default)]
    object: Option<KeyObject>,
}

/// (namespace, name) of a list entry: an object, a PartialObjectMetadata, or a Table row.
fn entry_key(e: &RawValue) -> (String, String) {
    let k: Keyed = serde_json::from_str(e.get()).unwrap_or(Keyed { metadata: None, object: None });
    let m = k.metadata.or(k.object.map(|o| o.metadata)).unwrap_or_default();
    (m.namespace, m.name)
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

/// A merged page: the list's JSON (with the continue token, if any) and its content type.
pub struct MergedList {
    pub body: Vec<u8>,
    pub content_type: Option<axum::http::HeaderValue>,
    /// The raw entries, for callers that emit them one by one (a watch's initial state).
    pub entries: Vec<Box<RawValue>>,
}

/// One merged page at `rv` after `after`, or a shard's error answer verbatim.
pub async fn merged_page(shards: &Shards, t: &Target, query: &str, headers: &HeaderMap, rv: u64, after: Option<(String, String)>, limit: Option<u64>) -> Result<Result<MergedList, Response<Body>>, ApiError> {
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
    let answers = futures::future::join_all(urls.iter().map(|u| shards.get_bytes(u, &pq, accept))).await;
    let mut pages = Vec::new();
    let mut template: Option<(RawList, Option<axum::http::HeaderValue>)> = None;
    let mut remaining: Option<u64> = Some(0);
    for a in answers {
        let (status, ct, bytes) = a?;
        if !status.is_success() {
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            return Ok(Err(passthrough(status, &body)));
        }
        let mut list: RawList = serde_json::from_slice(&bytes).map_err(|e| ApiError::unavailable(format!("a shard answered with an unreadable list: {e}")))?;
        let entries = list.rows.take().or(list.items.take()).unwrap_or_default();
        let more = list.metadata.get("continue").and_then(Value::as_str).is_some_and(|c| !c.is_empty());
        remaining = match (remaining, list.metadata.get("remainingItemCount").and_then(Value::as_u64)) {
            (Some(r), Some(x)) => Some(r + x),
            (Some(r), None) if !more => Some(r),
            _ => None,
        };
        pages.push(ShardPage { items: entries.into_iter().map(|e| (entry_key(&e), e)).collect(), more });
        template.get_or_insert((list, ct));
    }
    let fetched: usize = pages.iter().map(|p| p.items.len()).sum();
    let merged = merge(pages, limit.map(|l| l as usize)).map_err(|e| ApiError::internal(format!("shard pages do not merge: {e}")))?;
    let (list, ct) = template.expect("at least one shard");
    let returned = merged.items.len();
    let mut meta = list.metadata.as_object().cloned().unwrap_or_default();
    meta.insert("resourceVersion".into(), json!(rv.to_string()));
    meta.remove("continue");
    meta.remove("remainingItemCount");
    if let Some(last) = &merged.continue_after {
        meta.insert("continue".into(), json!(ContinueToken { rv: Some(rv), after: last.clone(), epoch: Some(shards.epoch()) }.encode()));
        if let Some(r) = remaining {
            meta.insert("remainingItemCount".into(), json!(r + (fetched - returned) as u64));
        }
    }
    let entries: Vec<Box<RawValue>> = merged.items.into_iter().map(|(_, e)| e).collect();
    // Write the list around the entries' bytes, as a shard does: no entry is re-encoded.
    let mut body = Vec::with_capacity(entries.iter().map(|e| e.get().len() + 1).sum::<usize>() + 256);
    body.extend_from_slice(b"{\"kind\":");
    body.extend(serde_json::to_vec(&list.kind).expect("json"));
    body.extend_from_slice(b",\"apiVersion\":");
    body.extend(serde_json::to_vec(&list.api_version).expect("json"));
    body.extend_from_slice(b",\"metadata\":");
    body.extend(shardplane_apimachinery::encode::list_meta_bytes(&serde_json::Value::Object(meta)));
    if let Some(cols) = &list.column_definitions {
        body.extend_from_slice(b",\"columnDefinitions\":");
        body.extend_from_slice(cols.get().as_bytes());
    }
    body.extend_from_slice(if list.kind == "Table" { b",\"rows\":[" } else { b",\"items\":[" });
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(e.get().as_bytes());
    }
    body.extend_from_slice(b"]}");
    Ok(Ok(MergedList { body, content_type: ct, entries }))
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
        Ok(page) => {
            let mut r = Response::new(Body::from(page.body));
            *r.status_mut() = StatusCode::OK;
            r.headers_mut().insert(header::CONTENT_TYPE, page.content_type.unwrap_or(axum::http::HeaderValue::from_static("application/json")));
            Ok(r)
        }
    }
}
