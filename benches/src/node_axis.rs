//! `bench cluster`: the node axis (RFC 0015). A simulated cluster of N nodes (each registers a
//! Node and its Lease, renews the Lease every 10 s, writes its NodeStatus at start and every
//! 5 minutes, watches its own pods and its own Node), a scheduler-like loop binding pods at a
//! fixed rate, each pod deleted a minute later, run against three topologies: one shard on
//! etcd, a router over four shards on etcd, and the same with the liveness tier (Leases and
//! Events on a store that commits in groups). Two ladders of N: one where every process
//! shares the machine, one where the stores run as production runs them (the main etcd three
//! members on disk, the tier on the same disk) and each store process gets a fixed CPU budget
//! (a store's hosts do not grow with the API layer); each runs the topologies one after
//! another (A, B, C at each N) and finds the largest N whose write p99 and watch-lag p99
//! both stay at or under a second; a rung a topology fails is tried once more before the
//! topology leaves the ladder (one collapse is not its capacity: RFC 0015).
//! Reported: write and lag percentiles with their sample counts, CPU per write and memory in
//! each process, the main etcd's node-liveness writes (counted by a watch on its Lease keys),
//! each process's CPU per renewal, pod write and open watch, and a capacity model for 100,000
//! nodes from them.

use crate::cluster::{self, Topology};
use crate::report::{Section, Verdict, percentile};
use crate::Ctx;
use shardplane_keyspace::etcd_layout::{prefix_end, resource_prefix};
use shardplane_testkit::simulator::{self, Stats};
use shardplane_testkit::{EtcdCluster, TestShard};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The sustained-load criterion: both p99s at or under this.
const P99_LIMIT: f64 = 1.0;
/// Tries a topology gets at a rung: it sustains N when one of them passes. Near a store's
/// limit one try collapses and the next holds, so a single failed try moved a topology's
/// largest N by a rung from run to run (RFC 0015, "Measured").
const TRIES_PER_RUNG: u32 = 2;
/// Node heartbeats, as kubelets send them.
const RENEW_EVERY: Duration = Duration::from_secs(10);
const STATUS_EVERY: Duration = Duration::from_secs(300);
/// How long every kubelet's two watches may take to open.
const WATCHES_OPEN: Duration = Duration::from_secs(120);
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

    /// Its name for `--topologies`.
    fn flag(self) -> &'static str {
        match self {
            Setup::OneShard => "one-shard",
            Setup::Router => "router",
            Setup::RouterWithTier => "router-tier",
        }
    }
}

/// One run at one N.
struct Run {
    setup: Setup,
    nodes: usize,
    /// Which try at this rung (1 or more: [`TRIES_PER_RUNG`]).
    attempt: u32,
    /// Each store's CPU budget (cores), or None: every process shares the machine.
    budget: Option<f64>,
    /// Kubelet watches open when the warm-up began (2 per node when all opened in time).
    watches_open: u64,
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
    /// What a renewal, a pod write and an open watch cost each process (shared cores only).
    costs: Vec<Cost>,
}

/// One process's CPU per cause, from [`split_costs`].
struct Cost {
    process: String,
    /// CPU seconds per renewal.
    renewal: f64,
    /// CPU seconds per pod write (create, binding or delete).
    pod_write: f64,
    /// Cores per watch held open (the process's fixed background work spread over them).
    watch: f64,
}

