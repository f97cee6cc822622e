//! Merged LIST (RFC 0003, "LIST"): one revision R for every shard, exact reads at R, a k-way merge by
//! (namespace, name), and continue tokens carrying R, the last key and the range-map epoch.

use crate::forward::passthrough;
use crate::state::RouterState;
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Response};
use serde_json::{json, Value};
use shardplane_apimachinery::continue_token::ContinueToken;
use shardplane_http::Query;
use shardplane_apimachinery::list_options::{ListOptions, ListSemantics};
use shardplane_apimachinery::request_path::Target;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::ApiError;
use crate::list_stream::{EntrySplitter, Head};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use shardplane_coordinator::list_merge::{merge, ShardPage};

/// Query parameters the router sets itself for every shard.
const OWNED_PARAMS: [&str; 6] = ["resourceVersion", "resourceVersionMatch", "continue", "limit", "watch", "allowWatchBookmarks"];

/// The client's query without the parameters the router sets (and `also_drop`), compared by
/// their decoded names as the shard reads them.
pub fn passed_query(query: &Query, also_drop: &[&str]) -> String {
    let names: Vec<&str> = OWNED_PARAMS.iter().chain(also_drop).copied().collect();
    query.without(&names)
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
///
/// RouterState write `kind`, `apiVersion` and `metadata` first (and a Table row's object after its
/// cells, whose strings cannot contain an unescaped `"metadata":`), so the first `"metadata":`
/// is the entry's own: only that object is parsed, not the whole entry (a pod is ~3.6 KiB, its
/// metadata a few hundred bytes). Anything else falls back to a full parse.
pub fn entry_key_of(e: &[u8]) -> (String, String) {
    if let Some(at) = memchr::memmem::find(e, b"\"metadata\":") {
        if let Some(key) = shardplane_apimachinery::encode::ordered_meta_key(&e[at + 11..]) {
            return key;
        }
        let mut de = serde_json::Deserializer::from_slice(&e[at + 11..]).into_iter::<KeyMeta>();
        if let Some(Ok(m)) = de.next() {
            return (m.namespace, m.name);
        }
    }
    entry_key_in(std::str::from_utf8(e).unwrap_or(""))
}

/// The full parse, for an entry not in the layout shards write.
fn entry_key_in(s: &str) -> (String, String) {
    let k: Keyed = serde_json::from_str(s).unwrap_or(Keyed { metadata: None, object: None });
    let m = k.metadata.or(k.object.map(|o| o.metadata)).unwrap_or_default();
    (m.namespace, m.name)
}

/// The revision a LIST reads every shard at, and the key it resumes after.
pub async fn revision_and_start(shards: &RouterState, info: &ResourceInfo, o: &ListOptions) -> Result<(u64, Option<(String, String)>), ApiError> {
    if let Some(t) = &o.continue_token {
        if t.epoch.is_some_and(|e| e != shards.epoch()) {
            // The ranges moved since the first page: the pages are no longer one snapshot.
            return Err(ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.", None));
        }
        let rv = match t.rv {
            Some(rv) => rv,
            None => shards.current_revision(info).await?,
        };
        return Ok((rv, Some(t.after.clone())));
    }
    let rv = match o.list_semantics() {
        ListSemantics::Exact(rv) => rv,
        ListSemantics::NotOlderThan(rv) => rv.max(shards.current_revision(info).await?),
        ListSemantics::MostRecent | ListSemantics::Any => shards.current_revision(info).await?,
    };
    Ok((rv, None))
}

/// How many entries to ask each of `k` shards for, for a page of `limit`. Keys spread over the
/// shards by hash, so each holds about 1/k of any stretch of the key order: a quarter more than
/// that share, plus a little, usually fills the page, while asking each for `limit` would fetch
/// k pages to return one. The merge stops at the last key of a shard that has more (I4), so a page
/// may come out shorter than `limit`, which the API allows ("limit is a maximum"); the next page
/// resumes there.
pub fn shard_page_limit(limit: u64, k: usize) -> u64 {
    // `limit` is the client's number: saturate rather than overflow (a debug build panics).
    let k = k.max(1) as u64;
    limit.min(limit.saturating_mul(5).div_ceil(k.saturating_mul(4)).saturating_add(8))
}

/// A merged page: the list's head, its entries as the shards sent them, and where the next
/// page starts.
pub struct MergedList {
    /// The list's JSON up to and including its items' `[` (with the continue token, if any).
    head: Vec<u8>,
    pub content_type: Option<HeaderValue>,
    /// The entries' bytes, for callers that emit them one by one (a watch's initial state).
    pub entries: Vec<Bytes>,
    /// The last key of this page when there are more (the next page starts after it).
    pub next_after: Option<(String, String)>,
}

/// Bytes of entries the list body copies into one chunk before sending it: few enough writes
/// for a large list, one chunk in memory besides the entries not yet sent.
const BODY_CHUNK: usize = 64 * 1024;

impl MergedList {
    /// The list as a response body: the head, the entries (none re-encoded; each released once
    /// it is copied into the chunk being sent) and the tail, with its exact length.
    pub fn into_response(self) -> Response<Body> {
        let length = self.head.len() + self.entries.iter().map(|e| e.len()).sum::<usize>() + self.entries.len().saturating_sub(1) + 2;
        let mut entries = self.entries.into_iter().enumerate().peekable();
        let mut head = Some(self.head);
        let chunks = std::iter::from_fn(move || {
            let mut chunk = BytesMut::with_capacity(BODY_CHUNK);
            if let Some(h) = head.take() {
                chunk.extend_from_slice(&h);
            } else if entries.peek().is_none() {
                return None;
            }
            while chunk.len() < BODY_CHUNK && let Some((i, e)) = entries.next() {
                if i > 0 {
                    chunk.extend_from_slice(b",");
                }
                chunk.extend_from_slice(&e);
            }
            if entries.peek().is_none() {
                chunk.extend_from_slice(b"]}");
            }
            Some(Ok::<Bytes, std::convert::Infallible>(chunk.freeze()))
        });
        let mut r = Response::new(Body::from_stream(futures::stream::iter(chunks)));
        r.headers_mut().insert(header::CONTENT_TYPE, self.content_type.unwrap_or(HeaderValue::from_static("application/json")));
        r.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        r
    }
}

/// One shard's part of a page: its list head, content type and entries with their keys.
struct ShardAnswer {
    head: Head,
    content_type: Option<HeaderValue>,
    entries: Vec<((String, String), Bytes)>,
}

/// Reads one shard's page, splitting it into entries (and reading each one's key) as its bytes
/// arrive, so the work overlaps the transfer; or the shard's error answer verbatim.
async fn read_shard_page(shards: &RouterState, url: &str, path_and_query: &str, accept: Option<&HeaderValue>) -> Result<Result<ShardAnswer, Response<Body>>, ApiError> {
    let resp = shards.get_streaming(url, path_and_query, accept, true).await?;
    let status = resp.status();
    if !status.is_success() {
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        return Ok(Err(passthrough(status, &body)));
    }
    let content_type = resp.headers().get(header::CONTENT_TYPE).cloned();
    let mut body = resp.bytes_stream();
    let mut splitter = EntrySplitter::new();
    let mut entries = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| crate::forward::unavailable(url, &e))?;
        entries.extend(splitter.push(&chunk).map_err(unreadable)?.into_iter().map(|e| (entry_key_of(&e), e)));
    }
    if !splitter.done() {
        return Err(unreadable("the list ends early".into()));
    }
    let head = splitter.into_head().expect("a finished list has its head");
    Ok(Ok(ShardAnswer { head, content_type, entries }))
}

