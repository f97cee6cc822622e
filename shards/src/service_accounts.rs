//! The `default` ServiceAccount of every namespace, kept by the shards (upstream's
//! kube-controller-manager keeps it; shardplane runs none: RFC 0011), and the account a new pod
//! runs as, read for the ServiceAccount admission plugin
//! (`shardplane_apimachinery::service_accounts`).
//!
//! The account is created in the store by the shard that creates its namespace, before that
//! create is answered, so a pod created right after finds it; the bootstrap namespaces' accounts
//! at start (`crate::bootstrap`); and a `default` account deleted from a namespace that is not
//! being deleted is created again, as upstream's controller recreates it.

use crate::shard::Shard;
use serde_json::Value;
use shardplane_apimachinery::service_accounts::{default_service_account, DEFAULT_SERVICE_ACCOUNT};
use shardplane_apimachinery::{defaults, encode, strategy};
use shardplane_storage::StorageError;
use std::time::Duration;

/// How often the plugin reads the `default` account before giving up (upstream's: the
/// controller may be creating it right now), and the pause between reads.
const DEFAULT_ACCOUNT_READS: usize = 10;
const BETWEEN_READS: Duration = Duration::from_millis(150);

/// Creates the `default` ServiceAccount of `namespace` unless it exists.
pub(crate) async fn ensure_default(shard: &Shard, namespace: &str) -> Result<(), StorageError> {
    let info = shard.builtin("", "serviceaccounts");
    let mut account = default_service_account(namespace);
    defaults::set_defaults(&info, &mut account);
    strategy::prepare_for_create(&info, &mut account);
    match shard.store(&info).create(&Shard::any_key(&info, namespace, DEFAULT_SERVICE_ACCOUNT), encode::object_bytes(&account)).await {
        Ok(_) | Err(StorageError::AlreadyExists) => Ok(()),
        Err(e) => Err(e),
    }
}

/// After the `default` account of `namespace` was deleted: created again unless the namespace
/// is gone or going.
pub(crate) async fn recreate_default(shard: &Shard, namespace: &str) {
    let ns_info = shard.builtin("", "namespaces");
    let Ok((Some(kv), _)) = shard.store(&ns_info).get(&Shard::any_key(&ns_info, "", namespace)).await else { return };
    let ns: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
    if ns.pointer("/metadata/deletionTimestamp").is_some() || ns.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating") {
        return;
    }
    if let Err(e) = ensure_default(shard, namespace).await {
        tracing::warn!(namespace, error = %e, "default service account not recreated");
    }
}

/// The ServiceAccount `name` of `namespace` as the store holds it, or why not (a missing
/// `default` account is read again a few times first, as upstream's plugin does).
pub(crate) async fn account(shard: &Shard, namespace: &str, name: &str) -> Result<Value, String> {
    let info = shard.builtin("", "serviceaccounts");
    let key = Shard::any_key(&info, namespace, name);
    let reads = if name == DEFAULT_SERVICE_ACCOUNT { DEFAULT_ACCOUNT_READS } else { 1 };
    for i in 0..reads {
        if i > 0 {
            tokio::time::sleep(BETWEEN_READS).await;
        }
        match shard.store(&info).get(&key).await {
            Ok((Some(kv), _)) => return serde_json::from_slice(&kv.value).map_err(|e| e.to_string()),
            Ok((None, _)) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!("serviceaccount {name:?} not found"))
}
