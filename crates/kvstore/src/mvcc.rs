//! The multi-version key space with etcd's revision semantics, in memory: one global revision
//! that every write transaction raises by one; per key its create and mod revisions and its
//! version; reads at any revision down to the compacted one; every change of every key kept
//! (with sub-revisions inside one transaction) until compaction, so watches can replay them.
//! Pure: no I/O, no clock. [`crate::store`] makes it durable, [`crate::server`] serves it.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

/// A key's value at one revision, as etcd's `mvccpb.KeyValue`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub lease: i64,
}

/// One change, as etcd's `mvccpb.Event`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The key after the change; for a delete, only `key` and `mod_revision` (the delete's).
    pub kv: Kv,
    pub deleted: bool,
    /// The key before the change, if it existed.
    pub prev: Option<Arc<Kv>>,
}

/// Why a request was refused, with etcd's messages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MvccError {
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted { compacted: i64 },
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRevision,
    #[error("etcdserver: duplicate key given in txn request")]
    DuplicateKey,
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
}

/// One version of a key: its value, or a tombstone (deleted at `main`).
#[derive(Clone, Debug)]
struct Version {
    main: i64,
    sub: i64,
    kv: Option<Arc<Kv>>,
}

/// Which keys a request names: one key (`end` empty), `[key, end)` (nothing if `end` ≤ `key`),
/// or every key ≥ `key` (`end` = `\0`), as etcd's `range_end`.
pub fn key_range(key: &[u8], end: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    if end.is_empty() {
        (Bound::Included(key.to_vec()), Bound::Included(key.to_vec()))
    } else if end == [0] {
        (Bound::Included(key.to_vec()), Bound::Unbounded)
    } else if end <= key {
        // Nothing (etcd answers an inverted range with no keys).
        (Bound::Included(key.to_vec()), Bound::Excluded(key.to_vec()))
    } else {
        (Bound::Included(key.to_vec()), Bound::Excluded(end.to_vec()))
    }
}

/// Whether `k` is in the range `key_range(key, end)` names.
pub fn in_range(k: &[u8], key: &[u8], end: &[u8]) -> bool {
    if end.is_empty() {
        k == key
    } else {
        k >= key && (end == [0] || k < end)
    }
}

/// A range read.
#[derive(Clone, Debug, Default)]
pub struct RangeRequest {
    pub key: Vec<u8>,
    pub end: Vec<u8>,
    /// 0: the current revision.
    pub revision: i64,
    /// 0: no limit.
    pub limit: i64,
    pub count_only: bool,
    pub keys_only: bool,
}

/// What a range read found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResult {
    pub kvs: Vec<Arc<Kv>>,
    /// Every key in the range, whatever the limit.
    pub count: i64,
    pub more: bool,
}

/// What a comparison looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompareTarget {
    Version(i64),
    Create(i64),
    Mod(i64),
    Value(Vec<u8>),
    Lease(i64),
}

/// How it compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    Equal,
    Greater,
    Less,
    NotEqual,
}

/// One comparison of a transaction, over one key or a range (every key must pass).
#[derive(Clone, Debug)]
pub struct Compare {
    pub key: Vec<u8>,
    pub end: Vec<u8>,
    pub op: CompareOp,
    pub target: CompareTarget,
}

/// One operation of a transaction.
#[derive(Clone, Debug)]
pub enum Op {
    Range(RangeRequest),
    Put { key: Vec<u8>, value: Vec<u8>, lease: i64, prev_kv: bool },
    Delete { key: Vec<u8>, end: Vec<u8>, prev_kv: bool },
    Txn(Box<Txn>),
}

/// A transaction: if every comparison holds, `success`, else `failure`.
#[derive(Clone, Debug, Default)]
pub struct Txn {
    pub compare: Vec<Compare>,
    pub success: Vec<Op>,
    pub failure: Vec<Op>,
}

/// The answer to one operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    Range(RangeResult),
    Put { prev: Option<Arc<Kv>> },
    Delete { deleted: i64, prev: Vec<Arc<Kv>> },
    Txn(TxnResult),
}

/// The answer to a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnResult {
    pub succeeded: bool,
    pub responses: Vec<OpResult>,
}

