//! ResourceQuota (RFC 0014, "ResourceQuota"): every write of a namespaced object charges the
//! quotas of its namespace what it uses more, and gives back what it uses less, by a
//! compare-and-swap of each quota's `status.used` in the object's own etcd transaction (a
//! [`Companion::Update`]). Two writes on two shards that both read a quota's usage cannot both
//! commit: the second one's compare fails, it reads the quota again and decides again, so the
//! sum of what was admitted never passes `status.hard`, and since removals give back in their
//! own transaction, `status.used` equals what the objects use. [`controller`] computes the
//! status of a new or changed quota and repairs what a write that did not see a quota left.
//!
//! The decisions are `shardplane_apimachinery::quota`'s.

pub mod controller;

use crate::shard::Shard;
use crate::write::stored_bytes;
use serde_json::Value;
use shardplane_apimachinery::quota::{self, Decision};
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::{meta, ApiError};
use shardplane_http::storage_errors::status_of as storage_err;
use shardplane_storage::{Companion, StorageError};

/// Why a write's charges could not be planned.
pub(crate) enum Refused {
    /// The write uses more than a quota allows (403 with upstream's message).
    Quota(ApiError),
    /// The quotas could not be read.
    Unavailable(ApiError),
}

impl From<Refused> for ApiError {
    fn from(r: Refused) -> Self {
        match r {
            Refused::Quota(e) | Refused::Unavailable(e) => e,
        }
    }
}

/// The quota updates a write of `info` from `old` to `new` (None: created, or removed) makes,
/// each a compare-and-swap on the quota as read from etcd now. Quotas are found through the
/// shard's informer (a quota created a moment ago may be missed, as upstream's lister misses
/// it; the controller counts the object then) and read from etcd, so the compare is on the
/// quota's current revision. An update that uses exactly what it used is charged nothing and
/// reads nothing.
pub(crate) async fn charges(shard: &Shard, info: &ResourceInfo, old: Option<&Value>, new: Option<&Value>) -> Result<Vec<Companion>, Refused> {
    let Some(obj) = new.or(old) else { return Ok(Vec::new()) };
    if !info.namespaced {
        return Ok(Vec::new());
    }
    if let (Some(o), Some(n)) = (old, new) && quota::usage(&info.group, &info.plural, o) == quota::usage(&info.group, &info.plural, n) {
        return Ok(Vec::new());
    }
    let ns = meta::meta_str(obj, "namespace");
    let held = shard.informers.objects("", "resourcequotas").await.map_err(Refused::Unavailable)?;
    let in_ns: Vec<&Value> = held.iter().filter(|q| meta::meta_str(q, "namespace") == ns).map(|q| &**q).collect();
    if in_ns.is_empty() {
        return Ok(Vec::new());
    }
    let quota_info = shard.builtin("", "resourcequotas");
    let mut out = Vec::new();
    for (key, revision, mut q) in crate::informer::current(shard, &quota_info, &in_ns).await.map_err(|e| Refused::Unavailable(storage_err(e)))? {
        match quota::charge(&q, &info.group, &info.plural, old, new) {
            Decision::Unchanged => {}
            Decision::Refuse(why) => return Err(Refused::Quota(ApiError::forbidden(&info.group, &info.plural, meta::meta_str(obj, "name"), &why))),
            Decision::Charge(used) => {
                q["status"]["used"] = Value::Object(used);
                out.push(Companion::Update { key, value: stored_bytes(&quota_info, &q), expected: revision });
            }
        }
    }
    Ok(out)
}

/// Whether quota charges can be committed in the transaction of a write of `info`: the object
/// and the quotas on one store.
pub(crate) fn same_store(shard: &Shard, info: &ResourceInfo) -> bool {
    !shard.stores.is_overridden("", "resourcequotas") && !shard.stores.is_overridden(info.storage_group(), &info.plural)
}

/// Charges the quotas on their own store before the object is written (the object on another
/// store): a charge whose compare fails is `CompanionConflict` at `first + i`, as in one
/// transaction. An object write that then fails leaves usage charged for nothing until the
/// controller's next pass (upstream's quota admission leaves the same).
pub(crate) async fn charge_first(shard: &Shard, charges: &[Companion], first: usize) -> Result<(), StorageError> {
    let store = shard.store(&shard.builtin("", "resourcequotas"));
    for (i, c) in charges.iter().enumerate() {
        if let Companion::Update { key, value, expected } = c {
            match store.update(key, value.clone(), *expected).await {
                Ok(_) => {}
                Err(StorageError::Conflict { .. }) => return Err(StorageError::CompanionConflict { index: first + i }),
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}
