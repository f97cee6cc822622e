//! The etcd v3 gRPC services the shards use — KV (Range, Put, DeleteRange, Txn, Compact), Watch
//! (start revisions, key ranges, previous values, progress requests, cancel, compacted-revision
//! cancels), Lease (grant, keep-alive, revoke, time-to-live, list, expiry) and Maintenance
//! Status — generated from the protos etcd-client carries, served on a loopback address. Any
//! other call answers `Unimplemented` naming it.
//!
//! Bounds: a request over 1.5 MiB is refused as etcd refuses it; each watch stream buffers at
//! most [`WATCH_BUFFER`] responses, and a stream that falls further behind is ended (its
//! client watches again, as after any broken stream); at most [`MAX_WATCHES`] watches at once.

use crate::mvcc::{self, Compare, CompareOp, CompareTarget, Event, Mvcc, MvccError, Op, OpResult, RangeRequest, Txn, TxnResult};
use crate::store::{to_pb, Store};
use etcd_client::proto::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

#[path = "server_lease.rs"]
mod lease;
#[path = "server_watch.rs"]
mod watch;
use lease::{first_lease_id, Lease};
use watch::passes_filters;

/// The largest request etcd takes by default (`--max-request-bytes`).
pub const MAX_REQUEST_BYTES: usize = 1536 * 1024;
/// Responses buffered per watch stream.
pub const WATCH_BUFFER: usize = 1024;
/// Bytes of replayed history per watch response.
const REPLAY_BYTES: usize = 1 << 20;
/// Watches open at once, over all streams.
pub const MAX_WATCHES: usize = 100_000;
const CLUSTER_ID: u64 = 0x5ba7_d9a1_e5a5_0001;
const MEMBER_ID: u64 = 0x5ba7_d9a1_e5a5_0002;
/// How often watches created with `progress_notify` get a progress mark (etcd's
/// `--experimental-watch-progress-notify-interval`; etcd's default is 10 minutes, shardplane's
/// tests run etcd at 5 s, and an idle range's cache advances only on these).
pub const PROGRESS_NOTIFY: Duration = Duration::from_secs(5);
/// Grouped commits: how far above the current revision each commit puts the ceiling (the
/// revisions that may be handed out before the next commit).
const CEILING_HEADROOM: i64 = 1 << 20;
/// The etcd version this store answers to (the API level it implements).
pub const VERSION: &str = "3.5.0";

struct Watcher {
    stream: u64,
    id: i64,
    key: Vec<u8>,
    end: Vec<u8>,
    /// Changes before this revision are not sent (a start revision in the future).
    start: i64,
    prev_kv: bool,
    /// Sent a progress mark every [`PROGRESS_NOTIFY`] (etcd's `progress_notify`).
    progress_notify: bool,
    no_put: bool,
    no_delete: bool,
    tx: mpsc::Sender<Result<PbWatchResponse, Status>>,
    /// Cancelled to end the watcher's whole stream (it fell too far behind).
    end_stream: tokio_util::sync::CancellationToken,
}

struct State {
    mvcc: Mvcc,
    watchers: Vec<Watcher>,
    leases: HashMap<i64, Lease>,
    next_stream: u64,
    /// Set when a write could not be made durable: nothing is served after that.
    broken: bool,
    /// Grouped commits (RFC 0015): revisions acknowledged but not yet durable, in order.
    pending: Vec<(i64, Vec<Event>)>,
    /// Grouped commits: no revision at or above this may be handed out (it is durable).
    ceiling: i64,
    /// Grouped commits: how far above the current revision each commit puts the ceiling.
    headroom: i64,
    /// The next lease ID to grant: IDs only grow, so a revoked or expired lease's ID is never
    /// granted again (a client still holding it must get "lease not found", not someone
    /// else's lease). See [`first_lease_id`] for why they also grow across restarts.
    next_lease: i64,
}

/// The store and its state, shared by the services.
pub struct ServerState {
    state: Mutex<State>,
    store: Store,
    dir: PathBuf,
    /// The most bytes the database file may take (etcd's `--quota-backend-bytes`).
    quota: u64,
    /// etcd's NOSPACE alarm: raised when the file passes the quota; while raised, writes that
    /// add data are refused, reads and deletes go on. Disarmed by Maintenance.Alarm.
    nospace: std::sync::atomic::AtomicBool,
    /// Grouped commits: how often the acknowledged writes are made durable (None: each write
    /// before it is acknowledged).
    group_every: Option<Duration>,
    /// Held while a group is made durable (and by compaction), so groups land in order.
    flushing: Mutex<()>,
}

