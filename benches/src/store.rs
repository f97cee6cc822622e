//! store: the embedded store (RFC 0007) against etcd 3.5, both with their data on tmpfs, in one
//! run. For each: write throughput straight on the store (etcd-client puts of 1 KiB values,
//! [`CONCURRENCY`] in flight) and watch throughput (prefix watchers, the time until every one
//! has every event of a burst of puts); then the same through the router over K shards
//! (ConfigMap creates, updates and deletes; HTTP watchers of a namespace during a burst of
//! creates); then the resident memory holding the keys. The backends alternate round by round,
//! so drift on the machine falls on both alike.

use crate::Ctx;
use crate::cluster::{Topology, cpu_seconds, http, rss_bytes};
use crate::report::{Goal, PairBudget, Paired, Section, Verdict, mib, percentile};
use crate::write::{CONCURRENCY, rate, router_round};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The write scenario's namespace: its ConfigMaps are what `router_round` writes.
use crate::write::NS;
/// Watchers per watch round, on the raw store and through the router alike.
const WATCHERS: usize = 10;

/// Which store a round runs on.
#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Etcd,
    Embedded,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Etcd => "etcd 3.5",
            Backend::Embedded => "embedded store",
        }
    }
}

/// One backend's system: the store's endpoint, the router over it, and the pids whose CPU
/// and memory are the store's.
struct System {
    etcd: Option<shardplane_testkit::Etcd>,
    topology: Topology,
    endpoint: String,
    data_dir: Option<PathBuf>,
}

impl System {
    async fn start(ctx: &Ctx, backend: Backend, k: u32) -> Self {
        match backend {
            Backend::Etcd => {
                let etcd = crate::start_etcd().await;
                let topology = Topology::start(&ctx.router, &etcd.endpoint, k).await;
                Self { endpoint: etcd.endpoint.clone(), etcd: Some(etcd), topology, data_dir: None }
            }
            Backend::Embedded => {
                let dir = PathBuf::from("/dev/shm").join(format!("shardplane-bench-store-{}", uuid::Uuid::new_v4()));
                let topology = Topology::start_embedded(&ctx.router, &dir, k).await;
                let endpoint = topology.store.clone().expect("the router prints its embedded store's endpoint");
                Self { etcd: None, topology, endpoint, data_dir: Some(dir) }
            }
        }
    }

    /// The process holding the data: etcd, or the router that embeds the store.
    fn store_pid(&self) -> u32 {
        self.etcd.as_ref().map_or(self.topology.router_pid(), |e| e.pid())
    }

