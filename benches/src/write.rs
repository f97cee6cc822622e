//! write: creates, updates and deletes per second through the router against etcd running the
//! same transactions (create-if-absent with the namespace compare, compare-and-swap update and
//! delete) with a watch open on what they write, at the same concurrency: interleaved pairs on
//! tmpfs (CPU-bound, every process on the same cores), with etcd's data on this machine's disk,
//! and on that disk throttled to a slow production volume's pace (fsync-bound), with CPU per
//! write in every process and etcd's own WAL sync figures. With `--compare-router`, this build's
//! router also runs against another build's, each on a setup of its own (RFC 0017).

use crate::Ctx;
use crate::cluster::{Topology, cpu_seconds, http};
use crate::report::{Goal, PairBudget, Paired, Section};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use futures::StreamExt;
use serde_json::{Value, json};
use shardplane_apimachinery::encode::object_bytes;
use shardplane_keyspace::{ObjectKey, etcd_layout};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub(crate) const NS: &str = "writes";
pub(crate) const CONCURRENCY: usize = 32;

fn configmap(i: usize, round: u32) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("wr-{i:07}"), "namespace": NS, "labels": {"app": format!("app-{}", i % 13)}}, "data": {"config.yaml": format!("round: {round}\n{}", "key: value-0123456789abcdef\n".repeat(32))}})
}

/// Runs `op(i)` for i in 0..n with CONCURRENCY in flight; returns operations per second.
pub(crate) async fn rate<F, Fut>(n: usize, op: F) -> f64
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    futures::stream::iter(0..n).map(op).buffer_unordered(CONCURRENCY).collect::<Vec<()>>().await;
    n as f64 / start.elapsed().as_secs_f64()
}

/// n creates, then n updates, then n deletes through the router: (creates/s, updates/s, deletes/s).
pub(crate) async fn router_round(c: &reqwest::Client, base: &str, n: usize) -> [f64; 3] {
    let ok = |r: reqwest::Response, what: &str| assert!(r.status().is_success(), "{what}: {}", r.status());
    let create = rate(n, |i| {
        let (c, base) = (c.clone(), base.to_owned());
        async move { ok(c.post(&base).json(&configmap(i, 0)).send().await.expect("create"), "create") }
    })
    .await;
    let update = rate(n, |i| {
        let (c, base) = (c.clone(), base.to_owned());
        async move { ok(c.put(format!("{base}/wr-{i:07}")).json(&configmap(i, 1)).send().await.expect("update"), "update") }
    })
    .await;
    let delete = rate(n, |i| {
        let (c, base) = (c.clone(), base.to_owned());
        async move { ok(c.delete(format!("{base}/wr-{i:07}")).send().await.expect("delete"), "delete") }
    })
    .await;
    [create, update, delete]
}

/// Where etcd keeps its data.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Disk {
    /// /dev/shm: no fsync, so every path is bound by the CPU it spends (shared by all).
    Tmpfs,
    /// A directory on the machine's disk: each commit is fsynced, as in production.
    Real,
    /// The same, with etcd's writes to the disk throttled to `SLOW_DISK_IOPS` (the blkio
    /// controller), so that each sync waits as on a slow production volume.
    Throttled,
}

/// Write operations a second the throttled disk allows. A WAL sync here is a few device writes
/// (the data, ext4's journal), so this gave syncs of 8.7–8.8 ms on average in the runs RFC 0017
/// reports: the slow end of the disks etcd's hardware guidance accepts (a WAL sync under 10 ms
/// at the 99th percentile). The report prints what they took in its own run.
const SLOW_DISK_IOPS: u32 = 400;

impl Disk {
    fn label(self) -> String {
        match self {
            Disk::Tmpfs => "etcd on tmpfs (CPU-bound)".into(),
            Disk::Real => "etcd on this machine's disk".into(),
            Disk::Throttled => format!("etcd on the disk throttled to {SLOW_DISK_IOPS} writes/s (fsync-bound)"),
        }
    }
}

/// CPU seconds spent so far by each process of a run.
#[derive(Clone, Copy, Default)]
struct Cpu {
    router: f64,
    shards: f64,
    etcd: f64,
    bench: f64,
}

impl Cpu {
    fn minus(self, o: Cpu) -> Cpu {
        Cpu { router: self.router - o.router, shards: self.shards - o.shards, etcd: self.etcd - o.etcd, bench: self.bench - o.bench }
    }
}

