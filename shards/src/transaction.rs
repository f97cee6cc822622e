//! An object's write together with the keys that must change with it, in one etcd transaction
//! (RFC 0014): the Service addresses it takes and gives back ([`crate::service_addresses`]) and
//! the ResourceQuota usage it charges or gives back ([`crate::resource_quota`]). Every create,
//! update and removal of a stored object goes through here, so no crash between two writes can
//! leave an address held by nothing or a quota's usage apart from its objects.

use crate::resource_quota::{self, Refused};
use crate::service_addresses::{self, Plan};
use crate::shard::Shard;
use crate::write::stored_bytes;
use crate::write_load::Op;
use serde_json::Value;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::{meta, ApiError};
use shardplane_storage::{Companion, Kv, Primary, StorageError};

/// Quota compare-and-swaps lost in a row before a write gives up with 409 (each round some
/// other writer's charge committed, so many writers at one quota all finish well before this).
const QUOTA_ROUNDS: usize = 64;

/// Creates `obj` at `key` with what `addresses` takes and what it uses charged to its quotas,
/// picking another address on a collision; `namespace`: the compare that its namespace is still
/// as admitted (RFC 0017), read again when it fails. The inner result is the store's answer for
/// the object itself (`AlreadyExists` for a name in use).
pub(crate) async fn create(shard: &Shard, info: &ResourceInfo, key: &[u8], obj: &mut Value, addresses: Plan, namespace: Option<Companion>) -> Result<Result<u64, StorageError>, ApiError> {
    write(shard, info, obj, addresses, None, namespace, |value| Primary::Create { key: key.to_vec(), value }, Op::Create).await
}

/// Replaces the stored `kv` (decoded: `old`) with `new` and what `addresses` takes and gives
/// back, charging or giving back the usage that changes. A lost race on a key given back is a
/// `Conflict` (the caller reads again and retries).
pub(crate) async fn update(shard: &Shard, info: &ResourceInfo, key: &[u8], kv: &Kv, old: &Value, new: &mut Value, addresses: Plan) -> Result<Result<u64, StorageError>, ApiError> {
    write(shard, info, new, addresses, Some((kv, old)), None, |value| Primary::Update { key: key.to_vec(), value, expected: kv.mod_revision }, Op::Update).await
}

/// Writes `obj` (as `primary` makes the write of its stored bytes) with its companions: a
/// collision on an address picked here picks again, a lost quota compare reads the quotas
/// again, a lost race on a release is a `Conflict` with `read`, the entry the write replaces.
/// A failed transaction with a `namespace` compare reads the namespace again first: a changed
/// namespace is admitted again (or refuses the create), an unchanged one was not the cause.
#[allow(clippy::too_many_arguments)]
async fn write(shard: &Shard, info: &ResourceInfo, obj: &mut Value, mut plan: Plan, read: Option<(&Kv, &Value)>, mut namespace: Option<Companion>, primary: impl Fn(Vec<u8>) -> Primary, op: Op) -> Result<Result<u64, StorageError>, ApiError> {
    let (ns, name) = (meta::meta_str(obj, "namespace").to_owned(), meta::meta_str(obj, "name").to_owned());
    let (mut rounds, mut lease_lost) = (0, false);
    loop {
        let charges = resource_quota::charges(shard, info, read.map(|r| r.1), Some(obj)).await.map_err(ApiError::from)?;
        let addresses = service_addresses::companions(shard, &plan, &ns, &name);
        let lease = expiry_lease(shard, info).await.map_err(shardplane_http::storage_errors::status_of)?;
        let result = commit(shard, info, &primary(stored_bytes(info, obj)), &addresses, &charges, namespace.as_ref(), lease).await;
        if let (Err(StorageError::CompanionConflict { .. }), Some(taken)) = (&result, &namespace) {
            let now = crate::namespace_admission::read(shard, info, &ns, &name).await?;
            if now.as_ref() != Some(taken) {
                namespace = now;
                rounds += 1;
                if rounds >= QUOTA_ROUNDS {
                    return Err(ApiError::conflict("", "namespaces", &ns));
                }
                continue;
            }
        }
        match result {
            // The shared expiry lease is gone from the store (revoked, or a store that lost it in
            // a crash): write again on a new one, once.
            Err(e) if lease != 0 && !lease_lost && shardplane_storage::is_lease_not_found(&e) => {
                lease_lost = true;
                shard.store(info).forget_ttl_lease(lease).await;
            }
            Err(StorageError::CompanionConflict { index }) if index < service_addresses::takes(&plan) => service_addresses::pick_again(shard, &mut plan, index, obj).await?,
            // A quota changed since it was read (or a key changed again before the failure was
            // read back): read the quotas again.
            Err(StorageError::CompanionConflict { index }) if index >= addresses.len() && (index != usize::MAX || !charges.is_empty()) => {
                rounds += 1;
                if rounds >= QUOTA_ROUNDS {
                    return Err(quota_contended(obj, charges.get(index - addresses.len()).or(charges.first())));
                }
            }
            Err(StorageError::CompanionConflict { .. }) => return Ok(Err(StorageError::Conflict { current: read.map(|r| r.0.clone()) })),
            other => {
                if other.is_ok() {
                    shard.write_load.record(info, &ns, op);
                }
                return Ok(other);
            }
        }
    }
}

