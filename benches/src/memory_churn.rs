//! memory-under-churn: memory as an operator sees it (RSS beside heap), for a pod-heavy mix
//! and a small-object mix (Leases, Events, EndpointSlices), with the router carrying 1,000
//! watches over 10 distinct filters: once the caches have loaded, and again after changes
//! written for longer than the watch history's window, so that every shard's history holds
//! the most it can at this machine's write rate (RFC 0017).
//!
//! The changes go straight to etcd in shardplane's layout (as `load` writes), at the rate etcd
//! takes them; the shards follow them as they follow any write.

use crate::Ctx;
use crate::cluster::{Topology, http, metrics, rss_bytes, sum};
use crate::objects::{Kind, load, put_round};
use crate::report::{Section, mib};
use futures::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a watch cache keeps a change (its age bound; `CacheConfig::history_window`).
const HISTORY_WINDOW: Duration = Duration::from_secs(150);
/// Changes a watch cache keeps at most (its count bound; `CacheConfig::history_max_events`).
const HISTORY_MAX_EVENTS: f64 = 100_000.0;
/// Distinct watch filters the router's watches use (label selectors `app=app-0` … `app-9`).
const FILTERS: usize = 10;

/// Memory of the topology at one moment.
struct Snapshot {
    /// Per shard: (heap, RSS).
    shards: Vec<(f64, f64)>,
    /// Changes held in all shards' watch histories.
    history: f64,
    router_rss: f64,
    router_heap: Option<f64>,
}

impl Snapshot {
    async fn take(t: &Topology) -> Self {
        let mut shards = Vec::new();
        let mut history = 0.0;
        for s in &t.shards {
            let m = metrics(&s.url).await;
            shards.push((*m.get("shardplane_heap_allocated_bytes").expect("shards run with jemalloc"), m["process_resident_memory_bytes"]));
            history += sum(&m, "shardplane_watch_cache_history_events");
        }
        let router = metrics(&t.url).await;
        Self { shards, history, router_rss: rss_bytes(t.router_pid()), router_heap: router.get("shardplane_heap_allocated_bytes").copied() }
    }

    fn largest_heap(&self) -> f64 {
        self.shards.iter().map(|s| s.0).fold(0.0, f64::max)
    }

    fn largest_rss(&self) -> f64 {
        self.shards.iter().map(|s| s.1).fold(0.0, f64::max)
    }

    fn heap(&self) -> f64 {
        self.shards.iter().map(|s| s.0).sum()
    }

    fn row(&self, when: &str) -> Vec<String> {
        vec![when.to_owned(), mib(self.largest_heap()), mib(self.largest_rss()), format!("{:.2}", self.largest_rss() / self.largest_heap()), format!("{:.0}", self.history), mib(self.router_rss), self.router_heap.map_or("-".into(), mib)]
    }
}

/// `watchers` watches through the router on `kind`, spread over FILTERS label selectors, each
/// read to its end by a task counting the events it gets. Every watch must be accepted.
async fn open_watches(t: &Topology, kind: Kind, rv: u64, watchers: usize, events: Arc<AtomicU64>) -> Vec<tokio::task::JoinHandle<()>> {
    let (g, v, p) = kind.resource();
    let base = if g.is_empty() { format!("/api/{v}") } else { format!("/apis/{g}/{v}") };
    let client = http();
    let mut tasks = Vec::new();
    for w in 0..watchers {
        let url = format!("{}{base}/{p}?watch=1&allowWatchBookmarks=true&labelSelector=app%3Dapp-{}&resourceVersion={rv}", t.url, w % FILTERS);
        let r = client.get(url).send().await.expect("watch");
        assert!(r.status().is_success(), "watch {p}: {}", r.status());
        let events = events.clone();
        tasks.push(tokio::spawn(async move {
            let mut body = r.bytes_stream();
            while let Some(Ok(chunk)) = body.next().await {
                events.fetch_add(chunk.iter().filter(|&&b| b == b'\n').count() as u64, Ordering::Relaxed);
            }
        }));
    }
    tasks
}

