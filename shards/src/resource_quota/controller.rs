//! The quota controller (RFC 0014, "ResourceQuota"), upstream's in one loop per shard, for the
//! quotas whose keys are in the shard's ranges: a quota created or changed gets `status.hard`
//! from `spec.hard` and `status.used` counted from the objects of its namespace at once (on the
//! informer's change), and every quota is counted again every `period` (upstream's
//! `--resource-quota-sync-period`, 5 minutes), which repairs what a write that did not see its
//! quota (created a moment before, or on another store after a crash) left uncounted.
//!
//! A count is right when written: the quota is read before the objects, and the status is
//! written by a compare-and-swap on the quota's revision as read. A write that charged the
//! quota after that read changed the quota, so the compare fails and the next pass counts
//! again; a write before it is in both the quota's usage and the objects listed after.

use crate::shard::Shard;
use crate::write::stored_bytes;
use serde_json::Value;
use shardplane_apimachinery::{meta, quota};
use shardplane_keyspace::etcd_layout::{prefix_end, resource_prefix};
use shardplane_storage::StorageError;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// How often a shard started from the command line counts every quota again (upstream's
/// default sync period).
pub const PERIOD: Duration = Duration::from_secs(300);

/// Counts the quotas that need it at every change of a quota, and all of them every `period`,
/// until the shard stops.
pub async fn run(shard: Arc<Shard>, period: Duration) {
    let Some(mut changes) = shard.informers.subscribe("", "resourcequotas") else { return };
    let mut next_full = tokio::time::Instant::now() + period;
    loop {
        let full = tokio::time::Instant::now() >= next_full;
        if full {
            next_full = tokio::time::Instant::now() + period;
        }
        match pass(&shard, full).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(shard = %shard.id, quotas = n, full, "quota status written"),
            Err(e) => tracing::warn!(shard = %shard.id, error = %e, "quota count failed; the next pass retries"),
        }
        // A write that lost its compare to a client's charge is retried a moment later.
        let stale = needs_count(&shard).await;
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep_until(next_full) => {}
            _ = tokio::time::sleep(Duration::from_secs(1)), if stale => {}
            _ = shard.shutdown.cancelled() => return,
        }
    }
}

/// Whether a quota of this shard has a status not yet written for its spec.
async fn needs_count(shard: &Shard) -> bool {
    crate::informer::owned(shard, "", "resourcequotas").await.iter().any(|q| quota::status_stale(q))
}

/// One pass: counts this shard's quotas whose status is stale (all of them when `full`) and
/// writes each status that differs. Returns how many were written.
pub async fn pass(shard: &Shard, full: bool) -> Result<usize, StorageError> {
    let due: Vec<Arc<Value>> = crate::informer::owned(shard, "", "resourcequotas").await.into_iter().filter(|q| full || quota::status_stale(q)).collect();
    if due.is_empty() {
        return Ok(0);
    }
    let info = shard.builtin("", "resourcequotas");
    let store = shard.store(&info);
    // Each quota as it is now, read before the objects it counts.
    let due: Vec<&Value> = due.iter().map(|q| &**q).collect();
    let read = crate::informer::current(shard, &info, &due).await?;
    let wanted: BTreeSet<(String, String)> = read.iter().flat_map(|(_, _, q)| quota::counted_resources(q)).collect();
    let namespaces: BTreeSet<String> = read.iter().map(|(_, _, q)| meta::meta_str(q, "namespace").to_owned()).collect();
    // Every object of each counted resource in those namespaces, read after the quotas.
    let mut objects: BTreeMap<String, Vec<(String, String, Value)>> = BTreeMap::new();
    for (group, plural) in &wanted {
        let stored = shard.resources().iter().find(|r| r.group == *group && r.plural == *plural && r.is_storage_version()).cloned();
        let Some(info) = stored.filter(|r| r.namespaced) else { continue };
        let prefix = resource_prefix(info.storage_group(), &info.plural);
        let (kvs, _) = shard.store(&info).list_range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0).await?;
        for kv in kvs {
            let Ok(v) = serde_json::from_slice::<Value>(&kv.value) else { continue };
            let ns = meta::meta_str(&v, "namespace");
            if namespaces.contains(ns) {
                objects.entry(ns.to_owned()).or_default().push((group.clone(), plural.clone(), v));
            }
        }
    }
    let mut written = 0;
    for (key, revision, mut q) in read {
        let ns = meta::meta_str(&q, "namespace").to_owned();
        let in_ns = objects.get(&ns).map_or(&[][..], Vec::as_slice);
        let status = quota::recalculate(&q, in_ns.iter().map(|(g, p, o)| (g.as_str(), p.as_str(), o)));
        if !quota::status_stale(&q) && quota::same_usage(q.pointer("/status/used"), status.get("used")) {
            continue;
        }
        q["status"] = status;
        match store.update(&key, stored_bytes(&info, &q), revision).await {
            Ok(_) => written += 1,
            // Charged or changed since it was read: the next pass counts again.
            Err(StorageError::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}
