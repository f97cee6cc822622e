//! growth: how the figures an operator sizes a deployment by grow with N objects (100k, 500k,
//! 1M of the memory scenario's mix) and K shard processes (1, 2, 4, 8): the largest shard's RSS
//! and heap, cache load time (router start to every shard ready), restart-to-ready time of the
//! largest shard after SIGKILL, paged LIST latency through the router, the router's RSS, and
//! the time to move a quarter of the objects to one other shard. From those points it fits the
//! capacity model (RFC 0017) and writes the table for choosing K at 1M and 10M objects.
//!
//! Each N gets its own etcd; every K is a fresh `shard-router --shards K` on it, so each
//! topology's figures are its own, one after another on the same data.

use crate::Ctx;
use crate::cluster::{Topology, metrics, rss_bytes, sum, try_metrics};
use crate::objects::{Kind, load};
use crate::report::{Section, Series, line_plot, mib, percentile};
use shardplane_keyspace::HashRange;
use shardplane_storage::Storage;
use std::time::{Duration, Instant};

/// One topology's figures.
#[derive(Clone, Debug)]
pub struct GrowthPoint {
    pub n: usize,
    pub k: u32,
    /// Objects on the shard holding the most.
    pub largest_objects: f64,
    pub largest_rss: f64,
    pub largest_heap: f64,
    pub router_rss: f64,
    /// Router start to every shard ready (caches loaded).
    pub load_s: f64,
    /// SIGKILL of the largest shard to its successor answering ready.
    pub restart_s: f64,
    /// Milliseconds per page of a paged LIST of all pods (limit 500) through the router.
    pub pages_ms: Vec<f64>,
    /// The whole paged LIST.
    pub list_s: f64,
    /// Pages of the warm-up page and the timed pass the router refused and the pass asked
    /// again after their Retry-After (a retry's wait is in its page's time).
    pub refused: Vec<crate::list::Refusal>,
    /// Moving a quarter of the hash space to one other shard: (seconds, objects moved, moves).
    pub quarter_move: Option<(f64, f64, usize)>,
}

/// The objects of the mix a shard holds, from its `apiserver_storage_objects` (namespaces and
/// the cluster's own objects left out).
async fn mix_objects(url: &str) -> f64 {
    let m = metrics(url).await;
    Kind::ALL.iter().map(|k| sum(&m, &format!("apiserver_storage_objects{{resource=\"{}\"}}", k.resource().2))).sum()
}

/// The objects of the mix each shard holds.
async fn objects_per_shard(t: &Topology) -> Vec<f64> {
    let mut v = Vec::new();
    for s in &t.shards {
        v.push(mix_objects(&s.url).await);
    }
    v
}