/// The key space.
#[derive(Clone, Debug, Default)]
pub struct Mvcc {
    revision: i64,
    compacted: i64,
    keys: BTreeMap<Vec<u8>, Vec<Version>>,
}

impl Mvcc {
    /// An empty key space at revision 1, as a new etcd.
    pub fn new() -> Self {
        Self { revision: 1, compacted: 0, keys: BTreeMap::new() }
    }

    /// The current revision.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The compacted revision (0: never compacted).
    pub fn compacted(&self) -> i64 {
        self.compacted
    }

    fn check_read(&self, revision: i64) -> Result<i64, MvccError> {
        let rev = if revision <= 0 { self.revision } else { revision };
        if rev > self.revision {
            return Err(MvccError::FutureRevision);
        }
        if rev < self.compacted {
            return Err(MvccError::Compacted { compacted: self.compacted });
        }
        Ok(rev)
    }

    /// The key's value at `rev`, if it existed then.
    fn at(versions: &[Version], rev: i64) -> Option<&Arc<Kv>> {
        let i = versions.partition_point(|v| v.main <= rev);
        versions[..i].last().and_then(|v| v.kv.as_ref())
    }

    /// Reads a range at a revision.
    pub fn range(&self, r: &RangeRequest) -> Result<RangeResult, MvccError> {
        let rev = self.check_read(r.revision)?;
        let mut out = RangeResult::default();
        for (_, versions) in self.keys.range(key_range(&r.key, &r.end)) {
            let Some(kv) = Self::at(versions, rev) else { continue };
            out.count += 1;
            if r.count_only || (r.limit > 0 && out.kvs.len() as i64 >= r.limit) {
                continue;
            }
            out.kvs.push(if r.keys_only { Arc::new(Kv { value: Vec::new(), ..(**kv).clone() }) } else { kv.clone() });
        }
        out.more = r.limit > 0 && out.count > r.limit;
        Ok(out)
    }

    fn current(&self, key: &[u8]) -> Option<&Arc<Kv>> {
        self.keys.get(key).and_then(|v| v.last()).and_then(|v| v.kv.as_ref())
    }

    fn compare_holds(&self, c: &Compare) -> bool {
        let check = |kv: Option<&Arc<Kv>>| -> bool {
            use std::cmp::Ordering;
            let ord = match (&c.target, kv) {
                (CompareTarget::Version(x), kv) => kv.map_or(0, |k| k.version).cmp(x),
                (CompareTarget::Create(x), kv) => kv.map_or(0, |k| k.create_revision).cmp(x),
                (CompareTarget::Mod(x), kv) => kv.map_or(0, |k| k.mod_revision).cmp(x),
                (CompareTarget::Lease(x), kv) => kv.map_or(0, |k| k.lease).cmp(x),
                // A value comparison with a missing key fails, whatever the operator.
                (CompareTarget::Value(_), None) => return false,
                (CompareTarget::Value(x), Some(k)) => k.value.as_slice().cmp(x.as_slice()),
            };
            match c.op {
                CompareOp::Equal => ord == Ordering::Equal,
                CompareOp::Greater => ord == Ordering::Greater,
                CompareOp::Less => ord == Ordering::Less,
                CompareOp::NotEqual => ord != Ordering::Equal,
            }
        };
        if c.end.is_empty() {
            return check(self.current(&c.key));
        }
        self.keys.range(key_range(&c.key, &c.end)).filter_map(|(_, v)| v.last().and_then(|v| v.kv.as_ref())).all(|kv| check(Some(kv)))
    }

    /// Whether a transaction may write.
    fn writes(ops: &[Op]) -> bool {
        ops.iter().any(|op| match op {
            Op::Put { .. } | Op::Delete { .. } => true,
            Op::Txn(t) => Self::writes(&t.success) || Self::writes(&t.failure),
            Op::Range(_) => false,
        })
    }