/// The four services over one store.
#[derive(Clone)]
pub struct EtcdServer {
    inner: Arc<ServerState>,
}

fn header(revision: i64) -> Option<PbResponseHeader> {
    Some(PbResponseHeader { cluster_id: CLUSTER_ID, member_id: MEMBER_ID, revision, raft_term: 1 })
}

fn mvcc_status(e: MvccError) -> Status {
    match e {
        MvccError::Compacted { .. } | MvccError::FutureRevision => Status::out_of_range(e.to_string()),
        MvccError::DuplicateKey => Status::invalid_argument(e.to_string()),
        MvccError::LeaseNotFound => Status::not_found(e.to_string()),
    }
}

fn too_large() -> Status {
    Status::invalid_argument("etcdserver: request is too large")
}

/// etcd's default `--quota-backend-bytes` (2 GiB).
pub const DEFAULT_QUOTA_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// What etcd answers a write that adds data while its NOSPACE alarm is raised.
fn nospace() -> Status {
    Status::resource_exhausted("etcdserver: mvcc: database space exceeded")
}

/// Whether a transaction can add data (a put, in either branch, at any depth): the writes the
/// NOSPACE alarm refuses. Deletes and reads go on, as in etcd.
fn adds_data(t: &Txn) -> bool {
    t.success.iter().chain(&t.failure).any(|op| match op {
        Op::Put { .. } => true,
        Op::Txn(inner) => adds_data(inner),
        _ => false,
    })
}

fn unimplemented(call: &str) -> Status {
    Status::unimplemented(format!("{call} is not supported by shardplane's embedded store"))
}

fn range_request(r: PbRangeRequest) -> Result<RangeRequest, Status> {
    // Sorted by key, ascending, is what the store gives (and what NONE means).
    let sorted_by_key = r.sort_order == 0 || (r.sort_order == 1 && r.sort_target == 0);
    if !sorted_by_key || r.min_mod_revision != 0 || r.max_mod_revision != 0 || r.min_create_revision != 0 || r.max_create_revision != 0 {
        return Err(unimplemented("Range with sorting or revision filters"));
    }
    Ok(RangeRequest { key: r.key, end: r.range_end, revision: r.revision, limit: r.limit, count_only: r.count_only, keys_only: r.keys_only })
}

fn compare(c: PbCompare) -> Result<Compare, Status> {
    let op = match c.result {
        0 => CompareOp::Equal,
        1 => CompareOp::Greater,
        2 => CompareOp::Less,
        3 => CompareOp::NotEqual,
        _ => return Err(Status::invalid_argument("etcdserver: unknown compare result")),
    };
    let target = match c.target_union {
        Some(PbTargetUnion::Version(v)) => CompareTarget::Version(v),
        Some(PbTargetUnion::CreateRevision(v)) => CompareTarget::Create(v),
        Some(PbTargetUnion::ModRevision(v)) => CompareTarget::Mod(v),
        Some(PbTargetUnion::Value(v)) => CompareTarget::Value(v),
        Some(PbTargetUnion::Lease(v)) => CompareTarget::Lease(v),
        None => return Err(Status::invalid_argument("etcdserver: compare has no target")),
    };
    Ok(Compare { key: c.key, end: c.range_end, op, target })
}

fn op(o: PbTxnRequestOp) -> Result<Op, Status> {
    match o.request {
        Some(PbTxnOpRequest::RequestRange(r)) => Ok(Op::Range(range_request(r)?)),
        Some(PbTxnOpRequest::RequestPut(p)) => put_op(p),
        Some(PbTxnOpRequest::RequestDeleteRange(d)) => Ok(Op::Delete { key: d.key, end: d.range_end, prev_kv: d.prev_kv }),
        Some(PbTxnOpRequest::RequestTxn(t)) => Ok(Op::Txn(Box::new(txn(t)?))),
        None => Err(Status::invalid_argument("etcdserver: empty request op")),
    }
}

