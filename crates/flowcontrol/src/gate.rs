//! The gate every request passes after authentication (RFC 0013): classified, given its seats
//! at once, made to wait in its queue for them (at most [`WAIT_LIMIT`]), or refused with
//! upstream's 429 and Retry-After. Exempt requests pass untouched. Seats are held until the
//! answer has been sent in full, except a watch's: it holds them while its initial state is
//! made ready (until its response starts), then lets them go, as upstream's watches do.
//!
//! Every answer carries `X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID`.

use crate::classify::{classify, Classification};
use crate::config::Config;
use crate::metrics::FlowMetrics;
use crate::model::{LevelId, Limits, Pool, Refusal, Ticket};
use crate::retry_after::RetryAfter;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Response};
use axum::middleware::Next;
use shardplane_apimachinery::ApiError;
use shardplane_identity::rbac::{request::attributes, Attributes};
use shardplane_identity::user::UserInfo;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The longest a request waits in its queue: upstream's default, a quarter of the request
/// timeout.
pub const WAIT_LIMIT: Duration = Duration::from_secs(15);

/// The response headers naming the request's schema and level by UID.
pub const FLOW_SCHEMA_UID_HEADER: &str = "x-kubernetes-pf-flowschema-uid";
pub const PRIORITY_LEVEL_UID_HEADER: &str = "x-kubernetes-pf-prioritylevel-uid";

/// How many objects of (group, resource) are stored here, for a list's width.
pub type StoredCount = Arc<dyn Fn(&str, &str) -> Option<u64> + Send + Sync>;

struct Waiter {
    wake: oneshot::Sender<Ticket>,
    class: Arc<Classification>,
    width: u32,
    since: Instant,
}

struct Running {
    class: Arc<Classification>,
    width: u32,
}

struct State_ {
    pool: Pool,
    config: Arc<Config>,
    levels: HashMap<String, LevelId>,
    waiting: HashMap<u64, Waiter>,
    running: HashMap<u64, Running>,
    retry: HashMap<LevelId, RetryAfter>,
    next_id: u64,
}

/// What a request that names no user is (no `UserInfo` in its extensions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unnamed {
    /// An anonymous client's: classified as `system:anonymous` (the router).
    Anonymous,
    /// The router's own (its shared watches, readiness, informers): exempt, as upstream's
    /// loopback client is (a shard behind a router, RFC 0013).
    Exempt,
}

/// The process's priority levels, queues and seats.
pub struct Gate {
    state: Mutex<State_>,
    server_seats: u32,
    unnamed: Unnamed,
    stored: StoredCount,
    metrics: FlowMetrics,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").field("server_seats", &self.server_seats).finish()
    }
}

/// A request the gate let through: how it was classified, and its seats (none when exempt),
/// given back when this is dropped.
pub struct Admission {
    pub class: Arc<Classification>,
    seat: Option<Seat>,
}

struct Seat {
    gate: Arc<Gate>,
    ticket: Ticket,
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut s = self.gate.lock();
        if let Some(r) = s.running.remove(&self.ticket.id) {
            self.gate.metrics.finished(&r.class, r.width);
        }
        let started = s.pool.finish(self.ticket);
        self.gate.wake(&mut s, started);
    }
}

/// A request waiting for its seats; dropped before they came (its time ran out, or its client
/// went away), it leaves its queue, or gives back the seats it had just been given.
struct Pending {
    gate: Arc<Gate>,
    id: u64,
    rx: Option<oneshot::Receiver<Ticket>>,
    why: Refusal,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        let mut s = self.gate.lock();
        if let Some(w) = s.waiting.remove(&self.id) {
            self.gate.metrics.dequeued(&w.class);
            self.gate.metrics.rejected(&w.class, self.why, Some(w.since.elapsed()));
        }
        match s.pool.cancel(self.id, self.why) {
            Some(started) => self.gate.wake(&mut s, started),
            None => {
                // Started as it was given up: its seats go back at once.
                if let Ok(t) = rx.try_recv() {
                    if let Some(r) = s.running.remove(&t.id) {
                        self.gate.metrics.finished(&r.class, r.width);
                    }
                    let started = s.pool.finish(t);
                    self.gate.wake(&mut s, started);
                }
            }
        }
    }
}

