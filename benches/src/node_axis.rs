//! `bench cluster`: the node axis (RFC 0015). A simulated cluster of N nodes (each registers a
//! Node and its Lease, renews the Lease every 10 s, writes its NodeStatus at start and every
//! 5 minutes, watches its own pods and its own Node), a scheduler-like loop binding pods at a
//! fixed rate, each pod deleted a minute later, run against three topologies: one shard on
//! etcd, a router over four shards on etcd, and the same with the liveness tier (Leases and
//! Events on a store that commits in groups). For each, the largest N of a ladder whose write
//! p99 and watch-lag p99 both stay at or under a second; the ladder's steps run the
//! topologies one after another (A, B, C at each N). Reported: write and lag percentiles with
//! their sample counts, CPU per write and memory in each process, the main etcd's node-liveness
//! writes (counted by a watch on its Lease keys), and a capacity model for 100,000 nodes.

use crate::cluster::{self, Topology};
use crate::report::{percentile, Section};
use crate::Ctx;
use shardplane_keyspace::etcd_layout::{prefix_end, resource_prefix};
use shardplane_testkit::simulator::{self, Stats};
use shardplane_testkit::TestShard;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The sustained-load criterion: both p99s at or under this.
const P99_LIMIT: f64 = 1.0;
/// Node heartbeats, as kubelets send them.
const RENEW_EVERY: Duration = Duration::from_secs(10);
const STATUS_EVERY: Duration = Duration::from_secs(300);
/// Scheduler binds a second, and how long a pod lives.
const POD_RATE: f64 = 10.0;
const POD_LIFETIME: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setup {
    OneShard,
    Router,
    RouterWithTier,
}

impl Setup {
    fn name(self) -> &'static str {
        match self {
            Setup::OneShard => "one shard on etcd",
            Setup::Router => "router K=4 on etcd",
            Setup::RouterWithTier => "router K=4 + liveness tier",
        }
    }
}

/// One run at one N.
struct Run {
    setup: Setup,
    nodes: usize,
    writes: Vec<f64>,
    lag: Vec<f64>,
    refused: u64,
    /// Renewals acknowledged in the window.
    renewals: usize,
    /// Lease writes the main etcd recorded in the window.
    main_lease_writes: u64,
    /// (process, CPU seconds in the window, RSS bytes at the end).
    processes: Vec<(String, f64, f64)>,
    seconds: f64,
}

impl Run {
    fn p99(v: &[f64]) -> f64 {
        let mut v = v.to_vec();
        if v.is_empty() { f64::INFINITY } else { percentile(&mut v, 0.99) }
    }

    fn sustained(&self) -> bool {
        Self::p99(&self.writes) <= P99_LIMIT && Self::p99(&self.lag) <= P99_LIMIT && (self.refused as f64) <= 0.01 * self.writes.len() as f64
    }
}

