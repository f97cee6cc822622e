//! The storage contract (issue #8, RFC 0008) with two real stores: a built-in resource
//! (ConfigMaps) and a custom one (AgentSessions, applied with kubectl from
//! `deploy/examples/agent-sessions/`) live on a second etcd, everything else on the main one. Runs
//! against one shard or, with `SHARDPLANE_ROUTER_SHARDS=K` as CI runs it, a router over K shards.
//!
//! The second store starts a thousand revisions ahead of the main one, so a resourceVersion
//! says which store it came from.


use shardplane_testkit::*;
use serde_json::json;
use shardplane_keyspace::{etcd_layout, HashRange, ObjectKey, RangeSet};
use shardplane_shard::ShardConfig;
use shardplane_storage::{Storage, StorageContract};
use std::time::Duration;

const GROUP: &str = "agents.shardplane.dev";
/// How far ahead of the main store the second one starts.
const AHEAD: u64 = 1000;


/// The object's key in etcd.
fn key(group: &str, plural: &str, ns: &str, name: &str) -> Vec<u8> {
    etcd_layout::object_key(&ObjectKey::new(group, plural, ns, name)).into_bytes()
}

/// How many keys of `group`/`plural` a store holds.
async fn count(store: &Storage, group: &str, plural: &str) -> usize {
    let (start, end) = etcd_layout::range_keys(group, plural, HashRange::FULL);
    store.list_keys(&start, &end).await.unwrap().len()
}

