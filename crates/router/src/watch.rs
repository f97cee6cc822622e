//! Merged WATCH (decision 6): one stream per shard from the same RV, each with in-band progress
//! bookmarks; events released in RV order by the coordinator's merge; lagging shards asked for a
//! mark on a side channel; a shard ERROR (410) or a broken shard stream ends the client's watch
//! cleanly at the last RV delivered.

use crate::forward::{passthrough, unavailable, Shards};
use crate::list::{merged_page, passed_query, revision_and_start, target_path};
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use shardplane_apimachinery::list_options::{ListOptions, WatchStart};
use shardplane_apimachinery::request_path::Target;
use shardplane_apimachinery::watch_event;
use shardplane_apimachinery::ApiError;
use shardplane_coordinator::watch_merge::{ShardInput, WatchMerge};
use shardplane_shard::handlers::{form_value, View};
use shardplane_shard::table;
use shardplane_shard::watch as shard_watch;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Events held back for a lagging shard before the client's watch is ended (it resumes).
const HELD_BACK: usize = 10_000;
/// Lagging shards are asked for a progress mark as soon as an event waits on them, then again
/// at most this often while it still waits.
const PROGRESS_EVERY: Duration = Duration::from_millis(2);

/// Just an object's resourceVersion.
#[derive(serde::Deserialize)]
struct ObjectRv {
    metadata: RvMeta,
}

#[derive(serde::Deserialize)]
struct RvMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
}

enum Line {
    Event(u64, Bytes),
    Progress(u64),
    Error(Bytes),
}

fn classify(line: &[u8]) -> Option<Line> {
    let v: Value = serde_json::from_slice(line).ok()?;
    let rv = || v.pointer("/object/metadata/resourceVersion").and_then(Value::as_str).and_then(|r| r.parse::<u64>().ok());
    match v["type"].as_str()? {
        "BOOKMARK" => Some(Line::Progress(rv()?)),
        "ERROR" => Some(Line::Error(Bytes::copy_from_slice(line))),
        _ => Some(Line::Event(rv()?, Bytes::copy_from_slice(line))),
    }
}