/// One arm of one pair: creates/s, updates/s, deletes/s, the CPU each process spent, and
/// etcd's WAL syncs over it (count, seconds), when it exports them.
struct Arm {
    rates: [f64; 3],
    cpu: Cpu,
    syncs: Option<(f64, f64)>,
}

/// etcd (one process) and a router over K shards on it, the namespace made.
struct Setup {
    store: Store,
    topology: Topology,
    /// The namespace's key and mod_revision: the compare every create carries.
    ns_key: Vec<u8>,
    ns_revision: i64,
}

enum Store {
    Tmpfs(shardplane_testkit::Etcd),
    /// A one-member cluster on disk, its throttle (when there is one) lifted when dropped.
    Disk { cluster: shardplane_testkit::EtcdCluster, _throttle: Option<shardplane_testkit::SlowDisk> },
}

impl Store {
    fn endpoint(&self) -> String {
        match self {
            Store::Tmpfs(e) => e.endpoint.clone(),
            Store::Disk { cluster, .. } => cluster.endpoints_flag(),
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Store::Tmpfs(e) => e.pid(),
            Store::Disk { cluster, .. } => cluster.pids()[0],
        }
    }
}

impl Setup {
    async fn start(router: &std::path::Path, disk: Disk, k: u32) -> Self {
        let store = match disk {
            Disk::Tmpfs => Store::Tmpfs(crate::start_etcd().await),
            Disk::Real | Disk::Throttled => {
                let base = crate::cluster::workspace_root().join("target/bench-write");
                std::fs::create_dir_all(&base).expect("the disk store's directory");
                let cluster = shardplane_testkit::EtcdCluster::start(1, &base, &["--quota-backend-bytes", "8589934592"]).await;
                let slow = (disk == Disk::Throttled).then(|| cluster.slow_disk(0, SLOW_DISK_IOPS));
                Store::Disk { cluster, _throttle: slow }
            }
        };
        let topology = Topology::start(router, &store.endpoint(), k).await;
        let ns = http().post(format!("{}/api/v1/namespaces", topology.url)).json(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).send().await.expect("namespace");
        assert!(ns.status().is_success(), "namespace: {}", ns.status());
        let ns_key = etcd_layout::object_key(&ObjectKey::new("", "namespaces", "", NS));
        let mut client = etcd_client::Client::connect([store.endpoint()], None).await.expect("etcd");
        let got = client.get(ns_key.clone(), None).await.expect("the namespace");
        let ns_revision = got.kvs().first().expect("the namespace is stored").mod_revision();
        Self { store, topology, ns_key: ns_key.into_bytes(), ns_revision }
    }

    fn cpu(&self) -> Cpu {
        let t = &self.topology;
        Cpu { router: cpu_seconds(t.router_pid()), shards: t.shards.iter().map(|s| cpu_seconds(s.pid)).sum(), etcd: cpu_seconds(self.store.pid()), bench: cpu_seconds(std::process::id()) }
    }
}

/// etcd's WAL syncs so far: (count, seconds), from its `etcd_disk_wal_fsync_duration_seconds`
/// histogram; None when the store does not export it (the embedded store).
async fn wal_syncs(endpoint: &str) -> Option<(f64, f64)> {
    let m = crate::cluster::try_metrics(endpoint).await?;
    Some((*m.get("etcd_disk_wal_fsync_duration_seconds_count")?, *m.get("etcd_disk_wal_fsync_duration_seconds_sum")?))
}

/// The keys the etcd arm writes: beside the registry, so that no shard follows them.
const BASELINE_PREFIX: &str = "/bench/write-baseline/";

fn baseline_key(i: usize) -> Vec<u8> {
    format!("{BASELINE_PREFIX}wr-{i:07}").into_bytes()
}

/// The bytes the router path stores for object `i` in `round`.
fn stored(i: usize, round: u32) -> Vec<u8> {
    let mut o = configmap(i, round);
    shardplane_apimachinery::strategy::prepare_for_create(&crate::objects::Kind::ConfigMap.info(), &mut o);
    object_bytes(&o)
}

