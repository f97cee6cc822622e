//! The router over two shards (halves of the hash space) on one real etcd: single-object verbs
//! reach the owner, LISTs are one snapshot in (namespace, name) order, paging yields every object
//! once at one RV, and a merged watch delivers every change in strictly increasing RV order.


use shardplane_testkit::*;
use serde_json::{json, Value};
use shardplane_keyspace::{HashRange, RangeSet};
use std::time::Duration;

const CM: &str = "/api/v1/namespaces/demo/configmaps";
const T: Duration = Duration::from_secs(15);

struct Cluster {
    _etcd: Etcd,
    shards: Vec<TestShard>,
    /// The router, driven through the same helpers as a shard.
    router: TestShard,
}

async fn cluster(k: u32) -> Cluster {
    let etcd = Etcd::start().await;
    let mut shards = Vec::new();
    for r in HashRange::split_even(k) {
        shards.push(TestShard::start(test_config(&etcd, RangeSet::from_disjoint(vec![r]).unwrap())).await);
    }
    let router = TestShard::start_router(&[etcd.endpoint.clone()], shards.iter().map(|s| s.url.clone()).collect(), Duration::from_millis(500)).await;
    router.namespace("demo").await;
    Cluster { _etcd: etcd, shards, router }
}


fn names(list: &Value) -> Vec<String> {
    list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn single_object_verbs_and_merged_lists_over_two_shards() {
    let c = cluster(2).await;
    let r = &c.router;
    let mut want = Vec::new();
    for i in 0..30 {
        let name = format!("cm-{i:02}");
        let (code, _) = r.post(CM, &configmap(&name, json!({"i": i.to_string()}))).await;
        assert_eq!(code, 201);
        want.push(name);
    }
    // Both shards hold some, none holds all.
    let held: Vec<usize> = futures::future::join_all(c.shards.iter().map(|s| s.get(CM))).await.into_iter().map(|(_, l)| l["items"].as_array().unwrap().len()).collect();
    assert!(held.iter().all(|n| *n > 0 && *n < 30), "{held:?}");
    // Every verb on one object reaches its owner.
    assert_eq!(r.get(&format!("{CM}/cm-07")).await.0, 200);
    let (code, p) = r.send("PATCH", &format!("{CM}/cm-07"), "application/merge-patch+json", r#"{"data":{"x":"y"}}"#).await;
    assert_eq!((code, &p["data"]["x"]), (200, &json!("y")));
    let (code, g) = r.post(CM, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}})).await;
    assert_eq!(code, 201);
    assert_eq!(r.get(&format!("{CM}/{}", g["metadata"]["name"].as_str().unwrap())).await.0, 200);
    assert_eq!(r.delete(&format!("{CM}/{}", g["metadata"]["name"].as_str().unwrap()), None).await.0, 200);
    // Errors come back as the shard's Status.
    let (code, st) = r.post(CM, &configmap("Bad_Name", json!({}))).await;
    assert_eq!((code, st["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(r.get(&format!("{CM}/missing")).await.1["reason"], "NotFound");

    // One merged snapshot, in order.
    let (code, all) = r.get(CM).await;
    assert_eq!((code, names(&all)), (200, want.clone()));
    // Paging: every page at the first page's RV, each object once, in order; writes made while
    // paging do not show.
    let mut got = Vec::new();
    let mut cont: Option<String> = None;
    let mut first_rv = None;
    loop {
        let q = match &cont {
            Some(c) => format!("{CM}?limit=7&continue={c}"),
            None => format!("{CM}?limit=7"),
        };
        let (code, page) = r.get(&q).await;
        assert_eq!(code, 200, "{page}");
        assert!(page["items"].as_array().unwrap().len() <= 7);
        assert_eq!(*first_rv.get_or_insert(rv(&page)), rv(&page));
        got.extend(names(&page));
        r.post(CM, &configmap(&format!("zz-{}", got.len()), json!({}))).await;
        match page["metadata"]["continue"].as_str() {
            Some(c) => {
                assert_eq!(page["metadata"]["remainingItemCount"].as_u64().unwrap() as usize, 30 - got.len());
                cont = Some(c.to_owned());
            }
            None => break,
        }
    }
    assert_eq!(got, want);
    // An exact LIST at that RV still shows the same snapshot.
    let (_, exact) = r.get(&format!("{CM}?resourceVersion={}&resourceVersionMatch=Exact", first_rv.unwrap())).await;
    assert_eq!(names(&exact), want);
    // Selectors pass through.
    let (_, sel) = r.get(&format!("{CM}?labelSelector=i%20in%20(3,4,25)")).await;
    assert_eq!(names(&sel), ["cm-03", "cm-04", "cm-25"]);
}

#[tokio::test]
async fn merged_watch_delivers_every_change_in_rv_order() {
    let c = cluster(2).await;
    let r = &c.router;
    let (_, first) = r.post(CM, &configmap("start", json!({}))).await;
    let mut w = r.watch(&format!("{CM}?watch=1&resourceVersion={}&allowWatchBookmarks=true", rv(&first))).await;
    let mut written = Vec::new();
    for i in 0..25 {
        let (_, o) = r.post(CM, &configmap(&format!("w{i}"), json!({}))).await;
        written.push((format!("w{i}"), rv(&o)));
    }
    // A write to another resource only: the configmap shards are idle, the merge must not stall.
    let mut seen = Vec::new();
    while seen.len() < written.len() {
        let e = w.next_change(T).await.expect("merged event");
        assert_eq!(e["type"], "ADDED");
        seen.push((e["object"]["metadata"]["name"].as_str().unwrap().to_owned(), rv(&e["object"])));
    }
    assert_eq!(seen, written);
    // With state: ADDED for everything at one revision, then live changes.
    let mut fresh = r.watch(&format!("{CM}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")).await;
    let mut initial = Vec::new();
    let end = loop {
        let e = fresh.next(T).await.expect("initial event");
        if e["type"] == "BOOKMARK" {
            break e;
        }
        initial.push(e["object"]["metadata"]["name"].as_str().unwrap().to_owned());
    };
    assert_eq!(end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    assert_eq!(initial.len(), 26);
    let (_, late) = r.post(CM, &configmap("late", json!({}))).await;
    let e = fresh.next_change(T).await.unwrap();
    assert_eq!((e["object"]["metadata"]["name"].as_str(), rv(&e["object"])), (Some("late"), rv(&late)));
}

#[tokio::test]
async fn kube_rs_watcher_through_the_router_sees_every_write_in_order() {
    use futures::TryStreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use kube::runtime::watcher::{self, Event};
    let c = cluster(4).await;
    let client = kube::Client::try_from(kube::Config::new(c.router.url.parse().unwrap())).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "demo");
    for (round, config) in [watcher::Config::default(), watcher::Config::default().streaming_lists()].into_iter().enumerate() {
        let stream = watcher::watcher(api.clone(), config);
        tokio::pin!(stream);
        loop {
            match tokio::time::timeout(T, stream.try_next()).await.expect("init").unwrap() {
                Some(Event::InitDone) => break,
                Some(_) => {}
                None => panic!("watch ended"),
            }
        }
        let mut want = Vec::new();
        for i in 0..12 {
            let cm: ConfigMap = serde_json::from_value(configmap(&format!("kr-{round}-{i}"), json!({}))).unwrap();
            let created = api.create(&PostParams::default(), &cm).await.unwrap();
            want.push((created.metadata.name.unwrap(), created.metadata.resource_version.unwrap()));
        }
        let mut got = Vec::new();
        while got.len() < want.len() {
            match tokio::time::timeout(T, stream.try_next()).await.expect("event in time").unwrap() {
                Some(Event::Apply(cm)) => got.push((cm.metadata.name.unwrap(), cm.metadata.resource_version.unwrap())),
                Some(other) => panic!("unexpected {other:?}"),
                None => panic!("watch ended"),
            }
        }
        assert_eq!(got, want);
    }
}

#[tokio::test]
async fn a_shard_that_is_down_gives_503_for_its_keys_and_for_fan_out_never_a_partial_list() {
    let mut c = cluster(2).await;
    let halves = HashRange::split_even(2);
    let r = &c.router;
    let owned_by = |name: &str| if halves[0].contains(shardplane_keyspace::ObjectKey::new("", "namespaces", "", name).hash()) { 0 } else { 1 };
    let (up, down) = ((0..).map(|i| format!("ns{i}")).find(|n| owned_by(n) == 0).unwrap(), (0..).map(|i| format!("ns{i}")).find(|n| owned_by(n) == 1).unwrap());
    // Shard 1 stops; its address then answers nothing.
    let gone = c.shards.remove(1);
    let gone_url = gone.url.clone();
    drop(gone);
    wait_for(T, || async { client().get(format!("{gone_url}/readyz")).send().await.is_err() }).await;
    let ns = |n: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}});
    assert_eq!(r.post("/api/v1/namespaces", &ns(&up)).await.0, 201);
    let (code, st) = r.post("/api/v1/namespaces", &ns(&down)).await;
    assert_eq!((code, st["kind"].as_str(), st["reason"].as_str()), (503, Some("Status"), Some("ServiceUnavailable")), "{st}");
    assert_eq!(r.get(&format!("/api/v1/namespaces/{down}")).await.0, 503);
    assert_eq!(r.get(&format!("/api/v1/namespaces/{up}")).await.0, 200);
    // A LIST or WATCH needs every shard: 503, not the live half presented as the whole.
    let (code, st) = r.get("/api/v1/namespaces").await;
    assert_eq!((code, st["reason"].as_str()), (503, Some("ServiceUnavailable")));
    let resp = client().get(format!("{}/api/v1/namespaces?watch=1&resourceVersion=1", r.url)).send().await.unwrap();
    assert_eq!(resp.status(), 503);
    let resp = client().get(format!("{}/readyz", r.url)).send().await.unwrap();
    assert_eq!(resp.status(), 500);
}

