//! The Lease service of the embedded store: grant (IDs that only grow), keep-alive, revoke,
//! time-to-live, list, and the expiry of leases whose time ran out (their keys deleted in one
//! revision, as etcd does).

use super::*;

pub(super) struct Lease {
    pub(super) ttl: i64,
    pub(super) expires: Instant,
}

impl State {
    /// A lease ID no lease has had since the store opened, skipping any a client chose itself.
    pub(super) fn take_lease_id(&mut self) -> i64 {
        loop {
            let id = self.next_lease;
            // 2^56 IDs at the clock's pace last two million years; past them, start low again.
            self.next_lease = if id >= LEASE_ID_MASK { 1 } else { id + 1 };
            if !self.leases.contains_key(&id) {
                return id;
            }
        }
    }
}

/// Lease IDs stay in the low 56 bits, positive, as etcd's do.
const LEASE_ID_MASK: i64 = (1 << 56) - 1;

/// Where lease IDs start when the store opens: above every lease it holds, and above the
/// clock in milliseconds shifted left by 8, as etcd's ID generator seeds itself. A revoked
/// lease is forgotten, so after a restart only the clock keeps its ID from coming back: it
/// would take more than 256 grants a millisecond, sustained, for the IDs to run ahead of it.
pub(super) fn first_lease_id(leases: &HashMap<i64, Lease>) -> i64 {
    let clock = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let seed = (clock << 8) & LEASE_ID_MASK;
    let above_held = leases.keys().copied().max().unwrap_or(0).saturating_add(1);
    seed.max(above_held).max(1)
}

impl EtcdServer {
    fn revoke(&self, id: i64) -> Result<i64, Status> {
        let keys = {
            let mut st = self.lock();
            if st.leases.remove(&id).is_none() {
                return Err(Status::not_found("etcdserver: requested lease not found"));
            }
            st.mvcc.keys_with_lease(id)
        };
        let _ = self.inner.store.remove_lease(id);
        let t = Txn { success: keys.into_iter().map(|key| Op::Delete { key, end: vec![], prev_kv: false }).collect(), ..Txn::default() };
        Ok(self.write(&t)?.1)
    }

    /// Revokes expired leases until `stop`.
    pub async fn expire_leases(self, stop: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => return,
            }
            let now = Instant::now();
            let expired: Vec<i64> = self.lock().leases.iter().filter(|(_, l)| l.expires <= now).map(|(id, _)| *id).collect();
            for id in expired {
                let server = self.clone();
                let _ = tokio::task::spawn_blocking(move || server.revoke(id)).await;
            }
        }
    }
}

/// etcd's largest lease TTL in seconds (`MaxLeaseTTL`); a larger one is refused as etcd refuses
/// it, which also keeps every expiry instant representable.
const MAX_LEASE_TTL: i64 = 9_000_000_000;

