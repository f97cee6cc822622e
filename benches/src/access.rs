//! access: what identity and access cost (RFC 0012). Two topologies of K shards side by side,
//! each on its own etcd: one as `--insecure-plain-http` serves (plain HTTP, anonymous,
//! AlwaysAllow), one as a user runs it (HTTPS, a token-file user authenticated on every
//! request, RBAC deciding from a RoleBinding to `edit`, the shards behind the router over
//! HTTPS with the front proxy's certificate). The same requests go to both, the two
//! alternating round by round (A, B, then B, A, …): creates, GETs, LISTs and deletes of
//! ConfigMaps at the same concurrency, over HTTP/1.1 on both sides so the protocol is not what
//! is measured. Each figure is the median over the rounds; each ratio is the median of the
//! per-round ratios with an interval of that median (RFC 0017), and a target is met only when
//! the whole interval meets it.

use crate::Ctx;
use crate::cluster::{Topology, cpu_seconds};
use crate::report::{Goal, PairBudget, Paired, Section, percentile};
use crate::write::{CONCURRENCY, rate};
use serde_json::json;
use std::time::Instant;

/// The namespace both sides are measured in (the caller creates it).
pub const NS: &str = "access";
const TOKEN: &str = "bench-token";

/// One side of the comparison.
pub struct Side {
    pub topology: Topology,
    pub client: reqwest::Client,
    /// A bearer token to send, on the secure side.
    pub token: Option<&'static str>,
    pub _etcd: shardplane_testkit::Etcd,
}

impl Side {
    fn req(&self, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
        let r = self.client.request(method, url);
        match self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    /// The CPU seconds of the router and its shards so far.
    fn cpu(&self) -> f64 {
        cpu_seconds(self.topology.router_pid()) + self.topology.shards.iter().map(|s| cpu_seconds(s.pid)).sum::<f64>()
    }
}

/// One round's figures: creates/s, GETs/s, GET latencies (ms), LIST latencies (ms), deletes/s,
/// CPU µs per request.
struct Round {
    create: f64,
    get: f64,
    get_ms: Vec<f64>,
    list_ms: Vec<f64>,
    delete: f64,
    cpu_us: f64,
}

async fn round(side: &Side, n: usize, lists: usize) -> Round {
    let base = format!("{}/api/v1/namespaces/{NS}/configmaps", side.topology.url);
    let ok = |r: reqwest::Response, what: &str| assert!(r.status().is_success(), "{what}: {}", r.status());
    let cm = |i: usize| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("ac-{i:06}")}, "data": {"k": "value-0123456789abcdef".repeat(40)}});
    let cpu_before = side.cpu();
    let create = rate(n, |i| {
        let r = side.req(reqwest::Method::POST, base.clone()).json(&cm(i));
        async move { ok(r.send().await.expect("create"), "create") }
    })
    .await;
    let get_ms = std::sync::Mutex::new(Vec::with_capacity(n));
    let get = rate(n, |i| {
        let r = side.req(reqwest::Method::GET, format!("{base}/ac-{i:06}"));
        let get_ms = &get_ms;
        async move {
            let t = Instant::now();
            ok(r.send().await.expect("get"), "get");
            get_ms.lock().unwrap().push(t.elapsed().as_secs_f64() * 1e3);
        }
    })
    .await;
    let mut list_ms = Vec::with_capacity(lists);
    for _ in 0..lists {
        let t = Instant::now();
        let r = side.req(reqwest::Method::GET, base.clone()).send().await.expect("list");
        assert!(r.status().is_success());
        let body = r.bytes().await.expect("list body");
        list_ms.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(body.len() > n * 800, "the list holds every ConfigMap");
    }
    let delete = rate(n, |i| {
        let r = side.req(reqwest::Method::DELETE, format!("{base}/ac-{i:06}"));
        async move { ok(r.send().await.expect("delete"), "delete") }
    })
    .await;
    let requests = (3 * n + lists) as f64;
    Round { create, get, get_ms: get_ms.into_inner().unwrap(), list_ms, delete, cpu_us: (side.cpu() - cpu_before) * 1e6 / requests }
}

