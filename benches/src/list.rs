//! list: full and namespace LIST of N pods, unpaged and paged (limit 500), through the router at
//! K = 1, 4, 8 vs one shard directly vs a raw etcd range read of the same keys.
//!
//! The client reads each whole body and finds the continue token and the item count without
//! decoding the objects (metadata precedes items), so the timings are the servers', not JSON
//! parsing in the benchmark.

use crate::Ctx;
use crate::cluster::{Topology, http};
use crate::objects::{Kind, NAMESPACES, load};
use crate::report::{Section, Series, line_plot, percentile};
use shardplane_keyspace::{HashRange, etcd_layout};
use std::time::Instant;

/// The continue token in a list body's metadata, if any.
fn continue_token(body: &[u8]) -> Option<String> {
    let head = &body[..body.len().min(4096)];
    let at = head.windows(12).position(|w| w == b"\"continue\":\"")? + 12;
    let end = head[at..].iter().position(|&c| c == b'"')?;
    Some(String::from_utf8_lossy(&head[at..at + end]).into_owned())
}

fn count_items(body: &[u8]) -> usize {
    const MARK: &[u8] = b"{\"kind\":\"Pod\"";
    body.windows(MARK.len()).filter(|w| *w == MARK).count()
}

/// One LIST (following continue tokens when paged): (milliseconds, items). The clock stops
/// when the last body has arrived; counting the items is the benchmark's work, not the server's.
async fn list_once(base: &str, path: &str, paged: bool) -> (f64, usize) {
    let c = http();
    let start = Instant::now();
    let mut bodies = Vec::new();
    let mut token = None::<String>;
    loop {
        let q = match (&token, paged) {
            (Some(t), _) => format!("{path}?limit=500&continue={t}"),
            (None, true) => format!("{path}?limit=500"),
            (None, false) => path.to_owned(),
        };
        let r = c.get(format!("{base}{q}")).send().await.expect("list");
        assert!(r.status().is_success(), "LIST {q}: {}", r.status());
        let body = r.bytes().await.expect("list body");
        let next = continue_token(&body);
        bodies.push(body);
        match next {
            Some(t) if paged && !t.is_empty() => token = Some(t),
            _ => break,
        }
    }
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    (ms, bodies.iter().map(|b| count_items(b)).sum())
}

/// (p50 ms, max ms) over `runs` LISTs after one warm-up, checking the item count each time.
async fn time_list(base: &str, path: &str, paged: bool, runs: usize, want: usize) -> (f64, f64) {
    list_once(base, path, paged).await;
    let mut v = Vec::new();
    for _ in 0..runs {
        let (ms, n) = list_once(base, path, paged).await;
        assert_eq!(n, want, "LIST {path} (paged: {paged}) returned {n} items, not {want}");
        v.push(ms);
    }
    (percentile(&mut v.clone(), 0.5), percentile(&mut v, 1.0))
}