fn put_op(p: PbPutRequest) -> Result<Op, Status> {
    if p.ignore_value || p.ignore_lease {
        return Err(unimplemented("Put with ignore_value or ignore_lease"));
    }
    Ok(Op::Put { key: p.key, value: p.value, lease: p.lease, prev_kv: p.prev_kv })
}

fn txn(t: PbTxnRequest) -> Result<Txn, Status> {
    Ok(Txn {
        compare: t.compare.into_iter().map(compare).collect::<Result<_, _>>()?,
        success: t.success.into_iter().map(op).collect::<Result<_, _>>()?,
        failure: t.failure.into_iter().map(op).collect::<Result<_, _>>()?,
    })
}

fn range_response(r: mvcc::RangeResult, revision: i64) -> PbRangeResponse {
    PbRangeResponse { header: header(revision), kvs: r.kvs.iter().map(|k| to_pb(k)).collect(), more: r.more, count: r.count }
}

fn txn_response(t: TxnResult, revision: i64) -> PbTxnResponse {
    let responses = t
        .responses
        .into_iter()
        .map(|r| PbResponseOp {
            response: Some(match r {
                OpResult::Range(r) => PbTxnOpResponse::ResponseRange(range_response(r, revision)),
                OpResult::Put { prev } => PbTxnOpResponse::ResponsePut(PbPutResponse { header: header(revision), prev_kv: prev.map(|k| to_pb(&k)) }),
                OpResult::Delete { deleted, prev } => PbTxnOpResponse::ResponseDeleteRange(PbDeleteResponse { header: header(revision), deleted, prev_kvs: prev.iter().map(|k| to_pb(k)).collect() }),
                OpResult::Txn(t) => PbTxnOpResponse::ResponseTxn(txn_response(t, revision)),
            }),
        })
        .collect();
    PbTxnResponse { header: header(revision), succeeded: t.succeeded, responses }
}