impl Run {
    fn sustained(&self) -> bool {
        let p99 = |v: &[f64]| quantile(v, 0.99).unwrap_or(f64::INFINITY);
        self.watches_open == 2 * self.nodes as u64 && p99(&self.writes) <= P99_LIMIT && p99(&self.lag) <= P99_LIMIT && (self.refused as f64) <= 0.01 * self.writes.len() as f64
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
    /// The tier with its data under `base`.
    async fn start(router: &std::path::Path, base: &std::path::Path) -> Self {
        use tokio::io::AsyncBufReadExt;
        let dir = TempDir(base.join(format!("shardplane-tier-{}", uuid::Uuid::new_v4())));
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

/// The main etcd: one member on tmpfs (shared cores), or as production runs it (a budget).
enum MainStore {
    One(shardplane_testkit::Etcd),
    Production(EtcdCluster),
}

impl MainStore {
    fn endpoints(&self) -> String {
        match self {
            MainStore::One(e) => e.endpoint.clone(),
            MainStore::Production(c) => c.endpoints_flag(),
        }
    }

    fn first_endpoint(&self) -> &str {
        match self {
            MainStore::One(e) => &e.endpoint,
            MainStore::Production(c) => &c.endpoints[0],
        }
    }

    /// (name, pid) of each of its processes.
    fn processes(&self) -> Vec<(String, u32)> {
        match self {
            MainStore::One(e) => vec![("etcd".to_owned(), e.pid())],
            MainStore::Production(c) => c.pids().into_iter().enumerate().map(|(i, p)| (format!("etcd member {i}"), p)).collect(),
        }
    }
}

/// Members of the main etcd when it runs as production runs it.
const ETCD_MEMBERS: usize = 3;

/// Where stores run as production runs them keep their data: on the workspace's disk (a real
/// device that fsyncs), not tmpfs.
fn disk_base() -> std::path::PathBuf {
    let dir = cluster::workspace_root().join("target/node-axis/stores");
    std::fs::create_dir_all(&dir).expect("the stores' directory");
    dir
}

/// One run. With `budget`, the stores run as production runs them and each store process
/// gets that many cores: the main etcd is [`ETCD_MEMBERS`] members with their data on disk,
/// each in its own group; the tier one process, its data on the same disk, in its own.
/// Without, one etcd member and the tier keep their data on tmpfs and share the machine.
/// Err: the budget cannot be set here.
async fn run_one(ctx: &Ctx, setup: Setup, nodes: usize, window: Duration, budget: Option<f64>) -> Result<Run, String> {
    // A smoke run compresses the heartbeat so that its warm-up is short.
    let renew_every = if ctx.smoke { Duration::from_secs(1) } else { RENEW_EVERY };
    let etcd = match budget {
        Some(_) => {
            if shardplane_testkit::embedded_store() {
                return Err("the store is embedded in the benchmark's own process (SHARDPLANE_STORE=embedded)".into());
            }
            MainStore::Production(EtcdCluster::start(ETCD_MEMBERS, &disk_base(), &["--quota-backend-bytes", "8589934592"]).await)
        }
        None => MainStore::One(crate::start_etcd().await),
    };
    let tier_base = if budget.is_some() { disk_base() } else { std::path::PathBuf::from("/dev/shm") };
    let tier = if setup == Setup::RouterWithTier { Some(Tier::start(&ctx.router, &tier_base).await) } else { None };
    // Dropped at the end after the processes in them: a group is removed only when empty.
    let mut groups = Vec::new();
    if let Some(cores) = budget {
        let stores = etcd.processes().into_iter().map(|(_, p)| p).chain(tier.iter().map(|t| t.child.id().unwrap_or(0)));
        for pid in stores {
            let group = cluster::CpuBudget::new(cores)?;
            group.add(pid)?;
            groups.push(group);
        }
    }
    let k = if setup == Setup::OneShard { 1 } else { 4 };
    let mut flags: Vec<String> = Vec::new();
    if let Some(t) = &tier {
        flags.extend(["--storage-config".to_owned(), t.contract()]);
    }
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let topology = Topology::start_with(&ctx.router, &etcd.endpoints(), k, &flag_refs).await;
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
    // Warm-up: every kubelet's watches open (a topology that cannot open them within
    // WATCHES_OPEN does not sustain N), then every kubelet renews once.
    bar.set_message(format!("cluster: {} with {nodes} nodes: opening watches", setup.name()));
    let opening = Instant::now();
    while stats.watches_open.load(Ordering::SeqCst) < 2 * nodes as u64 && opening.elapsed() < WATCHES_OPEN {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let watches_open = stats.watches_open.load(Ordering::SeqCst);
    bar.set_message(format!("cluster: {} with {nodes} nodes: warming up", setup.name()));
    tokio::time::sleep(renew_every + Duration::from_secs(2)).await;
    *stats.writes.lock().unwrap() = Default::default();
    stats.watch_lag.lock().unwrap().clear();
    stats.refused.store(0, Ordering::SeqCst);
    let counting = Arc::new(AtomicBool::new(false));
    let main_leases = count_lease_writes(etcd.first_endpoint(), counting.clone()).await;
    let mut pids: Vec<(String, u32)> = vec![("router".to_owned(), topology.router_pid())];
    pids.extend(etcd.processes());
    pids.extend(topology.shards.iter().enumerate().map(|(i, s)| (format!("shard {i}"), s.pid)));
    if let Some(t) = &tier {
        pids.push(("liveness tier".to_owned(), t.child.id().unwrap_or(0)));
    }
    // The simulated kubelets and scheduler, sharing the machine with what they measure.
    pids.push(("simulator".to_owned(), std::process::id()));
    let cpu0: Vec<f64> = pids.iter().map(|(_, p)| cluster::cpu_seconds(*p)).collect();
    let started = Instant::now();
    bar.set_message(format!("cluster: {} with {nodes} nodes: measuring {window:?}", setup.name()));
    tokio::time::sleep(window).await;
    let seconds = started.elapsed().as_secs_f64();
    save_metrics(&topology, setup, nodes, budget).await;
    let processes: Vec<(String, f64, f64)> = pids.iter().zip(&cpu0).map(|((n, p), c0)| (n.clone(), cluster::cpu_seconds(*p) - c0, cluster::rss_bytes(*p))).collect();
    let writes = stats.all_writes();
    for (what, v) in stats.writes.lock().unwrap().iter() {
        eprintln!("cluster: {} N={nodes}: {what}: p50 {} p99 {} max {} (n={})", setup.name(), fmt_p(v, 0.5), fmt_p(v, 0.99), fmt_p(v, 1.0), v.len());
    }
    let renewals = stats.writes.lock().unwrap().get("lease").map_or(0, Vec::len);
    let (lag, refused, main_lease_writes) = (stats.watch_lag.lock().unwrap().clone(), stats.refused.load(Ordering::SeqCst), main_leases.load(Ordering::SeqCst));
    let costs = if budget.is_none() {
        bar.set_message(format!("cluster: {} with {nodes} nodes: splitting costs", setup.name()));
        let full_cpu: Vec<f64> = processes.iter().map(|(_, c, _)| c / seconds).collect();
        split_costs(&stats, &pids, &full_cpu, renewals as f64 / seconds, 2 * nodes, window / 2).await
    } else {
        Vec::new()
    };
    let run = Run { setup, nodes, attempt: 1, budget, watches_open, lag, refused, renewals, main_lease_writes, writes, processes, seconds, costs };
    stop.store(true, Ordering::SeqCst);
    counting.store(true, Ordering::SeqCst);
    drop(load);
    bar.finish_and_clear();
    topology.stop().await;
    drop(tier);
    drop(etcd);
    drop(groups);
    Ok(run)
}

/// After the full window (each process's CPU rate `full_cpu`, in cores in `pids` order, while
/// `full_renewals` renewals a second were made), the same cluster measured twice more for `each`: with
/// renewals paused (the scheduler's pod writes and the open watches), then with the scheduler
/// paused too (open watches, nothing written). Per process: the idle rate over the open
/// watches is the cost of a watch; the pods-only rate above idle, over the pod writes, the cost
/// of a pod write (measured apart from the renewals, whose load would drown their small
/// rate); the full rate above pods-only, over the renewals, the cost of a renewal (RFC 0015,
/// "Capacity model"). Leaves both paused.
async fn split_costs(stats: &Stats, pids: &[(String, u32)], full_cpu: &[f64], full_renewals: f64, watches: usize, each: Duration) -> Vec<Cost> {
    let count = |what: &[&str]| what.iter().map(|w| stats.writes.lock().unwrap().get(w).map_or(0, Vec::len)).sum::<usize>();
    let measure = || async move {
        // Writes under way when a pause began finish first.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (pods0, t0) = (count(&["pod", "binding"]), Instant::now());
        let cpu0: Vec<f64> = pids.iter().map(|(_, p)| cluster::cpu_seconds(*p)).collect();
        tokio::time::sleep(each).await;
        let secs = t0.elapsed().as_secs_f64();
        let cpu: Vec<f64> = pids.iter().zip(&cpu0).map(|((_, p), c0)| (cluster::cpu_seconds(*p) - c0) / secs).collect();
        // Each process's CPU rate (cores) and the pod writes a second.
        (cpu, (count(&["pod", "binding"]) - pods0) as f64 / secs)
    };
    stats.renewals_paused.store(true, Ordering::SeqCst);
    let (pods_only, pod_writes) = measure().await;
    stats.pods_paused.store(true, Ordering::SeqCst);
    let (idle, _) = measure().await;
    pids.iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let per = |delta: f64, rate: f64| if rate > 0.0 { delta / rate } else { 0.0 };
            Cost {
                process: name.clone(),
                renewal: per(full_cpu[i] - pods_only[i], full_renewals),
                pod_write: per(pods_only[i] - idle[i], pod_writes),
                watch: idle[i] / watches.max(1) as f64,
            }
        })
        .collect()
}

/// Keeps the router's and each shard's /metrics at the window's end under
/// `target/node-axis/metrics/`, for whoever reads why a run missed.
async fn save_metrics(topology: &Topology, setup: Setup, nodes: usize, budget: Option<f64>) {
    let dir = cluster::workspace_root().join(format!("target/node-axis/metrics/{}-{nodes}{}", setup.flag(), if budget.is_some() { "-budget" } else { "" }));
    let _ = std::fs::create_dir_all(&dir);
    let urls = std::iter::once(("router".to_owned(), topology.url.clone())).chain(topology.shards.iter().enumerate().map(|(i, s)| (format!("shard-{i}"), s.url.clone())));
    for (name, url) in urls {
        if let Ok(r) = shardplane_testkit::client().get(format!("{url}/metrics")).send().await
            && let Ok(text) = r.text().await
        {
            let _ = std::fs::write(dir.join(format!("{name}.txt")), text);
        }
    }
}

/// The `p` quantile of samples, None without any.
fn quantile(v: &[f64], p: f64) -> Option<f64> {
    (!v.is_empty()).then(|| percentile(&mut v.to_vec(), p))
}

fn fmt_p(v: &[f64], p: f64) -> String {
    quantile(v, p).map_or_else(|| "—".to_owned(), |q| format!("{:.0} ms", q * 1000.0))
}

/// Each store's CPU budget in the budgeted ladder (cores).
const STORE_BUDGET: f64 = 0.1;

/// One ladder: its N steps, and each store's budget (None: shared cores).
struct Ladder {
    steps: Vec<usize>,
    budget: Option<f64>,
}

impl Ladder {
    /// Its name for `--ladders`.
    fn flag(&self) -> &'static str {
        if self.budget.is_some() { "budget" } else { "shared" }
    }
}

/// A ratio against an at-least goal, where `floor` says the ratio is only a lower bound (the
/// tier sustained the ladder's top, so it may sustain more): a floor below the goal settles
/// nothing.
fn floor_verdict(ratio: f64, goal: f64, floor: bool) -> Verdict {
    match (ratio >= goal, floor) {
        (true, _) => Verdict::Met,
        (false, true) => Verdict::Unsettled,
        (false, false) => Verdict::Missed,
    }
}

/// Climbs one ladder: at each N in `steps`, every topology still on it gets up to
/// [`TRIES_PER_RUNG`] tries (`try_at(setup, n, attempt)` runs one and says whether it held);
/// a topology leaves the ladder at the first rung none of its tries held, and the ladder ends
/// when none is left. A try that could not run ends the ladder with its error.
async fn climb(steps: &[usize], setups: &[Setup], mut try_at: impl AsyncFnMut(Setup, usize, u32) -> Result<bool, String>) -> Result<(), String> {
    let mut on_ladder = vec![true; setups.len()];
    for &n in steps {
        for (i, &setup) in setups.iter().enumerate() {
            if !on_ladder[i] {
                continue;
            }
            let mut held = false;
            for attempt in 1..=TRIES_PER_RUNG {
                held = try_at(setup, n, attempt).await?;
                if held {
                    break;
                }
            }
            on_ladder[i] = held;
        }
        if !on_ladder.contains(&true) {
            break;
        }
    }
    Ok(())
}

/// Runs both ladders and reports.
pub async fn run(ctx: &Ctx) -> Section {
    let window = if ctx.smoke { Duration::from_secs(3) } else { Duration::from_secs(40) };
    let steps = |full: &[usize]| if ctx.smoke { vec![10] } else if ctx.objects.is_empty() { full.to_vec() } else { ctx.objects.clone() };
    let ladders = [Ladder { steps: steps(&[8000]), budget: None }, Ladder { steps: steps(&[2000, 3000, 4000, 5000, 6000, 8000]), budget: Some(STORE_BUDGET) }];
    let setups: Vec<Setup> = [Setup::OneShard, Setup::Router, Setup::RouterWithTier].into_iter().filter(|s| ctx.topologies.is_empty() || ctx.topologies.iter().any(|t| t == s.flag())).collect();
    let mut runs: Vec<Run> = Vec::new();
    let mut not_run: Option<String> = None;
    let ladders: Vec<Ladder> = ladders.into_iter().filter(|l| ctx.ladders.is_empty() || ctx.ladders.iter().any(|f| f == l.flag())).collect();
    for ladder in &ladders {
        let climbed = climb(&ladder.steps, &setups, async |setup, n, attempt| {
            let r = run_one(ctx, setup, n, window, ladder.budget).await?;
            let held = r.sustained();
            runs.push(Run { attempt, ..r });
            Ok(held)
        })
        .await;
        if let Err(why) = climbed {
            not_run = Some(why);
        }
    }
    report(&runs, window, not_run)
}

/// "shared" or the stores' budget.
fn stores(budget: Option<f64>) -> String {
    budget.map_or_else(|| "shared cores".to_owned(), |b| format!("{b} core each, on disk"))
}

fn report(runs: &[Run], window: Duration, not_run: Option<String>) -> Section {
    let mut s = Section::new("node axis");
    s.line(format!(
        "A simulated cluster (`bench cluster`, RFC 0015): N nodes, each renewing its Lease every {}s, writing its NodeStatus at start and every {} min, watching its own pods (`spec.nodeName`) and its own Node; a scheduler creating and binding {POD_RATE} pods/s, each deleted after {} s. Each run: fresh etcd, the topology, registration, one heartbeat period of warm-up, then {} s measured. Write latency is every write the simulator made (renewals, status, pod creates, bindings, deletes); watch lag is from a binding's answer to the kubelet's watch event. The simulator (one process, a kept-alive HTTP/1.1 client and two watch connections per node) runs on the same two cores.\n",
        RENEW_EVERY.as_secs(),
        STATUS_EVERY.as_secs() / 60,
        POD_LIFETIME.as_secs(),
        window.as_secs()
    ));
    s.line(format!(
        "Two ladders, each running the three topologies one after another at each N. **Shared cores**: every process (stores, router, shards, simulator) shares the machine; the main etcd is one member and both stores keep their data on tmpfs, so they pay no replication and no fsync: the API layer's view. **Stores as production runs them, at a fixed budget**: the main etcd is {ETCD_MEMBERS} members with their data on disk (each write committed by a quorum and fsynced by each member), the liveness tier one process with its data on the same disk (grouped commits); each store process gets {STORE_BUDGET} core (a cgroup CPU quota), as a store member has a host of a fixed size while routers and shards scale out by adding processes. This is the ladder the seam's target is judged on.\n"
    ));
    if let Some(why) = &not_run {
        s.line(format!("**The budgeted ladder did not run**: {why}.\n"));
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                stores(r.budget),
                r.setup.name().to_owned(),
                if r.attempt > 1 { format!("{} (try {})", r.nodes, r.attempt) } else { r.nodes.to_string() },
                format!("{} / {} (n={})", fmt_p(&r.writes, 0.5), fmt_p(&r.writes, 0.99), r.writes.len()),
                format!("{} / {} (n={})", fmt_p(&r.lag, 0.5), fmt_p(&r.lag, 0.99), r.lag.len()),
                format!("{} of {}", r.watches_open, 2 * r.nodes),
                r.refused.to_string(),
                format!("{:.0}", r.renewals as f64 / r.seconds),
                format!("{:.1}", r.main_lease_writes as f64 / r.seconds),
                if r.sustained() { "yes".into() } else { "no".into() },
            ]
        })
        .collect();
    s.table(&["stores", "topology", "nodes", "write p50 / p99", "watch lag p50 / p99", "watches open", "refused", "renewals/s", "main etcd lease writes/s", "sustained"], &rows);
    for budget in [None, Some(STORE_BUDGET)] {
        let of_ladder: Vec<&Run> = runs.iter().filter(|r| r.budget == budget).collect();
        if of_ladder.is_empty() {
            continue;
        }
        let largest = |setup: Setup| largest_sustained(&of_ladder, setup);
        let (a, b, c) = (largest(Setup::OneShard), largest(Setup::Router), largest(Setup::RouterWithTier));
        let top = of_ladder.iter().map(|r| r.nodes).max().unwrap_or(0);
        let at_top = if c == top { ", at least: the ladder's top" } else { "" };
        let ratio = c as f64 / a.max(b).max(1) as f64;
        s.line(format!("{}: largest N sustained (every watch open within {} s, write p99 and watch-lag p99 ≤ {P99_LIMIT} s, under 1% refused, in one of up to {TRIES_PER_RUNG} tries): one shard {a}, router K=4 {b}, router K=4 + liveness tier {c}{at_top}; {ratio:.2}×.\n", stores(budget), WATCHES_OPEN.as_secs()));
        if budget.is_some() {
            s.target(&format!("liveness tier, stores at {} core each: nodes sustained vs the better of one shard and router K=4", STORE_BUDGET), format!("{ratio:.2}× ({c} vs {}{at_top})", a.max(b)), "≥ 2×", floor_verdict(ratio, 2.0, c == top));
        }
    }
    let tier_main: u64 = runs.iter().filter(|r| r.setup == Setup::RouterWithTier).map(|r| r.main_lease_writes).sum();
    s.target("main etcd's node-liveness writes with the tier", format!("{tier_main} in all tier runs"), "0", tier_main == 0);
    // CPU per write by process, at each topology's largest sustained N with shared cores
    // (a budget changes where a store saturates, not what a write costs it).
    let mut cpu_rows = Vec::new();
    for setup in [Setup::OneShard, Setup::Router, Setup::RouterWithTier] {
        if let Some(r) = best(runs, setup) {
            for (p, cpu, rss) in &r.processes {
                cpu_rows.push(vec![setup.name().to_owned(), stores(r.budget), r.nodes.to_string(), p.clone(), format!("{:.0} µs", cpu / r.writes.len().max(1) as f64 * 1e6), format!("{:.2}", cpu / r.seconds), crate::report::mib(*rss)]);
            }
        }
    }
    if !cpu_rows.is_empty() {
        s.line("CPU per write (all writes in the window) and memory, by process, at each topology's largest sustained N (shared cores where that ladder ran):\n");
        s.table(&["topology", "stores", "nodes", "process", "CPU per write", "cores busy", "RSS"], &cpu_rows);
    }
    capacity_model(&mut s, runs);
    s
}

