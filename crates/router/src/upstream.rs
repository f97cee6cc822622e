//! One merged upstream: K shard watch streams opened after one RV, merged in RV order by the
//! coordinator's [`WatchMerge`] on in-band progress marks, with lagging shards asked for a mark
//! on the side channel. It yields [`Merged`] items on a bounded channel and ends (the channel
//! closes) when a shard stream breaks, when a shard sends an ERROR (passed on first), or when
//! more than [`HELD_BACK`] events wait on a lagging shard. A shard stream that ends normally
//! (the shard's own request timeout) is reopened after that shard's mark, so the merged stream
//! outlives it with no gap and no repeat.
//!
//! When the range map's epoch changes (RFC 0006, step 4) the upstream switches to the new map's
//! shards without its consumers noticing: it asks the old shards for progress until every one
//! has vouched for the map's cut-over revision, yields what that releases, and reads the new
//! shards from that watermark on ([`Handover`]). The old owner of a moved range keeps it until
//! every router has switched, so the old streams are whole up to the watermark and the new ones
//! from it.

use crate::forward::passthrough;
use crate::state::{MapEpoch, RouterState, UpstreamEpoch};
use axum::body::Body;
use axum::http::{header, HeaderValue, Method, Response};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use shardplane_coordinator::handover::Handover;
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
/// While switching, shards that have not reached the cut-over are asked for a mark this often.
const SWITCH_PROGRESS_EVERY: Duration = Duration::from_millis(20);
/// A catching-up upstream with no mark passed on for this long asks every shard for one...
pub const CATCH_UP_ASK_EVERY: Duration = Duration::from_millis(500);
/// ...for this long after it opened (a client whose hub is gone does not ask for ever).
pub const CATCH_UP_FOR: Duration = Duration::from_secs(30);
/// How long a switch to a new range map waits for the old shards to reach its cut-over before
/// the merged watch ends instead (its clients resume).
const SWITCH_WITHIN: Duration = Duration::from_secs(10);

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
    /// The resource's group and plural: its store's revisions are the stream's RVs.
    pub resource: (String, String),
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
        // An indexed stream's change (RFC 0015): its hub takes it apart.
        shardplane_apimachinery::watch_event::ADDRESSED => Some(Line::Event(v["rv"].as_u64()?, Bytes::copy_from_slice(line))),
        "ERROR" => Some(Line::Error(Bytes::copy_from_slice(line))),
        _ => Some(Line::Event(rv()?, Bytes::copy_from_slice(line))),
    }
}

/// Opens one shard stream of every change after `after`; a refusal for a stale map is an error
/// (code 421), any other non-success answer is passed on as the response to give the client.
async fn open_one(shards: &RouterState, base: &str, spec: &UpstreamSpec, after: u64) -> Result<Result<reqwest::Response, Response<Body>>, ApiError> {
    let mut q = spec.query.clone();
    if !q.is_empty() {
        q.push('&');
    }
    q.push_str(&format!("watch=1&resourceVersion={after}&allowWatchBookmarks=true&progressBookmarks=always"));
    let mut req = shards.request(Method::GET, format!("{base}{}?{q}", spec.path));
    if let Some(a) = &spec.accept {
        req = req.header(header::ACCEPT, a);
    }
    let resp = shards.send(base, req).await?;
    if !resp.status().is_success() {
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        return Ok(Err(passthrough(status, &body)));
    }
    Ok(Ok(resp))
}

/// Reads one shard stream into the merge's input channel; sends `None` when it ends. Stops (and
/// so closes the shard stream) as soon as the merge is gone, even if the shard is idle.
fn read(shards: &RouterState, i: usize, resp: reqwest::Response, input: mpsc::Sender<(usize, Option<Line>)>) {
    // Counted in `shardplane_router_shard_watch_streams` while it is read.
    let open = crate::state::Raised::new(shards.shard_streams.clone());
    tokio::spawn(async move {
        let _open = open;
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
                if let Some(l) = classify(&line) && input.send((i, Some(l))).await.is_err() {
                    return;
                }
            }
        }
        let _ = input.send((i, None)).await;
    });
}

/// Opens every shard's stream after `after` and starts merging them.
pub async fn open(shards: &Arc<RouterState>, spec: &UpstreamSpec, after: u64) -> Result<Result<mpsc::Receiver<Merged>, Response<Body>>, ApiError> {
    open_with(shards, spec, after, false).await
}

/// [`open`] for a client catching up with a hub (RFC 0015): with no mark passed on for
/// [`CATCH_UP_ASK_EVERY`], it asks every shard for one, so that a client on an idle resource
/// reaches the hub's ring in about that long rather than at the store's next progress notice.
pub async fn open_catching_up(shards: &Arc<RouterState>, spec: &UpstreamSpec, after: u64) -> Result<Result<mpsc::Receiver<Merged>, Response<Body>>, ApiError> {
    open_with(shards, spec, after, true).await
}

