//! Switching one merged watch stream from one range map's shard streams to the next map's
//! without a gap or a repeat (RFC 0006, step 4).
//!
//! The merge of the old streams has yielded every event up to its watermark `w` that the old
//! shards sent. The new streams are read from just before `w` — one etcd revision may hold
//! several events, and an old shard may not have sent all of those at `w` yet — so they send
//! again the events at `w` already yielded; [`Handover`] remembers those and skips them once.

/// What a merged stream has yielded at its newest RV, and what to skip after a switch.
#[derive(Debug, Clone)]
pub struct Handover<T> {
    /// The newest RV yielded, and every item yielded at it.
    last_rv: u64,
    last: Vec<T>,
    /// After a switch: items at this RV the new streams will send again.
    again: Option<(u64, Vec<T>)>,
}

impl<T: Clone + PartialEq> Handover<T> {
    /// A stream that starts after `start`.
    pub fn new(start: u64) -> Self {
        Self { last_rv: start, last: Vec::new(), again: None }
    }

    /// Whether to yield `item` at `rv` (items come in RV order): false for an item the stream
    /// already yielded before the last switch.
    pub fn admit(&mut self, rv: u64, item: &T) -> bool {
        if let Some((at, seen)) = &mut self.again {
            if rv == *at {
                if let Some(i) = seen.iter().position(|s| s == item) {
                    seen.swap_remove(i);
                    return false;
                }
            } else {
                self.again = None;
            }
        }
        if rv != self.last_rv {
            self.last_rv = rv;
            self.last.clear();
        }
        self.last.push(item.clone());
        true
    }

    /// A switch at the old merge's watermark: returns the RV the new streams start after.
    pub fn switch(&mut self, watermark: u64) -> u64 {
        let seen = if self.last_rv == watermark { self.last.clone() } else { Vec::new() };
        self.again = Some((watermark, seen));
        watermark.saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch_merge::{ShardInput, WatchMerge};
    use proptest::prelude::*;
    use std::collections::VecDeque;

    /// One shard's stream of `history` (rv, id, shard) after `after`: its events in order, a
    /// truthful progress mark after some of them, and a final mark at `total`.
    fn stream(history: &[(u64, usize, usize)], shard: usize, after: u64, total: u64, marks: &[bool]) -> VecDeque<ShardInput<usize>> {
        let mine: Vec<(u64, usize)> = history.iter().filter(|(rv, _, s)| *s == shard && *rv > after).map(|(rv, id, _)| (*rv, *id)).collect();
        let mut out = VecDeque::new();
        for (i, (rv, id)) in mine.iter().enumerate() {
            out.push_back(ShardInput::Event { rv: *rv, item: *id });
            if marks[i % marks.len()] {
                let next = mine.get(i + 1).map_or(total + 1, |(rv, _)| *rv);
                out.push_back(ShardInput::Progress(next - 1));
            }
        }
        out.push_back(ShardInput::Progress(total));
        out
    }

    /// Feeds `merge` from `streams` in the order `schedule` picks, then round-robin until every
    /// stream is empty when `drain`; every released item that `handover` admits goes to `out`.
    fn run(merge: &mut WatchMerge<usize>, streams: &mut [VecDeque<ShardInput<usize>>], schedule: &[usize], drain: bool, handover: &mut Handover<usize>, out: &mut Vec<(u64, usize)>) {
        let k = streams.len();
        let mut feed = |shard: usize, merge: &mut WatchMerge<usize>| {
            if let Some(input) = streams[shard].pop_front() {
                merge.push(shard, input).unwrap();
            }
            while let Some((rv, id)) = merge.pop() {
                if handover.admit(rv, &id) {
                    out.push((rv, id));
                }
            }
        };
        for pick in schedule {
            feed(pick % k, merge);
        }
        if drain {
            for _ in 0..200 {
                for s in 0..k {
                    feed(s, merge);
                }
            }
        }
    }

    proptest! {
        /// I2 across a map change: a stream merged from one map's shards up to some point, then
        /// switched at its watermark to another map's shards (any number of each, any ownership,
        /// several events per revision), yields the whole history once, in RV order.
        #[test]
        fn a_switched_stream_yields_the_history_once_in_order(
            events in proptest::collection::vec((0usize..4, 0usize..4, 0u64..3, any::<bool>()), 0..60),
            k_old in 1usize..4,
            k_new in 1usize..4,
            marks in proptest::collection::vec(any::<bool>(), 1..6),
            before in proptest::collection::vec(0usize..4, 0..150),
            after in proptest::collection::vec(0usize..4, 0..150),
            switches in 1usize..3,
        ) {
            let start = 100u64;
            // (rv, id, old shard, new shard); `same` puts an event in the previous one's revision.
            let mut rv = start;
            let history: Vec<(u64, usize, usize, usize)> = events.iter().enumerate().map(|(id, (o, n, gap, same))| {
                if !(*same && id > 0) {
                    rv += 1 + gap;
                }
                (rv, id, o % k_old, n % k_new)
            }).collect();
            let total = rv + 1;
            let old: Vec<(u64, usize, usize)> = history.iter().map(|(rv, id, o, _)| (*rv, *id, *o)).collect();
            let new: Vec<(u64, usize, usize)> = history.iter().map(|(rv, id, _, n)| (*rv, *id, *n)).collect();
            let mut handover = Handover::new(start);
            let mut out = Vec::new();
            let mut merge = WatchMerge::new(k_old, start, usize::MAX);
            let mut streams: Vec<_> = (0..k_old).map(|s| stream(&old, s, start, total, &marks)).collect();
            run(&mut merge, &mut streams, &before, false, &mut handover, &mut out);
            // One switch, or two in a row at the same watermark (a second map change at once).
            let mut from = start;
            for _ in 0..switches {
                from = handover.switch(merge.watermark());
            }
            let mut merge = WatchMerge::new(k_new, from, usize::MAX);
            let mut streams: Vec<_> = (0..k_new).map(|s| stream(&new, s, from, total, &marks)).collect();
            run(&mut merge, &mut streams, &after, true, &mut handover, &mut out);
            prop_assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "out of RV order: {:?}", out);
            let mut ids: Vec<usize> = out.iter().map(|(_, id)| *id).collect();
            ids.sort_unstable();
            prop_assert_eq!(ids, (0..history.len()).collect::<Vec<_>>(), "each event exactly once");
        }
    }

    #[test]
    fn events_at_the_watermark_are_skipped_once_and_later_ones_pass() {
        let mut h = Handover::new(10);
        assert!(h.admit(11, &"a"));
        assert!(h.admit(12, &"b"));
        assert_eq!(h.switch(12), 11);
        // The new streams send 12 again (b, and c which the old shards had not sent yet).
        assert!(!h.admit(12, &"b"));
        assert!(h.admit(12, &"c"));
        assert!(h.admit(13, &"b"));
        // A switch at a watermark with nothing yielded at it skips nothing.
        assert_eq!(h.switch(20), 19);
        assert!(h.admit(20, &"x"));
    }
}
