//! One merged upstream: K shard watch streams opened after one RV, merged in RV order by the
//! coordinator's [`WatchMerge`] on in-band progress marks, with lagging shards asked for a mark
//! on the side channel. It yields [`Merged`] items on a bounded channel and ends (the channel
//! closes) when a shard stream breaks, when a shard sends an ERROR (passed on first), or when
//! more than [`HELD_BACK`] events wait on a lagging shard. A shard stream that ends normally
//! (the shard's own request timeout) is reopened after that shard's mark, so the merged stream
//! outlives it with no gap and no repeat.

use crate::forward::{passthrough, refusal, unavailable, Shards};
use axum::body::Body;
use axum::http::{header, HeaderValue, Method, Response, StatusCode};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use shardplane_coordinator::watch_merge::{ShardInput, WatchMerge};
use shardplane_apimachinery::ApiError;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Events held back for a lagging shard before the merged stream ends (its clients resume).
pub const HELD_BACK: usize = 10_000;
/// Lagging shards are asked for a progress mark as soon as an event waits on them, then again
/// at most this often while it still waits.
const PROGRESS_EVERY: Duration = Duration::from_millis(2);
/// Progress marks are passed on at most this often (they only feed bookmarks).
const MARK_EVERY: Duration = Duration::from_millis(50);
/// Items buffered between the merge and its consumer.
const OUT_BUFFER: usize = 256;

/// What a merged upstream yields.
#[derive(Clone, Debug)]
pub enum Merged {
    /// A watch event line (as the shards rendered it) at this RV.
    Event(u64, Bytes),
    /// Every event up to this RV has been yielded.
    Mark(u64),
    /// A shard's ERROR event line; nothing follows.
    Error(Bytes),
}

