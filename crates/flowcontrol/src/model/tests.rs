//! The pool against a reference written for clarity, not speed (every count recomputed from
//! the lists it is held in), and the invariants RFC 0013 promises: seats never past the
//! server's total or a level's ceiling, guaranteed seats never lent, nothing waiting that fits,
//! queues within their limit, every request ending exactly once, and fair shares.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// The reference: the same rules over plain lists.
#[derive(Clone, Debug)]
struct RefLevel {
    limits: Limits,
    running: Vec<(u64, u32, usize)>,
    queues: Vec<Vec<(u64, u32, u64)>>,
    starts: Vec<u64>,
    now: u64,
    robin: usize,
}

#[derive(Clone, Debug, Default)]
struct Reference {
    levels: Vec<RefLevel>,
    rotation: usize,
}

impl Reference {
    fn used(&self, l: usize) -> u64 {
        self.levels[l].running.iter().map(|r| r.1 as u64).sum()
    }

    fn shared_used(&self) -> u64 {
        (0..self.levels.len()).map(|l| self.used(l).saturating_sub(self.levels[l].limits.guaranteed() as u64)).sum()
    }

    fn shared_size(&self) -> u64 {
        self.levels.iter().map(|l| l.limits.lendable.min(l.limits.nominal) as u64).sum()
    }

    fn fits(&self, l: usize, w: u32) -> bool {
        let lim = self.levels[l].limits;
        let (used, after) = (self.used(l), self.used(l) + w as u64);
        let g = lim.guaranteed() as u64;
        let extra = after.saturating_sub(g) - used.saturating_sub(g);
        after <= lim.ceiling() && (extra == 0 || self.shared_used() + extra <= self.shared_size())
    }

    fn clamp(&self, l: usize, w: u32) -> u32 {
        let lim = self.levels[l].limits;
        (w as u64).min(lim.ceiling().min(lim.guaranteed() as u64 + self.shared_size())).max(1) as u32
    }

    fn arrive(&mut self, l: usize, flow: u64, w: u32, id: u64) -> Result<Vec<u64>, Refusal> {
        let w = self.clamp(l, w);
        let lim = self.levels[l].limits;
        let queue = match lim.queuing {
            None if !self.fits(l, w) => return Err(Refusal::ConcurrencyLimit),
            None => 0,
            Some(q) => {
                // Every hand, sorted by load then by the order dealt.
                let lv = &self.levels[l];
                let hand = deal(flow, lv.queues.len() as u32, q.hand_size);
                let load = |i: usize| lv.queues[i].iter().map(|r| r.1 as u64).sum::<u64>() + lv.running.iter().filter(|r| r.2 == i).map(|r| r.1 as u64).sum::<u64>();
                let mut ranked: Vec<(u64, usize, usize)> = hand.iter().enumerate().map(|(k, &i)| (load(i), k, i)).collect();
                ranked.sort();
                let pick = ranked[0].2;
                if lv.queues[pick].len() >= q.queue_length_limit as usize {
                    return Err(Refusal::QueueFull);
                }
                pick
            }
        };
        let lv = &mut self.levels[l];
        if lv.queues[queue].is_empty() {
            lv.starts[queue] = lv.starts[queue].max(lv.now);
        }
        lv.queues[queue].push((id, w, flow));
        Ok(self.dispatch())
    }

