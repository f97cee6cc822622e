//! Periodic compaction, as kube-apiserver does it: every interval, compact to the revision seen at
//! the previous tick. A compare-and-swap on one control key makes sure that when several shards
//! run the loop, only one of them compacts per interval; while etcd's NOSPACE alarm refuses that
//! write, every shard compacts (RFC 0010).

use crate::Storage;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use std::time::Duration;

/// Control key whose version counts compactions (outside `/registry`).
pub const COMPACT_KEY: &str = "/shardplane/compact_rev_key";

/// Runs forever: every `interval`, compacts etcd to the revision observed one interval earlier.
pub async fn run_compactor(storage: Storage, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    let mut last_version: i64 = 0;
    let mut pending_rev: Option<u64> = None;
    loop {
        ticker.tick().await;
        match compact_once(&storage, last_version, pending_rev).await {
            Ok((version, rev)) => {
                last_version = version;
                pending_rev = Some(rev);
            }
            Err(e) => tracing::warn!(error = %e, "compaction tick failed"),
        }
    }
}

/// One tick: claims the interval by bumping the control key's version if it is still
/// `last_version`, and if claimed compacts to `pending_rev`. Returns the version now seen and the
/// current revision (the next tick's target).
async fn compact_once(storage: &Storage, last_version: i64, pending_rev: Option<u64>) -> crate::Result<(i64, u64)> {
    let mut kv = storage.client().kv_client();
    let txn = Txn::new()
        .when([Compare::version(COMPACT_KEY, CompareOp::Equal, last_version)])
        .and_then([TxnOp::put(COMPACT_KEY, COMPACT_KEY, None)])
        .or_else([TxnOp::get(COMPACT_KEY, None)]);
    let resp = match kv.txn(txn).await {
        Ok(resp) => resp,
        Err(e) => {
            let e = crate::StorageError::from(e);
            if !crate::space::is_nospace(&e) {
                return Err(e);
            }
            // The store is full: no claim can be written, and compaction is what frees it.
            // Every shard compacting the same revision is harmless (the later ones are told it
            // is compacted already).
            if let Some(target) = pending_rev.filter(|r| *r > 0) {
                match storage.compact(target).await {
                    Ok(()) => tracing::warn!(revision = target, "compacted etcd under its NOSPACE alarm"),
                    Err(e) if e.to_string().contains("compacted") => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok((last_version, storage.current_revision().await?));
        }
    };
    let rev = resp.header().map_or(0, |h| h.revision() as u64);
    if !resp.succeeded() {
        // Someone else compacted this interval; follow their version.
        let seen = resp.op_responses().into_iter().find_map(|r| match r {
            etcd_client::TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.version()),
            _ => None,
        });
        return Ok((seen.unwrap_or(0), rev));
    }
    if let Some(target) = pending_rev.filter(|r| *r > 0) {
        match storage.compact(target).await {
            Ok(()) => tracing::info!(revision = target, "compacted etcd"),
            Err(e) if e.to_string().contains("compacted") => {}
            Err(e) => return Err(e),
        }
    }
    Ok((last_version + 1, rev))
}