    async fn stop(self) {
        self.topology.stop().await;
        if let Some(dir) = self.data_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn value(i: usize, round: usize) -> Vec<u8> {
    format!("{round:04}-{i:07}-{}", "v".repeat(1000)).into_bytes()
}

/// n puts of ~1 KiB under `prefix` at CONCURRENCY in flight: puts per second.
async fn put_rate(client: &etcd_client::Client, prefix: &str, n: usize, round: usize) -> f64 {
    rate(n, |i| {
        let mut kv = client.kv_client();
        let key = format!("{prefix}{i:07}");
        async move {
            kv.put(key, value(i, round), None).await.expect("put");
        }
    })
    .await
}

/// WATCHERS prefix watches, then n puts under the prefix: events delivered per second over all
/// watchers, from the first put until the last watcher has its n-th event.
async fn raw_watch_rate(client: &etcd_client::Client, prefix: &str, n: usize) -> f64 {
    let mut streams = Vec::new();
    for _ in 0..WATCHERS {
        let (w, mut stream) = client.watch_client().watch(prefix, Some(etcd_client::WatchOptions::new().with_prefix())).await.expect("watch").split();
        // A watch is registered once its `created` response has come; puts wait for it.
        let created = stream.message().await.expect("watch stream").expect("watch open");
        assert!(created.created() && created.events().is_empty(), "the first response creates the watch");
        streams.push((w, stream));
    }
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let readers: Vec<_> = streams
        .into_iter()
        .map(|(w, mut stream)| {
            tokio::spawn(async move {
                // The watcher handle lives as long as its stream is read.
                let _watcher = w;
                let mut got = 0;
                while got < n {
                    let msg = tokio::time::timeout_at(deadline, stream.message()).await.expect("every event within 300 s").expect("watch stream").expect("watch open");
                    got += msg.events().len();
                }
                Instant::now()
            })
        })
        .collect();
    put_rate(client, prefix, n, 0).await;
    let mut last = start;
    for r in readers {
        last = last.max(r.await.expect("watch reader"));
    }
    (WATCHERS * n) as f64 / (last - start).as_secs_f64()
}

/// WATCHERS HTTP watches of the namespace's ConfigMaps through the router, then n creates:
/// events delivered per second over all watchers, from the first create until the last watcher
/// has its n-th event.
async fn router_watch_rate(c: &reqwest::Client, url: &str, n: usize, round: usize) -> f64 {
    let base = format!("{url}/api/v1/namespaces/{NS}/configmaps");
    let list: serde_json::Value = c.get(format!("{base}?limit=1")).send().await.expect("list").json().await.expect("list body");
    let rv = list["metadata"]["resourceVersion"].as_str().expect("list resourceVersion").to_owned();
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let resp = c.get(format!("{base}?watch=1&resourceVersion={rv}")).send().await.expect("watch");
        assert!(resp.status().is_success(), "watch: {}", resp.status());
        watchers.push(tokio::spawn(crate::watch::http_watcher(resp, n, deadline)));
    }
    let start = Instant::now();
    rate(n, |i| {
        let c = c.clone();
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("w-{:07}", round * n + i), "namespace": NS}, "data": {"v": "x".repeat(1000)}});
        let base = base.clone();
        async move {
            let r = c.post(&base).json(&body).send().await.expect("create");
            assert!(r.status().is_success(), "create: {}", r.status());
        }
    })
    .await;
    let mut last = start;
    for w in watchers {
        let arrivals = w.await.expect("watcher");
        assert_eq!(arrivals.len(), n, "a router watcher missed events");
        last = last.max(arrivals.iter().map(|(_, t)| *t).max().unwrap_or(start));
    }
    (WATCHERS * n) as f64 / (last - start).as_secs_f64()
}

/// Both targets: the embedded store gives at least 0.8× etcd's rate through the router.
const GOAL: Goal = Goal::AtLeast(0.8);

/// What one backend measured, each a list of rounds.
#[derive(Default)]
struct Figures {
    puts: Vec<f64>,
    raw_watch: Vec<f64>,
    creates: Vec<f64>,
    updates: Vec<f64>,
    deletes: Vec<f64>,
    router_watch: Vec<f64>,
    /// CPU seconds of the store's process per 1,000 raw puts.
    put_cpu: Vec<f64>,
    /// Resident memory (bytes) of the store's process after `keys` more keys were put, and just
    /// before.
    rss: (f64, f64),
    keys: usize,
}

