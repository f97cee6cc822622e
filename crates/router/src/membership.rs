//! The router's part in membership and rebalancing (RFC 0006): its member key, which says the
//! epoch it routes by, and the coordinator service, which every router runs and one leads.
//!
//! Not yet: open watches do not move between shards when the map changes, so the epoch in the
//! member key is the one new requests are routed by.

use crate::forward::Shards;
use shardplane_coordinator::rebalance::Config;
use shardplane_coordinator::service::{self, ServiceConfig};
use shardplane_storage::members::{RouterMember, DEFAULT_TTL, ROUTERS_PREFIX};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Registers the router as `id` and runs a coordinator beside it until `stop`.
pub fn start(shards: Arc<Shards>, id: String, stop: CancellationToken) {
    let name = id.clone();
    let member = move |shards: &Shards| serde_json::to_vec(&RouterMember { id: name.clone(), switched_epoch: shards.epoch() }).expect("member serializes");
    let (tx, rx) = tokio::sync::watch::channel(member(&shards));
    let storage = shards.storage().clone();
    storage.register(format!("{ROUTERS_PREFIX}{id}"), rx, DEFAULT_TTL, stop.clone());
    let coordinator = ServiceConfig {
        id: id.clone(),
        ttl: DEFAULT_TTL,
        period: Duration::from_secs(1),
        // Shards cannot load ranges while running yet (issue #6): nothing moves by itself.
        plan: Config { automatic: false, ..Config::default() },
    };
    tokio::spawn(service::run(storage, coordinator, stop.clone()));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => return,
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
