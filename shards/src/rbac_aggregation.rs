//! The ClusterRole aggregation controller (upstream runs it in kube-controller-manager; RFC 0012):
//! an aggregated ClusterRole's stored `rules` are kept the union of the rules of the
//! ClusterRoles its `aggregationRule` selects, written by the shard that owns its key. The
//! router's RBAC decisions take the union themselves ([`Policy`] aggregates when it is built),
//! so this only keeps what clients read (`kubectl get clusterrole admin -o yaml`) the same.
//!
//! Every ClusterRole is followed (an informer over the whole hash space, at most
//! [`MAX_OBJECTS`]); each change recomputes the unions, and each aggregated role whose stored
//! rules differ is written with a compare-and-swap. A lost race is retried at the next change,
//! which the winning write itself is.

use crate::shard::Shard;
use crate::write::stored_bytes;
use serde_json::Value;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_identity::rbac::{Objects, Policy, PolicyRule};
use shardplane_storage::informer::{Held, InformerOptions, Informers};
use std::sync::Arc;

const GROUP: &str = "rbac.authorization.k8s.io";

/// The most ClusterRoles followed.
pub const MAX_OBJECTS: usize = 100_000;

/// Runs until the shard shuts down.
pub async fn run(shard: Arc<Shard>) {
    let info = shard.builtin(GROUP, "clusterroles");
    let informers = Informers::start(&[(GROUP, "clusterroles")], |_, _| shard.store(&info).clone(), &shard.shutdown, InformerOptions { max: MAX_OBJECTS, progress_every: None });
    let mut roles = informers.subscribe(GROUP, "clusterroles").expect("followed");
    loop {
        let held = roles.borrow_and_update().clone();
        if let Held::Objects(m) = &*held {
            let policy = Policy::new(&Objects { cluster_roles: m.values().map(|v| &**v).collect(), ..Default::default() });
            for (name, rules) in policy.aggregation_updates() {
                let Ok(key) = shard.owned_key(&info, "", name) else { continue };
                if let Err(e) = write_rules(&shard, &info, &key, rules).await {
                    tracing::warn!(clusterrole = %name, error = %e, "aggregated rules not written; retried at the next change");
                }
            }
        }
        tokio::select! {
            changed = roles.changed() => if changed.is_err() { return },
            _ = shard.shutdown.cancelled() => return,
        }
    }
}

/// Writes `rules` into the stored ClusterRole at `key` (absent: nothing to do).
async fn write_rules(shard: &Shard, info: &ResourceInfo, key: &[u8], rules: &[PolicyRule]) -> Result<(), String> {
    let store = shard.store(info);
    let (Some(kv), _) = store.get(key).await.map_err(|e| e.to_string())? else { return Ok(()) };
    let mut role: Value = serde_json::from_slice(&kv.value).map_err(|e| e.to_string())?;
    role["rules"] = serde_json::to_value(rules).map_err(|e| e.to_string())?;
    store.update(key, stored_bytes(info, &role), kv.mod_revision).await.map(drop).map_err(|e| e.to_string())
}
