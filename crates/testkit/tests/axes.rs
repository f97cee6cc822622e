//! `shardctl axes` (RFC 0015) names the axis a simulated cluster is loaded along, for the three
//! profiles of the cluster simulator: node-heavy (kubelets renewing their Leases), churn-heavy
//! (pods and agent sessions created and deleted) and state-heavy (many CRDs with idle objects).
//! Two shards behind a router on real etcd; `shardctl` reads only etcd.

use serde_json::Value;
use shardplane_testkit::simulator::{self, Stats};
use shardplane_testkit::*;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

async fn cluster() -> (Etcd, Vec<TestShard>, Arc<TestShard>) {
    // Shards refresh their member keys every second.
    let (etcd, shards, router) = routed_cluster_with(2, |c| c.member_ttl = Duration::from_secs(3)).await;
    router.namespace(simulator::NAMESPACE).await;
    let handle = Arc::new(TestShard::attach(router.url.clone(), router.addr));
    std::mem::forget(router); // kept serving for the test's life; `handle` talks to it
    (etcd, shards, handle)
}

async fn axes(etcd: &Etcd) -> Value {
    let out = shardctl(&etcd.endpoint, &["axes", "--window", "4", "-o", "json"]).await;
    serde_json::from_str(&out).unwrap()
}

fn kubelets(router: &Arc<TestShard>, nodes: usize, renew: Duration, stats: &Arc<Stats>, stop: &Arc<AtomicBool>) {
    for i in 0..nodes {
        tokio::spawn(simulator::kubelet(router.clone(), i, renew, Duration::from_secs(300), stats.clone(), stop.clone()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_heavy_cluster_is_node_bound() {
    let (etcd, _shards, router) = cluster().await;
    let (stats, stop) = (Arc::new(Stats::default()), Arc::new(AtomicBool::new(false)));
    simulator::register_nodes(&router, 0..100, 8).await;
    kubelets(&router, 100, Duration::from_millis(500), &stats, &stop);
    tokio::spawn(simulator::pod_churn(router.clone(), 2.0, 100, Duration::from_secs(5), stats.clone(), stop.clone()));
    wait_for(Duration::from_secs(60), || async { stats.writes.lock().unwrap().get("lease").is_some_and(|l| l.len() >= 100) }).await;
    let d = axes(&etcd).await;
    // As an operator reads it.
    eprintln!("{}", shardctl(&etcd.endpoint, &["axes", "--window", "2"]).await);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(d["axis"], "node-bound", "{d:#}");
    assert!(d["writesPerSecond"]["node-leases"].as_f64().unwrap() > 0.0);
    assert!(d["seam"].as_str().unwrap().contains("liveness tier"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_churn_heavy_cluster_is_churn_bound() {
    let (etcd, _shards, router) = cluster().await;
    let (stats, stop) = (Arc::new(Stats::default()), Arc::new(AtomicBool::new(false)));
    simulator::establish(&router, &simulator::agent_session_crd(), &format!("/apis/agents.shardplane.dev/v1/namespaces/{}/agentsessions", simulator::NAMESPACE)).await;
    simulator::register_nodes(&router, 0..3, 3).await;
    kubelets(&router, 3, Duration::from_secs(10), &stats, &stop);
    tokio::spawn(simulator::pod_churn(router.clone(), 30.0, 3, Duration::from_secs(1), stats.clone(), stop.clone()));
    tokio::spawn(simulator::session_churn(router.clone(), 30.0, Duration::from_secs(1), stats.clone(), stop.clone()));
    wait_for(Duration::from_secs(60), || async { stats.writes.lock().unwrap().get("session").is_some_and(|l| l.len() >= 60) }).await;
    let d = axes(&etcd).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    eprintln!("{}", d["because"]);
    assert_eq!(d["axis"], "churn-bound", "{d:#}");
    let because = d["because"].as_str().unwrap();
    assert!(because.contains("pods") && because.contains("agentsessions.agents.shardplane.dev"), "{because}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_heavy_cluster_is_state_bound() {
    let (etcd, _shards, router) = cluster().await;
    let (stats, stop) = (Arc::new(Stats::default()), Arc::new(AtomicBool::new(false)));
    simulator::register_nodes(&router, 0..3, 3).await;
    kubelets(&router, 3, Duration::from_secs(10), &stats, &stop);
    simulator::state(&router, 12, 90, 1024, 8, &stats).await;
    // The shards have published every object before the window opens.
    let storage = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    wait_for(Duration::from_secs(30), || async {
        let members = storage.members().await.unwrap();
        let widgets: u64 = members.shards.iter().flat_map(|s| s.load.resources.iter()).filter(|(r, _)| r.starts_with("widgets")).map(|(_, l)| l.objects).sum();
        widgets == 12 * 90
    })
    .await;
    let d = axes(&etcd).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    eprintln!("{}", d["because"]);
    assert_eq!(d["axis"], "state-bound", "{d:#}");
    assert!(d["resources"].as_array().unwrap().iter().filter(|r| r["resource"].as_str().unwrap().starts_with("widgets")).count() == 12);
}