/// Kills shard `i` of `t` with SIGKILL; the router starts its successor on the same ranges and
/// publishes the new address in the range map. Returns the seconds from the kill to the
/// successor answering `/readyz`.
async fn restart_to_ready(t: &Topology, storage: &Storage, i: usize) -> f64 {
    let old = t.shards[i].url.clone();
    let id = format!("shard-{i}");
    let started = Instant::now();
    let status = std::process::Command::new("kill").args(["-KILL", &t.shards[i].pid.to_string()]).status().expect("run kill");
    assert!(status.success(), "kill -KILL {}", t.shards[i].pid);
    let deadline = started + Duration::from_secs(900);
    let url = loop {
        let map = storage.load_range_map().await.expect("map").expect("a map").map;
        if let Some(s) = map.shards.iter().find(|s| s.id == id && s.url != old) {
            break s.url.clone();
        }
        assert!(Instant::now() < deadline, "{id} was not restarted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    crate::cluster::wait_ready(&url, deadline).await;
    started.elapsed().as_secs_f64()
}

/// The pieces of the first quarter of the hash space, by owner, and the shard that takes them
/// all: the owner of the middle hash, which holds none of the quarter once K ≥ 2.
fn quarter_pieces(map: &shardplane_storage::range_map::StoredRangeMap) -> (Vec<HashRange>, String) {
    let quarter_end: u128 = 1 << 62;
    let to = map.shards.iter().find(|s| s.ranges.iter().any(|r| r.contains(1 << 63))).expect("an owner of every hash").id.clone();
    let mut pieces: Vec<HashRange> = map
        .shards
        .iter()
        .flat_map(|s| s.ranges.iter())
        .filter(|r| u128::from(r.start()) < quarter_end)
        .filter_map(|r| HashRange::new(r.start(), r.end().min(quarter_end)))
        .collect();
    pieces.sort_by_key(|r| r.start());
    (pieces, to)
}

/// Moves the first quarter of the hash space to one shard, one piece after another as
/// `shardctl move` does; (seconds, objects the receiving shard gained, moves).
async fn move_quarter(storage: &Storage) -> (f64, f64, usize) {
    let map = storage.load_range_map().await.expect("map").expect("a map").map;
    let (pieces, to) = quarter_pieces(&map);
    // From the map: the receiver may be the shard restarted just before, on a new address.
    let receiver = map.shards.iter().find(|s| s.id == to).expect("the receiver is in the map").url.clone();
    let before = mix_objects(&receiver).await;
    let started = Instant::now();
    for piece in &pieces {
        crate::moves::move_and_wait(storage, *piece, &to).await;
    }
    let took = started.elapsed().as_secs_f64();
    let after = mix_objects(&receiver).await;
    (took, after - before, pieces.len())
}

/// One topology over `etcd` holding `n` objects of the mix: every figure of a [`GrowthPoint`].
async fn measure(ctx: &Ctx, etcd: &str, n: usize, k: u32) -> GrowthPoint {
    let spinner = ctx.spinner(&format!("growth: N={n} K={k}"));
    let started = Instant::now();
    let t = Topology::start(&ctx.router, etcd, k).await;
    let load_s = started.elapsed().as_secs_f64();
    let objects = objects_per_shard(&t).await;
    assert_eq!(objects.iter().sum::<f64>() as usize, n, "the shards hold {objects:?}, {n} were loaded");
    let (mut largest_rss, mut largest_heap) = (0f64, 0f64);
    for s in &t.shards {
        let m = metrics(&s.url).await;
        largest_rss = largest_rss.max(m["process_resident_memory_bytes"]);
        largest_heap = largest_heap.max(*m.get("shardplane_heap_allocated_bytes").expect("shards run with jemalloc"));
    }
    // A paged LIST of every pod, as a reflector's initial list is: one warm-up page, then the
    // whole pass, each page timed.
    let want = Kind::Pod.count_in(n);
    let warm = crate::list::list_pass(&t.url, "/api/v1/pods", 500, Some(1)).await;
    let pass = crate::list::list_pass(&t.url, "/api/v1/pods", 500, None).await;
    let refused = warm.refused.into_iter().chain(pass.refused).collect();
    assert_eq!(pass.items, want, "paged LIST of all pods through the router at K={k}");
    let router_rss = rss_bytes(t.router_pid());
    let storage = Storage::connect(&[etcd.to_owned()]).await.expect("etcd");
    let (largest, largest_objects) = objects.iter().copied().enumerate().fold((0, 0.0), |(bi, bv), (i, v)| if v > bv { (i, v) } else { (bi, bv) });
    let restart_s = restart_to_ready(&t, &storage, largest).await;
    let quarter_move = if k >= 2 {
        crate::cluster::wait_members_loaded(&storage, k as usize, Duration::from_secs(300)).await;
        Some(move_quarter(&storage).await)
    } else {
        None
    };
    t.stop().await;
    spinner.finish_and_clear();
    GrowthPoint { n, k, largest_objects, largest_rss, largest_heap, router_rss, load_s, restart_s, pages_ms: pass.pages_ms, list_s: pass.total_ms / 1000.0, quarter_move, refused }
}

/// Least-squares line y = a + b·x through `points`: (a, b).
pub fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let b = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (my - b * mx, b)
}

/// The largest miss of the line `(a, b)` on `points`: (|y - (a + b·x)|, that point's x).
fn worst_miss(line: (f64, f64), points: &[(f64, f64)]) -> (f64, f64) {
    points.iter().map(|(x, y)| ((y - (line.0 + line.1 * x)).abs(), *x)).fold((0.0, 0.0), |w, m| if m.0 > w.0 { m } else { w })
}

/// The capacity model fitted to this run's points (RFC 0017): every figure a line in the
/// objects. Memory is held per object; a load reads each key a bounded number of times (large
/// ranges in pieces, RFC 0018), so the times are a fixed start plus a cost per object.
struct Model {
    /// Largest shard RSS (bytes) = a + b·objects on it.
    rss: (f64, f64),
    /// Restart-to-ready (s) = a + b·objects: one shard loading alone, as each would on its own
    /// cores (the model's load time too).
    restart: (f64, f64),
    /// Moving a quarter (s) = a + b·(objects moved).
    moving: (f64, f64),
    /// The points each line was fitted to, for its worst miss.
    restart_points: Vec<(f64, f64)>,
    moving_points: Vec<(f64, f64)>,
    /// The store's bytes per object (etcd's database size over N).
    store_bytes_per_object: f64,
}

impl Model {
    fn rss(&self, per_shard: f64) -> f64 {
        self.rss.0 + self.rss.1 * per_shard
    }
    fn restart(&self, per_shard: f64) -> f64 {
        self.restart.0 + self.restart.1 * per_shard
    }
    fn moving(&self, objects: f64) -> f64 {
        self.moving.0 + self.moving.1 * objects
    }
}

/// Per-shard memory budget and restart bound the table's "smallest K" column uses.
const BUDGET_RSS: f64 = 4.0 * 1024.0 * 1024.0 * 1024.0;
const BUDGET_RESTART_S: f64 = 30.0;

pub async fn run(ctx: &Ctx) -> Section {
    let sizes: Vec<usize> = if ctx.smoke { vec![2_000, 4_000] } else { vec![100_000, 500_000, 1_000_000] };
    let ks: Vec<u32> = if ctx.smoke { vec![1, 2] } else { vec![1, 2, 4, 8] };
    let mut points = Vec::new();
    let mut store_sizes = Vec::new();
    for &n in &sizes {
        let etcd = crate::start_etcd().await;
        let bar = ctx.bar(n as u64, &format!("growth: loading {n} objects"));
        let b = bar.clone();
        load(&etcd.endpoint, &Kind::counts(&Kind::ALL, n), move |d| b.inc(d)).await;
        bar.finish_and_clear();
        let db = try_metrics(&etcd.endpoint).await.and_then(|m| m.get("etcd_mvcc_db_total_size_in_bytes").copied()).expect("etcd's database size");
        store_sizes.push((n, db));
        for &k in &ks {
            points.push(measure(ctx, &etcd.endpoint, n, k).await);
        }
    }
    report(ctx, &points, &store_sizes)
}

fn report(ctx: &Ctx, points: &[GrowthPoint], store_sizes: &[(usize, f64)]) -> Section {
    let mut s = Section::new("growth");
    s.line("How the figures an operator sizes by grow with the objects N (the memory scenario's mix: 6 Pods, 3 ConfigMaps, 1 Lease in 10) and the shard processes K. Each N is loaded into its own etcd; each K is a fresh `shard-router --shards K` on it, measured in this order: start to every shard ready (cache load), each shard's RSS and heap, a paged LIST of every pod through the router (limit 500; one warm-up page, then the whole pass, each page timed; a page refused with 429, 503 or 504 is asked again after its Retry-After, as a reflector would, and counted in the table), the router's RSS after it, the largest shard killed with SIGKILL and the time until the router's successor process answers ready, then (K ≥ 2) the first quarter of the hash space moved to the shard that owns the middle hash, one `shardctl move` after another, no writes running.\n");
    let mut rows = Vec::new();
    for p in points {
        let mut pages = p.pages_ms.clone();
        let mv = p.quarter_move.map_or("– (one shard)".to_owned(), |(secs, objects, moves)| format!("{secs:.1} s ({objects:.0} objects, {moves} move{})", if moves == 1 { "" } else { "s" }));
        rows.push(vec![
            p.n.to_string(),
            p.k.to_string(),
            format!("{:.0}", p.largest_objects),
            mib(p.largest_rss),
            mib(p.largest_heap),
            format!("{:.1}", p.load_s),
            format!("{:.1}", p.restart_s),
            format!("{:.2} / {:.2} (n={})", percentile(&mut pages, 0.5), percentile(&mut pages, 0.99), pages.len()),
            format!("{:.2}", p.list_s),
            mib(p.router_rss),
            mv,
            p.refused.len().to_string(),
        ]);
    }
    s.table(&["N", "K", "objects on the largest shard", "largest shard RSS", "its heap", "load s", "restart-to-ready s", "LIST page p50 / p99 ms (pages)", "whole paged LIST s", "router RSS", "move a quarter", "LIST pages refused (retried)"], &rows);
    let refused: Vec<(String, crate::list::Refusal)> = points.iter().flat_map(|p| p.refused.iter().map(move |r| (format!("N={} K={}", p.n, p.k), r.clone()))).collect();
    s.line(crate::list::refusals_text(&refused));
    for (n, db) in store_sizes {
        s.line(format!("etcd's database at N = {n}: {} ({:.0} bytes per object).", mib(*db), db / *n as f64));
    }
    s.line("");
    // Plots: each figure against N, one line per K.
    let ks: Vec<u32> = {
        let mut v: Vec<u32> = points.iter().map(|p| p.k).collect();
        v.sort();
        v.dedup();
        v
    };
    let per_k = |f: &dyn Fn(&GrowthPoint) -> Option<f64>| -> Vec<Series> {
        ks.iter().map(|&k| Series { label: format!("K={k}"), points: points.iter().filter(|p| p.k == k).filter_map(|p| Some((p.n as f64, f(p)?))).collect() }).filter(|s| !s.points.is_empty()).collect()
    };
    let plots: [(&str, &str, &str, Vec<Series>); 5] = [
        ("growth-rss.png", "Largest shard RSS vs objects", "RSS (MiB)", per_k(&|p| Some(p.largest_rss / 1048576.0))),
        ("growth-load.png", "Cache load and restart-to-ready vs objects", "seconds", {
            let mut v = per_k(&|p| Some(p.load_s));
            v.iter_mut().for_each(|s| s.label = format!("load, {}", s.label));
            v.extend(per_k(&|p| Some(p.restart_s)).into_iter().map(|mut s| {
                s.label = format!("restart, {}", s.label);
                s
            }));
            v
        }),
        ("growth-list.png", "Paged LIST of all pods through the router vs objects", "seconds (whole pass)", per_k(&|p| Some(p.list_s))),
        ("growth-router.png", "Router RSS vs objects", "RSS (MiB)", per_k(&|p| Some(p.router_rss / 1048576.0))),
        ("growth-move.png", "Moving a quarter of the objects vs objects", "seconds", per_k(&|p| p.quarter_move.map(|m| m.0))),
    ];
    for (file, title, y, series) in plots {
        if let Some(name) = ctx.plot(file, |path| line_plot(path, title, "objects (N)", y, &series)) {
            s.line(format!("![{title}](plots/{name})\n"));
        }
    }
    let model = fit_model(points, store_sizes);
    s.line(capacity_text(&model, points));
    s
}

fn fit_model(points: &[GrowthPoint], store_sizes: &[(usize, f64)]) -> Model {
    let restart_points: Vec<(f64, f64)> = points.iter().map(|p| (p.largest_objects, p.restart_s)).collect();
    let moving_points: Vec<(f64, f64)> = points.iter().filter_map(|p| p.quarter_move).map(|(secs, objects, _)| (objects, secs)).collect();
    Model {
        rss: fit(&points.iter().map(|p| (p.largest_objects, p.largest_rss)).collect::<Vec<_>>()),
        restart: fit(&restart_points),
        moving: fit(&moving_points),
        restart_points,
        moving_points,
        // At the largest N, where etcd's fixed overhead weighs least.
        store_bytes_per_object: store_sizes.iter().max_by_key(|(n, _)| *n).map_or(0.0, |(n, db)| db / *n as f64),
    }
}

/// The capacity table for 1M and 10M objects: measured where this run has the point, the
/// model elsewhere (marked), and the smallest K within the stated budget.
fn capacity_text(m: &Model, points: &[GrowthPoint]) -> String {
    let mut t = String::from("### Capacity model and table\n\n");
    t.push_str(&format!(
        "Fitted to this run's points by least squares, with x the objects on the largest shard: its RSS = {} + {:.0} bytes·x; restart-to-ready = {:.1} s + {:.1} µs·x (its largest miss on a measured point {:.1} s, at x = {:.0}); moving a quarter = {:.1} s + {:.1} µs·m for m objects moved (largest miss {:.1} s, at m = {:.0}). All three are lines: a shard holds each object once, and a load reads each key a bounded number of times (RFC 0018). \
         Assumptions: objects spread evenly (hash ranges of equal size hold equal shares, as the table above shows); the mix and object sizes of this benchmark; one etcd as fast as this run's, on tmpfs (a disk-bound etcd loads slower); for the model's rows every shard on cores of its own, so its cache load is a shard loading alone, which is what restart-to-ready measures (here all K shards shared 2 cores and loaded at once, so the measured load times above K = 1 are upper bounds); no watch history (churn adds it: see memory-under-churn). \
         \"Smallest K\" is the fewest shards whose largest shard stays within {} RSS and restarts within {BUDGET_RESTART_S:.0} s — an example budget; read the row for your own.\n\n",
        mib(m.rss.0),
        m.rss.1,
        m.restart.0,
        m.restart.1 * 1e6,
        worst_miss(m.restart, &m.restart_points).0,
        worst_miss(m.restart, &m.restart_points).1,
        m.moving.0,
        m.moving.1 * 1e6,
        worst_miss(m.moving, &m.moving_points).0,
        worst_miss(m.moving, &m.moving_points).1,
        gib(BUDGET_RSS)
    ));
    t.push_str("| N | K | objects per shard | largest shard RSS | cache load | restart-to-ready | move a quarter | source |\n|---|---|---|---|---|---|---|---|\n");
    let mut smallest = Vec::new();
    for n in [1_000_000usize, 10_000_000] {
        let mut chosen = None;
        for k in [1u32, 2, 4, 8, 16, 32, 64] {
            let per = n as f64 / k as f64;
            let measured = points.iter().find(|p| p.n == n && p.k == k);
            let (rss, load, restart, mv, source) = match measured {
                Some(p) => (p.largest_rss, p.load_s, p.restart_s, p.quarter_move.map(|q| q.0), "measured"),
                None => (m.rss(per), m.restart(per), m.restart(per), (k >= 2).then(|| m.moving(n as f64 / 4.0)), "model"),
            };
            if chosen.is_none() && rss <= BUDGET_RSS && restart <= BUDGET_RESTART_S {
                chosen = Some(k);
            }
            t.push_str(&format!("| {n} | {k} | {per:.0} | {} | {load:.0} s | {restart:.0} s | {} | {source} |\n", gib(rss), mv.map_or("–".to_owned(), |s| format!("{s:.0} s"))));
        }
        smallest.push((n, chosen));
    }
    t.push('\n');
    for (n, k) in smallest {
        let store = m.store_bytes_per_object * n as f64;
        let etcd = if store > 8.0 * 1073741824.0 {
            format!("etcd would hold {}, more than its 8 GiB suggested maximum (`--quota-backend-bytes`): at this N the store must be partitioned — resources on etcd clusters of their own (`--storage-config`, RFC 0008), and a resource larger than 8 GiB alone is beyond what shardplane can store today", gib(store))
        } else {
            format!("etcd holds {}", gib(store))
        };
        t.push_str(&format!("- **N = {n}**: smallest K within the example budget: {}; {etcd}.\n", k.map_or("none up to 64".to_owned(), |k| k.to_string())));
    }
    t.push('\n');
    t
}

fn gib(bytes: f64) -> String {
    format!("{:.2} GiB", bytes / 1073741824.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_recovers_a_line_and_the_quarter_is_cut_by_owner() {
        let (a, b) = fit(&[(1.0, 5.0), (2.0, 7.0), (4.0, 11.0)]);
        assert!((a - 3.0).abs() < 1e-9 && (b - 2.0).abs() < 1e-9, "{a} {b}");
        assert_eq!(worst_miss((3.0, 2.0), &[(1.0, 5.0), (2.0, 7.5), (4.0, 10.0)]), (1.0, 4.0));
        for k in [2u32, 4, 8] {
            let shards = HashRange::split_even(k).into_iter().enumerate().map(|(i, r)| shardplane_storage::range_map::StoredShard { id: format!("shard-{i}"), url: String::new(), ranges: vec![r], cordoned: false }).collect();
            let map = shardplane_storage::range_map::StoredRangeMap { epoch: 1, cutover: 0, shards, moves: Vec::new(), balancing: false };
            let (pieces, to) = quarter_pieces(&map);
            assert_eq!(pieces.iter().map(|r| r.end() - u128::from(r.start())).sum::<u128>(), 1 << 62, "K={k}");
            assert_eq!(pieces.len(), (k as usize / 4).max(1), "K={k}");
            assert_eq!(to, format!("shard-{}", k / 2));
        }
    }
}

