//! One watch stream from K shard streams (RFC 0003, "WATCH").
//!
//! Each shard stream is in resourceVersion order and carries progress marks *in-band*: a mark
//! `r` means the shard has sent every event of its range up to `r`. An event is released only
//! when every shard's mark has reached its RV, so the merged stream is in RV order and a client
//! that resumes from the last RV it saw misses nothing (I2, I5). An event itself marks its shard
//! up to its RV. A shard that is behind holds back the merge: [`WatchMerge::lagging`] names the
//! shards to ask for a progress mark (asked on a side channel, answered in-band). A shard whose
//! stream closes freezes its mark: what is below every mark is still released, and then the
//! merged stream must end ([`WatchMerge::finished`]) — never skip past the closed shard. Pending
//! events are bounded; past the bound the caller ends the client's watch cleanly.

use std::collections::BTreeMap;

/// What a shard stream delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardInput<T> {
    /// A change at `rv`.
    Event { rv: u64, item: T },
    /// Every change of the shard up to this RV has been delivered.
    Progress(u64),
    /// The stream ended.
    Closed,
}

/// Why input was refused; the merged watch must end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchMergeError {
    #[error("shard {shard} sent RV {rv} after vouching for {mark}")]
    OutOfOrder { shard: usize, rv: u64, mark: u64 },
    #[error("more than {0} events are held back waiting for a lagging shard")]
    Overflow(usize),
    #[error("shard {0} sent input after closing")]
    AfterClose(usize),
}

struct Shard {
    /// Every event up to this RV has been delivered.
    mark: u64,
    /// Whether `mark` came from an event: another event at the same RV may follow (one etcd
    /// transaction can change several keys), but none may follow a progress mark at that RV.
    mark_is_event: bool,
    closed: bool,
}

/// The merge state of one client watch.
pub struct WatchMerge<T> {
    shards: Vec<Shard>,
    /// Held-back events by (rv, shard, arrival).
    pending: BTreeMap<(u64, usize, u64), T>,
    arrivals: u64,
    bound: usize,
    released: u64,
}

impl<T> WatchMerge<T> {
    /// A merge of `shards` streams that all start after `start_rv`, holding at most `bound`
    /// events back.
    pub fn new(shards: usize, start_rv: u64, bound: usize) -> Self {
        Self {
            shards: (0..shards).map(|_| Shard { mark: start_rv, mark_is_event: false, closed: false }).collect(),
            pending: BTreeMap::new(),
            arrivals: 0,
            bound,
            released: start_rv,
        }
    }

    /// Takes one input from `shard`.
    pub fn push(&mut self, shard: usize, input: ShardInput<T>) -> Result<(), WatchMergeError> {
        let s = &mut self.shards[shard];
        if s.closed {
            return Err(WatchMergeError::AfterClose(shard));
        }
        match input {
            ShardInput::Event { rv, item } => {
                if rv < s.mark || (rv == s.mark && !s.mark_is_event) {
                    return Err(WatchMergeError::OutOfOrder { shard, rv, mark: s.mark });
                }
                s.mark = rv;
                s.mark_is_event = true;
                self.arrivals += 1;
                self.pending.insert((rv, shard, self.arrivals), item);
                if self.pending.len() > self.bound {
                    return Err(WatchMergeError::Overflow(self.bound));
                }
            }
            ShardInput::Progress(rv) => {
                if rv > s.mark {
                    s.mark = rv;
                    s.mark_is_event = false;
                }
            }
            ShardInput::Closed => s.closed = true,
        }
        Ok(())
    }

    /// Shard `shard`'s mark: every change of its range up to this RV has been delivered. A
    /// stream that ended normally is reopened after it, with no gap and no repeat.
    pub fn mark(&self, shard: usize) -> u64 {
        self.shards[shard].mark
    }

    /// The RV below which every shard has delivered everything: a safe bookmark once nothing at
    /// or below it is pending.
    pub fn watermark(&self) -> u64 {
        self.shards.iter().map(|s| s.mark).min().unwrap_or(self.released)
    }

    /// The next event that is safe to release, in RV order.
    pub fn pop(&mut self) -> Option<(u64, T)> {
        let (&(rv, _, _), _) = self.pending.first_key_value()?;
        if rv > self.watermark() {
            return None;
        }
        let ((rv, _, _), item) = self.pending.pop_first().expect("non-empty");
        self.released = rv;
        Some((rv, item))
    }

    /// A bookmark RV to send now: the watermark, when it is past every released event and nothing
    /// releasable is pending.
    pub fn bookmark(&self) -> Option<u64> {
        let w = self.watermark();
        let blocked = self.pending.first_key_value().is_none_or(|(&(rv, _, _), _)| rv > w);
        (blocked && w >= self.released).then_some(w)
    }

    /// Shards that hold back a pending event: ask them for a progress mark.
    pub fn lagging(&self) -> Vec<usize> {
        let Some((&(oldest, _, _), _)) = self.pending.first_key_value() else { return vec![] };
        self.shards.iter().enumerate().filter(|(_, s)| s.mark < oldest && !s.closed).map(|(i, _)| i).collect()
    }