/// What a shard says about itself: its name, what it caches and its range-map epoch.
async fn described(url: &str) -> Value {
    client().get(format!("{url}/shardplane/v1/shard")).send().await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn the_router_publishes_the_range_map_and_a_stale_router_refreshes_it_when_a_shard_refuses() {
    let c = cluster(2).await;
    let r = &c.router;
    let storage = shardplane_storage::Storage::connect(&[c._etcd.endpoint.clone()]).await.unwrap();
    // The router published the map its shards make: epoch 1, each shard on its half.
    let stored = storage.load_range_map().await.unwrap().expect("a stored map").map;
    assert_eq!(stored.epoch, 1);
    let halves = HashRange::split_even(2);
    for (s, half) in c.shards.iter().zip(&halves) {
        let d = described(&s.url).await;
        let entry = stored.shards.iter().find(|e| e.id == d["id"]).expect("every shard is in the map");
        assert_eq!((entry.url.as_str(), entry.ranges.as_slice()), (s.url.as_str(), std::slice::from_ref(half)));
    }
    wait_for(T, || async { futures::future::join_all(c.shards.iter().map(|s| described(&s.url))).await.iter().all(|d| d["epoch"] == 1) }).await;
    for i in 0..20 {
        assert_eq!(r.post(CM, &configmap(&format!("cm-{i:02}"), json!({}))).await.0, 201);
    }
    let (_, first_page) = r.get(&format!("{CM}?limit=5")).await;
    let old_token = first_page["metadata"]["continue"].as_str().unwrap().to_owned();

    // A third shard caching everything takes every range (epoch 2), behind the router's back.
    let mut cfg = test_config(&c._etcd, RangeSet::full());
    cfg.id = "whole".into();
    let whole = TestShard::start_shard(cfg).await;
    let next = shardplane_coordinator::map_store::publish(&storage, vec![shardplane_storage::range_map::StoredShard { id: "whole".into(), url: whole.url.clone(), ranges: vec![HashRange::FULL], cordoned: false }]).await.unwrap();
    assert_eq!(next.epoch, 2);
    let all = [&c.shards[0], &c.shards[1], &whole];
    wait_for(T, || async { futures::future::join_all(all.iter().map(|s| described(&s.url))).await.iter().all(|d| d["epoch"] == 2) }).await;
    // The old owners refuse: a request routed under epoch 1, and any key, now that they own none.
    let stale = client().get(format!("{}{CM}", c.shards[0].url)).header("shardplane-range-epoch", "1").send().await.unwrap();
    assert_eq!(stale.status(), 421);
    let st: Value = stale.json().await.unwrap();
    assert_eq!((st["reason"].as_str(), st["details"]["causes"][0]["reason"].as_str(), st["details"]["causes"][0]["message"].as_str()), (Some("NotOwned"), Some("RangeEpoch"), Some("2")), "{st}");
    let name = (0..20).map(|i| format!("cm-{i:02}")).find(|n| halves[0].contains(shardplane_keyspace::ObjectKey::new("", "configmaps", "demo", n).hash())).unwrap();
    assert_eq!(c.shards[0].get(&format!("{CM}/{name}")).await.0, 421);

    // The router still routes by epoch 1: its first request is refused, it reads the map again
    // and retries on the new owner. Every verb works and reaches the new owner.
    let (code, got) = r.get(&format!("{CM}/{name}")).await;
    assert_eq!((code, got["metadata"]["name"].as_str()), (200, Some(name.as_str())), "{got}");
    let (code, _) = r.send("PATCH", &format!("{CM}/{name}"), "application/merge-patch+json", r#"{"data":{"moved":"yes"}}"#).await;
    assert_eq!(code, 200);
    assert_eq!(whole.get(&format!("{CM}/{name}")).await.1["data"]["moved"], "yes");
    assert_eq!(r.post(CM, &configmap("cm-20", json!({}))).await.0, 201);
    let (code, list) = r.get(CM).await;
    assert_eq!((code, names(&list).len()), (200, 21));
    // A page token of epoch 1 no longer describes one snapshot: 410 Expired, as upstream for an
    // unusable token. New tokens carry epoch 2.
    let (code, st) = r.get(&format!("{CM}?limit=5&continue={old_token}")).await;
    assert_eq!((code, st["reason"].as_str()), (410, Some("Expired")), "{st}");
    let (_, page) = r.get(&format!("{CM}?limit=5")).await;
    let token = shardplane_apimachinery::continue_token::ContinueToken::decode(page["metadata"]["continue"].as_str().unwrap()).unwrap();
    assert_eq!(token.epoch, Some(2));
}

#[tokio::test]
async fn router_metrics_count_requests_with_upstream_names() {
    let c = cluster(2).await;
    let r = &c.router;
    let series = r#"apiserver_request_total{code="201",component="apiserver",group="",resource="configmaps",scope="namespace",subresource="",verb="POST",version="v1"}"#;
    let value = |text: &str| text.lines().find_map(|l| l.strip_prefix(series)).map_or(0, |v| v.trim().parse::<u64>().unwrap());
    let before = value(&client().get(format!("{}/metrics", r.url)).send().await.unwrap().text().await.unwrap());
    assert_eq!(r.post(CM, &configmap("m1", json!({}))).await.0, 201);
    let text = client().get(format!("{}/metrics", r.url)).send().await.unwrap().text().await.unwrap();
    assert_eq!(value(&text), before + 1, "{text}");
    assert!(text.contains("apiserver_request_duration_seconds_bucket{"));
    // apiserver_registered_watchers counts the router's client watches while they run.
    let gauge = r#"apiserver_registered_watchers{group="",kind="ConfigMap",version="v1"} "#;
    let watchers = || async { client().get(format!("{}/metrics", r.url)).send().await.unwrap().text().await.unwrap().lines().find_map(|l| l.strip_prefix(gauge)).map_or(0, |v| v.trim().parse::<u64>().unwrap()) };
    let w1 = r.watch(&format!("{CM}?watch=1")).await;
    let w2 = r.watch(&format!("{CM}?watch=1&labelSelector=a%3Db")).await;
    assert_eq!(watchers().await, 2);
    drop((w1, w2));
    wait_for(T, || async { watchers().await == 0 }).await;
}

/// `apiserver_registered_watchers` of ConfigMaps on one shard.
async fn shard_watchers(url: &str) -> u64 {
    let text = client().get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines().find_map(|l| l.strip_prefix(r#"apiserver_registered_watchers{group="",kind="ConfigMap",version="v1"} "#)).map_or(0, |v| v.trim().parse().unwrap())
}

/// The (type, name, RV) of the next `n` changes of a watch.
async fn changes(w: &mut WatchReader, n: usize) -> Vec<(String, String, u64)> {
    let mut out = Vec::new();
    while out.len() < n {
        let e = w.next_change(T).await.expect("change");
        out.push((e["type"].as_str().unwrap().to_owned(), e["object"]["metadata"]["name"].as_str().unwrap().to_owned(), rv(&e["object"])));
    }
    out
}

#[tokio::test]
async fn watches_with_the_same_filters_share_one_upstream_and_each_sees_every_change() {
    let c = cluster(2).await;
    let r = &c.router;
    let (_, seed) = r.post(CM, &configmap("seed", json!({"team": "a"}))).await;
    let start = rv(&seed);
    // 20 watches of every ConfigMap and 5 of one label, all from the same RV.
    let mut all = Vec::new();
    for _ in 0..20 {
        all.push(r.watch(&format!("{CM}?watch=1&resourceVersion={start}")).await);
    }
    let mut team_a = Vec::new();
    for _ in 0..5 {
        team_a.push(r.watch(&format!("{CM}?watch=1&resourceVersion={start}&labelSelector=team%3Da")).await);
    }
    // Each shard serves one stream per distinct watch, not one per client.
    for s in &c.shards {
        assert_eq!(shard_watchers(&s.url).await, 2, "{}", s.url);
    }
    // Creates, updates and deletes on both shards; the oracle is each write's own answer: a
    // change's (type, name) and the bounds of its RV (exact for a create or patch, which answer
    // with it; a delete's lies after the object's last write and at or before the list's RV
    // right after it, since member keys in the same store may be written meanwhile).
    let mut want: Vec<(String, String, u64, u64)> = Vec::new();
    let mut want_a = Vec::new();
    for i in 0..30 {
        let name = format!("s{i:02}");
        let team = if i % 3 == 0 { "a" } else { "b" };
        let (code, o) = r.post(CM, &configmap(&name, json!({"team": team}))).await;
        assert_eq!(code, 201);
        let mut last = rv(&o);
        let mut mine = vec![("ADDED".to_owned(), name.clone(), last, last)];
        if i % 5 == 0 {
            let (_, o) = r.send("PATCH", &format!("{CM}/{name}"), "application/merge-patch+json", r#"{"data":{"k":"v"}}"#).await;
            last = rv(&o);
            mine.push(("MODIFIED".to_owned(), name.clone(), last, last));
        }
        if i % 7 == 0 {
            let (code, _) = r.delete(&format!("{CM}/{name}"), None).await;
            assert_eq!(code, 200);
            let (_, list) = r.get(CM).await;
            mine.push(("DELETED".to_owned(), name.clone(), last + 1, rv(&list)));
        }
        if team == "a" {
            want_a.extend(mine.iter().cloned());
        }
        want.extend(mine);
    }
    let check = |got: Vec<(String, String, u64)>, want: &[(String, String, u64, u64)]| {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!(g.0 == w.0 && g.1 == w.1 && (w.2..=w.3).contains(&g.2), "{g:?} is not {w:?} (in {got:?})");
        }
    };
    // Every watcher sees one history, exactly.
    let mut seen: Option<Vec<(String, String, u64)>> = None;
    for w in &mut all {
        let got = changes(w, want.len()).await;
        check(got.clone(), &want);
        assert!(seen.as_ref().is_none_or(|s| *s == got), "watchers disagree: {seen:?} vs {got:?}");
        seen = Some(got);
    }
    for w in &mut team_a {
        check(changes(w, want_a.len()).await, &want_a);
    }
    // A client joining late from the same RV is served from the hub's ring: the same history,
    // and still no new shard stream.
    let mut late = r.watch(&format!("{CM}?watch=1&resourceVersion={start}")).await;
    let late_changes = changes(&mut late, want.len()).await;
    assert_eq!(Some(late_changes), seen);
    for s in &c.shards {
        assert_eq!(shard_watchers(&s.url).await, 2);
    }
    // When every client has gone, the hubs close their shard streams.
    drop((all, team_a, late));
    wait_for(Duration::from_secs(20), || async {
        let mut n = 0;
        for s in &c.shards {
            n += shard_watchers(&s.url).await;
        }
        n == 0
    })
    .await;
}

#[tokio::test]
async fn a_merged_watch_outlives_the_shards_own_watch_timeouts_with_no_gap_or_repeat() {
    let etcd = Etcd::start().await;
    let mut shards = Vec::new();
    for r in HashRange::split_even(2) {
        let mut cfg = test_config(&etcd, RangeSet::from_disjoint(vec![r]).unwrap());
        // Each shard ends a watch without timeoutSeconds after 1–2 s.
        cfg.min_request_timeout = Duration::from_secs(1);
        shards.push(TestShard::start(cfg).await);
    }
    let r = TestShard::start_router(&[etcd.endpoint.clone()], shards.iter().map(|s| s.url.clone()).collect(), Duration::from_millis(500)).await;
    r.namespace("demo").await;
    let (_, first) = r.post(CM, &configmap("first", json!({}))).await;
    let mut w = r.watch(&format!("{CM}?watch=1&resourceVersion={}", rv(&first))).await;
    // Writes spread over 5 s: every shard stream ends at least twice meanwhile.
    let mut want = Vec::new();
    let began = std::time::Instant::now();
    let mut i = 0;
    while began.elapsed() < Duration::from_secs(5) {
        let name = format!("t{i:03}");
        let (code, o) = r.post(CM, &configmap(&name, json!({}))).await;
        assert_eq!(code, 201);
        want.push(("ADDED".to_owned(), name, rv(&o)));
        i += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(changes(&mut w, want.len()).await, want);
}

/// A watch without a resourceVersion over more objects than one page of its initial state
/// (the router reads that state a page at a time, RFC 0003): every object exactly once, in key
/// order, then a change made while the state was being sent, then nothing else.
#[tokio::test]
async fn a_watch_without_a_resource_version_sends_a_state_of_many_pages_whole_then_the_changes() {
    let c = cluster(3).await;
    let r = &c.router;
    r.namespace("bulk").await;
    let mut want: Vec<String> = (0..1_100).map(|i| format!("o{i:05}")).collect();
    use futures::StreamExt;
    let posts = futures::stream::iter(want.clone()).map(|n| async move { r.post("/api/v1/namespaces/bulk/configmaps", &configmap(&n, json!({}))).await.0 }).buffer_unordered(16);
    assert!(posts.collect::<Vec<u16>>().await.iter().all(|c| *c == 201));
    want.sort();
    let mut w = r.watch("/api/v1/namespaces/bulk/configmaps?watch=1").await;
    let (_, during) = r.post("/api/v1/namespaces/bulk/configmaps", &configmap("during", json!({}))).await;
    let mut initial = Vec::new();
    while initial.len() < want.len() {
        let e = w.next_change(T).await.unwrap_or_else(|| panic!("the watch ended after {} initial events", initial.len()));
        assert_eq!(e["type"], "ADDED", "{e}");
        initial.push(e["object"]["metadata"]["name"].as_str().unwrap().to_owned());
    }
    assert_eq!(initial, want, "the initial state, each object once, in key order");
    // The write made once the watch had answered (its state's revision was fixed by then):
    // after the state, at its own resourceVersion.
    let e = w.next_change(T).await.expect("the change made meanwhile");
    assert_eq!((e["type"].as_str(), e["object"]["metadata"]["name"].as_str(), rv(&e["object"])), (Some("ADDED"), Some("during"), rv(&during)));
}

/// Paths under /apis/ that nothing serves are answered 404 by the router from its catalog
/// without reading the store (the catalog stays confirmed by etcd's progress marks), while a CRD
/// created through the router is served by it from the very next request.
#[tokio::test]
async fn unknown_api_paths_cost_the_store_nothing_and_a_crd_written_through_the_router_is_served_at_once() {
    if embedded_store() {
        // The count read here is etcd's own metric, which the embedded store does not keep.
        return;
    }
    let c = cluster(2).await;
    let r = &c.router;
    let paths = ["/apis/nothing.example.com/v1/things", "/apis/nothing.example.com/v1", "/apis/nothing.example.com", "/apis/nothing.example.com/v1/namespaces/demo/things/x"];
    for p in paths {
        let (code, body) = r.get(p).await;
        assert_eq!((code, body["reason"].as_str()), (404, Some("NotFound")), "{p}: {body}");
    }
    let before = etcd_range_calls(&c._etcd.endpoint).await;
    for i in 0..400 {
        assert_eq!(r.get(paths[i % paths.len()]).await.0, 404);
    }
    let reads = etcd_range_calls(&c._etcd.endpoint).await - before;
    assert!(reads < 40.0, "400 requests for unknown paths cost etcd {reads} Range calls");
    // A CRD created through the router: its resources are served by the next request.
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.nothing.example.com"},
        "spec": {"group": "nothing.example.com", "scope": "Namespaced", "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    let (code, body) = r.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &crd).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = r.post("/apis/nothing.example.com/v1/namespaces/demo/gadgets", &json!({"apiVersion": "nothing.example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}})).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(r.get("/apis/nothing.example.com/v1").await.0, 200);
}
