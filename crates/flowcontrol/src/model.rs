//! The queueing model (RFC 0013, "Seats, lending and queues"): priority levels with seats,
//! lending and borrowing, queues dealt by shuffle sharding, and fair dispatch within a level.
//! Synchronous and deterministic: it says which requests start, and the async gate
//! ([`crate::gate`]) wakes them. Nothing here knows about HTTP, users or time.
//!
//! Seats: a level's nominal seats split into a guaranteed part (`nominal - lendable`), which
//! only its own requests ever use, and a lendable part, which goes into one shared pool with
//! every other level's. A level runs requests in its guaranteed seats first and takes seats
//! from the shared pool past them, up to its ceiling (`nominal + borrowing`). So no level ever
//! has less than its guaranteed seats, the seats in use never exceed the server's total, and an
//! idle level's lendable seats serve whoever is busy.
//!
//! Queues: a request's flow deals a hand of `hand_size` of the level's queues (shuffle
//! sharding, [`deal`]); it joins the hand's queue holding the fewest seats (waiting and
//! executing), or is refused when that queue is at `queue_length_limit`. Within a level the
//! queue whose next request has the earliest virtual start, in seats served, goes next (start
//! time fair queuing): backlogged flows get equal seats, within one request's width.

use std::collections::{HashMap, VecDeque};

/// Why a request was refused: upstream's `reason` label of
/// `apiserver_flowcontrol_rejected_requests_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The queue the request was dealt was full.
    QueueFull,
    /// A level that does not queue had no seat.
    ConcurrencyLimit,
    /// It waited in its queue past its time.
    TimeOut,
    /// Its client went away while it waited.
    Cancelled,
}

impl Refusal {
    /// Upstream's label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::QueueFull => "queue-full",
            Refusal::ConcurrencyLimit => "concurrency-limit",
            Refusal::TimeOut => "time-out",
            Refusal::Cancelled => "cancelled",
        }
    }
}

/// How a level queues (`limitResponse.queuing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queuing {
    pub queues: u32,
    pub hand_size: u32,
    pub queue_length_limit: u32,
}

/// A level's seats and what it does past them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// NominalCL.
    pub nominal: u32,
    /// LendableCL (at most `nominal`).
    pub lendable: u32,
    /// BorrowingCL; `None`: no limit.
    pub borrowing: Option<u32>,
    /// How it queues; `None`: it refuses what does not fit (`limitResponse.type: Reject`).
    pub queuing: Option<Queuing>,
}

impl Limits {
    /// The seats no other level ever uses.
    pub fn guaranteed(&self) -> u32 {
        self.nominal - self.lendable.min(self.nominal)
    }

    /// The most seats the level may hold at once.
    pub fn ceiling(&self) -> u64 {
        self.borrowing.map_or(u64::MAX, |b| self.nominal as u64 + b as u64)
    }

    fn queue_count(&self) -> usize {
        self.queuing.map_or(1, |q| q.queues.max(1) as usize)
    }
}

/// Index of a level in its [`Pool`].
pub type LevelId = usize;

/// A started request's hold on its seats, given back with [`Pool::finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    pub id: u64,
    pub level: LevelId,
    pub width: u32,
    queue: usize,
    /// The level's queue layout when it started (seats go back to the queue only if unchanged).
    layout: u64,
}

#[derive(Clone, Copy, Debug)]
struct Waiter {
    id: u64,
    width: u32,
    flow: u64,
}

#[derive(Debug, Default)]
struct Queue {
    waiting: VecDeque<Waiter>,
    waiting_seats: u64,
    executing_seats: u64,
    /// Seats this queue's dispatched requests have taken, in the level's virtual time.
    virtual_start: u64,
}

/// Counts a level keeps for its dumps and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LevelCounts {
    pub dispatched: u64,
    pub rejected: u64,
    pub timed_out: u64,
    pub cancelled: u64,
}

#[derive(Debug)]
struct Level {
    limits: Limits,
    in_use: u64,
    executing: u64,
    queues: Vec<Queue>,
    waiting: usize,
    /// The virtual start of the last request dispatched: where a queue that was idle restarts.
    virtual_now: u64,
    /// The queue after the last one served (ties in virtual start go round from here).
    robin: usize,
    layout: u64,
    counts: LevelCounts,
}

/// One queue as the dumps show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueView {
    pub waiting: usize,
    pub waiting_seats: u64,
    pub executing_seats: u64,
    pub virtual_start: u64,
}

/// A level as the dumps and metrics show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelView {
    pub limits: Limits,
    pub seats_in_use: u64,
    pub executing: u64,
    pub waiting: usize,
    pub counts: LevelCounts,
    pub queues: Vec<QueueView>,
}

impl Level {
    /// The queue `flow` joins: of the hand it is dealt, the one holding the fewest seats
    /// (waiting and executing); the first dealt of equals.
    fn least_loaded(&self, flow: u64, hand_size: u32) -> usize {
        let hand = deal(flow, self.queues.len() as u32, hand_size);
        hand.into_iter().min_by_key(|&i| self.queues[i].waiting_seats + self.queues[i].executing_seats).expect("a hand holds a queue")
    }
}

