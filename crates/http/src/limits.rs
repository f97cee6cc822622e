//! In-flight bounds (upstream's `--max-requests-inflight` and `--max-mutating-requests-inflight`),
//! in force when priority and fairness is off (`--enable-priority-and-fairness=false`, RFC 0013).
//! Past them a request gets 429 with Retry-After, as upstream; watches are long-running and
//! exempt (each is bounded by its own buffers).

use axum::http::Method;
use shardplane_apimachinery::ApiError;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Upstream's default `--max-requests-inflight`.
pub const DEFAULT_READ: usize = 400;
/// Upstream's default `--max-mutating-requests-inflight`.
pub const DEFAULT_MUTATING: usize = 200;

/// The two pools of seats: reads, and writes.
#[derive(Clone)]
pub struct InflightLimits {
    read: Arc<Semaphore>,
    mutating: Arc<Semaphore>,
}

impl InflightLimits {
    /// At most `read` non-mutating and `mutating` mutating requests at once (each at least 1).
    pub fn new(read: usize, mutating: usize) -> Self {
        Self { read: Arc::new(Semaphore::new(read.max(1))), mutating: Arc::new(Semaphore::new(mutating.max(1))) }
    }

    /// A seat for one request (none needed for a watch), or the 429 to answer.
    pub fn admit(&self, method: &Method, watch: bool) -> Result<Option<OwnedSemaphorePermit>, ApiError> {
        let pool = match *method {
            _ if watch => return Ok(None),
            Method::GET | Method::HEAD => &self.read,
            _ => &self.mutating,
        };
        pool.clone().try_acquire_owned().map(Some).map_err(|_| ApiError::too_many_requests("Too many requests, please try again later.", 1))
    }
}

impl Default for InflightLimits {
    fn default() -> Self {
        Self::new(DEFAULT_READ, DEFAULT_MUTATING)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pool_refuses_past_its_bound_and_watches_take_no_seat() {
        let l = InflightLimits::new(1, 1);
        let read = l.admit(&Method::GET, false).unwrap();
        let e = l.admit(&Method::GET, false).unwrap_err();
        assert_eq!((e.code, e.details.and_then(|d| d.retry_after_seconds)), (429, Some(1)));
        assert!(l.admit(&Method::GET, true).unwrap().is_none());
        let write = l.admit(&Method::POST, false).unwrap();
        assert!(l.admit(&Method::DELETE, false).is_err());
        drop((read, write));
        assert!(l.admit(&Method::GET, false).unwrap().is_some());
    }
}