pub async fn run(ctx: &Ctx) -> Section {
    let n = if ctx.smoke { 200 } else { 5_000 };
    let budget = if ctx.smoke { PairBudget::fixed(2) } else { ctx.pairs(12, 24) };
    let keys = if ctx.smoke { 1_000 } else { 50_000 };
    let k = 2;
    let c = http();
    let backends = [Backend::Etcd, Backend::Embedded];
    let mut systems = Vec::new();
    for b in backends {
        systems.push(System::start(ctx, b, k).await);
    }
    let mut figures: Vec<Figures> = backends.iter().map(|_| Figures::default()).collect();
    for s in &systems {
        let ns = c.post(format!("{}/api/v1/namespaces", s.topology.url)).json(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).send().await.expect("namespace");
        assert!(ns.status().is_success(), "namespace: {}", ns.status());
    }
    let bar = ctx.bar((budget.min * backends.len()) as u64, "store: rounds on etcd and on the embedded store");
    // Each round's embedded / etcd ratio of one measure.
    let paired = |figures: &[Figures], get: fn(&Figures) -> &Vec<f64>| Paired { ratios: get(&figures[1]).iter().zip(get(&figures[0])).map(|(m, e)| m / e).collect() };
    let settled = |figures: &[Figures]| [paired(figures, |f| &f.creates), paired(figures, |f| &f.router_watch)].iter().all(|p| p.settled(GOAL));
    let mut round = 0;
    while budget.more(round, settled(&figures)) {
        if round >= budget.min {
            bar.inc_length(backends.len() as u64);
        }
        // etcd first in even rounds, the embedded store first in odd ones.
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let (s, f) = (&systems[i], &mut figures[i]);
            let client = etcd_client::Client::connect([s.endpoint.as_str()], None).await.expect("store client");
            let cpu = cpu_seconds(s.store_pid());
            f.puts.push(put_rate(&client, "/bench-store/puts/", n, round).await);
            f.put_cpu.push((cpu_seconds(s.store_pid()) - cpu) * 1000.0 / n as f64);
            f.raw_watch.push(raw_watch_rate(&client, &format!("/bench-store/watch-{round}/"), n).await);
            let [create, update, delete] = router_round(&c, &format!("{}/api/v1/namespaces/{NS}/configmaps", s.topology.url), n).await;
            f.creates.push(create);
            f.updates.push(update);
            f.deletes.push(delete);
            f.router_watch.push(router_watch_rate(&c, &s.topology.url, n, round).await);
            bar.inc(1);
        }
        round += 1;
    }
    let rounds = round;
    bar.finish_and_clear();
    // Memory: `keys` more keys of ~1 KiB (each put once), then the store process's resident set.
    for (s, f) in systems.iter().zip(&mut figures) {
        let client = etcd_client::Client::connect([s.endpoint.as_str()], None).await.expect("store client");
        f.rss.1 = rss_bytes(s.store_pid());
        put_rate(&client, "/bench-store/memory/", keys, 0).await;
        f.rss.0 = rss_bytes(s.store_pid());
        f.keys = keys;
    }
    for s in systems {
        s.stop().await;
    }

    let med = |v: &[f64]| percentile(&mut v.to_vec(), 0.5);
    let mut sec = Section::new("embedded store vs etcd");
    sec.line(format!(
        "The router's embedded store (RFC 0007, `cargo run --bin shard-router` with no `--etcd-endpoints`) against etcd 3.5, both with their data on /dev/shm, alternating round by round ({rounds} rounds, etcd first in one round and the embedded store first in the next; each backend's figure is its median round, each ratio the median of the rounds' ratios with its interval). \
         Straight on the store: {n} puts of ~1 KiB at {CONCURRENCY} in flight, then {WATCHERS} prefix watches during {n} more puts (events delivered per second, all watchers together, from the first put to the last watcher's last event). \
         Through the router over {k} shards: {n} ConfigMaps (~1 KiB) created, updated and deleted at {CONCURRENCY} in flight, then {WATCHERS} HTTP watches of the namespace during {n} creates (measured the same way). \
         With etcd, the store is another process; the embedded store runs inside the router process, so on this 2-core machine it shares the router's CPU. {}\n",
        crate::report::verdict_rule(budget, "round", "ratios")
    ));
    let paired = |get: fn(&Figures) -> &Vec<f64>| paired(&figures, get);
    let rows: Vec<(&str, fn(&Figures) -> &Vec<f64>)> = vec![
        ("puts/s on the store", |f| &f.puts),
        ("watch events/s on the store", |f| &f.raw_watch),
        ("creates/s through the router", |f| &f.creates),
        ("updates/s through the router", |f| &f.updates),
        ("deletes/s through the router", |f| &f.deletes),
        ("watch events/s through the router", |f| &f.router_watch),
    ];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|(what, get)| {
            let (e, m) = (med(get(&figures[0])), med(get(&figures[1])));
            vec![(*what).to_owned(), format!("{e:.0}"), format!("{m:.0}"), paired(*get).describe_times()]
        })
        .collect();
    sec.table(&["measure", backends[0].name(), backends[1].name(), "embedded / etcd: median of the rounds' ratios (interval)"], &table);
    sec.line(format!(
        "CPU of the store's process per 1,000 puts (user + system): etcd {:.2} s, embedded store (the router process) {:.2} s.\n",
        med(&figures[0].put_cpu),
        med(&figures[1].put_cpu)
    ));
    let (etcd, embedded) = (&figures[0], &figures[1]);
    sec.line(format!(
        "Memory: after the rounds above, {} more keys of ~1 KiB were put once each (nothing compacted). The router process with the embedded store went from {} to {} resident: {:.0} bytes per key, the bound to plan with, since the embedded store keeps every version since the last compaction in memory (RFC 0007; the router's shards compact every 5 minutes by default). etcd went from {} to {} (its values live in a memory-mapped file and its Go heap is collected in between, so its difference is no per-key figure).\n",
        embedded.keys,
        mib(embedded.rss.1),
        mib(embedded.rss.0),
        (embedded.rss.0 - embedded.rss.1) / embedded.keys as f64,
        mib(etcd.rss.1),
        mib(etcd.rss.0),
    ));
    let (puts, creates, watch) = (paired(|f| &f.puts), paired(|f| &f.creates), paired(|f| &f.router_watch));
    sec.line(format!(
        "Straight on the store, the embedded store takes {:.2}× etcd's puts per second: each write is its own redb transaction, committed before it is acknowledged and while it holds the store's lock, where etcd commits its backend in batches (every 100 ms or 10,000 writes) behind a write-ahead log. Through the router, where each write also costs HTTP, JSON and the shards' work, that difference is {:.2}× on creates. The targets are on the path users take: the router.\n",
        puts.median(),
        creates.median()
    ));
    let (creates_verdict, watch_verdict) = (creates.verdict(GOAL), watch.verdict(GOAL));
    if creates_verdict != Verdict::Met {
        let (below, rounds) = (creates.ratios.iter().filter(|&&r| r < 0.8).count(), creates.ratios.len());
        let (e_cpu, m_cpu) = (med(&etcd.put_cpu), med(&embedded.put_cpu));
        sec.line(format!(
            "**Why the create target is not met** ({}: {below} of {rounds} rounds below 0.8×). {} {}\n",
            creates.describe_times(),
            if puts.verdict(GOAL) == Verdict::Met {
                format!("Straight on the store the embedded store keeps up ({}), so its own commits are not what falls short; through the router it shares the router's process and threads with the HTTP, JSON and merge work of every request.", puts.describe_times())
            } else {
                format!("Straight on the store the embedded store's puts fall short too ({}): its commits, one redb transaction per write under the store's lock, are the first cost to cut.", puts.describe_times())
            },
            if m_cpu > e_cpu {
                format!("Its commits also cost the router process {m_cpu:.2} s of CPU per 1,000 puts where etcd spends {e_cpu:.2} s in a process of its own, CPU the router then lacks on these 2 shared cores.")
            } else {
                format!("Its commits cost {m_cpu:.2} s of CPU per 1,000 puts, no more than etcd's {e_cpu:.2} s, so the rounds below are the router's share of the cores, not the store's cost.")
            }
        ));
    }
    if watch_verdict != Verdict::Met {
        let raw_watch = paired(|f| &f.raw_watch).median();
        sec.line(format!(
            "**Why the watch target is not met** ({}). The embedded store runs inside the router process: every event it sends to the shards' watches is encoded and written by the same process that then merges the shards' streams and writes each event to every client watch, so on this machine the store's dispatch and the router's fan-out take turns on the same threads, where etcd's dispatch is a process of its own (though on the same 2 cores). Straight on the store, its watch delivery is {raw_watch:.2}× etcd's{}; serving the store from its own process (`--store-listen` is the first half of that) would give the router its threads back.\n",
            watch.describe_times(),
            if raw_watch >= 0.8 { ", so the store's dispatch itself is not what falls short" } else { ", so the store's own dispatch falls short as well" },
            raw_watch = raw_watch
        ));
    }
    sec.target("creates/s through the router, embedded store vs etcd", creates.describe_times(), "≥ 0.8×, whole interval", creates_verdict);
    sec.target("watch events/s through the router, embedded store vs etcd", watch.describe_times(), "≥ 0.8×, whole interval", watch_verdict);
    sec
}
