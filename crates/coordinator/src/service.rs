//! The coordinator as a running service (RFC 0006): at most one leader, elected on an etcd
//! lease; the leader applies [`rebalance::step`] to the stored map and the live members and
//! writes the result by compare-and-swap, guarded by its leadership. It runs inside each router
//! by default (one of them leads) and as the `shardplane-coordinator` binary in production.
//!
//! It reads etcd every `period` rather than following watches: two small reads a period, and a
//! dead shard's ranges are reassigned within its lease TTL plus one period.

use crate::rebalance::{self, Config};
use shardplane_storage::members::LEADER_KEY;
use shardplane_storage::{Storage, StorageError};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How the service runs.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// This coordinator's name (the leader key holds it).
    pub id: String,
    /// The leadership lease's TTL.
    pub ttl: Duration,
    /// How often the leader looks at the map and the members.
    pub period: Duration,
    pub plan: Config,
}

/// Runs until `stop`: campaigns, and while leader, coordinates.
pub async fn run(storage: Storage, cfg: ServiceConfig, stop: CancellationToken) {
    while !stop.is_cancelled() {
        match lead(&storage, &cfg, &stop).await {
            Ok(()) => {}
            Err(e) => tracing::warn!(coordinator = %cfg.id, error = %e, "coordinator lost etcd or its leadership; campaigning again"),
        }
        tokio::select! {
            _ = tokio::time::sleep(cfg.period) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// One campaign: Ok(()) when another coordinator leads (try again later) or on stop.
async fn lead(storage: &Storage, cfg: &ServiceConfig, stop: &CancellationToken) -> Result<(), StorageError> {
    let lease = storage.grant_lease(cfg.ttl).await?;
    if !storage.create_on_lease(LEADER_KEY, cfg.id.clone().into_bytes(), lease).await? {
        let _ = storage.revoke_lease(lease).await;
        return Ok(());
    }
    tracing::info!(coordinator = %cfg.id, "leading");
    let lost = CancellationToken::new();
    let alive = {
        let (storage, lost, stop, ttl) = (storage.clone(), lost.clone(), stop.clone(), cfg.ttl);
        tokio::spawn(async move {
            if let Err(e) = storage.keep_alive(lease, ttl, &stop).await {
                tracing::warn!(error = %e, "coordinator leadership lease lost");
            }
            lost.cancel();
        })
    };
    let result = async {
        loop {
            if let Err(e) = coordinate_once(storage, cfg).await {
                match e {
                    // Someone else wrote the map meanwhile (an operator, a router): read again.
                    StorageError::Conflict { .. } | StorageError::AlreadyExists => {}
                    e => return Err(e),
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(cfg.period) => {}
                _ = lost.cancelled() => return Ok(()),
            }
        }
    }
    .await;
    alive.abort();
    let _ = storage.revoke_lease(lease).await;
    result
}

/// One look: if the map calls for a change, write it.
async fn coordinate_once(storage: &Storage, cfg: &ServiceConfig) -> Result<(), StorageError> {
    let Some(current) = storage.load_range_map().await? else { return Ok(()) };
    let members = storage.members().await?;
    if let Some(next) = rebalance::step(&current.map, &members, &cfg.plan) {
        if let Err(e) = rebalance::check(&next) {
            // A bug, not a state of the world: never write it.
            tracing::error!(error = %e, "the coordinator computed an invalid map; not writing it");
            return Ok(());
        }
        storage.store_range_map_as_leader(&next, Some(current.mod_revision), LEADER_KEY, &cfg.id).await?;
        tracing::info!(epoch = next.epoch, moves = next.moves.len(), "range map updated");
    }
    Ok(())
}
