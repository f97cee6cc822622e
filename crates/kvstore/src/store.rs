//! Durability for the key space: a redb database in the data directory holding every write
//! transaction's changes by revision from the compacted one on (the log), the state just
//! before the compacted revision (the base), the compaction point and the leases. The log keeps
//! the compacted revision's own changes, so a delete made at it is still there after a restart
//! for a watch that starts at it. A write is acknowledged only after its changes
//! are committed (redb's immediate durability: fsync), so it survives `kill -9`; with grouped
//! commits (RFC 0015) writes are committed together on a period instead, with a revision
//! ceiling recorded at each commit ([`Store::append_group`]). Opening the database locks its
//! file: a second store on the same directory is refused.

use crate::mvcc::{Event, Kv, Mvcc};
use etcd_client::proto::{PbEvent, PbKeyValue};
use prost::Message;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const BASE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("base");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const LEASES: TableDefinition<i64, i64> = TableDefinition::new("leases");

/// Why the store could not open or write.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the data directory {0} is in use by another store")]
    Locked(String),
    #[error("storage: {0}")]
    Io(String),
}

fn io(e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(e.to_string())
}

/// The durable side of the key space.
pub struct Store {
    /// Behind a lock only so that a defragmentation can take it whole (redb compacts a
    /// database with no transaction open); every other use shares it.
    db: std::sync::RwLock<Database>,
}

/// A key's value as etcd's wire type.
pub(crate) fn to_pb(kv: &Kv) -> PbKeyValue {
    PbKeyValue { key: kv.key.clone(), value: kv.value.clone(), create_revision: kv.create_revision, mod_revision: kv.mod_revision, version: kv.version, lease: kv.lease }
}

fn from_pb(kv: PbKeyValue) -> Kv {
    Kv { key: kv.key, value: kv.value, create_revision: kv.create_revision, mod_revision: kv.mod_revision, version: kv.version, lease: kv.lease }
}

/// One revision's changes, as length-delimited `mvccpb.Event`s (no previous values: they are
/// in the log already).
fn encode(events: &[Event]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        let pb = PbEvent { r#type: if e.deleted { 1 } else { 0 }, kv: Some(to_pb(&e.kv)), prev_kv: None };
        pb.encode_length_delimited(&mut out).expect("a Vec grows");
    }
    out
}

fn decode(mut bytes: &[u8]) -> Result<Vec<Event>, StoreError> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let pb = PbEvent::decode_length_delimited(&mut bytes).map_err(io)?;
        out.push(Event { kv: from_pb(pb.kv.unwrap_or_default()), deleted: pb.r#type == 1, prev: None });
    }
    Ok(out)
}

