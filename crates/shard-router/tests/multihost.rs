//! Beyond one machine (issue #23, RFC 0016): seven hosts, each a network namespace with its own
//! address (`Hosts`), and the test process as the client host. Three hosts run one etcd member
//! each; two run two shard processes each; two run a router each. Writers and watchers on the
//! client host use both routers, moving to the other when theirs is gone.
//!
//! During the run: the etcd leader is killed with SIGKILL and started again; the new leader's
//! host is cut off from the network for 20 s (its link down: connections to it hang, as across
//! a real partition) and joined again; a shard host's two processes are killed and started
//! again; one router is killed. At the end every watcher's stream equals etcd's history for
//! what it watches (no 410 for an RV the cluster still has), every acknowledged write is in that
//! history, a LIST through the surviving router equals etcd, and write availability is reported
//! per fault: how long writes failed, and the longest a writer went without an acknowledged
//! write.

mod common;

use common::churn::{self, Watched, Writes};
use common::Started;
use shardplane_keyspace::HashRange;
use shardplane_storage::Storage;
use shardplane_testkit::*;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const WRITERS: usize = 4;
const WRITES_PER_SECOND_EACH: u64 = 20;
/// Hosts: 0–2 etcd members, 3–4 shards, 5–6 routers.
const ETCD_HOSTS: [usize; 3] = [0, 1, 2];
const SHARD_HOSTS: [usize; 2] = [3, 4];
const ROUTER_HOSTS: [usize; 2] = [5, 6];
/// How long writes may fail in a fault of the store: an etcd election, with room for a loaded
/// 2-core machine (RFC 0016).
const ELECTION: Duration = Duration::from_secs(3);
/// The longest a writer may go without a write while the store fails: an election plus the 3 s
/// an attempt may take before it is tried on another member (RFC 0016), with the same room.
const STORE_FAULT_GAP: Duration = Duration::from_secs(8);

/// A shard process on `host`, serving `range` on port 6443 + `slot`.
fn shard(host: &Host, etcd: &str, id: &str, range: HashRange, slot: u16) -> Started {
    let mut c = host.command(common::binary());
    let listen = format!("{}:{}", host.addr, 6443 + slot);
    c.args(["shard", "--insecure-plain-http", "--etcd-endpoints", etcd, "--listen", &listen, "--id", id, "--bookmark-interval", "1", "--member-ttl-seconds", "10", "--range", &range.to_string()]);
    common::start(c)
}

/// A router on `host` over `shards`.
fn router(host: &Host, etcd: &str, shards: &[String], kubeconfig: &std::path::Path) -> Started {
    let mut c = host.command(common::binary());
    let listen = format!("{}:6443", host.addr);
    c.args(["--etcd-endpoints", etcd, "--shard-urls", &shards.join(","), "--listen", &listen, "--bookmark-interval", "1", "--kubeconfig", kubeconfig.to_str().unwrap(), "--insecure-plain-http"]);
    common::start(c)
}