pub async fn run(ctx: &Ctx) -> (Section, Vec<(u32, f64)>) {
    let n = if ctx.smoke { 2_000 } else { 100_000 };
    let ks: Vec<u32> = if ctx.smoke { vec![1, 2] } else { vec![1, 4, 8] };
    let runs = if ctx.smoke { 1 } else { 5 };
    let etcd = crate::start_etcd().await;
    let bar = ctx.bar(n as u64, &format!("list: loading {n} pods"));
    let b = bar.clone();
    load(&etcd.endpoint, &[(Kind::Pod, 0..n)], move |d| b.inc(d)).await;
    bar.finish_and_clear();
    let per_ns = (0..n).filter(|i| i % NAMESPACES == 0).count();
    let cases = [
        ("all pods, unpaged", "/api/v1/pods", false, n),
        ("all pods, paged (limit 500)", "/api/v1/pods", true, n),
        ("one namespace, unpaged", "/api/v1/namespaces/ns-00/pods", false, per_ns),
        ("one namespace, paged (limit 500)", "/api/v1/namespaces/ns-00/pods", true, per_ns),
    ];
    let mut s = Section::new("list");
    s.line(format!("LIST of {n} Pods (~3.6 KiB each, {NAMESPACES} namespaces; one namespace holds {per_ns}); p50 and max of {runs} runs after a warm-up, whole body read."));
    s.line("\"one shard\" is the K=1 topology's shard asked directly; \"etcd range read\" is shardplane's storage layer reading all the pods' keys (paged 500 per request, no decoding), a reference, not a server path.\n");
    let storage = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.expect("etcd");
    let (start, end) = etcd_layout::range_keys("", "pods", HashRange::FULL);
    let mut etcd_ms = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let (kvs, _) = storage.list_range(&start, &end, 0).await.expect("range");
        assert_eq!(kvs.len(), n);
        etcd_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let mut rows = vec![vec!["etcd range read (all pods)".to_owned(), format!("{:.0}", percentile(&mut etcd_ms.clone(), 0.5)), format!("{:.0}", percentile(&mut etcd_ms, 1.0)), format!("{:.0}", n as f64 / (percentile(&mut etcd_ms, 0.5) / 1000.0))]];
    let mut one_shard = Vec::new();
    let mut scaling = Vec::new();
    for &k in &ks {
        let bar = ctx.spinner(&format!("list: K={k}"));
        let t = Topology::start(&ctx.router, &etcd.endpoint, k).await;
        for (i, (name, path, paged, want)) in cases.iter().enumerate() {
            if k == 1 {
                let (p50, max) = time_list(&t.shards[0].url, path, *paged, runs, *want).await;
                one_shard.push(p50);
                rows.push(vec![format!("one shard: {name}"), format!("{p50:.0}"), format!("{max:.0}"), format!("{:.0}", *want as f64 / (p50 / 1000.0))]);
            }
            let (p50, max) = time_list(&t.url, path, *paged, runs, *want).await;
            rows.push(vec![format!("router K={k}: {name}"), format!("{p50:.0}"), format!("{max:.0}"), format!("{:.0}", *want as f64 / (p50 / 1000.0))]);
            let ratio = p50 / one_shard[i];
            s.target(format!("router K={k} / one shard, {name} (p50)"), format!("{ratio:.2}x"), "≤ 1.25x", ratio <= 1.25);
            if i == 0 {
                scaling.push((k, p50));
            }
        }
        t.stop().await;
        bar.finish_and_clear();
    }
    s.table(&["LIST", "p50 ms", "max ms", "objects/s (p50)"], &rows);
    s.line("**Where the router stands.** An unpaged LIST streams: the shards' bodies are split into entries as they arrive (never decoded; only each entry's metadata is read for its key) and merged into the client's body while it is sent, and with one shard the body passes through. \
        A page (`limit`) is held whole before it is sent, because its `continue` token and `remainingItemCount` come before the items and depend on the merge: for every page the shard serves, transfers, and the router splits, merges and transfers again, one after the other, and each shard is asked for its share of the page (1.25 × limit / K + 8) rather than the whole limit. \
        What would close the paged gap: with one shard, passing the page through with only its token rewritten; with several, streaming the merge and computing the page's metadata first (the shards can report their counts ahead of their items), or writing `metadata` after `items`, which JSON allows but upstream's byte layout does not.\n");
    let series = [Series { label: "router, all pods unpaged".into(), points: scaling.iter().map(|(k, ms)| (*k as f64, *ms)).collect() }, Series { label: "one shard".into(), points: ks.iter().map(|&k| (k as f64, one_shard[0])).collect() }];
    if let Some(name) = ctx.plot("list-vs-shards.png", |p| line_plot(p, &format!("LIST of {n} pods vs shards behind the router"), "shards (K)", "p50 ms", &series)) {
        s.line(format!("![LIST time vs K](plots/{name})\n"));
    }
    (s, scaling)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_token_and_items_without_decoding() {
        let body = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5","continue":"abc"},"items":[{"kind":"Pod","apiVersion":"v1"},{"kind":"Pod","apiVersion":"v1"}]}"#;
        assert_eq!(continue_token(body).as_deref(), Some("abc"));
        assert_eq!(count_items(body), 2);
        assert_eq!(continue_token(br#"{"kind":"PodList","metadata":{"resourceVersion":"5"},"items":[]}"#), None);
    }
}
