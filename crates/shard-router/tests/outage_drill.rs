//! The outage drill (RFC 0013, "The drill"): `shard-router --shards 4` on a real etcd with
//! small seat budgets (`--max-requests-inflight 20 --max-mutating-requests-inflight 10`, at the
//! router and at every shard), while 200 clients as one ordinary user issue expensive LISTs
//! (a thousand ConfigMaps) and creates as fast as they may (each honours Retry-After, as
//! client-go does). Meanwhile an admin (`system:masters`) lists Deployments, deletes the
//! offending one and creates ConfigMaps, and a second ordinary user with a tenth of the clients
//! runs the same loop.
//!
//! With priority and fairness on, every admin request is answered within 1 s (its p99 over
//! every request it made), the second user's completed requests are at least a third of the
//! noisy user's ([`FAIR_SHARE`]), nothing acknowledged is lost and no process's memory passes
//! [`RSS_BOUND_MIB`]. With it off the same drill locks the admin out (refused or past 1 s) and
//! the second user falls below its fair share, so the first test is known to fail without what
//! it tests.

mod common;

use common::{rss_mib, spawn};
use serde_json::{json, Value};
use shardplane_testkit::*;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Clients of the noisy user, and of the quiet one.
const NOISY: usize = 200;
const QUIET: usize = 20;
/// ConfigMaps the expensive LIST returns (10 seats' worth, upstream's most).
const LISTED: usize = 1000;
/// How long the flood runs.
const FLOOD: Duration = Duration::from_secs(15);
/// The quiet user's completed requests over the noisy user's are at least this: a tenth of
/// the clients, at least a third of the work (fair queuing gives both flows the same seats).
const FAIR_SHARE: f64 = 1.0 / 3.0;
/// The most resident memory any process may reach (debug build).
const RSS_BOUND_MIB: u64 = 400;
/// The admin's bound at p99.
const ADMIN_P99: Duration = Duration::from_secs(1);

const TOKENS: &str = "admin-token,admin,u-0,system:masters\nnoisy-token,noisy,u-1\nquiet-token,quiet,u-2\n";

struct Cluster {
    url: String,
    http: reqwest::Client,
    pids: Vec<u32>,
    _process: common::Started,
    /// Its token file and kubeconfig; dropped after the processes.
    _dir: common::TempDir,
}

impl Cluster {
    async fn call(&self, token: &str, method: reqwest::Method, path: &str, body: Option<&Value>) -> Result<(u16, reqwest::header::HeaderMap, bytes::Bytes), reqwest::Error> {
        let mut r = self.http.request(method, format!("{}{path}", self.url)).bearer_auth(token);
        if let Some(b) = body {
            r = r.json(b);
        }
        let resp = r.send().await?;
        let (code, headers) = (resp.status().as_u16(), resp.headers().clone());
        Ok((code, headers, resp.bytes().await?))
    }
}

/// What one run of the drill measured.
#[derive(Debug)]
struct Report {
    /// Every admin request's latency, and how many were refused (or failed).
    admin: Vec<Duration>,
    admin_refused: usize,
    noisy_done: u64,
    quiet_done: u64,
    refused_429: u64,
    max_rss_mib: u64,
}

impl Report {
    fn admin_p99(&self) -> Duration {
        let mut l = self.admin.clone();
        l.sort();
        l.get((l.len() * 99).div_ceil(100).saturating_sub(1)).copied().unwrap_or_default()
    }
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"payload": "x".repeat(512)}})
}

async fn start(apf: bool) -> (Etcd, Cluster) {
    let etcd = Etcd::start().await;
    let dir = common::TempDir::named("shardplane-drill");
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let apf_flag = format!("--enable-priority-and-fairness={apf}");
    let started = spawn(&[
        "--etcd-endpoints", &etcd.endpoint, "--shards", "4", "--listen", "127.0.0.1:0", "--kubeconfig", kubeconfig.to_str().unwrap(),
        "--insecure-plain-http", "--token-auth-file", tokens.to_str().unwrap(),
        "--max-requests-inflight", "20", "--max-mutating-requests-inflight", "10", &apf_flag,
    ]);
    let pids = std::iter::once(started.process.0.id()).chain(started.shards.iter().map(|(p, _)| *p)).collect();
    let http = shardplane_http::outbound::client_builder().timeout(Duration::from_secs(60)).pool_max_idle_per_host(NOISY + QUIET + 4).build().unwrap();
    let c = Cluster { url: started.url(), http, pids, _process: started, _dir: dir };
    wait_for(Duration::from_secs(90), || async { c.call("admin-token", reqwest::Method::GET, "/api/v1/namespaces/default", None).await.is_ok_and(|(code, _, _)| code == 200) }).await;
    (etcd, c)
}