/// One merged page at `rv` after `after`, or a shard's error answer verbatim.
pub async fn merged_page(shards: &RouterState, t: &Target, query: &Query, headers: &HeaderMap, rv: u64, after: Option<(String, String)>, limit: Option<u64>) -> Result<Result<MergedList, Response<Body>>, ApiError> {
    let urls = shards.urls();
    let pq = shard_request(t, query, rv, after.as_ref(), limit.map(|l| shard_page_limit(l, urls.len())));
    let accept = headers.get(header::ACCEPT);
    let answers = futures::future::join_all(urls.iter().map(|u| read_shard_page(shards, u, &pq, accept))).await;
    let mut pages = Vec::new();
    let mut template: Option<(Head, Option<HeaderValue>)> = None;
    let mut remaining: Option<u64> = Some(0);
    for a in answers {
        let answer = match a? {
            Ok(answer) => answer,
            Err(shard_error) => return Ok(Err(shard_error)),
        };
        let meta = &answer.head.list["metadata"];
        let more = meta.get("continue").and_then(Value::as_str).is_some_and(|c| !c.is_empty());
        remaining = match (remaining, meta.get("remainingItemCount").and_then(Value::as_u64)) {
            (Some(r), Some(x)) => Some(r + x),
            (Some(r), None) if !more => Some(r),
            _ => None,
        };
        pages.push(ShardPage { items: answer.entries, more });
        template.get_or_insert((answer.head, answer.content_type));
    }
    let fetched: usize = pages.iter().map(|p| p.items.len()).sum();
    let merged = merge(pages, limit.map(|l| l as usize)).map_err(|e| ApiError::internal(format!("shard pages do not merge: {e}")))?;
    let (head, ct) = template.expect("at least one shard");
    let returned = merged.items.len();
    let mut meta = head.list["metadata"].as_object().cloned().unwrap_or_default();
    meta.insert("resourceVersion".into(), json!(rv.to_string()));
    meta.remove("continue");
    meta.remove("remainingItemCount");
    if let Some(last) = &merged.continue_after {
        meta.insert("continue".into(), json!(ContinueToken { rv: Some(rv), after: last.clone(), epoch: Some(shards.epoch()) }.encode()));
        if let Some(r) = remaining {
            meta.insert("remainingItemCount".into(), json!(r + (fetched - returned) as u64));
        }
    }
    let entries: Vec<Bytes> = merged.items.into_iter().map(|(_, e)| e).collect();
    Ok(Ok(MergedList { head: list_head(&head, &Value::Object(meta)), content_type: ct, entries, next_after: merged.continue_after }))
}

