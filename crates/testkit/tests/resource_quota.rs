//! ResourceQuota through a router over four shards on a real etcd (RFC 0014): eight clients
//! creating pods at once on every shard never pass the quota, however the pods and the quota
//! hash; usage equals the pods that exist after deletes; refusals carry upstream's 403 message;
//! the controller fills in a new quota's status from what exists and repairs usage written by
//! hand at its next pass.

use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use shardplane_testkit::*;
use std::time::Duration;

const NS: &str = "quota";
const CLIENTS: usize = 8;
/// The controller passes every 2 s in tests; a repair lands within a few passes.
const REPAIRED_WITHIN: Duration = Duration::from_secs(15);

fn pod(name: &str, cpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "10Mi"}}}]}})
}

fn quota_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/resourcequotas/{name}")
}

/// The quota once the controller has written its status.
async fn counted(router: &TestShard, name: &str) -> Value {
    wait_for(Duration::from_secs(15), || async {
        let q = router.get(&quota_path(name)).await.1;
        q["status"]["hard"] == q["spec"]["hard"] && q["status"]["used"].as_object().is_some_and(|u| u.len() == q["spec"]["hard"].as_object().map_or(0, |h| h.len()))
    }).await;
    router.get(&quota_path(name)).await.1
}

/// The pods of the namespace the router lists.
async fn pods(router: &TestShard) -> Vec<Value> {
    let (code, list) = router.get(&format!("/api/v1/namespaces/{NS}/pods")).await;
    assert_eq!(code, 200, "{list}");
    list["items"].as_array().unwrap().clone()
}

/// Creates pods `from..to` with eight clients at once; returns (created, refused answers).
async fn create_at_once(router: &TestShard, from: usize, to: usize) -> (usize, Vec<String>) {
    let answers: Vec<(u16, Value)> = stream::iter(from..to).map(|i| async move { router.post(&format!("/api/v1/namespaces/{NS}/pods"), &pod(&format!("p{i}"), "100m")).await }).buffer_unordered(CLIENTS).collect().await;
    let mut refused = Vec::new();
    let mut created = 0;
    for (code, body) in answers {
        match code {
            201 => created += 1,
            403 => refused.push(body["message"].as_str().unwrap().to_owned()),
            _ => panic!("unexpected answer {code}: {body}"),
        }
    }
    (created, refused)
}

