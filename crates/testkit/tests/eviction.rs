//! Eviction and PodDisruptionBudgets through a router over four shards on a real etcd (RFC
//! 0014): eight clients evicting every pod a budget covers, at once on every shard, evict exactly
//! what the budget allows, twice over; refusals are upstream's 429 with its cause; the
//! controller keeps the budget's status; pods a budget does not hold back (pending, uncovered)
//! go, two budgets are upstream's 500, a dry run changes nothing; and `kubectl drain` of a node
//! waits on the budget, then evicts as it allows.

use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use shardplane_testkit::*;
use std::time::{Duration, Instant};

const NS: &str = "evict";
const CLIENTS: usize = 8;
/// The controller counts every second in tests.
const COUNTED_WITHIN: Duration = Duration::from_secs(15);

fn pods_path() -> String {
    format!("/api/v1/namespaces/{NS}/pods")
}

/// Creates a pod labelled `app=web` (on `node`, if any) and reports it Running and Ready.
async fn ready_pod(router: &TestShard, name: &str, node: Option<&str>) {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    if let Some(n) = node {
        pod["spec"]["nodeName"] = json!(n);
    }
    let (code, mut made) = router.post(&pods_path(), &pod).await;
    assert_eq!(code, 201, "{made}");
    made["status"] = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
    let (code, body) = router.put(&format!("{}/{name}/status", pods_path()), &made).await;
    assert_eq!(code, 200, "{body}");
}

fn eviction(name: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}})
}

async fn evict(router: &TestShard, name: &str) -> (u16, Value) {
    router.post(&format!("{}/{name}/eviction", pods_path()), &eviction(name)).await
}

/// The budget once its status says `allowed` disruptions over `healthy` pods.
async fn budget_at(router: &TestShard, name: &str, healthy: i64, allowed: i64) -> Value {
    let path = format!("/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/{name}");
    wait_for(COUNTED_WITHIN, || async {
        let b = router.get(&path).await.1;
        b["status"]["currentHealthy"] == healthy && b["status"]["disruptionsAllowed"] == allowed && b["status"].get("disruptedPods").is_none()
    }).await;
    router.get(&path).await.1
}

async fn pod_names(router: &TestShard) -> Vec<String> {
    let (code, list) = router.get(&pods_path()).await;
    assert_eq!(code, 200, "{list}");
    list["items"].as_array().unwrap().iter().map(|p| p["metadata"]["name"].as_str().unwrap().to_owned()).collect()
}

/// Evicts every pod in `names` with eight clients at once; returns (evicted, refusals).
async fn evict_all(router: &TestShard, names: &[String]) -> (usize, Vec<Value>) {
    let answers: Vec<(u16, Value)> = stream::iter(names).map(|n| evict(router, n)).buffer_unordered(CLIENTS).collect().await;
    let mut refused = Vec::new();
    let mut evicted = 0;
    for (code, body) in answers {
        match code {
            201 => {
                assert_eq!(body["status"], "Success", "{body}");
                evicted += 1;
            }
            429 => refused.push(body),
            _ => panic!("unexpected answer {code}: {body}"),
        }
    }
    (evicted, refused)
}