impl Store {
    /// Opens (or creates) the store in `dir` and reads the key space and the leases back.
    pub fn open(dir: &Path) -> Result<(Self, Mvcc, Vec<(i64, i64)>), StoreError> {
        // The data is everyone's objects: readable by this user alone (RFC 0012).
        {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            std::fs::create_dir_all(dir).map_err(io)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
            let file = dir.join("store.redb");
            std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&file).map_err(io)?;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
        }
        let path = dir.join("store.redb");
        let db = match Database::create(&path) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => return Err(StoreError::Locked(dir.display().to_string())),
            Err(e) => return Err(io(e)),
        };
        {
            let w = db.begin_write().map_err(io)?;
            w.open_table(LOG).map_err(io)?;
            w.open_table(BASE).map_err(io)?;
            w.open_table(META).map_err(io)?;
            w.open_table(LEASES).map_err(io)?;
            w.commit().map_err(io)?;
        }
        let mut mvcc = Mvcc::new();
        let r = db.begin_read().map_err(io)?;
        let compacted = r.open_table(META).map_err(io)?.get("compacted").map_err(io)?.map_or(0, |v| v.value()) as i64;
        let mut revision = compacted.max(1);
        for row in r.open_table(BASE).map_err(io)?.iter().map_err(io)? {
            let (_, v) = row.map_err(io)?;
            let kv = from_pb(PbKeyValue::decode(v.value()).map_err(io)?);
            revision = revision.max(kv.mod_revision);
            mvcc.replay(&Event { kv, deleted: false, prev: None }, 0);
        }
        for row in r.open_table(LOG).map_err(io)?.iter().map_err(io)? {
            let (rev, v) = row.map_err(io)?;
            for (sub, e) in decode(v.value())?.iter().enumerate() {
                mvcc.replay(e, sub as i64);
            }
            revision = revision.max(rev.value() as i64);
        }
        mvcc.restore(revision, compacted);
        let leases = r.open_table(LEASES).map_err(io)?.iter().map_err(io)?.map(|row| row.map(|(id, ttl)| (id.value(), ttl.value())).map_err(io)).collect::<Result<Vec<_>, _>>()?;
        drop(r);
        Ok((Self { db: std::sync::RwLock::new(db) }, mvcc, leases))
    }

    /// The revision ceiling a grouped store recorded (RFC 0015): no revision at or above it was
    /// handed out. 0 when none was recorded.
    pub fn ceiling(&self) -> Result<i64, StoreError> {
        let r = self.db().begin_read().map_err(io)?;
        Ok(r.open_table(META).map_err(io)?.get("ceiling").map_err(io)?.map_or(0, |v| v.value()) as i64)
    }

    /// Makes a group of revisions' changes durable in one commit, with the ceiling raised to at
    /// least `ceiling` (never lowered). An empty group with `clean` records a clean stop: the
    /// ceiling is then set to exactly `ceiling`.
    pub fn append_group(&self, group: &[(i64, Vec<Event>)], ceiling: i64, clean: bool) -> Result<(), StoreError> {
        let w = self.db().begin_write().map_err(io)?;
        {
            let mut log = w.open_table(LOG).map_err(io)?;
            for (revision, events) in group {
                log.insert(*revision as u64, encode(events).as_slice()).map_err(io)?;
            }
            let mut meta = w.open_table(META).map_err(io)?;
            let old = meta.get("ceiling").map_err(io)?.map_or(0, |v| v.value());
            let new = if clean { ceiling as u64 } else { old.max(ceiling as u64) };
            meta.insert("ceiling", new).map_err(io)?;
        }
        w.commit().map_err(io)
    }

    /// Makes one revision's changes durable.
    pub fn append(&self, revision: i64, events: &[Event]) -> Result<(), StoreError> {
        let w = self.db().begin_write().map_err(io)?;
        w.open_table(LOG).map_err(io)?.insert(revision as u64, encode(events).as_slice()).map_err(io)?;
        w.commit().map_err(io)
    }

    /// Records a compaction at `revision` (already done in memory): the log below it folds
    /// into the base, in revision order, so the base is the state at `revision - 1`.
    pub fn compact(&self, revision: i64) -> Result<(), StoreError> {
        let w = self.db().begin_write().map_err(io)?;
        {
            let mut log = w.open_table(LOG).map_err(io)?;
            let mut base = w.open_table(BASE).map_err(io)?;
            for row in log.range(..revision as u64).map_err(io)? {
                let (_, v) = row.map_err(io)?;
                for e in decode(v.value())? {
                    if e.deleted {
                        base.remove(e.kv.key.as_slice()).map_err(io)?;
                    } else {
                        base.insert(e.kv.key.as_slice(), to_pb(&e.kv).encode_to_vec().as_slice()).map_err(io)?;
                    }
                }
            }
            log.retain_in(..revision as u64, |_, _| false).map_err(io)?;
            w.open_table(META).map_err(io)?.insert("compacted", revision as u64).map_err(io)?;
        }
        w.commit().map_err(io)
    }

    /// Records a lease (granted, or kept with a new TTL).
    pub fn put_lease(&self, id: i64, ttl: i64) -> Result<(), StoreError> {
        let w = self.db().begin_write().map_err(io)?;
        w.open_table(LEASES).map_err(io)?.insert(id, ttl).map_err(io)?;
        w.commit().map_err(io)
    }

    /// Forgets a lease.
    pub fn remove_lease(&self, id: i64) -> Result<(), StoreError> {
        let w = self.db().begin_write().map_err(io)?;
        w.open_table(LEASES).map_err(io)?.remove(id).map_err(io)?;
        w.commit().map_err(io)
    }

    fn db(&self) -> std::sync::RwLockReadGuard<'_, Database> {
        self.db.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives the space freed by compactions back to the file system (etcd's defragmentation).
    pub fn defragment(&self) -> Result<(), StoreError> {
        let mut db = self.db.write().unwrap_or_else(|p| p.into_inner());
        while db.compact().map_err(io)? {}
        Ok(())
    }

    /// The database file's size in bytes.
    pub fn size(path: &Path) -> i64 {
        std::fs::metadata(path.join("store.redb")).map_or(0, |m| m.len() as i64)
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
