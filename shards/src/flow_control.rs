//! Priority and fairness at a shard (RFC 0013, "Where fairness is enforced"): the same gate as
//! the router's, over the same FlowSchemas and priority levels followed from the store, so that
//! a flood aimed at this shard's ranges waits in its own flow here and requests for other
//! ranges, on other shards, never meet it. The user is the one the router named in its
//! front-proxy headers; the router's own requests name none and are exempt, as upstream's
//! loopback client is. A list's width is counted from this shard's watch cache.
//!
//! The shard also keeps the `Dangling` condition of the FlowSchemas in its ranges (upstream's
//! configuration controller does it for all of them), written with a compare-and-swap; a lost
//! race is retried at the next change, which the winning write is.

use crate::shard::Shard;
use crate::write::stored_bytes;
use serde_json::Value;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_flowcontrol::follow::{self, GROUP, KINDS};
use shardplane_flowcontrol::{status, Gate, StoredCount, Unnamed};
use shardplane_storage::informer::{Held, Informers};
use std::sync::Arc;

/// The shard's gate over `seats` seats, configured from the store from now on.
pub fn start(shard: &Arc<Shard>, seats: u32) -> Arc<Gate> {
    let weak = Arc::downgrade(shard);
    let stored: StoredCount = Arc::new(move |group, plural| weak.upgrade()?.stored_objects(group, plural));
    let gate = Gate::new(seats, Unnamed::Exempt, stored, shard.metrics.registry());
    let store_of = |g: &str, p: &str| shard.store(&shard.builtin(g, p)).clone();
    let informers = follow::follow(gate.clone(), store_of, &shard.shutdown);
    tokio::spawn(keep_dangling(shard.clone(), informers));
    gate
}

/// Sets the Dangling condition of every FlowSchema this shard owns, at every change of either
/// kind, until the shard shuts down.
async fn keep_dangling(shard: Arc<Shard>, informers: Arc<Informers>) {
    let info = shard.builtin(GROUP, "flowschemas");
    let mut kinds: Vec<_> = KINDS.iter().map(|(g, p)| informers.subscribe(g, p).expect("followed")).collect();
    loop {
        let held: Vec<Arc<Held>> = kinds.iter_mut().map(|k| k.borrow_and_update().clone()).collect();
        if let Some(objects) = follow::objects(&held) {
            let levels: Vec<&str> = objects[0].iter().filter_map(|l| l["metadata"]["name"].as_str()).collect();
            let now = shardplane_apimachinery::meta::now_rfc3339();
            for schema in &objects[1] {
                let name = schema["metadata"]["name"].as_str().unwrap_or("");
                let Ok(key) = shard.owned_key(&info, "", name) else { continue };
                if status::with_dangling(schema, &levels, &now).is_none() {
                    continue;
                }
                if let Err(e) = write_dangling(&shard, &info, &key, &levels, &now).await {
                    tracing::warn!(flowschema = %name, error = %e, "Dangling condition not written; retried at the next change");
                }
            }
        }
        let changed = futures::future::select_all(kinds.iter_mut().map(|k| Box::pin(k.changed())));
        tokio::select! {
            (result, _, _) = changed => if result.is_err() { return },
            _ = shard.shutdown.cancelled() => return,
        }
    }
}

/// Sets the condition on the FlowSchema stored at `key` (absent, or already right: nothing).
async fn write_dangling(shard: &Shard, info: &ResourceInfo, key: &[u8], levels: &[&str], now: &str) -> Result<(), String> {
    let store = shard.store(info);
    let (Some(kv), _) = store.get(key).await.map_err(|e| e.to_string())? else { return Ok(()) };
    let schema: Value = serde_json::from_slice(&kv.value).map_err(|e| e.to_string())?;
    let Some(next) = status::with_dangling(&schema, levels, now) else { return Ok(()) };
    store.update(key, stored_bytes(info, &next), kv.mod_revision).await.map(drop).map_err(|e| e.to_string())
}
