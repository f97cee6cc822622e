//! I2 and I3 from outside, against etcd's own history: concurrent writers over three shards,
//! concurrent watchers through the router (from the start, resuming mid-way, and with
//! sendInitialEvents); every watcher's stream equals etcd's history of the watched set, and a
//! LIST at revision R equals etcd's range read at R; paging 2,000 objects while writes continue
//! yields etcd's state at the first page's RV, each object once (I4).


use shardplane_testkit::*;
use serde_json::{json, Value};
use shardplane_keyspace::{etcd_layout, HashRange, RangeSet};
use shardplane_storage::Storage;
use std::collections::BTreeMap;
use std::time::Duration;

const CM: &str = "/api/v1/namespaces/demo/configmaps";
const T: Duration = Duration::from_secs(20);


/// (type, name, rv) of every configmap change in etcd after `from`, up to `to`.
async fn etcd_history(storage: &Storage, from: u64, to: u64) -> Vec<(String, String, u64)> {
    shardplane_testkit::etcd_history(storage, "", "configmaps", from, to).await.into_iter().map(|e| (e.kind.to_owned(), e.name, e.rv)).collect()
}

/// Reads a watcher until it has delivered every change up to `to`.
async fn collect(w: &mut WatchReader, to: u64) -> Vec<(String, String, u64)> {
    let mut out = Vec::new();
    while out.last().is_none_or(|(_, _, r): &(String, String, u64)| *r < to) {
        let e = w.next_change(T).await.expect("watch delivered everything in time");
        assert_ne!(e["type"], "ERROR", "{e}");
        out.push((e["type"].as_str().unwrap().to_owned(), e["object"]["metadata"]["name"].as_str().unwrap().to_owned(), rv(&e["object"])));
    }
    out
}

/// etcd, a client of it, three shards on thirds of the hash space, and a router over them with
/// namespace `demo`.
async fn three_shards() -> (Etcd, Storage, Vec<TestShard>, TestShard) {
    let etcd = Etcd::start().await;
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let mut shards = Vec::new();
    for r in HashRange::split_even(3) {
        shards.push(TestShard::start(test_config(&etcd, RangeSet::from_disjoint(vec![r]).unwrap())).await);
    }
    let r = TestShard::start_router(&[etcd.endpoint.clone()], shards.iter().map(|s| s.url.clone()).collect(), Duration::from_millis(500)).await;
    r.namespace("demo").await;
    (etcd, storage, shards, r)
}

