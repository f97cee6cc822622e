//! list: full and namespace LIST of N pods, unpaged and paged (limit 500), through the router at
//! K = 1, 4, 8 vs one shard directly vs a raw etcd range read of the same keys.
//!
//! The client reads each whole body and finds the continue token and the item count without
//! decoding the objects (metadata precedes items), so the timings are the servers', not JSON
//! parsing in the benchmark.

use crate::Ctx;
use crate::cluster::{Topology, http};
use crate::objects::{Kind, NAMESPACES, load};
use crate::report::{Goal, PairBudget, Paired, Section, Series, Verdict, line_plot, percentile};
use shardplane_keyspace::{HashRange, etcd_layout};
use std::time::Instant;

/// A router LIST may take at most this multiple of one shard's.
const GOAL: f64 = 1.25;
const GOAL_AT_MOST: Goal = Goal::AtMost(GOAL);
/// LISTs of each side in one pair of a one-namespace comparison. One such LIST takes 10–30 ms,
/// and a single pair's ratio then spread by 0.2–0.4 from pair to pair (scheduling on the shared
/// cores, not the servers' work), so that the 41-pair interval still held the goal in one run
/// and cleared it in the next (RFC 0017, "Samples of one-namespace LISTs").
const NS_BATCH: usize = 16;

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

/// One pass of a LIST: each page's time, the whole pass's, and the items it returned.
pub struct Pass {
    /// Milliseconds from each page's request to its last body byte (a refused page's retries
    /// and their waits included: a client would wait them too).
    pub pages_ms: Vec<f64>,
    /// Milliseconds from the first request to the last page's last byte.
    pub total_ms: f64,
    pub items: usize,
    /// The refusals a page got before it was served ([`Refusal`]), in order.
    pub refused: Vec<Refusal>,
}

/// A page the server refused with a status a client retries (429, 503, 504) and the Status
/// message it gave; the page was asked again after the Retry-After it named.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.status, self.message)
    }
}

/// How many times one page is asked again after a retryable refusal before the pass fails.
const PAGE_RETRIES: usize = 5;

/// The `message` of a Status body, or the body's first bytes when it is not one.
fn status_message(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body).ok().and_then(|v| v["message"].as_str().map(str::to_owned)).unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned())
}

/// A LIST of `path` from `base`, `limit` items per page (0: unpaged), following continue tokens
/// for at most `max_pages` pages (None: to the end). The clock stops when the last body has
/// arrived; counting the items is the benchmark's work, not the server's. A page refused with
/// 429, 503 or 504 is asked again after its Retry-After (as a client's reflector would), up to
/// [`PAGE_RETRIES`] times, and each refusal is returned, so that the report says so; any other
/// failure, or a page refused past the retries, fails the pass with the server's message.
pub async fn list_pass(base: &str, path: &str, limit: usize, max_pages: Option<usize>) -> Pass {
    let c = http();
    let start = Instant::now();
    let (mut bodies, mut pages_ms, mut refused) = (Vec::new(), Vec::new(), Vec::new());
    let mut token = None::<String>;
    loop {
        let q = match (&token, limit) {
            (Some(t), _) => format!("{path}?limit={limit}&continue={t}"),
            (None, 0) => path.to_owned(),
            (None, _) => format!("{path}?limit={limit}"),
        };
        let page = Instant::now();
        let mut tries = 0;
        let body = loop {
            let r = c.get(format!("{base}{q}")).send().await.expect("list");
            let status = r.status();
            let retry_after = shardplane_testkit::retry_after_seconds(r.headers());
            let body = r.bytes().await.expect("list body");
            if status.is_success() {
                break body;
            }
            let refusal = Refusal { status: status.as_u16(), message: status_message(&body) };
            let retryable = matches!(refusal.status, 429 | 503 | 504);
            assert!(retryable && tries < PAGE_RETRIES, "LIST {q}: {refusal}, after {tries} retries (earlier refusals: {refused:?})");
            refused.push(refusal);
            tries += 1;
            tokio::time::sleep(std::time::Duration::from_secs(retry_after.min(5))).await;
        };
        pages_ms.push(page.elapsed().as_secs_f64() * 1000.0);
        let next = continue_token(&body);
        bodies.push(body);
        match next {
            Some(t) if limit > 0 && !t.is_empty() && max_pages.is_none_or(|m| bodies.len() < m) => token = Some(t),
            _ => break,
        }
    }
    let total_ms = start.elapsed().as_secs_f64() * 1000.0;
    Pass { pages_ms, total_ms, items: bodies.iter().map(|b| count_items(b)).sum(), refused }
}

/// One LIST (paged: limit 500, following continue tokens).
async fn list_once(base: &str, path: &str, paged: bool) -> Pass {
    list_pass(base, path, if paged { 500 } else { 0 }, None).await
}

