//! ResourceQuota under a shard's SIGKILL (RFC 0014), with real processes: `shard-router` over
//! four shard processes on real etcd, eight clients creating 120 pods in a namespace whose quota
//! allows 50, one shard process killed with SIGKILL part-way (the router starts it again). The
//! quota is never passed, and its usage equals the pods that exist at the first read after the
//! run and again after deletes: a pod and its charge are one etcd transaction, so a crash can
//! leave neither half alone and nothing is left for the controller to repair.

mod common;

use common::{send_signal, until_definite, Topology};
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use shardplane_storage::Storage;
use shardplane_testkit::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const NS: &str = "quota";
const PODS: usize = 120;
const LIMIT: usize = 50;
const CLIENTS: usize = 8;
/// The kill comes after this many answers.
const KILL_AFTER: usize = 20;

/// The pods of the namespace and the quota's usage, read from etcd at one revision.
async fn read(storage: &Storage) -> (usize, Value) {
    let (start, end) = shardplane_keyspace::etcd_layout::range_keys("", "pods", shardplane_keyspace::HashRange::FULL);
    let (pods, rev) = storage.list_range(&start, &end, 0).await.unwrap();
    let in_ns = pods.iter().filter(|kv| serde_json::from_slice::<Value>(&kv.value).unwrap()["metadata"]["namespace"] == NS).count();
    let (start, end) = shardplane_keyspace::etcd_layout::range_keys("", "resourcequotas", shardplane_keyspace::HashRange::FULL);
    let (quotas, _) = storage.list_range(&start, &end, rev).await.unwrap();
    let q: Value = serde_json::from_slice(&quotas.iter().find(|kv| kv.key.ends_with(b"/quota/pods")).unwrap().value).unwrap();
    (in_ns, q["status"]["used"].clone())
}

#[tokio::test]
async fn a_shard_killed_mid_creates_never_lets_a_namespace_pass_its_quota() {
    let etcd = Etcd::start().await;
    let topology = Topology::start(&etcd.endpoint, 4, &[]).await;
    let (started, router) = (&topology.started, &topology.router);
    router.namespace(NS).await;
    let (code, body) = router.post(&format!("/api/v1/namespaces/{NS}/resourcequotas"), &json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pods"}, "spec": {"hard": {"pods": LIMIT.to_string()}}})).await;
    assert_eq!(code, 201, "{body}");
    wait_for(Duration::from_secs(30), || async { router.get(&format!("/api/v1/namespaces/{NS}/resourcequotas/pods")).await.1["status"]["used"]["pods"] == "0" }).await;

    let victim = started.shards[2].0;
    let (answered, killed, retried, refused) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
    stream::iter(0..PODS)
        .for_each_concurrent(CLIENTS, |i| {
            let (answered, killed, retried, refused) = (&answered, &killed, &retried, &refused);
            async move {
                let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p{i}")}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
                let path = format!("/api/v1/namespaces/{NS}/pods");
                let (code, body) = until_definite(&format!("p{i}"), retried, &[201, 403, 409], || router.post(&path, &pod)).await;
                if code == 403 {
                    assert!(body["message"].as_str().unwrap().contains(&format!("exceeded quota: pods, requested: pods=1, used: pods={LIMIT}, limited: pods={LIMIT}")), "{body}");
                    refused.fetch_add(1, Ordering::SeqCst);
                }
                if answered.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER && killed.fetch_add(1, Ordering::SeqCst) == 0 {
                    send_signal(victim, 9);
                }
            }
        })
        .await;
    assert_eq!(killed.load(Ordering::SeqCst), 1, "the shard was killed");
    let storage = Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    // At the first read, with no repair: the quota full, never passed, usage equal to the pods.
    let (pods, used) = read(&storage).await;
    eprintln!("answers retried while the shard was down: {}; refused by the quota: {}", retried.load(Ordering::SeqCst), refused.load(Ordering::SeqCst));
    assert_eq!(pods, LIMIT, "the quota allows exactly {LIMIT} pods");
    assert_eq!(used, json!({"pods": LIMIT.to_string()}));

    // Deletes give back in their own transaction, through the restarted shard too.
    let names: Vec<String> = (0..PODS).map(|i| format!("p{i}")).collect();
    stream::iter(&names)
        .for_each_concurrent(CLIENTS, |n| {
            let retried = &retried;
            async move {
                let path = format!("/api/v1/namespaces/{NS}/pods/{n}");
                until_definite(n, retried, &[200, 404], || router.delete(&path, None)).await;
            }
        })
        .await;
    let (pods, used) = read(&storage).await;
    assert_eq!((pods, used), (0, json!({"pods": "0"})));
}
