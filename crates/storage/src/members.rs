//! Membership (RFC 0006): live shards and routers each keep a key under
//! `/shardplane/members/` on an etcd lease, and the coordinator's leader holds
//! `/shardplane/coordinator/leader` on one. A process that stops renewing its lease disappears
//! with it within the lease's TTL.
//!
//! This module owns the keys' formats and the lease mechanics; what the coordinator does with
//! members is its own business.

use crate::{Result, Storage, StorageError};
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use shardplane_keyspace::HashRange;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Prefix of live shards' keys (`…/<id>`).
pub const SHARDS_PREFIX: &str = "/shardplane/members/shards/";
/// Prefix of live routers' keys (`…/<id>`).
pub const ROUTERS_PREFIX: &str = "/shardplane/members/routers/";
/// The coordinator leader's key.
pub const LEADER_KEY: &str = "/shardplane/coordinator/leader";
/// The default lease TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// A range a shard has loaded and follows, and what it holds of it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadedRange {
    #[serde(with = "crate::range_map::range_as_string")]
    pub range: HashRange,
    /// The revision it was loaded at: the shard can serve the range's events after it.
    pub revision: u64,
    pub objects: u64,
    pub cache_bytes: u64,
}

/// A live shard as it describes itself.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardMember {
    pub id: String,
    pub url: String,
    /// Cache bytes it may hold (0: not stated).
    #[serde(default)]
    pub capacity_bytes: u64,
    /// What it has loaded, owned or not.
    #[serde(default)]
    pub loaded: Vec<LoadedRange>,
    /// What it has written and what it holds, for the axis diagnosis (RFC 0015).
    #[serde(default)]
    pub load: ShardLoad,
}

/// The categories of writes the axis diagnosis tells apart (RFC 0015).
pub const WRITE_CATEGORIES: [&str; 6] = ["node-leases", "node-status", "events", "pods", "other-builtin", "custom"];

/// A shard's writes since it started and what its caches hold now (RFC 0015).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardLoad {
    /// Milliseconds since the shard started, when this was read: rates are differences over it.
    pub uptime_ms: u64,
    /// Writes committed, by category ([`WRITE_CATEGORIES`]).
    pub writes: std::collections::BTreeMap<String, WriteCounts>,
    /// Writes committed, by resource (`plural` or `plural.group`): creates and deletes tell
    /// churn apart.
    pub writes_by_resource: std::collections::BTreeMap<String, WriteCounts>,
    /// Each cached resource (`plural` or `plural.group`): objects, cache bytes, watchers.
    pub resources: std::collections::BTreeMap<String, ResourceLoad>,
}

/// Writes by operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WriteCounts {
    pub creates: u64,
    pub updates: u64,
    pub deletes: u64,
}

impl WriteCounts {
    /// Every write.
    pub fn total(&self) -> u64 {
        self.creates + self.updates + self.deletes
    }
}

/// What a shard holds of one resource.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResourceLoad {
    pub objects: u64,
    pub bytes: u64,
    pub watchers: u64,
}

/// A live router as it describes itself.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouterMember {
    pub id: String,
    /// Every open watch of this router takes its events by this epoch's map (RFC 0006, step 4).
    pub switched_epoch: u64,
}

/// Every live member, read at one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Members {
    pub shards: Vec<ShardMember>,
    pub routers: Vec<RouterMember>,
    pub revision: u64,
}

