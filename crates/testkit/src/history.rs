//! etcd's own history of a resource: the stream every watch a test reads is compared against.

use serde_json::Value;
use shardplane_keyspace::etcd_layout::{parse_object_key, prefix_end, resource_prefix};
use shardplane_storage::{Storage, WatchItem};
use std::time::{Duration, Instant};

/// One change to an object as etcd recorded it.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEvent {
    /// ADDED (the revision created the key: a first write, or a write after a delete),
    /// MODIFIED, or DELETED: the watch event type a client must see for it.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    /// The revision of the change: the resourceVersion a client sees on it.
    pub rv: u64,
    /// The object after the change; for a delete, the object as it was before.
    pub object: Value,
}

/// Every change to `group`/`resource` objects after revision `after` up to `to`, in order, read
/// from etcd's watch (asking for progress, so that it ends at `to` even when nothing was
/// written near it). Panics if etcd does not reach `to` within a minute.
pub async fn etcd_history(storage: &Storage, group: &str, resource: &str, after: u64, to: u64) -> Vec<HistoryEvent> {
    let prefix = resource_prefix(group, resource);
    let mut watch = storage.watch_range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), after).await.expect("etcd watch opens");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "etcd's history did not reach {to}");
        let item = tokio::select! {
            item = watch.next() => item.expect("etcd watch"),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                watch.request_progress().await.expect("etcd progress request");
                continue;
            }
        };
        match item {
            Some(WatchItem::Events(events)) => {
                for e in events {
                    if e.revision > to {
                        return out;
                    }
                    let (_, ns, name) = parse_object_key(group, resource, &e.kv.key).expect("an object key of the resource");
                    let kind = if e.deleted { "DELETED" } else if e.kv.create_revision == e.kv.mod_revision { "ADDED" } else { "MODIFIED" };
                    let bytes: &[u8] = if e.deleted { e.prev.as_ref().map(|p| &p.value[..]).unwrap_or_default() } else { &e.kv.value };
                    let object = serde_json::from_slice(bytes).unwrap_or(Value::Null);
                    out.push(HistoryEvent { kind, namespace: ns.to_owned(), name: name.to_owned(), rv: e.revision, object });
                }
            }
            Some(WatchItem::Progress(r)) if r >= to => return out,
            Some(WatchItem::Progress(_)) => {}
            None => panic!("etcd watch ended"),
        }
    }
}
