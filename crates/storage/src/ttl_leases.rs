//! Objects that expire (`--event-ttl`, RFC 0015): etcd leases shared by many objects, as
//! kube-apiserver's lease manager shares them. One lease per lease-reuse window (5% of the TTL,
//! at most a minute) and at most [`MAX_ATTACHED`] objects, granted for the TTL plus that
//! window: an object lives between its TTL and its TTL plus the window after its last write,
//! and a burst of events costs one lease grant, not one per event (upstream's
//! kubernetes/kubernetes#47532 and #98257).

use crate::{Result, Storage};
use std::time::{Duration, Instant};

/// Objects attached to one lease at most (upstream's `leaseMaxAttachedObjectCount`).
pub const MAX_ATTACHED: u32 = 1000;
/// The longest a lease is reused (upstream's `--lease-reuse-duration-seconds`).
pub const MAX_REUSE: Duration = Duration::from_secs(60);

/// The lease objects are attached to now, and until when it may be.
#[derive(Default)]
pub(crate) struct TtlLeases {
    current: tokio::sync::Mutex<Option<Shared>>,
}

struct Shared {
    id: i64,
    /// The lease's TTL: a new object may join only while it expires no sooner than its own TTL.
    expires: Instant,
    ttl: Duration,
    attached: u32,
}

/// How long a lease for objects with `ttl` is reused: 5% of the TTL, at most [`MAX_REUSE`].
pub fn reuse_window(ttl: Duration) -> Duration {
    (ttl / 20).min(MAX_REUSE)
}

impl Storage {
    /// A lease for an object that must live `ttl` after this write: the shared one while it
    /// lasts long enough and has room, else a new one granted for `ttl` and the reuse window.
    pub async fn ttl_lease(&self, ttl: Duration) -> Result<i64> {
        let mut current = self.ttl_leases.current.lock().await;
        let now = Instant::now();
        if let Some(s) = current.as_mut()
            && s.ttl == ttl
            && s.expires >= now + ttl
            && s.attached < MAX_ATTACHED
        {
            s.attached += 1;
            return Ok(s.id);
        }
        let granted = ttl + reuse_window(ttl);
        let secs = granted.as_secs().max(1) + u64::from(granted.subsec_nanos() > 0);
        // A grant repeated after an unknown fate at most leaves a lease nobody uses, which
        // expires by itself.
        let id = self.repeatable(|c| async move { c.lease_client().grant(secs as i64, None).await }).await?.id();
        *current = Some(Shared { id, expires: now + Duration::from_secs(secs), ttl, attached: 1 });
        Ok(id)
    }

    /// Stops handing out lease `id`: the store no longer has it (revoked, or lost with a store
    /// that came back from a crash), so the next [`Storage::ttl_lease`] grants a new one.
    pub async fn forget_ttl_lease(&self, id: i64) {
        let mut current = self.ttl_leases.current.lock().await;
        if current.as_ref().is_some_and(|s| s.id == id) {
            *current = None;
        }
    }
}

/// Whether a write failed because the lease it was written on is gone from the store. etcd
/// answers gRPC `NotFound` with this description, and its own client library names its errors
/// by their descriptions the same way (`rpctypes.ErrLeaseNotFound`); the embedded store gives
/// the same text.
pub fn is_lease_not_found(e: &crate::StorageError) -> bool {
    matches!(e, crate::StorageError::Etcd(m) if m.contains("requested lease not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reuse_window_is_five_percent_of_the_ttl_and_at_most_a_minute() {
        assert_eq!(reuse_window(Duration::from_secs(3600)), Duration::from_secs(60));
        assert_eq!(reuse_window(Duration::from_secs(600)), Duration::from_secs(30));
        assert_eq!(reuse_window(Duration::from_secs(2)), Duration::from_millis(100));
    }
}
