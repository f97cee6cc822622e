//! watch: the delay from a write to its arrival at a watcher — through the router, directly
//! from one shard, and from a raw etcd watch — at 1, 100 and 1,000 watchers and a steady write
//! rate; then whether 1,000 router watchers keep up with 1,000 events/s.
//!
//! Writes are ConfigMaps put straight into etcd in shardplane's layout; a write's delay is its
//! arrival minus the moment its put was sent (so every path includes etcd's commit alike). The
//! one-shard path is a one-shard topology's shard (the whole range), so every path carries every
//! event.

use crate::Ctx;
use crate::cluster::{Topology, cpu_seconds, http};
use crate::report::{Goal, PairBudget, Paired, Section, Series, line_plot, percentile};
use futures::StreamExt;
use serde_json::json;
use shardplane_apimachinery::encode::object_bytes;
use shardplane_keyspace::{HashRange, ObjectKey, etcd_layout};
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
pub(crate) type Arrivals = Vec<(usize, Instant)>;

/// A watcher over HTTP: reads event lines until it has `want` events or `deadline` passes.
pub(crate) async fn http_watcher(resp: reqwest::Response, want: usize, deadline: Instant) -> Arrivals {
    let mut got = Vec::with_capacity(want);
    let mut buf: Vec<u8> = Vec::new();
    let mut body = resp.bytes_stream();
    while got.len() < want {
        let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline.into(), body.next()).await else {
            break;
        };
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
        let Ok(Ok(Some(resp))) = tokio::time::timeout_at(deadline.into(), stream.message()).await else {
            break;
        };
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
            shardplane_apimachinery::strategy::prepare_for_create(&info, &mut obj);
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
    /// Cores busy on average while it ran: the servers (etcd, router, shards), the benchmark.
    servers_cores: f64,
    bench_cores: f64,
    seconds: f64,
}

/// Opens `watchers` watchers on `path` (the router's URL or the one shard's; `None` for etcd),
/// writes `count` objects at `rate`/s, and collects.
async fn phase(base: Option<&str>, endpoint: &str, servers: &[u32], watchers: usize, first: usize, count: usize, rate: usize) -> Phase {
    let rv = shardplane_storage::Storage::connect(&[endpoint.to_owned()]).await.expect("etcd").current_revision().await.expect("rv");
    let want = count;
    let deadline = Instant::now() + Duration::from_secs(60) + Duration::from_secs_f64(count as f64 / rate as f64);
    let mut tasks = Vec::new();
    let c = http();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(watchers.max(1));
    for _ in 0..watchers {
        match base {
            None => tasks.push(tokio::spawn(etcd_watcher(endpoint.to_owned(), rv as i64 + 1, want, ready_tx.clone(), deadline))),
            Some(base) => {
                let r = c.get(format!("{base}/api/v1/namespaces/{NS}/configmaps?watch=1&resourceVersion={rv}")).send().await.expect("watch");
                assert!(r.status().is_success(), "watch: {}", r.status());
                tasks.push(tokio::spawn(http_watcher(r, want, deadline)));
            }
        }
    }
    if base.is_none() {
        for _ in 0..watchers {
            ready_rx.recv().await;
        }
    }
    let started = Instant::now();
    let cpu = || (servers.iter().map(|p| cpu_seconds(*p)).sum::<f64>(), cpu_seconds(std::process::id()));
    let cpu0 = cpu();
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
    let (cpu1, wall) = (cpu(), started.elapsed().as_secs_f64());
    Phase { delays, complete, received, servers_cores: (cpu1.0 - cpu0.0) / wall, bench_cores: (cpu1.1 - cpu0.1) / wall, seconds: last.duration_since(started).as_secs_f64() }
}

/// Rounds of the three paths at each watcher count (each round runs every path once, in an
/// order that rotates from round to round): at least this many, more while the target is
/// unsettled, up to the cap.
const ROUNDS: PairBudget = PairBudget { min: 12, cap: 20 };
/// The router may add at most this much to one shard's p99 delay.
const GOAL_ADDED_MS: f64 = 5.0;

