//! `/readyz` as upstream writes it: one `[+]name ok` or `[-]name failed: reason` line per
//! check, then `ok` (200) or `readyz check failed` (500). The checks every process shares are
//! here: each store answers a read within [`STORE_CHECK`].

use crate::body;
use axum::body::Body;
use axum::http::{Response, StatusCode};
use shardplane_storage::Storage;
use std::time::Duration;

/// How long a store may take to answer the readiness read.
pub const STORE_CHECK: Duration = Duration::from_secs(2);

/// One named check's outcome: `None` when it passed, else why not.
pub type Check = (String, Option<String>);

/// Whether every store answers a read within [`STORE_CHECK`] (as upstream's `etcd` check).
pub async fn stores(all: &[Storage]) -> Check {
    for s in all {
        match tokio::time::timeout(STORE_CHECK, s.current_revision()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return ("etcd".into(), Some(e.to_string())),
            Err(_) => return ("etcd".into(), Some(format!("no answer within {STORE_CHECK:?}"))),
        }
    }
    ("etcd".into(), None)
}

/// Whether any store has its NOSPACE alarm raised (writes refused until it is recovered:
/// `shardctl recover-space`, RFC 0010).
pub async fn store_space(all: &[Storage]) -> Check {
    for s in all {
        if let Ok(Ok(alarms)) = tokio::time::timeout(STORE_CHECK, s.space_alarms()).await
            && !alarms.is_empty()
        {
            return ("etcd-space".into(), Some("NOSPACE alarm raised: writes are refused until the store is compacted, defragmented and disarmed (shardctl recover-space)".into()));
        }
    }
    ("etcd-space".into(), None)
}

/// The `/readyz` answer for `checks`.
pub fn answer(checks: &[Check]) -> Response<Body> {
    let mut text = String::new();
    for (name, failed) in checks {
        match failed {
            None => text.push_str(&format!("[+]{name} ok\n")),
            Some(why) => text.push_str(&format!("[-]{name} failed: {why}\n")),
        }
    }
    if checks.iter().all(|(_, f)| f.is_none()) {
        body::text(StatusCode::OK, "ok")
    } else {
        text.push_str("readyz check failed");
        body::text(StatusCode::INTERNAL_SERVER_ERROR, text)
    }
}
