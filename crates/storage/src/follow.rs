//! The list–watch–relist loop every follower of a key range shares (the catalog's CRDs, a shard's
//! Terminating namespaces, the range map): list the range at one revision, watch every change
//! after it, and on any failure (etcd out of reach, the watch ended or compacted away, a value the
//! follower could not take) list again after a pause. The follower sees the whole state each time
//! it is listed, so nothing is lost across a relist.

use crate::{Kv, Storage, WatchEvent, WatchItem};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// What a follower is told, in order.
pub enum Followed {
    /// The range as it stands at `revision`: the whole state (what was known before is replaced).
    Listed { kvs: Vec<Kv>, revision: u64 },
    /// Changes after the last revision told, in revision order.
    Changed(Vec<WatchEvent>),
    /// Every change up to this revision has been told.
    Progress(u64),
}

/// How a follower runs.
pub struct FollowOptions {
    /// Named in the logs when following fails.
    pub what: &'static str,
    /// The pause before listing again after a failure.
    pub retry: Duration,
    /// Notified when the follower wants etcd's progress now (answered as [`Followed::Progress`]).
    pub progress: Option<Arc<Notify>>,
    /// Stops the loop.
    pub stop: CancellationToken,
}

/// Follows `[start, end)` on `storage` until `options.stop`, telling `apply` what it finds. An
/// `Err` from `apply` (a value it cannot take) counts as a failure: the range is listed again.
pub async fn follow(storage: &Storage, start: &[u8], end: &[u8], options: FollowOptions, mut apply: impl FnMut(Followed) -> Result<(), String> + Send) {
    let FollowOptions { what, retry, progress, stop } = options;
    let wanted = progress.unwrap_or_default();
    while !stop.is_cancelled() {
        let failure: String = async {
            let (kvs, revision) = storage.list_range(start, end, 0).await.map_err(|e| e.to_string())?;
            apply(Followed::Listed { kvs, revision })?;
            let mut w = storage.watch_range(start, end, revision).await.map_err(|e| e.to_string())?;
            loop {
                let item = tokio::select! {
                    item = w.next() => item.map_err(|e| e.to_string())?,
                    _ = wanted.notified() => {
                        w.request_progress().await.map_err(|e| e.to_string())?;
                        continue;
                    }
                    _ = stop.cancelled() => return Ok::<String, String>(String::new()),
                };
                match item {
                    Some(WatchItem::Events(events)) => apply(Followed::Changed(events))?,
                    Some(WatchItem::Progress(rev)) => apply(Followed::Progress(rev))?,
                    None => return Err("the watch ended".to_owned()),
                }
            }
        }
        .await
        .unwrap_or_else(|e| e);
        if stop.is_cancelled() {
            return;
        }
        tracing::warn!(follower = what, error = %failure, "following etcd failed; listing again");
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = stop.cancelled() => return,
        }
    }
}