/// n creates, updates and deletes straight to etcd as the shards make them: create-if-absent
/// carrying the namespace compare, then a compare-and-swap update and delete on the revision
/// each key was written at.
async fn etcd_round(client: &etcd_client::Client, setup: &Setup, n: usize) -> [f64; 3] {
    let revisions: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
    let (revisions, ns_key, ns_revision) = (&revisions, &setup.ns_key, setup.ns_revision);
    let create = rate(n, |i| {
        let mut kv = client.kv_client();
        let txn = Txn::new()
            .when([Compare::create_revision(baseline_key(i), CompareOp::Equal, 0), Compare::mod_revision(ns_key.clone(), CompareOp::Equal, ns_revision)])
            .and_then([TxnOp::put(baseline_key(i), stored(i, 0), None)])
            .or_else([TxnOp::get(baseline_key(i), None), TxnOp::get(ns_key.clone(), None)]);
        async move {
            let r = kv.txn(txn).await.expect("create");
            assert!(r.succeeded(), "create-if-absent of {i}");
            revisions[i].store(r.header().expect("header").revision() as u64, Ordering::Relaxed);
        }
    })
    .await;
    // Update and delete: compare-and-swap on the revision the key was last written at.
    let cas = |i: usize, then: TxnOp| {
        let expected = revisions[i].load(Ordering::Relaxed) as i64;
        let txn = Txn::new().when([Compare::mod_revision(baseline_key(i), CompareOp::Equal, expected)]).and_then([then]).or_else([TxnOp::get(baseline_key(i), None)]);
        let mut kv = client.kv_client();
        async move {
            let r = kv.txn(txn).await.expect("compare-and-swap");
            assert!(r.succeeded(), "compare-and-swap of {i}");
            revisions[i].store(r.header().expect("header").revision() as u64, Ordering::Relaxed);
        }
    };
    let update = rate(n, |i| cas(i, TxnOp::put(baseline_key(i), stored(i, 1), None))).await;
    let delete = rate(n, |i| cas(i, TxnOp::delete(baseline_key(i), None))).await;
    [create, update, delete]
}

/// Counts the events of one watch on the etcd arm's keys (as each write through the router is
/// sent to the one shard whose range holds it) until `stop`.
fn baseline_watch(endpoint: String, seen: Arc<AtomicU64>, stop: tokio_util::sync::CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut client = etcd_client::Client::connect([endpoint], None).await.expect("etcd");
        let mut stream = client.watch(BASELINE_PREFIX, Some(etcd_client::WatchOptions::new().with_prefix())).await.expect("watch");
        loop {
            tokio::select! {
                m = stream.message() => {
                    let Ok(Some(resp)) = m else { break };
                    seen.fetch_add(resp.events().len() as u64, Ordering::Relaxed);
                }
                _ = stop.cancelled() => break,
            }
        }
    })
}

/// What one store's variant measured.
struct Variant {
    disk: Disk,
    /// Objects each round creates, updates and deletes.
    n: usize,
    router: Vec<Arm>,
    etcd: Vec<Arm>,
    /// `--compare-router`'s build, in the variant that runs it against this build (on a setup
    /// of its own, alike in all else; that variant has no etcd arm).
    compare: Vec<Arm>,
    /// With `--perf`: where the router path's CPU goes (tmpfs only).
    profile: String,
}

const OPS: [&str; 3] = ["create", "update", "delete"];

