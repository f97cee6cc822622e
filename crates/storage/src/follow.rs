//! The list–watch–relist loop every follower of a key range shares (the catalog's CRDs, a shard's
//! Terminating namespaces, the range map, each watch cache's reflector): list the range at one
//! revision, watch every change after it, and on any failure (etcd out of reach, the watch ended
//! or compacted away, a value the follower could not take) list again after a pause. The follower
//! sees the whole state each time it is listed, so nothing is lost across a relist.
//!
//! A follower whose keys change while it runs (a reflector taking over or letting go of a hash
//! range, RFC 0006) answers [`Follower::on_signal`] with the revision it has taken everything up
//! to; the loop then watches the new keys from there without listing again.

use crate::{Kv, Storage, WatchEvent, WatchItem};
use std::convert::Infallible;
use std::future::Future;
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
    pub what: String,
    /// The pause before listing again after a failure; it doubles after each failure in a row,
    /// up to `max_retry`, and starts again at `retry` once a watch is open.
    pub retry: Duration,
    /// The longest pause between two lists.
    pub max_retry: Duration,
    /// Notified when the follower wants etcd's progress now (answered as [`Followed::Progress`]).
    pub progress: Option<Arc<Notify>>,
    /// Stops the loop.
    pub stop: CancellationToken,
}

impl FollowOptions {
    /// Lists again `retry` after each failure, without backing off.
    pub fn fixed(what: impl Into<String>, retry: Duration, stop: CancellationToken) -> Self {
        Self { what: what.into(), retry, max_retry: retry, progress: None, stop }
    }
}

/// A follower of a key range: what it follows, how it takes what etcd tells, and anything else
/// it waits on between two changes (commands, timers).
pub trait Follower: Send {
    /// Something besides etcd the follower waits for.
    type Signal: Send;

    /// The keys followed, `[start, end)`: asked each time the loop lists or watches.
    fn keys(&self) -> (Vec<u8>, Vec<u8>);

    /// Takes what etcd told. `Err` (a value it cannot take) counts as a failure: the range is
    /// listed again.
    fn take(&mut self, followed: Followed) -> impl Future<Output = Result<(), String>> + Send;

    /// Waits for the next signal. Raced against etcd's stream, so it must be cancel-safe: a
    /// signal it has taken must be returned, not held in a dropped future.
    fn next_signal(&mut self) -> impl Future<Output = Self::Signal> + Send {
        std::future::pending()
    }

    /// Acts on a signal, between two changes (never raced). `Ok(Some(revision))`: the keys
    /// followed have changed and everything up to `revision` is taken, so the loop watches the
    /// new [`Follower::keys`] from there.
    fn on_signal(&mut self, signal: Self::Signal) -> impl Future<Output = Result<Option<u64>, String>> + Send {
        drop(signal);
        async { Ok(None) }
    }
}

/// Follows `[start, end)` on `storage` until `options.stop`, telling `apply` what it finds. An
/// `Err` from `apply` (a value it cannot take) counts as a failure: the range is listed again.
pub async fn follow(storage: &Storage, start: &[u8], end: &[u8], options: FollowOptions, apply: impl FnMut(Followed) -> Result<(), String> + Send) {
    follow_with(storage, Fixed { start, end, apply }, options).await
}

/// A fixed key range told to a function.
struct Fixed<'a, A> {
    start: &'a [u8],
    end: &'a [u8],
    apply: A,
}

impl<A: FnMut(Followed) -> Result<(), String> + Send> Follower for Fixed<'_, A> {
    type Signal = Infallible;

    fn keys(&self) -> (Vec<u8>, Vec<u8>) {
        (self.start.to_vec(), self.end.to_vec())
    }

    fn take(&mut self, followed: Followed) -> impl Future<Output = Result<(), String>> + Send {
        std::future::ready((self.apply)(followed))
    }
}

/// Follows `follower`'s keys on `storage` until `options.stop`.
pub async fn follow_with<F: Follower>(storage: &Storage, mut follower: F, options: FollowOptions) {
    let FollowOptions { what, retry, max_retry, progress, stop } = options;
    let wanted = progress.unwrap_or_default();
    let mut pause = retry;
    while !stop.is_cancelled() {
        let failure: String = async {
            let (start, end) = follower.keys();
            let (kvs, revision) = storage.list_range(&start, &end, 0).await.map_err(|e| e.to_string())?;
            follower.take(Followed::Listed { kvs, revision }).await?;
            let mut from = revision;
            // One pass per set of keys: a signal that changes them opens the watch again.
            'keys: loop {
                let (start, end) = follower.keys();
                let mut w = storage.watch_range(&start, &end, from).await.map_err(|e| e.to_string())?;
                pause = retry;
                loop {
                    let item = tokio::select! {
                        item = w.next() => item.map_err(|e| e.to_string())?,
                        _ = wanted.notified() => {
                            w.request_progress().await.map_err(|e| e.to_string())?;
                            continue;
                        }
                        signal = follower.next_signal() => {
                            if let Some(at) = follower.on_signal(signal).await? {
                                // Everything up to `at` is taken; this stream's later changes
                                // come again on the new one.
                                from = at;
                                continue 'keys;
                            }
                            continue;
                        }
                        _ = stop.cancelled() => return Ok::<String, String>(String::new()),
                    };
                    match item {
                        Some(WatchItem::Events(events)) => follower.take(Followed::Changed(events)).await?,
                        Some(WatchItem::Progress(rev)) => follower.take(Followed::Progress(rev)).await?,
                        None => return Err("the watch ended".to_owned()),
                    }
                }
            }
        }
        .await
        .unwrap_or_else(|e| e);
        if stop.is_cancelled() {
            return;
        }
        tracing::warn!(follower = %what, error = %failure, "following etcd failed; listing again");
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.cancelled() => return,
        }
        pause = (pause * 2).min(max_retry);
    }
}
