//! The history a cache reads on load, bounded by the store's changes rather than its revisions
//! (RFC 0016), against a real store: `Storage::history_floor` answers the revision after which
//! the store's last `most` changes lie, as a model of the writes says; and a shard restarted
//! over a store written in large transactions serves a watch resumed from within its last
//! changes (its history read is larger than gRPC's default 4 MiB message) and answers 410 for
//! one from before them.

use shardplane_keyspace::etcd_layout::object_key;
use shardplane_keyspace::{ObjectKey, RangeSet};
use shardplane_storage::{Companion, HistoryBound, Primary, Storage};
use shardplane_testkit::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// Writes `n` keys under `prefix` in one transaction; returns its revision, and the bytes of
/// the keys and values written.
async fn write_batch(storage: &Storage, prefix: &str, n: usize, value: impl Fn(&str) -> Vec<u8>) -> (u64, usize) {
    let key = |i: usize| format!("{prefix}-{i}");
    let companions: Vec<Companion> = (1..n).map(|i| Companion::Create { key: key(i).into_bytes(), value: value(&key(i)) }).collect();
    let bytes = (0..n).map(|i| key(i).len() + value(&key(i)).len()).sum();
    (storage.commit(&Primary::Create { key: key(0).into_bytes(), value: value(&key(0)) }, &companions).await.unwrap(), bytes)
}

/// What each revision wrote: how many changes, how many bytes.
type Model = BTreeMap<u64, (usize, usize)>;

/// The floor the model gives: the revision after which the newest changes fit `most`
/// (0 when all of them do).
fn model_floor(changes: &Model, most: HistoryBound) -> u64 {
    let (mut seen, mut bytes) = (0, 0);
    for (&revision, &(n, b)) in changes.iter().rev() {
        if seen + n > most.changes || bytes + b > most.bytes {
            return revision;
        }
        seen += n;
        bytes += b;
    }
    0
}

/// One write of `key`, in the model.
async fn write_one(storage: &Storage, changes: &mut Model, key: String, value: Vec<u8>) {
    let bytes = key.len() + value.len();
    changes.insert(storage.create(key.as_bytes(), value).await.unwrap(), (1, bytes));
}

fn bound(changes: usize, bytes: usize) -> HistoryBound {
    HistoryBound { changes, bytes }
}

#[tokio::test]
async fn the_history_floor_counts_the_store_changes_not_its_revisions() {
    let etcd = Etcd::start().await;
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    // Transactions of 1 to 40 keys of values up to 3 KB in a fixed pseudo-random order, then
    // single writes: spans of very different density, as a bulk import followed by ordinary
    // traffic writes them.
    let mut changes = Model::new();
    let mut x: u64 = 7;
    for t in 0..120 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let (n, size) = (1 + (x >> 33) as usize % 40, (x >> 45) as usize % 3000);
        let (revision, bytes) = write_batch(&storage, &format!("/t/{t}"), n, |_| vec![b'v'; size]).await;
        changes.insert(revision, (n, bytes));
    }
    for i in 0..150 {
        write_one(&storage, &mut changes, format!("/single/{i}"), b"v".to_vec()).await;
    }
    let top = *changes.keys().last().unwrap();
    let total: usize = changes.values().map(|(n, _)| n).sum();
    let total_bytes: usize = changes.values().map(|(_, b)| b).sum();
    // The keys written are every change the store has (each test has a store of its own).
    let any = usize::MAX;
    for most in [bound(1, any), bound(63, any), bound(64, any), bound(150, any), bound(151, any), bound(400, any), bound(1_000, any), bound(total - 1, any), bound(total, any), bound(total + 5, any), bound(any, 1), bound(any, 10_000), bound(any, 100_000), bound(500, 50_000), bound(any, total_bytes - 1), bound(any, total_bytes)] {
        let floor = storage.history_floor(top, most).await.unwrap();
        assert_eq!(floor, model_floor(&changes, most), "floor for {most:?} of {total} changes, {total_bytes} bytes");
        let (after, after_bytes) = changes.range(floor + 1..).fold((0, 0), |(n, b), (_, (dn, db))| (n + dn, b + db));
        assert!(after <= most.changes && after_bytes <= most.bytes, "{after} changes, {after_bytes} bytes after the floor, more than {most:?}");
    }
    // A floor found is answered again for a while, for a later revision too (the caches of a
    // shard ask one after another while the store moves on): 40 single writes later, the
    // floor for the last 150 changes is still the one found, not the model's new one.
    let kept = storage.history_floor(top, bound(150, any)).await.unwrap();
    for i in 0..40 {
        write_one(&storage, &mut changes, format!("/later/{i}"), b"v".to_vec()).await;
    }
    let top = *changes.keys().last().unwrap();
    assert_ne!(model_floor(&changes, bound(150, any)), kept);
    assert_eq!(storage.history_floor(top, bound(150, any)).await.unwrap(), kept);
    // Compacted history ends the reach: the floor is the compaction revision.
    let compacted = top - 100;
    storage.compact(compacted).await.unwrap();
    let floor = storage.history_floor(top, bound(total * 2, any)).await.unwrap();
    assert_eq!(floor, compacted);
}

