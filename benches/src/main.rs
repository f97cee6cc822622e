//! `bench`: side-by-side measurements in one run, on one etcd (tmpfs), release build only.
//!
//! `cargo run --release -p shardplane-benches --bin bench -- list-watch [--objects N]` loads N
//! ConfigMaps (~1 KiB each) into etcd, starts one full-range shard and, beside it, a router over
//! K=4 shards, then measures:
//! - LIST of all N (unpaged, and paged at limit 500): a raw etcd range read, one shard, the router;
//! - watch delay: the time from a write to its arrival at a watcher on one shard vs through the
//!   router, for writes at a steady rate.
//! It prints a Markdown report (machine, command, date, p50/max) for benches/RESULTS.md.

#[path = "../../shards/tests/common/mod.rs"]
mod common;

use clap::Parser;
use common::{client, test_config, Etcd, TestShard};
use serde_json::{json, Value};
use shardplane_apimachinery::meta;
use shardplane_apimachinery::resources::{builtin_resources, find};
use shardplane_keyspace::{etcd_layout, HashRange, ObjectKey, RangeSet};
use shardplane_storage::Storage;
use std::collections::HashMap;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
struct Args {
    /// Scenario: list-watch.
    scenario: String,
    /// Objects to load.
    #[arg(long, default_value_t = 100_000)]
    objects: usize,
    /// LIST repetitions per target.
    #[arg(long, default_value_t = 9)]
    list_runs: usize,
    /// Writes observed by the watch-delay measurement.
    #[arg(long, default_value_t = 400)]
    watch_writes: usize,
    /// Shards behind the router.
    #[arg(long, default_value_t = 4)]
    shards: u32,
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

async fn load(storage: &Storage, n: usize) {
    let all = builtin_resources();
    let info = find(&all, "", "v1", "configmaps").unwrap().clone();
    let payload = "x".repeat(900);
    let (tx, rx) = async_channel(n);
    let workers: Vec<_> = (0..32)
        .map(|_| {
            let (storage, rx, info, payload) = (storage.clone(), rx.clone(), info.clone(), payload.clone());
            tokio::spawn(async move {
                while let Ok(i) = rx.recv().await {
                    let name = format!("cm-{i:07}");
                    let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "bench", "labels": {"app": "bench", "shard-hint": (i % 7).to_string()}}, "data": {"payload": payload}});
                    meta::prepare_for_create(&info, &mut obj);
                    let key = etcd_layout::object_key(&ObjectKey::new("", "configmaps", "bench", &name));
                    storage.create(key.as_bytes(), serde_json::to_vec(&obj).unwrap()).await.unwrap();
                }
            })
        })
        .collect();
    for i in 0..n {
        tx.send(i).await.unwrap();
    }
    drop(tx);
    for w in workers {
        w.await.unwrap();
    }
}

/// A small MPMC queue from tokio primitives.
fn async_channel(cap: usize) -> (tokio::sync::mpsc::Sender<usize>, SharedRx) {
    let (tx, rx) = tokio::sync::mpsc::channel(cap.max(1));
    (tx, SharedRx(std::sync::Arc::new(tokio::sync::Mutex::new(rx))))
}

#[derive(Clone)]
struct SharedRx(std::sync::Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<usize>>>);

impl SharedRx {
    async fn recv(&self) -> Result<usize, ()> {
        self.0.lock().await.recv().await.ok_or(())
    }
}

