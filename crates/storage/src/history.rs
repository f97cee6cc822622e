//! Reading a span of the store's history: every change of a key range between two revisions
//! ([`Storage::changes_between`]), and how far back such a read may reach for a bounded cost
//! ([`Storage::history_floor`], RFC 0016).
//!
//! etcd finds a catching-up watch's events by reading every revision of its span and keeping
//! those in its keys, so a watch from revision F costs as much as every change after F, of
//! every key, whatever range it watches. A reader that wants the last changes of its keys must
//! bound its span by the store's changes, not by revisions: a store written 60 keys per
//! transaction holds 600,000 changes in 10,000 revisions. The floor is the revision after which
//! the store's last changes within a bound (of changes and of bytes) lie, found by reading
//! newest first in growing spans; the answer is kept for [`FLOOR_KEPT`], so the caches of one
//! process, which load together, ask etcd once.

use crate::{Result, Storage, StorageError, WatchEvent, WatchItem};
use std::time::{Duration, Instant};

/// How long a floor found (or a failure to find one) is answered again before it is looked
/// for anew.
const FLOOR_KEPT: Duration = Duration::from_secs(10);
/// The first span read back from the top, in revisions.
const FIRST_SPAN: u64 = 64;
/// How long counting one span may take.
const SPAN_WITHIN: Duration = Duration::from_secs(10);

/// How much of the store's history a read may reach back over: at most this many changes of
/// any key, whose written values (keys included) come to at most this many bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryBound {
    /// Changes of any key, each key of a transaction counted once.
    pub changes: usize,
    /// The bytes of the keys and values those changes wrote.
    pub bytes: usize,
}

/// A floor looked for: the store's last changes within `most`, when it was found, were those
/// after `floor` (or why it could not be found).
#[derive(Clone, Debug)]
pub(crate) struct Floor {
    found: Instant,
    most: HistoryBound,
    floor: std::result::Result<u64, String>,
}

impl Storage {
    /// The revision F such that the store's changes (of every key) after F up to revision `to`
    /// are within `most`: at most `most.changes` of them, writing at most `most.bytes`. A watch
    /// from F is as cheap for etcd as reading those changes, and no reader of a part of them
    /// holds more. Back to etcd's compaction at most (then the compaction revision); 0 when the
    /// whole history fits.
    /// A floor found for `most` in the last [`FLOOR_KEPT`] is answered again: for a later `to`
    /// it also lets in the changes since, which are those of seconds, and the caches of a
    /// process, loading one after another while the store moves on, ask etcd once.
    pub async fn history_floor(&self, to: u64, most: HistoryBound) -> Result<u64> {
        let mut kept = self.history_floor.lock().await;
        if let Some(f) = kept.as_ref()
            && f.most == most
            && f.found.elapsed() < FLOOR_KEPT
        {
            match &f.floor {
                Ok(floor) if *floor <= to => return Ok(*floor),
                Ok(_) => {}
                // A failure is kept too: the callers waiting on this lock would each wait out
                // the same failure in turn.
                Err(e) => return Err(StorageError::Etcd(format!("finding the history floor failed under {FLOOR_KEPT:?} ago: {e}"))),
            }
        }
        // Held while etcd is read: callers at the same moment wait for this answer.
        let floor = self.find_floor(to, most).await;
        tracing::debug!(to, most_changes = most.changes, most_bytes = most.bytes, floor = ?floor, "history floor");
        *kept = Some(Floor { found: Instant::now(), most, floor: floor.as_ref().copied().map_err(ToString::to_string) });
        floor
    }

    /// Reads spans back from `to`, newest first, each sized from what the ones before held,
    /// until they hold more than `most`.
    async fn find_floor(&self, to: u64, most: HistoryBound) -> Result<u64> {
        let (mut hi, mut span, mut seen, mut seen_bytes) = (to, FIRST_SPAN, 0usize, 0usize);
        while hi > 0 {
            let lo = hi.saturating_sub(span);
            let per_revision = match self.changes_per_revision(lo, hi).await {
                Ok(counts) => counts,
                // Nothing before the compaction can be read: the history starts there.
                Err(StorageError::Compacted { compacted, .. }) => return Ok(compacted.max(lo)),
                Err(e) => return Err(e),
            };
            // Newest first: the floor is the first revision whose changes do not all fit.
            for &(revision, n, bytes) in per_revision.iter().rev() {
                if seen + n > most.changes || seen_bytes + bytes > most.bytes {
                    return Ok(revision);
                }
                seen += n;
                seen_bytes += bytes;
            }
            // The next span: what the rest would take at the density seen so far (of changes
            // or bytes, whichever runs out first), with a quarter more; four times this one at
            // most (or when nothing was seen).
            let read = (to - lo) as f64;
            let left = ((most.changes - seen) as f64 / seen.max(1) as f64).min((most.bytes - seen_bytes) as f64 / seen_bytes.max(1) as f64);
            let wanted = if seen == 0 { u64::MAX } else { (read * left * 1.25) as u64 };
            span = wanted.clamp(FIRST_SPAN, span.saturating_mul(4));
            hi = lo;
        }
        Ok(0)
    }

    /// How many keys changed at each revision of `(lo, hi]` and the bytes of their keys and
    /// values, in revision order (revisions with no change to any key do not occur: every etcd
    /// revision is a write).
    async fn changes_per_revision(&self, lo: u64, hi: u64) -> Result<Vec<(u64, usize, usize)>> {
        let mut out: Vec<(u64, usize, usize)> = Vec::new();
        // Every key ("\0" to "\0"), no previous values: only the sizes are wanted.
        self.changes_between((b"\0", b"\0", false), (lo, hi), SPAN_WITHIN, |e| {
            let bytes = e.kv.key.len() + e.kv.value.len();
            match out.last_mut() {
                Some((r, n, b)) if *r == e.revision => {
                    *n += 1;
                    *b += bytes;
                }
                _ => out.push((e.revision, 1, bytes)),
            }
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// Hands `each` every change of `[start, end)` (with its previous value when `prev_kv`)
    /// after revision `from` up to `to`, in revision order. An error if etcd has compacted them
    /// away ([`StorageError::Compacted`]), they cannot all be read within `within`, or `each`
    /// fails.
    pub async fn changes_between(&self, (start, end, prev_kv): (&[u8], &[u8], bool), (from, to): (u64, u64), within: Duration, mut each: impl FnMut(WatchEvent) -> Result<()>) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        let read = async {
            let mut watch = self.open_watch(start, end, prev_kv, from).await?;
            // etcd answers a progress request only once the watch has sent its history, so the
            // first mark at or past `to` says every change up to it has arrived; it drops
            // requests made before then, so they are repeated.
            let mut ask = tokio::time::interval(Duration::from_millis(50));
            loop {
                let item = tokio::select! {
                    item = watch.next() => item?,
                    _ = ask.tick() => {
                        watch.request_progress().await?;
                        continue;
                    }
                };
                match item {
                    Some(WatchItem::Events(events)) => {
                        for e in events {
                            if e.revision > to {
                                return Ok(());
                            }
                            each(e)?;
                        }
                    }
                    Some(WatchItem::Progress(r)) if r >= to => return Ok(()),
                    Some(WatchItem::Progress(_)) => {}
                    None => return Err(StorageError::Etcd("watch stream ended".into())),
                }
            }
        };
        tokio::time::timeout(within, read).await.map_err(|_| StorageError::Etcd(format!("reading the changes after {from} took over {within:?}")))?
    }
}
