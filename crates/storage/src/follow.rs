//! The list–watch–relist loop every follower of a key range shares (the catalog's CRDs, a shard's
//! Terminating namespaces, the range map, each watch cache's reflector): list the range at one
//! revision, watch every change after it; when etcd goes out of reach or the stream breaks, watch
//! again from the last revision taken, after a pause; when the revision was compacted away or the
//! follower could not take a value, list again. The follower sees the whole state each time it
//! is listed and every change after it otherwise, so nothing is lost either way.
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

/// Why one pass of the loop ended.
enum Interrupted {
    /// Stopped.
    Stop,
    /// etcd went out of reach or the stream broke: watch again from where the follower is.
    Resume(String),
    /// The follower refused a value, or etcd no longer has the history to resume from: list.
    Relist(String),
}

impl From<crate::StorageError> for Interrupted {
    fn from(e: crate::StorageError) -> Self {
        match e {
            crate::StorageError::Compacted { .. } => Interrupted::Relist(e.to_string()),
            other => Interrupted::Resume(other.to_string()),
        }
    }
}

/// Follows `follower`'s keys on `storage` until `options.stop`. A broken stream or an
/// unreachable etcd resumes the watch from the last revision the follower took (so its state,
/// and a watch cache's history, survive an outage); only a refused value or a compacted
/// revision makes it list again.
pub async fn follow_with<F: Follower>(storage: &Storage, mut follower: F, options: FollowOptions) {
    let FollowOptions { what, retry, max_retry, progress, stop } = options;
    let wanted = progress.unwrap_or_default();
    let mut pause = retry;
    // Everything up to this revision is taken (None: list first).
    let mut taken: Option<u64> = None;
    while !stop.is_cancelled() {
        let why = pass(storage, &mut follower, &mut taken, &wanted, &stop, &mut pause, retry).await;
        let failure = match why {
            Interrupted::Stop => return,
            Interrupted::Resume(m) if went_back(storage, taken).await => {
                taken = None;
                m
            }
            Interrupted::Resume(m) => m,
            Interrupted::Relist(m) => {
                taken = None;
                m
            }
        };
        if stop.is_cancelled() {
            return;
        }
        let next = if taken.is_some() { "watching again" } else { "listing again" };
        tracing::warn!(follower = %what, error = %failure, "following etcd failed; {next}");
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.cancelled() => return,
        }
        pause = (pause * 2).min(max_retry);
    }
}

/// Lists (unless `taken` says where to resume), then watches until interrupted, keeping `taken`
/// at the last revision the follower took.
async fn pass<F: Follower>(storage: &Storage, follower: &mut F, taken: &mut Option<u64>, wanted: &Notify, stop: &CancellationToken, pause: &mut Duration, retry: Duration) -> Interrupted {
    if taken.is_none() {
        let (start, end) = follower.keys();
        let (kvs, revision) = match storage.list_range(&start, &end, 0).await {
            Ok(listed) => listed,
            Err(e) => return Interrupted::Relist(e.to_string()),
        };
        if let Err(e) = follower.take(Followed::Listed { kvs, revision }).await {
            return Interrupted::Relist(e);
        }
        *taken = Some(revision);
    }
    // One pass per set of keys: a signal that changes them opens the watch again.
    loop {
        let from = taken.expect("set above");
        let (start, end) = follower.keys();
        let mut w = match storage.watch_range(&start, &end, from).await {
            Ok(w) => w,
            Err(e) => return e.into(),
        };
        *pause = retry;
        loop {
            let item = tokio::select! {
                item = w.next() => match item {
                    Ok(item) => item,
                    Err(e) => return e.into(),
                },
                _ = wanted.notified() => {
                    if let Err(e) = w.request_progress().await {
                        return e.into();
                    }
                    continue;
                }
                signal = follower.next_signal() => match follower.on_signal(signal).await {
                    // Everything up to `at` is taken; this stream's later changes come again
                    // on the new one.
                    Ok(Some(at)) => {
                        *taken = Some(at);
                        break;
                    }
                    Ok(None) => continue,
                    Err(e) => return Interrupted::Relist(e),
                },
                _ = stop.cancelled() => return Interrupted::Stop,
            };
            let (followed, upto) = match item {
                Some(WatchItem::Events(events)) => {
                    let last = events.last().map(|e| e.revision);
                    (Followed::Changed(events), last)
                }
                Some(WatchItem::Progress(rev)) => (Followed::Progress(rev), Some(rev)),
                None => return Interrupted::Resume("the watch ended".to_owned()),
            };
            if let Err(e) = follower.take(followed).await {
                return Interrupted::Relist(e);
            }
            if let Some(rev) = upto {
                *taken = Some(taken.map_or(rev, |t| t.max(rev)));
            }
        }
    }
}

/// Whether the store's revision is now below `taken`: it was restored from a snapshot without
/// raising its revision (RFC 0016). etcd lets a watch start at a future revision, so resuming
/// would keep the follower's newer state and drop every change until the store passed `taken`
/// again; the follower lists instead, and never holds state the store no longer has. (Restored
/// as the guidance says, with `--bump-revision` and `--mark-compacted`, the revision is above
/// `taken` and the resumed watch is refused as compacted, which lists too.) A store out of reach
/// says nothing: the watch is resumed as usual and this is asked again after it fails.
async fn went_back(storage: &Storage, taken: Option<u64>) -> bool {
    let Some(taken) = taken else { return false };
    match storage.current_revision().await {
        Ok(now) if now < taken => {
            tracing::error!(revision = now, followed_up_to = taken, "the store's revision went back: it was restored from a snapshot without --bump-revision; listing again (RFC 0016)");
            true
        }
        _ => false,
    }
}