async fn open_with(shards: &Arc<RouterState>, spec: &UpstreamSpec, after: u64, catching_up: bool) -> Result<Result<mpsc::Receiver<Merged>, Response<Body>>, ApiError> {
    // The epoch first: if the map changes while the streams open, the change is seen after.
    let mut epochs = shards.epoch_changes();
    let epoch = epochs.borrow_and_update().epoch;
    let urls = shards.urls();
    let streams = match open_all(shards, &urls, spec, after).await? {
        Ok(streams) => streams,
        Err(answer) => return Ok(Err(answer)),
    };
    let (out, rx) = mpsc::channel(OUT_BUFFER);
    let mut upstream = Upstream::start(shards.clone(), spec.clone(), urls, after, streams, shards.upstream_epoch(epoch));
    upstream.catching_up = catching_up.then(|| tokio::time::Instant::now() + CATCH_UP_FOR);
    tokio::spawn(upstream.run(epochs, out));
    Ok(Ok(rx))
}

/// Opens a stream after `after` on every shard of `urls`.
async fn open_all(shards: &RouterState, urls: &[String], spec: &UpstreamSpec, after: u64) -> Result<Result<Vec<reqwest::Response>, Response<Body>>, ApiError> {
    let mut streams = Vec::with_capacity(urls.len());
    for base in urls {
        match open_one(shards, base, spec, after).await? {
            Ok(resp) => streams.push(resp),
            Err(answer) => return Ok(Err(answer)),
        }
    }
    Ok(Ok(streams))
}

/// A switch to a new map's shards, waiting for every old shard to vouch for `target`.
struct Switch {
    target: u64,
    deadline: tokio::time::Instant,
}

/// The merge of one set of shard streams, and what it has yielded.
struct Upstream {
    shards: Arc<RouterState>,
    spec: UpstreamSpec,
    urls: Vec<String>,
    merge: WatchMerge<Bytes>,
    in_tx: mpsc::Sender<(usize, Option<Line>)>,
    in_rx: mpsc::Receiver<(usize, Option<Line>)>,
    asked: Vec<tokio::time::Instant>,
    /// What was yielded at the newest RV, to skip once after a switch.
    handover: Handover<Bytes>,
    /// Counts this upstream as reading its shards' epoch.
    _epoch: UpstreamEpoch,
    /// A client's own upstream catching up with a hub: asks for marks when none come, until
    /// this instant.
    catching_up: Option<tokio::time::Instant>,
}

impl Upstream {
    fn start(shards: Arc<RouterState>, spec: UpstreamSpec, urls: Vec<String>, after: u64, streams: Vec<reqwest::Response>, epoch: UpstreamEpoch) -> Self {
        let (in_tx, in_rx) = mpsc::channel(1024);
        for (i, resp) in streams.into_iter().enumerate() {
            read(&shards, i, resp, in_tx.clone());
        }
        let k = urls.len();
        Self { shards, spec, urls, merge: WatchMerge::new(k, after, HELD_BACK), in_tx, in_rx, asked: vec![tokio::time::Instant::now() - PROGRESS_EVERY; k], handover: Handover::new(after), _epoch: epoch, catching_up: None }
    }

    /// Asks `shard` for a progress mark unless it was asked less than `every` ago; never waits
    /// for the answer (it comes in-band on its stream).
    fn ask(&mut self, shard: usize, every: Duration) {
        let now = tokio::time::Instant::now();
        if now.duration_since(self.asked[shard]) >= every {
            self.asked[shard] = now;
            let req = self.shards.http.post(format!("{}{}", self.urls[shard], self.spec.progress_path));
            tokio::spawn(async move {
                let _ = req.send().await;
            });
        }
    }

    /// Asks the shards holding back an event for a mark, and while switching the shards that
    /// have not vouched for the switch's target yet.
    fn ask_lagging(&mut self, switch: Option<&Switch>) {
        for shard in self.merge.lagging() {
            self.ask(shard, PROGRESS_EVERY);
        }
        if let Some(sw) = switch {
            let behind: Vec<usize> = (0..self.urls.len()).filter(|i| self.merge.mark(*i) < sw.target).collect();
            for shard in behind {
                self.ask(shard, SWITCH_PROGRESS_EVERY);
            }
        }
    }