async fn time_list(url: &str, path: &str, paged: bool) -> (f64, usize) {
    let c = client();
    let start = Instant::now();
    let mut count = 0;
    let mut cont: Option<String> = None;
    loop {
        let q = match (&cont, paged) {
            (Some(t), _) => format!("{path}?limit=500&continue={t}"),
            (None, true) => format!("{path}?limit=500"),
            (None, false) => path.to_owned(),
        };
        let body = c.get(format!("{url}{q}")).send().await.unwrap().bytes().await.unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        count += v["items"].as_array().map_or(0, Vec::len);
        match v["metadata"]["continue"].as_str() {
            Some(t) if paged && !t.is_empty() => cont = Some(t.to_owned()),
            _ => break,
        }
    }
    (start.elapsed().as_secs_f64() * 1000.0, count)
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    assert_eq!(args.scenario, "list-watch", "the only scenario so far is list-watch");
    let etcd = Etcd::start().await;
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let t = Instant::now();
    load(&storage, args.objects).await;
    eprintln!("loaded {} objects in {:.1} s", args.objects, t.elapsed().as_secs_f64());

    // One full-range shard, and beside it a router over K shards, on the same etcd.
    let mut cfg = test_config(&etcd, RangeSet::full());
    cfg.bookmark_interval = Duration::from_secs(60);
    let one = TestShard::start_shard(cfg.clone()).await;
    let mut behind = Vec::new();
    for r in HashRange::split_even(args.shards) {
        behind.push(TestShard::start_shard(shardplane_shard::ShardConfig { ranges: RangeSet::from_disjoint(vec![r]).unwrap(), id: format!("bench-{r}"), ..cfg.clone() }).await);
    }
    let router_handle = TestShard::start_router(&[etcd.endpoint.clone()], behind.iter().map(|s| s.url.clone()).collect(), Duration::from_secs(60)).await;
    let router = router_handle.url.clone();
    eprintln!("shards and router ready");

    let path = "/api/v1/namespaces/bench/configmaps";
    let mut report = String::new();
    report.push_str(&format!("| LIST of {} ConfigMaps (~1 KiB) | p50 ms | max ms | runs |\n|---|---|---|---|\n", args.objects));
    let (start_key, end_key) = etcd_layout::range_keys("", "configmaps", HashRange::FULL);
    let mut etcd_ms = Vec::new();
    for _ in 0..args.list_runs {
        let s = Instant::now();
        let (kvs, _) = storage.list_range(&start_key, &end_key, 0).await.unwrap();
        assert_eq!(kvs.len(), args.objects);
        etcd_ms.push(s.elapsed().as_secs_f64() * 1000.0);
    }
    let mut medians = HashMap::new();
    let mut row = |name: &str, mut v: Vec<f64>| {
        let p50 = percentile(&mut v, 0.5);
        let max = percentile(&mut v, 1.0);
        medians.insert(name.to_owned(), p50);
        report.push_str(&format!("| {name} | {p50:.0} | {max:.0} | {} |\n", v.len()));
    };
    row("etcd range read (raw, no decode)", etcd_ms);
    for (name, url, paged) in [
        ("one shard, unpaged", one.url.as_str(), false),
        (&*format!("router over {} shards, unpaged", args.shards), router.as_str(), false),
        ("one shard, paged (limit 500)", one.url.as_str(), true),
        (&*format!("router over {} shards, paged (limit 500)", args.shards), router.as_str(), true),
    ] {
        time_list(url, path, paged).await; // warm-up
        let mut v = Vec::new();
        for _ in 0..args.list_runs {
            let (ms, count) = time_list(url, path, paged).await;
            assert_eq!(count, args.objects, "{name} returned {count}");
            v.push(ms);
        }
        row(name, v);
    }
    let ratio = |a: &str, b: &str| medians[a] / medians[b];
    report.push_str(&format!(
        "\nRouter / one shard (p50): unpaged {:.2}x, paged {:.2}x.\n",
        ratio(&format!("router over {} shards, unpaged", args.shards), "one shard, unpaged"),
        ratio(&format!("router over {} shards, paged (limit 500)", args.shards), "one shard, paged (limit 500)")
    ));

    // Watch delay: writes straight to etcd at a steady rate; arrival at a watcher on one shard
    // and through the router, both from the same RV.
    let rv: u64 = storage.current_revision().await.unwrap();
    let watch_path = format!("/api/v1/namespaces/bench/configmaps?watch=1&resourceVersion={rv}");
    let mut arrivals = Vec::new();
    for url in [one.url.clone(), router.clone()] {
        let resp = client().get(format!("{url}{watch_path}")).send().await.unwrap();
        let n = args.watch_writes;
        arrivals.push(tokio::spawn(async move {
            let mut w = common::WatchReader::from_response(resp);
            let mut seen = HashMap::new();
            while seen.len() < n {
                let e = w.next_change(Duration::from_secs(30)).await.expect("watch event");
                seen.insert(e["object"]["metadata"]["name"].as_str().unwrap().to_owned(), Instant::now());
            }
            seen
        }));
    }
    let all = builtin_resources();
    let info = find(&all, "", "v1", "configmaps").unwrap().clone();
    let mut sent = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    for i in 0..args.watch_writes {
        tick.tick().await;
        let name = format!("w-{i:05}");
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "bench"}, "data": {"i": i.to_string()}});
        meta::prepare_for_create(&info, &mut obj);
        let key = etcd_layout::object_key(&ObjectKey::new("", "configmaps", "bench", &name));
        sent.insert(name, Instant::now());
        storage.create(key.as_bytes(), serde_json::to_vec(&obj).unwrap()).await.unwrap();
    }
    let shard_seen = arrivals.remove(0).await.unwrap();
    let router_seen = arrivals.remove(0).await.unwrap();
    let delays = |seen: &HashMap<String, Instant>| -> Vec<f64> { sent.iter().map(|(n, t)| seen[n].duration_since(*t).as_secs_f64() * 1000.0).collect() };
    let (mut d1, mut d2) = (delays(&shard_seen), delays(&router_seen));
    let (s50, s99, r50, r99) = (percentile(&mut d1, 0.5), percentile(&mut d1, 0.99), percentile(&mut d2, 0.5), percentile(&mut d2, 0.99));
    report.push_str(&format!(
        "\n| Watch delay, write to arrival ({} writes at 100/s) | p50 ms | p99 ms |\n|---|---|---|\n| one shard | {s50:.2} | {s99:.2} |\n| router over {} shards | {r50:.2} | {r99:.2} |\n\nAdded by the router: p50 {:.2} ms, p99 {:.2} ms.\n",
        args.watch_writes,
        args.shards,
        r50 - s50,
        r99 - s99
    ));
    println!("{report}");
}
