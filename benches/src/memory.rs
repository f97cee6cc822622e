//! memory-per-shard: the heap each shard process holds once its caches have loaded, for N
//! objects of the realistic mix and K = 1, 2, 4, 8 shard processes.
//!
//! Heap is jemalloc's `stats.allocated` (live bytes the shard asked for), read from each shard's
//! `shardplane_heap_allocated_bytes`; RSS is `process_resident_memory_bytes`. Per kind, the
//! heap cost of an object is measured by loading the kinds one after another and starting a
//! one-shard topology after each (a fresh start has no watch history, so the difference is the
//! cache alone).

use crate::Ctx;
use crate::cluster::{Topology, metrics, sum};
use crate::objects::{Kind, load};
use crate::report::{Section, Series, line_plot, mib};
use std::collections::BTreeMap;

/// One topology's measurement.
pub struct MemoryPoint {
    pub n: usize,
    pub k: u32,
    /// Heap of each shard.
    pub heaps: Vec<f64>,
    pub rss: Vec<f64>,
}

impl MemoryPoint {
    pub fn largest(&self) -> f64 {
        self.heaps.iter().copied().fold(0.0, f64::max)
    }
}

struct Measured {
    heaps: Vec<f64>,
    rss: Vec<f64>,
    objects: BTreeMap<&'static str, f64>,
}

/// Starts `shard-router --shards k`, opens a few watches through it, and reads every shard.
async fn measure(ctx: &Ctx, etcd: &str, k: u32) -> Measured {
    let t = Topology::start(&ctx.router, etcd, k).await;
    // A few watchers, as a live cluster has: one per kind, through the router, from the
    // current revision (a watch without one would first stream every object as ADDED).
    let rv = shardplane_storage::Storage::connect(&[etcd.to_owned()]).await.expect("etcd").current_revision().await.expect("revision");
    let mut watches = Vec::new();
    for kind in Kind::ALL {
        let (g, v, p) = kind.resource();
        let base = if g.is_empty() { format!("/api/{v}") } else { format!("/apis/{g}/{v}") };
        let r = crate::cluster::http().get(format!("{}{base}/{p}?watch=1&resourceVersion={rv}", t.url)).send().await.expect("watch");
        assert!(r.status().is_success(), "watch {p}: {}", r.status());
        watches.push(r);
    }
    let mut m = Measured { heaps: Vec::new(), rss: Vec::new(), objects: BTreeMap::new() };
    for s in &t.shards {
        let x = metrics(&s.url).await;
        m.heaps.push(*x.get("shardplane_heap_allocated_bytes").expect("shards run with jemalloc"));
        m.rss.push(x["process_resident_memory_bytes"]);
        for kind in Kind::ALL {
            let (_, _, p) = kind.resource();
            *m.objects.entry(p).or_default() += sum(&x, &format!("apiserver_storage_objects{{resource=\"{p}\"}}"));
        }
    }
    drop(watches);
    t.stop().await;
    m
}