/// Warm-up pair, then pairs as `budget` gives them: more while `settle` (the variant's goal,
/// when it has targets) leaves one operation's ratio unsettled. Each pair runs its arms in turn,
/// in alternating order (router then etcd, then the reverse) so that neither always follows the
/// other. With `compared` (another build's `shard-router`), the pairs are this build's router
/// against that one's instead, each on a setup of its own that nothing else writes to.
async fn run_variant(ctx: &Ctx, disk: Disk, k: u32, n: usize, budget: PairBudget, settle: Option<Goal>, compared: Option<&std::path::Path>) -> Variant {
    let setup = Setup::start(&ctx.router, disk, k).await;
    let other = match compared {
        Some(path) => Some(Setup::start(path, disk, k).await),
        None => None,
    };
    let c = http();
    let base = |s: &Setup| format!("{}/api/v1/namespaces/{NS}/configmaps", s.topology.url);
    let client = etcd_client::Client::connect([setup.store.endpoint()], None).await.expect("etcd");
    let (seen, stop) = (Arc::new(AtomicU64::new(0)), tokio_util::sync::CancellationToken::new());
    let watcher = baseline_watch(setup.store.endpoint(), seen.clone(), stop.clone());
    let warm = usize::from(!ctx.smoke);
    let bar = ctx.bar((warm + budget.min) as u64, &format!("write ({}): interleaved pairs", disk.label()));
    let mut v = Variant { disk, n, router: Vec::new(), etcd: Vec::new(), compare: Vec::new(), profile: String::new() };
    let mut etcd_rounds = 0u64;
    let settled = |v: &Variant| settle.is_none_or(|goal| (0..OPS.len()).all(|op| paired(&v.router, &v.etcd, op).settled(goal)));
    let mut pair = 0;
    while pair < warm || budget.more(pair - warm, settled(&v)) {
        if pair >= warm + budget.min {
            bar.inc_length(1);
        }
        let mut arms: Vec<u8> = if other.is_some() { vec![0, 2] } else { vec![0, 1] };
        if pair % 2 == 1 {
            arms.reverse();
        }
        for arm in arms {
            let s = if arm == 2 { other.as_ref().expect("compare setup") } else { &setup };
            let (before, syncs_before) = (s.cpu(), wal_syncs(&s.store.endpoint()).await);
            let rates = match arm {
                1 => {
                    etcd_rounds += 1;
                    etcd_round(&client, &setup, n).await
                }
                _ => router_round(&c, &base(s), n).await,
            };
            let syncs = match (syncs_before, wal_syncs(&s.store.endpoint()).await) {
                (Some((c0, t0)), Some((c1, t1))) => Some((c1 - c0, t1 - t0)),
                _ => None,
            };
            let measured = Arm { rates, cpu: s.cpu().minus(before), syncs };
            if pair >= warm {
                [&mut v.router, &mut v.etcd, &mut v.compare][arm as usize].push(measured);
            }
        }
        bar.inc(1);
        pair += 1;
    }
    bar.finish_and_clear();
    // Every write of the etcd arm reached its watch: the arm did the work it claims.
    let want = 3 * n as u64 * etcd_rounds;
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while seen.load(Ordering::Relaxed) < want && Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(seen.load(Ordering::Relaxed), want, "events on the etcd arm's watch");
    stop.cancel();
    watcher.await.expect("watcher");
    if ctx.perf && disk == Disk::Tmpfs {
        // One more round, sampled, for where the router path's CPU goes.
        let t = &setup.topology;
        let groups = [("router", vec![t.router_pid()]), ("shards", t.shards.iter().map(|s| s.pid).collect()), ("etcd", vec![setup.store.pid()])];
        let flats = crate::profile::during(&groups, router_round(&c, &base(&setup), n)).await;
        v.profile = crate::profile::render("creates, updates and deletes through the router", &flats);
    }
    setup.topology.stop().await;
    if let Some(o) = other {
        o.topology.stop().await;
    }
    v
}

/// Each pair's ratio of `a` to `b` for operation `op`.
fn paired(a: &[Arm], b: &[Arm], op: usize) -> Paired {
    Paired { ratios: a.iter().zip(b).map(|(a, b)| a.rates[op] / b.rates[op]).collect() }
}

/// The median over arms of `f`.
fn median(arms: &[Arm], f: impl Fn(&Arm) -> f64) -> f64 {
    crate::report::percentile(&mut arms.iter().map(f).collect::<Vec<_>>(), 0.5)
}

const CPU_COLUMNS: [&str; 6] = ["arm", "router", "shards", "etcd", "load", "total"];

/// One row of a CPU table: µs per operation in each process (medians over `arms` of n objects'
/// three operations); `server`: whether the arm went through a router and shards.
fn cpu_row(label: &str, arms: &[Arm], n: usize, server: bool) -> Vec<String> {
    let us = |f: fn(&Cpu) -> f64| format!("{:.0}", median(arms, |a| f(&a.cpu)) * 1e6 / (3.0 * n as f64));
    let (router, shards) = if server { (us(|c| c.router), us(|c| c.shards)) } else { ("-".into(), "-".into()) };
    vec![label.to_owned(), router, shards, us(|c| c.etcd), us(|c| c.bench), us(|c| c.router + c.shards + c.etcd + c.bench)]
}

