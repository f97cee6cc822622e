//! `--event-ttl` (RFC 0015): Events expire a TTL after their last write, as kube-apiserver's do,
//! on etcd leases shared by many Events; an update gives an Event its whole TTL again; nothing
//! else expires.

use serde_json::json;
use shardplane_keyspace::etcd_layout::resource_prefix;
use shardplane_testkit::*;
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(3);

fn event(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}, "reason": "Test", "message": "expires"})
}

#[tokio::test]
async fn events_expire_a_ttl_after_their_last_write_on_shared_leases() {
    let (etcd, _shards, router) = routed_cluster_with(2, |c| c.event_ttl = TTL).await;
    let written = Instant::now();
    futures::future::join_all((0..20).map(|i| {
        let router = &router;
        async move {
            let (code, body) = router.post("/api/v1/namespaces/default/events", &event(&format!("e{i}"))).await;
            assert_eq!(code, 201, "{body}");
        }
    }))
    .await;
    assert_eq!(router.post("/api/v1/namespaces/default/configmaps", &configmap("stays", json!({}))).await.0, 201);
    // Twenty Events written at once share a few leases (a shard grants one per reuse window).
    let mut kv = etcd_client::Client::connect([etcd.endpoint.as_str()], None).await.unwrap();
    let prefix = resource_prefix("", "events");
    let stored = kv.get(prefix.as_bytes(), Some(etcd_client::GetOptions::new().with_prefix())).await.unwrap();
    let leases: std::collections::BTreeSet<i64> = stored.kvs().iter().map(|kv| kv.lease()).collect();
    assert_eq!(stored.kvs().len(), 20);
    assert!(!leases.contains(&0) && leases.len() <= 10, "{leases:?}");
    let granted = kv.lease_time_to_live(*leases.iter().next().unwrap(), None).await.unwrap().granted_ttl();
    assert_eq!(granted, TTL.as_secs() as i64 + 1, "the TTL and the reuse window, in whole seconds");

    // One Event written again half-way gets its whole TTL again: it outlives the others.
    tokio::time::sleep_until((written + TTL / 2).into()).await;
    let (code, mut e) = router.get("/api/v1/namespaces/default/events/e0").await;
    assert_eq!(code, 200, "{e}");
    e["count"] = json!(2);
    let rewritten = Instant::now();
    assert_eq!(router.put("/api/v1/namespaces/default/events/e0", &e).await.0, 200);

    // Expired together (one revision deletes every key of a lease), and the caches saw each.
    wait_for(Duration::from_secs(60), || async { router.get("/api/v1/namespaces/default/events").await.1["items"].as_array().is_some_and(|i| i.len() == 1) }).await;
    // Never before their TTL (the leases were granted before the writes were answered).
    assert!(written.elapsed() >= TTL);
    assert_eq!(router.get("/api/v1/namespaces/default/events/e0").await.0, 200, "the Event written again is still there");
    wait_for(Duration::from_secs(60), || async { router.get("/api/v1/namespaces/default/events/e0").await.0 == 404 }).await;
    assert!(rewritten.elapsed() >= TTL);
    assert_eq!(router.get("/api/v1/namespaces/default/configmaps/stays").await.0, 200, "nothing else expires");
}

/// A store that lost the shared lease (revoked here, as a store coming back from a crash
/// without it would have it): the next Event is written on a new lease, not refused until the
/// shared one's reuse window ends.
#[tokio::test]
async fn an_event_written_after_its_shared_lease_is_lost_gets_a_new_one() {
    let (etcd, _shards, router) = routed_cluster_with(1, |c| c.event_ttl = Duration::from_secs(600)).await;
    let (code, body) = router.post("/api/v1/namespaces/default/events", &event("before")).await;
    assert_eq!(code, 201, "{body}");
    let mut kv = etcd_client::Client::connect([etcd.endpoint.as_str()], None).await.unwrap();
    let reader = kv.clone();
    let stored = |name: &'static str| {
        let mut kv = reader.clone();
        async move {
            let all = kv.get(resource_prefix("", "events").as_bytes(), Some(etcd_client::GetOptions::new().with_prefix())).await.unwrap();
            all.kvs().iter().find(|e| e.key_str().unwrap().ends_with(&format!("/default/{name}"))).map(|e| e.lease()).expect("stored")
        }
    };
    let lost = stored("before").await;
    assert_ne!(lost, 0);
    kv.lease_revoke(lost).await.unwrap();
    // Within the 30 s reuse window of a 600 s TTL: the shard would hand out the lost lease.
    let (code, body) = router.post("/api/v1/namespaces/default/events", &event("after")).await;
    assert_eq!(code, 201, "{body}");
    // On a lease granted now (neither etcd nor the embedded store grants a lost lease's ID again).
    let lease = stored("after").await;
    assert!(lease != 0 && lease != lost, "{lease} after losing {lost}");
    let ttl = kv.lease_time_to_live(lease, None).await.unwrap().granted_ttl();
    assert_eq!(ttl, 630, "a lease that exists, granted for the TTL and its reuse window");
}
