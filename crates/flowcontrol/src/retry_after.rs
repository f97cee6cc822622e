//! The Retry-After a refused request is told (RFC 0013), per priority level as upstream tracks
//! it: 1 s to start with; doubled (at most 32 s) when, over the last Retry-After seconds, at
//! least three times that many requests were refused; one second less each second in which
//! fewer than that many were.

use std::collections::VecDeque;

/// The longest Retry-After.
pub const MAX_RETRY_AFTER: u64 = 32;

/// One level's refusals by second.
#[derive(Debug)]
pub struct RetryAfter {
    /// (unix second, refusals in it), the last [`MAX_RETRY_AFTER`] seconds.
    history: VecDeque<(u64, u64)>,
    current: u64,
    changed_at: u64,
}

impl Default for RetryAfter {
    fn default() -> Self {
        Self { history: VecDeque::new(), current: 1, changed_at: 0 }
    }
}

impl RetryAfter {
    /// Counts a refusal at `now` (unix seconds).
    pub fn refused(&mut self, now: u64) {
        match self.history.back_mut() {
            Some((at, n)) if *at == now => *n += 1,
            _ => self.history.push_back((now, 1)),
        }
        while self.history.front().is_some_and(|(at, _)| now - at > MAX_RETRY_AFTER) {
            self.history.pop_front();
        }
    }

    /// The Retry-After to give at `now`.
    pub fn seconds(&mut self, now: u64) -> u64 {
        let window = self.current;
        // Refusals in the whole seconds before this one, within the window.
        let recent: u64 = self.history.iter().filter(|(at, _)| *at < now && now - at <= window).map(|(_, n)| n).sum();
        if now.saturating_sub(self.changed_at) >= window && recent >= 3 * window {
            self.current = (window * 2).min(MAX_RETRY_AFTER);
            self.changed_at = now;
        } else if recent < window && window > 1 && now > self.changed_at {
            self.current = window - 1;
            self.changed_at = now;
        }
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_doubles_under_a_storm_and_comes_down_a_second_at_a_time() {
        let mut r = RetryAfter::default();
        assert_eq!(r.seconds(100), 1);
        for t in 100..106 {
            for _ in 0..200 {
                r.refused(t);
            }
            r.seconds(t + 1);
        }
        let high = r.seconds(106);
        assert!((4..=MAX_RETRY_AFTER).contains(&high), "{high}");
        for _ in 0..100 {
            for _ in 0..500 {
                r.refused(106);
            }
        }
        assert!(r.seconds(140) < high, "quiet seconds bring it down");
        let mut t = 140;
        while r.seconds(t) > 1 {
            t += 1;
            assert!(t < 300, "it returns to 1");
        }
    }
}
