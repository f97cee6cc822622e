//! The NOSPACE drill through the local topology, as an operator meets it: `shard-router
//! --shards 2` over a store with an 8 MiB quota, filled through the router until the store
//! refuses; the alarm shows in the router's `/readyz` and in `shardctl status` while reads go
//! on; a shard killed meanwhile is restarted by the router but cannot announce its new address
//! (registering is a write) until `shardctl recover-space`; then writes reach both shards again,
//! every acknowledged write is in place, and a watch through the router, followed as an informer
//! follows one (resumed when it ends, relisted on 410), misses no acknowledged write.

mod common;

use common::{listening_ports, processes_with, send_signal, spawn_topology};
use serde_json::json;
use shardplane_testkit::*;
use std::time::Duration;

const QUOTA: u64 = 8 << 20;
const CM: &str = "/api/v1/namespaces/space/configmaps";

#[tokio::test]
async fn a_full_store_through_the_router_recovers_and_a_shard_restarted_meanwhile_serves_again() {
    let etcd = if embedded_store() { Etcd::start_embedded_with_quota(QUOTA).await } else { Etcd::start_process(&["--quota-backend-bytes", &QUOTA.to_string()]).await };
    let dir = std::env::temp_dir().join(format!("shardplane-space-{}", uuid::Uuid::new_v4()));
    let started = spawn_topology(&etcd.endpoint, 2, &dir.join("kubeconfig"));
    let r = TestShard::attach(started.url(), started.addr.parse().unwrap());
    wait_for(Duration::from_secs(60), || async { readyz(&r.url).await.0 == 200 }).await;
    wait_for(Duration::from_secs(10), || async { r.get("/api/v1/namespaces/default").await.0 == 200 }).await;
    r.namespace("space").await;
    let (code, small) = r.post(CM, &configmap("small", json!({}))).await;
    assert_eq!(code, 201, "{small}");
    let mut w = r.watch(&format!("{CM}?watch=1&resourceVersion={}", rv(&small))).await;

    // Fill it: one large object rewritten until the store refuses.
    let Filled { mut big, mut acknowledged } = fill_until_refused(&r, CM).await;
    // Where the operator looks: the router's /readyz and shardctl.
    let (code, text) = readyz(&r.url).await;
    assert_eq!(code, 500, "{text}");
    assert!(text.contains("[-]etcd-space failed: NOSPACE alarm raised"), "{text}");
    assert!(shardctl(&etcd.endpoint, &["status"]).await.contains("ALARM NOSPACE"));
    // Reads go on, on both shards.
    let (code, list) = r.get(CM).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 2);

    // A shard dies now; the router starts it again, on a new port it cannot announce: its
    // membership is a lease, and a lease grant is a write the alarm refuses.
    let (killed, _) = started.shards[0].clone();
    send_signal(killed, 9);
    let others: Vec<u32> = started.shards.iter().map(|(p, _)| *p).chain([started.process.0.id()]).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let restarted = 'found: loop {
        assert!(std::time::Instant::now() < deadline, "no restarted shard up within 30 s");
        if let Some(pid) = processes_with(&etcd.endpoint).into_iter().find(|p| !others.contains(p)) {
            for port in listening_ports(pid) {
                let url = format!("http://127.0.0.1:{port}");
                // Up, and seeing the alarm itself.
                if client().get(format!("{url}/readyz")).send().await.is_ok() && readyz(&url).await.1.contains("[-]etcd-space failed") {
                    break 'found url;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let storage = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await.unwrap();
    let registered = |members: &shardplane_storage::members::Members| members.shards.iter().any(|m| m.url == restarted);
    assert!(!registered(&storage.members().await.unwrap()), "a shard registered while the store refuses writes");

    // The documented way out.
    let out = shardctl(&etcd.endpoint, &["recover-space"]).await;
    assert!(out.contains("disarmed 1 alarm(s)"), "{out}");
    wait_for(Duration::from_secs(60), || async { readyz(&r.url).await.0 == 200 }).await;
    assert!(!shardctl(&etcd.endpoint, &["status"]).await.contains("ALARM"));
    wait_for(Duration::from_secs(30), || async { registered(&storage.members().await.unwrap()) }).await;
    // Writes reach both shards again: twenty names land on each of the two ranges.
    let names: Vec<String> = (0..20).map(|i| format!("after-{i}")).collect();
    wait_for(Duration::from_secs(60), || {
        let (names, r) = (names.clone(), &r);
        async move {
            let mut ok = true;
            for n in &names {
                let code = r.post(CM, &configmap(n, json!({}))).await.0;
                ok &= code == 201 || code == 409;
            }
            ok
        }
    })
    .await;
    let ranges: std::collections::BTreeSet<_> = names.iter().map(|n| shardplane_keyspace::HashRange::split_even(2).iter().position(|h| h.contains(shardplane_keyspace::placement_hash("", "configmaps", "space", n))).unwrap()).collect();
    assert_eq!(ranges.len(), 2, "the names cover both shards' ranges");
    big["data"]["n"] = json!("after");
    let (code, after) = r.put(&format!("{CM}/big"), &big).await;
    assert_eq!(code, 200, "{after}");
    acknowledged.push(rv(&after));
    // Nothing acknowledged is lost.
    let (code, got) = r.get(&format!("{CM}/small")).await;
    assert_eq!((code, rv(&got)), (200, rv(&small)));
    let (_, list) = r.get(CM).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 22, "{list}");
    // The watch held open across it all, followed as an informer follows one: resumed from the
    // last resourceVersion it showed whenever it ends (the router ends a client's watch when a
    // shard's stream breaks, RFC 0003); and when a resume is older than what `recover-space`
    // compacted, answered with 410 Expired (never silently), relisted, and watched again from
    // the list. Every acknowledged write of `big` is then seen as an event, in order, or is
    // in a relisted state that holds `big` at or past it: nothing is lost.
    let (mut seen, mut last, mut resumes, mut relisted_at) = (Vec::new(), rv(&small), 0, 0);
    while seen.last() != acknowledged.last() {
        match w.next_change(Duration::from_secs(30)).await {
            Some(e) if e["type"] == "ERROR" => {
                assert_eq!((e["object"]["code"].as_u64(), e["object"]["reason"].as_str()), (Some(410), Some("Expired")), "{e}");
                let (code, list) = r.get(CM).await;
                assert_eq!(code, 200, "{list}");
                let big_now = list["items"].as_array().unwrap().iter().find(|i| i["metadata"]["name"] == "big").map(rv).expect("big is listed");
                // The relisted state has every write of `big` up to its version there.
                relisted_at = big_now;
                let since = seen.last().copied().unwrap_or(0);
                seen.extend(acknowledged.iter().copied().filter(|a| *a <= big_now && *a > since));
                last = rv(&list);
                w = r.watch(&format!("{CM}?watch=1&resourceVersion={last}")).await;
            }
            Some(e) => {
                last = event_rv(&e);
                if e["object"]["metadata"]["name"] == "big" {
                    seen.push(last);
                }
            }
            None => {
                resumes += 1;
                assert!(resumes <= 5, "the watch ended {resumes} times; {} of {} writes of big seen", seen.len(), acknowledged.len());
                w = r.watch(&format!("{CM}?watch=1&resourceVersion={last}")).await;
            }
        }
    }
    assert_eq!(seen, acknowledged, "every acknowledged write, in order (relisted at {relisted_at})");
    let _ = std::fs::remove_dir_all(&dir);
}
