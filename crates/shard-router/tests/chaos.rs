//! The coordinator under fire (issue #6, RFC 0006), with real processes on real etcd: three shard
//! processes and a router process; six writers as fast as they can go (about 270 writes/s on a
//! quiet 2-core machine; at least 1,000 acknowledged) and 20 watchers through the router;
//! meanwhile a fourth shard is added, a range is moved, a shard is drained, and another
//! is killed with SIGKILL in the middle of a move. At the end every watcher's stream must equal
//! etcd's own history of what it watches (no loss, no duplicate, strictly increasing RV), every
//! acknowledged write must be in that history, and a LIST through the router must equal etcd.

mod common;

use common::churn::{self, Watched, Writes};
use common::KillOnDrop;
use shardplane_coordinator::rebalance::{self, Config};
use shardplane_keyspace::HashRange;
use shardplane_storage::Storage;
use shardplane_testkit::*;
use std::collections::BTreeMap;
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
    let mut paths: Vec<(String, Option<String>, Option<&str>)> = (0..8).map(|_| ("/api/v1/namespaces/chaos/configmaps".to_owned(), None, Some("chaos"))).collect();
    paths.extend((0..WRITERS).map(|t| (format!("/api/v1/namespaces/chaos/configmaps?labelSelector=writer%3Dw{t}"), Some(format!("w{t}")), Some("chaos"))));
    paths.extend((0..4).map(|_| ("/api/v1/configmaps".to_owned(), None, None)));
    paths.extend((0..2).map(|_| ("/api/v1/configmaps?fieldSelector=metadata.namespace%3Dchaos".to_owned(), None, Some("chaos"))));
    assert_eq!(paths.len(), 20);
    let stop_watching = CancellationToken::new();
    let watched: Vec<_> = paths.into_iter().map(|(path, writer, namespace)| Watched::new(path, writer, namespace, start)).collect();
    let watch_tasks: Vec<_> = watched.iter().map(|w| tokio::spawn(churn::watcher(vec![router.clone()], w.clone(), stop_watching.clone()))).collect();

    let stop_writing = CancellationToken::new();
    let writes = Writes::default();
    let began = Instant::now();
    let writers: Vec<_> = (0..WRITERS).map(|t| tokio::spawn(churn::writer(router.clone(), "chaos".into(), t, WRITES_PER_SECOND_EACH, writes.clone(), stop_writing.clone()))).collect();
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
    let rate = writes.attempted() as f64 / elapsed;
    let acked = writes.acked();
    eprintln!("chaos: {} writes attempted in {elapsed:.1} s ({rate:.0}/s), {} acknowledged", writes.attempted(), acked.len());
    // Enough writes to overlap every join, move, drain and the kill many times over; a count,
    // not a rate, so that a loaded machine slows the test down without failing it.
    assert!(acked.len() >= 1000, "only {} writes were acknowledged ({rate:.0}/s)", acked.len());

    // Every watcher catches up; each stream equals etcd's history of what it watches, every
    // acknowledged write is in it, and a LIST through the router equals etcd.
    churn::check_against_etcd("chaos", &storage, &r, "chaos", start, &watched, watch_tasks, stop_watching, &acked, Duration::from_secs(60)).await;
    let _ = std::fs::remove_file(&kubeconfig);
}
