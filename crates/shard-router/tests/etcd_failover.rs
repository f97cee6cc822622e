//! What a replicated etcd does to a running control plane (issue #23, RFC 0016), with real
//! processes: a three-member etcd cluster with its data on disk (a slow disk needs one),
//! `shard-router --shards 4` given every member, writers and watchers through the router.
//! Meanwhile the etcd leader is killed with SIGKILL and started again; the new leader is frozen
//! (SIGSTOP: its connections stay open and nothing answers, as across a partition) for 20 s and
//! let go; then a follower's disk, and then the leader's, is slowed to 20 writes a second
//! (the blkio controller's throttle) for 15 s each.
//!
//! At the end every watcher's stream equals etcd's history of what it watches, with no 410 for
//! an RV the cluster still had; every acknowledged write is in that history; a LIST equals
//! etcd. Write availability is measured per fault: how long writes failed (the union of the
//! failed writes' spans), and the longest time one writer went without an acknowledged write
//! (a write that hangs counts too). Failing must last no longer than an etcd election; going
//! without a write, no longer than an election plus the detection of a silent member.

mod common;

use common::churn::{self, Watched, Writes};
use shardplane_storage::Storage;
use shardplane_testkit::*;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const WRITERS: usize = 4;
const WRITES_PER_SECOND_EACH: u64 = 25;
/// How long writes may fail in one fault: an etcd election (1 s election timeout with etcd's
/// defaults, and a few heartbeats), with room for a loaded 2-core machine.
const ELECTION: Duration = Duration::from_secs(3);
/// The longest one writer may go without an acknowledged write: an election for a killed
/// leader; for a silent one, the election plus the 3 s an attempt may take before it is tried
/// on another member (RFC 0016), with the same room.
const KILLED_LEADER_GAP: Duration = Duration::from_secs(5);
const FROZEN_LEADER_GAP: Duration = Duration::from_secs(8);
/// A slow disk: 20 writes a second (a healthy one takes hundreds to thousands).
const SLOW_DISK_WRITES_PER_SECOND: u32 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_watches_survive_the_leader_killed_and_a_member_frozen() {
    let mut cluster = EtcdCluster::start(3, &std::env::temp_dir(), &[]).await;
    let storage = Storage::connect(&cluster.endpoints).await.unwrap();
    let topology = common::Topology::start(&cluster.endpoints_flag(), 4, &["--bookmark-interval", "1"]).await;
    let router = topology.started.url();
    let r = &topology.router;
    r.namespace("failover").await;
    let (_, list) = r.get("/api/v1/namespaces/failover/configmaps").await;
    let start: u64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();

    // Watchers: the namespace, each writer's label, every namespace.
    let mut watchers: Vec<_> = (0..3).map(|_| Watched::new("/api/v1/namespaces/failover/configmaps".into(), None, Some("failover"), start)).collect();
    watchers.extend((0..WRITERS).map(|t| Watched::new(format!("/api/v1/namespaces/failover/configmaps?labelSelector=writer%3Dw{t}"), Some(format!("w{t}")), Some("failover"), start)));
    watchers.extend((0..2).map(|_| Watched::new("/api/v1/configmaps".into(), None, None, start)));
    let stop_watching = CancellationToken::new();
    let watch_tasks: Vec<_> = watchers.iter().map(|w| tokio::spawn(churn::watcher(vec![router.clone()], w.clone(), stop_watching.clone()))).collect();
    let stop_writing = CancellationToken::new();
    let writes = Writes::default();
    let writer_tasks: Vec<_> = (0..WRITERS).map(|t| tokio::spawn(churn::writer(router.clone(), "failover".into(), t, WRITES_PER_SECOND_EACH, writes.clone(), stop_writing.clone()))).collect();
    let began = Instant::now();
    wait_for(Duration::from_secs(30), || async { writes.acked().len() >= 50 }).await;

    // 1. The leader is killed, and started again 10 s later.
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let killed_at = Instant::now();
    cluster.kill(leader);
    eprintln!("failover: killed leader m{leader} at {:.1} s", began.elapsed().as_secs_f64());
    wait_for(Duration::from_secs(30), || async { writes.acked_since(killed_at + Duration::from_secs(1)) }).await;
    tokio::time::sleep_until((killed_at + Duration::from_secs(10)).into()).await;
    cluster.restart(leader);
    let new_leader = cluster.wait_for_leader(Duration::from_secs(60)).await;
    let killed_window = (killed_at, Instant::now());

    // 2. The new leader is frozen for 20 s (its peers elect another; whoever used it must
    //    notice it is silent and move), then let go.
    let frozen_at = Instant::now();
    cluster.freeze(new_leader);
    eprintln!("failover: froze leader m{new_leader} at {:.1} s", began.elapsed().as_secs_f64());
    tokio::time::sleep(Duration::from_secs(20)).await;
    cluster.thaw(new_leader);
    cluster.wait_for_leader(Duration::from_secs(60)).await;
    let frozen_window = (frozen_at, Instant::now());

    // 3. A follower's disk, then the leader's, slowed for 15 s each.
    let mut slow_windows = Vec::new();
    let leader = cluster.wait_for_leader(Duration::from_secs(60)).await;
    for (what, member) in [("follower", (leader + 1) % 3), ("leader", leader)] {
        let at = Instant::now();
        let slow = cluster.slow_disk(member, SLOW_DISK_WRITES_PER_SECOND);
        eprintln!("failover: slowed the {what} m{member}'s disk at {:.1} s", began.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_secs(15)).await;
        drop(slow);
        cluster.wait_for_leader(Duration::from_secs(60)).await;
        slow_windows.push((what, (at, Instant::now())));
    }

    // 4. Writes go on a little longer, then stop.
    let last_fault = Instant::now();
    wait_for(Duration::from_secs(30), || async { writes.acked_since(last_fault + Duration::from_secs(2)) }).await;
    stop_writing.cancel();
    for t in writer_tasks {
        t.await.unwrap();
    }
    let acked = writes.acked();
    let killed_gap = writes.longest_gap(killed_window.0, killed_window.1);
    let frozen_gap = writes.longest_gap(frozen_window.0, frozen_window.1);
    let killed_failed = writes.failures(killed_window.0, killed_window.1);
    let frozen_failed = writes.failures(frozen_window.0, frozen_window.1);
    eprintln!("failover: {} writes attempted, {} acknowledged", writes.attempted(), acked.len());
    for (sent, failed, answer) in writes.failed.lock().unwrap().iter() {
        eprintln!("failover: a write sent at {:.1} s failed {:.1} s later: {answer}", (*sent - began).as_secs_f64(), (*failed - *sent).as_secs_f64());
    }
    for (fault, (failed, failing), gap) in [("leader killed", killed_failed, killed_gap), ("leader frozen", frozen_failed, frozen_gap)] {
        eprintln!("failover: {fault}: {failed} writes failed over {:.2} s; longest a writer went without an acknowledged write {:.2} s", failing.as_secs_f64(), gap.as_secs_f64());
    }
    let mut slow_failures = Vec::new();
    let mut slow_follower_rate = None;
    for (what, (from, to)) in &slow_windows {
        let (failed, failing) = writes.failures(*from, *to);
        let acked_in = acked.iter().filter(|a| a.at > *from && a.at <= *to).count();
        eprintln!("failover: {what}'s disk slow: {acked_in} writes acknowledged, {failed} failed over {:.2} s; longest a writer went without an acknowledged write {:.2} s", failing.as_secs_f64(), writes.longest_gap(*from, *to).as_secs_f64());
        slow_failures.push((*what, failing));
        if *what == "follower" {
            // A follower's slow disk slows only the processes using it, and they move on: the
            // writers keep (a third of) their rate. A slow leader slows etcd itself.
            let expected = (WRITERS as u64 * WRITES_PER_SECOND_EACH) as f64 * (*to - *from).as_secs_f64();
            slow_follower_rate = Some((acked_in, expected));
        }
    }

    churn::check_against_etcd("failover", &storage, r, "failover", start, &watchers, watch_tasks, stop_watching, &acked, Duration::from_secs(60)).await;
    assert!(killed_failed.1 <= ELECTION, "writes failed for {:?} when the leader was killed ({} writes)", killed_failed.1, killed_failed.0);
    assert!(frozen_failed.1 <= ELECTION, "writes failed for {:?} while the leader was frozen ({} writes)", frozen_failed.1, frozen_failed.0);
    let (acked_in, expected) = slow_follower_rate.unwrap();
    assert!(acked_in as f64 >= expected / 3.0, "with a follower's disk slow only {acked_in} writes were acknowledged of {expected:.0} sent at the writers' rate");
    for (what, failing) in slow_failures {
        assert!(failing <= ELECTION, "writes failed for {failing:?} while the {what}'s disk was slow");
    }
    assert!(killed_gap <= KILLED_LEADER_GAP, "a writer went {killed_gap:?} without a write when the leader was killed");
    assert!(frozen_gap <= FROZEN_LEADER_GAP, "a writer went {frozen_gap:?} without a write while the leader was frozen");
}