/// Both sides, and the secure side's directory (its PKI and token file), for the caller to
/// remove once they have stopped.
async fn start_sides(ctx: &Ctx, k: u32) -> ([Side; 2], std::path::PathBuf) {
    let plain_etcd = crate::start_etcd().await;
    let plain = Topology::start(&ctx.router, &plain_etcd.endpoint, k).await;
    let secure_etcd = crate::start_etcd().await;
    let dir = std::env::temp_dir().join(format!("shardplane-bench-access-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("tokens.csv"), format!("{TOKEN},bench-user,u-bench\n")).expect("token file");
    let (secure, admin) = Topology::start_secure(&ctx.router, &secure_etcd.endpoint, k, &dir).await;
    // The namespace on both; on the secure side the token's user may edit it, as an operator's
    // own account would (RBAC evaluates every request: no system:masters bypass).
    let plain_client = shardplane_http::outbound::client_builder().pool_max_idle_per_host(1024).http1_only().build().expect("client");
    for (client, url) in [(&plain_client, &plain.url), (&admin, &secure.url)] {
        let r = client.post(format!("{url}/api/v1/namespaces")).json(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).send().await.expect("namespace");
        assert!(r.status().is_success(), "namespace: {}", r.status());
    }
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "bench-edit"},
                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bench-user"}]});
    let r = admin.post(format!("{}/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings", secure.url)).json(&binding).send().await.expect("binding");
    assert!(r.status().is_success(), "binding: {}", r.status());
    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.join("pki/ca.crt")).expect("ca")).expect("ca");
    let token_client = shardplane_http::outbound::client_builder().pool_max_idle_per_host(1024).http1_only().add_root_certificate(ca).build().expect("client");
    // Until the binding has reached the router's RBAC state.
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while !token_client.get(format!("{}/api/v1/namespaces/{NS}/configmaps", secure.url)).bearer_auth(TOKEN).send().await.is_ok_and(|r| r.status().is_success()) {
        assert!(Instant::now() < deadline, "the binding did not take effect");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    ([Side { topology: plain, client: plain_client, token: None, _etcd: plain_etcd }, Side { topology: secure, client: token_client, token: Some(TOKEN), _etcd: secure_etcd }], dir)
}

/// The sizes of a side-by-side comparison: requests per operation, LISTs, rounds per side and
/// shards (tiny in a smoke run).
pub fn sizes(ctx: &Ctx) -> (usize, usize, PairBudget, u32) {
    if ctx.smoke { (50, 3, PairBudget::SMOKE, 2) } else { (5_000, 20, ctx.pairs(12, 24), 2) }
}

/// Every throughput target: B keeps at least 0.8 of A's rate.
const GOAL: Goal = Goal::AtLeast(0.8);

pub async fn run(ctx: &Ctx) -> Section {
    let (n, lists, rounds, k) = sizes(ctx);
    let (sides, dir) = start_sides(ctx, k).await;
    let compared = Compared {
        title: "identity and access cost",
        names: ["plain HTTP, an anonymous caller, AlwaysAllow (`--insecure-plain-http`)", "HTTPS, a token-file user on every request, RBAC from a RoleBinding to `edit` (as `shard-router` serves by default)"],
        topologies: "(the shards behind it over HTTPS with the front proxy's certificate)",
        target: "with TLS, authentication and RBAC vs without",
        why: "The cost is TLS on both hops (client to router, router to shard), the token lookup, and RBAC's decision (cached per user and request attributes under the policy's generation, RFC 0012). Throughput ratios below 1 are the cost; latency and CPU ratios above 1 are.\n",
    };
    let section = compare(ctx, sides, &compared, (n, lists, rounds, k)).await;
    let _ = std::fs::remove_dir_all(dir);
    section
}

/// What a side-by-side comparison of two topologies reports.
pub struct Compared {
    pub title: &'static str,
    /// Side A and side B.
    pub names: [&'static str; 2],
    /// What more is said of the topologies after the two names.
    pub topologies: &'static str,
    /// The targets' wording after the measure ("creates/s {target}").
    pub target: &'static str,
    /// Where the difference goes.
    pub why: &'static str,
}

/// The same rounds on both sides, alternating (A, B then B, A), after a warm-up round each:
/// `n` creates, GETs and deletes and `lists` LISTs per round, rounds per side as `budget` gives
/// them, over topologies of `k` shards. Each B/A throughput ratio's interval must be at least
/// 0.8.
pub async fn compare(ctx: &Ctx, sides: [Side; 2], c: &Compared, (n, lists, budget, k): (usize, usize, PairBudget, u32)) -> Section {
    let bar = ctx.bar(2 * budget.min as u64, &format!("{}: the same requests on both sides", c.title));
    // Warm-up: one small round on each, not counted (connections, caches).
    for side in &sides {
        round(side, n / 10 + 1, 1).await;
    }
    let mut results: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
    let throughputs: [(&str, fn(&Round) -> f64); 3] = [("creates/s", |r| r.create), ("GETs/s", |r| r.get), ("deletes/s", |r| r.delete)];
    let ratios = |results: &[Vec<Round>; 2], f: fn(&Round) -> f64| Paired { ratios: results[1].iter().zip(&results[0]).map(|(b, a)| f(b) / f(a)).collect() };
    let settled = |results: &[Vec<Round>; 2]| throughputs.iter().all(|(_, f)| ratios(results, *f).settled(GOAL));
    let mut r = 0;
    while budget.more(r, settled(&results)) {
        if r >= budget.min {
            bar.inc_length(2);
        }
        // A, B then B, A: drift on the machine falls on both alike.
        let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            results[i].push(round(&sides[i], n, lists).await);
            bar.inc(1);
        }
        r += 1;
    }
    let rounds = r;
    bar.finish_and_clear();
    let mut profiles = String::new();
    if ctx.perf {
        // One more round on each side, sampled: where the difference goes.
        for i in [1, 0] {
            let label = format!("{}: {}", ["A", "B"][i], c.names[i]);
            let t = &sides[i].topology;
            let groups = [("router", vec![t.router_pid()]), ("shards", t.shards.iter().map(|s| s.pid).collect())];
            let flats = crate::profile::during(&groups, round(&sides[i], n, lists)).await;
            profiles.push_str(&crate::profile::render(&label, &flats));
        }
    }
    for side in sides {
        side.topology.stop().await;
    }