    /// Whether the merged stream must end: a shard closed, and nothing more can be released.
    pub fn finished(&self) -> bool {
        self.shards.iter().any(|s| s.closed) && self.pending.first_key_value().is_none_or(|(&(rv, _, _), _)| rv > self.watermark())
    }

    /// How many events are held back.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One shard's stream: its events in RV order with truthful progress marks between them.
    fn shard_stream(events: &[(u64, usize)], shard: usize, total: u64, marks: &[bool]) -> Vec<ShardInput<u64>> {
        let mine: Vec<u64> = events.iter().filter(|(_, s)| *s == shard).map(|(rv, _)| *rv).collect();
        let mut out = Vec::new();
        for (i, rv) in mine.iter().enumerate() {
            out.push(ShardInput::Event { rv: *rv, item: *rv });
            if marks[i % marks.len()] {
                // Truthful: below the shard's next event.
                let next = mine.get(i + 1).copied().unwrap_or(total + 1);
                out.push(ShardInput::Progress(next - 1));
            }
        }
        out.push(ShardInput::Progress(total));
        out
    }

    proptest! {
        /// I2: whatever the interleaving of shard streams, idle shards and progress marks, the
        /// merge releases exactly the global history in strictly increasing RV order; if a shard
        /// closes early, it releases a gap-free prefix of it and then says it is finished.
        #[test]
        fn merge_releases_the_global_history_in_order(
            owners in proptest::collection::vec((0usize..4, 0u64..3), 0..80),
            k in 1usize..5,
            marks in proptest::collection::vec(any::<bool>(), 1..8),
            schedule in proptest::collection::vec(0usize..5, 0..400),
            close in proptest::option::of((0usize..5, 0usize..40)),
        ) {
            let start = 100u64;
            // RVs with gaps: revisions also advance for writes no shard here watches.
            let mut rv = start;
            let events: Vec<(u64, usize)> = owners.iter().map(|(s, gap)| { rv += 1 + gap; (rv, s % k) }).collect();
            let total = rv + 2;
            let mut streams: Vec<std::collections::VecDeque<ShardInput<u64>>> = (0..k).map(|s| shard_stream(&events, s, total, &marks).into()).collect();
            if let Some((shard, at)) = close {
                let q = &mut streams[shard % k];
                q.truncate(at.min(q.len()));
                q.push_back(ShardInput::Closed);
            }
            let mut m = WatchMerge::new(k, start, usize::MAX);
            let mut out = Vec::new();
            let feed = |m: &mut WatchMerge<u64>, shard: usize, streams: &mut Vec<std::collections::VecDeque<ShardInput<u64>>>| {
                if let Some(input) = streams[shard].pop_front() {
                    m.push(shard, input).unwrap();
                }
            };
            for pick in schedule {
                feed(&mut m, pick % k, &mut streams);
                while let Some((rv, item)) = m.pop() {
                    prop_assert_eq!(rv, item);
                    out.push(rv);
                }
            }
            // Drain what is left, round-robin.
            while streams.iter().any(|q| !q.is_empty()) {
                for s in 0..k {
                    feed(&mut m, s, &mut streams);
                }
                while let Some((rv, _)) = m.pop() {
                    out.push(rv);
                }
            }
            let all: Vec<u64> = events.iter().map(|(rv, _)| *rv).collect();
            prop_assert!(out.windows(2).all(|w| w[0] < w[1]));
            match close {
                None => {
                    prop_assert_eq!(&out, &all);
                    prop_assert_eq!(m.bookmark(), Some(total));
                }
                Some(_) => {
                    prop_assert_eq!(&out[..], &all[..out.len()]);
                    prop_assert!(m.finished());
                    // Nothing at or below the watermark is left unreleased.
                    prop_assert!(all.iter().filter(|rv| **rv <= m.watermark()).count() <= out.len());
                }
            }
        }
    }

    #[test]
    fn idle_shard_holds_back_until_it_marks_progress() {
        let mut m = WatchMerge::new(2, 10, 100);
        m.push(0, ShardInput::Event { rv: 11, item: "a" }).unwrap();
        assert_eq!(m.pop(), None);
        assert_eq!(m.lagging(), vec![1]);
        m.push(1, ShardInput::Progress(11)).unwrap();
        assert_eq!(m.pop(), Some((11, "a")));
        assert_eq!(m.bookmark(), Some(11));
    }

    #[test]
    fn refuses_out_of_order_overflow_and_input_after_close() {
        let mut m = WatchMerge::new(2, 10, 1);
        assert_eq!(m.push(0, ShardInput::Event { rv: 10, item: () }), Err(WatchMergeError::OutOfOrder { shard: 0, rv: 10, mark: 10 }));
        m.push(0, ShardInput::Event { rv: 12, item: () }).unwrap();
        m.push(0, ShardInput::Event { rv: 12, item: () }).unwrap_err(); // second held-back event: over the bound of 1
        let mut m = WatchMerge::new(1, 10, 10);
        m.push(0, ShardInput::Progress(15)).unwrap();
        assert!(matches!(m.push(0, ShardInput::Event { rv: 15, item: () }), Err(WatchMergeError::OutOfOrder { .. })));
        m.push(0, ShardInput::Closed).unwrap();
        assert_eq!(m.push(0, ShardInput::Progress(20)), Err(WatchMergeError::AfterClose(0)));
        assert!(m.finished());
    }
}