/// What one fault did to the writes.
struct Fault {
    what: &'static str,
    window: (Instant, Instant),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_watches_survive_etcd_shard_and_router_failures_across_hosts() {
    let hosts = Hosts::create(7);
    let etcd_hosts: Vec<Host> = ETCD_HOSTS.iter().map(|i| hosts.host(*i)).collect();
    let mut cluster = EtcdCluster::start_on(&etcd_hosts, std::path::Path::new("/dev/shm"), &[]).await;
    let etcd = cluster.endpoints_flag();
    let storage = Storage::connect(&cluster.endpoints).await.unwrap();

    // Four shards, two per shard host.
    let ranges = HashRange::split_even(4);
    let ids = ["s0", "s1", "s2", "s3"];
    let place = |i: usize| hosts.host(SHARD_HOSTS[i / 2]);
    let mut shards: Vec<Started> = (0..4).map(|i| shard(&place(i), &etcd, ids[i], ranges[i], i as u16)).collect();
    let shard_urls: Vec<String> = shards.iter().map(Started::url).collect();
    let dir = std::env::temp_dir().join(format!("shardplane-multihost-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut routers: Vec<Option<Started>> = ROUTER_HOSTS.iter().enumerate().map(|(i, h)| Some(router(&hosts.host(*h), &etcd, &shard_urls, &dir.join(format!("kubeconfig-{i}"))))).collect();
    let router_urls: Vec<String> = routers.iter().map(|r| r.as_ref().unwrap().url()).collect();
    let r = TestShard::attach(router_urls[1].clone(), "127.0.0.1:1".parse().unwrap());
    for url in &router_urls {
        let each = TestShard::attach(url.clone(), "127.0.0.1:1".parse().unwrap());
        wait_for(Duration::from_secs(60), || async { each.get("/api/v1/namespaces/default").await.0 == 200 }).await;
    }
    r.namespace("hosts").await;
    let (_, list) = r.get("/api/v1/namespaces/hosts/configmaps").await;
    let start: u64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();

    // Watchers and writers on the client host; half start on each router.
    let via = |i: usize| {
        let mut v = router_urls.clone();
        v.rotate_left(i % 2);
        v
    };
    let mut watchers: Vec<_> = (0..4).map(|_| Watched::new("/api/v1/namespaces/hosts/configmaps".into(), None, Some("hosts"), start)).collect();
    watchers.extend((0..WRITERS).map(|t| Watched::new(format!("/api/v1/namespaces/hosts/configmaps?labelSelector=writer%3Dw{t}"), Some(format!("w{t}")), Some("hosts"), start)));
    watchers.extend((0..2).map(|_| Watched::new("/api/v1/configmaps".into(), None, None, start)));
    let stop_watching = CancellationToken::new();
    let watch_tasks: Vec<_> = watchers.iter().enumerate().map(|(i, w)| tokio::spawn(churn::watcher(via(i), w.clone(), stop_watching.clone()))).collect();
    let stop_writing = CancellationToken::new();
    let writes = Writes::default();
    let writer_tasks: Vec<_> = (0..WRITERS).map(|t| tokio::spawn(churn::writer_via(via(t), "hosts".into(), t, WRITES_PER_SECOND_EACH, writes.clone(), stop_writing.clone()))).collect();
    let began = Instant::now();
    let at = || format!("{:.1} s", began.elapsed().as_secs_f64());
    wait_for(Duration::from_secs(30), || async { writes.acked().len() >= 50 }).await;
    let mut faults = Vec::new();

    // 1. The etcd leader is killed, and started again 10 s later.
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let t = Instant::now();
    cluster.kill(leader);
    eprintln!("multihost: {}: killed the etcd leader m{leader}", at());
    tokio::time::sleep(Duration::from_secs(10)).await;
    cluster.restart(leader);
    let leader = cluster.wait_for_leader(Duration::from_secs(60)).await;
    faults.push(Fault { what: "etcd leader killed", window: (t, Instant::now()) });

    // 2. The new leader's host is cut off for 20 s.
    let cut = ETCD_HOSTS[leader];
    let t = Instant::now();
    hosts.partition(cut);
    eprintln!("multihost: {}: cut off the etcd leader m{leader}'s host", at());
    tokio::time::sleep(Duration::from_secs(20)).await;
    hosts.heal(cut);
    cluster.wait_for_leader(Duration::from_secs(60)).await;
    faults.push(Fault { what: "etcd leader partitioned 20 s", window: (t, Instant::now()) });

    // 3. The first shard host's processes are killed and started again.
    let t = Instant::now();
    for s in shards.iter_mut().take(2) {
        let _ = s.process.0.kill();
        let _ = s.process.0.wait();
    }
    eprintln!("multihost: {}: killed shards s0 and s1 on their host", at());
    for i in 0..2 {
        shards[i] = shard(&place(i), &etcd, ids[i], ranges[i], i as u16);
    }
    for s in shards.iter().take(2) {
        let url = s.url();
        wait_for(Duration::from_secs(60), || async { readyz(&url).await.0 == 200 }).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    faults.push(Fault { what: "shard host restarted", window: (t, Instant::now()) });

    // 4. The first router is killed; its clients go to the second.
    let t = Instant::now();
    drop(routers[0].take());
    eprintln!("multihost: {}: killed router r0", at());
    tokio::time::sleep(Duration::from_secs(5)).await;
    faults.push(Fault { what: "router killed", window: (t, Instant::now()) });

    stop_writing.cancel();
    for t in writer_tasks {
        t.await.unwrap();
    }
    let acked = writes.acked();
    eprintln!("multihost: {} writes attempted, {} acknowledged", writes.attempted(), acked.len());
    let mut report = Vec::new();
    for f in &faults {
        let (failed, failing) = writes.failures(f.window.0, f.window.1);
        let gap = writes.longest_gap(f.window.0, f.window.1);
        eprintln!("multihost: {}: {failed} writes failed over {:.2} s; longest a writer went without an acknowledged write {:.2} s", f.what, failing.as_secs_f64(), gap.as_secs_f64());
        report.push((f.what, failing, gap));
    }

    churn::check_against_etcd("multihost", &storage, &r, "hosts", start, &watchers, watch_tasks, stop_watching, &acked, Duration::from_secs(90)).await;
    for (what, failing, gap) in report.iter().take(2) {
        assert!(*failing <= ELECTION, "{what}: writes failed for {failing:?}");
        assert!(*gap <= STORE_FAULT_GAP, "{what}: a writer went {gap:?} without a write");
    }
    drop(shards);
    let _ = std::fs::remove_dir_all(&dir);
}