/// Serves a merged WATCH.
pub async fn watch(shards: Arc<Shards>, t: Target, o: ListOptions, query: &str, headers: &HeaderMap) -> Result<Response<Body>, ApiError> {
    // The client's representation (JSON, Table, PartialObjectMetadata): the shards render live
    // events in it; the initial state, read as JSON, is rendered here the same way.
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let view = View {
        repr: table::negotiate(headers).ok_or_else(|| ApiError::not_acceptable(accept))?,
        include: table::IncludeObject::parse(form_value(query, "includeObject").as_deref())?,
    };
    // Where every shard stream starts, and the initial state (read at that one revision).
    let (start, initial): (u64, Option<Vec<Box<serde_json::value::RawValue>>>) = match o.watch_start() {
        WatchStart::After(rv) => (rv, None),
        _ => {
            let (rv, _) = revision_and_start(&shards, &ListOptions { continue_token: None, limit: None, ..o.clone() }).await?;
            let mut json_only = headers.clone();
            json_only.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
            let list_query = passed_query(query, &["sendInitialEvents", "timeoutSeconds", "progressBookmarks"]);
            match merged_page(&shards, &t, &list_query, &json_only, rv, None, None).await? {
                Err(shard_error) => return Ok(shard_error),
                Ok(page) => (rv, Some(page.entries)),
            }
        }
    };
    let path = target_path(&t);
    let mut q = passed_query(query, &["sendInitialEvents", "progressBookmarks"]);
    if !q.is_empty() {
        q.push('&');
    }
    q.push_str(&format!("watch=1&resourceVersion={start}&allowWatchBookmarks=true&progressBookmarks=always"));
    let mut streams = Vec::new();
    let urls = shards.urls();
    for base in &urls {
        let mut req = shards.request(axum::http::Method::GET, format!("{base}{path}?{q}"));
        if let Some(a) = headers.get(header::ACCEPT) {
            req = req.header(header::ACCEPT, a);
        }
        let resp = req.send().await.map_err(|e| unavailable(base, &e))?;
        if resp.status() == StatusCode::MISDIRECTED_REQUEST {
            return Err(crate::forward::refusal(&resp.bytes().await.unwrap_or_default()));
        }
        if !resp.status().is_success() {
            let status = resp.status();
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            return Ok(passthrough(status, &body));
        }
        streams.push(resp);
    }
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let (in_tx, mut in_rx) = mpsc::channel::<(usize, Option<Line>)>(1024);
    for (i, resp) in streams.into_iter().enumerate() {
        let in_tx = in_tx.clone();
        tokio::spawn(async move {
            let mut body = resp.bytes_stream();
            let mut buf: Vec<u8> = Vec::new();
            while let Some(Ok(chunk)) = body.next().await {
                buf.extend_from_slice(&chunk);
                while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=pos).collect();
                    if let Some(l) = classify(&line) {
                        if in_tx.send((i, Some(l))).await.is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = in_tx.send((i, None)).await;
        });
    }
    drop(in_tx);
    let k = urls.len();
    let progress_path = format!("/shardplane/v1/progress?group={}&resource={}", t.info.group, t.info.plural);
    let allow_bookmarks = o.allow_bookmarks;
    let send_initial_end = matches!(o.watch_start(), WatchStart::InitialEvents(_)) && o.allow_bookmarks;
    let http = shards.http.clone();
    let every = shards.bookmark_interval;
    tokio::spawn(async move {
        if let Some(items) = initial {
            for item in &items {
                let rv = serde_json::from_str::<ObjectRv>(item.get()).ok().and_then(|o| o.metadata.resource_version.parse().ok()).unwrap_or(start);
                if tx.send(shard_watch::event(&t.info, view, "ADDED", item.get().as_bytes(), rv)).await.is_err() {
                    return;
                }
            }
            if send_initial_end && tx.send(watch_event::bookmark(&t.info, start, true)).await.is_err() {
                return;
            }
        }
        let mut merge: WatchMerge<Bytes> = WatchMerge::new(k, start, HELD_BACK);
        let mut ask = tokio::time::interval(PROGRESS_EVERY);
        let mut bookmarks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let mut bookmarked = start;
        let mut asked = vec![tokio::time::Instant::now() - PROGRESS_EVERY; k];
        // Asks the shards holding back an event for a mark; never waits for the answer (it comes
        // in-band on their streams).
        let ask_lagging = |merge: &WatchMerge<Bytes>, asked: &mut Vec<tokio::time::Instant>| {
            let now = tokio::time::Instant::now();
            for shard in merge.lagging() {
                if now.duration_since(asked[shard]) >= PROGRESS_EVERY {
                    asked[shard] = now;
                    let req = http.post(format!("{}{progress_path}", urls[shard]));
                    tokio::spawn(async move {
                        let _ = req.send().await;
                    });
                }
            }
        };
        loop {
            tokio::select! {
                msg = in_rx.recv() => {
                    let Some((shard, line)) = msg else { break };
                    let input = match line {
                        Some(Line::Event(rv, bytes)) => ShardInput::Event { rv, item: bytes },
                        Some(Line::Progress(rv)) => ShardInput::Progress(rv),
                        Some(Line::Error(bytes)) => {
                            let _ = tx.send(bytes).await;
                            break;
                        }
                        None => ShardInput::Closed,
                    };
                    if let Err(e) = merge.push(shard, input) {
                        tracing::warn!(error = %e, "ending merged watch");
                        break;
                    }
                    while let Some((_, line)) = merge.pop() {
                        if tx.send(line).await.is_err() {
                            return;
                        }
                    }
                    if merge.finished() {
                        break;
                    }
                    ask_lagging(&merge, &mut asked);
                }
                _ = ask.tick() => ask_lagging(&merge, &mut asked),
                _ = bookmarks.tick(), if allow_bookmarks => {
                    if let Some(rv) = merge.bookmark().filter(|rv| *rv > bookmarked) {
                        bookmarked = rv;
                        if tx.send(watch_event::bookmark(&t.info, rv, false)).await.is_err() {
                            return;
                        }
                    }
                }
                _ = tx.closed() => return,
            }
        }
    });
    let body = Body::from_stream(ReceiverStream::new(rx).map(Ok::<Bytes, std::convert::Infallible>));
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(r)
}
