//! The coordinator under fire (issue #6, RFC 0006), with real processes on real etcd: three shard
//! processes and a router process; six writers as fast as they can go (about 270 writes/s on a
//! quiet 2-core machine; at least 1,000 acknowledged) and 20 watchers through the router;
//! meanwhile a fourth shard is added, a range is moved, a shard is drained, and another
//! is killed with SIGKILL in the middle of a move. At the end every watcher's stream must equal
//! etcd's own history of what it watches (no loss, no duplicate, strictly increasing RV), every
//! acknowledged write must be in that history, and a LIST through the router must equal etcd.

mod common;

use common::KillOnDrop;
use shardplane_testkit::*;
use serde_json::Value;
use shardplane_coordinator::rebalance::{self, Config};
use shardplane_keyspace::etcd_layout::{parse_object_key, prefix_end, resource_prefix};
use shardplane_keyspace::HashRange;
use shardplane_storage::Storage;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Writer tasks, and the rate each aims for.
const WRITERS: usize = 6;
const WRITES_PER_SECOND_EACH: u64 = 45;
/// Seconds a shard's membership lease lasts: a killed shard is taken for dead this long after.
const MEMBER_TTL: &str = "3";

/// Starts `shard-router` with `args`; the process (killed when the test ends) and its URL.
fn spawn(args: &[&str]) -> (KillOnDrop, String) {
    let started = common::spawn(args);
    let url = started.url();
    (started.process, url)
}

fn spawn_shard(etcd: &str, id: &str, range: Option<HashRange>) -> (KillOnDrop, String) {
    let range = range.map(|r| r.to_string());
    let mut args = vec!["shard", "--insecure-plain-http", "--etcd-endpoints", etcd, "--listen", "127.0.0.1:0", "--id", id, "--bookmark-interval", "1", "--member-ttl-seconds", MEMBER_TTL];
    match &range {
        Some(r) => args.extend(["--range", r.as_str()]),
        None => args.push("--empty"),
    }
    spawn(&args)
}

/// One change as a watcher shows it: (type, name, RV).
type Change = (String, String, u64);

/// What one watcher asks for and what it saw.
struct Watched {
    path: String,
    /// Only objects with this `writer` label, when set.
    writer: Option<String>,
    changes: Vec<Change>,
    /// The newest RV it has seen (event or bookmark).
    rv: u64,
    resumes: usize,
    failures: Vec<String>,
}

