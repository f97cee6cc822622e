//! Merged WATCH (RFC 0003, "WATCH") as a client sees it: the initial state (read at one revision R by
//! merged LIST pages, one at a time as the client takes them, and rendered like live events),
//! then every change after R or after the
//! client's resourceVersion, from a shared [hub](crate::hub) when one covers that RV and from an
//! upstream of its own otherwise; bookmarks at the merge's progress marks; the client's
//! `timeoutSeconds` (else a random 30–60 minutes, as upstream). A shard ERROR (410) is passed
//! on; a broken shard stream ends the client's watch cleanly at the last RV it was sent. A
//! change of the range map goes unnoticed: the upstream switches shards under it (RFC 0006).

use crate::state::{Raised, RouterState};
use crate::hub::Subscription;
use crate::list::{merged_page, revision_and_start, target_path};
use crate::upstream::{self, Merged, UpstreamSpec};
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use bytes::Bytes;
use futures::StreamExt;
use shardplane_apimachinery::list_options::{ListOptions, WatchStart};
use shardplane_apimachinery::request_path::Target;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::selectors::split_on_index;
use shardplane_apimachinery::watch_event::{self, parse_addressed};
use shardplane_apimachinery::ApiError;
use shardplane_http::negotiation::View;
use shardplane_http::protocol;
use shardplane_http::watch_frame::{event, watch_timeout};
use shardplane_http::Query;
use prometheus::IntGauge;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Client parameters that say where and how long a watch runs, not what it shows: hubs are
/// shared across them.
/// The parameters of a client's watch that the shards' streams for it are asked: the filters.
/// Everything else is the router's (resourceVersion, bookmarks) or per client (timeoutSeconds,
/// sendInitialEvents), and the representation goes by the Accept header.
const STREAM_FILTERS: [&str; 3] = ["labelSelector", "fieldSelector", "shardSelector"];

/// Fields the router dispatches on (RFC 0015, "Indexed dispatch"), tried in order: a kubelet's
/// pods (`spec.nodeName=<node>`), and a watch of one object by name (its Node, a Secret or
/// ConfigMap its pods mount). Watches that differ only in such a value share one hub and its K
/// shard streams, and an event costs only the watchers of its value.
const INDEXES: [&str; 2] = ["spec.nodeName", "metadata.name"];

/// For a watch whose field selector pins one value of an indexed field: that value, and the
/// filters of the shared streams (the other terms, and `watchIndex`).
fn indexed(info: &ResourceInfo, query: &Query) -> Option<(String, String)> {
    let raw = query.get("fieldSelector").filter(|s| !s.is_empty())?;
    INDEXES.iter().filter(|f| info.supports_field(f)).find_map(|field| {
        let (value, rest) = split_on_index(raw, info, field)?;
        let mut filters = query.only(&["labelSelector", "shardSelector"]);
        let mut more = form_urlencoded::Serializer::new(String::new());
        if !rest.is_empty() {
            more.append_pair("fieldSelector", &rest);
        }
        more.append_pair("watchIndex", field);
        if !filters.is_empty() {
            filters.push('&');
        }
        filters.push_str(&more.finish());
        Some((value, filters))
    })
}

/// Objects per page of a watch's initial state: what the router holds for one watch while it
/// sends that state, however large the collection.
const INITIAL_PAGE: u64 = 500;

/// The initial state of a watch without a resourceVersion: the collection at one revision,
/// read from the shards a page at a time (each page pinned to that revision, as a LIST's
/// continue token pins it).
struct Initial {
    shards: Arc<RouterState>,
    t: Target,
    query: Query,
    headers: HeaderMap,
    rv: u64,
}

/// One page of the initial state: its entries and where the next one starts.
type InitialPage = (Vec<Bytes>, Option<(String, String)>);

impl Initial {
    /// The page after `after` (the first with `None`), or a shard's error answer.
    async fn page(&self, after: Option<(String, String)>) -> Result<Result<InitialPage, Response<Body>>, ApiError> {
        Ok(merged_page(&self.shards, &self.t, &self.query, &self.headers, self.rv, after, Some(INITIAL_PAGE)).await?.map(|p| (p.entries, p.next_after)))
    }