pub async fn run(ctx: &Ctx) -> (Section, Vec<MemoryPoint>) {
    let sizes: Vec<usize> = if !ctx.objects.is_empty() {
        ctx.objects.clone()
    } else if ctx.smoke {
        vec![3_000]
    } else {
        vec![100_000, 500_000]
    };
    let ks: Vec<u32> = if ctx.smoke { vec![1, 2] } else { vec![1, 2, 4, 8] };
    let mut s = Section::new("memory-per-shard");
    s.line("Each shard's heap once its caches have loaded, with one watch per kind open through the router.");
    s.line("Heap is jemalloc `stats.allocated` of the shard process; RSS is the process's resident set.");
    s.line("The mix, per 10 objects: 6 Pods (~3.6 KiB of JSON, varied labels, owner references, status), 3 ConfigMaps (~1.1 KiB), 1 Lease (~0.4 KiB).\n");
    let mut points = Vec::new();
    for &n in &sizes {
        let etcd = crate::start_etcd().await;
        let bar = ctx.bar(n as u64, &format!("memory: loading {n} objects"));
        let empty = measure(ctx, &etcd.endpoint, 1).await;
        let fixed = empty.heaps[0];
        // Kinds one after another; a one-shard start after each.
        let mut json = BTreeMap::new();
        let mut after = Vec::new();
        for kind in Kind::ALL {
            let b = bar.clone();
            let loaded = load(&etcd.endpoint, &[(kind, 0..kind.count_in(n))], move |d| b.inc(d)).await;
            json.extend(loaded);
            after.push(measure(ctx, &etcd.endpoint, 1).await);
        }
        bar.finish_and_clear();
        let mut kind_rows = Vec::new();
        let mut prev = fixed;
        let (mut all_json, mut all_heap) = (0u64, 0f64);
        for (kind, m) in Kind::ALL.iter().zip(&after) {
            let (count, bytes) = json[kind];
            let heap = m.heaps[0] - prev;
            prev = m.heaps[0];
            let (per_obj, per_json) = (heap / count as f64, bytes as f64 / count as f64);
            all_json += bytes;
            all_heap += heap;
            kind_rows.push(vec![kind.name().to_owned(), count.to_string(), format!("{per_json:.0}"), format!("{per_obj:.0}"), format!("{:.2}x", per_obj / per_json)]);
        }
        let ratio = all_heap / all_json as f64;
        kind_rows.push(vec!["**mix**".into(), n.to_string(), format!("{:.0}", all_json as f64 / n as f64), format!("{:.0}", all_heap / n as f64), format!("**{ratio:.2}x**")]);
        s.line(format!("### N = {n}\n\nCache cost per object (one shard; heap difference as each kind is added; a shard over an empty etcd holds {}):\n", mib(fixed)));
        s.table(&["kind", "objects", "JSON bytes/object", "heap bytes/object", "heap / JSON"], &kind_rows);
        s.target(format!("cached bytes per object / JSON size, mix, N={n}"), format!("{ratio:.2}x"), "≤ 1.3x", ratio <= 1.3);

        let mut rows = Vec::new();
        let mut h1 = 0.0;
        for &k in &ks {
            let m = measure(ctx, &etcd.endpoint, k).await;
            let stored: f64 = m.objects.values().sum();
            assert_eq!(stored as usize, n, "the shards hold {stored} objects of the mix, {n} were loaded");
            let p = MemoryPoint { n, k, heaps: m.heaps, rss: m.rss };
            let largest = p.largest();
            if k == 1 {
                h1 = largest;
            }
            let bound = 1.1 * h1 / k as f64 + fixed;
            let efficiency = h1 / (k as f64 * largest);
            let rss_max = p.rss.iter().copied().fold(0.0, f64::max);
            rows.push(vec![k.to_string(), mib(largest), mib(p.heaps.iter().sum()), mib(rss_max), mib(bound), format!("{:.2}", largest / (h1 / k as f64)), format!("{efficiency:.2}")]);
            if k > 1 {
                s.target(format!("largest shard heap, N={n}, K={k}"), mib(largest), format!("≤ 1.1 × K=1 heap / K + empty shard = {}", mib(bound)), largest <= bound);
            }
            if k == 8 {
                s.target(format!("split efficiency, N={n}, K=8"), format!("{efficiency:.2}"), "≥ 0.9", efficiency >= 0.9);
            }
            points.push(p);
        }
        s.line(format!("Per topology (one `shard-router --shards K` on the same etcd, N = {n}):\n"));
        s.table(&["K", "largest shard heap", "all shards' heap", "largest RSS", "bound 1.1×H1/K + empty", "largest / (H1/K)", "efficiency H1/(K×largest)"], &rows);
    }
    let series: Vec<Series> = sizes
        .iter()
        .map(|&n| Series { label: format!("largest shard, N={n}"), points: points.iter().filter(|p| p.n == n).map(|p| (p.k as f64, p.largest() / 1048576.0)).collect() })
        .chain(sizes.iter().map(|&n| {
            let h1 = points.iter().find(|p| p.n == n && p.k == 1).map_or(0.0, MemoryPoint::largest);
            Series { label: format!("ideal H1/K, N={n}"), points: ks.iter().map(|&k| (k as f64, h1 / k as f64 / 1048576.0)).collect() }
        }))
        .collect();
    if let Some(name) = ctx.plot("memory-per-shard.png", |p| line_plot(p, "Largest shard heap vs shards", "shards (K)", "heap (MiB)", &series)) {
        s.line(format!("![largest shard heap vs K](plots/{name})\n"));
    }
    (s, points)
}