/// Upstream's answer to a refused request.
fn too_many(retry_after: u64) -> ApiError {
    ApiError::too_many_requests("Too many requests, please try again later.", retry_after)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Gate {
    /// A gate over `server_seats` seats in all, with the mandatory configuration until
    /// [`Gate::configure`] gives it the store's, taking requests that name no user as
    /// `unnamed` says; its metrics go into `registry`.
    pub fn new(server_seats: u32, unnamed: Unnamed, stored: StoredCount, registry: &prometheus::Registry) -> Arc<Self> {
        let gate = Arc::new(Self {
            state: Mutex::new(State_ { pool: Pool::new(), config: Arc::default(), levels: HashMap::new(), waiting: HashMap::new(), running: HashMap::new(), retry: HashMap::new(), next_id: 0 }),
            server_seats: server_seats.max(1),
            unnamed,
            stored,
            metrics: FlowMetrics::register(registry),
        });
        gate.configure(Config::build(&[], &[], gate.server_seats));
        gate
    }

    /// The server's seats (`--max-requests-inflight` + `--max-mutating-requests-inflight`).
    pub fn server_seats(&self) -> u32 {
        self.server_seats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State_> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands each started request its ticket; one whose waiter is gone gives its seats back.
    fn wake(&self, s: &mut State_, mut started: Vec<Ticket>) {
        while let Some(t) = started.pop() {
            match s.waiting.remove(&t.id) {
                Some(w) => {
                    self.metrics.dequeued(&w.class);
                    self.metrics.dispatched(&w.class, w.width, Some(w.since.elapsed()));
                    s.running.insert(t.id, Running { class: w.class.clone(), width: w.width });
                    if let Err(t) = w.wake.send(t) {
                        s.running.remove(&t.id);
                        self.metrics.finished(&w.class, w.width);
                        started.extend(s.pool.finish(t));
                    }
                }
                None => started.extend(s.pool.finish(t)),
            }
        }
    }

    /// Puts `config` in force: levels keep their queued and running requests across a change;
    /// a level no longer configured gets no seats and drains.
    pub fn configure(&self, config: Config) {
        let mut s = self.lock();
        let mut started = Vec::new();
        for level in &config.levels {
            let limits = if level.exempt { Limits { queuing: None, ..level.limits } } else { level.limits };
            match s.levels.get(&level.name).copied() {
                Some(id) => started.extend(s.pool.set_limits(id, limits)),
                None => {
                    let id = s.pool.add_level(limits);
                    s.levels.insert(level.name.clone(), id);
                }
            }
            self.metrics.limits(&level.name, &limits, level.exempt);
        }
        let gone: Vec<(String, LevelId)> = s.levels.iter().filter(|(n, _)| config.level(n).is_none()).map(|(n, id)| (n.clone(), *id)).collect();
        for (name, id) in gone {
            let queuing = s.pool.view(id).limits.queuing;
            started.extend(s.pool.set_limits(id, Limits { nominal: 0, lendable: 0, borrowing: Some(0), queuing }));
            self.metrics.limits(&name, &s.pool.view(id).limits, false);
        }
        s.config = Arc::new(config);
        self.wake(&mut s, started);
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        self.lock().config.clone()
    }

    /// Classifies a request for `attrs` by `user` and gives it its seats, waiting for them as
    /// its level says; the 429 to answer when it is refused (with its classification).
    pub async fn admit(self: &Arc<Self>, user: &UserInfo, attrs: &Attributes) -> Result<Admission, (ApiError, Option<Arc<Classification>>)> {
        // Asked before the gate's lock is taken: the count may take locks of its own.
        let stored = if crate::width::lists(attrs) { (self.stored)(&attrs.api_group, &attrs.resource) } else { None };
        let (class, level, id, rx) = {
            let mut s = self.lock();
            let Some(class) = classify(&s.config, user, attrs).map(Arc::new) else {
                // No schema matched: catch-all covers every authenticated and unauthenticated
                // user, so only a user in neither group gets here; refused.
                return Err((too_many(1), None));
            };
            let exempt = s.config.level(&class.level).is_some_and(|l| l.exempt);
            if exempt {
                self.metrics.dispatched(&class, 0, None);
                return Ok(Admission { class, seat: None });
            }
            let level = s.levels[&class.level];
            let width = s.pool.clamp_width(level, crate::width::seats(attrs, stored));
            s.next_id += 1;
            let id = s.next_id;
            let (tx, rx) = oneshot::channel();
            s.waiting.insert(id, Waiter { wake: tx, class: class.clone(), width, since: Instant::now() });
            self.metrics.queued(&class);
            match s.pool.arrive(level, class.flow, width, id) {
                Ok(started) => self.wake(&mut s, started),
                Err(why) => {
                    s.waiting.remove(&id);
                    self.metrics.dequeued(&class);
                    self.metrics.rejected(&class, why, None);
                    let now = unix_now();
                    let r = s.retry.entry(level).or_default();
                    r.refused(now);
                    return Err((too_many(r.seconds(now)), Some(class)));
                }
            }
            (class, level, id, rx)
        };
        let mut pending = Pending { gate: self.clone(), id, rx: Some(rx), why: Refusal::Cancelled };
        let rx = pending.rx.as_mut().expect("set");
        match tokio::time::timeout(WAIT_LIMIT, rx).await {
            Ok(Ok(ticket)) => {
                pending.rx = None;
                Ok(Admission { class, seat: Some(Seat { gate: self.clone(), ticket }) })
            }
            _ => {
                pending.why = Refusal::TimeOut;
                drop(pending);
                let mut s = self.lock();
                let now = unix_now();
                let r = s.retry.entry(level).or_default();
                r.refused(now);
                Err((too_many(r.seconds(now)), Some(class)))
            }
        }
    }

    /// Every level, by name.
    fn by_name(s: &State_) -> Vec<(&String, LevelId)> {
        let mut names: Vec<(&String, LevelId)> = s.levels.iter().map(|(n, id)| (n, *id)).collect();
        names.sort();
        names
    }

    /// `/debug/api_priority_and_fairness/dump_priority_levels`.
    pub fn dump_priority_levels(&self) -> String {
        let s = self.lock();
        let mut out = String::from("PriorityLevelName, ActiveQueues, IsIdle, IsQuiescing, WaitingRequests, ExecutingRequests, DispatchedRequests, RejectedRequests, TimedoutRequests, CancelledRequests\n");
        for (name, id) in Self::by_name(&s) {
            let v = s.pool.view(id);
            let active = v.queues.iter().filter(|q| q.waiting > 0 || q.executing_seats > 0).count();
            let quiescing = s.config.level(name).is_none();
            let c = v.counts;
            out.push_str(&format!("{name}, {active}, {}, {quiescing}, {}, {}, {}, {}, {}, {}\n", v.waiting == 0 && v.executing == 0, v.waiting, v.executing, c.dispatched, c.rejected, c.timed_out, c.cancelled));
        }
        out
    }

    /// `/debug/api_priority_and_fairness/dump_queues`.
    pub fn dump_queues(&self) -> String {
        let s = self.lock();
        let mut out = String::from("PriorityLevelName, Index, PendingRequests, ExecutingSeats, WaitingSeats, VirtualStart\n");
        for (name, id) in Self::by_name(&s) {
            for (i, q) in s.pool.view(id).queues.iter().enumerate() {
                out.push_str(&format!("{name}, {i}, {}, {}, {}, {}\n", q.waiting, q.executing_seats, q.waiting_seats, q.virtual_start));
            }
        }
        out
    }

    /// `/debug/api_priority_and_fairness/dump_requests`: every waiting request.
    pub fn dump_requests(&self) -> String {
        let s = self.lock();
        let mut out = String::from("PriorityLevelName, FlowSchemaName, QueueIndex, RequestIndexInQueue, FlowDistingsher, ArriveTime, InitialSeats\n");
        for (name, id) in Self::by_name(&s) {
            for (queue, pos, rid, width) in s.pool.waiting_in(id) {
                let Some(w) = s.waiting.get(&rid) else { continue };
                let arrived = jiff::Timestamp::now() - jiff::SignedDuration::try_from(w.since.elapsed()).unwrap_or_default();
                out.push_str(&format!("{name}, {}, {queue}, {pos}, {}, {}, {width}\n", w.class.schema, w.class.distinguisher, arrived));
            }
        }
        out
    }
}

/// Sets the classification headers on an answer.
fn name_response(resp: &mut Response<Body>, class: &Classification) {
    for (h, v) in [(FLOW_SCHEMA_UID_HEADER, &class.schema_uid), (PRIORITY_LEVEL_UID_HEADER, &class.level_uid)] {
        if let Ok(v) = HeaderValue::from_str(v) {
            resp.headers_mut().insert(h, v);
        }
    }
}

/// The middleware: admits the request of the user authentication named (anonymous if none),
/// holds its seats while it is answered, and names its schema and level in the answer.
pub async fn gate(State(gate): State<Arc<Gate>>, req: Request, next: Next) -> Response<Body> {
    let user = match (req.extensions().get::<UserInfo>(), gate.unnamed) {
        (Some(u), _) => u.clone(),
        (None, Unnamed::Anonymous) => shardplane_identity::authn::anonymous(),
        (None, Unnamed::Exempt) => return next.run(req).await,
    };
    // The prologue has parsed the query already; a route outside it (tests) is parsed here.
    let watch = match shardplane_http::request::read_by_prologue(req.extensions()) {
        Some((_, watch)) => watch,
        None => shardplane_http::query::Query::parse(req.uri().query().unwrap_or("")).is_watch(),
    };
    let attrs = attributes(req.method().as_str(), req.uri().path(), watch, "");
    let admission = match gate.admit(&user, &attrs).await {
        Ok(a) => a,
        Err((e, class)) => {
            let mut resp = shardplane_http::body::error(&e);
            if let Some(c) = class {
                name_response(&mut resp, &c);
            }
            return resp;
        }
    };
    let mut resp = next.run(req).await;
    name_response(&mut resp, &admission.class);
    if attrs.verb == "watch" || admission.seat.is_none() {
        // A watch's seats go once its response starts; an exempt request holds none.
        return resp;
    }
    // The seats stay taken until the body has been sent (or dropped).
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, Body::new(HeldBody { inner: body, _admission: admission }))
}

/// A response body that holds its request's seats until it is sent or dropped. Its size hint
/// and end are the inner body's, so an answer keeps its `Content-Length` (a stream would turn it
/// into chunked encoding).
struct HeldBody {
    inner: Body,
    _admission: Admission,
}

impl axum::body::HttpBody for HeldBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use shardplane_apimachinery::kind_rules::flowcontrol as bootstrap;

    fn gate(seats: u32) -> Arc<Gate> {
        let g = Gate::new(seats, Unnamed::Anonymous, Arc::new(|_: &str, _: &str| Some(1000)), &prometheus::Registry::new());
        g.configure(Config::build(&bootstrap::priority_levels(), &bootstrap::flow_schemas(), seats));
        g
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo::authenticated(name, "", groups.iter().map(|g| g.to_string()).collect())
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_queues_then_is_refused_while_the_admin_and_others_go_through() {
        // 245 seats: global-default gets ceil(245×20/245) = 20, 10 of them lendable; others idle
        // lend theirs, so the level may hold more, but a list of 1000 objects is 10 seats wide.
        let g = gate(245);
        let noisy = user("noisy", &[]);
        let list = attributes("GET", "/api/v1/pods", false, "");
        let mut held = Vec::new();
        let mut refused = None;
        let mut waiting = Vec::new();
        for _ in 0..2000 {
            let g2 = g.clone();
            let n = noisy.clone();
            let l = list.clone();
            let mut fut = Box::pin(tokio::task::unconstrained(async move { g2.admit(&n, &l).await }));
            match futures::poll!(fut.as_mut()) {
                std::task::Poll::Ready(Ok(a)) => held.push(a),
                std::task::Poll::Ready(Err((e, c))) => {
                    refused = Some((e, c));
                    break;
                }
                std::task::Poll::Pending => waiting.push(fut),
            }
        }
        let (e, class) = refused.expect("the flood is refused once its queues are full");
        assert_eq!((e.code, &*e.reason), (429, "TooManyRequests"));
        assert_eq!(class.unwrap().level, "global-default");
        // handSize 6 × queueLengthLimit 50: at most 300 of one flow wait.
        assert!(waiting.len() <= 300, "{} waiting", waiting.len());
        assert!(!held.is_empty());
        // The admin is never queued.
        let admin = tokio::task::unconstrained(g.admit(&user("admin", &["system:masters"]), &list)).now_or_never().expect("at once").unwrap();
        assert!(admin.seat.is_none());
        assert_eq!(admin.class.level, "exempt");
        // Another user of the same level is dealt other queues: it waits its turn, not the
        // flood's whole backlog; one seat freed goes round the queues fairly, and it is in it.
        let other = g.clone();
        let mut fair = Box::pin(tokio::task::unconstrained(async move { other.admit(&user("quiet", &[]), &attributes("GET", "/api/v1/pods", false, "")).await }));
        assert!(futures::poll!(fair.as_mut()).is_pending());
        let mut turns = 0;
        let admitted = loop {
            drop(held.pop().expect("seats to free"));
            turns += 1;
            if let std::task::Poll::Ready(r) = futures::poll!(fair.as_mut()) {
                break r;
            }
            let mut still = Vec::new();
            for mut w in waiting.drain(..) {
                match futures::poll!(w.as_mut()) {
                    std::task::Poll::Ready(r) => held.push(r.map_err(|(e, _)| e.code).expect("a waiter given its seat")),
                    std::task::Poll::Pending => still.push(w),
                }
            }
            waiting = still;
        };
        assert!(admitted.is_ok());
        assert!(turns <= 6, "the quiet flow waited {turns} turns behind a backlog of {}", waiting.len());
        // What still waits times out after the wait limit with a 429.
        tokio::time::advance(WAIT_LIMIT + Duration::from_secs(1)).await;
        let w = waiting.pop().expect("the flood still waits");
        match w.await {
            Err((e, Some(c))) => assert_eq!((e.code, c.level.as_str()), (429, "global-default")),
            Err((e, None)) => panic!("refused unclassified: {e:?}"),
            Ok(_) => panic!("a waiter got a seat although none was freed"),
        }
        assert!(g.dump_priority_levels().contains("global-default"));
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_leaves_its_queue_and_its_seat_is_not_lost() {
        let g = gate(245);
        let u = user("u", &[]);
        let get = attributes("GET", "/api/v1/namespaces/a/pods/p", false, "");
        // catch-all is not reached; global-default holds at most its 20 + the shared pool.
        let mut held = Vec::new();
        // Polled outside tokio's cooperative budget, which would otherwise run out in this
        // one task and make a ready answer look pending.
        while let Some(Ok(a)) = tokio::task::unconstrained(g.admit(&u, &get)).now_or_never() {
            held.push(a);
            assert!(held.len() < 1000, "a level's seats are bounded");
        }
        let seats_held = held.len();
        // A waiter dropped before its seat came is gone from the queue.
        drop(tokio::task::unconstrained(g.admit(&u, &get)).now_or_never());
        assert_eq!(g.lock().waiting.len(), 0);
        drop(held.pop());
        // The freed seat is there for the next request.
        assert!(tokio::task::unconstrained(g.admit(&u, &get)).now_or_never().is_some_and(|r| r.is_ok()));
        // global-default's 10 guaranteed seats and the 140 every level lends.
        assert_eq!(seats_held, 150);
    }

    #[tokio::test]
    async fn an_answer_keeps_its_length_and_its_seat_until_its_body_is_read() {
        use axum::body::HttpBody;
        use tower::ServiceExt;
        let g = gate(245);
        let app = axum::Router::new()
            .route("/api/v1/namespaces/a/configmaps/c", axum::routing::get(|| async { "0123456789" }))
            .layer(axum::middleware::from_fn_with_state(g.clone(), super::gate))
            .layer(axum::middleware::from_fn(|mut req: Request, next: Next| async move {
                req.extensions_mut().insert(user("u", &["system:authenticated"]));
                next.run(req).await
            }));
        let resp = app.oneshot(Request::builder().uri("/api/v1/namespaces/a/configmaps/c").body(Body::empty()).unwrap()).await.unwrap();
        assert!(resp.headers().contains_key(FLOW_SCHEMA_UID_HEADER) && resp.headers().contains_key(PRIORITY_LEVEL_UID_HEADER));
        assert_eq!(resp.body().size_hint().exact(), Some(10), "the answer's length is known (Content-Length, not chunked)");
        let executing = || g.lock().running.len();
        assert_eq!(executing(), 1, "the seat is held while the body is unsent");
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
        assert_eq!(&body[..], b"0123456789");
        assert_eq!(executing(), 0, "the seat is given back once the body is sent");
    }
}