/// LISTs from `a` and from `b` after one warm-up each, as interleaved pairs, for as many pairs
/// as `budget` gives the goal, checking the item count every time. A pair is `batch` LISTs of
/// each side, one by one in alternating order (a, b, a, b, … in even pairs, b, a, … in odd
/// ones), so that both see the same machine; its ratio is the sum of b's times over the sum of
/// a's. Returns each side's single LIST times and each pair's ratio; pages refused and retried
/// are added to `refused`, with the side's address.
async fn time_side_by_side(a: &str, b: &str, path: &str, paged: bool, (budget, batch): (PairBudget, usize), want: usize, refused: &mut Vec<(String, Refusal)>) -> ([Vec<f64>; 2], Paired) {
    for base in [a, b] {
        let warm = list_once(base, path, paged).await;
        refused.extend(warm.refused.into_iter().map(|r| (base.to_owned(), r)));
    }
    let mut times = [Vec::new(), Vec::new()];
    let mut pairs = Paired::default();
    let mut i = 0;
    while budget.more(i, pairs.settled(GOAL_AT_MOST)) {
        let mut sums = [0.0; 2];
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for _ in 0..batch {
            for side in order {
                let base = [a, b][side];
                let pass = list_once(base, path, paged).await;
                refused.extend(pass.refused.into_iter().map(|r| (base.to_owned(), r)));
                let (ms, n) = (pass.total_ms, pass.items);
                assert_eq!(n, want, "LIST {path} (paged: {paged}) from {base} returned {n} items, not {want}");
                sums[side] += ms;
                times[side].push(ms);
            }
        }
        pairs.ratios.push(sums[1] / sums[0]);
        i += 1;
    }
    (times, pairs)
}

pub async fn run(ctx: &Ctx) -> (Section, Vec<(u32, f64)>) {
    let n = if ctx.smoke { 2_000 } else { 100_000 };
    let ks: Vec<u32> = if ctx.smoke { vec![1, 2] } else { vec![1, 4, 8] };
    let runs = if ctx.smoke { 1 } else { 5 };
    // A LIST of all pods takes about a second, so a pair is one LIST of each side; one of a
    // namespace takes milliseconds, so a pair is NS_BATCH of each.
    let (all_budget, ns_budget) = ((ctx.pairs(12, 40), 1), (ctx.pairs(21, 41), if ctx.smoke { 2 } else { NS_BATCH }));
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
    s.line(format!("LIST of {n} Pods (~3.6 KiB each, {NAMESPACES} namespaces; one namespace holds {per_ns}); p50 and max of each side's LISTs in the pairs below, after a warm-up, whole body read."));
    s.line(format!("\"one shard\" is one standalone shard process (`shard-server --standalone`, the whole hash space) that stays up while every topology is measured: each router LIST is paired with the same LIST from that shard, in alternating order (shard first, then router first, …), so that the two see the same machine (the one-shard rows are from the K=1 pairs); \"etcd range read\" is shardplane's storage layer reading all the pods' keys ({runs} reads, paged 500 per request, no decoding), a reference, not a server path.\n"));
    s.line(format!(
        "{} A pair of LISTs of all pods is one LIST from each side, its ratio the two times'. A LIST of one namespace takes milliseconds, so a pair of those is {} LISTs from each side, one by one in alternating order, its ratio the sums' (one LIST's ratio spreads with the scheduling of a few milliseconds on the shared cores); it takes {} pairs at least, up to {}.\n",
        crate::report::verdict_rule(all_budget.0, "pair", "ratios"),
        ns_budget.1,
        ns_budget.0.min,
        ns_budget.0.cap
    ));
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
    let mut scaling = Vec::new();
    let mut profiles = String::new();
    // One standalone shard stays up: the baseline every topology is timed beside.
    let one = crate::cluster::StandaloneShard::start(&ctx.router, &etcd.endpoint).await;
    let mut one_shard_rows = Vec::new();
    // At K=1, all pods paged: (the router's extra ms per page, the shard's ms per page).
    let mut page_cost = None;
    let mut refused = Vec::new();
    for &k in &ks {
        let bar = ctx.spinner(&format!("list: K={k}"));
        let t = Topology::start(&ctx.router, &etcd.endpoint, k).await;
        for (name, path, paged, want) in cases.iter() {
            // A namespace LIST takes milliseconds: more pairs for a narrow interval.
            let budget = if *want < n { ns_budget } else { all_budget };
            let ([mut base_ms, mut ms], pairs) = time_side_by_side(&one.url, &t.url, path, *paged, budget, *want, &mut refused).await;
            let (base50, base_max) = (percentile(&mut base_ms, 0.5), percentile(&mut base_ms, 1.0));
            let (p50, max) = (percentile(&mut ms, 0.5), percentile(&mut ms, 1.0));
            if k == 1 && *paged && *want == n {
                let pages = n.div_ceil(500) as f64;
                page_cost = Some(((p50 - base50) / pages, base50 / pages));
            }
            if k == 1 {
                one_shard_rows.push(vec![format!("one shard: {name}"), format!("{base50:.0}"), format!("{base_max:.0}"), format!("{:.0}", *want as f64 / (base50 / 1000.0))]);
            }
            rows.push(vec![format!("router K={k}: {name}"), format!("{p50:.0}"), format!("{max:.0}"), format!("{:.0}", *want as f64 / (p50 / 1000.0))]);
            let verdict = pairs.verdict(GOAL_AT_MOST);
            if ctx.perf && verdict != Verdict::Met {
                // Repeated for about two seconds, so that a short LIST still gives a few thousand samples.
                let groups = [("router", vec![t.router_pid()]), ("shards", t.shards.iter().map(|s| s.pid).collect())];
                let flats = crate::profile::during(&groups, async {
                    let start = Instant::now();
                    while start.elapsed().as_secs_f64() < 2.0 {
                        list_once(&t.url, path, *paged).await;
                    }
                })
                .await;
                profiles.push_str(&crate::profile::render(&format!("router K={k}, {name}"), &flats));
            }
            s.target(format!("router K={k} / one shard, {name} (interleaved pairs)"), pairs.describe_times(), format!("≤ {GOAL}×, whole interval"), verdict);
            if *name == cases[0].0 {
                scaling.push((k, p50, base50));
            }
        }
        t.stop().await;
        bar.finish_and_clear();
    }
    drop(one);
    rows.splice(1..1, one_shard_rows);
    s.table(&["LIST", "p50 ms", "max ms", "objects/s (p50)"], &rows);
    s.line(format!("**Where the router stands.** The router asks the shards to write each list entry on a line of its own (a request header only it sends), so it splits their bodies with one memchr per entry and reads each entry's key from the first bytes of its metadata (ObjectMeta in Go's field order: name, then namespace), never decoding an object. \
        An unpaged LIST streams through a k-way merge into the client's body while it is sent; with one shard, the body passes through. \
        A page from one shard passes through too, with only its head rewritten (the continue token gains the range-map epoch). \
        A page from several shards is held whole before it is sent, because its `continue` token and `remainingItemCount` come before the items and depend on the merge: the shards serve their shares (1.25 × limit / K + 8 each) in parallel, then the router merges and sends. \
        {}\
        With several shards, each page waits for the slowest shard, costs K requests and the merged page's copy, and the shards' overfetch (up to 1.25×) is read and discarded. \
        What would close it: letting the first page's items stream while the shards' later items are still arriving (metadata written after the items, which JSON allows but upstream's byte layout does not), or larger pages (a client's `limit`).\n",
        // What the profiles show is said only when this run took them (RFC 0005).
        if ctx.perf { "The profiles below (taken in extra runs of each case that misses) show where the remaining time goes. " } else { "This run took no profiles (`--perf` takes them, in extra runs of each case that misses). " }
    ));
    if let Some((extra, shard)) = page_cost {
        s.line(format!("In this run, with one shard behind the router, a page of 500 pods took {shard:.2} ms from the shard alone and {extra:.2} ms more through the router (the p50s of the paged LIST of all pods, divided by its pages): the extra hop, a request and the page's bytes through one more pair of sockets.\n"));
    }
    s.line(profiles);
    s.line(refusals_text(&refused));
    let series = [Series { label: "router, all pods unpaged".into(), points: scaling.iter().map(|(k, ms, _)| (*k as f64, *ms)).collect() }, Series { label: "one shard (timed beside it)".into(), points: scaling.iter().map(|(k, _, ms)| (*k as f64, *ms)).collect() }];
    if let Some(name) = ctx.plot("list-vs-shards.png", |p| line_plot(p, &format!("LIST of {n} pods vs shards behind the router"), "shards (K)", "p50 ms", &series)) {
        s.line(format!("![LIST time vs K](plots/{name})\n"));
    }
    (s, scaling.into_iter().map(|(k, ms, _)| (k, ms)).collect())
}

