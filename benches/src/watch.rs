//! watch: the delay from a write to its arrival at a watcher — through the router, directly
//! from one shard, and from a raw etcd watch — at 1, 100 and 1,000 watchers and a steady write
//! rate; then whether 1,000 router watchers keep up with 1,000 events/s.
//!
//! Writes are ConfigMaps put straight into etcd in shardplane's layout; a write's delay is its
//! arrival minus the moment its put was sent (so every path includes etcd's commit alike). The
//! direct-shard watchers see the events of shard 0's range only.

use crate::cluster::{http, Topology};
use crate::report::{line_plot, percentile, Section, Series};
use crate::Ctx;
use futures::StreamExt;
use serde_json::json;
use shardplane_apimachinery::encode::object_bytes;
use shardplane_apimachinery::meta;
use shardplane_keyspace::{etcd_layout, HashRange, ObjectKey};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NS: &str = "bench";

fn key(i: usize) -> String {
    etcd_layout::object_key(&ObjectKey::new("", "configmaps", NS, &format!("w-{i:07}")))
}

/// Index of `w-NNNNNNN` in a watch event line (the first `"name":"` is metadata.name).
fn index_in(line: &[u8]) -> Option<usize> {
    let at = line.windows(9).position(|w| w == b"\"name\":\"w")? + 8;
    let digits = &line[at + 2..at + 9];
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Arrival time of each event index at one watcher.
type Arrivals = Vec<(usize, Instant)>;

/// A watcher over HTTP: reads event lines until it has `want` events or `deadline` passes.
async fn http_watcher(resp: reqwest::Response, want: usize, deadline: Instant) -> Arrivals {
    let mut got = Vec::with_capacity(want);
    let mut buf: Vec<u8> = Vec::new();
    let mut body = resp.bytes_stream();
    while got.len() < want {
        let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline.into(), body.next()).await else { break };
        let now = Instant::now();
        buf.extend_from_slice(&chunk);
        while let Some(nl) = buf.iter().position(|&c| c == b'\n') {
            if let Some(i) = index_in(&buf[..nl]) {
                got.push((i, now));
            }
            buf.drain(..=nl);
        }
    }
    got
}

async fn etcd_watcher(endpoint: String, from: i64, want: usize, ready: tokio::sync::mpsc::Sender<()>, deadline: Instant) -> Arrivals {
    let (start, end) = etcd_layout::range_keys("", "configmaps", HashRange::FULL);
    let mut client = etcd_client::Client::connect([endpoint], None).await.expect("etcd");
    let mut stream = client.watch(start, Some(etcd_client::WatchOptions::new().with_range(end).with_start_revision(from))).await.expect("etcd watch");
    let _ = ready.send(()).await;
    let mut got = Vec::with_capacity(want);
    while got.len() < want {
        let Ok(Ok(Some(resp))) = tokio::time::timeout_at(deadline.into(), stream.message()).await else { break };
        let now = Instant::now();
        for e in resp.events() {
            if let Some(kv) = e.kv() {
                let name = kv.key_str().unwrap_or("").rsplit('/').next().unwrap_or("");
                if let Some(i) = name.strip_prefix("w-").and_then(|d| d.parse().ok()) {
                    got.push((i, now));
                }
            }
        }
    }
    got
}

/// Writes objects `first..first+count` at `rate`/s (in 10 ms steps, each step's puts in
/// parallel); returns each one's send time.
async fn write(endpoint: &str, first: usize, count: usize, rate: usize) -> Vec<Instant> {
    let client = etcd_client::Client::connect([endpoint], None).await.expect("etcd");
    let info = crate::objects::Kind::ConfigMap.info();
    // At most 100 steps a second (tokio's timer is millisecond-grained).
    let per_step = (rate / 100).max(1);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(per_step as f64 / rate.max(1) as f64));
    let mut sent = vec![Instant::now(); count];
    let mut i = 0;
    while i < count {
        tick.tick().await;
        let batch: Vec<usize> = (i..(i + per_step).min(count)).collect();
        let puts = batch.iter().map(|&j| {
            let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("w-{:07}", first + j), "namespace": NS}, "data": {"v": "x".repeat(200)}});
            meta::prepare_for_create(&info, &mut obj);
            let mut kv = client.kv_client();
            let value = object_bytes(&obj);
            let k = key(first + j);
            async move {
                let t = Instant::now();
                kv.put(k, value, None).await.expect("put");
                t
            }
        });
        for (j, t) in batch.iter().zip(futures::future::join_all(puts).await) {
            sent[*j] = t;
        }
        i += batch.len();
    }
    sent
}

#[derive(Clone, Copy, PartialEq)]
enum Path {
    Router,
    Shard,
    Etcd,
}

impl Path {
    fn name(self, k: u32) -> String {
        match self {
            Path::Router => format!("router over {k} shards"),
            Path::Shard => "one shard directly".into(),
            Path::Etcd => "raw etcd watch".into(),
        }
    }
}

struct Phase {
    delays: Vec<f64>,
    complete: usize,
    received: usize,
    seconds: f64,
}