/// Creates what the drill needs: the namespaces, the listed ConfigMaps and the offending
/// Deployment, as the admin.
async fn populate(c: &Arc<Cluster>) {
    for ns in ["noise", "ops"] {
        create(c, "/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
    }
    let next = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (c, next) = (c.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if i >= LISTED {
                        return;
                    }
                    create(&c, "/api/v1/namespaces/noise/configmaps", &config_map(&format!("listed-{i}"))).await;
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "offender"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "o"}},
        "template": {"metadata": {"labels": {"app": "o"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
    create(c, "/apis/apps/v1/namespaces/noise/deployments", &deployment).await;
}

/// Creates `body` at `path` as the admin; a 429 (the in-flight bounds, with priority and
/// fairness off) is waited out for its Retry-After and tried again.
async fn create(c: &Cluster, path: &str, body: &Value) {
    loop {
        let (code, headers, answer) = c.call("admin-token", reqwest::Method::POST, path, Some(body)).await.unwrap();
        if code == 429 {
            let wait = headers.get("retry-after").and_then(|v| v.to_str().ok()?.parse::<u64>().ok()).unwrap_or(1);
            tokio::time::sleep(Duration::from_secs(wait)).await;
            continue;
        }
        assert_eq!(code, 201, "{}", String::from_utf8_lossy(&answer));
        return;
    }
}

/// One flooding client: LIST every ConfigMap of `noise`, create one, again, until `stop`;
/// a 429 is waited out for its Retry-After. Returns the requests completed and the names it
/// was told were created.
async fn flood(c: Arc<Cluster>, token: &'static str, who: String, stop: Arc<AtomicBool>, refused: Arc<AtomicU64>) -> (u64, Vec<String>) {
    let (mut done, mut created) = (0, Vec::new());
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let name = format!("{who}-{i}");
        let body = config_map(&name);
        let steps: [(reqwest::Method, &str, Option<&Value>); 2] = [(reqwest::Method::GET, "/api/v1/namespaces/noise/configmaps", None), (reqwest::Method::POST, "/api/v1/namespaces/noise/configmaps", Some(&body))];
        for (method, path, body) in steps {
            let is_create = body.is_some();
            match c.call(token, method, path, body).await {
                Ok((429, headers, _)) => {
                    refused.fetch_add(1, Ordering::Relaxed);
                    let wait = headers.get("retry-after").and_then(|v| v.to_str().ok()?.parse::<u64>().ok()).unwrap_or(1);
                    // Waited out in slices so that the flood ends on time.
                    let until = Instant::now() + Duration::from_secs(wait);
                    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                Ok((code, _, _)) if (200..300).contains(&code) => {
                    done += 1;
                    if is_create {
                        created.push(name.clone());
                    }
                }
                Ok((code, _, body)) => panic!("{who}: {path} answered {code}: {}", String::from_utf8_lossy(&body)),
                // A request cut off at the client's timeout: neither done nor acknowledged.
                Err(_) => {}
            }
        }
    }
    (done, created)
}

async fn drill(apf: bool) -> Report {
    let (_etcd, c) = start(apf).await;
    let c = Arc::new(c);
    populate(&c).await;
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..NOISY)
        .map(|i| tokio::spawn(flood(c.clone(), "noisy-token", format!("noisy-{i}"), stop.clone(), refused.clone())))
        .chain((0..QUIET).map(|i| tokio::spawn(flood(c.clone(), "quiet-token", format!("quiet-{i}"), stop.clone(), refused.clone()))))
        .collect();
    // The flood builds up before the admin steps in.
    let mut max_rss = 0u64;
    wait_for(Duration::from_secs(30), || async { refused.load(Ordering::Relaxed) > 0 || flood_is_queued(&c, apf).await }).await;
    let started = Instant::now();
    let (mut admin, mut admin_refused, mut round) = (Vec::new(), 0, 0);
    let mut deleted = false;
    let mut admin_created = Vec::new();
    while started.elapsed() < FLOOD {
        round += 1;
        let name = format!("admin-{round}");
        let body = config_map(&name);
        let mut steps: Vec<(reqwest::Method, String, Option<&Value>)> = vec![(reqwest::Method::GET, "/apis/apps/v1/namespaces/noise/deployments".into(), None), (reqwest::Method::POST, "/api/v1/namespaces/ops/configmaps".into(), Some(&body))];
        if !deleted {
            steps.push((reqwest::Method::DELETE, "/apis/apps/v1/namespaces/noise/deployments/offender".into(), None));
        }
        for (method, path, body) in steps {
            let is_delete = method == reqwest::Method::DELETE;
            let is_create = body.is_some();
            let t = Instant::now();
            let answer = c.call("admin-token", method, &path, body).await;
            admin.push(t.elapsed());
            match answer {
                Ok((code, headers, _)) if (200..300).contains(&code) => {
                    if apf {
                        assert!(headers.contains_key("x-kubernetes-pf-flowschema-uid") && headers.contains_key("x-kubernetes-pf-prioritylevel-uid"), "{headers:?}");
                    }
                    deleted |= is_delete;
                    if is_create {
                        admin_created.push(name.clone());
                    }
                }
                _ => admin_refused += 1,
            }
        }
        max_rss = max_rss.max(c.pids.iter().map(|p| rss_mib(*p)).max().unwrap_or(0));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (mut noisy_done, mut quiet_done, mut acknowledged) = (0, 0, BTreeSet::new());
    for (i, client) in clients.into_iter().enumerate() {
        let (done, created) = client.await.unwrap();
        if i < NOISY { noisy_done += done } else { quiet_done += done }
        acknowledged.extend(created);
    }
    // Nothing acknowledged is lost: every create answered 201 is there, and the admin's work
    // is done (read with the floor quiet again). Without priority and fairness the admin may
    // not even get to look.
    if apf {
        let (_, _, body) = c.call("admin-token", reqwest::Method::GET, "/api/v1/namespaces/noise/configmaps", None).await.unwrap();
        let list: Value = serde_json::from_slice(&body).unwrap();
        let stored: BTreeSet<String> = list["items"].as_array().unwrap().iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_owned()).collect();
        let lost: Vec<&String> = acknowledged.difference(&stored).collect();
        assert!(lost.is_empty(), "{} acknowledged creates lost, e.g. {:?}", lost.len(), &lost[..lost.len().min(5)]);
        assert!((0..LISTED).all(|i| stored.contains(&format!("listed-{i}"))), "a listed ConfigMap is gone");
        let (_, _, body) = c.call("admin-token", reqwest::Method::GET, "/api/v1/namespaces/ops/configmaps", None).await.unwrap();
        let ops: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(ops["items"].as_array().unwrap().len(), admin_created.len());
        assert_eq!(c.call("admin-token", reqwest::Method::GET, "/apis/apps/v1/namespaces/noise/deployments/offender", None).await.unwrap().0, 404, "the offending Deployment is gone");
        // The router counted the flood where operators look, with upstream's names.
        let (_, _, metrics) = c.call("admin-token", reqwest::Method::GET, "/metrics", None).await.unwrap();
        let metrics = String::from_utf8_lossy(&metrics);
        for family in ["apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"global-default\",priority_level=\"global-default\"}", "apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"exempt\",priority_level=\"exempt\"}", "apiserver_flowcontrol_request_wait_duration_seconds_bucket", "apiserver_flowcontrol_nominal_limit_seats{priority_level=\"global-default\"} 3"] {
            assert!(metrics.contains(family), "no {family} in the router's metrics");
        }
    }
    let max_rss_mib = max_rss.max(c.pids.iter().map(|p| rss_mib(*p)).max().unwrap_or(0));
    Report { admin, admin_refused, noisy_done, quiet_done, refused_429: refused.load(Ordering::Relaxed), max_rss_mib }
}

/// Whether the flood has filled the seats, as the router's dump shows it with priority and
/// fairness (without it, the caller waits for a refusal instead).
async fn flood_is_queued(c: &Cluster, apf: bool) -> bool {
    if !apf {
        return false;
    }
    match c.call("admin-token", reqwest::Method::GET, "/debug/api_priority_and_fairness/dump_requests", None).await {
        Ok((200, _, body)) => String::from_utf8_lossy(&body).lines().any(|l| l.starts_with("global-default,")),
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_priority_and_fairness_the_admin_gets_through_a_flood_and_a_second_user_keeps_a_fair_share() {
    let r = drill(true).await;
    eprintln!("drill with APF: admin p99 {:?} over {} requests ({} refused), noisy {} and quiet {} requests done, {} refused with 429, max RSS {} MiB", r.admin_p99(), r.admin.len(), r.admin_refused, r.noisy_done, r.quiet_done, r.refused_429, r.max_rss_mib);
    assert!(r.admin.len() >= 20, "the admin made {} requests", r.admin.len());
    assert_eq!(r.admin_refused, 0, "{r:?}");
    assert!(r.admin_p99() <= ADMIN_P99, "the admin's p99 was {:?}", r.admin_p99());
    assert!(r.noisy_done > 0, "{r:?}");
    assert!(r.quiet_done as f64 >= r.noisy_done as f64 * FAIR_SHARE, "the quiet user did {} requests, the noisy one {}", r.quiet_done, r.noisy_done);
    assert!(r.max_rss_mib <= RSS_BOUND_MIB, "a process reached {} MiB", r.max_rss_mib);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_priority_and_fairness_the_same_flood_locks_the_admin_out() {
    let r = drill(false).await;
    eprintln!("drill without APF: admin p99 {:?} over {} requests ({} refused), noisy {} and quiet {} requests done, {} refused with 429, max RSS {} MiB", r.admin_p99(), r.admin.len(), r.admin_refused, r.noisy_done, r.quiet_done, r.refused_429, r.max_rss_mib);
    assert!(r.admin_refused > 0 || r.admin_p99() > ADMIN_P99, "the admin was not locked out: {r:?}");
    // And the second user, with a tenth of the clients, gets about a tenth of the work.
    assert!((r.quiet_done as f64) < r.noisy_done as f64 * FAIR_SHARE, "the quiet user kept a fair share without priority and fairness: {r:?}");
}
