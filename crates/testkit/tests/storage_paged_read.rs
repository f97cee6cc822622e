//! Paged reads of a large key range against a real etcd (RFC 0018): a resource's range, or one
//! hash range of it, read in pieces returns exactly the keys etcd held at the reader's revision,
//! in key order, each once, even while the range changes between pages; a range too small to
//! cut, and a range that is not a resource's, are read whole.

use shardplane_keyspace::etcd_layout::{object_key, prefix_end, range_keys, resource_prefix};
use shardplane_keyspace::{HashRange, ObjectKey};
use shardplane_storage::{RangeReader, Storage, PIECE_KEYS, RANGE_PAGE};
use shardplane_testkit::*;
use std::collections::BTreeMap;

/// Creates pod keys `pod-{i}` for `i` in `range`, 32 at a time; returns key → value.
async fn create_pods(storage: &Storage, range: std::ops::Range<usize>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let keys: Vec<(Vec<u8>, Vec<u8>)> = range.map(|i| (object_key(&ObjectKey::new("", "pods", &format!("ns-{}", i % 7), &format!("pod-{i}"))).into_bytes(), format!("v{i}").into_bytes())).collect();
    for chunk in keys.chunks(32) {
        let writes = chunk.iter().map(|(k, v)| {
            let storage = storage.clone();
            async move { storage.create(k, v.clone()).await.unwrap() }
        });
        futures::future::join_all(writes).await;
    }
    keys.into_iter().collect()
}

/// Reads the whole range with `reader`, changing etcd after the first page: creating, updating
/// and deleting keys of the range. Returns what was read and the reader.
async fn read_while_changing(storage: &Storage, mut reader: RangeReader, changed: &BTreeMap<Vec<u8>, Vec<u8>>) -> (Vec<(Vec<u8>, Vec<u8>)>, RangeReader) {
    let mut read = Vec::new();
    let first = reader.next_page(storage).await.unwrap().expect("a first page");
    read.extend(first.into_iter().map(|kv| (kv.key, kv.value.to_vec())));
    for (i, (k, v)) in changed.iter().enumerate() {
        let (current, _) = storage.get(k).await.unwrap();
        match (current, i % 2) {
            (Some(kv), 0) => {
                storage.delete(k, kv.mod_revision).await.unwrap();
            }
            (Some(kv), _) => {
                storage.update(k, b"changed".to_vec(), kv.mod_revision).await.unwrap();
            }
            (None, _) => {
                storage.create(k, v.clone()).await.unwrap();
            }
        }
    }
    while let Some(kvs) = reader.next_page(storage).await.unwrap() {
        read.extend(kvs.into_iter().map(|kv| (kv.key, kv.value.to_vec())));
    }
    (read, reader)
}

fn assert_in_order_once(read: &[(Vec<u8>, Vec<u8>)]) {
    assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "keys out of order or read twice");
}