#[tokio::test]
async fn watchers_and_lists_through_the_router_equal_etcd() {
    let (_etcd, storage, _shards, r) = three_shards().await;
    let (_, seed) = r.post(CM, &configmap("seed", json!({}))).await;
    let start = rv(&seed);

    let mut from_start = r.watch(&format!("{CM}?watch=1&resourceVersion={start}")).await;
    let mut with_state = r.watch(&format!("{CM}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")).await;

    // Three writers: creates, updates (some unconditional) and deletes over ten names.
    let url = r.url.clone();
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let url = url.clone();
            tokio::spawn(async move {
                let c = client();
                let mut last = 0;
                for i in 0..40u64 {
                    let name = format!("n{}", (i * 7 + w * 3) % 10);
                    let op = (i + w) % 4;
                    let resp = match op {
                        0 | 1 => c.post(format!("{url}{CM}")).json(&configmap(&name, json!({"w": w.to_string()}))).send().await.unwrap(),
                        2 => c.patch(format!("{url}{CM}/{name}")).header("content-type", "application/merge-patch+json").body(format!(r#"{{"data":{{"i":"{i}"}}}}"#)).send().await.unwrap(),
                        _ => c.delete(format!("{url}{CM}/{name}")).send().await.unwrap(),
                    };
                    if resp.status().is_success()
                        && let Ok(v) = resp.json::<Value>().await
                        && let Some(r) = v["metadata"]["resourceVersion"].as_str().and_then(|r| r.parse::<u64>().ok())
                    {
                        last = last.max(r);
                    }
                }
                last
            })
        })
        .collect();
    // A watcher that starts mid-way, from the RV of the first write it can see.
    let mid = loop {
        let (_, list) = r.get(CM).await;
        if rv(&list) > start + 5 {
            break rv(&list);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let mut from_mid = r.watch(&format!("{CM}?watch=1&resourceVersion={mid}")).await;
    for w in writers {
        w.await.unwrap();
    }
    // A final write marks the end of the history every watcher must reach.
    let (_, fin) = r.post(CM, &configmap("final", json!({}))).await;
    let end = rv(&fin);

    let truth = etcd_history(&storage, start, end).await;
    assert!(truth.len() > 40, "the writers made {} changes", truth.len());
    assert_eq!(collect(&mut from_start, end).await, truth);
    let after_mid: Vec<_> = truth.iter().filter(|(_, _, r)| *r > mid).cloned().collect();
    assert_eq!(collect(&mut from_mid, end).await, after_mid);

    // sendInitialEvents: the state at one revision R, the end bookmark at R, then the history after R.
    let mut initial = BTreeMap::new();
    let r_state = loop {
        let e = with_state.next(T).await.unwrap();
        if e["type"] == "BOOKMARK" {
            break rv(&e["object"]);
        }
        initial.insert(e["object"]["metadata"]["name"].as_str().unwrap().to_owned(), rv(&e["object"]));
    };
    let (start_key, end_key) = etcd_layout::range_keys("", "configmaps", HashRange::FULL);
    let (at_r, _) = storage.list_range(&start_key, &end_key, r_state).await.unwrap();
    let etcd_state: BTreeMap<String, u64> = at_r.iter().map(|kv| (etcd_layout::parse_object_key("", "configmaps", &kv.key).unwrap().2.to_owned(), kv.mod_revision)).collect();
    assert_eq!(initial, etcd_state);
    let after_r: Vec<_> = truth.iter().filter(|(_, _, r)| *r > r_state).cloned().collect();
    assert_eq!(collect(&mut with_state, end).await, after_r);

    // I3: a LIST at revision R equals etcd at R, for several R in the history.
    for (_, _, r_at) in truth.iter().step_by(17) {
        let (code, list) = r.get(&format!("{CM}?resourceVersion={r_at}&resourceVersionMatch=Exact")).await;
        assert_eq!(code, 200, "{list}");
        let got: Vec<(String, u64)> = list["items"].as_array().unwrap().iter().map(|i| (i["metadata"]["name"].as_str().unwrap().to_owned(), rv(i))).collect();
        let (kvs, _) = storage.list_range(&start_key, &end_key, *r_at).await.unwrap();
        let mut want: Vec<(String, u64)> = kvs.iter().map(|kv| (etcd_layout::parse_object_key("", "configmaps", &kv.key).unwrap().2.to_owned(), kv.mod_revision)).collect();
        want.sort();
        assert_eq!(got, want, "LIST at {r_at}");
    }
}

#[tokio::test]
async fn paging_thousands_while_writes_continue_yields_each_object_once_at_one_rv() {
    let (_etcd, storage, _shards, r) = three_shards().await;
    // 2,000 objects, written 16 at a time.
    let url = r.url.clone();
    futures::future::join_all((0..16).map(|w| {
        let url = url.clone();
        async move {
            let c = client();
            for i in (w..2000).step_by(16) {
                let resp = c.post(format!("{url}{CM}")).json(&configmap(&format!("p{i:04}"), json!({}))).send().await.unwrap();
                assert_eq!(resp.status(), 201);
            }
        }
    }))
    .await;
    // A writer keeps creating and deleting while a client pages through.
    let stop = tokio_util::sync::CancellationToken::new();
    let writer = {
        let (url, stop) = (url.clone(), stop.clone());
        tokio::spawn(async move {
            let c = client();
            let mut n = 0;
            while !stop.is_cancelled() {
                c.post(format!("{url}{CM}")).json(&configmap(&format!("x{n:05}"), json!({}))).send().await.unwrap();
                c.delete(format!("{url}{CM}/p{:04}", n % 2000)).send().await.unwrap();
                n += 1;
            }
            n
        })
    };
    let mut got: Vec<(String, u64)> = Vec::new();
    let mut cont: Option<String> = None;
    let mut list_rv = None;
    // (objects returned so far, remainingItemCount) after each page but the last.
    let mut counts: Vec<(usize, u64)> = Vec::new();
    let mut pages = 0;
    loop {
        let q = match &cont {
            Some(c) => format!("{CM}?limit=250&continue={c}"),
            None => format!("{CM}?limit=250"),
        };
        let (code, page) = r.get(&q).await;
        assert_eq!(code, 200, "{page}");
        assert_eq!(*list_rv.get_or_insert(rv(&page)), rv(&page), "every page at the first page's RV");
        got.extend(page["items"].as_array().unwrap().iter().map(|i| (i["metadata"]["name"].as_str().unwrap().to_owned(), rv(i))));
        pages += 1;
        match page["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => {
                let left = page["metadata"]["remainingItemCount"].as_u64().expect("remainingItemCount with a continue token");
                assert!(left > 0);
                counts.push((got.len(), left));
                cont = Some(c.to_owned());
            }
            _ => break,
        }
    }
    stop.cancel();
    let writes = writer.await.unwrap();
    assert!(writes > 0, "the writer ran while paging");
    // Exactly etcd's state at the list's RV, each object once, in (namespace, name) order.
    let (start_key, end_key) = etcd_layout::range_keys("", "configmaps", HashRange::FULL);
    let (kvs, _) = storage.list_range(&start_key, &end_key, list_rv.unwrap()).await.unwrap();
    let mut want: Vec<(String, u64)> = kvs.iter().map(|kv| (etcd_layout::parse_object_key("", "configmaps", &kv.key).unwrap().2.to_owned(), kv.mod_revision)).collect();
    want.sort();
    assert!(want.len() >= 1900, "{} objects", want.len());
    assert_eq!(got, want);
    // remainingItemCount is exact at the list's RV.
    for (seen, left) in counts {
        assert_eq!(seen as u64 + left, want.len() as u64, "after {seen} objects");
    }
    // Pages may come out shorter than the limit (each shard is asked for its share), but not
    // much: never more than twice the pages a single server would give.
    assert!(pages <= 2 * want.len().div_ceil(250), "{pages} pages for {} objects", want.len());
}