#[tokio::test]
async fn evictions_at_once_on_every_shard_never_overspend_the_budget() {
    let (_etcd, _shards, router) = routed_cluster(4).await;
    let router = &router;
    router.namespace(NS).await;
    for i in 0..10 {
        ready_pod(router, &format!("web-{i}"), None).await;
    }
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"}, "spec": {"minAvailable": 6, "selector": {"matchLabels": {"app": "web"}}}});
    let (code, body) = router.post(&format!("/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"), &pdb).await;
    assert_eq!(code, 201, "{body}");
    let b = budget_at(router, "web", 10, 4).await;
    assert_eq!((b["status"]["desiredHealthy"].as_i64(), b["status"]["expectedPods"].as_i64(), b["status"]["observedGeneration"].as_i64()), (Some(6), Some(10), Some(1)));
    assert_eq!(b["status"]["conditions"][0]["reason"], "SufficientPods");

    for round in 0..2 {
        // Eight clients evict every pod at once: exactly the four the budget allows go.
        let names = pod_names(router).await;
        assert_eq!(names.len(), 10, "round {round}");
        let (evicted, refused) = evict_all(router, &names).await;
        assert_eq!(evicted, 4, "round {round}: {refused:?}");
        for body in &refused {
            assert_eq!((body["reason"].as_str(), body["message"].as_str()), (Some("TooManyRequests"), Some("Cannot evict pod as it would violate the pod's disruption budget.")), "{body}");
            let cause = &body["details"]["causes"][0];
            assert_eq!(cause["reason"], "DisruptionBudget");
            assert!(cause["message"].as_str().unwrap().starts_with("The disruption budget web needs 6 healthy pods and has "), "{cause}");
        }
        assert_eq!(pod_names(router).await.len(), 6);
        let b = budget_at(router, "web", 6, 0).await;
        assert_eq!(b["status"]["conditions"][0]["reason"], "InsufficientPods");
        // Four new ready pods give the budget room again.
        for i in 0..4 {
            ready_pod(router, &format!("web-{round}-{i}"), None).await;
        }
        budget_at(router, "web", 10, 4).await;
    }

    // A dry run answers as the eviction would and changes nothing.
    let name = pod_names(router).await[0].clone();
    let (code, body) = router.post(&format!("{}/{name}/eviction?dryRun=All", pods_path()), &eviction(&name)).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(router.get(&format!("{}/{name}", pods_path())).await.0, 200);
    assert_eq!(router.get(&format!("/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/web")).await.1["status"]["disruptionsAllowed"], 4);
    // A pending pod goes whatever the budget says; a pod no budget covers goes.
    let (code, _) = router.post(&pods_path(), &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pending", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})).await;
    assert_eq!(code, 201);
    let (code, body) = router.put(&format!("{}/pending/status", pods_path()), &{
        let mut p = router.get(&format!("{}/pending", pods_path())).await.1;
        p["status"] = json!({"phase": "Pending"});
        p
    }).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(evict(router, "pending").await.0, 201);
    let (code, _) = router.post(&pods_path(), &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "loner"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})).await;
    assert_eq!(code, 201);
    assert_eq!(evict(router, "loner").await.0, 201);
    assert_eq!(router.get(&format!("{}/loner", pods_path())).await.0, 404);
    // Two budgets over one pod: upstream's 500.
    let second = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web-too"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
    assert_eq!(router.post(&format!("/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"), &second).await.0, 201);
    let (code, body) = evict(router, &name).await;
    assert_eq!((code, body["message"].as_str()), (500, Some("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")), "{body}");
    // A name that is not the path's: 400.
    let (code, body) = router.post(&format!("{}/{name}/eviction", pods_path()), &eviction("other")).await;
    assert_eq!((code, body["message"].as_str()), (400, Some("name in URL does not match name in Eviction object")));
}

/// `kubectl drain` of a node whose three pods a budget covers with one disruption allowed: it
/// evicts one, waits on the budget (retrying its 429s) while the test plays the kubelet, and
/// finishes once the budget is relaxed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drain_waits_on_the_budget_then_evicts_as_it_allows() {
    let (_etcd, _shards, router) = routed_cluster(4).await;
    let router = &router;
    router.namespace(NS).await;
    let (code, body) = router.post("/api/v1/nodes", &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})).await;
    assert_eq!(code, 201, "{body}");
    for i in 0..3 {
        ready_pod(router, &format!("web-{i}"), Some("n1")).await;
    }
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}});
    assert_eq!(router.post(&format!("/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"), &pdb).await.0, 201);
    budget_at(router, "web", 3, 1).await;

    let k = Kubectl { bin: kubectl_path("1.33"), server: router.url.clone(), home: tempdir::Dir::new() };
    let mut drain = k.command(&["drain", "n1", "--force", "--ignore-daemonsets", "--timeout=120s"]);
    drain.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let child = drain.spawn().expect("kubectl drain");
    let deadline = Instant::now() + Duration::from_secs(100);
    // The kubelet's part: a pod marked for deletion goes (grace period 0).
    let kubelet = || async {
        let (_, list) = router.get(&pods_path()).await;
        for p in list["items"].as_array().unwrap() {
            if p["metadata"]["deletionTimestamp"].is_string() {
                let name = p["metadata"]["name"].as_str().unwrap();
                router.delete(&format!("{}/{name}?gracePeriodSeconds=0", pods_path()), None).await;
            }
        }
    };
    // The node is cordoned, one pod is evicted, and the other two stay: the budget allows no more.
    while pod_names(router).await.len() != 2 {
        assert!(Instant::now() < deadline, "drain evicted nothing");
        kubelet().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(router.get("/api/v1/nodes/n1").await.1["spec"]["unschedulable"], true);
    // Past a retry of drain's (it retries every 5 s), the two are still there.
    let held_until = Instant::now() + Duration::from_secs(7);
    while Instant::now() < held_until {
        kubelet().await;
        assert_eq!(pod_names(router).await.len(), 2, "drain evicted past the budget");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The budget is relaxed: drain evicts the rest and finishes.
    let (code, body) = router.send("PATCH", &format!("/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/web"), "application/merge-patch+json", r#"{"spec":{"minAvailable":0}}"#).await;
    assert_eq!(code, 200, "{body}");
    while !pod_names(router).await.is_empty() {
        assert!(Instant::now() < deadline, "drain did not finish after the budget was relaxed");
        kubelet().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("node/n1 cordoned") && stdout.contains("node/n1 drained"), "{stdout}");
    assert!(stderr.contains("Cannot evict pod as it would violate the pod's disruption budget."), "drain never waited on the budget: {stderr}");
}
