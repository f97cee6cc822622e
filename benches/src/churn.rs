//! churn: AgentSessions (the custom resource of `deploy/examples/agent-sessions/`) created,
//! suspended, resumed and deleted at a target rate while 50 watchers follow them through the
//! router; suspend and resume are merge patches of `spec.phase`.

use crate::Ctx;
use crate::cluster::{Topology, cpu_seconds, http};
use crate::report::{Section, percentile};
use futures::StreamExt;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const NS: &str = "sessions";
const WATCHERS: usize = 50;
const STEPS: [&str; 4] = ["create", "suspend", "resume", "delete"];
const GROUP: &str = "agents.shardplane.dev";
/// The example CRD, as a user applies it.
const CRD_YAML: &str = include_str!("../../deploy/examples/agent-sessions/crd.yaml");

/// Creates the AgentSession CRD and waits until its sessions are served through the router.
async fn create_crd(c: &reqwest::Client, url: &str) {
    let crd: serde_json::Value = serde_saphyr::from_str(CRD_YAML).expect("the example CRD is YAML");
    let r = c.post(format!("{url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions")).json(&crd).send().await.expect("create the CRD");
    assert!(r.status().is_success(), "create the CRD: {}", r.status());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c.get(format!("{url}/apis/{GROUP}/v1/namespaces/{NS}/agentsessions")).send().await.is_ok_and(|r| r.status().is_success()) {
        assert!(Instant::now() < deadline, "AgentSessions not served within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One session's life; returns each step's latency in ms.
async fn session(c: reqwest::Client, base: String, i: usize) -> [f64; 4] {
    let name = format!("session-{i:07}");
    let mut out = [0.0; 4];
    let patch = |phase: &str| json!({"spec": {"phase": phase}}).to_string();
    for (step, slot) in out.iter_mut().enumerate() {
        let t = Instant::now();
        let r = match step {
            0 => {
                c.post(&base)
                    .json(&json!({"apiVersion": format!("{GROUP}/v1"), "kind": "AgentSession", "metadata": {"name": name, "labels": {"agent": format!("agent-{}", i % 20)}}, "spec": {"phase": "Running", "model": "m-large", "agent": format!("agent-{}", i % 20), "context": {"ticket": i}}}))
                    .send()
                    .await
            }
            1 => c.patch(format!("{base}/{name}")).header("content-type", "application/merge-patch+json").body(patch("Suspended")).send().await,
            2 => c.patch(format!("{base}/{name}")).header("content-type", "application/merge-patch+json").body(patch("Running")).send().await,
            _ => c.delete(format!("{base}/{name}")).send().await,
        }
        .expect("session request");
        assert!(r.status().is_success(), "{} {name}: {}", STEPS[step], r.status());
        *slot = t.elapsed().as_secs_f64() * 1000.0;
    }
    out
}

/// Counts events per etcd key class while the run lasts.
async fn write_mix(endpoint: String, from: i64, stop: tokio_util::sync::CancellationToken) -> BTreeMap<String, u64> {
    let mut client = etcd_client::Client::connect([endpoint], None).await.expect("etcd");
    let mut stream = client.watch(vec![0u8], Some(etcd_client::WatchOptions::new().with_from_key().with_start_revision(from))).await.expect("watch");
    let mut mix = BTreeMap::new();
    loop {
        tokio::select! {
            m = stream.message() => {
                let Ok(Some(resp)) = m else { break };
                for e in resp.events() {
                    let key = e.kv().and_then(|kv| kv.key_str().ok()).unwrap_or("");
                    let class = match key.strip_prefix("/registry/").map(|r| r.split('/').nth(1).unwrap_or("")) {
                        Some("leases") => "leases",
                        Some("events") => "events",
                        Some(_) => "objects",
                        None => "shardplane's own keys",
                    };
                    *mix.entry(class.to_owned()).or_default() += 1;
                }
            }
            _ = stop.cancelled() => break,
        }
    }
    mix
}

pub async fn run(ctx: &Ctx) -> Section {
    let (per_second, seconds) = if ctx.smoke { (10, 3) } else { (50, 60) };
    let k = if ctx.smoke { 2 } else { 4 };
    let total = per_second * seconds;
    let etcd = crate::start_etcd().await;
    let t = Topology::start(&ctx.router, &etcd.endpoint, k).await;
    let c = http();
    let r = c.post(format!("{}/api/v1/namespaces", t.url)).json(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).send().await.expect("namespace");
    assert!(r.status().is_success());
    create_crd(&c, &t.url).await;
    let rv = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.expect("etcd").current_revision().await.expect("rv");
    let base = format!("{}/apis/{GROUP}/v1/namespaces/{NS}/agentsessions", t.url);
    // Watchers: each must see 4 events per session.
    let want = total * 4;
    let deadline = Instant::now() + Duration::from_secs(seconds as u64 + 120);
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let r = c.get(format!("{base}?watch=1&resourceVersion={rv}")).send().await.expect("watch");
        assert!(r.status().is_success());
        watchers.push(tokio::spawn(async move {
            let mut body = r.bytes_stream();
            let mut n = 0;
            while n < want {
                let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline.into(), body.next()).await else {
                    break;
                };
                n += chunk.iter().filter(|&&b| b == b'\n').count();
            }
            n
        }));
    }
    let stop = tokio_util::sync::CancellationToken::new();
    let mix = tokio::spawn(write_mix(etcd.endpoint.clone(), rv as i64 + 1, stop.clone()));
    let cpu0: Vec<f64> = t.shards.iter().map(|s| cpu_seconds(s.pid)).collect();
    let router_cpu0 = cpu_seconds(t.router_pid());
    let bar = ctx.bar(total as u64, &format!("churn: {per_second} sessions/s for {seconds} s"));
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_second as f64));
    let mut sessions = Vec::new();
    for i in 0..total {
        tick.tick().await;
        let (c, base, bar) = (c.clone(), base.clone(), bar.clone());
        sessions.push(tokio::spawn(async move {
            let l = session(c, base, i).await;
            bar.inc(1);
            l
        }));
    }
    let mut lat: [Vec<f64>; 4] = Default::default();
    for s in sessions {
        for (step, ms) in s.await.expect("session").into_iter().enumerate() {
            lat[step].push(ms);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let cpu: Vec<f64> = t.shards.iter().zip(&cpu0).map(|(s, c0)| (cpu_seconds(s.pid) - c0) / elapsed).collect();
    let router_cpu = (cpu_seconds(t.router_pid()) - router_cpu0) / elapsed;
    let mut complete = 0;
    for w in watchers {
        if w.await.expect("watcher") >= want {
            complete += 1;
        }
    }
    stop.cancel();
    let mix = mix.await.expect("mix");
    t.stop().await;

    let mut s = Section::new("churn");
    s.line(format!("{total} AgentSessions (the custom resource of `deploy/examples/agent-sessions/`) at {per_second}/s ({} per minute) for {seconds} s, each created, suspended, resumed and deleted through the router over {k} shards, while {WATCHERS} watchers follow the namespace through the router.\n", per_second * 60));
    let rows: Vec<Vec<String>> = STEPS.iter().zip(lat.iter_mut()).map(|(step, v)| vec![(*step).to_owned(), v.len().to_string(), format!("{:.1}", percentile(v, 0.5)), format!("{:.1}", percentile(v, 0.99))]).collect();
    s.table(&["transition", "samples", "p50 ms", "p99 ms"], &rows);
    let writes: u64 = mix.values().sum();
    s.line(format!("etcd writes during the run (a raw watch on every key): {}.\n", mix.iter().map(|(k, v)| format!("{k} {v} ({:.0}%)", 100.0 * *v as f64 / writes.max(1) as f64)).collect::<Vec<_>>().join(", ")));
    s.line(format!("CPU (cores busy, user + system): shards {}; router {router_cpu:.2}. {complete}/{WATCHERS} watchers saw all {want} events.\n", cpu.iter().map(|c| format!("{c:.2}")).collect::<Vec<_>>().join(", ")));
    s.target(format!("every watcher sees every transition ({WATCHERS} watchers)"), format!("{complete}/{WATCHERS}"), "all", complete == WATCHERS);
    s
}