/// The etcd lease an object of `info` is written on, so that it expires: Events, `--event-ttl`
/// after their last write (RFC 0015); 0 for everything else.
async fn expiry_lease(shard: &Shard, info: &ResourceInfo) -> Result<i64, StorageError> {
    if info.storage_group().is_empty() && info.plural == "events" {
        return shard.store(info).ttl_lease(shard.event_ttl).await;
    }
    Ok(0)
}

/// 409 for a write that lost the race for a quota too many times in a row.
fn quota_contended(obj: &Value, charge: Option<&Companion>) -> ApiError {
    let key = charge.map(|c| String::from_utf8_lossy(c.key()).into_owned()).unwrap_or_default();
    let quota = key.rsplit('/').next().unwrap_or("");
    tracing::warn!(object = %meta::meta_str(obj, "name"), quota, "quota charge lost {QUOTA_ROUNDS} times");
    ApiError::conflict("", "resourcequotas", quota)
}

/// Deletes the stored object `kv` (decoded: `old`) at `key`, giving back what a Service held
/// and what the object used of its quotas in the same transaction. A lost race on a key given
/// back is a `Conflict` with the object as it was read (the caller reads again and retries).
pub(crate) async fn remove(shard: &Shard, info: &ResourceInfo, key: &[u8], kv: &Kv, old: &Value) -> Result<u64, StorageError> {
    remove_with(shard, info, key, kv, old, &[]).await
}

/// [`remove`] with `extra` keys written in the same transaction (an eviction's disruption
/// budget, on the object's store); a lost race on one of them is a `Conflict` too.
pub(crate) async fn remove_with(shard: &Shard, info: &ResourceInfo, key: &[u8], kv: &Kv, old: &Value, extra: &[Companion]) -> Result<u64, StorageError> {
    let mut releases = service_addresses::releases_of_removed(shard, info, old).await?;
    releases.extend_from_slice(extra);
    let primary = Primary::Delete { key: key.to_vec(), expected: kv.mod_revision };
    let mut rounds = 0;
    loop {
        let charges = match resource_quota::charges(shard, info, Some(old), None).await {
            Ok(c) => c,
            // A removal is never refused; quotas that cannot be read now are recounted by the
            // controller.
            Err(Refused::Quota(_)) => Vec::new(),
            Err(Refused::Unavailable(e)) => return Err(StorageError::Etcd(format!("quotas unreadable: {}", e.message))),
        };
        match commit(shard, info, &primary, &releases, &charges, None, 0).await {
            Err(StorageError::CompanionConflict { index }) if index >= releases.len() && (index != usize::MAX || !charges.is_empty()) && rounds < QUOTA_ROUNDS => rounds += 1,
            Err(StorageError::CompanionConflict { .. }) => return Err(StorageError::Conflict { current: Some(kv.clone()) }),
            other => {
                if other.is_ok() {
                    shard.write_load.record(info, meta::meta_str(old, "namespace"), Op::Delete);
                }
                return other;
            }
        }
    }
}

/// Commits `primary` with the `addresses` and quota `charges` it makes, in one transaction; or,
/// with them on other stores, the quota charges first, then the address records taken, then the
/// object, then the records given back. A companion's failed condition is `CompanionConflict`
/// with its index in `addresses` then `charges`. `namespace`: a compare on the object's own
/// store, always in the object's transaction and last in it. `lease`: the etcd lease the object
/// is written on (0: none).
async fn commit(shard: &Shard, info: &ResourceInfo, primary: &Primary, addresses: &[Companion], charges: &[Companion], namespace: Option<&Companion>, lease: i64) -> Result<u64, StorageError> {
    let quota_together = charges.is_empty() || resource_quota::same_store(shard, info);
    if !quota_together {
        resource_quota::charge_first(shard, charges, addresses.len()).await?;
    }
    let store = shard.store(info);
    let with_object: &[Companion] = if quota_together { charges } else { &[] };
    // Only a Service's address records can be on another store (an eviction's budget is passed
    // here only when it shares the object's).
    if addresses.is_empty() || !service_addresses::is_services(info) || service_addresses::one_store(shard) {
        let all: Vec<Companion> = addresses.iter().chain(with_object).chain(namespace).cloned().collect();
        return store.commit_leased(primary, &all, lease).await;
    }
    service_addresses::take_first(shard, addresses).await?;
    let with_object: Vec<Companion> = with_object.iter().chain(namespace).cloned().collect();
    let rev = match store.commit_leased(primary, &with_object, lease).await {
        Err(StorageError::CompanionConflict { index }) if index != usize::MAX => return Err(StorageError::CompanionConflict { index: index + addresses.len() }),
        other => other?,
    };
    service_addresses::release_after(shard, addresses).await;
    Ok(rev)
}

/// Refuses a dry run as the write would be refused: an address the client asked for that is
/// held already, or usage past a quota (nothing is written).
pub(crate) async fn check_dry_run(shard: &Shard, info: &ResourceInfo, old: Option<&Value>, new: &Value, addresses: &Plan) -> Result<(), ApiError> {
    service_addresses::check_dry_run(shard, addresses, new).await?;
    resource_quota::charges(shard, info, old, Some(new)).await.map_err(ApiError::from)?;
    Ok(())
}