/// One mix: load, watch, measure, churn, measure.
async fn run_mix(ctx: &Ctx, s: &mut Section, name: &str, mix: &[Kind], n: usize, k: u32, watchers: usize, churn_for: Duration) {
    let etcd = crate::start_etcd().await;
    let counts = Kind::counts(mix, n);
    let bar = ctx.bar(n as u64, &format!("memory under churn ({name}): loading {n} objects"));
    let b = bar.clone();
    load(&etcd.endpoint, &counts, move |d| b.inc(d)).await;
    bar.finish_and_clear();
    let t = Topology::start(&ctx.router, &etcd.endpoint, k).await;
    let no_watches = Snapshot::take(&t).await;
    let storage = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.expect("etcd");
    let rv = storage.current_revision().await.expect("revision");
    let events = Arc::new(AtomicU64::new(0));
    let watched = mix[0];
    let tasks = open_watches(&t, watched, rv, watchers, events.clone()).await;
    let loaded = Snapshot::take(&t).await;

    // Changes, a slice of every kind per round, until the history window has passed.
    let spinner = ctx.spinner(&format!("memory under churn ({name}): changing objects for {:.0} s", churn_for.as_secs_f64()));
    let started = Instant::now();
    let (mut round, mut written) = (0u32, 0usize);
    const SLICE: usize = 2_000;
    while started.elapsed() < churn_for {
        round += 1;
        let slice: Vec<(Kind, std::ops::Range<usize>)> = counts
            .iter()
            .filter(|(_, r)| !r.is_empty())
            .map(|(kind, r)| {
                let from = (round as usize - 1) * SLICE % r.len();
                (*kind, from..(from + SLICE).min(r.len()))
            })
            .collect();
        written += slice.iter().map(|(_, r)| r.len()).sum::<usize>();
        put_round(&etcd.endpoint, &slice, round, |_| {}).await;
    }
    let churned = started.elapsed();
    // A consistent LIST waits until every shard has followed the last change.
    let (g, v, p) = watched.resource();
    let base = if g.is_empty() { format!("/api/{v}") } else { format!("/apis/{g}/{v}") };
    let r = http().get(format!("{}{base}/{p}?limit=1", t.url)).send().await.expect("list");
    assert!(r.status().is_success(), "list: {}", r.status());
    spinner.finish_and_clear();
    let after = Snapshot::take(&t).await;
    let open = tasks.iter().filter(|t| !t.is_finished()).count();
    let received = events.load(Ordering::Relaxed);
    for task in tasks {
        task.abort();
    }
    t.stop().await;

    s.line(format!(
        "### {name}\n\n{n} objects ({}), {k} shards behind the router, {watchers} watches of {}s through the router over {FILTERS} label selectors (`app=app-0` … `app-{}`; each object's `app` is one of 97). \
         Changes: {written} writes straight to etcd over {:.0} s ({:.0}/s, every kind in turn, labels unchanged), {} than the history's {:.0} s window. The watches received {received} events; {open} of {watchers} were still open at the end.\n",
        counts.iter().map(|(kind, r)| format!("{} {}", r.len(), kind.name())).collect::<Vec<_>>().join(", "),
        watched.name(),
        FILTERS - 1,
        churned.as_secs_f64(),
        written as f64 / churned.as_secs_f64(),
        if churned >= HISTORY_WINDOW { "longer" } else { "shorter" },
        HISTORY_WINDOW.as_secs_f64(),
    ));
    s.table(
        &["when", "largest shard heap", "largest shard RSS", "RSS / heap", "changes held in the shards' histories", "router RSS", "router heap"],
        &[no_watches.row("loaded, no watches"), loaded.row(&format!("loaded, {watchers} watches open")), after.row("after the changes")],
    );
    let per_watch = (loaded.router_rss - no_watches.router_rss) / watchers as f64;
    let held = after.history - loaded.history;
    let mut explained = format!("The router's resident set grew by {} with the {watchers} watches ({:.1} KiB each); the changes took it to {}. ", mib(loaded.router_rss - no_watches.router_rss), per_watch / 1024.0, mib(after.router_rss));
    if held > 0.0 {
        let per_change = (after.heap() - loaded.heap()) / held;
        let caches = (mix.len() * k as usize) as f64;
        let at_count_bound = HISTORY_MAX_EVENTS * caches;
        explained.push_str(&format!("The shards' heap grew by {} for {held:.0} more changes held ({per_change:.0} bytes each). ", mib(after.heap() - loaded.heap())));
        explained.push_str(&if after.history >= at_count_bound {
            format!("Every history reached its count bound ({HISTORY_MAX_EVENTS:.0} changes per resource per shard, {at_count_bound:.0} here): this is the most they hold at any write rate.\n")
        } else if churned >= HISTORY_WINDOW {
            format!(
                "At this write rate the {:.0} s window is the bound reached; a cluster writing fast enough to reach the count bound ({HISTORY_MAX_EVENTS:.0} changes per resource per shard) would hold up to {at_count_bound:.0} changes here, about {} more across the shards at this size per change.\n",
                HISTORY_WINDOW.as_secs_f64(),
                mib((at_count_bound - after.history) * per_change),
            )
        } else {
            "The changes ran for less than the window, so the histories hold all of them.\n".to_owned()
        });
    } else {
        explained.push('\n');
    }
    s.line(explained);
}

pub async fn run(ctx: &Ctx) -> Section {
    let n = if ctx.smoke { 3_000 } else { 100_000 };
    let k = if ctx.smoke { 2 } else { 4 };
    let watchers = if ctx.smoke { 50 } else { 1_000 };
    // Past the history window, so that the oldest changes have begun to leave it.
    let churn_for = if ctx.smoke { Duration::from_secs(3) } else { HISTORY_WINDOW + Duration::from_secs(10) };
    let mut s = Section::new("memory under churn");
    s.line("Memory as an operator's dashboards show it: each shard's resident set (RSS) beside its heap (jemalloc `stats.allocated`), and the router's, once the caches have loaded and again after a churn phase that runs longer than the watch history's window, for two mixes. Heap is what the process asked for; RSS is what the machine gives it (heap plus the allocator's free pages not yet returned, stacks, code).\n");
    run_mix(ctx, &mut s, "pod-heavy mix", &Kind::ALL, n, k, watchers, churn_for).await;
    run_mix(ctx, &mut s, "small-object mix", &Kind::SMALL, n, k, watchers, churn_for).await;
    s
}