    /// The page after `after` as the watch goes on; a failure becomes the watch's last event,
    /// an ERROR with the Status (the response has long started).
    async fn next_page(&self, after: (String, String)) -> Result<InitialPage, Bytes> {
        match self.page(Some(after)).await {
            Ok(Ok(page)) => Ok(page),
            Ok(Err(answer)) => {
                let status = axum::body::to_bytes(answer.into_body(), 1 << 20).await.unwrap_or_default();
                Err(watch_event::line("ERROR", &status))
            }
            Err(e) => Err(watch_event::line("ERROR", &e.to_json())),
        }
    }
}

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

/// Where a client's events come from.
enum Source {
    Hub(Subscription),
    /// An upstream of its own (its RV was older than the hub's ring); for an indexed watch, the
    /// value whose events it takes from the addressed lines. At each progress mark it tries to
    /// join the hub after that mark, and once it has, its own shard streams close: a client
    /// that started behind holds K streams of its own only while it catches up.
    Own { rx: mpsc::Receiver<Merged>, value: Option<String>, hub: (Arc<RouterState>, UpstreamSpec) },
}

impl Source {
    async fn next(&mut self) -> Option<Merged> {
        let item = match self {
            Source::Hub(s) => return s.next().await,
            Source::Own { rx, value: None, .. } => rx.recv().await?,
            Source::Own { rx, value: Some(value), .. } => loop {
                match rx.recv().await? {
                    Merged::Event(rv, line) => {
                        let events = parse_addressed(&line).map(|(_, e)| e).unwrap_or_default();
                        if let Some((_, mine)) = events.into_iter().find(|(to, _)| to == value) {
                            break Merged::Event(rv, mine);
                        }
                    }
                    other => break other,
                }
            },
        };
        if let (Merged::Mark(mark), Source::Own { value, hub: (shards, spec), .. }) = (&item, &*self)
            && let Some(sub) = shards.hubs.join_live(spec, *mark, value.as_deref())
        {
            tracing::debug!(mark, "a watch that started behind its hub caught up and joined it");
            *self = Source::Hub(sub);
        }
        Some(item)
    }
}

/// Serves a merged WATCH.
/// `registered` is the client's `apiserver_registered_watchers` gauge, raised while the watch runs.
pub async fn watch(shards: Arc<RouterState>, t: Target, o: ListOptions, query: &Query, headers: &HeaderMap, registered: IntGauge) -> Result<Response<Body>, ApiError> {
    // The client's representation (JSON, Table, PartialObjectMetadata): the shards render live
    // events in it; the initial state, read as JSON, is rendered here the same way.
    let view = View { lines: false, ..View::of_request(headers, query)? };
    let index = indexed(&t.info, query);
    let spec = UpstreamSpec {
        path: target_path(&t),
        // Only the filters that decide what the stream carries: a parameter that means nothing
        // to it cannot put a client on a stream (K shard streams) of its own.
        query: index.as_ref().map_or_else(|| query.only(&STREAM_FILTERS), |(_, filters)| filters.clone()),
        accept: headers.get(header::ACCEPT).cloned(),
        progress_path: format!("{}?group={}&resource={}", protocol::PROGRESS_PATH, t.info.group, t.info.plural),
        resource: (t.info.storage_group().to_owned(), t.info.plural.clone()),
    };
    // Where the client's changes start, and the initial state (read at that one revision).
    let (start, initial): (u64, Option<(Initial, InitialPage)>) = match o.watch_start() {
        WatchStart::After(rv) => (rv, None),
        _ => {
            let (rv, _) = revision_and_start(&shards, &t.info, &ListOptions { continue_token: None, limit: None, ..o.clone() }).await?;
            let mut json_only = headers.clone();
            json_only.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
            let list_query = Query::parse(&query.without(&["sendInitialEvents", "timeoutSeconds", "progressBookmarks"]));
            let initial = Initial { shards: shards.clone(), t: t.clone(), query: list_query, headers: json_only, rv };
            // The first page before the response starts: a shard's refusal is the answer.
            match initial.page(None).await? {
                Err(shard_error) => return Ok(shard_error),
                Ok(first) => (rv, Some((initial, first))),
            }
        }
    };
    let value = index.map(|(value, _)| value);
    let source = match shards.hubs.subscribe(&shards, &spec, start, value.as_deref()).await? {
        Err(answer) => return Ok(answer),
        Ok(Some(sub)) => Source::Hub(sub),
        Ok(None) => match upstream::open_catching_up(&shards, &spec, start).await? {
            Err(answer) => return Ok(answer),
            Ok(rx) => Source::Own { rx, value, hub: (shards.clone(), spec.clone()) },
        },
    };
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let client = Client {
        info: t.info.clone(),
        view,
        start,
        allow_bookmarks: o.allow_bookmarks,
        initial_end: matches!(o.watch_start(), WatchStart::InitialEvents(_)) && o.allow_bookmarks,
        every: shards.bookmark_interval,
        timeout: watch_timeout(o.timeout_seconds, Duration::from_secs(1800)),
        _registered: Raised::new(registered),
    };
    tokio::spawn(client.run(initial, source, tx));
    let body = Body::from_stream(ReceiverStream::new(rx).map(Ok::<Bytes, std::convert::Infallible>));
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    Ok(r)
}