impl Storage {
    /// Every live member (those whose leases are alive), at one revision.
    pub async fn members(&self) -> Result<Members> {
        let resp = self.repeatable(|c| async move { c.kv_client().get("/shardplane/members/", Some(GetOptions::new().with_range(shardplane_keyspace::etcd_layout::prefix_end(b"/shardplane/members/")))).await }).await?;
        let mut m = Members { revision: resp.header().map_or(0, |h| h.revision() as u64), ..Default::default() };
        for kv in resp.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            let bad = |e: serde_json::Error| StorageError::Etcd(format!("member key {key} is unreadable: {e}"));
            if key.starts_with(SHARDS_PREFIX) {
                m.shards.push(serde_json::from_slice(kv.value()).map_err(bad)?);
            } else if key.starts_with(ROUTERS_PREFIX) {
                m.routers.push(serde_json::from_slice(kv.value()).map_err(bad)?);
            }
        }
        Ok(m)
    }

    /// The coordinator leader's id, if there is one.
    pub async fn leader(&self) -> Result<Option<String>> {
        let (kv, _) = self.get(LEADER_KEY.as_bytes()).await?;
        Ok(kv.map(|kv| String::from_utf8_lossy(&kv.value).into_owned()))
    }

    /// Grants a lease of `ttl`.
    pub async fn grant_lease(&self, ttl: Duration) -> Result<i64> {
        // A grant repeated after an unknown fate at most leaves an unused lease that expires.
        Ok(self.repeatable(|c| async move { c.lease_client().grant(ttl.as_secs().max(1) as i64, None).await }).await?.id())
    }

    /// Puts `key` on `lease` (unconditionally).
    pub async fn put_on_lease(&self, key: &str, value: Vec<u8>, lease: i64) -> Result<()> {
        // The same put twice stores the same.
        self.repeatable(|c| {
            let value = value.clone();
            async move { c.kv_client().put(key, value, Some(PutOptions::new().with_lease(lease))).await }
        })
        .await?;
        Ok(())
    }

    /// Creates `key` on `lease` if it does not exist; whether it did.
    pub async fn create_on_lease(&self, key: &str, value: Vec<u8>, lease: i64) -> Result<bool> {
        let txn = Txn::new().when([Compare::create_revision(key, CompareOp::Equal, 0)]).and_then([TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)))]);
        let resp = self
            .write(|c| {
                let txn = txn.clone();
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        Ok(resp.succeeded())
    }

    /// Revokes a lease (its keys disappear now).
    pub async fn revoke_lease(&self, lease: i64) -> Result<()> {
        self.repeatable(|c| async move { c.lease_client().revoke(lease).await }).await?;
        Ok(())
    }

    /// Keeps `lease` alive until `stop` or until etcd says it has expired (then returns an
    /// error, and the caller starts over with a new lease).
    pub async fn keep_alive(&self, lease: i64, ttl: Duration, stop: &CancellationToken) -> Result<()> {
        let endpoints = self.endpoints();
        let ((mut keeper, mut stream, member), _) = endpoints.call_on_member(crate::endpoints::Repeat::Safe, |m, c| async move { c.lease_client().keep_alive(lease).await.map(|(k, s)| (k, s, m)) }).await?;
        // A broken stream leaves its member, so the caller's next lease is kept on another.
        let broken = |e: etcd_client::Error| {
            if crate::endpoints::classify(&e) != crate::endpoints::Failure::Answered {
                endpoints.leave(member);
            }
            StorageError::from(e)
        };
        let period = (ttl / 3).max(Duration::from_millis(100));
        let mut tick = tokio::time::interval(period);
        // After a late tick, one keepalive, not a burst of the missed ones.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut ticked, mut answered) = (std::time::Instant::now(), std::time::Instant::now());
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let now = std::time::Instant::now();
                    if now - ticked > period * 2 || now - answered > period * 2 {
                        tracing::warn!(lease = format!("{lease:x}"), since_tick_ms = (now - ticked).as_millis() as u64, since_answer_ms = (now - answered).as_millis() as u64, "lease keepalive late");
                    }
                    ticked = now;
                    keeper.keep_alive().await.map_err(broken)?
                }
                answer = stream.message() => match answer.map_err(broken)? {
                    Some(a) if a.ttl() > 0 => answered = std::time::Instant::now(),
                    _ => return Err(StorageError::Etcd(format!("lease {lease:x} expired"))),
                },
                _ = stop.cancelled() => return Ok(()),
            }
        }
    }

    /// Keeps `key` equal to the latest value of `value` on a lease of `ttl` until `stop`, then
    /// deletes it (revokes the lease). Reconnects and re-registers after any error (a lease that
    /// expired while etcd was unreachable, say).
    pub fn register(&self, key: String, mut value: watch::Receiver<Vec<u8>>, ttl: Duration, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let storage = self.clone();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let result: Result<()> = async {
                    let lease = storage.grant_lease(ttl).await?;
                    let current = value.borrow_and_update().clone();
                    storage.put_on_lease(&key, current, lease).await?;
                    let alive = storage.keep_alive(lease, ttl, &stop);
                    tokio::pin!(alive);
                    loop {
                        tokio::select! {
                            r = &mut alive => {
                                r?;
                                // Stopped: the key goes now rather than when the lease runs out.
                                let _ = storage.revoke_lease(lease).await;
                                return Ok(());
                            }
                            changed = value.changed() => {
                                if changed.is_err() {
                                    let _ = storage.revoke_lease(lease).await;
                                    return Ok(());
                                }
                                let next = value.borrow_and_update().clone();
                                storage.put_on_lease(&key, next, lease).await?;
                            }
                        }
                    }
                }
                .await;
                match result {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::warn!(key, error = %e, "membership lost; registering again");
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                            _ = stop.cancelled() => return,
                        }
                    }
                }
            }
        })
    }
}
