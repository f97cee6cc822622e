//! Evictions under a shard's SIGKILL (RFC 0014), with real processes: `shard-router` over four
//! shard processes on real etcd, 30 ready pods under a budget of `minAvailable: 20`, eight
//! clients evicting every one of them, one shard process killed with SIGKILL part-way (the
//! router starts it again). Exactly ten pods go: an eviction's budget count-down and the pod's
//! deletion are one etcd transaction, so no crash spends the budget twice or for nothing.

mod common;

use common::{send_signal, until_definite, Topology};
use futures::stream::{self, StreamExt};
use serde_json::json;
use shardplane_testkit::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const NS: &str = "evict";
const PODS: usize = 30;
const MIN_AVAILABLE: usize = 20;
const CLIENTS: usize = 8;
/// The kill comes after this many answers.
const KILL_AFTER: usize = 6;

async fn pods_left(router: &TestShard) -> usize {
    let (code, list) = router.get(&format!("/api/v1/namespaces/{NS}/pods")).await;
    assert_eq!(code, 200, "{list}");
    list["items"].as_array().unwrap().len()
}

#[tokio::test]
async fn a_shard_killed_mid_evictions_never_overspends_the_budget() {
    let etcd = Etcd::start().await;
    let topology = Topology::start(&etcd.endpoint, 4, &[]).await;
    let (started, router) = (&topology.started, &topology.router);
    router.namespace(NS).await;
    for i in 0..PODS {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("web-{i}"), "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        let (code, mut made) = router.post(&format!("/api/v1/namespaces/{NS}/pods"), &pod).await;
        assert_eq!(code, 201, "{made}");
        made["status"] = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        assert_eq!(router.put(&format!("/api/v1/namespaces/{NS}/pods/web-{i}/status"), &made).await.0, 200);
    }
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"}, "spec": {"minAvailable": MIN_AVAILABLE, "selector": {"matchLabels": {"app": "web"}}}});
    assert_eq!(router.post(&format!("/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"), &pdb).await.0, 201);
    let path = format!("/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/web");
    wait_for(Duration::from_secs(30), || async { router.get(&path).await.1["status"]["disruptionsAllowed"] == PODS - MIN_AVAILABLE }).await;

    let victim = started.shards[1].0;
    let (answered, killed, retried, refused) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
    stream::iter(0..PODS)
        .for_each_concurrent(CLIENTS, |i| {
            let (answered, killed, retried, refused) = (&answered, &killed, &retried, &refused);
            async move {
                let name = format!("web-{i}");
                let at = format!("/api/v1/namespaces/{NS}/pods/{name}/eviction");
                let body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}});
                // 404: an eviction whose answer was lost with the shard went through.
                let (code, answer) = until_definite(&name, retried, &[201, 404, 429], || router.post(&at, &body)).await;
                if code == 429 {
                    assert_eq!(answer["details"]["causes"][0]["reason"], "DisruptionBudget", "{answer}");
                    refused.fetch_add(1, Ordering::SeqCst);
                }
                if answered.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER && killed.fetch_add(1, Ordering::SeqCst) == 0 {
                    send_signal(victim, 9);
                }
            }
        })
        .await;
    assert_eq!(killed.load(Ordering::SeqCst), 1, "the shard was killed");
    eprintln!("answers retried while the shard was down: {}; refused by the budget: {}", retried.load(Ordering::SeqCst), refused.load(Ordering::SeqCst));
    // Exactly the budget's ten went, and the budget, counted again, allows nothing more.
    assert_eq!(pods_left(router).await, MIN_AVAILABLE);
    assert_eq!(refused.load(Ordering::SeqCst), MIN_AVAILABLE);
    wait_for(Duration::from_secs(30), || async {
        let s = router.get(&path).await.1["status"].clone();
        s["currentHealthy"] == MIN_AVAILABLE && s["disruptionsAllowed"] == 0 && s.get("disruptedPods").is_none()
    }).await;
}