fn event_pb(e: &Event, prev_kv: bool) -> PbEvent {
    PbEvent { r#type: if e.deleted { 1 } else { 0 }, kv: Some(to_pb(&e.kv)), prev_kv: if prev_kv { e.prev.as_ref().map(|p| to_pb(p)) } else { None } }
}

impl EtcdServer {
    /// Opens the store in `dir` (refused if another store holds it).
    pub fn open(dir: &Path) -> Result<Self, crate::store::StoreError> {
        Self::open_with_quota(dir, DEFAULT_QUOTA_BYTES)
    }

    /// Opens the store with a space quota of `quota` bytes.
    pub fn open_with_quota(dir: &Path, quota: u64) -> Result<Self, crate::store::StoreError> {
        Self::open_with(dir, quota, None)
    }

    /// Opens the store with a space quota of `quota` bytes; with `group_every`, writes are
    /// acknowledged once applied in memory and made durable together that often (RFC 0015,
    /// "The liveness tier"): a crash loses at most the writes of the last `group_every` (and
    /// of the commit under way), and the store then comes back at a revision above any it
    /// handed out, compacted there, so that every reader of the lost revisions relists.
    pub fn open_with(dir: &Path, quota: u64, group_every: Option<Duration>) -> Result<Self, crate::store::StoreError> {
        let (store, mut mvcc, leases) = Store::open(dir)?;
        // As etcd after a restart: every lease gets its whole TTL again.
        let now = Instant::now();
        let leases = leases.into_iter().map(|(id, ttl)| (id, Lease { ttl, expires: now + Duration::from_secs(ttl.max(1) as u64) })).collect();
        let mut ceiling = 0;
        if group_every.is_some() {
            let recorded = store.ceiling()?;
            if recorded > mvcc.revision() + 1 {
                // Not a clean stop: revisions up to `recorded - 1` may have been handed out and
                // lost. Start above them, compacted, so none is ever served again.
                let start = recorded + 1;
                mvcc.restore(start, start);
                store.compact(start)?;
                tracing::warn!(revision = start, "the grouped store did not stop cleanly: writes of its last commit interval may be lost; starting above every revision it handed out");
            }
            ceiling = mvcc.revision() + CEILING_HEADROOM;
            store.append_group(&[], ceiling, false)?;
        }
        let next_lease = first_lease_id(&leases);
        let state = State { mvcc, watchers: Vec::new(), leases, next_stream: 0, broken: false, pending: Vec::new(), ceiling, headroom: CEILING_HEADROOM, next_lease };
        let nospace = std::sync::atomic::AtomicBool::new(Store::size(dir) as u64 >= quota);
        let server = Self { inner: Arc::new(ServerState { state: Mutex::new(state), store, dir: dir.to_path_buf(), quota, nospace, group_every, flushing: Mutex::new(()) }) };
        if let Some(every) = group_every {
            let weak = Arc::downgrade(&server.inner);
            std::thread::Builder::new()
                .name("store-group-commit".into())
                .spawn(move || loop {
                    std::thread::sleep(every);
                    let Some(inner) = weak.upgrade() else { return };
                    let _ = EtcdServer { inner }.flush(false);
                })
                .map_err(|e| crate::store::StoreError::Io(e.to_string()))?;
        }
        Ok(server)
    }

    /// Makes every acknowledged write durable now (grouped commits; a no-op otherwise), with
    /// the ceiling raised past the revisions that may be handed out before the next group.
    /// `clean`: the store is stopping, and records that nothing after this was handed out.
    pub fn flush(&self, clean: bool) -> Result<(), crate::store::StoreError> {
        if self.inner.group_every.is_none() {
            return Ok(());
        }
        let _order = self.inner.flushing.lock().unwrap_or_else(|p| p.into_inner());
        if clean {
            // Stopping: no write may come between this commit and the end.
            let mut st = self.lock();
            let group = std::mem::take(&mut st.pending);
            st.broken = true;
            return self.inner.store.append_group(&group, st.mvcc.revision() + 1, true);
        }
        let (group, ceiling) = {
            let mut st = self.lock();
            (std::mem::take(&mut st.pending), st.mvcc.revision() + st.headroom)
        };
        match self.inner.store.append_group(&group, ceiling, false) {
            Ok(()) => {
                let mut st = self.lock();
                st.ceiling = st.ceiling.max(ceiling);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "the grouped store could not make its writes durable; it stops serving");
                self.lock().broken = true;
                Err(e)
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the NOSPACE alarm is raised, raising it first if the file has passed the quota.
    fn out_of_space(&self) -> bool {
        use std::sync::atomic::Ordering;
        if !self.inner.nospace.load(Ordering::SeqCst) && Store::size(&self.inner.dir) as u64 >= self.inner.quota {
            tracing::warn!(quota = self.inner.quota, "the embedded store passed its space quota: NOSPACE alarm raised, writes refused");
            self.inner.nospace.store(true, Ordering::SeqCst);
        }
        self.inner.nospace.load(Ordering::SeqCst)
    }

    /// The current revision.
    pub fn revision(&self) -> i64 {
        self.lock().mvcc.revision()
    }

    /// Runs a transaction: in memory, then durably, then to the watchers. Blocking (fsync).
    fn write(&self, t: &Txn) -> Result<(TxnResult, i64), Status> {
        let mut st = self.lock();
        if st.broken {
            return Err(Status::unavailable("etcdserver: the store could not write to its disk; restart it"));
        }
        if adds_data(t) && self.out_of_space() {
            return Err(nospace());
        }
        if self.inner.group_every.is_some() && st.mvcc.revision() + 1 >= st.ceiling {
            // More writes in one interval than the headroom: raise the ceiling before handing
            // out a revision above it (rare: a million writes between two groups).
            let ceiling = st.mvcc.revision() + st.headroom;
            if let Err(e) = self.inner.store.append_group(&[], ceiling, false) {
                st.broken = true;
                return Err(Status::unavailable(format!("etcdserver: {e}")));
            }
            st.ceiling = ceiling;
        }
        let State { mvcc, leases, .. } = &mut *st;
        let (res, events) = mvcc.txn(t, &|id| leases.contains_key(&id)).map_err(mvcc_status)?;
        let revision = st.mvcc.revision();
        if !events.is_empty() && self.inner.group_every.is_some() {
            st.pending.push((revision, events.clone()));
            Self::dispatch(&mut st, revision, &events);
        } else if !events.is_empty() {
            if let Err(e) = self.inner.store.append(revision, &events) {
                tracing::error!(error = %e, "the embedded store could not make a write durable; it stops serving");
                st.broken = true;
                return Err(Status::unavailable(format!("etcdserver: {e}")));
            }
            Self::dispatch(&mut st, revision, &events);
        }
        Ok((res, revision))
    }

    /// Sends a revision's events to every watcher they concern; a watch stream too far behind
    /// is ended.
    fn dispatch(st: &mut State, revision: i64, events: &[Event]) {
        let mut behind = Vec::new();
        for w in st.watchers.iter().filter(|w| revision >= w.start) {
            let mine: Vec<PbEvent> = events.iter().filter(|e| mvcc::in_range(&e.kv.key, &w.key, &w.end) && passes_filters(e, w.no_put, w.no_delete)).map(|e| event_pb(e, w.prev_kv)).collect();
            if mine.is_empty() {
                continue;
            }
            let resp = PbWatchResponse { header: header(revision), watch_id: w.id, events: mine, ..Default::default() };
            if w.tx.try_send(Ok(resp)).is_err() {
                behind.push(w.stream);
                w.end_stream.cancel();
            }
        }
        if !behind.is_empty() {
            for s in &behind {
                tracing::info!(stream = s, "an embedded-store watch stream fell too far behind; ending it (its client watches again)");
            }
            st.watchers.retain(|w| !behind.contains(&w.stream));
        }
    }

    /// The gRPC router with the four services.
    pub fn router(&self) -> tonic::service::Routes {
        let limit = MAX_REQUEST_BYTES + 512 * 1024;
        tonic::service::Routes::new(PbKvServer::new(self.clone()).max_decoding_message_size(limit))
            .add_service(PbWatchServer::new(self.clone()).max_decoding_message_size(limit))
            .add_service(PbLeaseServer::new(self.clone()).max_decoding_message_size(limit))
            .add_service(PbMaintenanceServer::new(self.clone()).max_decoding_message_size(limit))
    }

    async fn blocking<T: Send + 'static>(&self, f: impl FnOnce(EtcdServer) -> Result<T, Status> + Send + 'static) -> Result<T, Status> {
        let server = self.clone();
        tokio::task::spawn_blocking(move || f(server)).await.map_err(|e| Status::internal(e.to_string()))?
    }

    /// Runs a write: on the blocking pool when it commits to disk before it returns; in place
    /// with grouped commits, where a write touches memory only (the commit thread does the
    /// disk; a ceiling raise, once in 2^20 writes, commits in place) and a thread handoff per
    /// write was most of the liveness tier's CPU (RFC 0015).
    async fn writing<T: Send + 'static>(&self, f: impl FnOnce(EtcdServer) -> Result<T, Status> + Send + 'static) -> Result<T, Status> {
        if self.inner.group_every.is_some() {
            return f(self.clone());
        }
        self.blocking(f).await
    }
}

#[tonic::async_trait]
impl PbKvService for EtcdServer {
    async fn range(&self, request: Request<PbRangeRequest>) -> Result<Response<PbRangeResponse>, Status> {
        let r = range_request(request.into_inner())?;
        let st = self.lock();
        let res = st.mvcc.range(&r).map_err(mvcc_status)?;
        Ok(Response::new(range_response(res, st.mvcc.revision())))
    }

    async fn put(&self, request: Request<PbPutRequest>) -> Result<Response<PbPutResponse>, Status> {
        let p = request.into_inner();
        if p.key.len() + p.value.len() > MAX_REQUEST_BYTES {
            return Err(too_large());
        }
        let t = Txn { success: vec![put_op(p)?], ..Txn::default() };
        let (res, revision) = self.writing(move |s| s.write(&t)).await?;
        let prev = match res.responses.into_iter().next() {
            Some(OpResult::Put { prev }) => prev,
            _ => None,
        };
        Ok(Response::new(PbPutResponse { header: header(revision), prev_kv: prev.map(|k| to_pb(&k)) }))
    }

    async fn delete_range(&self, request: Request<PbDeleteRequest>) -> Result<Response<PbDeleteResponse>, Status> {
        let d = request.into_inner();
        let t = Txn { success: vec![Op::Delete { key: d.key, end: d.range_end, prev_kv: d.prev_kv }], ..Txn::default() };
        let (res, revision) = self.writing(move |s| s.write(&t)).await?;
        let (deleted, prev) = match res.responses.into_iter().next() {
            Some(OpResult::Delete { deleted, prev }) => (deleted, prev),
            _ => (0, vec![]),
        };
        Ok(Response::new(PbDeleteResponse { header: header(revision), deleted, prev_kvs: prev.iter().map(|k| to_pb(k)).collect() }))
    }

    async fn txn(&self, request: Request<PbTxnRequest>) -> Result<Response<PbTxnResponse>, Status> {
        let t = request.into_inner();
        if prost::Message::encoded_len(&t) > MAX_REQUEST_BYTES {
            return Err(too_large());
        }
        let t = txn(t)?;
        let (res, revision) = self.writing(move |s| s.write(&t)).await?;
        Ok(Response::new(txn_response(res, revision)))
    }

    type RangeStreamStream = Pin<Box<dyn Stream<Item = Result<PbRangeStreamResponse, Status>> + Send>>;

    async fn range_stream(&self, _r: Request<PbRangeRequest>) -> Result<Response<Self::RangeStreamStream>, Status> {
        Err(unimplemented("KV.RangeStream"))
    }

    async fn compact(&self, request: Request<PbCompactionRequest>) -> Result<Response<PbCompactionResponse>, Status> {
        let rev = request.into_inner().revision;
        let revision = self
            .blocking(move |s| {
                // Grouped commits: every acknowledged write is in the log before the log below
                // `rev` folds into the base (after any group being committed).
                let _order = s.inner.flushing.lock().unwrap_or_else(|p| p.into_inner());
                let mut st = s.lock();
                if !st.pending.is_empty() {
                    let group = std::mem::take(&mut st.pending);
                    let ceiling = st.ceiling;
                    s.inner.store.append_group(&group, ceiling, false).map_err(|e| Status::unavailable(e.to_string()))?;
                }
                st.mvcc.compact(rev).map_err(mvcc_status)?;
                s.inner.store.compact(rev).map_err(|e| Status::unavailable(e.to_string()))?;
                Ok(st.mvcc.revision())
            })
            .await?;
        Ok(Response::new(PbCompactionResponse { header: header(revision) }))
    }
}

type SnapshotStream = Pin<Box<dyn Stream<Item = Result<PbSnapshotResponse, Status>> + Send>>;

#[tonic::async_trait]
impl PbMaintenanceService for EtcdServer {
    async fn alarm(&self, r: Request<PbAlarmRequest>) -> Result<Response<PbAlarmResponse>, Status> {
        use std::sync::atomic::Ordering;
        let r = r.into_inner();
        // etcd's AlarmType: NONE 0, NOSPACE 1, CORRUPT 2; AlarmAction: GET 0, ACTIVATE 1, DEACTIVATE 2.
        let nospace_asked = r.alarm == 1 || r.alarm == 0;
        match r.action {
            0 => {
                self.out_of_space();
            }
            1 if r.alarm == 1 => self.inner.nospace.store(true, Ordering::SeqCst),
            // Disarmed; the next write that finds the file past the quota raises it again.
            2 if r.alarm == 1 => self.inner.nospace.store(false, Ordering::SeqCst),
            1 | 2 => {}
            _ => return Err(Status::invalid_argument("etcdserver: unknown alarm action")),
        }
        let raised = nospace_asked && self.inner.nospace.load(Ordering::SeqCst) && r.action != 2;
        let alarms = if raised { vec![PbAlarmMember { member_id: MEMBER_ID, alarm: 1 }] } else { vec![] };
        Ok(Response::new(PbAlarmResponse { header: header(self.revision()), alarms }))
    }

    async fn status(&self, _r: Request<PbStatusRequest>) -> Result<Response<PbStatusResponse>, Status> {
        let revision = self.revision();
        let size = Store::size(&self.inner.dir);
        Ok(Response::new(PbStatusResponse {
            header: header(revision),
            version: VERSION.into(),
            db_size: size,
            leader: MEMBER_ID,
            raft_index: revision as u64,
            raft_term: 1,
            raft_applied_index: revision as u64,
            db_size_in_use: size,
            ..Default::default()
        }))
    }

    async fn defragment(&self, _r: Request<PbDefragmentRequest>) -> Result<Response<PbDefragmentResponse>, Status> {
        let revision = self.revision();
        self.blocking(|s| s.inner.store.defragment().map_err(|e| Status::internal(format!("etcdserver: {e}")))).await?;
        Ok(Response::new(PbDefragmentResponse { header: header(revision) }))
    }

    async fn hash(&self, _r: Request<PbHashRequest>) -> Result<Response<PbHashResponse>, Status> {
        Err(unimplemented("Maintenance.Hash"))
    }

    async fn hash_kv(&self, _r: Request<PbHashKvRequest>) -> Result<Response<PbHashKvResponse>, Status> {
        Err(unimplemented("Maintenance.HashKV"))
    }

    type SnapshotStream = SnapshotStream;

    async fn snapshot(&self, _r: Request<PbSnapshotRequest>) -> Result<Response<SnapshotStream>, Status> {
        Err(unimplemented("Maintenance.Snapshot"))
    }

    async fn move_leader(&self, _r: Request<PbMoveLeaderRequest>) -> Result<Response<PbMoveLeaderResponse>, Status> {
        Err(unimplemented("Maintenance.MoveLeader"))
    }

    async fn downgrade(&self, _r: Request<PbDowngradeRequest>) -> Result<Response<PbDowngradeResponse>, Status> {
        Err(unimplemented("Maintenance.Downgrade"))
    }
}

/// Where the store listens: a TCP address, or a unix socket.
pub enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, PathBuf),
}