/// etcd's WAL syncs over `arms` of n writes each: the medians of each arm's mean sync time
/// (ms) and of writes per sync, and the arms behind them; None when not exported.
fn wal_figures(arms: &[Arm], n: usize) -> Option<(f64, f64, usize)> {
    let per: Vec<(f64, f64)> = arms.iter().filter_map(|a| a.syncs).filter(|(count, _)| *count > 0.0).collect();
    if per.is_empty() {
        return None;
    }
    let ms = crate::report::percentile(&mut per.iter().map(|(c, t)| t / c * 1e3).collect::<Vec<_>>(), 0.5);
    let per_sync = crate::report::percentile(&mut per.iter().map(|(c, _)| 3.0 * n as f64 / c).collect::<Vec<_>>(), 0.5);
    Some((ms, per_sync, per.len()))
}

/// The write target, on the baseline that decides a deployment's write rate: etcd on a disk
/// whose syncs take as long as a production volume's, running the same transactions (RFC 0017).
const GOAL: f64 = 0.8;

/// Pairs on the throttled disk, whose comparisons are the targets: 12 (8 are the fewest that can
/// settle at 99%; more keep one slow pair from settling a target early), and up to 24 while one
/// is unsettled (RFC 0017, "Wider samples"). The other disks, without targets, take 5.
const PAIRS: PairBudget = PairBudget { min: 12, cap: 24 };
const PAIRS_WITHOUT_TARGETS: usize = 5;