    let mut s = Section::new(c.title);
    s.line(format!(
        "Two topologies of {k} shards, each on its own etcd, side by side: **A** {}, **B** {} {}. Each round sends {n} creates, {n} GETs ({CONCURRENCY} in flight), {lists} LISTs of the {n} ConfigMaps (one at a time) and {n} deletes to one side, over HTTP/1.1 on both; {rounds} rounds per side, alternating A, B then B, A, after a warm-up round each. Figures are medians over rounds; a ratio is the median of the {rounds} per-round B/A ratios, with its interval (latency and CPU rows: least to most). {}\n",
        c.names[0],
        c.names[1],
        c.topologies,
        crate::report::verdict_rule(budget, "round", "B/A throughput ratios")
    ));
    let med = |v: &[f64]| percentile(&mut v.to_vec(), 0.5);
    let spread = |v: &[f64]| format!("{:.2} ({:.2}–{:.2})", med(v), v.iter().cloned().fold(f64::MAX, f64::min), v.iter().cloned().fold(f64::MIN, f64::max));
    let mut rows = Vec::new();
    for (what, f) in throughputs {
        let (a, b) = (med(&results[0].iter().map(f).collect::<Vec<_>>()), med(&results[1].iter().map(f).collect::<Vec<_>>()));
        let rs = ratios(&results, f);
        rows.push(vec![what.to_owned(), format!("{a:.0}"), format!("{b:.0}"), rs.describe_times(), format!("{rounds} rounds × {n}")]);
        s.target(format!("{what} {}", c.target), format!("B/A {}", rs.describe_times()), "≥ 0.80×, whole interval", rs.verdict(GOAL));
    }
    // Latency percentiles over every sample of every round, with the counts behind them.
    let all = |i: usize, f: fn(&Round) -> &Vec<f64>| -> Vec<f64> { results[i].iter().flat_map(|r| f(r).iter().cloned()).collect() };
    fn get_ms(r: &Round) -> &Vec<f64> {
        &r.get_ms
    }
    fn list_ms(r: &Round) -> &Vec<f64> {
        &r.list_ms
    }
    for (what, f) in [("GET", get_ms as fn(&Round) -> &Vec<f64>), ("LIST", list_ms)] {
        let (mut a, mut b) = (all(0, f), all(1, f));
        for p in [0.5, 0.99] {
            let (pa, pb) = (percentile(&mut a, p), percentile(&mut b, p));
            let per_round: Vec<f64> = results[1].iter().zip(&results[0]).map(|(rb, ra)| percentile(&mut f(rb).clone(), p) / percentile(&mut f(ra).clone(), p)).collect();
            rows.push(vec![format!("{what} p{:.0} (ms)", p * 100.0), format!("{pa:.2}"), format!("{pb:.2}"), spread(&per_round), format!("{} and {} samples", a.len(), b.len())]);
        }
    }
    let cpu: Vec<f64> = results[1].iter().zip(&results[0]).map(|(b, a)| b.cpu_us / a.cpu_us).collect();
    rows.push(vec!["router + shards CPU per request (µs)".into(), format!("{:.0}", med(&results[0].iter().map(|r| r.cpu_us).collect::<Vec<_>>())), format!("{:.0}", med(&results[1].iter().map(|r| r.cpu_us).collect::<Vec<_>>())), spread(&cpu), format!("{rounds} rounds × {} requests", 3 * n + lists)]);
    s.table(&["measure", "A: without", "B: with", "B/A median (interval, or least–most)", "samples"], &rows);
    if !profiles.is_empty() {
        s.line(profiles);
    }
    s.line(c.why);
    s
}