impl Listener {
    /// Binds `addr`: `127.0.0.1:PORT` (0 for a free port) or `unix:PATH`. A socket file left by
    /// a store that is gone is replaced; one a live process answers on is refused. The socket
    /// is made readable and writable by its owner only.
    pub async fn bind(addr: &str) -> std::io::Result<Self> {
        let Some(path) = addr.strip_prefix("unix://").or_else(|| addr.strip_prefix("unix:")) else {
            return Ok(Self::Tcp(tokio::net::TcpListener::bind(addr).await?));
        };
        let path = PathBuf::from(path);
        if path.exists() {
            if tokio::net::UnixStream::connect(&path).await.is_ok() {
                return Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, format!("{} is in use by a running process", path.display())));
            }
            std::fs::remove_file(&path)?;
        }
        let listener = tokio::net::UnixListener::bind(&path)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        Ok(Self::Unix(listener, path))
    }

    /// The endpoint clients connect to: `http://127.0.0.1:PORT` or `unix:PATH`.
    pub fn endpoint(&self) -> std::io::Result<String> {
        Ok(match self {
            Self::Tcp(l) => format!("http://{}", l.local_addr()?),
            Self::Unix(_, path) => format!("unix:{}", path.display()),
        })
    }
}

/// Serves the store on `listener` until `stop`, with lease expiry; a unix socket's file is
/// removed when it stops.
pub async fn serve(server: EtcdServer, listener: Listener, stop: tokio_util::sync::CancellationToken) -> Result<(), tonic::transport::Error> {
    tokio::spawn(server.clone().expire_leases(stop.clone()));
    let routes = tonic::transport::Server::builder().add_routes(server.router());
    let served = serve_routes(routes, listener, stop).await;
    // A grouped store records its clean stop (RFC 0015), so it restarts where it was.
    if let Err(e) = server.flush(true) {
        tracing::error!(error = %e, "the grouped store could not commit its last writes at stop");
    }
    served
}

async fn serve_routes(routes: tonic::transport::server::Router, listener: Listener, stop: tokio_util::sync::CancellationToken) -> Result<(), tonic::transport::Error> {
    match listener {
        Listener::Tcp(l) => {
            use tokio_stream::StreamExt;
            // Without TCP_NODELAY a reply split over segments waits for the peer's delayed
            // ACK: tens of milliseconds per write (etcd sets it too).
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(l).map(|s| {
                if let Ok(s) = &s {
                    let _ = s.set_nodelay(true);
                }
                s
            });
            routes.serve_with_incoming_shutdown(incoming, stop.cancelled_owned()).await
        }
        Listener::Unix(l, path) => {
            let served = routes.serve_with_incoming_shutdown(tokio_stream::wrappers::UnixListenerStream::new(l), stop.cancelled_owned()).await;
            let _ = std::fs::remove_file(path);
            served
        }
    }
}

#[cfg(test)]
#[path = "grouped_tests.rs"]
mod grouped_tests;
