//! Watch responses on the wire: one event per line in the representation the client negotiated,
//! and how long a watch runs.

use crate::negotiation::{Representation, View};
use crate::{body, printing};
use bytes::Bytes;
use serde_json::json;
use shardplane_apimachinery::resources::ResourceInfo;
use shardplane_apimachinery::watch_event::line as event_line;
use std::time::Duration;

/// One watch event (`kind` is ADDED, MODIFIED or DELETED) of `object`'s stored bytes at `rv`,
/// rendered as `view` asks.
pub fn event(info: &ResourceInfo, view: View, kind: &str, object: &[u8], rv: u64) -> Bytes {
    match view.repr {
        Representation::Json => event_line(kind, &body::served(info, object)),
        // Each event carries one object, whichever of the two the client named (upstream too).
        Representation::Metadata { version: v, .. } => event_line(kind, &shardplane_apimachinery::encode::object_bytes(&printing::partial_metadata(v, object))),
        Representation::Table(v) => event_line(kind, &printing::table(info, v, &[object], json!({"resourceVersion": rv.to_string()}), view.include)),
    }
}

/// How long a watch runs: `timeoutSeconds`, else a random time between `min` and twice `min`
/// (30–60 minutes by default), as upstream, so that watches opened together do not all end
/// together.
pub fn watch_timeout(timeout_seconds: Option<u64>, min: Duration) -> Duration {
    Duration::from_secs(timeout_seconds.unwrap_or_else(|| min.as_secs().saturating_add(rand_secs(min.as_secs()))))
}

fn rand_secs(max: u64) -> u64 {
    u64::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..8].try_into().expect("8 bytes")) % max.max(1)
}