pub async fn run(ctx: &Ctx) -> Section {
    let n = if ctx.smoke { 100 } else { 5_000 };
    let k = if ctx.smoke { 2 } else { 4 };
    let pairs = ctx.pairs(PAIRS.min, PAIRS.cap);
    let plain = ctx.pairs(PAIRS_WITHOUT_TARGETS, PAIRS_WITHOUT_TARGETS);
    let mut variants = vec![run_variant(ctx, Disk::Tmpfs, k, n, plain, None, None).await];
    // The embedded store replaces the tmpfs etcd only; the disk variants need a real etcd.
    if !shardplane_testkit::embedded_store() {
        variants.push(run_variant(ctx, Disk::Real, k, n, plain, None, None).await);
        // Fewer objects on the slow disk, where each write waits on it: the same number of syncs'
        // worth of batching, in a few minutes.
        variants.push(run_variant(ctx, Disk::Throttled, k, if ctx.smoke { n } else { 2_000 }, pairs, Some(Goal::AtLeast(GOAL)), None).await);
    }
    let builds = match &ctx.compare_router {
        Some(path) => Some(run_variant(ctx, Disk::Tmpfs, k, n, plain, None, Some(path)).await),
        None => None,
    };

    let mut s = Section::new("write");
    s.line(format!(
        "ConfigMaps (~1 KiB) created, updated (PUT of the whole object) and deleted through the router over {k} shards, {CONCURRENCY} requests in flight, against etcd running **the same transactions** at the same concurrency: create-if-absent carrying the compare on the namespace's revision, compare-and-swap update and delete on each key's revision, with one watch open on the keys written (each write through the router is sent to the one shard whose range holds it). \
         The two arms run as interleaved pairs, in alternating order (router then etcd, then etcd then router, …), after one warm-up pair, with the router's topology up in both; each pair gives one ratio. Three times: etcd on tmpfs, where nothing waits on a disk and every process shares the same 2 cores, so each path's rate is set by the CPU it spends; etcd with its data on this machine's disk, each commit synced; and the same disk throttled to {SLOW_DISK_IOPS} write operations a second for etcd (a WAL sync is a few of them, so syncs take several milliseconds, the slow end of what etcd's hardware guidance accepts; the figures below say how long), so that etcd's commits wait on the disk as on a production volume. etcd's own WAL sync figures (from its metrics) say how long each variant's syncs took.\n"
    ));
    s.line(format!("{} Only the throttled disk's comparisons are targets; the others take {} pairs.\n", crate::report::verdict_rule(pairs, "pair", "ratios"), plain.min));
    for v in &variants {
        let label = v.disk.label();
        let mut rows = Vec::new();
        for (op, name) in OPS.iter().enumerate() {
            let p = paired(&v.router, &v.etcd, op);
            rows.push(vec![(*name).to_owned(), format!("{:.0}", median(&v.router, |a| a.rates[op])), format!("{:.0}", median(&v.etcd, |a| a.rates[op])), p.describe()]);
            if v.disk == Disk::Throttled {
                s.target(format!("{name}s/s through the router vs etcd's same transactions, etcd's disk at {SLOW_DISK_IOPS} writes/s"), p.describe(), format!("≥ {:.0}%, whole interval", 100.0 * GOAL), p.verdict(Goal::AtLeast(GOAL)));
            }
        }
        s.line(format!("**{label}**, {} objects a round, medians of {} pairs:\n", v.n, v.router.len()));
        s.table(&["operation", "router ops/s", "etcd same-transaction ops/s", "router / etcd (median, interval, pairs)"], &rows);
        let sync = |arms: &[Arm]| match wal_figures(arms, v.n) {
            None => "not exported by this store".to_owned(),
            Some((ms, per_sync, count)) => format!("{ms:.2} ms each on average, {per_sync:.1} writes per sync (medians of {count} arms)"),
        };
        s.line(format!("etcd's WAL syncs: through the router {}; etcd alone {}.\n", sync(&v.router), sync(&v.etcd)));
        s.line("CPU per operation (µs, user + system, over all three operations; median of the pairs), from each process's counters; \"load\" is the benchmark's own client:\n");
        s.table(&CPU_COLUMNS, &[cpu_row("through the router", &v.router, v.n, true), cpu_row("etcd, same transactions", &v.etcd, v.n, false)]);
        s.line(&v.profile);
    }
    if let Some(v) = &builds {
        let rows: Vec<Vec<String>> = OPS.iter().enumerate().map(|(op, name)| vec![(*name).to_owned(), paired(&v.router, &v.compare, op).describe()]).collect();
        s.line(format!("**This build against `--compare-router`**: each router over {k} shards on an etcd of its own on tmpfs (no etcd arm, nothing else writing), {} objects a round, {} interleaved pairs after a warm-up, alternating which goes first (ops/s, this / that):\n", v.n, v.compare.len()));
        s.table(&["operation", "this build / compared build"], &rows);
        s.line("CPU per operation (µs, over all three operations; median of the pairs):\n");
        s.table(&CPU_COLUMNS, &[cpu_row("this build", &v.router, v.n, true), cpu_row("compared build", &v.compare, v.n, true)]);
    }
    // What the disks' syncs took in this run (etcd alone), for the explanation below.
    let sync_ms = |disk: Disk| variants.iter().find(|v| v.disk == disk).and_then(|v| wal_figures(&v.etcd, v.n)).map_or("not measured".to_owned(), |(ms, _, _)| format!("{ms:.2} ms"));
    s.line(format!(
        "**Why this target.** The router's writes are judged against etcd doing the same transactions with the same watch open, at the same concurrency: what a write costs etcd is the floor of any API server over it, and the rest is what shardplane adds. The target ({:.0}%, the whole interval) is set with etcd's disk as slow as a production volume, because that is how etcd runs and what bounds a cluster's write rate: each commit waits on a sync (in this run {} on average with etcd alone), and the API layer's CPU should hide behind those waits. This machine's own disk synced in {} on average in this run and tmpfs not at all, so there every process shares 2 cores and the ratio follows the CPU per write (the tables above): it says where the API layer's cost is, not whether a deployment keeps up.\n",
        100.0 * GOAL,
        sync_ms(Disk::Throttled),
        sync_ms(Disk::Real),
    ));
    if let Some(v) = variants.iter().find(|v| v.disk == Disk::Throttled)
        && let (Some((_, router_batch, _)), Some((_, etcd_batch, _))) = (wal_figures(&v.router, v.n), wal_figures(&v.etcd, v.n))
    {
        s.line(format!(
            "**Where the throttled gap comes from.** With the disk bound, a store's write rate is the writes each sync carries divided by the sync's time; the syncs took as long in both arms, and each carried {router_batch:.1} writes through the router against {etcd_batch:.1} with etcd alone ({:.0}%). With the same {CONCURRENCY} writes in flight, the time each spends in the router and its shard is time it is not waiting at etcd to join the next commit, so fewer join each one. More writers in flight (as a cluster's many clients are) would fill the commits again; a leaner request path would too.\n",
            100.0 * router_batch / etcd_batch
        ));
    }
    s
}