/// A page from the only shard: its answer as it stands, but for the continue token, which
/// becomes the router's (with the range-map epoch). Nothing needs merging, so nothing is split:
/// once the head has arrived and is rewritten, the rest of the shard's body streams through.
async fn single_shard_page(shards: &RouterState, t: &Target, query: &Query, headers: &HeaderMap, rv: u64, after: Option<(String, String)>, limit: Option<u64>) -> Result<Response<Body>, ApiError> {
    let url = shards.urls()[0].clone();
    let resp = shards.get_streaming(&url, &shard_request(t, query, rv, after.as_ref(), limit), headers.get(header::ACCEPT), false).await?;
    let status = resp.status();
    if !status.is_success() {
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        return Ok(passthrough(status, &body));
    }
    let ct = resp.headers().get(header::CONTENT_TYPE).cloned();
    let mut body = resp.bytes_stream();
    let mut buf = BytesMut::new();
    let (head, at) = loop {
        if let Some(head) = crate::list_stream::read_head(&buf) {
            break head.map_err(unreadable)?;
        }
        match body.next().await {
            Some(chunk) => buf.extend_from_slice(&chunk.map_err(|e| crate::forward::unavailable(&url, &e))?),
            None => return Err(unreadable("no items".into())),
        }
    };
    let mut meta = head.list["metadata"].clone();
    meta["resourceVersion"] = json!(rv.to_string());
    if let Some(token) = meta.get("continue").and_then(Value::as_str).filter(|c| !c.is_empty()) {
        let mut token = ContinueToken::decode(token).map_err(unreadable)?;
        token.epoch = Some(shards.epoch());
        meta["continue"] = json!(token.encode());
    }
    let mut first = list_head(&head, &meta);
    first.extend_from_slice(&buf[at..]);
    let rest = futures::stream::once(std::future::ready(Ok(Bytes::from(first)))).chain(body.map(|c| c.map_err(std::io::Error::other)));
    let mut r = Response::new(Body::from_stream(rest));
    r.headers_mut().insert(header::CONTENT_TYPE, ct.unwrap_or(HeaderValue::from_static("application/json")));
    Ok(r)
}

/// What every shard is asked for a page at `rv`: the client's own parameters, the revision (or,
/// after `after`, a continue token in the shards' format carrying it) and a limit, if any.
fn shard_request(t: &Target, query: &Query, rv: u64, after: Option<&(String, String)>, limit: Option<u64>) -> String {
    let mut q = passed_query(query, &[]);
    if !q.is_empty() {
        q.push('&');
    }
    match after {
        Some(a) => q.push_str(&format!("continue={}", ContinueToken { rv: Some(rv), after: a.clone(), epoch: None }.encode())),
        None => q.push_str(&format!("resourceVersion={rv}&resourceVersionMatch=Exact")),
    }
    if let Some(l) = limit {
        q.push_str(&format!("&limit={l}"));
    }
    format!("{}?{q}", target_path(t))
}

fn unreadable(e: String) -> ApiError {
    ApiError::unavailable(format!("a shard answered with an unreadable list: {e}"))
}

