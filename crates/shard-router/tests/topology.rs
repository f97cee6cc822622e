//! `shard-router --etcd-endpoints` as a user runs it: it starts K shard processes of its own
//! binary, writes a kubeconfig kubectl can use, restarts a shard that dies, and leaves nothing
//! running after SIGTERM.


mod common;

use common::{processes_with, send_signal, spawn_topology, KillOnDrop};
use shardplane_testkit::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[tokio::test]
async fn local_topology_serves_restarts_shards_and_stops_cleanly() {
    let etcd = Etcd::start().await;
    let dir = std::env::temp_dir().join(format!("shardplane-topology-{}", uuid::Uuid::new_v4()));
    let kubeconfig = dir.join("kubeconfig");
    let started = spawn_topology(&etcd.endpoint, 2, &kubeconfig);
    let pids: Vec<u32> = started.shards.iter().map(|(pid, _)| *pid).collect();
    let (mut router, addr) = (started.process, started.addr);
    assert_eq!(pids.len(), 2);
    assert_eq!(processes_with(&etcd.endpoint).len(), 3, "router and two shard processes");
    let r = TestShard::attach(format!("http://{addr}"), addr.parse().unwrap());
    wait_for(Duration::from_secs(30), || async { client().get(format!("{}/readyz", r.url)).send().await.is_ok_and(|x| x.status() == 200) }).await;
    // The bootstrap namespaces exist, as on kube-apiserver.
    wait_for(Duration::from_secs(10), || async { r.get("/api/v1/namespaces/default").await.0 == 200 }).await;

    // kubectl through the written kubeconfig, with a generator (protobuf body).
    let (home, kc) = (dir.join("home"), kubeconfig.clone());
    let out = tokio::task::spawn_blocking(move || {
        Command::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33")
            .env("HOME", &home)
            .arg(format!("--kubeconfig={}", kc.display()))
            .args(["create", "configmap", "topo", "--from-literal=a=b"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // The router published the map of its shards in etcd.
    let storage = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let before = storage.load_range_map().await.unwrap().expect("a stored map").map;
    assert_eq!((before.epoch, before.shards.len()), (1, 2));

    // Kill one shard: the supervisor starts it again on its range and requests reach it.
    let names: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    send_signal(pids[0], 9);
    wait_for(Duration::from_secs(30), || {
        let names = names.clone();
        let r = &r;
        async move {
            let mut ok = true;
            for n in &names {
                let code = r.post("/api/v1/namespaces/default/configmaps", &configmap(n, serde_json::json!({}))).await.0;
                ok &= code == 201 || code == 409;
            }
            ok
        }
    })
    .await;
    let (_, list) = r.get("/api/v1/namespaces/default/configmaps").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 21);
    // The map has the restarted shard's new address under the same epoch: its ranges did not
    // change owner.
    let after = storage.load_range_map().await.unwrap().unwrap().map;
    assert_eq!(after.epoch, 1);
    let url_of = |m: &shardplane_storage::range_map::StoredRangeMap, id: &str| m.shards.iter().find(|s| s.id == id).unwrap().url.clone();
    assert_ne!(url_of(&after, "shard-0"), url_of(&before, "shard-0"));
    assert_eq!(url_of(&after, "shard-1"), url_of(&before, "shard-1"));

    // SIGTERM: the router stops its shards and exits.
    send_signal(router.0.id(), 15);
    let deadline = Instant::now() + Duration::from_secs(20);
    while router.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "router did not exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(processes_with(&etcd.endpoint), Vec::<u32>::new(), "shard processes left running");

    // A router killed outright (SIGKILL, no chance to clean up) still leaves no shard behind.
    let mut router = spawn_topology(&etcd.endpoint, 2, &kubeconfig).process;
    assert_eq!(processes_with(&etcd.endpoint).len(), 3);
    // Same shard count on restart: same ownership, same epoch.
    assert_eq!(storage.load_range_map().await.unwrap().unwrap().map.epoch, 1);
    send_signal(router.0.id(), 9);
    let _ = router.0.wait();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !processes_with(&etcd.endpoint).is_empty() {
        assert!(Instant::now() < deadline, "shards outlived a killed router: {:?}", processes_with(&etcd.endpoint));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts the router over `k` shards and waits until it serves; returns it and a client.
async fn router_over(etcd: &str, kubeconfig: &std::path::Path, k: u32) -> (KillOnDrop, TestShard) {
    let started = spawn_topology(etcd, k, kubeconfig);
    let r = TestShard::attach(started.url(), started.addr.parse().unwrap());
    wait_for(Duration::from_secs(30), || async { client().get(format!("{}/readyz", r.url)).send().await.is_ok_and(|x| x.status() == 200) }).await;
    (started.process, r)
}

/// Stops the router with SIGTERM and waits for it to exit.
fn stop_router(router: &mut KillOnDrop) {
    send_signal(router.0.id(), 15);
    let deadline = Instant::now() + Duration::from_secs(20);
    while router.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "router did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `--shards K` changed between runs (RFC 0006): the new shards split the hash space K ways, the
/// map gets a new epoch with them (and loses the old ones), and every object is still served.
#[tokio::test]
async fn the_local_topology_grows_and_shrinks_with_the_shard_count_across_restarts() {
    let etcd = Etcd::start().await;
    let storage = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let dir = std::env::temp_dir().join(format!("shardplane-topology-{}", uuid::Uuid::new_v4()));
    let kubeconfig = dir.join("kubeconfig");
    let mut want: Vec<String> = Vec::new();
    for (run, k) in [2u32, 3, 1, 4].into_iter().enumerate() {
        let (mut router, r) = router_over(&etcd.endpoint, &kubeconfig, k).await;
        let map = storage.load_range_map().await.unwrap().unwrap().map;
        assert_eq!((map.epoch, map.shards.len()), (run as u64 + 1, k as usize), "run {run} over {k} shards: {map:?}");
        let mut owned: Vec<_> = map.shards.iter().flat_map(|s| s.ranges.clone()).collect();
        owned.sort_unstable_by_key(|r| r.start());
        assert_eq!(owned, shardplane_keyspace::HashRange::split_even(k), "run {run}");
        // Everything written before is served by the new shards, and they take new writes.
        let (_, list) = r.get("/api/v1/namespaces/default/configmaps").await;
        let mut names: Vec<String> = list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect();
        names.sort();
        assert_eq!(names, want, "run {run} over {k} shards");
        for i in 0..15 {
            let name = format!("run{run}-{i}");
            let (code, body) = r.post("/api/v1/namespaces/default/configmaps", &configmap(&name, serde_json::json!({}))).await;
            assert_eq!(code, 201, "{name}: {body}");
            want.push(name);
        }
        want.sort();
        assert_eq!(r.get(&format!("/api/v1/namespaces/default/configmaps/{}", want[0])).await.0, 200);
        stop_router(&mut router);
        // Stopped shards leave no member key behind: the next run's coordinator would take one
        // for a shard that joined and move ranges to it, and writes to those ranges would fail.
        let members = storage.members().await.unwrap();
        assert!(members.shards.is_empty(), "run {run}: member keys outlive their shards: {:?}", members.shards.iter().map(|m| &m.id).collect::<Vec<_>>());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The default namespace's ConfigMaps (name, resourceVersion), sorted, once `r` is ready.
async fn configmaps_when_ready(r: &TestShard) -> Vec<(String, String)> {
    wait_for(Duration::from_secs(30), || async { client().get(format!("{}/readyz", r.url)).send().await.is_ok_and(|x| x.status() == 200) }).await;
    let (_, list) = r.get("/api/v1/namespaces/default/configmaps").await;
    let mut listed: Vec<(String, String)> = list["items"].as_array().unwrap().iter().map(|i| (i["metadata"]["name"].as_str().unwrap().to_owned(), i["metadata"]["resourceVersion"].as_str().unwrap().to_owned())).collect();
    listed.sort();
    listed
}

/// With no `--etcd-endpoints` the router serves its embedded store (RFC 0007): what it
/// acknowledged survives SIGKILL, resourceVersions are kept, a watch resumed from an RV of the
/// first run is served, and a second router on the same data directory is refused. The first
/// run serves the store on loopback TCP, the later ones on a unix socket (`--store-listen`),
/// the last after a SIGKILL left the socket file behind.
#[tokio::test]
async fn the_embedded_store_keeps_everything_across_a_kill() {
    let dir = std::env::temp_dir().join(format!("shardplane-embedded-{}", uuid::Uuid::new_v4()));
    let socket = dir.join("etcd.sock");
    let spawn = |port_file: &str, unix: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_shard-router"));
        c.args(["--shards", "2", "--listen", "127.0.0.1:0", "--data-dir", dir.join("store").to_str().unwrap(), "--kubeconfig", dir.join(port_file).to_str().unwrap(), "--insecure-plain-http"]);
        if unix {
            c.arg("--store-listen").arg(format!("unix:{}", socket.display()));
        } else {
            c.args(["--store-listen", "127.0.0.1:0"]);
        }
        let mut c = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
        let (mut store, mut addr) = (None, None);
        while let Some(Ok(line)) = lines.next() {
            if let Some(at) = line.strip_prefix("embedded store ") {
                store = at.split(" at ").nth(1).map(str::to_owned);
            }
            if let Some(a) = line.strip_prefix("listening on ") {
                addr = Some(a.to_owned());
                break;
            }
        }
        if unix && addr.is_some() {
            assert_eq!(store, Some(format!("unix:{}", socket.display())), "the store serves on the socket");
        }
        std::thread::spawn(move || for _ in lines {});
        (KillOnDrop(c), addr)
    };
    let restart = |port_file: &str| {
        let (router, addr) = spawn(port_file, true);
        let r = TestShard::attach(format!("http://{}", addr.expect("the restarted router listens")), "127.0.0.1:1".parse().unwrap());
        (router, r)
    };
    let (mut first, addr) = spawn("kc1", false);
    let r = TestShard::attach(format!("http://{}", addr.unwrap()), "127.0.0.1:1".parse().unwrap());
    wait_for(Duration::from_secs(30), || async { r.get("/api/v1/namespaces/default").await.0 == 200 }).await;
    let mut written = Vec::new();
    for i in 0..20 {
        let (code, body) = r.post("/api/v1/namespaces/default/configmaps", &configmap(&format!("kept-{i}"), serde_json::json!({}))).await;
        assert_eq!(code, 201, "{body}");
        written.push((format!("kept-{i}"), body["metadata"]["resourceVersion"].as_str().unwrap().to_owned()));
    }
    let mid = written[9].1.clone();

    // A second router on the same data directory is refused while the first runs.
    let (mut second, addr2) = spawn("kc2", false);
    assert!(addr2.is_none(), "a second store opened a data directory in use");
    let status = second.0.wait().unwrap();
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut second.0.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("in use by another store"), "{err}");

    let mut want = written.clone();
    want.sort();
    send_signal(first.0.id(), 9);
    let _ = first.0.wait();
    let (mut on_socket, r) = restart("kc3");
    assert_eq!(configmaps_when_ready(&r).await, want, "every acknowledged write, at its resourceVersion");
    // Killed again: the socket file stays behind, and the next start replaces it.
    send_signal(on_socket.0.id(), 9);
    let _ = on_socket.0.wait();
    assert!(socket.exists(), "SIGKILL leaves the socket file");
    let (_again, r) = restart("kc4");
    assert_eq!(configmaps_when_ready(&r).await, want, "every acknowledged write, at its resourceVersion");
    // A watch resumed from the first run's RV gets the changes after it.
    let mut w = r.watch(&format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={mid}")).await;
    let mut seen = Vec::new();
    while seen.len() < 10 {
        let e = w.next_change(Duration::from_secs(20)).await.expect("an event");
        assert_eq!(e["type"], "ADDED", "{e}");
        seen.push(e["object"]["metadata"]["name"].as_str().unwrap().to_owned());
    }
    seen.sort();
    let mut later: Vec<String> = written[10..].iter().map(|(n, _)| n.clone()).collect();
    later.sort();
    assert_eq!(seen, later);
    let _ = std::fs::remove_dir_all(&dir);
}
