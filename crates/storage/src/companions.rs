//! Writes of an object together with the keys that must change with it, in one etcd transaction
//! (RFC 0014, "Service addresses"): a Service and the IPAddress objects and node-port keys it
//! holds are created, changed and deleted together, so no crash between two writes can leave an
//! address held by nothing or a Service without its address; and a write that uses a
//! ResourceQuota's resources charges the quota in the same transaction.

use crate::{Kv, Result, Storage, StorageError};
use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};

/// The object's own write.
#[derive(Clone, Debug)]
pub enum Primary {
    /// Create-if-absent.
    Create { key: Vec<u8>, value: Vec<u8> },
    /// Replace if the key's mod_revision is still `expected`.
    Update { key: Vec<u8>, value: Vec<u8>, expected: u64 },
    /// Delete if the key's mod_revision is still `expected`.
    Delete { key: Vec<u8>, expected: u64 },
}

impl Primary {
    fn key(&self) -> &[u8] {
        match self {
            Primary::Create { key, .. } | Primary::Update { key, .. } | Primary::Delete { key, .. } => key,
        }
    }
}

/// Another key written in the same transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Companion {
    /// Created; the transaction fails if the key exists.
    Create { key: Vec<u8>, value: Vec<u8> },
    /// Deleted if its mod_revision is still `expected`.
    Delete { key: Vec<u8>, expected: u64 },
    /// Replaced if its mod_revision is still `expected` (a ResourceQuota's usage, charged by
    /// the write that uses it).
    Update { key: Vec<u8>, value: Vec<u8>, expected: u64 },
    /// Not written: the transaction fails unless its mod_revision is still `expected` (the
    /// namespace a create goes into, RFC 0017).
    Unchanged { key: Vec<u8>, expected: u64 },
}

impl Companion {
    /// The key it writes.
    pub fn key(&self) -> &[u8] {
        match self {
            Companion::Create { key, .. } | Companion::Delete { key, .. } | Companion::Update { key, .. } | Companion::Unchanged { key, .. } => key,
        }
    }

    fn holds(&self, current: Option<&Kv>) -> bool {
        match self {
            Companion::Create { .. } => current.is_none(),
            Companion::Delete { expected, .. } | Companion::Update { expected, .. } | Companion::Unchanged { expected, .. } => current.is_some_and(|kv| kv.mod_revision == *expected),
        }
    }
}

impl Storage {
    /// Writes `primary` and every companion in one transaction, or nothing. Fails with the
    /// primary's own error (`AlreadyExists` for a create, `Conflict` with its current state for
    /// an update or delete) when its condition does not hold, else with `CompanionConflict`
    /// naming the first companion whose condition does not. Returns the new revision.
    pub async fn commit(&self, primary: &Primary, companions: &[Companion]) -> Result<u64> {
        self.commit_leased(primary, companions, 0).await
    }