/// A stored ConfigMap, with `data` bytes of data.
fn stored_configmap(key: &str, data: usize) -> Vec<u8> {
    let name = key.rsplit('/').next().unwrap();
    serde_json::to_vec(&serde_json::json!({
        "kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "bulk", "uid": format!("uid-{name}"), "creationTimestamp": "2026-12-07T00:00:00Z"},
        "data": {"d": "x".repeat(data)},
    }))
    .unwrap()
}

#[tokio::test]
async fn a_restarted_shard_serves_watches_from_within_the_stores_last_changes() {
    let etcd = Etcd::start().await;
    // A first start writes the cluster's bootstrap objects, so the second start (the restart)
    // finds the store as a running cluster leaves it.
    // A shard itself, also under SHARDPLANE_ROUTER_SHARDS: the history on load is the shard's,
    // and a router ends a watch that falls 2,048 events behind its hub by design (RFC 0003),
    // which reading 7,500 events of history would test instead.
    let first = TestShard::start_shard(test_config(&etcd, RangeSet::full())).await;
    drop(first);
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    // 300 transactions of 50 ConfigMaps of ~1 KiB: 15,000 changes in 300 revisions. The last
    // 10,000 changes (what a cache reads on load) are the last 200 transactions, ~12 MB: more
    // than one 4 MiB gRPC message at the sizes etcd sends a catching-up watch.
    let mut revisions = Vec::new();
    for t in 0..300 {
        let prefix = format!("{}-{t}", object_key(&ObjectKey::new("", "configmaps", "bulk", "cm")));
        revisions.push(write_batch(&storage, &prefix, 50, |k| stored_configmap(k, 1024)).await.0);
    }
    let mut config = test_config(&etcd, RangeSet::full());
    config.id = "restarted".into();
    let s = TestShard::start_shard(config).await;

    // From transaction 150 on, within the last 10,000 changes: every later create, in order.
    let within = revisions[149];
    let mut w = s.watch(&format!("/api/v1/namespaces/bulk/configmaps?watch=1&resourceVersion={within}")).await;
    let mut seen = Vec::new();
    while seen.len() < 150 * 50 {
        let e = w.next_change(Duration::from_secs(30)).await.unwrap_or_else(|| panic!("the watch ended after {} of {} events", seen.len(), 150 * 50));
        assert_eq!(e["type"], "ADDED", "{e}");
        seen.push(event_rv(&e));
    }
    assert!(seen.windows(2).all(|p| p[0] <= p[1]), "events out of revision order");
    let per_revision = seen.iter().fold(BTreeMap::<u64, usize>::new(), |mut m, r| {
        *m.entry(*r).or_default() += 1;
        m
    });
    assert_eq!(per_revision.keys().copied().collect::<Vec<_>>(), revisions[150..].to_vec());
    assert!(per_revision.values().all(|&n| n == 50));
    // And it goes on with what is written now.
    // (The bulk objects were written to etcd directly; their namespace is made now.)
    s.namespace("bulk").await;
    let (code, made) = s.post("/api/v1/namespaces/bulk/configmaps", &configmap("after", serde_json::json!({}))).await;
    assert_eq!(code, 201, "{made}");
    let e = w.next_change(Duration::from_secs(30)).await.expect("the create after the restart");
    assert_eq!((e["type"].as_str(), e["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("after")));

    // From transaction 50, before the last 10,000 changes: 410, as for any RV older than the
    // history.
    let before = revisions[49];
    let mut old = s.watch(&format!("/api/v1/namespaces/bulk/configmaps?watch=1&resourceVersion={before}")).await;
    let e = old.next(Duration::from_secs(30)).await.expect("an answer");
    assert_eq!((e["type"].as_str(), e["object"]["code"].as_u64(), e["object"]["reason"].as_str()), (Some("ERROR"), Some(410), Some("Expired")), "{e}");
}
