//! The garbage collector under a shard's SIGKILL (RFC 0014), with real processes: `shard-router`
//! over four shard processes on real etcd, 300 Deployments each with a ReplicaSet and two Pods
//! (owned as the controllers own them), deleted 8 at a time, 100 with each propagation policy,
//! one shard process killed with SIGKILL part-way (the router starts it again). The collector
//! keeps nothing between passes, so the restarted shard's first passes finish what the killed
//! one left: within the stated bound, Background and Foreground leave nothing of their
//! families, and Orphan leaves each ReplicaSet with no owner and its Pods untouched.
//!
//! The bound is in passes, read from each shard's metrics: a pass rests nine times its looking
//! (RFC 0014), so on a loaded machine its seconds stretch while the passes a cascade needs do
//! not (a three-step foreground cascade needs a few of each shard's).

mod common;

use common::{listening_ports, processes_with, send_signal, until_definite, Topology};
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};
use shardplane_testkit::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const NS: &str = "gc";
const PER_POLICY: usize = 100;
const POLICIES: [&str; 3] = ["Background", "Foreground", "Orphan"];
const CLIENTS: usize = 8;
const KILL_AFTER: usize = 60;
/// Bound stated in RFC 0014: done once every shard has made this many passes after the last
/// delete (a foreground cascade needs four in a row, over two shards; a lost compare-and-swap
/// waits for the next).
const SETTLED_WITHIN_PASSES: u64 = 8;
/// However the passes go, the test gives up after this long.
const GIVE_UP_AFTER: Duration = Duration::from_secs(300);

/// Garbage-collector passes made so far by each shard process running on `etcd`, by pid, read
/// from its metrics (`shardplane_garbage_collector_pass_duration_seconds_count`). A restarted
/// shard is a new pid with its own count.
async fn passes(etcd: &str) -> BTreeMap<u32, u64> {
    let mut counts = BTreeMap::new();
    for pid in processes_with(etcd) {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !cmdline.split(|b| *b == 0).any(|arg| arg == b"shard") {
            continue; // the router
        }
        for port in listening_ports(pid) {
            let Ok(answer) = client().get(format!("http://127.0.0.1:{port}/metrics")).send().await else { continue };
            let text = answer.text().await.unwrap_or_default();
            if let Some(n) = text.lines().find_map(|l| l.strip_prefix("shardplane_garbage_collector_pass_duration_seconds_count ")) {
                counts.insert(pid, n.trim().parse().unwrap());
            }
        }
    }
    counts
}

/// Passes each shard process made since `before` (all of a restarted one's).
fn passes_since(now: &BTreeMap<u32, u64>, before: &BTreeMap<u32, u64>) -> Vec<u64> {
    now.iter().map(|(pid, n)| n - before.get(pid).copied().unwrap_or(0)).collect()
}

async fn items(router: &TestShard, path: &str) -> Option<Vec<Value>> {
    let (code, list) = router.get(path).await;
    (code == 200).then(|| list["items"].as_array().cloned().unwrap_or_default())
}

/// Whether what is left is exactly upstream's: nothing of the Background and Foreground
/// families; of the Orphan ones, each ReplicaSet without owners and both its Pods.
async fn settled(router: &TestShard) -> Result<(), String> {
    let (Some(deployments), Some(sets), Some(pods)) = (
        items(router, &format!("/apis/apps/v1/namespaces/{NS}/deployments")).await,
        items(router, &format!("/apis/apps/v1/namespaces/{NS}/replicasets")).await,
        items(router, &format!("/api/v1/namespaces/{NS}/pods")).await,
    ) else {
        return Err("a list failed".into());
    };
    let name = |o: &Value| o["metadata"]["name"].as_str().unwrap().to_owned();
    if !deployments.is_empty() {
        return Err(format!("{} deployments left", deployments.len()));
    }
    let want_sets: BTreeSet<String> = (0..PER_POLICY).map(|i| format!("orphan-{i}-rs")).collect();
    let have_sets: BTreeSet<String> = sets.iter().map(name).collect();
    if have_sets != want_sets {
        return Err(format!("replica sets {have_sets:?}"));
    }
    if let Some(owned) = sets.iter().find(|s| s["metadata"].get("ownerReferences").is_some() || s["metadata"].get("finalizers").is_some()) {
        return Err(format!("a replica set still owned: {owned}"));
    }
    let want_pods: BTreeSet<String> = (0..PER_POLICY).flat_map(|i| (0..2).map(move |j| format!("orphan-{i}-rs-{j}"))).collect();
    let have_pods: BTreeSet<String> = pods.iter().map(name).collect();
    if have_pods != want_pods {
        return Err(format!("{} pods left, {} wanted", have_pods.len(), want_pods.len()));
    }
    Ok(())
}

#[tokio::test]
async fn a_shard_killed_mid_deletes_leaves_upstreams_objects_after_the_collector_runs() {
    let etcd = Etcd::start().await;
    let topology = Topology::start(&etcd.endpoint, 4, &[]).await;
    let (started, router) = (&topology.started, &topology.router);
    router.namespace(NS).await;
    let all: Vec<(String, &str)> = POLICIES.iter().flat_map(|p| (0..PER_POLICY).map(move |i| (format!("{}-{i}", p.to_lowercase()), *p))).collect();
    stream::iter(&all).for_each_concurrent(CLIENTS, |(name, _)| async move { deployment_family(router, NS, name).await; }).await;

    let victim = started.shards[3].0;
    let (answered, killed, retried) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
    stream::iter(&all)
        .for_each_concurrent(CLIENTS, |(name, policy)| {
            let (answered, killed, retried) = (&answered, &killed, &retried);
            async move {
                let body = json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy});
                let path = format!("/apis/apps/v1/namespaces/{NS}/deployments/{name}");
                // 404: a delete whose answer was lost with the shard went through.
                until_definite(name, retried, &[200, 404], || router.delete(&path, Some(&body))).await;
                if answered.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER && killed.fetch_add(1, Ordering::SeqCst) == 0 {
                    send_signal(victim, 9);
                }
            }
        })
        .await;
    assert_eq!(killed.load(Ordering::SeqCst), 1, "the shard was killed");
    let since = Instant::now();
    let at_last_delete = passes(&etcd.endpoint).await;
    let mut last = settled(router).await;
    while let Err(why) = &last {
        let now = passes(&etcd.endpoint).await;
        let fewest = passes_since(&now, &at_last_delete).into_iter().min();
        assert!(now.len() < 4 || fewest < Some(SETTLED_WITHIN_PASSES), "not settled within {SETTLED_WITHIN_PASSES} passes of every shard ({now:?} against {at_last_delete:?}): {why}");
        assert!(since.elapsed() < GIVE_UP_AFTER, "not settled within {GIVE_UP_AFTER:?} ({now:?} passes against {at_last_delete:?}): {why}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        last = settled(router).await;
    }
    let made = passes_since(&passes(&etcd.endpoint).await, &at_last_delete);
    eprintln!("deletes retried while the shard was down: {}; settled {:?} after the last delete, after {made:?} passes of the shards", retried.load(Ordering::SeqCst), since.elapsed());
}