/// The liveness tier: `shard-router --store-only` with grouped commits.
struct Tier {
    child: tokio::process::Child,
    _dir: TempDir,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Tier {
    async fn start(router: &std::path::Path) -> Self {
        use tokio::io::AsyncBufReadExt;
        let dir = TempDir(std::path::Path::new("/dev/shm").join(format!("shardplane-tier-{}", uuid::Uuid::new_v4())));
        let mut child = tokio::process::Command::new(router)
            .args(["--store-only", "--data-dir", dir.0.join("store").to_str().unwrap(), "--store-listen", "127.0.0.1:0", "--store-commit-interval-ms", "500"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the liveness tier");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let endpoint = loop {
            let line = lines.next_line().await.expect("tier output").expect("the tier listens");
            if let Some(e) = line.strip_prefix("listening on ") {
                break e.to_owned();
            }
        };
        std::fs::write(dir.0.join("contract.json"), serde_json::json!({"resources": [
            {"group": "coordination.k8s.io", "resource": "leases", "endpoints": [endpoint]},
            {"group": "", "resource": "events", "endpoints": [endpoint]},
        ]}).to_string()).expect("contract");
        Self { child, _dir: dir }
    }

    fn contract(&self) -> String {
        self._dir.0.join("contract.json").display().to_string()
    }
}

/// Counts the main etcd's changes to Lease keys until dropped.
async fn count_lease_writes(etcd: &str, stop: Arc<AtomicBool>) -> Arc<AtomicU64> {
    let count = Arc::new(AtomicU64::new(0));
    let storage = shardplane_storage::Storage::connect(&[etcd.to_owned()]).await.expect("etcd");
    let prefix = resource_prefix("coordination.k8s.io", "leases");
    let from = storage.current_revision().await.expect("revision");
    let mut watch = storage.watch_range(prefix.as_bytes(), &prefix_end(prefix.as_bytes()), from).await.expect("watch");
    let c = count.clone();
    tokio::spawn(async move {
        while !stop.load(Ordering::SeqCst) {
            match tokio::time::timeout(Duration::from_millis(500), watch.next()).await {
                Ok(Ok(Some(shardplane_storage::WatchItem::Events(e)))) => {
                    c.fetch_add(e.len() as u64, Ordering::SeqCst);
                }
                Ok(Ok(Some(_))) | Err(_) => {}
                _ => return,
            }
        }
    });
    count
}

async fn run_one(ctx: &Ctx, setup: Setup, nodes: usize, window: Duration) -> Run {
    // A smoke run compresses the heartbeat so that its warm-up is short.
    let renew_every = if ctx.smoke { Duration::from_secs(1) } else { RENEW_EVERY };
    let etcd = crate::start_etcd().await;
    let tier = if setup == Setup::RouterWithTier { Some(Tier::start(&ctx.router).await) } else { None };
    let k = if setup == Setup::OneShard { 1 } else { 4 };
    let mut flags: Vec<String> = Vec::new();
    if let Some(t) = &tier {
        flags.extend(["--storage-config".to_owned(), t.contract()]);
    }
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let topology = Topology::start_with(&ctx.router, &etcd.endpoint, k, &flag_refs).await;
    let addr = topology.url.trim_start_matches("http://").parse().expect("router address");
    let router = Arc::new(TestShard::attach(topology.url.clone(), addr));
    router.namespace(simulator::NAMESPACE).await;
    let bar = ctx.spinner(&format!("cluster: {} with {nodes} nodes: registering", setup.name()));
    simulator::register_nodes(&router, 0..nodes, 32).await;
    let (stats, stop) = (Arc::new(Stats::default()), Arc::new(AtomicBool::new(false)));
    let mut load = simulator::AbortOnDrop(Vec::new());
    for i in 0..nodes {
        load.0.push(tokio::spawn(simulator::kubelet(router.clone(), i, renew_every, STATUS_EVERY, stats.clone(), stop.clone())));
    }
    load.0.push(tokio::spawn(simulator::pod_churn(router.clone(), POD_RATE, nodes, POD_LIFETIME, stats.clone(), stop.clone())));
    // Warm-up: every kubelet renews once and its watches open.
    bar.set_message(format!("cluster: {} with {nodes} nodes: warming up", setup.name()));
    tokio::time::sleep(renew_every + Duration::from_secs(2)).await;
    *stats.writes.lock().unwrap() = Default::default();
    stats.watch_lag.lock().unwrap().clear();
    stats.refused.store(0, Ordering::SeqCst);
    let counting = Arc::new(AtomicBool::new(false));
    let main_leases = count_lease_writes(&etcd.endpoint, counting.clone()).await;
    let mut pids: Vec<(String, u32)> = vec![("router".to_owned(), topology.router_pid()), ("etcd".to_owned(), etcd.pid())];
    pids.extend(topology.shards.iter().enumerate().map(|(i, s)| (format!("shard {i}"), s.pid)));
    if let Some(t) = &tier {
        pids.push(("liveness tier".to_owned(), t.child.id().unwrap_or(0)));
    }
    let cpu0: Vec<f64> = pids.iter().map(|(_, p)| cluster::cpu_seconds(*p)).collect();
    let started = Instant::now();
    bar.set_message(format!("cluster: {} with {nodes} nodes: measuring {window:?}", setup.name()));
    tokio::time::sleep(window).await;
    let seconds = started.elapsed().as_secs_f64();
    let processes = pids.iter().zip(&cpu0).map(|((n, p), c0)| (n.clone(), cluster::cpu_seconds(*p) - c0, cluster::rss_bytes(*p))).collect();
    let writes = stats.all_writes();
    let renewals = stats.writes.lock().unwrap().get("lease").map_or(0, Vec::len);
    let run = Run { setup, nodes, lag: stats.watch_lag.lock().unwrap().clone(), refused: stats.refused.load(Ordering::SeqCst), renewals, main_lease_writes: main_leases.load(Ordering::SeqCst), writes, processes, seconds };
    stop.store(true, Ordering::SeqCst);
    counting.store(true, Ordering::SeqCst);
    drop(load);
    bar.finish_and_clear();
    topology.stop().await;
    drop(tier);
    run
}

fn fmt_p(v: &[f64], p: f64) -> String {
    let mut v = v.to_vec();
    if v.is_empty() { "—".to_owned() } else { format!("{:.0} ms", percentile(&mut v, p) * 1000.0) }
}

/// Runs the ladder and reports.
pub async fn run(ctx: &Ctx) -> Section {
    let (ladder, window): (Vec<usize>, Duration) = if ctx.smoke { (vec![10], Duration::from_secs(3)) } else if ctx.objects.is_empty() { (vec![250, 500, 1000, 2000, 4000], Duration::from_secs(40)) } else { (ctx.objects.clone(), Duration::from_secs(40)) };
    let setups = [Setup::OneShard, Setup::Router, Setup::RouterWithTier];
    let mut runs: Vec<Run> = Vec::new();
    let mut failed = [false; 3];
    for &n in &ladder {
        for (i, &setup) in setups.iter().enumerate() {
            if failed[i] {
                continue;
            }
            let r = run_one(ctx, setup, n, window).await;
            failed[i] = !r.sustained();
            runs.push(r);
        }
        if failed.iter().all(|f| *f) {
            break;
        }
    }
    report(ctx, &runs, window)
}

fn report(ctx: &Ctx, runs: &[Run], window: Duration) -> Section {
    let mut s = Section::new("node axis");
    s.line(format!(
        "A simulated cluster (`bench cluster`, RFC 0015): N nodes, each renewing its Lease every {}s, writing its NodeStatus at start and every {} min, watching its own pods (`spec.nodeName`) and its own Node; a scheduler creating and binding {POD_RATE} pods/s, each deleted after {} s. Each run: fresh etcd, the topology, registration, one heartbeat period of warm-up, then {} s measured. The ladder runs the three topologies one after another at each N. Write latency is every write the simulator made (renewals, status, pod creates, bindings, deletes); watch lag is from a binding's answer to the kubelet's watch event. The simulator runs on the same two cores.\n",
        RENEW_EVERY.as_secs(),
        STATUS_EVERY.as_secs() / 60,
        POD_LIFETIME.as_secs(),
        window.as_secs()
    ));
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.setup.name().to_owned(),
                r.nodes.to_string(),
                format!("{} / {} (n={})", fmt_p(&r.writes, 0.5), fmt_p(&r.writes, 0.99), r.writes.len()),
                format!("{} / {} (n={})", fmt_p(&r.lag, 0.5), fmt_p(&r.lag, 0.99), r.lag.len()),
                r.refused.to_string(),
                format!("{:.0}", r.renewals as f64 / r.seconds),
                format!("{:.1}", r.main_lease_writes as f64 / r.seconds),
                if r.sustained() { "yes".into() } else { "no".into() },
            ]
        })
        .collect();
    s.table(&["topology", "nodes", "write p50 / p99", "watch lag p50 / p99", "refused", "renewals/s", "main etcd lease writes/s", "sustained"], &rows);
    let largest = |setup: Setup| runs.iter().filter(|r| r.setup == setup && r.sustained()).map(|r| r.nodes).max().unwrap_or(0);
    let (a, b, c) = (largest(Setup::OneShard), largest(Setup::Router), largest(Setup::RouterWithTier));
    s.line(format!("Largest N sustained (write p99 and watch-lag p99 ≤ {P99_LIMIT} s, under 1% refused): one shard {a}, router K=4 {b}, router K=4 + liveness tier {c}.\n"));
    let ladder_top = runs.iter().map(|r| r.nodes).max().unwrap_or(0);
    let ratio = c as f64 / a.max(b).max(1) as f64;
    let at_top = if c == ladder_top { ", at least: the ladder's top" } else { "" };
    s.target("liveness tier: nodes sustained vs the better of one shard and router K=4", format!("{ratio:.2}× ({c} vs {}{at_top})", a.max(b)), "≥ 2×", ratio >= 2.0);
    let tier_main: u64 = runs.iter().filter(|r| r.setup == Setup::RouterWithTier).map(|r| r.main_lease_writes).sum();
    s.target("main etcd's node-liveness writes with the tier", format!("{tier_main} in all tier runs"), "0", tier_main == 0);
    // CPU per write by process, at each topology's largest sustained N.
    let mut cpu_rows = Vec::new();
    for setup in [Setup::OneShard, Setup::Router, Setup::RouterWithTier] {
        if let Some(r) = runs.iter().filter(|r| r.setup == setup && r.sustained()).max_by_key(|r| r.nodes) {
            for (p, cpu, rss) in &r.processes {
                cpu_rows.push(vec![setup.name().to_owned(), r.nodes.to_string(), p.clone(), format!("{:.0} µs", cpu / r.writes.len().max(1) as f64 * 1e6), format!("{:.2}", cpu / r.seconds), crate::report::mib(*rss)]);
            }
        }
    }
    if !cpu_rows.is_empty() {
        s.line("CPU per write (all writes in the window) and memory, by process, at each topology's largest sustained N:\n");
        s.table(&["topology", "nodes", "process", "CPU per write", "cores busy", "RSS"], &cpu_rows);
    }
    s.line(capacity_model(runs));
    let _ = ctx;
    s
}

