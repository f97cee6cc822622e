//! `shardctl` and the coordinator against real etcd, real shards and a real router (in-process,
//! as the shard suite runs them): membership on leases, leader election, status, split and
//! merge, clear refusals, and a dead shard's ranges reassigned, then given back when it returns.


use shardplane_testkit::*;
use serde_json::Value;
use shardplane_keyspace::{HashRange, RangeSet};
use shardplane_storage::members::{ShardMember, SHARDS_PREFIX};
use shardplane_storage::Storage;
use std::time::Duration;

/// Runs the shardctl binary on `etcd`: (exit code, stdout, stderr).
fn shardctl(etcd: &Etcd, args: &[&str]) -> (i32, String, String) {
    shardctl_at(&etcd.endpoint, args)
}

fn shardctl_at(endpoint: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shardctl")).args(["--etcd-endpoints", endpoint]).args(args).output().expect("shardctl runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn status(etcd: &Etcd) -> Value {
    let (code, out, err) = shardctl(etcd, &["status", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("status is JSON")
}

fn shard(etcd: &Etcd, id: &str, range: HashRange) -> shardplane_shard::ShardConfig {
    shardplane_shard::ShardConfig { id: id.into(), member_ttl: Duration::from_secs(2), ..test_config(etcd, RangeSet::from_disjoint(vec![range]).unwrap()) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shardctl_shows_members_and_the_coordinator_reassigns_a_dead_shards_ranges() {
    let etcd = Etcd::start().await;
    let [low, high] = [HashRange::split_even(2)[0], HashRange::split_even(2)[1]];
    let s0 = TestShard::start_shard(shard(&etcd, "s0", low)).await;
    let s1 = TestShard::start_shard(shard(&etcd, "s1", high)).await;
    let router = TestShard::start_router(&[etcd.endpoint.clone()], vec![s0.url.clone(), s1.url.clone()], Duration::from_secs(1)).await;

    // Both shards register, the router's coordinator leads, and status shows it all.
    wait_for(Duration::from_secs(20), || async {
        let s = status(&etcd);
        s["leader"].as_str().is_some_and(|l| l.starts_with("router-")) && s["shards"].as_array().unwrap().iter().all(|s| s["health"] == "live" && s["objects"].as_u64().unwrap_or(0) > 0) && s["routers"].as_array().unwrap().len() == 1
    })
    .await;
    let s = status(&etcd);
    assert_eq!(s["epoch"], 1);
    assert_eq!(s["shards"][0]["id"], "s0");
    assert_eq!(s["shards"][0]["ranges"], serde_json::json!([low.to_string()]));
    assert_eq!(s["shards"][1]["url"], s1.url.as_str());
    let (code, table, _) = shardctl(&etcd, &["status"]);
    assert_eq!(code, 0);
    assert!(table.starts_with("EPOCH 1") && table.contains("s1      live ") && table.contains(&high.to_string()), "{table}");

    // Split and merge change no owner: the epoch stays, and the router still serves.
    let mid = format!("0x{:016x}", 1u64 << 62);
    let (code, out, err) = shardctl(&etcd, &["split", &low.to_string(), "--at", &mid]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(epoch 1)"), "{out}");
    assert_eq!(status(&etcd)["shards"][0]["ranges"].as_array().unwrap().len(), 2);
    let (a, b) = (format!("0x0000000000000000-{mid}"), format!("{mid}-0x8000000000000000"));
    let (code, _, err) = shardctl(&etcd, &["merge", &b, &a]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(status(&etcd)["shards"][0]["ranges"], serde_json::json!([low.to_string()]));
    assert_eq!(router.get("/api/v1/namespaces").await.0, 200);

    // Refusals say what is wrong, with exit code 1.
    for (args, says) in [
        (["move", low.to_string().as_str(), "--to", "nobody"].iter().map(|s| s.to_string()).collect::<Vec<_>>(), "unknown shard \"nobody\""),
        (vec!["move".into(), low.to_string(), "--to".into(), "s0".into()], "already belongs to shard \"s0\""),
        (vec!["split".into(), low.to_string(), "--at".into(), "0x0000000000000000".into()], "strictly inside"),
        (vec!["merge".into(), low.to_string(), high.to_string()], "cannot merge"),
        (vec!["drain".into(), "nobody".into()], "unknown shard"),
        (vec!["split".into(), "bogus".into(), "--at".into(), mid.clone()], "invalid hash range"),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, err) = shardctl(&etcd, &args);
        assert_eq!(code, 1, "shardctl {args:?}");
        assert!(err.starts_with("shardctl: error: ") && err.contains(says), "shardctl {args:?}: {err}");
    }
    // The dry run follows the planner's rule on the loads status reports (cache bytes; the
    // objects created at start decide them here): a move only past 1.2× the mean, from the
    // most loaded shard.
    let s = status(&etcd);
    let loads: Vec<(String, f64)> = s["shards"].as_array().unwrap().iter().map(|x| (x["id"].as_str().unwrap().to_owned(), x["cacheBytes"].as_f64().unwrap())).collect();
    let mean = loads.iter().map(|l| l.1).sum::<f64>() / loads.len() as f64;
    let heaviest = loads.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap().clone();
    let (code, out, _) = shardctl(&etcd, &["rebalance", "--dry-run"]);
    assert_eq!(code, 0);
    if heaviest.1 > 1.2 * mean {
        assert!(out.starts_with("would move ") && out.contains(&format!(" from {} to ", heaviest.0)), "{loads:?}: {out}");
    } else {
        assert_eq!(out, "balanced: no move would start\n", "{loads:?}");
    }

    // s1 stops: its member key goes, and the coordinator asks s0 to load s1's range.
    drop(s1);
    wait_for(Duration::from_secs(20), || async {
        let s = status(&etcd);
        s["shards"][1]["health"] == "dead" && s["moves"] == serde_json::json!([{"range": high.to_string(), "from": "s1", "to": "s0", "phase": "loading"}])
    })
    .await;
    // s1 comes back (same id, same range): the reassignment is no longer needed and is cancelled;
    // the owner never changed, so neither did the epoch.
    let s1 = TestShard::start_shard(shard(&etcd, "s1", high)).await;
    wait_for(Duration::from_secs(20), || async {
        let s = status(&etcd);
        s["shards"][1]["health"] == "live" && s["moves"] == serde_json::json!([])
    })
    .await;
    assert_eq!(status(&etcd)["epoch"], 1);
    assert_eq!(status(&etcd)["shards"][1]["url"], s1.url.as_str());
    drop(router);
}

/// A member that stops renewing its lease (as a killed process does) disappears within the TTL.
#[tokio::test]
async fn a_member_that_stops_renewing_disappears_within_its_ttl() {
    let etcd = Etcd::start().await;
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let member = ShardMember { id: "gone".into(), url: "http://127.0.0.1:1".into(), capacity_bytes: 0, loaded: vec![], load: Default::default() };
    let (_tx, rx) = tokio::sync::watch::channel(serde_json::to_vec(&member).unwrap());
    let task = storage.register(format!("{SHARDS_PREFIX}gone"), rx, Duration::from_secs(2), tokio_util::sync::CancellationToken::new());
    wait_for(Duration::from_secs(10), || async { storage.members().await.unwrap().shards == vec![member.clone()] }).await;
    // Renewed: still there after more than a TTL.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(storage.members().await.unwrap().shards.len(), 1);
    // Killed (no revoke): gone once the lease runs out.
    task.abort();
    let stopped = std::time::Instant::now();
    wait_for(Duration::from_secs(10), || async { storage.members().await.unwrap().shards.is_empty() }).await;
    assert!(stopped.elapsed() <= Duration::from_secs(4), "took {:?}", stopped.elapsed());
}

/// What a resuming watcher saw: (type, name, rv) of each change, whether it ever got 410, and
/// how many times its watch ended and was resumed.
#[derive(Default)]
struct Seen {
    changes: Vec<(String, String, u64)>,
    expired: bool,
    resumes: usize,
}

/// Watches ConfigMaps in `demo` through `router` from `rv` as client-go does: on a clean end it
/// resumes from the last RV it saw (event or bookmark); on 410 it relists. Until `stop`.
async fn resuming_watcher(router: String, mut rv: u64, seen: std::sync::Arc<std::sync::Mutex<Seen>>, stop: tokio_util::sync::CancellationToken) {
    while !stop.is_cancelled() {
        let resp = client().get(format!("{router}/api/v1/namespaces/demo/configmaps?watch=1&allowWatchBookmarks=true&resourceVersion={rv}")).send().await.unwrap();
        let mut reader = WatchReader::from_response(resp);
        while let Some(e) = reader.next_or_stop(&stop).await {
            let erv = event_rv(&e);
            match e["type"].as_str().unwrap() {
                "BOOKMARK" => rv = rv.max(erv),
                "ERROR" => {
                    assert_eq!(e["object"]["code"], 410, "{e}");
                    let (_, list) = TestShard::attach(router.clone(), "127.0.0.1:1".parse().unwrap()).get("/api/v1/namespaces/demo/configmaps").await;
                    rv = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
                    seen.lock().unwrap().expired = true;
                    break;
                }
                kind => {
                    assert!(erv > rv, "{kind} at RV {erv} after RV {rv}: out of order or repeated");
                    rv = erv;
                    seen.lock().unwrap().changes.push((kind.to_owned(), e["object"]["metadata"]["name"].as_str().unwrap().to_owned(), erv));
                }
            }
        }
        if stop.is_cancelled() {
            return;
        }
        seen.lock().unwrap().resumes += 1;
    }
}

/// A live move (RFC 0006): a new shard takes a range while writes and a watch go on through the
/// router, the old owner lets it go, and a drained shard empties; LIST, GET and create stay
/// whole throughout, and the watch sees every create once, in order, without ending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_moves_to_a_new_shard_and_a_drained_shard_empties_while_the_router_serves() {
    live_moves(None).await;
}

/// The same moves with ConfigMaps on an etcd of their own (the storage contract, RFC 0008): their
/// RVs are that etcd's, so the router switches the watch at that etcd's revision, not at the
/// main store's cut-over, and still without a gap, a repeat or an end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_moves_while_a_resource_on_its_own_etcd_is_watched() {
    let own = Etcd::start().await;
    let contract = shardplane_storage::StorageContract::parse(&serde_json::json!({"resources": [{"resource": "configmaps", "endpoints": [own.endpoint]}]}).to_string()).unwrap();
    live_moves(Some(contract)).await;
}

async fn live_moves(contract: Option<shardplane_storage::StorageContract>) {
    let etcd = Etcd::start().await;
    if contract.is_some() {
        // The main store runs far ahead of the resource's own, so a switch waiting for the
        // main store's cut-over revision in the resource's revisions would never come (the
        // watch would end, and the test says so).
        let main = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
        for i in 0..3000 {
            main.put(format!("/elsewhere/{i}").as_bytes(), vec![]).await.unwrap();
        }
    }
    let [low, high] = [HashRange::split_even(2)[0], HashRange::split_even(2)[1]];
    let contract = contract.unwrap_or_default();
    let shard = |etcd: &Etcd, id: &str, range: HashRange| shardplane_shard::ShardConfig { storage_contract: contract.clone(), ..shard(etcd, id, range) };
    let s0 = TestShard::start_shard(shard(&etcd, "s0", low)).await;
    let s1 = TestShard::start_shard(shard(&etcd, "s1", high)).await;
    let router = TestShard::start_router_with(&[etcd.endpoint.clone()], vec![s0.url.clone(), s1.url.clone()], Duration::from_secs(1), contract.clone()).await;
    router.namespace("demo").await;
    for i in 0..60 {
        assert_eq!(router.post("/api/v1/namespaces/demo/configmaps", &configmap(&format!("before-{i}"), serde_json::json!({}))).await.0, 201);
    }
    // A third shard with no ranges joins.
    let s2 = TestShard::start_shard(shardplane_shard::ShardConfig { ranges: RangeSet::default(), ..shard(&etcd, "s2", high) }).await;
    wait_for(Duration::from_secs(20), || async { status(&etcd)["shards"].as_array().unwrap().iter().any(|s| s["id"] == "s2" && s["health"] == "live") }).await;

    // A watcher and a writer run through the router for the whole test.
    let (_, list) = router.get("/api/v1/namespaces/demo/configmaps").await;
    let start: u64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Seen::default()));
    let stop = tokio_util::sync::CancellationToken::new();
    let watcher = tokio::spawn(resuming_watcher(router.url.clone(), start, seen.clone(), stop.clone()));
    let writing = tokio_util::sync::CancellationToken::new();
    let writer = {
        let (url, writing) = (router.url.clone(), writing.clone());
        tokio::spawn(async move {
            let r = TestShard::attach(url, "127.0.0.1:1".parse().unwrap());
            let mut n = 0;
            while !writing.is_cancelled() {
                let (code, body) = r.post("/api/v1/namespaces/demo/configmaps", &configmap(&format!("during-{n}"), serde_json::json!({}))).await;
                assert_eq!(code, 201, "create during the move: {body}");
                n += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            n
        })
    };

    // Move the upper half to s2 and wait for it to finish.
    // shardctl waits for the move; it blocks, so it runs off the runtime's threads.
    let (endpoint, range) = (etcd.endpoint.clone(), high.to_string());
    let (code, out, err) = tokio::task::spawn_blocking(move || shardctl_at(&endpoint, &["move", &range, "--to", "s2", "--wait", "--timeout", "60"])).await.unwrap();
    assert_eq!(code, 0, "{out}{err}");
    let s = status(&etcd);
    assert_eq!(s["epoch"], 2, "{s}");
    assert_eq!(s["moves"], serde_json::json!([]));
    let owner = |s: &Value, id: &str| s["shards"].as_array().unwrap().iter().find(|x| x["id"] == id).map(|x| x["ranges"].clone());
    assert_eq!(owner(&s, "s2"), Some(serde_json::json!([high.to_string()])));
    // s1 lets go of what it no longer owns.
    wait_for(Duration::from_secs(20), || async { owner(&status(&etcd), "s1").is_none_or(|r| r == serde_json::json!([])) && status(&etcd)["shards"].as_array().unwrap().iter().all(|x| x["id"] != "s1" || x["objects"] == 0) }).await;

    // Drain s0: its half goes to the least loaded shard (s1, empty).
    let (code, _, err) = shardctl(&etcd, &["drain", "s0"]);
    assert_eq!(code, 0, "{err}");
    wait_for(Duration::from_secs(60), || async {
        let s = status(&etcd);
        s["moves"] == serde_json::json!([]) && owner(&s, "s0").is_none_or(|r| r == serde_json::json!([]))
    })
    .await;
    assert_eq!(status(&etcd)["epoch"], 3);
    writing.cancel();
    let during = writer.await.unwrap();
    assert!(during > 0);

    // Everything is there, through the router, on its new owners.
    let (_, list) = router.get("/api/v1/namespaces/demo/configmaps").await;
    let mut names: Vec<String> = list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect();
    names.sort();
    let mut want: Vec<String> = (0..60).map(|i| format!("before-{i}")).chain((0..during).map(|i| format!("during-{i}"))).collect();
    want.sort();
    assert_eq!(names, want);
    for name in ["before-0", "before-59", "during-0"] {
        assert_eq!(router.get(&format!("/api/v1/namespaces/demo/configmaps/{name}")).await.0, 200, "{name}");
    }
    assert_eq!(router.post("/api/v1/namespaces/demo/configmaps", &configmap("after", serde_json::json!({}))).await.0, 201);

    // The watch saw each create exactly once, in order, across both epoch changes, without ever
    // ending: the router switched it to the new owners under it.
    wait_for(Duration::from_secs(30), || async { seen.lock().unwrap().changes.iter().any(|c| c.1 == "after") }).await;
    stop.cancel();
    let _ = watcher.await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.resumes, 0, "the watch ended during the moves");
    assert!(!seen.expired, "the watch got 410 during the moves");
    let mut added: Vec<&str> = seen.changes.iter().filter(|c| c.0 == "ADDED").map(|c| c.1.as_str()).collect();
    let total = added.len();
    added.sort();
    added.dedup();
    assert_eq!(added.len(), total, "an event was delivered twice");
    let wanted: Vec<String> = (0..during).map(|i| format!("during-{i}")).chain(["after".to_owned()]).collect();
    let mut wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    wanted.sort();
    assert_eq!(added, wanted, "the watch missed creates");
    // The leading coordinator (this router's) counted both moves and reports each shard's load.
    let metrics = client().get(format!("{}/metrics", router.url)).send().await.unwrap().text().await.unwrap();
    let value = |name: &str| metrics.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse::<f64>().ok()).unwrap_or(-1.0);
    assert_eq!(value("shardplane_range_moves_started_total "), 2.0, "{metrics}");
    assert_eq!(value("shardplane_range_moves_completed_total "), 2.0);
    assert_eq!(value("shardplane_range_move_duration_seconds_count "), 2.0);
    assert_eq!(value("shardplane_range_map_epoch "), 3.0);
    assert!(value("shardplane_shard_objects{shard=\"s2\"} ") > 0.0, "{metrics}");
    drop((s0, s1, s2, router));
}

/// The standalone coordinator leads when no other does, carries out `shardctl add`, and serves
/// its metrics with `--metrics-listen`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standalone_coordinator_moves_ranges_and_serves_metrics() {
    let etcd = Etcd::start().await;
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let s0 = TestShard::start_shard(shard(&etcd, "s0", HashRange::FULL)).await;
    s0.namespace("demo").await;
    for i in 0..10 {
        assert_eq!(s0.post("/api/v1/namespaces/demo/configmaps", &configmap(&format!("cm-{i}"), serde_json::json!({}))).await.0, 201);
    }
    let stored = shardplane_storage::range_map::StoredShard { id: "s0".into(), url: s0.url.clone(), ranges: vec![HashRange::FULL], cordoned: false };
    shardplane_coordinator::map_store::publish(&storage, vec![stored]).await.unwrap();
    let s1 = TestShard::start_shard(shardplane_shard::ShardConfig { ranges: RangeSet::default(), ..shard(&etcd, "s1", HashRange::FULL) }).await;

    /// Killed when the test ends, however it ends.
    struct Coordinator(std::process::Child);
    impl Drop for Coordinator {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Coordinator(
        std::process::Command::new(env!("CARGO_BIN_EXE_shardplane-coordinator"))
            .args(["--etcd-endpoints", &etcd.endpoint, "--id", "standalone", "--metrics-listen", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut out = std::io::BufRead::lines(std::io::BufReader::new(child.0.stdout.take().unwrap()));
    let addr = out.next().unwrap().unwrap().strip_prefix("metrics on ").expect("the address it serves metrics at").to_owned();
    let metrics = || async { client().get(format!("http://{addr}/metrics")).send().await.unwrap().text().await.unwrap() };
    let value = |text: &str, name: &str| text.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse::<f64>().ok());
    wait_for(Duration::from_secs(20), || async { status(&etcd)["leader"] == "standalone" && value(&metrics().await, "shardplane_range_map_epoch ") == Some(1.0) }).await;
    // The ConfigMaps and the namespaces.
    wait_for(Duration::from_secs(20), || async { value(&metrics().await, "shardplane_shard_objects{shard=\"s0\"} ").is_some_and(|n| n >= 11.0) }).await;

    let (code, _, err) = shardctl(&etcd, &["add", "s1"]);
    assert_eq!(code, 0, "{err}");
    // Adding a shard moves ranges to it, one at a time, until the loads are within the
    // planner's bound (how many moves that takes depends on how the objects' bytes fall).
    wait_for(Duration::from_secs(60), || async {
        let text = metrics().await;
        let completed = value(&text, "shardplane_range_moves_completed_total ").unwrap_or(0.0);
        completed >= 1.0 && value(&text, "shardplane_range_moves_started_total ") == Some(completed) && status(&etcd)["moves"] == serde_json::json!([])
    })
    .await;
    let text = metrics().await;
    let moves = value(&text, "shardplane_range_moves_started_total ").unwrap();
    assert_eq!(value(&text, "shardplane_range_map_epoch "), Some(1.0 + moves), "one epoch per move: {text}");
    let s = status(&etcd);
    let ranges = |id: &str| s["shards"].as_array().unwrap().iter().find(|x| x["id"] == id).map(|x| x["ranges"].as_array().unwrap().len()).unwrap_or(0);
    assert!(ranges("s1") > 0, "{s}");
    drop((child, s0, s1));
}

/// `shardctl store` on a three-member cluster (RFC 0016): status names every member, one leader
/// all agree on, sizes, the revision and the compacted revision; a member that is down shows
/// as unreachable; defragmentation is refused while one is down and goes one member at a time
/// when all answer; a snapshot is saved whole and restores to the state it was taken at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shardctl_store_shows_defragments_and_snapshots_a_cluster() {
    let mut cluster = EtcdCluster::start(3, std::path::Path::new("/dev/shm"), &[]).await;
    let endpoints = cluster.endpoints_flag();
    let storage = Storage::connect(&cluster.endpoints).await.unwrap();
    for i in 0..50 {
        storage.put(format!("/registry/configmaps/store/c{i}").as_bytes(), vec![b'x'; 2048]).await.unwrap();
    }
    let compacted_to = storage.current_revision().await.unwrap() - 10;
    storage.compact(compacted_to).await.unwrap();

    let (code, out, err) = shardctl_at(&endpoints, &["store", "status", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let s: Value = serde_json::from_str(&out).unwrap();
    let members = s["members"].as_array().unwrap();
    assert_eq!(members.len(), 3);
    let ids: Vec<u64> = members.iter().map(|m| m[1]["Ok"]["id"].as_u64().unwrap()).collect();
    let leaders: Vec<u64> = members.iter().map(|m| m[1]["Ok"]["leader"].as_u64().unwrap()).collect();
    assert!(leaders.iter().all(|l| *l == leaders[0]) && ids.contains(&leaders[0]), "one leader all agree on: {out}");
    assert!(members.iter().all(|m| m[1]["Ok"]["db_size"].as_i64().unwrap() >= m[1]["Ok"]["db_size_in_use"].as_i64().unwrap()));
    assert_eq!(s["compacted_revision"].as_u64(), Some(compacted_to));
    assert!(s["revision"].as_u64().unwrap() > compacted_to);
    let (_, table, _) = shardctl_at(&endpoints, &["store", "status"]);
    assert!(table.contains("leader") && table.contains("follower") && table.contains(&format!("COMPACTED {compacted_to}")), "{table}");

    // A snapshot holds the state it was taken at.
    let dir = std::path::PathBuf::from("/dev/shm").join(format!("shardctl-store-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("snap.db");
    let (code, out, err) = shardctl_at(&endpoints, &["store", "snapshot", file.to_str().unwrap(), "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let saved: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(saved["bytes"].as_u64(), Some(std::fs::metadata(&file).unwrap().len()));
    assert!(!dir.join("snap.part").exists());

    // Defragmentation one member at a time; refused while a member is down.
    let (code, out, err) = shardctl_at(&endpoints, &["store", "defrag", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap().as_array().unwrap().len(), 3);
    cluster.kill(2);
    let (_, table, _) = shardctl_at(&endpoints, &["store", "status"]);
    assert!(table.contains("unreachable"), "{table}");
    let (code, _, err) = shardctl_at(&endpoints, &["store", "defrag"]);
    assert_ne!(code, 0);
    assert!(err.contains("does not answer"), "{err}");

    // The snapshot restores what was there when it was taken.
    storage.put(b"/registry/configmaps/store/later", b"y".to_vec()).await.unwrap();
    cluster.restart(2);
    cluster.restore(&file, 0).await;
    let after = Storage::connect(&cluster.endpoints).await.unwrap();
    assert_eq!(after.get(b"/registry/configmaps/store/c49").await.unwrap().0.map(|kv| kv.value.len()), Some(2048));
    assert!(after.get(b"/registry/configmaps/store/later").await.unwrap().0.is_none());
    let _ = std::fs::remove_dir_all(&dir);
}