/// Watches `path` from `rv` as client-go's reflector does: on a clean end it resumes from the
/// newest RV it saw, and a refused request is retried. A 410 or an event out of order is
/// recorded as a failure (the test then fails).
async fn watcher(router: String, w: Arc<Mutex<Watched>>, stop: CancellationToken) {
    let path = w.lock().unwrap().path.clone();
    while !stop.is_cancelled() {
        let rv = w.lock().unwrap().rv;
        let sep = if path.contains('?') { '&' } else { '?' };
        let resp = client().get(format!("{router}{path}{sep}watch=1&allowWatchBookmarks=true&resourceVersion={rv}")).send().await;
        let resp = match resp {
            Ok(r) if r.status() == 200 => r,
            // A shard is down and its ranges not yet reassigned: try again shortly.
            _ => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let mut reader = WatchReader::from_response(resp);
        while let Some(e) = reader.next_or_stop(&stop).await {
            let erv = event_rv(&e);
            let mut w = w.lock().unwrap();
            match e["type"].as_str().unwrap_or("") {
                "BOOKMARK" => w.rv = w.rv.max(erv),
                "ERROR" => {
                    w.failures.push(format!("ERROR event: {e}"));
                    return;
                }
                kind => {
                    if erv <= w.rv {
                        let failure = format!("{kind} at RV {erv} after RV {}", w.rv);
                        w.failures.push(failure);
                    }
                    w.rv = erv;
                    let name = e["object"]["metadata"]["name"].as_str().unwrap_or("").to_owned();
                    w.changes.push((kind.to_owned(), name, erv));
                }
            }
        }
        if stop.is_cancelled() {
            return;
        }
        w.lock().unwrap().resumes += 1;
    }
}

/// What the writers had acknowledged: (type, name, RV) of each write that succeeded.
type Acked = Arc<Mutex<Vec<Change>>>;

/// Creates, updates and deletes ConfigMaps labelled `writer=w{t}` at a steady pace until
/// `stop`; failed writes (a shard down) are not acknowledged and not retried.
async fn writer(router: String, t: usize, acked: Acked, attempts: Arc<std::sync::atomic::AtomicU64>, stop: CancellationToken) {
    let r = TestShard::attach(router, "127.0.0.1:1".parse().unwrap());
    let mut live: Vec<String> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / WRITES_PER_SECOND_EACH));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let labels = serde_json::json!({ "writer": format!("w{t}") });
    for i in 0.. {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return,
        }
        attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (kind, name, (code, body)) = match i % 10 {
            0..5 => {
                let name = format!("w{t}-{i}");
                let res = r.post("/api/v1/namespaces/chaos/configmaps", &configmap(&name, labels.clone())).await;
                ("ADDED", name, res)
            }
            5..8 if !live.is_empty() => {
                let name = live[i % live.len()].clone();
                let mut body = configmap(&name, labels.clone());
                body["data"]["k"] = Value::String(format!("v{i}"));
                let res = r.put(&format!("/api/v1/namespaces/chaos/configmaps/{name}"), &body).await;
                ("MODIFIED", name, res)
            }
            _ if !live.is_empty() => {
                let name = live.swap_remove(i % live.len());
                let res = r.delete(&format!("/api/v1/namespaces/chaos/configmaps/{name}"), None).await;
                ("DELETED", name, res)
            }
            _ => continue,
        };
        if code == 200 || code == 201 {
            if kind == "ADDED" {
                live.push(name.clone());
            }
            // A delete answers with the object as it was last stored; its RV is not the
            // delete's own, which only the history shows.
            let rv = if kind == "DELETED" { 0 } else { body["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap() };
            acked.lock().unwrap().push((kind.to_owned(), name, rv));
        }
    }
}

/// etcd's own history of the ConfigMaps after `after` up to `to`: (type, namespace, name, RV,
/// writer label).
async fn etcd_history(storage: &Storage, after: u64, to: u64) -> Vec<(String, String, String, u64, String)> {
    let writer_of = |o: &Value| o["metadata"]["labels"]["writer"].as_str().unwrap_or_default().to_owned();
    shardplane_testkit::etcd_history(storage, "", "configmaps", after, to).await.into_iter().map(|e| (e.kind.to_owned(), e.namespace, e.name, e.rv, writer_of(&e.object))).collect()
}