    /// Yields every event the merge can release; false once the consumer is gone.
    async fn release(&mut self, out: &mpsc::Sender<Merged>) -> bool {
        while let Some((rv, line)) = self.merge.pop() {
            if !self.handover.admit(rv, &line) {
                continue;
            }
            if out.send(Merged::Event(rv, line)).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Moves to the current map's shards at the merge's watermark `w`: every event up to `w`
    /// that the old shards sent has been yielded, and the new ones are read from `w` on
    /// ([`Handover`]). Fails when a new shard cannot serve from there (the upstream then ends
    /// and its clients resume).
    async fn switch(&mut self, epochs: &mut tokio::sync::watch::Receiver<MapEpoch>) -> Result<(), String> {
        let w = self.merge.watermark();
        let epoch = epochs.borrow_and_update().epoch;
        let urls = self.shards.urls();
        let mut handover = self.handover.clone();
        let from = handover.switch(w);
        let streams = match open_all(&self.shards, &urls, &self.spec, from).await {
            Ok(Ok(streams)) => streams,
            Ok(Err(answer)) => return Err(format!("a shard refused the watch from {from} ({})", answer.status())),
            Err(e) => return Err(e.message),
        };
        let next = Upstream::start(self.shards.clone(), self.spec.clone(), urls, from, streams, self.shards.upstream_epoch(epoch));
        // The old streams close as their merge is dropped; the old epoch stops being counted.
        let catching_up = self.catching_up;
        drop(std::mem::replace(self, next));
        self.handover = handover;
        self.catching_up = catching_up;
        tracing::debug!(epoch, at = w, path = %self.spec.path, "merged watch switched to the new map's shards");
        Ok(())
    }

    /// Merges until the consumer leaves, a shard sends an ERROR or breaks, or a switch to a new
    /// map fails.
    async fn run(mut self, mut epochs: tokio::sync::watch::Receiver<MapEpoch>, out: mpsc::Sender<Merged>) {
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        let (mut marked, mut marked_at) = (self.merge.watermark(), tokio::time::Instant::now() - MARK_EVERY);
        let mut switching: Option<Switch> = None;
        loop {
            tokio::select! {
                msg = self.in_rx.recv() => {
                    let Some((shard, line)) = msg else { return };
                    let input = match line {
                        Some(Line::Event(rv, bytes)) => ShardInput::Event { rv, item: bytes },
                        Some(Line::Progress(rv)) => ShardInput::Progress(rv),
                        Some(Line::Error(bytes)) => {
                            let _ = out.send(Merged::Error(bytes)).await;
                            return;
                        }
                        None => {
                            // The shard ended its stream (its request timeout, or it closed us
                            // as slow): reopen after its mark. If that fails, end: the clients
                            // resume.
                            match open_one(&self.shards, &self.urls[shard], &self.spec, self.merge.mark(shard)).await {
                                Ok(Ok(resp)) => {
                                    tracing::debug!(shard, mark = self.merge.mark(shard), "shard stream reopened");
                                    read(&self.shards, shard, resp, self.in_tx.clone());
                                    continue;
                                }
                                _ => {
                                    tracing::warn!(shard = %self.urls[shard], "shard stream ended and could not be reopened; ending the merged watch");
                                    ShardInput::Closed
                                }
                            }
                        }
                    };
                    if let Err(e) = self.merge.push(shard, input) {
                        tracing::warn!(error = %e, "ending merged watch");
                        return;
                    }
                    if !self.release(&out).await || self.merge.finished() {
                        return;
                    }
                }
                _ = tick.tick() => {}
                changed = epochs.changed(), if switching.is_none() => {
                    if changed.is_err() {
                        return;
                    }
                    // Wait until every old shard has sent all it owned up to the cut-over.
                    let cutover = epochs.borrow().cutover;
                    let target = self.shards.cutover_in_store(&self.spec.resource, cutover).await;
                    switching = Some(Switch { target, deadline: tokio::time::Instant::now() + SWITCH_WITHIN });
                }
                _ = out.closed() => return,
            }
            if let Some(sw) = &mut switching {
                if epochs.has_changed().unwrap_or(false) {
                    let cutover = epochs.borrow().cutover;
                    sw.target = sw.target.max(self.shards.cutover_in_store(&self.spec.resource, cutover).await);
                }
                if self.merge.watermark() >= sw.target && self.merge.bookmark().is_some() {
                    if let Err(e) = self.switch(&mut epochs).await {
                        tracing::warn!(error = %e, path = %self.spec.path, "could not switch a merged watch to the new map; ending it (its clients resume)");
                        return;
                    }
                    switching = None;
                } else if tokio::time::Instant::now() >= sw.deadline {
                    tracing::warn!(target = sw.target, watermark = self.merge.watermark(), "old shards did not reach the cut-over in time; ending the merged watch (its clients resume)");
                    return;
                }
            }
            self.ask_lagging(switching.as_ref());
            if self.catching_up.is_some_and(|until| tokio::time::Instant::now() < until) && marked_at.elapsed() >= CATCH_UP_ASK_EVERY {
                for shard in 0..self.urls.len() {
                    self.ask(shard, CATCH_UP_ASK_EVERY);
                }
            }
            if let Some(m) = self.merge.bookmark().filter(|m| *m > marked) && marked_at.elapsed() >= MARK_EVERY && out.try_send(Merged::Mark(m)).is_ok() {
                (marked, marked_at) = (m, tokio::time::Instant::now());
            }
        }
    }
}
