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
}

impl Companion {
    /// The key it writes.
    pub fn key(&self) -> &[u8] {
        match self {
            Companion::Create { key, .. } | Companion::Delete { key, .. } | Companion::Update { key, .. } => key,
        }
    }

    fn holds(&self, current: Option<&Kv>) -> bool {
        match self {
            Companion::Create { .. } => current.is_none(),
            Companion::Delete { expected, .. } | Companion::Update { expected, .. } => current.is_some_and(|kv| kv.mod_revision == *expected),
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
            }
        }
        // On failure, every key as it is now, to say which condition failed.
        let otherwise: Vec<TxnOp> = std::iter::once(primary.key()).chain(companions.iter().map(Companion::key)).map(|k| TxnOp::get(k.to_vec(), None)).collect();
        let resp = self.client.kv_client().txn(Txn::new().when(when).and_then(then).or_else(otherwise)).await?;
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
}