pub async fn run(ctx: &Ctx) -> Section {
    let k: u32 = if ctx.smoke { 2 } else { 4 };
    let counts: Vec<usize> = if ctx.smoke { vec![1, 10] } else { vec![1, 100, 1000] };
    let (writes, rate) = if ctx.smoke { (30, 100) } else { (300, 100) };
    let budget = if ctx.smoke { PairBudget::fixed(2) } else { ctx.pairs(ROUNDS.min, ROUNDS.cap) };
    let goal = Goal::AtMost(GOAL_ADDED_MS);
    let etcd = crate::start_etcd().await;
    let mut s = Section::new("watch");
    s.line(format!("Delay from sending a write to its arrival, {writes} ConfigMap writes at {rate}/s straight to etcd per phase, for each number of watchers on each path: through the router over {k} shards; directly from one standalone shard (the whole range); a raw etcd watch. The router's topology and the standalone shard are up together on the same etcd for the whole scenario (both follow every write), and at each watcher count the three paths run in rounds, each round every path once in a rotating order, so that the paths see the same machine. Percentiles are over every (watcher, event) of a path's phases (the samples column counts them); the per-phase p99 column is the median phase's with the lowest and highest. The benchmark's own watchers run on the same 2 cores.\n"));
    s.line(format!("The target is the router's added delay: each round's router p99 minus the same round's one-shard p99. {}\n", crate::report::verdict_rule(budget, "round", "added delays")));
    let t = Topology::start(&ctx.router, &etcd.endpoint, k).await;
    let one = crate::cluster::StandaloneShard::start(&ctx.router, &etcd.endpoint).await;
    let servers: Vec<u32> = [etcd.pid(), t.router_pid(), one.pid()].into_iter().chain(t.shards.iter().map(|s| s.pid)).collect();
    let paths = [Path::Router, Path::Shard, Path::Etcd];
    let base = |path: Path| match path {
        Path::Router => Some(t.url.clone()),
        Path::Shard => Some(one.url.clone()),
        Path::Etcd => None,
    };
    let mut rows = Vec::new();
    let mut first = 0;
    // Per (path, watchers): each phase's p99, and the cores busy in each phase.
    let mut p99s = std::collections::HashMap::<(u8, usize), Vec<f64>>::new();
    let mut busy = std::collections::HashMap::<(u8, usize), Vec<f64>>::new();
    let mut added = Vec::new();
    for &w in &counts {
        let bar = ctx.spinner(&format!("watch: {w} watchers, rounds of the three paths"));
        let mut pooled: [Vec<f64>; 3] = Default::default();
        let mut complete = [0usize; 3];
        let mut round = 0;
        let mut rounds_added = Paired::default();
        while budget.more(round, rounds_added.settled(goal)) {
            for j in 0..paths.len() {
                let path = paths[(round + j) % paths.len()];
                let mut ph = phase(base(path).as_deref(), &etcd.endpoint, &servers, w, first, writes, rate).await;
                first += writes;
                p99s.entry((path as u8, w)).or_default().push(percentile(&mut ph.delays, 0.99));
                busy.entry((path as u8, w)).or_default().push(ph.servers_cores + ph.bench_cores);
                pooled[path as usize].extend(ph.delays);
                complete[path as usize] += ph.complete;
            }
            // This round's router p99 against the same round's one-shard p99.
            rounds_added.ratios.push(p99s[&(Path::Router as u8, w)][round] - p99s[&(Path::Shard as u8, w)][round]);
            round += 1;
        }
        let rounds = round;
        bar.finish_and_clear();
        for path in paths {
            let d = &mut pooled[path as usize];
            let phases = &p99s[&(path as u8, w)];
            let (lo, hi) = (phases.iter().copied().fold(f64::INFINITY, f64::min), phases.iter().copied().fold(0.0, f64::max));
            let cores = percentile(&mut busy[&(path as u8, w)].clone(), 0.5);
            rows.push(vec![
                path.name(k),
                w.to_string(),
                format!("{} ({rounds} × {})", d.len(), d.len() / rounds),
                format!("{:.2}", percentile(d, 0.5)),
                format!("{:.2}", percentile(d, 0.99)),
                format!("{:.2} ({lo:.2} to {hi:.2})", percentile(&mut phases.clone(), 0.5)),
                format!("{:.2}", percentile(d, 1.0)),
                format!("{}/{}", complete[path as usize], w * rounds),
                format!("{cores:.2}"),
            ]);
        }
        added.push((w, rounds_added));
    }
    s.table(&["path", "watchers", "samples (phases × each)", "p50 ms", "p99 ms", "p99 per phase: median (lowest to highest)", "max ms", "watchers with every event", "cores busy, median phase (all servers + benchmark)"], &rows);
    for (w, d) in &added {
        let i = d.interval();
        s.target(format!("router's added delay at p99, {w} watchers (router's phase p99 minus the same round's one-shard p99)"), format!("{:.2} ms ({:.2} to {:.2}, {} interval, {} rounds)", d.median(), i.lo, i.hi, i.confidence_label(), d.ratios.len()), format!("≤ {GOAL_ADDED_MS} ms, whole interval"), d.verdict(goal));
    }
    let mut profiles = String::new();
    let most = *counts.last().expect("watcher counts");
    if ctx.perf {
        // One more phase per server path at the most watchers, sampled, for where the time goes.
        for path in [Path::Router, Path::Shard] {
            let mut groups = vec![("etcd", vec![etcd.pid()]), ("benchmark's watchers", vec![std::process::id()])];
            match path {
                Path::Router => {
                    groups.insert(0, ("shards", t.shards.iter().map(|s| s.pid).collect()));
                    groups.insert(0, ("router", vec![t.router_pid()]));
                }
                _ => groups.insert(0, ("the shard", vec![one.pid()])),
            }
            let flats = crate::profile::during(&groups, phase(base(path).as_deref(), &etcd.endpoint, &servers, most, first, writes, rate)).await;
            first += writes;
            profiles.push_str(&crate::profile::render(&format!("{} at {most} watchers", path.name(k)), &flats));
        }
    }
    drop(one);
    t.stop().await;
    let median = |path: Path, m: &std::collections::HashMap<(u8, usize), Vec<f64>>| percentile(&mut m[&(path as u8, most)].clone(), 0.5);
    let (r, sh, e) = (median(Path::Router, &p99s), median(Path::Shard, &p99s), median(Path::Etcd, &p99s));
    let (rc, ec) = (median(Path::Router, &busy), median(Path::Etcd, &busy));
    let (fewest, added_fewest) = added.first().map(|(w, d)| (*w, d.median())).expect("watcher counts");
    let added_most = added.last().map_or(0.0, |(_, d)| d.median());
    s.line(format!(
        "**At {most} watchers**, the median phase's p99 is {r:.1} ms through the router, {sh:.1} ms from one shard and {e:.1} ms from a raw etcd watch, with {rc:.2} (router path) and {ec:.2} (etcd path) of the machine's {} cores busy, all servers and the benchmark together. \
         What the router adds is a wait: it releases an event only once every shard's in-band mark has passed it (RFC 0003), and a shard that had no event of its own is asked for a progress mark, which it gets from etcd, so most events wait one progress round trip. In this run that wait added {added_fewest:.2} ms at p99 with {fewest} watcher{} (a nearly idle machine) and {added_most:.2} ms with {most}, where the round trip queues behind the fan-out to every watcher on the busy cores. {}\
         What would cut it: shards sending a progress mark as soon as etcd confirms a revision they have no event for (etcd's progress notifications, pushed rather than asked for), and writing several events to a watcher in one socket write.\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if fewest == 1 { "" } else { "s" },
        if ctx.perf { "Where the router's time goes is in the profiles below. " } else { "" }
    ));
    s.line(&profiles);
    let plot: Vec<Series> = paths.iter().map(|&path| Series { label: format!("{} p99 (median phase)", path.name(k)), points: counts.iter().map(|&w| ((w as f64).log10(), percentile(&mut p99s[&(path as u8, w)].clone(), 0.5))).collect() }).collect();
    if let Some(name) = ctx.plot("watch-delay.png", |p| line_plot(p, "Watch delay p99 vs watchers", "watchers (log10: 0 = 1, 2 = 100, 3 = 1000)", "p99 ms", &plot)) {
        s.line(format!("![watch delay vs watchers](plots/{name})\n"));
    }
    // Throughput: many watchers at a high rate; a watcher that falls too far behind is ended.
    let (w, rate, count) = if ctx.smoke { (10, 200, 200) } else { (1000, 1000, 5000) };
    let bar = ctx.spinner(&format!("watch: {w} router watchers × {rate} events/s"));
    let t = Topology::start(&ctx.router, &etcd.endpoint, k).await;
    let servers: Vec<u32> = [etcd.pid(), t.router_pid()].into_iter().chain(t.shards.iter().map(|s| s.pid)).collect();
    let ph = phase(Some(&t.url), &etcd.endpoint, &servers, w, first, count, rate).await;
    bar.finish_and_clear();
    let delivered = ph.received as f64 / ph.seconds.max(1e-9);
    s.line(format!("**Throughput**: {w} watchers through the router while {count} ConfigMaps are written at {rate}/s: {} of {w} watchers received every event; {:.0} events/s delivered in total against {} offered ({} events in {:.1} s; the writes took {:.1} s).\n", ph.complete, delivered, w * rate, ph.received, ph.seconds, count as f64 / rate as f64));
    s.line(format!("While it ran, the servers kept {:.2} cores busy and the benchmark's own watchers {:.2}, of the machine's {}.\n", ph.servers_cores, ph.bench_cores, std::thread::available_parallelism().map_or(0, |n| n.get())));
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