#[tokio::test]
async fn a_large_range_is_read_in_pieces_at_one_revision() {
    let etcd = Etcd::start().await;
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let n = 3 * PIECE_KEYS as usize + 700;
    let held = create_pods(&storage, 0..n).await;
    // Neighbours that must not be read: another resource whose name extends "pods", and a key
    // just past the resource's prefix.
    storage.create(object_key(&ObjectKey::new("", "podtemplates", "ns", "t")).as_bytes(), b"x".to_vec()).await.unwrap();
    storage.create(&prefix_end(resource_prefix("", "pods").as_bytes()), b"x".to_vec()).await.unwrap();

    // The whole resource, as a prefix: changed between pages (the first 40 held keys, and 40
    // new ones), it must read as it stood at the first page's revision.
    let p = resource_prefix("", "pods").into_bytes();
    let mut changes: BTreeMap<Vec<u8>, Vec<u8>> = held.iter().take(40).map(|(k, v)| (k.clone(), v.clone())).collect();
    changes.extend((n..n + 40).map(|i| (object_key(&ObjectKey::new("", "pods", "late", &format!("pod-{i}"))).into_bytes(), b"late".to_vec())));
    let (read, reader) = read_while_changing(&storage, RangeReader::new(&p, &prefix_end(&p), 0, RANGE_PAGE), &changes).await;
    assert_eq!(reader.pieces(), n.div_ceil(PIECE_KEYS as usize), "{n} keys are read in pieces of about {PIECE_KEYS}");
    assert_in_order_once(&read);
    assert_eq!(read.into_iter().collect::<BTreeMap<_, _>>(), held);

    // The same read again, at the revision the first one ended on, through `list_range`: etcd now.
    let (now, rev) = storage.list_range(&p, &prefix_end(&p), 0).await.unwrap();
    assert!(rev > reader.revision());
    let now: BTreeMap<Vec<u8>, Vec<u8>> = now.into_iter().map(|kv| (kv.key, kv.value.to_vec())).collect();
    let mut expected = held.clone();
    for (i, (k, v)) in changes.iter().enumerate() {
        match (held.contains_key(k), i % 2) {
            (true, 0) => {
                expected.remove(k);
            }
            (true, _) => {
                expected.insert(k.clone(), b"changed".to_vec());
            }
            (false, _) => {
                expected.insert(k.clone(), v.clone());
            }
        }
    }
    assert_eq!(now, expected);

    // One hash range of the resource, keys only: exactly the keys whose hash is in it.
    let range = HashRange::new(1 << 62, 3 << 62).unwrap();
    let (start, end) = range_keys("", "pods", range);
    let mut reader = RangeReader::new(&start, &end, 0, RANGE_PAGE).keys_only();
    let mut keys = Vec::new();
    while let Some(kvs) = reader.next_page(&storage).await.unwrap() {
        assert!(kvs.iter().all(|kv| kv.value.is_empty()));
        keys.extend(kvs.into_iter().map(|kv| kv.key));
    }
    let want: Vec<Vec<u8>> = expected.keys().filter(|k| k.as_slice() >= start.as_slice() && k.as_slice() < end.as_slice()).cloned().collect();
    assert!(want.len() > PIECE_KEYS as usize, "half the hash space holds more than a piece");
    assert_eq!(reader.pieces(), (want.len() as u64).div_ceil(PIECE_KEYS) as usize);
    assert_eq!(keys, want);
}

#[tokio::test]
async fn small_ranges_and_other_ranges_are_read_whole() {
    let etcd = Etcd::start().await;
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let held = create_pods(&storage, 0..PIECE_KEYS as usize).await;
    let p = resource_prefix("", "pods").into_bytes();
    let mut reader = RangeReader::new(&p, &prefix_end(&p), 0, 300);
    let mut read = Vec::new();
    while let Some(kvs) = reader.next_page(&storage).await.unwrap() {
        read.extend(kvs.into_iter().map(|kv| (kv.key, kv.value.to_vec())));
    }
    assert_eq!(reader.pieces(), 1, "{PIECE_KEYS} keys are one piece");
    assert_in_order_once(&read);
    assert_eq!(read.into_iter().collect::<BTreeMap<_, _>>(), held);

    // Keys outside the object layout, more than a piece: under a prefix they may be cut where
    // object keys would be (all land in one piece), in any other range they are not; either
    // way every key is read once.
    for i in 0..(PIECE_KEYS + 300) {
        storage.put(format!("/control/{i:06}").as_bytes(), b"c".to_vec()).await.unwrap();
    }
    for (start, end, whole) in [(&b"/control/"[..], &b"/control0"[..], false), (b"/control/0", b"/control/9", true)] {
        let mut reader = RangeReader::new(start, end, 0, RANGE_PAGE);
        let mut keys = Vec::new();
        while let Some(kvs) = reader.next_page(&storage).await.unwrap() {
            keys.extend(kvs.into_iter().map(|kv| kv.key));
        }
        assert_eq!(keys, (0..(PIECE_KEYS + 300)).map(|i| format!("/control/{i:06}").into_bytes()).collect::<Vec<_>>());
        if whole {
            assert_eq!(reader.pieces(), 1);
        }
    }
}
