//! `bench`: shardplane's benchmarks, each variant measured side by side in one run on one
//! machine, written to `benches/RESULTS.md` with plots under `benches/plots/`.
//!
//! `cargo run --release -p shardplane-benches -- all` (or one scenario: `memory-per-shard`,
//! `memory-under-churn`, `list`, `watch`, `write`, `churn`, `move`, `store`, `access`, `apf`,
//! `growth`, `cluster`) starts etcd on tmpfs, builds and starts `shard-router`
//! (which starts the shard processes), loads realistic objects and measures. `--smoke` runs
//! every scenario at tiny sizes (CI runs it in a debug build so the benchmarks never rot; its
//! report goes to `target/bench-smoke/` and says that its numbers mean nothing). `compare OLD NEW`
//! checks that two runs' reports reach the same verdicts.

mod access;
mod apf;
mod churn;
mod cluster;
mod compare;
mod growth;
mod list;
mod memory;
mod memory_churn;
mod moves;
mod node_axis;
mod objects;
mod profile;
mod report;
mod speed;
mod store;
mod watch;
mod write;

use clap::Parser;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use report::{Section, Series, line_plot};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(name = "bench")]
struct Args {
    /// `all`, or one of: memory-per-shard, memory-under-churn, list, watch, write, churn, move, store, access, apf, growth,
    /// cluster (the node axis: `--objects` is then the ladder of node counts); or `serve`, which loads
    /// `--objects` pods (default 100000), starts `--shards` K behind a router, prints their
    /// URLs and pids and waits for Ctrl-C: a system to profile or try by hand; or `compare OLD NEW`,
    /// which says whether two reports reach the same verdict on every target.
    scenario: String,
    /// For `compare`: the two reports.
    reports: Vec<PathBuf>,
    /// The shard processes behind the router for `serve`.
    #[arg(long, default_value_t = 4)]
    shards: u32,
    /// Tiny sizes: checks that every scenario runs, measures nothing.
    #[arg(long)]
    smoke: bool,
    /// Where to write the report (plots go to a `plots/` directory beside it). Default:
    /// benches/RESULTS.md, or target/bench-smoke/RESULTS.md with --smoke.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Object counts for memory-per-shard (comma-separated; default 100000,500000, smoke 3000).
    #[arg(long, value_delimiter = ',')]
    objects: Vec<usize>,
    /// Also profile the server processes (linux-perf's `perf record`) during an extra run of
    /// each case that misses its target, and put the flat profiles in the report.
    #[arg(long)]
    perf: bool,
    /// Which topologies `cluster` runs (comma-separated of one-shard, router, router-tier;
    /// default all three).
    #[arg(long, value_delimiter = ',')]
    topologies: Vec<String>,
    /// Which ladders `cluster` runs (comma-separated of shared, budget; default both).
    #[arg(long, value_delimiter = ',')]
    ladders: Vec<String>,
    /// Another build's `shard-router` binary: `write` then also runs this build against it in
    /// interleaved pairs (before and after a change, in one run).
    #[arg(long)]
    compare_router: Option<PathBuf>,
}

const SCENARIOS: [&str; 12] = ["memory-per-shard", "memory-under-churn", "list", "watch", "write", "churn", "move", "store", "access", "apf", "growth", "cluster"];

/// What every scenario gets.
pub struct Ctx {
    pub router: PathBuf,
    pub smoke: bool,
    /// `--objects`: overrides memory-per-shard's N.
    pub objects: Vec<usize>,
    /// `--perf`, and perf can sample here.
    pub perf: bool,
    /// `--topologies`: which of `cluster`'s topologies run (empty: all).
    pub topologies: Vec<String>,
    /// `--ladders`: which of `cluster`'s ladders run (empty: both).
    pub ladders: Vec<String>,
    /// `--compare-router`: another build to run `write` against.
    pub compare_router: Option<PathBuf>,
    plots: PathBuf,
    fonts: bool,
    progress: MultiProgress,
}

impl Ctx {
    /// How many interleaved pairs a comparison takes: `min`, then more while a target is
    /// unsettled, up to `cap`; a smoke run takes one pair, which settles nothing.
    pub fn pairs(&self, min: usize, cap: usize) -> report::PairBudget {
        if self.smoke { report::PairBudget::SMOKE } else { report::PairBudget { min, cap } }
    }

