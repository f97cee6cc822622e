//! The garbage collector through a router over four shards on a real etcd (RFC 0014): deleting
//! owners with each propagation policy leaves exactly what upstream leaves, although owners and
//! dependents hash to different shards.

use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use shardplane_testkit::*;
use std::collections::BTreeMap;
use std::time::Duration;

const NS: &str = "gc";
const DEPLOYMENTS: usize = 100;
const T: Duration = Duration::from_secs(90);

async fn names(router: &TestShard, path: &str) -> Vec<Value> {
    let (code, list) = router.get(path).await;
    assert_eq!(code, 200, "{list}");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// Creates the families, deletes every Deployment with `policy`, and returns the router and the
/// DELETED events' resourceVersions by (resource, name), once the collector is done.
async fn delete_all(policy: &str) -> (TestShard, BTreeMap<(String, String), u64>, Vec<TestShard>, Etcd) {
    let (etcd, shards, router) = routed_cluster(4).await;
    router.namespace(NS).await;
    let prefix = policy.to_lowercase();
    let made: Vec<Value> = stream::iter(0..DEPLOYMENTS).map(|i| { let r = &router; let n = format!("{prefix}-{i}"); async move { deployment_family(r, NS, &n).await } }).buffer_unordered(16).collect().await;
    assert_eq!(made.len(), DEPLOYMENTS);
    let (_, list) = router.get(&format!("/api/v1/namespaces/{NS}/pods")).await;
    let from = list["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let mut watches = Vec::new();
    for path in ["/apis/apps/v1/namespaces/gc/deployments", "/apis/apps/v1/namespaces/gc/replicasets", "/api/v1/namespaces/gc/pods"] {
        watches.push((path.rsplit('/').next().unwrap().to_owned(), router.watch(&format!("{path}?watch=true&resourceVersion={from}")).await));
    }
    let body = json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy});
    let codes: Vec<(u16, Value)> = stream::iter(0..DEPLOYMENTS).map(|i| { let r = &router; let b = &body; let n = format!("{prefix}-{i}"); async move { r.delete(&format!("/apis/apps/v1/namespaces/{NS}/deployments/{n}"), Some(b)).await } }).buffer_unordered(16).collect().await;
    for (code, answer) in &codes {
        assert_eq!(*code, 200, "{answer}");
        match policy {
            // Marked, with the collector's finalizer, and kept until the collector is done.
            "Foreground" => assert_eq!(answer["metadata"]["finalizers"], json!(["foregroundDeletion"]), "{answer}"),
            "Orphan" => assert_eq!(answer["metadata"]["finalizers"], json!(["orphan"]), "{answer}"),
            _ => assert_eq!(answer["kind"], "Status", "{answer}"),
        }
    }
    let expect_gone = if policy == "Orphan" { DEPLOYMENTS } else { DEPLOYMENTS * 4 };
    let mut deleted = BTreeMap::new();
    let end = tokio::time::Instant::now() + T;
    while deleted.len() < expect_gone {
        assert!(tokio::time::Instant::now() < end, "{} of {expect_gone} deletions seen", deleted.len());
        for (resource, w) in watches.iter_mut() {
            while let Some(e) = w.next(Duration::from_millis(20)).await {
                if e["type"] == "DELETED" {
                    deleted.insert((resource.clone(), e["object"]["metadata"]["name"].as_str().unwrap().to_owned()), event_rv(&e));
                }
            }
        }
    }
    (router, deleted, shards, etcd)
}

#[tokio::test]
async fn background_deletion_removes_every_dependent_on_every_shard() {
    let (router, deleted, _shards, _etcd) = delete_all("Background").await;
    assert_eq!(deleted.len(), DEPLOYMENTS * 4);
    for path in ["/apis/apps/v1/namespaces/gc/deployments", "/apis/apps/v1/namespaces/gc/replicasets", "/api/v1/namespaces/gc/pods"] {
        assert_eq!(names(&router, path).await, Vec::<Value>::new(), "{path}");
    }
}