/// The opening of a merged list: kind, apiVersion, `meta`, a Table's columns, and the opening
/// of its entries.
pub fn list_head(head: &Head, meta: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"{\"kind\":");
    out.extend(serde_json::to_vec(&head.list["kind"]).expect("json"));
    out.extend_from_slice(b",\"apiVersion\":");
    out.extend(serde_json::to_vec(&head.list["apiVersion"]).expect("json"));
    out.extend_from_slice(b",\"metadata\":");
    out.extend(shardplane_apimachinery::encode::list_meta_bytes(meta));
    if let Some(cols) = head.list.get("columnDefinitions") {
        out.extend_from_slice(b",\"columnDefinitions\":");
        out.extend(serde_json::to_vec(cols).expect("json"));
    }
    out.extend_from_slice(if head.rows { b",\"rows\":[" } else { b",\"items\":[" });
    out
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
pub async fn list(shards: &RouterState, t: &Target, o: &ListOptions, query: &Query, headers: &HeaderMap) -> Result<Response<Body>, ApiError> {
    let (rv, after) = revision_and_start(shards, &t.info, o).await?;
    if o.limit.is_none() && after.is_none() {
        // Unpaged: streamed through the merge, never held whole.
        return crate::list_stream::streamed_list(shards, &shard_request(t, query, rv, None, None), headers, rv).await;
    }
    if shards.urls().len() == 1 {
        return single_shard_page(shards, t, query, headers, rv, after, o.limit).await;
    }
    match merged_page(shards, t, query, headers, rv, after, o.limit).await? {
        Err(shard_error) => Ok(shard_error),
        Ok(page) => Ok(page.into_response()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A merged page's body is its head, its entries joined by commas and the tail, whatever
        /// the sizes (chunks split anywhere), and the length it declares is exact.
        #[test]
        fn a_merged_page_body_is_its_entries_in_order_at_its_declared_length(sizes in proptest::collection::vec(0usize..40_000, 0..12)) {
            let entries: Vec<Bytes> = sizes.iter().enumerate().map(|(i, n)| Bytes::from(format!("{{\"i\":{i},\"pad\":\"{}\"}}", "x".repeat(*n)))).collect();
            let page = MergedList { head: b"{\"kind\":\"L\",\"items\":[".to_vec(), content_type: None, entries: entries.clone(), next_after: None };
            let r = page.into_response();
            let declared: usize = r.headers()[header::CONTENT_LENGTH].to_str().unwrap().parse().unwrap();
            let body = futures::executor::block_on(axum::body::to_bytes(r.into_body(), usize::MAX)).unwrap();
            prop_assert_eq!(declared, body.len());
            let list: Value = serde_json::from_slice(&body).unwrap();
            let got: Vec<Value> = list["items"].as_array().unwrap().clone();
            let want: Vec<Value> = entries.iter().map(|e| serde_json::from_slice(e).unwrap()).collect();
            prop_assert_eq!(got, want);
        }
    }

    fn key(json: &str) -> (String, String) {
        entry_key_of(json.as_bytes())
    }

    #[test]
    fn entry_keys_of_objects_metadata_and_table_rows() {
        let k = |ns: &str, n: &str| (ns.to_owned(), n.to_owned());
        assert_eq!(key(r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"d","namespace":"a","labels":{"x":"y"}},"spec":{"template":{"metadata":{"name":"other"}}}}"#), k("a", "d"));
        assert_eq!(key(r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"namespace":"b","name":"p"}}"#), k("b", "p"));
        assert_eq!(key(r#"{"cells":["say \"metadata\": no",1],"object":{"kind":"PartialObjectMetadata","metadata":{"name":"r","namespace":"c"}}}"#), k("c", "r"));
        assert_eq!(key(r#"{"kind":"Namespace","metadata":{"name":"cluster-scoped"}}"#), k("", "cluster-scoped"));
        // Not the layout shards write: the full parse still finds the key.
        assert_eq!(key(r#"{"spec":{"x":1},"metadata":{"name":"late","namespace":"d"}}"#), k("d", "late"));
        assert_eq!(key(r#"{"metadata":{"labels":{},"namespace":"e","name":"n"}}"#), k("e", "n"));
        assert_eq!(key(r#"{"metadata":{"name":"n","labels":{"a":"b"},"namespace":"f"}}"#), k("f", "n"));
        assert_eq!(key(r#"{"metadata":{"name":"n\u0041","namespace":"g"}}"#), k("g", "nA"));
        // The Go-order fast path: generateName skipped, cluster-scoped ends or goes on to uid.
        assert_eq!(key(r#"{"metadata":{"name":"a-x","generateName":"a-","namespace":"h","uid":"1"}}"#), k("h", "a-x"));
        assert_eq!(key(r#"{"metadata":{"name":"c","uid":"1"}}"#), k("", "c"));
        assert_eq!(key(r#"{"metadata":{"name":"c"}}"#), k("", "c"));
    }

    #[test]
    fn shard_pages_ask_for_a_share_of_the_limit() {
        assert_eq!(shard_page_limit(500, 1), 500);
        assert_eq!(shard_page_limit(500, 4), 165);
        assert_eq!(shard_page_limit(500, 8), 87);
        assert_eq!(shard_page_limit(1, 8), 1);
        assert_eq!(shard_page_limit(10, 0), 10);
        // A client's largest limit saturates instead of overflowing.
        assert_eq!(shard_page_limit(u64::MAX, 4), (1 << 60) + 8);
        assert_eq!(shard_page_limit(u64::MAX, 1), (1 << 62) + 8);
    }
}