    /// A progress bar of `len` steps.
    pub fn bar(&self, len: u64, what: &str) -> ProgressBar {
        let b = self.progress.add(ProgressBar::new(len));
        b.set_style(ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({eta})").expect("template").progress_chars("=> "));
        b.set_message(what.to_owned());
        b
    }

    /// A spinner for a step of unknown length.
    pub fn spinner(&self, what: &str) -> ProgressBar {
        let b = self.progress.add(ProgressBar::new_spinner());
        b.set_message(what.to_owned());
        b.enable_steady_tick(std::time::Duration::from_millis(200));
        b
    }

    /// Draws a plot into the plots directory; its file name, or None (reported) if it failed
    /// or no font is installed.
    pub fn plot(&self, name: &str, draw: impl FnOnce(&Path) -> Result<(), String>) -> Option<String> {
        // A smoke run only checks that scenarios run; a real one must not lose its plots quietly.
        if !self.fonts {
            assert!(self.smoke, "plot {name}: no font at /usr/share/fonts/truetype/dejavu (install fonts-dejavu-core)");
            return None;
        }
        match draw(&self.plots.join(name)) {
            Ok(()) => Some(name.to_owned()),
            Err(e) => {
                assert!(self.smoke, "plot {name} failed: {e}");
                None
            }
        }
    }
}

/// etcd 3.5 on tmpfs with room for 500,000 realistic objects (the default 2 GiB quota is not).
pub async fn start_etcd() -> shardplane_testkit::Etcd {
    shardplane_testkit::Etcd::start_with(&["--quota-backend-bytes", "8589934592"]).await
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kib: u64 = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| m.lines().find(|l| l.starts_with("MemTotal:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())).unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())).unwrap_or_default();
    format!("{cores} cores ({cpu}), {:.0} GiB", mem_kib as f64 / 1048576.0)
}

/// The scaling curve: how the measured figures grow with N and K.
fn scaling(ctx: &Ctx, memory: &[memory::MemoryPoint], list: &[(u32, f64)]) -> Section {
    let mut s = Section::new("scaling curve");
    s.line("How the figures above grow with the number of objects N and of shards K, from this run's own measurements.\n");
    let mut ns: Vec<usize> = memory.iter().map(|p| p.n).collect();
    ns.dedup();
    let mut ks: Vec<u32> = memory.iter().map(|p| p.k).collect();
    ks.sort();
    ks.dedup();
    let by_n: Vec<Series> = ks.iter().map(|&k| Series { label: format!("all shards' heap, K={k}"), points: memory.iter().filter(|p| p.k == k).map(|p| (p.n as f64, p.heaps.iter().sum::<f64>() / 1048576.0)).collect() }).collect();
    let rows: Vec<Vec<String>> = memory.iter().map(|p| vec![p.n.to_string(), p.k.to_string(), report::mib(p.largest()), report::mib(p.heaps.iter().sum()), format!("{:.0}", p.heaps.iter().sum::<f64>() / p.n as f64)]).collect();
    s.table(&["N", "K", "largest shard heap", "all shards' heap", "heap bytes per object (all shards)"], &rows);
    if let Some(name) = ctx.plot("memory-vs-objects.png", |p| line_plot(p, "Heap of all shards vs objects", "objects (N)", "heap (MiB)", &by_n)) {
        s.line(format!("![heap vs N](plots/{name})\n"));
    }
    if !list.is_empty() {
        s.line(format!("LIST of all pods, p50 by K: {}.\n", list.iter().map(|(k, ms)| format!("K={k} {ms:.0} ms")).collect::<Vec<_>>().join(", ")));
    }
    s
}

/// `bench serve`: a loaded system left running for profiling by hand.
async fn serve(args: &Args) {
    let n = args.objects.first().copied().unwrap_or(100_000);
    let etcd = start_etcd().await;
    println!("etcd {} pid {}; loading {n} pods", etcd.endpoint, etcd.pid());
    objects::load(&etcd.endpoint, &[(objects::Kind::Pod, 0..n)], |_| {}).await;
    let t = cluster::Topology::start(&cluster::build_router(), &etcd.endpoint, args.shards).await;
    for s in &t.shards {
        println!("shard pid {} {}", s.pid, s.url);
    }
    println!("router pid {} {}; Ctrl-C stops everything", t.router_pid(), t.url);
    let _ = tokio::signal::ctrl_c().await;
    t.stop().await;
}

/// Each scenario's time, for the report's header: a full run is long, and which part is long
/// decides what to shorten.
struct Laps {
    times: Vec<(&'static str, std::time::Duration)>,
    last: Instant,
}

impl Laps {
    /// Notes that scenario `name` ended now.
    fn lap(&mut self, name: &'static str) {
        self.times.push((name, self.last.elapsed()));
        self.last = Instant::now();
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let run_all = args.scenario == "all";
    if args.scenario != "compare" && !args.reports.is_empty() {
        eprintln!("bench: {:?} takes no reports; only compare does", args.scenario);
        std::process::exit(2);
    }
    if args.scenario == "serve" {
        return serve(&args).await;
    }
    if args.scenario == "compare" {
        match args.reports.as_slice() {
            [old, new] => compare::run(old, new),
            _ => {
                eprintln!("bench compare: expected two reports, OLD and NEW");
                std::process::exit(2);
            }
        }
    }
    if !run_all && !SCENARIOS.contains(&args.scenario.as_str()) {
        eprintln!("bench: unknown scenario {:?}; expected all or one of {}", args.scenario, SCENARIOS.join(", "));
        std::process::exit(2);
    }
    if cfg!(debug_assertions) && !args.smoke {
        eprintln!("bench: measurements need a release build (cargo run --release -p shardplane-benches -- ...); only --smoke runs in a debug build");
        std::process::exit(2);
    }
    let out = args.out.clone().unwrap_or_else(|| if args.smoke { cluster::workspace_root().join("target/bench-smoke/RESULTS.md") } else { cluster::workspace_root().join("benches/RESULTS.md") });
    let plots = out.parent().expect("report directory").join("plots");
    std::fs::create_dir_all(&plots).expect("plots directory");
    let perf = args.perf && profile::available();
    if args.perf && !perf {
        eprintln!("bench: --perf needs linux-perf (apt-get install linux-perf) and perf_event_paranoid ≤ 2");
        std::process::exit(2);
    }
    let ctx = Ctx { router: cluster::build_router(), smoke: args.smoke, objects: args.objects.clone(), perf, topologies: args.topologies.clone(), ladders: args.ladders.clone(), compare_router: args.compare_router.clone(), plots, fonts: report::register_font(), progress: MultiProgress::new() };
    // The machine's speed before any scenario (a smoke run's is a moment's, and means nothing).
    let speed_window = std::time::Duration::from_millis(if args.smoke { 20 } else { 1000 });
    let speed_before = speed::measure(speed_window);
    let started = Instant::now();
    let want = |name: &str| run_all || args.scenario == name;
    let mut sections = Vec::new();
    let (mut memory_points, mut list_points) = (Vec::new(), Vec::new());
    let mut laps = Laps { times: Vec::new(), last: Instant::now() };
    if want("memory-per-shard") {
        let (s, p) = memory::run(&ctx).await;
        sections.push(s);
        memory_points = p;
        laps.lap("memory-per-shard");
    }
    if want("memory-under-churn") {
        sections.push(memory_churn::run(&ctx).await);
        laps.lap("memory-under-churn");
    }
    if want("list") {
        let (s, p) = list::run(&ctx).await;
        sections.push(s);
        list_points = p;
        laps.lap("list");
    }
    if want("watch") {
        sections.push(watch::run(&ctx).await);
        laps.lap("watch");
    }
    if want("write") {
        sections.push(write::run(&ctx).await);
        laps.lap("write");
    }
    if want("churn") {
        sections.push(churn::run(&ctx).await);
        laps.lap("churn");
    }
    if want("move") {
        sections.push(moves::run(&ctx).await);
        laps.lap("move");
    }
    if want("store") {
        sections.push(store::run(&ctx).await);
        laps.lap("store");
    }
    if want("access") {
        sections.push(access::run(&ctx).await);
        laps.lap("access");
    }
    if want("apf") {
        sections.push(apf::run(&ctx).await);
        laps.lap("apf");
    }
    if want("growth") {
        sections.push(growth::run(&ctx).await);
        laps.lap("growth");
    }
    if want("cluster") {
        sections.push(node_axis::run(&ctx).await);
        laps.lap("cluster");
    }
    if !memory_points.is_empty() {
        sections.push(scaling(&ctx, &memory_points, &list_points));
    }
    let speed_after = speed::measure(speed_window);
    let objects = if args.objects.is_empty() { String::new() } else { format!(" --objects {}", args.objects.iter().map(usize::to_string).collect::<Vec<_>>().join(",")) };
    let command = format!("cargo run --release -p shardplane-benches -- {}{}{objects}{}", args.scenario, if args.smoke { " --smoke" } else { "" }, if perf { " --perf" } else { "" });
    let date = jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC").to_string();
    let mut text = "# Benchmark results\n\n".to_string();
    if args.smoke {
        text.push_str("> **Smoke run**: tiny sizes and possibly a debug build. It checks that every scenario runs; its numbers mean nothing.\n\n");
    }
    text.push_str(&format!(
        "- **Command**: `{command}` ({:.1} minutes)\n- **Machine**: {}; Debian 12; the store: {}, its data on /dev/shm unless a scenario says otherwise. Everything — etcd, the shards, the router and the load — shares these cores.\n{}- **Date**: {date}\n- **Minutes per scenario**: {}\n- Every figure below comes from this one run; variants are measured side by side against the same etcd and data. Where a scenario repeats a measurement, it reports the median (p50) of the repeats.\n\n",
        started.elapsed().as_secs_f64() / 60.0,
        machine(),
        shardplane_testkit::store_description(),
        speed::header_line(speed_before, speed_after, speed_window),
        laps.times.iter().map(|(name, took)| format!("{name} {:.1}", took.as_secs_f64() / 60.0)).collect::<Vec<_>>().join(", ")
    ));
    let targets: Vec<&report::Target> = sections.iter().flat_map(|s| &s.targets).collect();
    let count = |v: report::Verdict| targets.iter().filter(|t| t.verdict == v).count();
    text.push_str(&format!(
        "**Targets**: {} of {} met, {} missed, {} unsettled (a comparison's interval still holds its goal after its last pair: RFC 0017).\n\n",
        count(report::Verdict::Met),
        targets.len(),
        count(report::Verdict::Missed),
        count(report::Verdict::Unsettled)
    ));
    for s in &sections {
        text.push_str(&s.render());
    }
    std::fs::write(&out, text).expect("write report");
    println!("report: {}", out.display());
}