/// Every level's seats and queues.
#[derive(Debug, Default)]
pub struct Pool {
    levels: Vec<Level>,
    /// Where each waiting request is: (level, queue).
    waiting: HashMap<u64, (LevelId, usize)>,
    /// The level after the last one that started a request.
    rotation: usize,
    layouts: u64,
}

/// The `hand_size` distinct queues of `queues` that `flow` is dealt: the flow's hash read as a
/// mixed-radix number, each digit choosing one of the queues not dealt yet.
pub fn deal(flow: u64, queues: u32, hand_size: u32) -> Vec<usize> {
    let queues = queues.max(1) as u64;
    let hand = (hand_size.max(1) as u64).min(queues);
    let mut rest = flow;
    let mut dealt: Vec<usize> = Vec::with_capacity(hand as usize);
    let mut sorted: Vec<usize> = Vec::with_capacity(hand as usize);
    for i in 0..hand {
        let left = queues - i;
        let mut card = (rest % left) as usize;
        rest /= left;
        // The card-th queue not dealt yet: step past each dealt one at or below it.
        for &taken in &sorted {
            if card >= taken {
                card += 1;
            }
        }
        let at = sorted.partition_point(|&t| t < card);
        sorted.insert(at, card);
        dealt.push(card);
    }
    dealt
}