/// Waits until the map has no move in flight and `done` holds of it.
async fn settle(storage: &Storage, what: &str, done: impl Fn(&shardplane_storage::range_map::StoredRangeMap) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let map = storage.load_range_map().await.unwrap().unwrap().map;
        if map.moves.is_empty() && done(&map) {
            eprintln!("chaos: {what} settled at epoch {}", map.epoch);
            return;
        }
        assert!(Instant::now() < deadline, "{what} did not settle: {map:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ranges_of(map: &shardplane_storage::range_map::StoredRangeMap, id: &str) -> Vec<HashRange> {
    map.shards.iter().find(|s| s.id == id).map(|s| s.ranges.clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_and_writes_stay_whole_while_shards_join_move_drain_and_die() {
    let etcd = Etcd::start().await;
    let e = etcd.endpoint.as_str();
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let thirds = HashRange::split_even(3);
    let mut shards: BTreeMap<&str, (KillOnDrop, String)> = BTreeMap::new();
    for (i, id) in ["s0", "s1", "s2"].into_iter().enumerate() {
        shards.insert(id, spawn_shard(e, id, Some(thirds[i])));
    }
    let urls: Vec<String> = shards.values().map(|(_, u)| u.clone()).collect();
    let kubeconfig = std::env::temp_dir().join(format!("shardplane-chaos-{}", uuid::Uuid::new_v4()));
    let (_router, router) = spawn(&["--etcd-endpoints", e, "--shard-urls", &urls.join(","), "--listen", "127.0.0.1:0", "--bookmark-interval", "1", "--kubeconfig", kubeconfig.to_str().unwrap(), "--insecure-plain-http"]);
    let r = TestShard::attach(router.clone(), "127.0.0.1:1".parse().unwrap());
    wait_for(Duration::from_secs(30), || async { r.get("/api/v1/namespaces/default").await.0 == 200 }).await;
    r.namespace("chaos").await;
    let (_, list) = r.get("/api/v1/namespaces/chaos/configmaps").await;
    let start: u64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();

    // 20 watchers: the namespace (sharing one merged upstream), each writer's label, every
    // namespace, and a field selector.
    let mut paths: Vec<(String, Option<String>)> = (0..8).map(|_| ("/api/v1/namespaces/chaos/configmaps".to_owned(), None)).collect();
    paths.extend((0..WRITERS).map(|t| (format!("/api/v1/namespaces/chaos/configmaps?labelSelector=writer%3Dw{t}"), Some(format!("w{t}")))));
    paths.extend((0..4).map(|_| ("/api/v1/configmaps".to_owned(), None)));
    paths.extend((0..2).map(|_| ("/api/v1/configmaps?fieldSelector=metadata.namespace%3Dchaos".to_owned(), None)));
    assert_eq!(paths.len(), 20);
    let stop_watching = CancellationToken::new();
    let watched: Vec<Arc<Mutex<Watched>>> = paths.into_iter().map(|(path, writer)| Arc::new(Mutex::new(Watched { path, writer, changes: vec![], rv: start, resumes: 0, failures: vec![] }))).collect();
    let watch_tasks: Vec<_> = watched.iter().map(|w| tokio::spawn(watcher(router.clone(), w.clone(), stop_watching.clone()))).collect();

    let stop_writing = CancellationToken::new();
    let acked: Acked = Default::default();
    let attempts = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let began = Instant::now();
    let writers: Vec<_> = (0..WRITERS).map(|t| tokio::spawn(writer(router.clone(), t, acked.clone(), attempts.clone(), stop_writing.clone()))).collect();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let cfg = Config::default();
    // 1. A fourth shard joins and takes ranges from the most loaded.
    shards.insert("s3", spawn_shard(e, "s3", None));
    wait_for(Duration::from_secs(20), || async { storage.members().await.unwrap().shards.iter().any(|m| m.id == "s3") }).await;
    shardplane_ctl::edit_map(&storage, |m, members| rebalance::request_add(m, members, "s3")).await.unwrap();
    settle(&storage, "add s3", |m| !ranges_of(m, "s3").is_empty()).await;

    // 2. A range moves between two of the first shards.
    let range = ranges_of(&storage.load_range_map().await.unwrap().unwrap().map, "s0")[0];
    shardplane_ctl::edit_map(&storage, |m, members| rebalance::request_move(m, members, range, "s1", &cfg)).await.unwrap();
    settle(&storage, "move s0 → s1", |m| ranges_of(m, "s1").contains(&range)).await;

    // 3. A shard is drained.
    shardplane_ctl::edit_map(&storage, |m, _| rebalance::request_drain(m, "s1")).await.unwrap();
    settle(&storage, "drain s1", |m| ranges_of(m, "s1").is_empty()).await;

    // Joining, moving and draining never ended a watch: the router switched them under way.
    for w in &watched {
        let w = w.lock().unwrap();
        assert_eq!((w.resumes, &w.failures), (0, &vec![]), "{} ended during a planned move", w.path);
    }

    // 4. A move starts and its source is killed with SIGKILL while the target loads; the target
    //    still takes the range, and the killed shard's other ranges go to live shards.
    let map = storage.load_range_map().await.unwrap().unwrap().map;
    let range = ranges_of(&map, "s2")[0];
    shardplane_ctl::edit_map(&storage, |m, members| rebalance::request_move(m, members, range, "s3", &cfg)).await.unwrap();
    let (mut killed, _) = shards.remove("s2").unwrap();
    killed.0.kill().unwrap();
    let _ = killed.0.wait();
    let in_flight = storage.load_range_map().await.unwrap().unwrap().map.moves;
    assert!(in_flight.iter().any(|m| m.range == range && m.from == "s2"), "the move had finished before the kill: {in_flight:?}");
    settle(&storage, "s2 killed mid-move", |m| ranges_of(m, "s2").is_empty() && ranges_of(m, "s3").contains(&range)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    stop_writing.cancel();
    for w in writers {
        w.await.unwrap();
    }
    let elapsed = began.elapsed().as_secs_f64();
    let rate = attempts.load(std::sync::atomic::Ordering::Relaxed) as f64 / elapsed;
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    eprintln!("chaos: {} writes attempted in {elapsed:.1} s ({rate:.0}/s), {} acknowledged", attempts.load(std::sync::atomic::Ordering::Relaxed), acked.len());
    // Enough writes to overlap every join, move, drain and the kill many times over; a count,
    // not a rate, so that a loaded machine slows the test down without failing it.
    assert!(acked.len() >= 1000, "only {} writes were acknowledged ({rate:.0}/s)", acked.len());

    // Every watcher catches up to etcd's revision after the last write.
    let end = storage.current_revision().await.unwrap();
    wait_for(Duration::from_secs(60), || async { watched.iter().all(|w| w.lock().unwrap().rv >= end || !w.lock().unwrap().failures.is_empty()) }).await;
    stop_watching.cancel();
    for t in watch_tasks {
        t.await.unwrap();
    }

    // Each stream equals etcd's history of what it watches.
    let history = etcd_history(&storage, start, end).await;
    for w in &watched {
        let w = w.lock().unwrap();
        assert!(w.failures.is_empty(), "{}: {:?}", w.path, w.failures);
        let want: Vec<Change> = history.iter().filter(|(_, ns, _, _, writer)| (ns == "chaos" || !w.path.contains("chaos")) && w.writer.as_ref().is_none_or(|x| x == writer)).map(|(kind, _, name, rv, _)| (kind.clone(), name.clone(), *rv)).collect();
        assert!(!want.is_empty());
        if w.changes != want {
            let first = w.changes.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(w.changes.len().min(want.len()));
            panic!("{}: the stream differs from etcd's history at change {first} of {} (saw {}): saw {:?}, etcd has {:?}", w.path, want.len(), w.changes.len(), w.changes.get(first), want.get(first));
        }
        eprintln!("chaos: {} saw all {} changes, resumed {} times", w.path, want.len(), w.resumes);
    }
    // Every acknowledged write is in the history.
    for (kind, name, rv) in &acked {
        assert!(history.iter().any(|(k, ns, n, r, _)| k == kind && ns == "chaos" && n == name && (*rv == 0 || r == rv)), "acknowledged {kind} of {name} at {rv} is not in etcd's history");
    }
    // A LIST through the router equals etcd.
    let (_, list) = r.get("/api/v1/namespaces/chaos/configmaps").await;
    let mut listed: Vec<(String, String)> = list["items"].as_array().unwrap().iter().map(|i| (i["metadata"]["name"].as_str().unwrap().to_owned(), i["metadata"]["resourceVersion"].as_str().unwrap().to_owned())).collect();
    listed.sort();
    let prefix = resource_prefix("", "configmaps");
    let (kvs, _) = storage.list_range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), 0).await.unwrap();
    let mut stored: Vec<(String, String)> = kvs.iter().filter_map(|kv| parse_object_key("", "configmaps", &kv.key).filter(|(_, ns, _)| *ns == "chaos").map(|(_, _, name)| (name.to_owned(), kv.mod_revision.to_string()))).collect();
    stored.sort();
    assert_eq!(listed, stored);
    let _ = std::fs::remove_file(&kubeconfig);
}