type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<PbLeaseKeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl PbLeaseService for EtcdServer {
    async fn lease_grant(&self, request: Request<PbLeaseGrantRequest>) -> Result<Response<PbLeaseGrantResponse>, Status> {
        let r = request.into_inner();
        let ttl = r.ttl.max(1);
        if ttl > MAX_LEASE_TTL {
            return Err(Status::out_of_range("etcdserver: too large lease TTL"));
        }
        if self.out_of_space() {
            return Err(nospace());
        }
        let (id, revision) = {
            let mut st = self.lock();
            let id = if r.id != 0 {
                if st.leases.contains_key(&r.id) {
                    return Err(Status::failed_precondition("etcdserver: lease already exists"));
                }
                r.id
            } else {
                st.take_lease_id()
            };
            st.leases.insert(id, Lease { ttl, expires: Instant::now() + Duration::from_secs(ttl as u64) });
            (id, st.mvcc.revision())
        };
        self.inner.store.put_lease(id, ttl).map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(PbLeaseGrantResponse { header: header(revision), id, ttl, error: String::new() }))
    }

    async fn lease_revoke(&self, request: Request<PbLeaseRevokeRequest>) -> Result<Response<PbLeaseRevokeResponse>, Status> {
        let id = request.into_inner().id;
        let revision = self.blocking(move |s| s.revoke(id)).await?;
        Ok(Response::new(PbLeaseRevokeResponse { header: header(revision) }))
    }

    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_keep_alive(&self, request: Request<Streaming<PbLeaseKeepAliveRequest>>) -> Result<Response<KeepAliveStream>, Status> {
        let mut requests = request.into_inner();
        let server = self.clone();
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            while let Some(Ok(req)) = requests.next().await {
                let resp = {
                    let mut st = server.lock();
                    let revision = st.mvcc.revision();
                    match st.leases.get_mut(&req.id) {
                        Some(l) => {
                            l.expires = Instant::now() + Duration::from_secs(l.ttl as u64);
                            PbLeaseKeepAliveResponse { header: header(revision), id: req.id, ttl: l.ttl }
                        }
                        None => PbLeaseKeepAliveResponse { header: header(revision), id: req.id, ttl: 0 },
                    }
                };
                if tx.send(Ok(resp)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn lease_time_to_live(&self, request: Request<PbLeaseTimeToLiveRequest>) -> Result<Response<PbLeaseTimeToLiveResponse>, Status> {
        let r = request.into_inner();
        let st = self.lock();
        let revision = st.mvcc.revision();
        Ok(Response::new(match st.leases.get(&r.id) {
            Some(l) => PbLeaseTimeToLiveResponse {
                header: header(revision),
                id: r.id,
                ttl: l.expires.saturating_duration_since(Instant::now()).as_secs() as i64,
                granted_ttl: l.ttl,
                keys: if r.keys { st.mvcc.keys_with_lease(r.id) } else { vec![] },
            },
            None => PbLeaseTimeToLiveResponse { header: header(revision), id: r.id, ttl: -1, granted_ttl: 0, keys: vec![] },
        }))
    }

    async fn lease_leases(&self, _request: Request<PbLeaseLeasesRequest>) -> Result<Response<PbLeaseLeasesResponse>, Status> {
        let st = self.lock();
        Ok(Response::new(PbLeaseLeasesResponse { header: header(st.mvcc.revision()), leases: st.leases.keys().map(|id| PbLeaseStatus { id: *id }).collect() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn grant(s: &EtcdServer) -> i64 {
        s.lease_grant(Request::new(PbLeaseGrantRequest { ttl: 60, id: 0 })).await.unwrap().into_inner().id
    }

    async fn revoke(s: &EtcdServer, id: i64) {
        s.lease_revoke(Request::new(PbLeaseRevokeRequest { id })).await.unwrap();
    }

    /// A client that still holds a revoked lease's ID must find it gone, not someone else's
    /// lease: no ID is granted twice, whether the revoked lease was the newest or not, and
    /// not after a restart either (the store forgets revoked leases).
    #[tokio::test]
    async fn a_revoked_lease_id_is_never_granted_again() {
        let dir = std::env::temp_dir().join(format!("shardplane-lease-test-{}", uuid::Uuid::new_v4()));
        let mut seen = std::collections::BTreeSet::new();
        {
            let s = EtcdServer::open(&dir).unwrap();
            let (a, b) = (grant(&s).await, grant(&s).await);
            assert!(a > 0 && b > a, "IDs grow: {a}, {b}");
            revoke(&s, b).await;
            let c = grant(&s).await;
            assert!(c > b, "the newest lease was revoked; its ID came back: {c}");
            // A client may choose an ID; the counter steps over it.
            let chosen = c + 1;
            s.lease_grant(Request::new(PbLeaseGrantRequest { ttl: 60, id: chosen })).await.unwrap();
            let d = grant(&s).await;
            assert!(d > chosen);
            revoke(&s, d).await;
            seen.extend([a, b, c, chosen, d]);
        }
        let s = EtcdServer::open(&dir).unwrap();
        let e = grant(&s).await;
        assert!(!seen.contains(&e) && e > *seen.iter().max().unwrap(), "after a restart: {e} among {seen:?}");
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