/// One client's watch.
struct Client {
    info: Arc<shardplane_apimachinery::resources::ResourceInfo>,
    view: View,
    start: u64,
    allow_bookmarks: bool,
    initial_end: bool,
    every: Duration,
    timeout: Duration,
    /// Counts this watch while it runs (dropped with the client's task).
    _registered: Raised,
}

impl Client {
    async fn run(self, initial: Option<(Initial, InitialPage)>, mut source: Source, tx: mpsc::Sender<Bytes>) {
        let deadline = tokio::time::sleep(self.timeout);
        tokio::pin!(deadline);
        if let Some((initial, (mut items, mut next))) = initial {
            loop {
                for item in std::mem::take(&mut items) {
                    let rv = serde_json::from_slice::<ObjectRv>(&item).ok().and_then(|o| o.metadata.resource_version.parse().ok()).unwrap_or(self.start);
                    if tx.send(event(&self.info, self.view, "ADDED", &item, rv)).await.is_err() {
                        return;
                    }
                }
                let Some(after) = next.take() else { break };
                match initial.next_page(after).await {
                    Ok(page) => (items, next) = page,
                    Err(error) => {
                        let _ = tx.send(error).await;
                        return;
                    }
                }
            }
            if self.initial_end && tx.send(watch_event::bookmark(&self.info, self.start, true)).await.is_err() {
                return;
            }
        }
        let mut bookmarks = tokio::time::interval_at(tokio::time::Instant::now() + self.every, self.every);
        // A bookmark never goes below an event already sent: a client resuming from it would
        // see that event twice.
        let (mut sent, mut mark, mut bookmarked) = (self.start, self.start, self.start);
        loop {
            tokio::select! {
                item = source.next() => match item {
                    Some(Merged::Event(rv, line)) => {
                        if rv > self.start {
                            sent = rv;
                            if tx.send(line).await.is_err() {
                                return;
                            }
                        }
                    }
                    Some(Merged::Mark(rv)) => mark = mark.max(rv),
                    Some(Merged::Error(line)) => {
                        let _ = tx.send(line).await;
                        return;
                    }
                    None => return,
                },
                _ = bookmarks.tick(), if self.allow_bookmarks => {
                    if mark > bookmarked && mark >= sent {
                        bookmarked = mark;
                        if tx.send(watch_event::bookmark(&self.info, mark, false)).await.is_err() {
                            return;
                        }
                    }
                }
                _ = &mut deadline => return,
                _ = tx.closed() => return,
            }
        }
    }
}