    /// [`Storage::commit`] with the primary's value attached to the etcd lease `lease` (0:
    /// none), so that it expires with it ([`Storage::ttl_lease`]).
    pub async fn commit_leased(&self, primary: &Primary, companions: &[Companion], lease: i64) -> Result<u64> {
        let leased = (lease != 0).then(|| etcd_client::PutOptions::new().with_lease(lease));
        let mut when = vec![match primary {
            Primary::Create { key, .. } => Compare::create_revision(key.clone(), CompareOp::Equal, 0),
            Primary::Update { key, expected, .. } | Primary::Delete { key, expected } => Compare::mod_revision(key.clone(), CompareOp::Equal, *expected as i64),
        }];
        let mut then = vec![match primary {
            Primary::Create { key, value } | Primary::Update { key, value, .. } => TxnOp::put(key.clone(), value.clone(), leased),
            Primary::Delete { key, .. } => TxnOp::delete(key.clone(), None),
        }];
        for c in companions {
            match c {
                Companion::Create { key, value } => {
                    when.push(Compare::create_revision(key.clone(), CompareOp::Equal, 0));
                    then.push(TxnOp::put(key.clone(), value.clone(), None));
                }
                Companion::Delete { key, expected } => {
                    when.push(Compare::mod_revision(key.clone(), CompareOp::Equal, *expected as i64));
                    then.push(TxnOp::delete(key.clone(), None));
                }
                Companion::Update { key, value, expected } => {
                    when.push(Compare::mod_revision(key.clone(), CompareOp::Equal, *expected as i64));
                    then.push(TxnOp::put(key.clone(), value.clone(), None));
                }
                Companion::Unchanged { key, expected } => when.push(Compare::mod_revision(key.clone(), CompareOp::Equal, *expected as i64)),
            }
        }
        // On failure, every key as it is now, to say which condition failed.
        let otherwise: Vec<TxnOp> = std::iter::once(primary.key()).chain(companions.iter().map(Companion::key)).map(|k| TxnOp::get(k.to_vec(), None)).collect();
        let txn = Txn::new().when(when).and_then(then).or_else(otherwise);
        // Tried again on another member whatever happened to an earlier attempt: the primary's
        // own condition tells a repetition apart (RFC 0016, see `Storage::took_effect`).
        let (resp, unknown) = self
            .write_told_apart(|c| {
                let txn = txn.clone();
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        if resp.succeeded() {
            return Ok(resp.header().map_or(0, |h| h.revision() as u64));
        }
        let mut current = resp.op_responses().into_iter().map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().map(Kv::from_etcd),
            _ => None,
        });
        let own = current.next().flatten();
        let own_holds = match primary {
            Primary::Create { .. } => own.is_none(),
            Primary::Update { expected, .. } | Primary::Delete { expected, .. } => own.as_ref().is_some_and(|kv| kv.mod_revision == *expected),
        };
        if !own_holds {
            if unknown && let Some(revision) = self.took_effect(primary, own.as_ref()).await {
                return Ok(revision);
            }
            return Err(match primary {
                Primary::Create { .. } => StorageError::AlreadyExists,
                _ => StorageError::Conflict { current: own },
            });
        }
        let index = current.zip(companions).position(|(kv, c)| !c.holds(kv.as_ref()));
        // Every condition held when read back: another writer changed a key between the
        // transaction and the read; the caller reads again and retries as for a lost CAS.
        Err(StorageError::CompanionConflict { index: index.unwrap_or(usize::MAX) })
    }

    /// Whether a write of `primary` took effect (one whose fate was unknown, once a repetition
    /// found its condition no longer holding; `current`: the key now, which a create needs):
    /// the key's first change after the state the write was conditioned on is this write's own
    /// change if it is the same change (the same bytes put, or a delete). The revision it took
    /// effect at, or `None` when it did not or cannot be told (history compacted, store out of
    /// reach): the caller then reports the condition's failure, as for any lost compare-and-swap
    /// (RFC 0016).
    pub async fn took_effect(&self, primary: &Primary, current: Option<&Kv>) -> Option<u64> {
        let (key, after) = match primary {
            // Created since: the change that created the key is the first after the revision
            // before its creation.
            Primary::Create { key, .. } => (key, current?.create_revision.checked_sub(1)?),
            Primary::Update { key, expected, .. } | Primary::Delete { key, expected } => (key, *expected),
        };
        let first = self.first_change_after(key, after).await?;
        let same = match primary {
            Primary::Create { value, .. } | Primary::Update { value, .. } => !first.deleted && first.kv.value[..] == value[..],
            Primary::Delete { .. } => first.deleted,
        };
        tracing::info!(key = %String::from_utf8_lossy(key), took_effect = same, revision = first.revision, "settled a write whose first attempt's fate was unknown");
        same.then_some(first.revision)
    }

    /// The first change of `key` after revision `after`, from etcd's history (a watch from
    /// `after + 1`, answered at once with what it holds; a progress mark says there is none).
    async fn first_change_after(&self, key: &[u8], after: u64) -> Option<crate::WatchEvent> {
        let mut end = key.to_vec();
        end.push(0);
        let look = async {
            let mut watch = self.watch_range(key, &end, after).await.ok()?;
            watch.request_progress().await.ok()?;
            loop {
                match watch.next().await.ok()?? {
                    crate::WatchItem::Events(events) => return events.into_iter().next(),
                    crate::WatchItem::Progress(_) => return None,
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), look).await.ok().flatten()
    }
}
