//! The liveness tier under SIGKILL (RFC 0015), with real processes: node Leases and Events on
//! an embedded store of their own that commits in groups every 500 ms
//! (`shard-router --store-only --store-commit-interval-ms 500`, named by a storage contract),
//! everything else on real etcd behind `shard-router --shards 4`. 100 nodes renew their
//! Leases as fast as they are answered while a writer makes ConfigMaps; the tier is killed with
//! SIGKILL and started again. Renewals resume; no Lease goes back further than the promise (a
//! renewal acknowledged a commit interval and a commit before the crash survives); a Lease
//! informer through the router resumes or gets 410 and relists, and ends equal to the
//! store; no ConfigMap is lost and their watch never breaks; and the main etcd holds no
//! Lease and no Event.

mod common;

use common::{send_signal, spawn, KillOnDrop, Topology};
use serde_json::{json, Value};
use shardplane_keyspace::etcd_layout::resource_prefix;
use shardplane_testkit::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NODES: usize = 100;
const COMMIT_MS: u64 = 500;
/// What the tier promises: a write acknowledged this long before a crash survives it (one
/// commit interval, and the commit under way, bounded here by another interval).
const PROMISE: Duration = Duration::from_millis(2 * COMMIT_MS);
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";

fn lease(name: &str, n: u64) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "annotations": {"renewals": n.to_string()}},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": "2026-12-03T12:00:00.000000Z"}})
}