    /// Keys a branch puts or deletes, to refuse a transaction that names one twice (as etcd).
    fn check_duplicates(ops: &[Op], seen: &mut Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), MvccError> {
        for op in ops {
            let (key, end) = match op {
                Op::Put { key, .. } => (key.clone(), Vec::new()),
                Op::Delete { key, end, .. } => (key.clone(), end.clone()),
                Op::Txn(t) => {
                    let mut a = seen.clone();
                    Self::check_duplicates(&t.success, &mut a)?;
                    let mut b = seen.clone();
                    Self::check_duplicates(&t.failure, &mut b)?;
                    continue;
                }
                Op::Range(_) => continue,
            };
            let overlaps = |(k2, e2): &(Vec<u8>, Vec<u8>)| {
                let single = end.is_empty();
                match (single, e2.is_empty()) {
                    (true, true) => key == *k2,
                    (true, false) => in_range(&key, k2, e2),
                    (false, true) => in_range(k2, &key, &end),
                    // Two deletes of ranges may overlap (etcd allows it).
                    (false, false) => false,
                }
            };
            if seen.iter().any(overlaps) {
                return Err(MvccError::DuplicateKey);
            }
            seen.push((key, end));
        }
        Ok(())
    }

    /// Runs a transaction; `lease_exists` says whether a lease may take keys. Returns its
    /// answer and the events it made (all at the new revision, in sub-revision order).
    pub fn txn(&mut self, txn: &Txn, lease_exists: &dyn Fn(i64) -> bool) -> Result<(TxnResult, Vec<Event>), MvccError> {
        Self::check_duplicates(&txn.success, &mut Vec::new())?;
        Self::check_duplicates(&txn.failure, &mut Vec::new())?;
        let succeeded = txn.compare.iter().all(|c| self.compare_holds(c));
        let ops = if succeeded { &txn.success } else { &txn.failure };
        Self::check_leases(ops, lease_exists)?;
        let rev = if Self::writes(ops) { self.revision + 1 } else { self.revision };
        let mut sub = 0;
        let mut events = Vec::new();
        let responses = self.apply(ops, rev, &mut sub, &mut events);
        // As etcd: the revision rises only if something changed (a delete of nothing does not).
        if !events.is_empty() {
            self.revision = rev;
        }
        Ok((TxnResult { succeeded, responses }, events))
    }