#[tokio::test]
async fn resources_on_their_own_etcd_take_its_revisions_and_are_cleaned_up_there() {
    let main_etcd = Etcd::start().await;
    let own_etcd = Etcd::start().await;
    let main = Storage::connect(std::slice::from_ref(&main_etcd.endpoint)).await.unwrap();
    let own = Storage::connect(std::slice::from_ref(&own_etcd.endpoint)).await.unwrap();
    for i in 0..AHEAD {
        own.put(format!("/elsewhere/{i}").as_bytes(), vec![]).await.unwrap();
    }
    let contract = StorageContract::parse(&json!({"resources": [
        {"group": "", "resource": "configmaps", "endpoints": [own_etcd.endpoint]},
        {"group": GROUP, "resource": "agentsessions", "endpoints": [own_etcd.endpoint]},
    ]}).to_string()).unwrap();
    let s = TestShard::start(ShardConfig { storage_contract: contract, ..test_config(&main_etcd, RangeSet::full()) }).await;
    s.namespace("contract").await;

    // The example CRD, applied with kubectl: the CRD itself stays on the main store.
    let k = Kubectl { bin: kubectl_path("1.33"), server: s.url.clone(), home: tempdir::Dir::new() };
    let crd_file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/examples/agent-sessions/crd.yaml");
    tokio::task::spawn_blocking(move || {
        k.ok(&["apply", "-f", crd_file], None);
        k.ok(&["wait", "--for=condition=Established", &format!("crd/agentsessions.{GROUP}"), "--timeout=20s"], None);
    })
    .await
    .unwrap();
    assert_eq!(count(&main, "apiextensions.k8s.io", "customresourcedefinitions").await, 1);

    // Writes go to the resource's own store, and their resourceVersions are its revisions.
    let sessions = format!("/apis/{GROUP}/v1/namespaces/contract/agentsessions");
    let configmaps = "/api/v1/namespaces/contract/configmaps";
    let mut newest = 0;
    for i in 0..12 {
        let (code, created) = s.post(&sessions, &json!({"apiVersion": format!("{GROUP}/v1"), "kind": "AgentSession", "metadata": {"name": format!("s{i}")}, "spec": {"agent": "coder", "phase": "Running"}})).await;
        assert_eq!(code, 201, "{created}");
        let (stored, _) = own.get(&key(GROUP, "agentsessions", "contract", &format!("s{i}"))).await.unwrap();
        assert_eq!(stored.expect("on its own store").mod_revision, rv(&created), "the RV is the own store's revision");
        assert!(rv(&created) > AHEAD, "{created}");
        let (code, cm) = s.post(configmaps, &configmap(&format!("c{i}"), json!({"n": i.to_string()}))).await;
        assert_eq!(code, 201, "{cm}");
        let (stored, _) = own.get(&key("", "configmaps", "contract", &format!("c{i}"))).await.unwrap();
        assert_eq!(stored.expect("on its own store").mod_revision, rv(&cm));
        newest = newest.max(rv(&created)).max(rv(&cm));
    }
    assert_eq!(count(&main, GROUP, "agentsessions").await + count(&main, "", "configmaps").await, 0, "nothing of them on the main store");
    assert_eq!(count(&own, GROUP, "agentsessions").await, 12);
    // A resource the contract does not name stays on the main store, with its revisions.
    let (code, secret) = s.post("/api/v1/namespaces/contract/secrets", &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "plain"}})).await;
    assert_eq!(code, 201, "{secret}");
    let (stored, main_rev) = main.get(&key("", "secrets", "contract", "plain")).await.unwrap();
    assert_eq!(stored.expect("on the main store").mod_revision, rv(&secret));
    assert!(main_rev < AHEAD, "the main store is far behind the own one ({main_rev})");

    // A list reads at the own store's revision: every object, and an RV no older than any of them.
    let (code, list) = s.get(&sessions).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 12);
    let list_rv: u64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert!(list_rv >= newest && list_rv <= own.current_revision().await.unwrap(), "list RV {list_rv}, newest write {newest}");
    // Paged, at that exact revision, through continue tokens.
    let (code, page) = s.get(&format!("{sessions}?limit=5&resourceVersion={list_rv}&resourceVersionMatch=Exact")).await;
    assert_eq!(code, 200, "{page}");
    assert_eq!((page["items"].as_array().unwrap().len(), page["metadata"]["resourceVersion"].as_str()), (5, Some(list_rv.to_string().as_str())));
    let token = page["metadata"]["continue"].as_str().expect("more pages").to_owned();
    let (code, rest) = s.get(&format!("{sessions}?limit=20&continue={token}")).await;
    assert_eq!((code, rest["items"].as_array().map(Vec::len)), (200, Some(7)), "{rest}");

    // A watch from the list's RV sees the next change, at the own store's revision.
    let mut w = s.watch(&format!("{sessions}?watch=true&resourceVersion={list_rv}")).await;
    let (code, patched) = s.send("PATCH", &format!("{sessions}/s3"), "application/merge-patch+json", r#"{"spec":{"phase":"Suspended"}}"#).await;
    assert_eq!(code, 200, "{patched}");
    let event = w.next_change(Duration::from_secs(10)).await.expect("an event");
    assert_eq!((event["type"].as_str(), event["object"]["spec"]["phase"].as_str()), (Some("MODIFIED"), Some("Suspended")), "{event}");
    assert_eq!(event_rv(&event), rv(&patched));
    let (stored, _) = own.get(&key(GROUP, "agentsessions", "contract", "s3")).await.unwrap();
    assert_eq!(stored.unwrap().mod_revision, rv(&patched));
    // A GET after the write reads it (a consistent read against the own store).
    let (_, got) = s.get(&format!("{sessions}/s3")).await;
    assert_eq!((got["spec"]["phase"].as_str(), rv(&got)), (Some("Suspended"), rv(&patched)));

    // Deleting the CRD deletes its objects from the own store, then the CRD from the main one.
    let (code, deleting) = s.delete(&format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/agentsessions.{GROUP}"), None).await;
    assert_eq!(code, 200, "{deleting}");
    wait_for(Duration::from_secs(20), || async { count(&own, GROUP, "agentsessions").await == 0 && count(&main, "apiextensions.k8s.io", "customresourcedefinitions").await == 0 }).await;

    // Deleting the namespace deletes its ConfigMaps from the own store, and then the namespace.
    let (code, _) = s.delete("/api/v1/namespaces/contract", None).await;
    assert_eq!(code, 200);
    wait_for(Duration::from_secs(20), || async { count(&own, "", "configmaps").await == 0 && s.get("/api/v1/namespaces/contract").await.0 == 404 }).await;
    assert_eq!(count(&main, "", "secrets").await, 0, "the namespace's secret went from the main store");
}

#[tokio::test]
async fn a_storage_contract_that_cannot_be_followed_is_refused_with_the_reason() {
    let dir = tempdir::Dir::new();
    let path = dir.0.join("contract.json");
    std::fs::write(&path, r#"{"resources": [{"group": "", "resource": "configmaps", "endpoints": []}]}"#).unwrap();
    let out = std::process::Command::new(workspace_binary("shard-server")).args(["--standalone", "--insecure-plain-http", "--storage-config"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--storage-config") && err.contains("configmaps") && err.contains("needs at least one etcd endpoint"), "{err}");
}