impl Pool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a level; its id is its index.
    pub fn add_level(&mut self, limits: Limits) -> LevelId {
        self.layouts += 1;
        let queues = (0..limits.queue_count()).map(|_| Queue::default()).collect();
        self.levels.push(Level { limits, in_use: 0, executing: 0, queues, waiting: 0, virtual_now: 0, robin: 0, layout: self.layouts, counts: LevelCounts::default() });
        self.levels.len() - 1
    }

    /// How many levels there are.
    pub fn len(&self) -> usize {
        self.levels.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    /// The server's seats: every level's nominal seats.
    pub fn total_seats(&self) -> u64 {
        self.levels.iter().map(|l| l.limits.nominal as u64).sum()
    }

    /// The seats lent into the shared pool.
    pub fn shared_size(&self) -> u64 {
        self.levels.iter().map(|l| l.limits.lendable.min(l.limits.nominal) as u64).sum()
    }

    /// The shared seats in use: each level's seats past its guaranteed ones.
    pub fn shared_used(&self) -> u64 {
        self.levels.iter().map(|l| l.in_use.saturating_sub(l.limits.guaranteed() as u64)).sum()
    }

    /// The width a request may have at `level`: at least 1, at most what the level can ever hold.
    pub fn clamp_width(&self, level: LevelId, width: u32) -> u32 {
        let l = &self.levels[level].limits;
        let most = l.ceiling().min(l.guaranteed() as u64 + self.shared_size());
        (width as u64).min(most).max(1) as u32
    }

    /// Whether `width` more seats can start at `level` now.
    pub fn fits(&self, level: LevelId, width: u32) -> bool {
        let l = &self.levels[level];
        let after = l.in_use + width as u64;
        if after > l.limits.ceiling() {
            return false;
        }
        let guaranteed = l.limits.guaranteed() as u64;
        let extra = after.saturating_sub(guaranteed) - l.in_use.saturating_sub(guaranteed);
        extra == 0 || self.shared_used() + extra <= self.shared_size()
    }

    /// A request of `width` seats (see [`Pool::clamp_width`]) in `flow` arrives at `level`: the
    /// requests it lets start (itself among them when it runs at once), or why it is refused.
    /// One that neither starts nor is refused waits until [`Pool::finish`] or another call
    /// starts it, or [`Pool::cancel`] takes it back.
    pub fn arrive(&mut self, level: LevelId, flow: u64, width: u32, id: u64) -> Result<Vec<Ticket>, Refusal> {
        let width = self.clamp_width(level, width);
        let l = &self.levels[level];
        let queue = match l.limits.queuing {
            None => 0,
            Some(q) => {
                let pick = l.least_loaded(flow, q.hand_size);
                if l.queues[pick].waiting.len() >= q.queue_length_limit as usize {
                    self.levels[level].counts.rejected += 1;
                    return Err(Refusal::QueueFull);
                }
                pick
            }
        };
        if l.limits.queuing.is_none() && !self.fits(level, width) {
            self.levels[level].counts.rejected += 1;
            return Err(Refusal::ConcurrencyLimit);
        }
        let l = &mut self.levels[level];
        let q = &mut l.queues[queue];
        if q.waiting.is_empty() {
            q.virtual_start = q.virtual_start.max(l.virtual_now);
        }
        q.waiting.push_back(Waiter { id, width, flow });
        q.waiting_seats += width as u64;
        l.waiting += 1;
        self.waiting.insert(id, (level, queue));
        Ok(self.dispatch())
    }

    /// Gives back a started request's seats: the requests that start in them.
    pub fn finish(&mut self, t: Ticket) -> Vec<Ticket> {
        let l = &mut self.levels[t.level];
        l.in_use -= t.width as u64;
        l.executing -= 1;
        if t.layout == l.layout {
            l.queues[t.queue].executing_seats -= t.width as u64;
        }
        self.dispatch()
    }

    /// Takes a waiting request back (its wait ended): the requests that start now it is gone,
    /// or `None` when it was not waiting (it had started).
    pub fn cancel(&mut self, id: u64, why: Refusal) -> Option<Vec<Ticket>> {
        let (level, queue) = self.waiting.remove(&id)?;
        let l = &mut self.levels[level];
        let q = &mut l.queues[queue];
        let at = q.waiting.iter().position(|w| w.id == id).expect("indexed where it waits");
        let w = q.waiting.remove(at).expect("just found");
        q.waiting_seats -= w.width as u64;
        l.waiting -= 1;
        match why {
            Refusal::TimeOut => l.counts.timed_out += 1,
            Refusal::Cancelled => l.counts.cancelled += 1,
            _ => l.counts.rejected += 1,
        }
        Some(self.dispatch())
    }

    /// Changes a level's limits (the configuration changed): waiting requests are dealt again
    /// when the queues change; what runs keeps its seats. The requests that start now.
    pub fn set_limits(&mut self, level: LevelId, limits: Limits) -> Vec<Ticket> {
        let l = &mut self.levels[level];
        let old = l.limits;
        l.limits = limits;
        if old.queue_count() != limits.queue_count() || old.queuing.map(|q| q.hand_size) != limits.queuing.map(|q| q.hand_size) {
            self.layouts += 1;
            let l = &mut self.levels[level];
            let waiters: Vec<Waiter> = l.queues.iter_mut().flat_map(|q| q.waiting.drain(..)).collect();
            l.queues = (0..limits.queue_count()).map(|_| Queue::default()).collect();
            l.layout = self.layouts;
            l.robin = 0;
            let hand_size = limits.queuing.map_or(1, |q| q.hand_size);
            for w in waiters {
                let l = &mut self.levels[level];
                let pick = l.least_loaded(w.flow, hand_size);
                let q = &mut l.queues[pick];
                q.virtual_start = q.virtual_start.max(l.virtual_now);
                q.waiting.push_back(w);
                q.waiting_seats += w.width as u64;
                self.waiting.insert(w.id, (level, pick));
            }
        }
        self.dispatch()
    }

    /// Starts whatever fits, one request at a time, going round the levels.
    fn dispatch(&mut self) -> Vec<Ticket> {
        let mut started = Vec::new();
        'more: loop {
            let n = self.levels.len();
            for k in 0..n {
                let level = (self.rotation + k) % n;
                if let Some(t) = self.dispatch_one(level) {
                    started.push(t);
                    self.rotation = (level + 1) % n;
                    continue 'more;
                }
            }
            return started;
        }
    }

    /// Starts the next request of `level` if it fits: the head of the backlogged queue with
    /// the earliest virtual start (ties: the first from the round-robin position).
    fn dispatch_one(&mut self, level: LevelId) -> Option<Ticket> {
        let l = &self.levels[level];
        if l.waiting == 0 {
            return None;
        }
        let n = l.queues.len();
        let queue = (0..n).map(|k| (l.robin + k) % n).filter(|&i| !l.queues[i].waiting.is_empty()).min_by_key(|&i| l.queues[i].virtual_start)?;
        let head = *l.queues[queue].waiting.front().expect("backlogged");
        if !self.fits(level, head.width) {
            return None;
        }
        self.waiting.remove(&head.id);
        let l = &mut self.levels[level];
        let q = &mut l.queues[queue];
        q.waiting.pop_front();
        q.waiting_seats -= head.width as u64;
        q.executing_seats += head.width as u64;
        l.virtual_now = q.virtual_start;
        q.virtual_start += head.width as u64;
        l.in_use += head.width as u64;
        l.executing += 1;
        l.waiting -= 1;
        l.robin = (queue + 1) % n;
        l.counts.dispatched += 1;
        Some(Ticket { id: head.id, level, width: head.width, queue, layout: l.layout })
    }

    /// A level's state, for dumps and metrics.
    pub fn view(&self, level: LevelId) -> LevelView {
        let l = &self.levels[level];
        LevelView {
            limits: l.limits,
            seats_in_use: l.in_use,
            executing: l.executing,
            waiting: l.waiting,
            counts: l.counts,
            queues: l.queues.iter().map(|q| QueueView { waiting: q.waiting.len(), waiting_seats: q.waiting_seats, executing_seats: q.executing_seats, virtual_start: q.virtual_start }).collect(),
        }
    }

    /// The waiting requests of `level` in each queue, in order: (queue, position, id, width).
    pub fn waiting_in(&self, level: LevelId) -> Vec<(usize, usize, u64, u32)> {
        let l = &self.levels[level];
        l.queues.iter().enumerate().flat_map(|(qi, q)| q.waiting.iter().enumerate().map(move |(pos, w)| (qi, pos, w.id, w.width))).collect()
    }
}

#[cfg(test)]
mod tests;