    fn check_leases(ops: &[Op], lease_exists: &dyn Fn(i64) -> bool) -> Result<(), MvccError> {
        for op in ops {
            match op {
                Op::Put { lease, .. } if *lease != 0 && !lease_exists(*lease) => return Err(MvccError::LeaseNotFound),
                Op::Txn(t) => {
                    Self::check_leases(&t.success, lease_exists)?;
                    Self::check_leases(&t.failure, lease_exists)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn apply(&mut self, ops: &[Op], rev: i64, sub: &mut i64, events: &mut Vec<Event>) -> Vec<OpResult> {
        let mut out = Vec::with_capacity(ops.len());
        for op in ops {
            out.push(match op {
                // Reads in a transaction see its earlier writes (the new revision).
                Op::Range(r) => {
                    let r = RangeRequest { revision: if r.revision <= 0 { 0 } else { r.revision }, ..r.clone() };
                    let saved = self.revision;
                    self.revision = self.revision.max(rev);
                    let res = self.range(&r).unwrap_or_default();
                    self.revision = saved;
                    OpResult::Range(res)
                }
                Op::Put { key, value, lease, prev_kv } => {
                    let prev = self.current(key).cloned();
                    let kv = Kv {
                        key: key.clone(),
                        value: value.clone(),
                        create_revision: prev.as_ref().map_or(rev, |p| p.create_revision),
                        mod_revision: rev,
                        version: prev.as_ref().map_or(1, |p| p.version + 1),
                        lease: *lease,
                    };
                    let kv = Arc::new(kv);
                    self.keys.entry(key.clone()).or_default().push(Version { main: rev, sub: *sub, kv: Some(kv.clone()) });
                    *sub += 1;
                    events.push(Event { kv: (*kv).clone(), deleted: false, prev: prev.clone() });
                    OpResult::Put { prev: if *prev_kv { prev } else { None } }
                }
                Op::Delete { key, end, prev_kv } => {
                    let doomed: Vec<(Vec<u8>, Arc<Kv>)> = self.keys.range(key_range(key, end)).filter_map(|(k, v)| v.last().and_then(|v| v.kv.clone()).map(|kv| (k.clone(), kv))).collect();
                    for (k, prev) in &doomed {
                        self.keys.get_mut(k).expect("listed").push(Version { main: rev, sub: *sub, kv: None });
                        *sub += 1;
                        events.push(Event { kv: Kv { key: k.clone(), mod_revision: rev, ..Kv::default() }, deleted: true, prev: Some(prev.clone()) });
                    }
                    OpResult::Delete { deleted: doomed.len() as i64, prev: if *prev_kv { doomed.into_iter().map(|(_, kv)| kv).collect() } else { vec![] } }
                }
                Op::Txn(t) => {
                    let succeeded = t.compare.iter().all(|c| self.compare_holds(c));
                    let ops = if succeeded { &t.success } else { &t.failure };
                    OpResult::Txn(TxnResult { succeeded, responses: self.apply(ops, rev, sub, events) })
                }
            });
        }
        out
    }

    /// Forgets every version older than `rev` that a read at `rev` or later cannot see.
    pub fn compact(&mut self, rev: i64) -> Result<(), MvccError> {
        if rev <= self.compacted {
            return Err(MvccError::Compacted { compacted: self.compacted });
        }
        if rev > self.revision {
            return Err(MvccError::FutureRevision);
        }
        self.trim(rev);
        self.compacted = rev;
        Ok(())
    }

    /// Drops every version a read at `rev` or later cannot see.
    fn trim(&mut self, rev: i64) {
        self.keys.retain(|_, versions| {
            let keep_from = versions.partition_point(|v| v.main <= rev).saturating_sub(1);
            versions.drain(..keep_from);
            // The version visible at `rev` is dropped too if it is an older tombstone (one at
            // `rev` itself stays: a watch may start at the compacted revision, as on etcd).
            if versions.first().is_some_and(|v| v.main < rev && v.kv.is_none()) {
                versions.remove(0);
            }
            !versions.is_empty()
        });
    }

    /// Every change of the keys in `[key, end)` at revisions from `start` on, in (revision,
    /// sub-revision) order, with the previous value when it is still kept.
    pub fn changes(&self, key: &[u8], end: &[u8], start: i64) -> Result<Vec<Event>, MvccError> {
        if start > 0 && start < self.compacted {
            return Err(MvccError::Compacted { compacted: self.compacted });
        }
        let mut out: Vec<(i64, i64, Event)> = Vec::new();
        for (k, versions) in self.keys.range(key_range(key, end)) {
            let first = versions.partition_point(|v| v.main < start);
            for i in first..versions.len() {
                let v = &versions[i];
                let prev = i.checked_sub(1).and_then(|p| versions[p].kv.clone());
                let event = match &v.kv {
                    Some(kv) => Event { kv: (**kv).clone(), deleted: false, prev },
                    None => Event { kv: Kv { key: k.clone(), mod_revision: v.main, ..Kv::default() }, deleted: true, prev },
                };
                out.push((v.main, v.sub, event));
            }
        }
        out.sort_by_key(|(main, sub, _)| (*main, *sub));
        Ok(out.into_iter().map(|(_, _, e)| e).collect())
    }

    /// Replays a change read back from storage (its revision at or above the current one).
    pub fn replay(&mut self, e: &Event, sub: i64) {
        let rev = e.kv.mod_revision;
        let kv = (!e.deleted).then(|| Arc::new(e.kv.clone()));
        self.keys.entry(e.kv.key.clone()).or_default().push(Version { main: rev, sub, kv });
        self.revision = self.revision.max(rev);
    }

    /// Sets the revision and compaction point read back from storage, and drops what the
    /// replayed changes hold below it, so the key space is what it was before the restart.
    pub fn restore(&mut self, revision: i64, compacted: i64) {
        self.revision = self.revision.max(revision);
        self.trim(compacted);
        self.compacted = compacted;
    }

    /// Every key that exists now with the lease `lease`.
    pub fn keys_with_lease(&self, lease: i64) -> Vec<Vec<u8>> {
        self.keys.iter().filter_map(|(k, v)| v.last().and_then(|v| v.kv.as_ref()).filter(|kv| kv.lease == lease).map(|_| k.clone())).collect()
    }
}

#[cfg(test)]
#[path = "mvcc_tests.rs"]
mod tests;