/// What the report says of the pages a server refused and the pass retried: that there were
/// none, or each (a LIST that needed a retry is a finding, and its time includes the wait).
pub fn refusals_text(refused: &[(String, Refusal)]) -> String {
    if refused.is_empty() {
        return "No page was refused (429, 503 or 504) in this scenario's LISTs.\n".to_owned();
    }
    let each: Vec<String> = refused.iter().map(|(base, r)| format!("{base}: {r}")).collect();
    format!("**{} page{} refused and asked again after its Retry-After** (the LIST's time includes the wait): {}.\n", refused.len(), if refused.len() == 1 { " was" } else { "s were" }, each.join("; "))
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

    #[test]
    fn a_refusal_is_reported_with_the_status_message() {
        let status = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Timeout: Too large resource version: 9, current: 7","reason":"Timeout","code":504}"#;
        assert_eq!(status_message(status), "Timeout: Too large resource version: 9, current: 7");
        assert_eq!(status_message(b"upstream gone"), "upstream gone");
        assert_eq!(refusals_text(&[]), "No page was refused (429, 503 or 504) in this scenario's LISTs.\n");
        let r = Refusal { status: 504, message: status_message(status) };
        let text = refusals_text(&[("N=1000000 K=8".into(), r.clone()), ("N=1000000 K=8".into(), r)]);
        assert!(text.starts_with("**2 pages were refused"), "{text}");
        assert!(text.contains("N=1000000 K=8: 504 (Timeout: Too large resource version: 9, current: 7)"), "{text}");
    }
}