#[tokio::test]
async fn pods_created_at_once_on_every_shard_never_pass_the_quota() {
    let (_etcd, _shards, router) = routed_cluster(4).await;
    let router = &router;
    router.namespace(NS).await;
    let (code, q) = router.post(&format!("/api/v1/namespaces/{NS}/resourcequotas"), &json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute"}, "spec": {"hard": {"pods": "10", "requests.cpu": "5", "count/pods": "20"}}})).await;
    assert_eq!(code, 201, "{q}");
    let q = counted(&router, "compute").await;
    assert_eq!(q["status"]["used"], json!({"pods": "0", "requests.cpu": "0", "count/pods": "0"}));

    // 40 creates from eight clients at once: exactly the ten the quota allows.
    let (created, refused) = create_at_once(&router, 0, 40).await;
    assert_eq!(created, 10, "refused: {refused:?}");
    for message in &refused {
        assert!(message.starts_with("pods \"p") && message.ends_with("\" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=10, limited: pods=10"), "{message}");
    }
    assert_eq!(pods(&router).await.len(), 10);
    assert_eq!(router.get(&quota_path("compute")).await.1["status"]["used"], json!({"pods": "10", "requests.cpu": "1", "count/pods": "10"}));

    // Deletes give usage back in their own transaction; the freed room is taken exactly once.
    let names: Vec<String> = pods(&router).await.iter().take(4).map(|p| p["metadata"]["name"].as_str().unwrap().to_owned()).collect();
    let deleted: Vec<u16> = stream::iter(&names).map(|n| async move { router.delete(&format!("/api/v1/namespaces/{NS}/pods/{n}"), None).await.0 }).buffer_unordered(CLIENTS).collect().await;
    assert!(deleted.iter().all(|c| *c == 200), "{deleted:?}");
    assert_eq!(router.get(&quota_path("compute")).await.1["status"]["used"], json!({"pods": "6", "requests.cpu": "600m", "count/pods": "6"}));
    let (created, _) = create_at_once(&router, 100, 116).await;
    assert_eq!(created, 4);
    assert_eq!(pods(&router).await.len(), 10);
    assert_eq!(router.get(&quota_path("compute")).await.1["status"]["used"], json!({"pods": "10", "requests.cpu": "1", "count/pods": "10"}));

    // A pod that ends stops using compute resources but still counts as an object.
    let name = pods(&router).await[0]["metadata"]["name"].as_str().unwrap().to_owned();
    let mut finished = router.get(&format!("/api/v1/namespaces/{NS}/pods/{name}")).await.1;
    finished["status"]["phase"] = json!("Succeeded");
    let (code, body) = router.put(&format!("/api/v1/namespaces/{NS}/pods/{name}/status"), &finished).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(router.get(&quota_path("compute")).await.1["status"]["used"], json!({"pods": "9", "requests.cpu": "900m", "count/pods": "10"}));

    // A container without the cpu a cpu quota limits: upstream's message; a dry run is checked
    // too and charges nothing.
    let bare = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let (code, body) = router.post(&format!("/api/v1/namespaces/{NS}/pods"), &bare).await;
    assert_eq!((code, body["reason"].as_str(), body["message"].as_str()), (403, Some("Forbidden"), Some("pods \"bare\" is forbidden: failed quota: compute: must specify requests.cpu for: c")));
    let (code, body) = router.post(&format!("/api/v1/namespaces/{NS}/pods?dryRun=All"), &pod("dry", "100m")).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = router.post(&format!("/api/v1/namespaces/{NS}/pods?dryRun=All"), &pod("dry", "5")).await;
    assert_eq!((code, body["message"].as_str()), (403, Some("pods \"dry\" is forbidden: exceeded quota: compute, requested: requests.cpu=5, used: requests.cpu=900m, limited: requests.cpu=5")));
    assert_eq!(router.get(&quota_path("compute")).await.1["status"]["used"], json!({"pods": "9", "requests.cpu": "900m", "count/pods": "10"}));
}

#[tokio::test]
async fn the_controller_counts_what_exists_and_repairs_usage_written_by_hand() {
    let (_etcd, _shards, router) = routed_cluster(4).await;
    router.namespace(NS).await;
    for i in 0..3 {
        let (code, body) = router.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}})).await;
        assert_eq!(code, 201, "{body}");
    }
    let (code, body) = router.post(&format!("/api/v1/namespaces/{NS}/services"), &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "np"}, "spec": {"type": "NodePort", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}})).await;
    assert_eq!(code, 201, "{body}");
    // Objects made before the quota are counted when it is created.
    let (code, q) = router.post(&format!("/api/v1/namespaces/{NS}/resourcequotas"), &json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "objects"}, "spec": {"hard": {"configmaps": "4", "services.nodeports": "3", "services": "5"}}})).await;
    assert_eq!(code, 201, "{q}");
    assert_eq!(q.get("status").and_then(|s| s.get("used")), None, "a new quota's status is the controller's");
    let q = counted(&router, "objects").await;
    assert_eq!(q["status"]["used"], json!({"configmaps": "3", "services.nodeports": "2", "services": "1"}));
    // More node ports than the quota allows are refused.
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "more"}, "spec": {"type": "NodePort", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}});
    let (code, body) = router.post(&format!("/api/v1/namespaces/{NS}/services"), &svc).await;
    assert_eq!((code, body["message"].as_str()), (403, Some("services \"more\" is forbidden: exceeded quota: objects, requested: services.nodeports=2, used: services.nodeports=2, limited: services.nodeports=3")));
    // Usage written by hand through the status subresource is set right at the next pass.
    let mut wrong = router.get(&quota_path("objects")).await.1;
    wrong["status"]["used"] = json!({"configmaps": "0", "services.nodeports": "0", "services": "0"});
    let (code, body) = router.put(&format!("{}/status", quota_path("objects")), &wrong).await;
    assert_eq!(code, 200, "{body}");
    wait_for(REPAIRED_WITHIN, || async { router.get(&quota_path("objects")).await.1["status"]["used"] == json!({"configmaps": "3", "services.nodeports": "2", "services": "1"}) }).await;
    let last = router.get(&quota_path("objects")).await.1;
    // A changed limit is copied to status.hard at once.
    let mut raised = last.clone();
    raised["spec"]["hard"]["configmaps"] = json!("10");
    let (code, body) = router.put(&quota_path("objects"), &raised).await;
    assert_eq!(code, 200, "{body}");
    wait_for(REPAIRED_WITHIN, || async { router.get(&quota_path("objects")).await.1["status"]["hard"]["configmaps"] == "10" }).await;
    // Deleting the quota stops the counting: creates are no longer charged to anything.
    assert_eq!(router.delete(&quota_path("objects"), None).await.0, 200);
    let (code, body) = router.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after"}})).await;
    assert_eq!(code, 201, "{body}");
}