    fn dispatch(&mut self) -> Vec<u64> {
        let mut out = Vec::new();
        'more: loop {
            let n = self.levels.len();
            for k in 0..n {
                let l = (self.rotation + k) % n;
                let lv = &self.levels[l];
                let qn = lv.queues.len();
                let mut candidates: Vec<(u64, usize, usize)> = (0..qn).filter(|&i| !lv.queues[i].is_empty()).map(|i| (lv.starts[i], (i + qn - lv.robin) % qn, i)).collect();
                candidates.sort();
                let Some(&(_, _, q)) = candidates.first() else { continue };
                let (id, w, _) = lv.queues[q][0];
                if !self.fits(l, w) {
                    continue;
                }
                let lv = &mut self.levels[l];
                lv.queues[q].remove(0);
                lv.now = lv.starts[q];
                lv.starts[q] += w as u64;
                lv.robin = (q + 1) % qn;
                lv.running.push((id, w, q));
                self.rotation = (l + 1) % n;
                out.push(id);
                continue 'more;
            }
            return out;
        }
    }

    fn finish(&mut self, id: u64) -> Vec<u64> {
        for lv in &mut self.levels {
            lv.running.retain(|r| r.0 != id);
        }
        self.dispatch()
    }

    fn cancel(&mut self, id: u64) -> Option<Vec<u64>> {
        let mut found = false;
        for lv in &mut self.levels {
            for q in &mut lv.queues {
                let before = q.len();
                q.retain(|r| r.0 != id);
                found |= q.len() != before;
            }
        }
        found.then(|| self.dispatch())
    }
}

fn limits() -> impl Strategy<Value = Limits> {
    (0u32..8, 0u32..=100, prop::option::of(0u32..=200), prop::option::of((1u32..6, 1u32..4, 1u32..5))).prop_map(|(nominal, lend_pct, borrow_pct, q)| Limits {
        nominal,
        lendable: (nominal * lend_pct + 50) / 100,
        borrowing: borrow_pct.map(|p| (nominal * p + 50) / 100),
        queuing: q.map(|(queues, hand, len)| Queuing { queues, hand_size: hand.min(queues), queue_length_limit: len }),
    })
}

#[derive(Clone, Debug)]
enum Op {
    Arrive { level: usize, flow: u64, width: u32 },
    /// Finish the n-th running request (modulo how many run).
    Finish(usize),
    /// Cancel the n-th waiting request.
    Cancel(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..4, 0u64..6, 1u32..5).prop_map(|(level, flow, width)| Op::Arrive { level, flow: flow.wrapping_mul(0x9E37_79B9_7F4A_7C15), width }),
        3 => (0usize..64).prop_map(Op::Finish),
        1 => (0usize..64).prop_map(Op::Cancel),
    ]
}

