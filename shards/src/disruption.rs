//! The disruption controller (RFC 0014, "Eviction and PodDisruptionBudgets"), upstream's in one
//! loop per shard for the budgets whose keys are in its ranges: each budget's status
//! (`currentHealthy`, `desiredHealthy`, `expectedPods`, `disruptionsAllowed`, the
//! `disruptedPods` evictions not yet seen through, the `DisruptionAllowed` condition) is counted
//! from the pods of its namespace at every change of a budget and every `period`.
//!
//! A count is right when written: the budget is read before the pods, and the status is written
//! by a compare-and-swap on the budget's revision as read, so an eviction that counted the budget
//! down after that read (it changed the budget) makes the write fail and the next pass count
//! again.

use crate::shard::Shard;
use crate::write::stored_bytes;
use serde_json::Value;
use shardplane_apimachinery::{disruption, meta};
use shardplane_keyspace::etcd_layout::{prefix_end, resource_prefix};
use shardplane_storage::StorageError;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// How often a shard started from the command line counts its budgets again (a pod's readiness
/// changes without a change to any budget).
pub const PERIOD: Duration = Duration::from_secs(5);

/// How long a pass waits after a budget's change for the changes that come with it (a burst of
/// evictions each changes a budget): at most a few passes a second, each of which lists the
/// store's pods.
const COALESCE: Duration = Duration::from_millis(250);

/// Counts this shard's budgets at every change of a budget (a burst coalesced) and every
/// `period`, until the shard stops.
pub async fn run(shard: Arc<Shard>, period: Duration) {
    let Some(mut changes) = shard.informers.subscribe("policy", "poddisruptionbudgets") else { return };
    loop {
        match pass(&shard).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(shard = %shard.id, budgets = n, "disruption budget status written"),
            Err(e) => tracing::warn!(shard = %shard.id, error = %e, "disruption budget count failed; the next pass retries"),
        }
        tokio::select! {
            _ = changes.changed() => tokio::time::sleep(COALESCE).await,
            _ = tokio::time::sleep(period) => {}
            _ = shard.shutdown.cancelled() => return,
        }
    }
}

/// The summed scale of the controllers of `pods` (a ReplicaSet a Deployment owns counts as the
/// Deployment), or `None` when a pod has no controller with a scale (upstream's controller then
/// allows nothing).
async fn expected_scale(shard: &Shard, pods: &[&Value]) -> Result<Option<i64>, StorageError> {
    let mut seen: BTreeMap<String, i64> = BTreeMap::new();
    for pod in pods {
        let ns = meta::meta_str(pod, "namespace");
        let Some(owner) = pod.pointer("/metadata/ownerReferences").and_then(Value::as_array).and_then(|o| o.iter().find(|r| r["controller"] == true)) else { return Ok(None) };
        let (mut group, mut plural, mut name) = match (owner["apiVersion"].as_str().unwrap_or(""), owner["kind"].as_str().unwrap_or("")) {
            ("v1", "ReplicationController") => ("", "replicationcontrollers", owner["name"].as_str().unwrap_or("").to_owned()),
            ("apps/v1", "ReplicaSet") => ("apps", "replicasets", owner["name"].as_str().unwrap_or("").to_owned()),
            ("apps/v1", "StatefulSet") => ("apps", "statefulsets", owner["name"].as_str().unwrap_or("").to_owned()),
            _ => return Ok(None),
        };
        // Up to the Deployment that owns a ReplicaSet, whose scale is the one that counts.
        loop {
            let id = format!("{group}/{plural}/{name}");
            if seen.contains_key(&id) {
                break;
            }
            let info = shard.builtin(group, plural);
            let (kv, _) = shard.store(&info).get(&Shard::any_key(&info, ns, &name)).await?;
            let Some(obj) = kv.and_then(|kv| serde_json::from_slice::<Value>(&kv.value).ok()) else { return Ok(None) };
            let parent = obj.pointer("/metadata/ownerReferences").and_then(Value::as_array).and_then(|o| o.iter().find(|r| r["controller"] == true && r["kind"] == "Deployment" && r["apiVersion"] == "apps/v1"));
            match parent {
                Some(p) if plural == "replicasets" => {
                    (group, plural, name) = ("apps", "deployments", p["name"].as_str().unwrap_or("").to_owned());
                }
                _ => {
                    seen.insert(id, obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1));
                    break;
                }
            }
        }
    }
    Ok(Some(seen.values().sum()))
}

/// One pass over this shard's budgets; returns how many statuses were written.
pub async fn pass(shard: &Shard) -> Result<usize, StorageError> {
    let own = crate::informer::owned(shard, "policy", "poddisruptionbudgets").await;
    if own.is_empty() {
        return Ok(0);
    }
    let info = shard.builtin("policy", "poddisruptionbudgets");
    // Each budget as it is now, read before the pods.
    let own: Vec<&Value> = own.iter().map(|b| &**b).collect();
    let read = crate::informer::current(shard, &info, &own).await?;
    let namespaces: BTreeSet<String> = read.iter().map(|(_, _, b)| meta::meta_str(b, "namespace").to_owned()).collect();
    let pods_info = shard.builtin("", "pods");
    let prefix = resource_prefix(pods_info.storage_group(), &pods_info.plural);
    let (kvs, _) = shard.store(&pods_info).list_range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0).await?;
    let pods: Vec<Value> = kvs.iter().filter_map(|kv| serde_json::from_slice::<Value>(&kv.value).ok()).filter(|p| namespaces.contains(meta::meta_str(p, "namespace"))).collect();
    let now = meta::now_rfc3339();
    let mut written = 0;
    for (key, revision, mut pdb) in read {
        let counted: Vec<&Value> = pods.iter().filter(|p| disruption::counts(&pdb, p)).collect();
        let scale = if disruption::needs_scale(&pdb) { expected_scale(shard, &counted).await? } else { None };
        let status = disruption::status(&pdb, &counted, scale, &now);
        if disruption::same_status(pdb.get("status"), &status) {
            continue;
        }
        pdb["status"] = status;
        match shard.store(&info).update(&key, stored_bytes(&info, &pdb), revision).await {
            Ok(_) => written += 1,
            // Counted down or changed since it was read: the next pass counts again.
            Err(StorageError::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}