fn renewals(l: &Value) -> u64 {
    l["metadata"]["annotations"]["renewals"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The liveness tier: the embedded store alone, grouped commits, on `listen` in `dir`.
fn tier(dir: &std::path::Path, listen: &str) -> common::Started {
    spawn(&["--store-only", "--data-dir", dir.to_str().unwrap(), "--store-listen", listen, "--store-commit-interval-ms", &COMMIT_MS.to_string()])
}

/// A kubelet's renewal loop: GET-less PUTs with the last RV, a GET after a conflict, every
/// acknowledged renewal recorded with when it was answered.
async fn renew(router: &TestShard, name: String, acks: Arc<Mutex<Vec<(u64, Instant)>>>, stop: Arc<AtomicBool>, failed: Arc<AtomicUsize>) {
    let at = format!("{LEASES}/{name}");
    let (code, mut current) = router.get(&at).await;
    assert_eq!(code, 200, "{current}");
    while !stop.load(Ordering::SeqCst) {
        let n = renewals(&current) + 1;
        let mut next = lease(&name, n);
        next["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        let (code, body) = router.put(&at, &next).await;
        match code {
            200 => {
                acks.lock().unwrap().push((n, Instant::now()));
                current = body;
            }
            // A renewal lost with the tier left the stored RV behind ours: read it again.
            409 | 404 | 0 | 429 | 500..=599 => {
                failed.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                let (code, body) = router.get(&at).await;
                if code == 200 {
                    current = body;
                }
            }
            other => panic!("renewal of {name}: {other} {body}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A Lease informer through the router: list, then watch from the list's RV; a watch that
/// ends resumes from its last RV, one answered 410 relists. Counts resumes and relists.
async fn inform(router: &TestShard, state: Arc<Mutex<HashMap<String, u64>>>, relists: Arc<AtomicUsize>, resumes: Arc<AtomicUsize>, stop: Arc<AtomicBool>) {
    let mut from: Option<u64> = None;
    while !stop.load(Ordering::SeqCst) {
        let start = match from {
            Some(rv) => rv,
            None => {
                let (code, list) = router.get(LEASES).await;
                if code != 200 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                let mut s = state.lock().unwrap();
                s.clear();
                for l in list["items"].as_array().unwrap() {
                    s.insert(l["metadata"]["name"].as_str().unwrap().to_owned(), renewals(l));
                }
                rv(&list)
            }
        };
        from = Some(start);
        let resp = client().get(format!("{}{LEASES}?watch=1&allowWatchBookmarks=true&resourceVersion={start}", router.url)).send().await;
        let Ok(resp) = resp.map_err(|_| ()).and_then(|r| if r.status() == 200 { Ok(r) } else { Err(()) }) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut w = WatchReader::from_response(resp);
        loop {
            let e = tokio::select! {
                e = w.next(Duration::from_secs(3600)) => e,
                _ = tokio::time::sleep(Duration::from_millis(200)) => if stop.load(Ordering::SeqCst) { return } else { continue },
            };
            let Some(e) = e else {
                resumes.fetch_add(1, Ordering::SeqCst);
                break;
            };
            match e["type"].as_str().unwrap() {
                // A 410 (expired) relists, as client-go's reflector does; nothing else may end
                // the watch with an ERROR.
                "ERROR" => {
                    assert_eq!(e["object"]["code"], 410, "{e}");
                    relists.fetch_add(1, Ordering::SeqCst);
                    from = None;
                    break;
                }
                "BOOKMARK" => from = Some(event_rv(&e)),
                kind => {
                    let name = e["object"]["metadata"]["name"].as_str().unwrap().to_owned();
                    let mut s = state.lock().unwrap();
                    if kind == "DELETED" {
                        s.remove(&name);
                    } else {
                        s.insert(name, renewals(&e["object"]));
                    }
                    from = Some(event_rv(&e));
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_liveness_tier_killed_mid_renewals_loses_at_most_its_promise_and_nothing_else() {
    let etcd = Etcd::start().await;
    let dir = std::env::temp_dir().join(format!("shardplane-liveness-{}", uuid::Uuid::new_v4()));
    let first = tier(&dir.join("store"), "127.0.0.1:0");
    let endpoint = first.addr.clone();
    let listen = endpoint.trim_start_matches("http://").to_owned();
    let mut tier_process = Some(first);
    let contract = dir.join("contract.json");
    std::fs::write(&contract, json!({"resources": [
        {"group": "coordination.k8s.io", "resource": "leases", "endpoints": [endpoint]},
        {"group": "", "resource": "events", "endpoints": [endpoint]},
    ]}).to_string()).unwrap();
    let topology = Topology::start(&etcd.endpoint, 4, &["--storage-config", contract.to_str().unwrap(), "--bookmark-interval", "1"]).await;
    let router = &topology.router;
    // A handle on the same router for each task.
    let handle = || TestShard::attach(topology.started.url(), topology.started.addr.parse().unwrap());
    router.namespace("apps").await;
    for i in 0..NODES {
        let (code, body) = router.post(LEASES, &lease(&format!("node-{i}"), 0)).await;
        assert_eq!(code, 201, "{body}");
    }
    let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"}, "involvedObject": {"kind": "Node", "name": "node-0"}, "reason": "Test", "message": "on the tier"});
    let (code, body) = router.post("/api/v1/namespaces/default/events", &event).await;
    assert_eq!(code, 201, "{body}");

    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicUsize::new(0));
    let acks: Vec<Arc<Mutex<Vec<(u64, Instant)>>>> = (0..NODES).map(|_| Arc::default()).collect();
    let mut tasks = Vec::new();
    for (i, a) in acks.iter().enumerate() {
        let (router, a, stop, failed) = (handle(), a.clone(), stop.clone(), failed.clone());
        tasks.push(tokio::spawn(async move { renew(&router, format!("node-{i}"), a, stop, failed).await }));
    }
    let informed = Arc::new(Mutex::new(HashMap::new()));
    let (relists, resumes) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    // The informer runs until it has converged (it is aborted then), past the writers' stop.
    let informer_stop = Arc::new(AtomicBool::new(false));
    let informer = {
        let (router, informed, relists, resumes, stop) = (handle(), informed.clone(), relists.clone(), resumes.clone(), informer_stop.clone());
        tokio::spawn(async move { inform(&router, informed, relists, resumes, stop).await })
    };
    // ConfigMaps on the main etcd, written all along, and watched.
    let (_, cms) = router.get("/api/v1/namespaces/apps/configmaps").await;
    let mut cm_watch = router.watch(&format!("/api/v1/namespaces/apps/configmaps?watch=1&resourceVersion={}", rv(&cms))).await;
    let written = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (router, stop, written) = (handle(), stop.clone(), written.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let n = written.load(Ordering::SeqCst);
                let (code, body) = router.post("/api/v1/namespaces/apps/configmaps", &configmap(&format!("cm-{n}"), json!({}))).await;
                assert_eq!(code, 201, "a ConfigMap write: {body}");
                written.fetch_add(1, Ordering::SeqCst);
            }
        })
    };

    // Renewing; then the tier is killed and started again on its port and data.
    wait_for(Duration::from_secs(60), || async { acks.iter().all(|a| a.lock().unwrap().len() >= 5) }).await;
    let killed_at = Instant::now();
    let pid = tier_process.as_ref().unwrap().process.0.id();
    send_signal(pid, 9);
    drop(tier_process.take());
    let second = tier(&dir.join("store"), &listen);
    assert_eq!(second.addr, endpoint);
    let _second: KillOnDrop = second.process;
    let restarted_at = Instant::now();
    // Renewals resume for every node.
    wait_for(Duration::from_secs(60), || async { acks.iter().all(|a| a.lock().unwrap().last().is_some_and(|(_, at)| *at > restarted_at)) }).await;

    // No Lease went back further than the promise: what the restarted tier holds for each is
    // at least the last renewal acknowledged PROMISE before the kill. Read at the first answer
    // after the restart: the store's own state, before later renewals.
    let storage = shardplane_storage::Storage::connect(std::slice::from_ref(&endpoint)).await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    writer.await.unwrap();
    let mut lost = 0;
    for (i, a) in acks.iter().enumerate() {
        let a = a.lock().unwrap();
        let durable = a.iter().filter(|(_, at)| *at + PROMISE <= killed_at).map(|(n, _)| *n).max().unwrap_or(0);
        let before_kill = a.iter().filter(|(_, at)| *at <= killed_at).map(|(n, _)| *n).max().unwrap_or(0);
        // The first renewal acknowledged after the restart continued from what the tier had.
        let first_after = a.iter().find(|(_, at)| *at > restarted_at).map(|(n, _)| *n).unwrap();
        assert!(first_after > durable, "node-{i}: the tier went back past its promise: renewal {first_after} after the restart, {durable} was acknowledged {PROMISE:?} before the kill");
        lost += before_kill.saturating_sub(first_after - 1);
    }
    eprintln!("renewals retried around the kill: {}; renewals acknowledged and lost (within the promise): {lost}; informer resumes {} relists {}", failed.load(Ordering::SeqCst), resumes.load(Ordering::SeqCst), relists.load(Ordering::SeqCst));

    // The informer ends equal to the store.
    let (code, list) = router.get(LEASES).await;
    assert_eq!(code, 200);
    let want: HashMap<String, u64> = list["items"].as_array().unwrap().iter().map(|l| (l["metadata"]["name"].as_str().unwrap().to_owned(), renewals(l))).collect();
    assert_eq!(want.len(), NODES);
    let deadline = Instant::now() + Duration::from_secs(30);
    while *informed.lock().unwrap() != want {
        if informer.is_finished() {
            informer.await.expect("the informer failed");
            panic!("the informer stopped");
        }
        if Instant::now() >= deadline {
            let got = informed.lock().unwrap().clone();
            let differ: Vec<_> = want.iter().filter(|(k, v)| got.get(*k) != Some(v)).map(|(k, v)| (k.clone(), *v, got.get(k).copied())).take(10).collect();
            panic!("the informer did not converge: {} of {} differ, e.g. (name, stored, informed) {differ:?}; resumes {} relists {}", want.iter().filter(|(k, v)| got.get(*k) != Some(v)).count(), want.len(), resumes.load(Ordering::SeqCst), relists.load(Ordering::SeqCst));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    informer.abort();

    // Nothing else was touched: every ConfigMap is there, their watch never broke, and the
    // main etcd never held a Lease or an Event; the tier holds them.
    let n = written.load(Ordering::SeqCst);
    let (_, cms) = router.get("/api/v1/namespaces/apps/configmaps").await;
    assert_eq!(cms["items"].as_array().unwrap().len(), n);
    for _ in 0..n {
        let e = cm_watch.next(Duration::from_secs(30)).await.expect("the ConfigMap watch goes on");
        assert_eq!(e["type"], "ADDED", "{e}");
    }
    let main = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    for (group, resource) in [("coordination.k8s.io", "leases"), ("", "events")] {
        assert_eq!(main.count_prefix(resource_prefix(group, resource).as_bytes()).await.unwrap(), 0, "{resource} on the main etcd");
    }
    assert_eq!(storage.count_prefix(resource_prefix("coordination.k8s.io", "leases").as_bytes()).await.unwrap(), NODES as u64);
    assert_eq!(storage.count_prefix(resource_prefix("", "events").as_bytes()).await.unwrap(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