#[tokio::test]
async fn foreground_deletion_removes_dependents_before_their_owners() {
    let (router, deleted, _shards, _etcd) = delete_all("Foreground").await;
    for i in 0..DEPLOYMENTS {
        let d = deleted[&("deployments".to_owned(), format!("foreground-{i}"))];
        let rs = deleted[&("replicasets".to_owned(), format!("foreground-{i}-rs"))];
        for p in 0..2 {
            let pod = deleted[&("pods".to_owned(), format!("foreground-{i}-rs-{p}"))];
            assert!(pod < rs, "pod {i}/{p} deleted at {pod}, its ReplicaSet at {rs}");
        }
        assert!(rs < d, "ReplicaSet {i} deleted at {rs}, its Deployment at {d}");
    }
    assert_eq!(names(&router, "/api/v1/namespaces/gc/pods").await, Vec::<Value>::new());
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_without_the_reference() {
    let (router, deleted, _shards, _etcd) = delete_all("Orphan").await;
    assert!(deleted.keys().all(|(r, _)| r == "deployments"), "{deleted:?}");
    let sets = names(&router, "/apis/apps/v1/namespaces/gc/replicasets").await;
    assert_eq!(sets.len(), DEPLOYMENTS);
    for rs in &sets {
        assert!(rs["metadata"].get("ownerReferences").is_none(), "{rs}");
        assert!(rs["metadata"].get("finalizers").is_none(), "{rs}");
    }
    // The pods keep their own owner, which is still there.
    let pods = names(&router, "/api/v1/namespaces/gc/pods").await;
    assert_eq!(pods.len(), DEPLOYMENTS * 2);
    assert!(pods.iter().all(|p| p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"));
    // Nothing is collected later either: one more ReplicaSet deleted in the background takes
    // exactly its own pods.
    assert_eq!(router.delete("/apis/apps/v1/namespaces/gc/replicasets/orphan-0-rs", None).await.0, 200);
    wait_for(T, || async { names(&router, "/api/v1/namespaces/gc/pods").await.len() == DEPLOYMENTS * 2 - 2 }).await;
}

#[tokio::test]
async fn an_object_with_a_live_owner_loses_only_the_reference_to_a_gone_one() {
    let (_etcd, _shards, router) = routed_cluster(4).await;
    router.namespace(NS).await;
    let (_, a) = router.post("/api/v1/namespaces/gc/configmaps", &configmap("owner-a", json!({}))).await;
    let (_, b) = router.post("/api/v1/namespaces/gc/configmaps", &configmap("owner-b", json!({}))).await;
    let mut dep = configmap("dependent", json!({}));
    dep["metadata"]["ownerReferences"] = json!([owner_ref("ConfigMap", "v1", &a, false), owner_ref("ConfigMap", "v1", &b, false)]);
    assert_eq!(router.post("/api/v1/namespaces/gc/configmaps", &dep).await.0, 201);
    assert_eq!(router.delete("/api/v1/namespaces/gc/configmaps/owner-a", None).await.0, 200);
    wait_for(T, || async {
        let (_, d) = router.get("/api/v1/namespaces/gc/configmaps/dependent").await;
        d["metadata"]["ownerReferences"].as_array().is_some_and(|r| r.len() == 1 && r[0]["name"] == "owner-b")
    })
    .await;
    assert_eq!(router.delete("/api/v1/namespaces/gc/configmaps/owner-b", None).await.0, 200);
    wait_for(T, || async { router.get("/api/v1/namespaces/gc/configmaps/dependent").await.0 == 404 }).await;
    // A reference to an owner that never existed is dangling too.
    let mut orphan = configmap("never-owned", json!({}));
    orphan["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "00000000-0000-0000-0000-000000000000"}]);
    assert_eq!(router.post("/api/v1/namespaces/gc/configmaps", &orphan).await.0, 201);
    wait_for(T, || async { router.get("/api/v1/namespaces/gc/configmaps/never-owned").await.0 == 404 }).await;
    // An owner of a kind nobody serves leaves its dependent alone.
    let mut unknown = configmap("unknown-owner", json!({}));
    unknown["metadata"]["ownerReferences"] = json!([{"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "11111111-0000-0000-0000-000000000000"}]);
    assert_eq!(router.post("/api/v1/namespaces/gc/configmaps", &unknown).await.0, 201);
    // Proof the collector has passed since: a new dangling dependent goes, and the other stays.
    let mut probe = configmap("probe", json!({}));
    probe["metadata"]["ownerReferences"] = orphan["metadata"]["ownerReferences"].clone();
    assert_eq!(router.post("/api/v1/namespaces/gc/configmaps", &probe).await.0, 201);
    wait_for(T, || async { router.get("/api/v1/namespaces/gc/configmaps/probe").await.0 == 404 }).await;
    assert_eq!(router.get("/api/v1/namespaces/gc/configmaps/unknown-owner").await.0, 200);
}

/// Owners that many dependents on one shard name are read with their whole resource (RFC
/// 0014), and classified as when read one by one: a dependent of an owner deleted, or deleted
/// and made again under its name (another uid), goes; every other stays.
#[tokio::test]
async fn owners_read_with_their_resource_are_classified_as_owners_read_one_by_one() {
    // 200 owners over 2 shards: each shard's dependents name about 100, above the 64 that
    // makes a pass read the resource whole.
    const N: usize = 200;
    let (_etcd, _shards, router) = routed_cluster(2).await;
    router.namespace(NS).await;
    let path = "/api/v1/namespaces/gc/configmaps";
    let owners: Vec<Value> = stream::iter(0..N)
        .map(|i| {
            let r = &router;
            async move {
                let (code, o) = r.post(path, &configmap(&format!("owner-{i}"), json!({}))).await;
                assert_eq!(code, 201, "{o}");
                o
            }
        })
        .buffered(16)
        .collect()
        .await;
    let codes: Vec<(u16, Value)> = stream::iter(owners.iter().enumerate())
        .map(|(i, o)| {
            let r = &router;
            let mut d = configmap(&format!("dependent-{i}"), json!({}));
            d["metadata"]["ownerReferences"] = json!([owner_ref("ConfigMap", "v1", o, false)]);
            async move { r.post(path, &d).await }
        })
        .buffered(16)
        .collect()
        .await;
    assert!(codes.iter().all(|(code, _)| *code == 201), "{codes:?}");
    // Two owners go; a third goes and comes back with another uid.
    for i in 0..3 {
        assert_eq!(router.delete(&format!("{path}/owner-{i}"), None).await.0, 200);
    }
    assert_eq!(router.post(path, &configmap("owner-2", json!({}))).await.0, 201);
    wait_for(T, || async {
        for i in 0..3 {
            if router.get(&format!("{path}/dependent-{i}")).await.0 != 404 {
                return false;
            }
        }
        true
    })
    .await;
    // Proof of a whole pass since: a new dependent of an owner that never existed goes.
    let mut probe = configmap("probe", json!({}));
    probe["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "00000000-0000-0000-0000-000000000000"}]);
    assert_eq!(router.post(path, &probe).await.0, 201);
    wait_for(T, || async { router.get(&format!("{path}/probe")).await.0 == 404 }).await;
    let left: std::collections::BTreeSet<String> = names(&router, path).await.iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_owned()).filter(|n| n.starts_with("dependent-")).collect();
    let expected: std::collections::BTreeSet<String> = (3..N).map(|i| format!("dependent-{i}")).collect();
    assert_eq!(left, expected);
}

#[tokio::test]
async fn delete_options_are_validated_as_upstream_validates_them() {
    let (_etcd, _shards, router) = routed_cluster(4).await;
    router.namespace(NS).await;
    assert_eq!(router.post("/api/v1/namespaces/gc/configmaps", &configmap("c", json!({}))).await.0, 201);
    let (code, st) = router.delete("/api/v1/namespaces/gc/configmaps/c", Some(&json!({"propagationPolicy": "Sideways"}))).await;
    assert_eq!((code, st["reason"].as_str()), (422, Some("Invalid")), "{st}");
    assert_eq!(st["message"], "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\"");
    let (code, st) = router.delete("/api/v1/namespaces/gc/configmaps/c", Some(&json!({"propagationPolicy": "Orphan", "orphanDependents": true}))).await;
    assert_eq!(code, 422, "{st}");
    // The query's policy counts too; Foreground on an object with no dependents ends promptly.
    let (code, c) = router.send("DELETE", "/api/v1/namespaces/gc/configmaps/c?propagationPolicy=Foreground", "application/json", "").await;
    assert_eq!((code, &c["metadata"]["finalizers"]), (200, &json!(["foregroundDeletion"])), "{c}");
    wait_for(T, || async { router.get("/api/v1/namespaces/gc/configmaps/c").await.0 == 404 }).await;
}
