//! Exhaustion with real processes: `shard-router --shards 2` on a real etcd while hostile
//! clients hold connections that send headers slowly or a body slowly (more of each than there
//! are in-flight seats), open watches that differ only by a meaningless parameter, send patch
//! and YAML bombs and an oversized body; meanwhile a well-behaved client's reads and writes keep
//! succeeding, with p99 under 1 s, and no process's resident memory passes a stated bound.

mod common;

use common::{rss_mib, spawn_topology};
use shardplane_testkit::*;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The most resident memory any process (router or shard) may reach during the test, debug
/// build included.
const RSS_BOUND_MIB: u64 = 400;
/// More hostile connections of each kind than a process has seats (400 reads, 200 writes).
const SLOW_HEADERS: usize = 450;
const SLOW_BODIES: usize = 250;
const IDLE_WATCHES: usize = 100;

/// A connection that sends the start of a request and then nothing.
fn slow_header(addr: &str) -> Option<TcpStream> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.write_all(b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n").ok()?;
    Some(s)
}

/// A connection that sends a create's headers and ten bytes of a thousand-byte body.
fn slow_body(addr: &str) -> Option<TcpStream> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.write_all(b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"apiVersi").ok()?;
    Some(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_load_does_not_lock_out_a_well_behaved_client() {
    let etcd = Etcd::start().await;
    let dir = common::TempDir::named("shardplane-exhaustion");
    let kubeconfig = dir.join("kubeconfig");
    let started = spawn_topology(&etcd.endpoint, 2, &kubeconfig);
    let pids: Vec<u32> = std::iter::once(started.process.0.id()).chain(started.shards.iter().map(|(pid, _)| *pid)).collect();
    let shard_urls: Vec<String> = started.shards.iter().map(|(_, url)| url.clone()).collect();
    let addr = started.addr.clone();
    let r = TestShard::attach(format!("http://{addr}"), addr.parse().unwrap());
    wait_for(Duration::from_secs(60), || async { client().get(format!("{}/readyz", r.url)).send().await.is_ok_and(|x| x.status() == 200) }).await;
    wait_for(Duration::from_secs(10), || async { r.get("/api/v1/namespaces/default").await.0 == 200 }).await;
    r.namespace("calm").await;

    // Hostile clients.
    let held: Vec<TcpStream> = (0..SLOW_HEADERS).filter_map(|_| slow_header(&addr)).chain((0..SLOW_BODIES).filter_map(|_| slow_body(&addr))).collect();
    assert!(held.len() >= SLOW_HEADERS + SLOW_BODIES - 10, "only {} hostile connections opened", held.len());
    let mut watches = Vec::new();
    for i in 0..IDLE_WATCHES {
        let resp = client().get(format!("{}/api/v1/namespaces/calm/configmaps?watch=1&meaningless={i}", r.url)).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        watches.push(resp);
    }
    let bombs = {
        let url = r.url.clone();
        tokio::spawn(async move {
            let c = client();
            let mut codes = Vec::new();
            let (code, _) = (c.post(format!("{url}/api/v1/namespaces/calm/configmaps")).header("content-type", "application/json").body(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"target"},"data":{"a":"b"}}"#).send().await.unwrap().status().as_u16(), ());
            codes.push(code);
            let mut doubling = vec![serde_json::json!({"op": "add", "path": "/data/seed", "value": "x".repeat(1000)})];
            doubling.extend((0..40).map(|i| serde_json::json!({"op": "copy", "from": "/data", "path": format!("/data/d{i}")})));
            let laughs: String = std::iter::once("a0: &a0 \"lol\"\n".to_owned()).chain((1..10).map(|i| format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 9].join(", ")))).collect();
            for _ in 0..20 {
                let p = c.patch(format!("{url}/api/v1/namespaces/calm/configmaps/target")).header("content-type", "application/json-patch+json").body(serde_json::to_vec(&doubling).unwrap()).send().await.unwrap();
                codes.push(p.status().as_u16());
                let y = c.patch(format!("{url}/api/v1/namespaces/calm/configmaps/target?fieldManager=bomb")).header("content-type", "application/apply-patch+yaml").body(laughs.clone()).send().await.unwrap();
                codes.push(y.status().as_u16());
            }
            // An oversized body, streamed: refused from its declared length.
            let big = c.post(format!("{url}/api/v1/namespaces/calm/configmaps")).header("content-type", "application/json").body(vec![b' '; 64 * 1024 * 1024]).send().await.map(|r| r.status().as_u16()).unwrap_or(413);
            codes.push(big);
            codes
        })
    };

    // The well-behaved client, meanwhile.
    let mut took = Vec::new();
    let mut peak = 0;
    let until = Instant::now() + Duration::from_secs(15);
    let mut i = 0;
    while Instant::now() < until {
        let began = Instant::now();
        let (code, body) = r.post("/api/v1/namespaces/calm/configmaps", &configmap(&format!("calm-{i}"), serde_json::json!({}))).await;
        assert_eq!(code, 201, "{body}");
        took.push(began.elapsed());
        let began = Instant::now();
        let (code, body) = r.get(&format!("/api/v1/namespaces/calm/configmaps/calm-{i}")).await;
        assert_eq!(code, 200, "{body}");
        took.push(began.elapsed());
        let began = Instant::now();
        let (code, body) = r.get("/api/v1/namespaces/calm/configmaps?limit=50").await;
        assert_eq!(code, 200, "{body}");
        took.push(began.elapsed());
        peak = pids.iter().map(|p| rss_mib(*p)).max().unwrap_or(0).max(peak);
        i += 1;
    }
    let codes = bombs.await.unwrap();
    assert_eq!(codes[0], 201);
    assert!(codes[1..].iter().all(|c| matches!(c, 400 | 413 | 422)), "bombs answered {codes:?}");
    took.sort();
    let p99 = took[took.len() * 99 / 100];
    eprintln!("{} requests while {} hostile connections and {IDLE_WATCHES} watches were open: p99 {p99:?}, peak RSS {peak} MiB", took.len(), held.len());
    assert!(p99 < Duration::from_secs(1), "p99 {p99:?} over {} requests", took.len());
    assert!(peak < RSS_BOUND_MIB, "a process reached {peak} MiB");
    // The watches that differ only by a parameter with no meaning share the shards' streams:
    // each shard serves a handful of configmaps watches for them, not one per client.
    for u in &shard_urls {
        let metrics = client().get(format!("{u}/metrics")).send().await.unwrap().text().await.unwrap();
        let streams: f64 = metrics.lines().filter(|l| l.starts_with("apiserver_registered_watchers{") && l.contains("kind=\"ConfigMap\"")).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum();
        assert!(streams <= 2.0, "shard {u} serves {streams} ConfigMap watch streams for {IDLE_WATCHES} router watches");
    }
    drop(watches);
    drop(held);
}