/// Cores for 100,000 nodes (10,000 renewals/s) from the measured CPU per write, with and
/// without the tier: each process's CPU per write at the largest sustained N, scaled to the
/// renewal rate (renewals are most of the writes there).
fn capacity_model(runs: &[Run]) -> String {
    let best = |setup: Setup| runs.iter().filter(|r| r.setup == setup && r.sustained()).max_by_key(|r| r.nodes);
    let mut out = String::from("**Capacity model for 100,000 nodes** (10,000 renewals/s; each process's measured CPU per write times that rate; watches add memory, not CPU, while idle):\n\n");
    for setup in [Setup::Router, Setup::RouterWithTier] {
        let Some(r) = best(setup) else {
            out.push_str(&format!("- {}: no sustained run to model from.\n", setup.name()));
            continue;
        };
        let per_write = |name: &str| r.processes.iter().filter(|(p, _, _)| p.starts_with(name)).map(|(_, c, _)| c).sum::<f64>() / r.writes.len().max(1) as f64;
        let cores = |name: &str| per_write(name) * 10_000.0;
        out.push_str(&format!(
            "- {} (from N={}): router {:.1} cores, shards {:.1} cores in all, etcd {:.1} cores{}.\n",
            setup.name(),
            r.nodes,
            cores("router"),
            cores("shard"),
            cores("etcd"),
            if setup == Setup::RouterWithTier { format!(", liveness tier {:.1} cores", cores("liveness tier")) } else { String::new() }
        ));
    }
    out.push('\n');
    out
}
