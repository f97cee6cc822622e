//! The router's part in membership and rebalancing (RFC 0006): it follows the stored map (every
//! second, besides refreshing on refusals), its member key says the epoch it has switched to,
//! and every router runs the coordinator service, one of them leading.
//!
//! At an epoch change every merged watch switches to the new map's shards at its mark without
//! ending (crate::upstream); the router reports the epoch as switched once none still reads an
//! older epoch's shards, and only then may the old owner of a moved range let it go.

use crate::state::RouterState;
use shardplane_coordinator::rebalance::Config;
use shardplane_coordinator::service::{self, CoordinatorMetrics, ServiceConfig};
use shardplane_storage::members::{RouterMember, DEFAULT_TTL, ROUTERS_PREFIX};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Registers the router as `id` and runs a coordinator beside it until `stop`.
pub fn start(shards: Arc<RouterState>, id: String, registry: &prometheus::Registry, stop: CancellationToken) {
    let name = id.clone();
    let member = move |shards: &RouterState| serde_json::to_vec(&RouterMember { id: name.clone(), switched_epoch: shards.switched_epoch() }).expect("member serializes");
    let (tx, rx) = tokio::sync::watch::channel(member(&shards));
    let storage = shards.storage().clone();
    storage.register(format!("{ROUTERS_PREFIX}{id}"), rx, DEFAULT_TTL, stop.clone());
    let coordinator = ServiceConfig {
        id: id.clone(),
        ttl: DEFAULT_TTL,
        period: Duration::from_secs(1),
        // Moves happen when asked (shardctl) or to replace a dead shard; balancing by load
        // is the standalone coordinator's `--automatic`.
        plan: Config { automatic: false, ..Config::default() },
        metrics: Some(CoordinatorMetrics::new(registry)),
    };
    tokio::spawn(service::run(storage, coordinator, stop.clone()));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => return,
            }
            if let Err(e) = shards.refresh().await {
                tracing::debug!(error = %e.message, "reading the range map failed; trying again");
            }
            let now = member(&shards);
            tx.send_if_modified(|v| {
                let changed = *v != now;
                *v = now;
                changed
            });
        }
    });
}