/// Opens `watchers` watchers on `path`, writes `count` objects at `rate`/s, and collects.
async fn phase(t: &Topology, endpoint: &str, k: u32, path: Path, watchers: usize, first: usize, count: usize, rate: usize) -> Phase {
    let rv = shardplane_storage::Storage::connect(&[endpoint.to_owned()]).await.expect("etcd").current_revision().await.expect("rv");
    let shard0 = HashRange::split_even(k)[0];
    let expected: Vec<usize> = (first..first + count).filter(|&i| path != Path::Shard || shard0.contains(ObjectKey::new("", "configmaps", NS, &format!("w-{i:07}")).hash())).collect();
    let want = expected.len();
    let deadline = Instant::now() + Duration::from_secs(60) + Duration::from_secs_f64(count as f64 / rate as f64);
    let mut tasks = Vec::new();
    let base = match path {
        Path::Router => t.url.clone(),
        _ => t.shards[0].url.clone(),
    };
    let c = http();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(watchers.max(1));
    for _ in 0..watchers {
        if path == Path::Etcd {
            tasks.push(tokio::spawn(etcd_watcher(endpoint.to_owned(), rv as i64 + 1, want, ready_tx.clone(), deadline)));
        } else {
            let r = c.get(format!("{base}/api/v1/namespaces/{NS}/configmaps?watch=1&resourceVersion={rv}")).send().await.expect("watch");
            assert!(r.status().is_success(), "watch: {}", r.status());
            tasks.push(tokio::spawn(http_watcher(r, want, deadline)));
        }
    }
    if path == Path::Etcd {
        for _ in 0..watchers {
            ready_rx.recv().await;
        }
    }
    let started = Instant::now();
    let sent = Arc::new(write(endpoint, first, count, rate).await);
    let mut delays = Vec::new();
    let (mut complete, mut received) = (0, 0);
    let mut last = started;
    for task in tasks {
        let got = task.await.expect("watcher");
        received += got.len();
        if got.len() >= want {
            complete += 1;
        }
        for (i, at) in got {
            last = last.max(at);
            delays.push(at.saturating_duration_since(sent[i - first]).as_secs_f64() * 1000.0);
        }
    }
    Phase { delays, complete, received, seconds: last.duration_since(started).as_secs_f64() }
}

pub async fn run(ctx: &Ctx) -> Section {
    let k: u32 = if ctx.smoke { 2 } else { 4 };
    let counts: Vec<usize> = if ctx.smoke { vec![1, 10] } else { vec![1, 100, 1000] };
    let (writes, rate) = if ctx.smoke { (30, 100) } else { (300, 100) };
    let etcd = crate::start_etcd().await;
    let t = Topology::start(&ctx.router, &etcd.endpoint, k).await;
    let mut s = Section::new("watch");
    s.line(format!("Delay from sending a write to its arrival, {writes} ConfigMap writes at {rate}/s straight to etcd, for each number of watchers on each path (router over {k} shards; shard 0 directly, which sees its range's events; a raw etcd watch). Percentiles over every (watcher, event).\n"));
    let mut rows = Vec::new();
    let mut first = 0;
    let mut p99 = std::collections::HashMap::new();
    let mut plot: Vec<Series> = Vec::new();
    for path in [Path::Router, Path::Shard, Path::Etcd] {
        let mut points = Vec::new();
        for &w in &counts {
            let bar = ctx.spinner(&format!("watch: {} × {w}", path.name(k)));
            let mut ph = phase(&t, &etcd.endpoint, k, path, w, first, writes, rate).await;
            bar.finish_and_clear();
            first += writes;
            let (p50, p) = (percentile(&mut ph.delays, 0.5), percentile(&mut ph.delays, 0.99));
            p99.insert((path as u8, w), p);
            points.push((w as f64, p));
            rows.push(vec![path.name(k), w.to_string(), format!("{p50:.2}"), format!("{p:.2}"), format!("{:.2}", percentile(&mut ph.delays, 1.0)), format!("{}/{w}", ph.complete)]);
        }
        plot.push(Series { label: format!("{} p99", path.name(k)), points });
    }
    s.table(&["path", "watchers", "p50 ms", "p99 ms", "max ms", "watchers with every event"], &rows);
    for &w in &counts {
        let added = p99[&(Path::Router as u8, w)] - p99[&(Path::Shard as u8, w)];
        s.target(format!("router's added delay at p99, {w} watchers"), format!("{added:.2} ms"), "≤ 5 ms", added <= 5.0);
    }
    if let Some(name) = ctx.plot("watch-delay.png", |p| line_plot(p, "Watch delay p99 vs watchers", "watchers", "p99 ms", &plot)) {
        s.line(format!("![watch delay vs watchers](plots/{name})\n"));
    }
    // Throughput: many watchers at a high rate; a watcher that falls too far behind is ended.
    let (w, rate, count) = if ctx.smoke { (10, 200, 200) } else { (1000, 1000, 5000) };
    let bar = ctx.spinner(&format!("watch: {w} router watchers × {rate} events/s"));
    let ph = phase(&t, &etcd.endpoint, k, Path::Router, w, first, count, rate).await;
    bar.finish_and_clear();
    let delivered = ph.received as f64 / ph.seconds.max(1e-9);
    s.line(format!("**Throughput**: {w} watchers through the router while {count} ConfigMaps are written at {rate}/s: {} of {w} watchers received every event; {:.0} events/s delivered in total ({} events in {:.1} s).\n", ph.complete, delivered, ph.received, ph.seconds));
    s.target(format!("no watcher drops at {w} watchers × {rate} events/s"), format!("{}/{w} complete", ph.complete), "all", ph.complete == w);
    t.stop().await;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_event_index() {
        let line = br#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"w-0000042","namespace":"bench"}}}"#;
        assert_eq!(index_in(line), Some(42));
        assert_eq!(index_in(br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#), None);
    }
}
