//! WATCH: newline-delimited JSON events from the cache, with bookmarks, `sendInitialEvents` and
//! its `k8s.io/initial-events-end` bookmark, and 410 as an ERROR event on a 200 stream.

use crate::read::{filter, WAIT};
use shardplane_http::negotiation::View;
use shardplane_http::watch_frame::{event, watch_timeout};
use shardplane_apimachinery::request_path::Target;
use crate::shard::Shard;
use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use bytes::Bytes;
use shardplane_apimachinery::list_options::{ListOptions, WatchStart};
use shardplane_apimachinery::ApiError;
use shardplane_watchcache::{CacheError, WatchMsg, Watcher};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Chunks buffered between the cache and the connection; past it the cache closes the watcher.
const CONNECTION_BUFFER: usize = 64;

use shardplane_apimachinery::watch_event::{addressed_line, bookmark, line as event_line};

fn error_line(e: &ApiError) -> Bytes {
    event_line("ERROR", &e.to_json())
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response<Body> {
    let body = Body::from_stream(futures::StreamExt::map(ReceiverStream::new(rx), Ok::<Bytes, std::convert::Infallible>));
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    r
}

/// Serves a WATCH. Errors before the stream starts (bad options) are plain HTTP errors; once the
/// resourceVersion is accepted, failures are ERROR events, as upstream.
pub async fn watch(shard: Arc<Shard>, t: Target, o: ListOptions, view: View) -> Result<Response<Body>, ApiError> {
    let info = t.info.clone();
    let mut cache = shard.served(&info)?.cache.clone();
    let f = filter(&shard, &t, &o);
    let start = o.watch_start();
    let (tx, rx) = mpsc::channel::<Bytes>(CONNECTION_BUFFER);
    let opened: Result<Watcher, ApiError> = async {
        let wait_for = match start {
            WatchStart::MostRecentWithState | WatchStart::InitialEvents(None) => Some(shard.store(&info).current_revision().await.map_err(shardplane_http::storage_errors::status_of)?),
            WatchStart::InitialEvents(Some(rv)) | WatchStart::After(rv) => Some(rv),
            WatchStart::AnyWithState => None,
        };
        if let Some(rv) = wait_for {
            cache = shard.synced(&info, rv, WAIT).await?.cache.clone();
        }
        let after = match start {
            WatchStart::After(rv) => Some(rv),
            _ => None,
        };
        cache.watch(after, f, o.allow_bookmarks).map_err(|e| match e {
            CacheError::TooOld { requested, oldest } => ApiError::expired(format!("too old resource version: {requested} ({oldest})"), None),
            CacheError::TooNew { requested, current } => ApiError::too_large_resource_version(requested, current),
            CacheError::NotReady => ApiError::too_many_requests("storage is (re)initializing", 1),
        })
    }
    .await;
    let mut watcher = match opened {
        Ok(w) => w,
        Err(e) if e.code == 410 || e.code == 504 => {
            let _ = tx.try_send(error_line(&e));
            return Ok(stream_response(rx));
        }
        Err(e) => return Err(e),
    };
    let timeout = watch_timeout(o.timeout_seconds, shard.min_request_timeout);
    let send_initial_end = matches!(start, WatchStart::InitialEvents(_)) && o.allow_bookmarks;
    let bookmarks = o.allow_bookmarks;
    let eager = o.allow_bookmarks && o.eager_progress;
    let interval = shard.bookmark_interval;
    let shutdown = shard.shutdown.clone();
    let metrics = shard.metrics.clone();
    let labels = [info.group.clone(), info.version.clone(), info.kind.clone()];
    metrics.watchers.with_label_values(&labels).inc();
    tokio::spawn(async move {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut last_rv = watcher.start_rv;
        let mut initial_left = watcher.initial_events;
        if initial_left == 0 && send_initial_end && tx.send(bookmark(&info, last_rv, true)).await.is_err() {
            metrics.watchers.with_label_values(&labels).dec();
            return;
        }
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        let mut bookmarked = last_rv;
        loop {
            tokio::select! {
                msg = watcher.next() => {
                    let Some(msg) = msg else { break };
                    let line = match msg {
                        WatchMsg::Event(kind, obj) => {
                            last_rv = last_rv.max(obj.rv);
                            metrics.watch_events.with_label_values(&labels).inc();
                            event(&info, view, kind.as_str(), &obj.bytes, obj.rv)
                        }
                        WatchMsg::Addressed(rv, to) => {
                            // A router's indexed stream (RFC 0015): one line, each value's event.
                            last_rv = last_rv.max(rv);
                            metrics.watch_events.with_label_values(&labels).inc_by(to.len() as u64);
                            let events: Vec<(&str, Bytes)> = to.iter().map(|a| (&*a.to, event(&info, view, a.kind.as_str(), &a.object.bytes, a.object.rv))).collect();
                            addressed_line(rv, &events)
                        }
                        WatchMsg::Progress(rv) => {
                            last_rv = last_rv.max(rv);
                            if !eager || initial_left > 0 || last_rv <= bookmarked {
                                continue;
                            }
                            bookmarked = last_rv;
                            bookmark(&info, last_rv, false)
                        }
                    };
                    if tx.send(line).await.is_err() {
                        break;
                    }
                    if initial_left > 0 {
                        initial_left -= 1;
                        if initial_left == 0 && send_initial_end && tx.send(bookmark(&info, watcher.start_rv, true)).await.is_err() {
                            break;
                        }
                    }
                }
                _ = tick.tick(), if bookmarks => {
                    if last_rv > bookmarked && tx.send(bookmark(&info, last_rv, false)).await.is_err() {
                        break;
                    }
                    bookmarked = last_rv;
                }
                _ = &mut deadline => break,
                _ = shutdown.cancelled() => break,
                _ = tx.closed() => break,
            }
        }
        metrics.watchers.with_label_values(&labels).dec();
    });
    Ok(stream_response(rx))
}