/// The largest N one of a topology's tries sustained on a ladder (0: none).
fn largest_sustained(of_ladder: &[&Run], setup: Setup) -> usize {
    of_ladder.iter().filter(|r| r.setup == setup && r.sustained()).map(|r| r.nodes).max().unwrap_or(0)
}

/// A topology's run at its largest sustained N, from the shared-cores ladder if it ran.
fn best(runs: &[Run], setup: Setup) -> Option<&Run> {
    let sustained = |budget: Option<f64>| runs.iter().filter(|r| r.setup == setup && r.budget == budget && r.sustained()).max_by_key(|r| r.nodes);
    sustained(None).or_else(|| sustained(Some(STORE_BUDGET)))
}

/// The load of 100,000 nodes: a renewal each every 10 s; renewals ~70% of all writes (the
/// rest taken here as pod writes); two watches per node.
const RENEWALS_100K: f64 = 10_000.0;
const POD_WRITES_100K: f64 = 4_300.0;
const WATCHES_100K: f64 = 200_000.0;

/// The processes of a topology, grouped as the model counts them.
const GROUPS: [(&str, &str); 4] = [("router", "router"), ("shard", "shards in all"), ("etcd", "etcd"), ("liveness tier", "liveness tier")];

/// Each process group's cost per cause at each topology's shared-cores run, and the cores
/// 100,000 nodes would need with and without the tier: cost per renewal × 10,000/s, per pod
/// write × 4,300/s, per open watch × 200,000.
fn capacity_model(s: &mut Section, runs: &[Run]) {
    let with_costs = |setup: Setup| runs.iter().filter(|r| r.setup == setup && !r.costs.is_empty() && r.sustained()).max_by_key(|r| r.nodes);
    let group = |r: &Run, prefix: &str| -> Option<(f64, f64, f64)> {
        let of: Vec<&Cost> = r.costs.iter().filter(|c| c.process.starts_with(prefix)).collect();
        (!of.is_empty()).then(|| (of.iter().map(|c| c.renewal).sum(), of.iter().map(|c| c.pod_write).sum(), of.iter().map(|c| c.watch).sum()))
    };
    let mut rows = Vec::new();
    for setup in [Setup::OneShard, Setup::Router, Setup::RouterWithTier] {
        let Some(r) = with_costs(setup) else { continue };
        for (prefix, label) in GROUPS {
            if let Some((renewal, pod, watch)) = group(r, prefix) {
                rows.push(vec![setup.name().to_owned(), r.nodes.to_string(), label.to_owned(), format!("{:.0} µs", renewal * 1e6), format!("{:.0} µs", pod * 1e6), format!("{:.2} µs/s", watch * 1e6)]);
            }
        }
    }
    if rows.is_empty() {
        s.line("**Capacity model**: no sustained shared-cores run to split costs from.\n");
        return;
    }
    s.line("**CPU by cause** (shared cores, each topology's largest sustained N): after the measured window the same cluster ran again with renewals paused (pod writes and open watches), then with the scheduler paused too (watches held open, nothing written), each for half the window; each cost is the difference of a process's CPU rate between two windows over the rate of what the second paused. An open watch's cost includes the process's fixed background work (bookmarks, progress, compaction) spread over its watches; a difference under the noise can come out negative.\n");
    s.table(&["topology", "nodes", "process", "per renewal", "per pod write", "per open watch"], &rows);
    let mut out = format!("**Capacity model for 100,000 nodes** ({RENEWALS_100K:.0} renewals/s, {POD_WRITES_100K:.0} pod writes/s so that renewals are ~70% of writes, {WATCHES_100K:.0} watches open; cores = cost per cause × its rate, negative costs taken as 0):\n\n");
    for setup in [Setup::Router, Setup::RouterWithTier] {
        let Some(r) = with_costs(setup) else {
            out.push_str(&format!("- {}: no sustained run to model from.\n", setup.name()));
            continue;
        };
        let cores = |prefix: &str| group(r, prefix).map(|(renewal, pod, watch)| renewal.max(0.0) * RENEWALS_100K + pod.max(0.0) * POD_WRITES_100K + watch.max(0.0) * WATCHES_100K);
        let parts: Vec<String> = GROUPS.iter().filter_map(|(prefix, label)| cores(prefix).map(|c| format!("{label} {c:.1}"))).collect();
        let total: f64 = GROUPS.iter().filter_map(|(prefix, _)| cores(prefix)).sum();
        out.push_str(&format!("- {} (costs from N={}): {} cores; {total:.1} in all.\n", setup.name(), r.nodes, parts.join(", ")));
    }
    s.line(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_below_the_goal_is_unsettled() {
        assert_eq!(floor_verdict(1.33, 2.0, true), Verdict::Unsettled, "the tier held the ladder's top: it may hold more");
        assert_eq!(floor_verdict(1.33, 2.0, false), Verdict::Missed);
        assert_eq!(floor_verdict(2.5, 2.0, true), Verdict::Met);
    }

    /// A run at `nodes` whose write p99 is `p99` seconds (everything else within the limits).
    fn run_at(setup: Setup, nodes: usize, attempt: u32, p99: f64) -> Run {
        Run { setup, nodes, attempt, budget: Some(STORE_BUDGET), watches_open: 2 * nodes as u64, writes: vec![p99; 100], lag: vec![0.01; 100], refused: 0, renewals: nodes, main_lease_writes: 0, processes: Vec::new(), seconds: 40.0, costs: Vec::new() }
    }

    #[test]
    fn a_rung_counts_when_one_of_its_tries_held() {
        let runs = [
            run_at(Setup::Router, 4000, 1, 0.3),
            run_at(Setup::Router, 5000, 1, 3.6),
            run_at(Setup::Router, 5000, 2, 0.7),
            run_at(Setup::Router, 6000, 1, 4.0),
            run_at(Setup::Router, 6000, 2, 2.0),
            run_at(Setup::OneShard, 4000, 1, 0.3),
            run_at(Setup::OneShard, 5000, 1, 1.8),
            run_at(Setup::OneShard, 5000, 2, 1.2),
        ];
        let of_ladder: Vec<&Run> = runs.iter().collect();
        assert_eq!(largest_sustained(&of_ladder, Setup::Router), 5000, "the second try at 5000 held");
        assert_eq!(largest_sustained(&of_ladder, Setup::OneShard), 4000, "both tries at 5000 failed");
        assert_eq!(largest_sustained(&of_ladder, Setup::RouterWithTier), 0);
    }

    /// Climbs a ladder whose tries hold as `held` says, recording every try.
    fn climb_with(steps: &[usize], setups: &[Setup], held: impl Fn(Setup, usize, u32) -> Result<bool, String>) -> (Vec<(Setup, usize, u32)>, Result<(), String>) {
        let mut tries = Vec::new();
        let out = tokio::runtime::Builder::new_current_thread().build().expect("a runtime").block_on(climb(steps, setups, async |s, n, a| {
            tries.push((s, n, a));
            held(s, n, a)
        }));
        (tries, out)
    }

    #[test]
    fn a_failed_rung_is_tried_again_and_a_topology_leaves_after_two_failures() {
        use Setup::*;
        // One shard holds 4000 on its second try and fails 5000 twice; the router holds
        // everything on its first try.
        let (tries, out) = climb_with(&[4000, 5000, 6000], &[OneShard, Router], |s, n, a| Ok(s == Router || (n == 4000 && a == 2)));
        assert_eq!(out, Ok(()));
        assert_eq!(tries, vec![(OneShard, 4000, 1), (OneShard, 4000, 2), (Router, 4000, 1), (OneShard, 5000, 1), (OneShard, 5000, 2), (Router, 5000, 1), (Router, 6000, 1)]);
        // The ladder ends at the first rung no topology held.
        let (tries, _) = climb_with(&[4000, 5000], &[OneShard], |_, _, _| Ok(false));
        assert_eq!(tries, vec![(OneShard, 4000, 1), (OneShard, 4000, 2)]);
        // A try that could not run ends the ladder with its reason.
        let (tries, out) = climb_with(&[4000, 5000], &[OneShard, Router], |s, _, _| if s == Router { Err("no cgroup".into()) } else { Ok(true) });
        assert_eq!(out, Err("no cgroup".to_owned()));
        assert_eq!(tries, vec![(OneShard, 4000, 1), (Router, 4000, 1)]);
    }

}