fn check_invariants(pool: &Pool) {
    let total: u64 = (0..pool.len()).map(|l| pool.view(l).seats_in_use).sum();
    assert!(total <= pool.total_seats(), "seats in use {total} past the server's {}", pool.total_seats());
    assert!(pool.shared_used() <= pool.shared_size(), "shared seats past the pool");
    for l in 0..pool.len() {
        let v = pool.view(l);
        assert!(v.seats_in_use <= v.limits.ceiling(), "level {l} past its ceiling");
        for q in &v.queues {
            if let Some(qc) = v.limits.queuing {
                assert!(q.waiting <= qc.queue_length_limit as usize, "a queue past its limit");
            }
        }
        // Nothing waits that could start: the head the level would serve next does not fit.
        if v.waiting > 0 {
            let next = pool.waiting_in(l).into_iter().filter(|(_, pos, _, _)| *pos == 0).min_by_key(|(q, _, _, _)| (v.queues[*q].virtual_start, (*q + v.queues.len() - pool.levels[l].robin) % v.queues.len()));
            let (_, _, _, width) = next.expect("a waiting head");
            assert!(!pool.fits(l, width), "level {l} has a waiting request that fits");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn the_pool_starts_what_the_reference_starts(levels in prop::collection::vec(limits(), 1..4), ops in prop::collection::vec(op(), 1..120)) {
        let mut pool = Pool::new();
        let mut reference = Reference::default();
        for l in &levels {
            pool.add_level(*l);
            reference.levels.push(RefLevel { limits: *l, running: Vec::new(), queues: vec![Vec::new(); l.queue_count()], starts: vec![0; l.queue_count()], now: 0, robin: 0 });
        }
        let mut running: Vec<Ticket> = Vec::new();
        let mut waiting: BTreeSet<u64> = BTreeSet::new();
        let mut ended: BTreeSet<u64> = BTreeSet::new();
        let mut next_id = 0u64;
        for op in ops {
            let (got, want): (Option<Vec<Ticket>>, Option<Vec<u64>>) = match op {
                Op::Arrive { level, flow, width } => {
                    let level = level % levels.len();
                    next_id += 1;
                    let (a, b) = (pool.arrive(level, flow, width, next_id), reference.arrive(level, flow, width, next_id));
                    match (&a, &b) {
                        (Err(x), Err(y)) => { prop_assert_eq!(x, y); ended.insert(next_id); }
                        (Ok(_), Ok(_)) => { waiting.insert(next_id); }
                        _ => prop_assert!(false, "pool {:?}, reference {:?}", a, b),
                    }
                    (a.ok(), b.ok())
                }
                Op::Finish(n) if !running.is_empty() => {
                    let t = running.remove(n % running.len());
                    ended.insert(t.id);
                    (Some(pool.finish(t)), Some(reference.finish(t.id)))
                }
                Op::Cancel(n) if !waiting.is_empty() => {
                    let id = *waiting.iter().nth(n % waiting.len()).expect("in range");
                    waiting.remove(&id);
                    ended.insert(id);
                    let (a, b) = (pool.cancel(id, Refusal::TimeOut), reference.cancel(id));
                    prop_assert_eq!(a.is_some(), b.is_some());
                    (a, b)
                }
                _ => (None, None),
            };
            let got = got.unwrap_or_default();
            prop_assert_eq!(got.iter().map(|t| t.id).collect::<Vec<_>>(), want.unwrap_or_default());
            for t in got {
                prop_assert!(waiting.remove(&t.id), "started {} which was not waiting", t.id);
                running.push(t);
            }
            check_invariants(&pool);
        }
        // Every request ends once: finish everything, and whatever waits starts in turn
        // unless its level can never hold it.
        while let Some(t) = running.pop() {
            ended.insert(t.id);
            for s in pool.finish(t) {
                prop_assert!(waiting.remove(&s.id));
                running.push(s);
            }
        }
        for id in &waiting {
            prop_assert!(!ended.contains(id));
        }
        prop_assert_eq!(ended.len() + waiting.len(), next_id as usize);
    }

    #[test]
    fn a_hand_is_distinct_queues_and_the_same_each_time(flow in any::<u64>(), queues in 1u32..200, hand in 1u32..12) {
        let h = deal(flow, queues, hand);
        prop_assert_eq!(h.len(), hand.min(queues) as usize);
        prop_assert!(h.iter().all(|&q| q < queues as usize));
        let distinct: BTreeSet<_> = h.iter().collect();
        prop_assert_eq!(distinct.len(), h.len());
        prop_assert_eq!(h, deal(flow, queues, hand));
    }

    #[test]
    fn backlogged_flows_get_equal_seats_within_a_width(widths in prop::collection::vec(prop::collection::vec(1u32..4, 40), 2..5), seats in 1u32..6) {
        // One level, a queue per flow (hand of one, as many queues as flows and flows dealt
        // apart), every flow backlogged from the start; requests finish in the order started.
        let flows = widths.len() as u32;
        let mut pool = Pool::new();
        let level = pool.add_level(Limits { nominal: seats.max(3), lendable: 0, borrowing: Some(0), queuing: Some(Queuing { queues: flows, hand_size: 1, queue_length_limit: 1000 }) });
        let flow_of = |f: u32| (0u64..).find(|h| deal(*h, flows, 1)[0] == f as usize).expect("a hash for each queue");
        let mut running = std::collections::VecDeque::new();
        let mut owner = HashMap::new();
        let mut id = 0;
        for (f, ws) in widths.iter().enumerate() {
            for &w in ws {
                id += 1;
                owner.insert(id, f);
                running.extend(pool.arrive(level, flow_of(f as u32), w, id).expect("room"));
            }
        }
        let mut served = vec![0u64; widths.len()];
        let mut remaining: Vec<u64> = widths.iter().map(|ws| ws.iter().map(|&w| w as u64).sum()).collect();
        while let Some(t) = running.pop_front() {
            let f = owner[&t.id];
            served[f] += t.width as u64;
            remaining[f] -= t.width as u64;
            // While every flow still has work, none is ahead of another by more than a width
            // (plus what started before the flows were all queued).
            if remaining.iter().all(|r| *r > 0) {
                let (lo, hi) = (served.iter().min().unwrap(), served.iter().max().unwrap());
                prop_assert!(hi - lo <= 3 + seats.max(3) as u64, "served {:?}", served);
            }
            running.extend(pool.finish(t));
        }
    }
}

#[test]
fn a_level_keeps_its_guaranteed_seats_while_others_borrow_everything() {
    let mut pool = Pool::new();
    // A lends half of 4; B lends all of its 4 and may borrow without limit.
    let a = pool.add_level(Limits { nominal: 4, lendable: 2, borrowing: Some(0), queuing: Some(Queuing { queues: 4, hand_size: 2, queue_length_limit: 10 }) });
    let b = pool.add_level(Limits { nominal: 4, lendable: 4, borrowing: None, queuing: Some(Queuing { queues: 4, hand_size: 2, queue_length_limit: 10 }) });
    let mut started = 0;
    for id in 0..10 {
        started += pool.arrive(b, id, 1, id).unwrap().len();
    }
    // B has nothing guaranteed: it runs on the shared pool alone (its 4 and A's 2).
    assert_eq!(started, 6);
    assert_eq!(pool.view(b).seats_in_use, 6);
    // A's two guaranteed seats are there at once.
    assert_eq!(pool.arrive(a, 1, 1, 100).unwrap().len(), 1);
    assert_eq!(pool.arrive(a, 2, 1, 101).unwrap().len(), 1);
    assert!(pool.arrive(a, 3, 1, 102).unwrap().is_empty(), "A's lent seats are busy");
}

#[test]
fn a_level_that_rejects_never_queues() {
    let mut pool = Pool::new();
    let l = pool.add_level(Limits { nominal: 1, lendable: 0, borrowing: Some(0), queuing: None });
    let t = pool.arrive(l, 1, 1, 1).unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!(pool.arrive(l, 2, 1, 2), Err(Refusal::ConcurrencyLimit));
    assert!(pool.finish(t[0]).is_empty());
    assert_eq!(pool.arrive(l, 2, 1, 3).unwrap().len(), 1);
}

#[test]
fn a_full_queue_refuses_and_a_wide_request_is_clamped_to_what_can_ever_run() {
    let mut pool = Pool::new();
    let l = pool.add_level(Limits { nominal: 2, lendable: 0, borrowing: Some(0), queuing: Some(Queuing { queues: 1, hand_size: 1, queue_length_limit: 2 }) });
    // Width 10 at a level of 2 seats runs as 2.
    let first = pool.arrive(l, 7, 10, 1).unwrap();
    assert_eq!(first[0].width, 2);
    assert!(pool.arrive(l, 7, 1, 2).unwrap().is_empty());
    assert!(pool.arrive(l, 7, 1, 3).unwrap().is_empty());
    assert_eq!(pool.arrive(l, 7, 1, 4), Err(Refusal::QueueFull));
    assert_eq!(pool.finish(first[0]).len(), 2);
}

#[test]
fn changing_the_queues_deals_waiting_requests_again() {
    let mut pool = Pool::new();
    let q = |queues| Some(Queuing { queues, hand_size: 1, queue_length_limit: 100 });
    let l = pool.add_level(Limits { nominal: 1, lendable: 0, borrowing: Some(0), queuing: q(2) });
    let running = pool.arrive(l, 1, 1, 1).unwrap();
    for id in 2..8 {
        assert!(pool.arrive(l, id, 1, id).unwrap().is_empty());
    }
    assert!(pool.set_limits(l, Limits { nominal: 1, lendable: 0, borrowing: Some(0), queuing: q(5) }).is_empty());
    assert_eq!(pool.view(l).waiting, 6);
    assert_eq!(pool.view(l).queues.len(), 5);
    // The running request's seat still comes back, and one waiting request takes it.
    assert_eq!(pool.finish(running[0]).len(), 1);
    // More seats start more at once.
    assert_eq!(pool.set_limits(l, Limits { nominal: 3, lendable: 0, borrowing: Some(0), queuing: q(5) }).len(), 2);
}
