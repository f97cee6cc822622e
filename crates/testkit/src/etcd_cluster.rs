//! A real etcd cluster of several members on loopback, for what one etcd process cannot show:
//! the cost of the consensus commit (each write replicated to a quorum and fsynced by each
//! member) in benchmarks, and a member's loss in tests. Each member is its own etcd 3.5
//! process with its own data directory, so a caller can hold each to its own CPU budget or
//! kill one.

use crate::etcd::{free_port, member_command};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// The members of one etcd cluster; every member is killed and its data removed when dropped.
pub struct EtcdCluster {
    members: Vec<Child>,
    dir: PathBuf,
    /// Each member's client URL, in member order.
    pub endpoints: Vec<String>,
}

impl EtcdCluster {
    /// Starts `n` members with their data under `base` (a directory on a real disk makes every
    /// member fsync as in production; tmpfs does not) and waits until the cluster has a leader
    /// and answers through every member. `extra` flags go to every member. Free ports are found
    /// by binding port 0 and releasing it, so another process can take one first: when a member
    /// exits at start, the whole cluster starts again on fresh ports.
    pub async fn start(n: usize, base: &Path, extra: &[&str]) -> Self {
        assert!(n >= 1, "a cluster has at least one member");
        for _attempt in 0..5 {
            if let Some(cluster) = Self::try_start(n, base, extra).await {
                return cluster;
            }
        }
        panic!("an etcd cluster of {n} did not start in 5 attempts");
    }

    async fn try_start(n: usize, base: &Path, extra: &[&str]) -> Option<Self> {
        let dir = base.join(format!("shardplane-etcd-cluster-{}", uuid::Uuid::new_v4()));
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let name = |i: usize| format!("m{i}");
        let initial: Vec<String> = ports.iter().enumerate().map(|(i, (_, peer))| format!("{}=http://127.0.0.1:{peer}", name(i))).collect();
        let initial = initial.join(",");
        let endpoints: Vec<String> = ports.iter().map(|(client, _)| format!("http://127.0.0.1:{client}")).collect();
        let mut cluster = Self { members: Vec::new(), dir, endpoints };
        for (i, (_, peer)) in ports.iter().enumerate() {
            let endpoint = &cluster.endpoints[i];
            let peer_url = format!("http://127.0.0.1:{peer}");
            let token = cluster.dir.file_name().unwrap().to_str().unwrap().to_owned();
            let flags: Vec<&str> = ["--initial-cluster-state", "new", "--initial-cluster-token", &token].into_iter().chain(extra.iter().copied()).collect();
            let child = member_command(&name(i), &cluster.dir.join(name(i)), endpoint, &peer_url, &initial, &flags).spawn().expect("spawn etcd");
            cluster.members.push(child);
        }
        // Members wait for each other to elect a leader; a write through each one proves it.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut ready = vec![false; n];
        while ready.iter().any(|r| !r) {
            if cluster.members.iter_mut().any(|c| c.try_wait().ok().flatten().is_some()) {
                return None; // a member exited: most likely a port taken meanwhile; Drop cleans up
            }
            for (i, endpoint) in cluster.endpoints.iter().enumerate() {
                if !ready[i]
                    && let Ok(s) = shardplane_storage::Storage::connect(std::slice::from_ref(endpoint)).await
                    && s.current_revision().await.is_ok()
                {
                    ready[i] = true;
                }
            }
            assert!(Instant::now() < deadline, "the etcd cluster did not answer within 60 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some(cluster)
    }

    /// The client URLs joined as `--etcd-endpoints` takes them.
    pub fn endpoints_flag(&self) -> String {
        self.endpoints.join(",")
    }

    /// Each member's process id, in member order.
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().map(Child::id).collect()
    }

    /// Kills member `i` with SIGKILL and waits for it to exit (its data stays).
    pub fn kill(&mut self, i: usize) {
        let _ = self.members[i].kill();
        let _ = self.members[i].wait();
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for child in &mut self.members {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