/// What to watch on every shard.
#[derive(Clone, Debug)]
pub struct UpstreamSpec {
    /// The collection path, e.g. `/api/v1/namespaces/demo/configmaps`.
    pub path: String,
    /// The client's filters (selectors, includeObject), without any parameter that sets where
    /// or how long the watch runs.
    pub query: String,
    /// The client's Accept header: shards render events in it.
    pub accept: Option<HeaderValue>,
    /// Where to ask a lagging shard for progress.
    pub progress_path: String,
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

/// Opens one shard stream of every change after `after`; a refusal for a stale map is an error
/// (code 421), any other non-success answer is passed on as the response to give the client.
async fn open_one(shards: &Shards, base: &str, spec: &UpstreamSpec, after: u64) -> Result<Result<reqwest::Response, Response<Body>>, ApiError> {
    let mut q = spec.query.clone();
    if !q.is_empty() {
        q.push('&');
    }
    q.push_str(&format!("watch=1&resourceVersion={after}&allowWatchBookmarks=true&progressBookmarks=always"));
    let mut req = shards.request(Method::GET, format!("{base}{}?{q}", spec.path));
    if let Some(a) = &spec.accept {
        req = req.header(header::ACCEPT, a);
    }
    let resp = req.send().await.map_err(|e| unavailable(base, &e))?;
    if resp.status() == StatusCode::MISDIRECTED_REQUEST {
        return Err(refusal(&resp.bytes().await.unwrap_or_default()));
    }
    if !resp.status().is_success() {
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        return Ok(Err(passthrough(status, &body)));
    }
    Ok(Ok(resp))
}

/// Reads one shard stream into the merge's input channel; sends `None` when it ends. Stops (and
/// so closes the shard stream) as soon as the merge is gone, even if the shard is idle.
fn read(i: usize, resp: reqwest::Response, input: mpsc::Sender<(usize, Option<Line>)>) {
    tokio::spawn(async move {
        let mut body = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let chunk = tokio::select! {
                c = body.next() => c,
                _ = input.closed() => return,
            };
            let Some(Ok(chunk)) = chunk else { break };
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                if let Some(l) = classify(&line) {
                    if input.send((i, Some(l))).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = input.send((i, None)).await;
    });
}

/// Opens every shard's stream after `after` and starts merging them.
pub async fn open(shards: &Arc<Shards>, spec: &UpstreamSpec, after: u64) -> Result<Result<mpsc::Receiver<Merged>, Response<Body>>, ApiError> {
    let urls = shards.urls();
    let mut streams = Vec::with_capacity(urls.len());
    for base in &urls {
        match open_one(shards, base, spec, after).await? {
            Ok(resp) => streams.push(resp),
            Err(answer) => return Ok(Err(answer)),
        }
    }
    let (in_tx, in_rx) = mpsc::channel(1024);
    for (i, resp) in streams.into_iter().enumerate() {
        read(i, resp, in_tx.clone());
    }
    let (out, rx) = mpsc::channel(OUT_BUFFER);
    tokio::spawn(run(shards.clone(), spec.clone(), urls, after, in_tx, in_rx, out));
    Ok(Ok(rx))
}

async fn run(shards: Arc<Shards>, spec: UpstreamSpec, urls: Vec<String>, after: u64, in_tx: mpsc::Sender<(usize, Option<Line>)>, mut in_rx: mpsc::Receiver<(usize, Option<Line>)>, out: mpsc::Sender<Merged>) {
    let k = urls.len();
    let mut merge: WatchMerge<Bytes> = WatchMerge::new(k, after, HELD_BACK);
    let mut ask = tokio::time::interval(PROGRESS_EVERY);
    let mut asked = vec![tokio::time::Instant::now() - PROGRESS_EVERY; k];
    let (mut marked, mut marked_at) = (after, tokio::time::Instant::now() - MARK_EVERY);
    // Asks the shards holding back an event for a mark; never waits for the answer (it comes
    // in-band on their streams).
    let ask_lagging = |merge: &WatchMerge<Bytes>, asked: &mut Vec<tokio::time::Instant>| {
        let now = tokio::time::Instant::now();
        for shard in merge.lagging() {
            if now.duration_since(asked[shard]) >= PROGRESS_EVERY {
                asked[shard] = now;
                let req = shards.http.post(format!("{}{}", urls[shard], spec.progress_path));
                tokio::spawn(async move {
                    let _ = req.send().await;
                });
            }
        }
    };
    loop {
        tokio::select! {
            msg = in_rx.recv() => {
                let Some((shard, line)) = msg else { return };
                let input = match line {
                    Some(Line::Event(rv, bytes)) => ShardInput::Event { rv, item: bytes },
                    Some(Line::Progress(rv)) => ShardInput::Progress(rv),
                    Some(Line::Error(bytes)) => {
                        let _ = out.send(Merged::Error(bytes)).await;
                        return;
                    }
                    None => {
                        // The shard ended its stream (its request timeout, or it closed us as
                        // slow): reopen after its mark. If that fails, end: the clients resume.
                        match open_one(&shards, &urls[shard], &spec, merge.mark(shard)).await {
                            Ok(Ok(resp)) => {
                                tracing::debug!(shard, mark = merge.mark(shard), "shard stream reopened");
                                read(shard, resp, in_tx.clone());
                                continue;
                            }
                            _ => {
                                tracing::warn!(shard = %urls[shard], "shard stream ended and could not be reopened; ending the merged watch");
                                ShardInput::Closed
                            }
                        }
                    }
                };
                if let Err(e) = merge.push(shard, input) {
                    tracing::warn!(error = %e, "ending merged watch");
                    return;
                }
                while let Some((rv, line)) = merge.pop() {
                    if out.send(Merged::Event(rv, line)).await.is_err() {
                        return;
                    }
                }
                if merge.finished() {
                    return;
                }
                if let Some(m) = merge.bookmark().filter(|m| *m > marked) {
                    if marked_at.elapsed() >= MARK_EVERY && out.try_send(Merged::Mark(m)).is_ok() {
                        (marked, marked_at) = (m, tokio::time::Instant::now());
                    }
                }
                ask_lagging(&merge, &mut asked);
            }
            _ = ask.tick() => {
                ask_lagging(&merge, &mut asked);
                if let Some(m) = merge.bookmark().filter(|m| *m > marked) {
                    if marked_at.elapsed() >= MARK_EVERY && out.try_send(Merged::Mark(m)).is_ok() {
                        (marked, marked_at) = (m, tokio::time::Instant::now());
                    }
                }
            }
            _ = out.closed() => return,
        }
    }
}
