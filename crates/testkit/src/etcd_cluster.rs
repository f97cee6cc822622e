//! A real etcd cluster of several members on loopback, for what one etcd process cannot show:
//! the cost of the consensus commit (each write replicated to a quorum and fsynced by each
//! member) in benchmarks, and a member's loss in tests. Each member is its own etcd 3.5
//! process with its own data directory, so a caller can hold each to its own CPU budget or
//! kill one.

use crate::etcd::{etcd_binary, free_port, member_command};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// The members of one etcd cluster; every member is killed and its data removed when dropped.
pub struct EtcdCluster {
    members: Vec<Child>,
    /// Each member's whole command line, to start it again on its data (see
    /// [`EtcdCluster::restart`]).
    commands: Vec<Vec<String>>,
    /// `name=peer-url,…` of every member, and each member's peer URL.
    initial: String,
    peers: Vec<String>,
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

    /// Starts one member on each of `hosts` (client port 2379, peer port 2380 at the host's
    /// address, as a member per machine runs), with their data under `base`, and waits as
    /// [`EtcdCluster::start`] does.
    pub async fn start_on(hosts: &[crate::Host], base: &Path, extra: &[&str]) -> Self {
        let places = hosts.iter().map(|h| Place { client: format!("http://{}:2379", h.addr), peer: format!("http://{}:2380", h.addr), namespace: Some(h.namespace.clone()) }).collect();
        Self::try_start_at(places, base, extra).await.expect("an etcd cluster on the hosts started")
    }

    async fn try_start(n: usize, base: &Path, extra: &[&str]) -> Option<Self> {
        let places = (0..n).map(|_| Place { client: format!("http://127.0.0.1:{}", free_port()), peer: format!("http://127.0.0.1:{}", free_port()), namespace: None }).collect();
        Self::try_start_at(places, base, extra).await
    }

    async fn try_start_at(places: Vec<Place>, base: &Path, extra: &[&str]) -> Option<Self> {
        let n = places.len();
        let dir = base.join(format!("shardplane-etcd-cluster-{}", uuid::Uuid::new_v4()));
        let name = |i: usize| format!("m{i}");
        let initial: Vec<String> = places.iter().enumerate().map(|(i, p)| format!("{}={}", name(i), p.peer)).collect();
        let initial = initial.join(",");
        let endpoints: Vec<String> = places.iter().map(|p| p.client.clone()).collect();
        let peers = places.iter().map(|p| p.peer.clone()).collect();
        let mut cluster = Self { members: Vec::new(), commands: Vec::new(), initial: initial.clone(), peers, dir, endpoints };
        for (i, place) in places.iter().enumerate() {
            let token = cluster.dir.file_name().unwrap().to_str().unwrap().to_owned();
            let flags: Vec<&str> = ["--initial-cluster-state", "new", "--initial-cluster-token", &token].into_iter().chain(extra.iter().copied()).collect();
            let member = member_command(&name(i), &cluster.dir.join(name(i)), &place.client, &place.peer, &initial, &flags);
            // The whole command line, run through `ip netns exec` on a host.
            let mut argv: Vec<String> = place.namespace.iter().flat_map(|ns| ["ip".to_owned(), "netns".into(), "exec".into(), ns.clone()]).collect();
            argv.push(member.get_program().to_string_lossy().into_owned());
            argv.extend(member.get_args().map(|a| a.to_string_lossy().into_owned()));
            cluster.members.push(launch(&argv));
            cluster.commands.push(argv);
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

    /// Starts member `i` again on its data, as it was started (after [`EtcdCluster::kill`]):
    /// it rejoins the cluster and catches up from the leader.
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].try_wait().ok().flatten().is_some(), "member {i} is still running");
        self.members[i] = launch(&self.commands[i]);
    }

    /// Restores the whole cluster from `snapshot` as etcd's disaster-recovery guide does: every
    /// member is stopped, its data directory replaced by one `etcdutl snapshot restore` makes
    /// (a new cluster of the same members and URLs), and started again. With `bump` > 0 the
    /// restored revision is raised by `bump` and marked compacted (`--bump-revision`,
    /// `--mark-compacted`), as Kubernetes' restore guidance asks, so that no revision handed out
    /// before the restore is ever given to another change. Returns once every member answers
    /// and follows one leader.
    pub async fn restore(&mut self, snapshot: &Path, bump: u64) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let token = format!("restored-{}", uuid::Uuid::new_v4());
        for i in 0..self.members.len() {
            let data = self.dir.join(format!("m{i}"));
            std::fs::remove_dir_all(&data).expect("remove the member's data");
            let mut restore = std::process::Command::new(etcd_binary().with_file_name("etcdutl"));
            restore.arg("snapshot").arg("restore").arg(snapshot).args(["--name", &format!("m{i}"), "--initial-cluster", &self.initial, "--initial-cluster-token", &token, "--initial-advertise-peer-urls", &self.peers[i]]).arg("--data-dir").arg(&data);
            if bump > 0 {
                restore.args(["--bump-revision", &bump.to_string(), "--mark-compacted"]);
            }
            let out = restore.output().expect("run etcdutl");
            assert!(out.status.success(), "etcdutl snapshot restore failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        for i in 0..self.members.len() {
            self.restart(i);
        }
        self.wait_for_leader(Duration::from_secs(60)).await;
    }

    /// Stops member `i` with SIGSTOP: its process and connections stay, and nothing it holds
    /// answers, as a member cut off by a partition looks from the other side.
    pub fn freeze(&self, i: usize) {
        signal(self.members[i].id(), "-STOP");
    }

    /// Lets a member stopped by [`EtcdCluster::freeze`] go on (SIGCONT).
    pub fn thaw(&self, i: usize) {
        signal(self.members[i].id(), "-CONT");
    }

    /// The index of the member that leads now, as the members that answer say (`None` while
    /// they elect or disagree).
    pub async fn leader(&self) -> Option<usize> {
        let mut statuses = Vec::new();
        for endpoint in &self.endpoints {
            let asked = tokio::time::timeout(Duration::from_secs(2), shardplane_storage::Storage::member_status(endpoint)).await;
            statuses.push(asked.ok().and_then(Result::ok));
        }
        let leader = shardplane_storage::maintenance::agreed_leader(statuses.iter().flatten())?.id;
        statuses.iter().position(|s| s.as_ref().is_some_and(|s| s.id == leader))
    }

    /// Waits until every member answers and all follow one leader, and returns it.
    pub async fn wait_for_leader(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let mut answering = 0;
            for endpoint in &self.endpoints {
                let asked = tokio::time::timeout(Duration::from_secs(2), shardplane_storage::Storage::member_status(endpoint)).await;
                answering += usize::from(asked.is_ok_and(|s| s.is_ok_and(|s| s.leader != 0)));
            }
            if answering == self.endpoints.len()
                && let Some(l) = self.leader().await
            {
                return l;
            }
            assert!(Instant::now() < deadline, "the etcd cluster had no leader every member agreed on within {within:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Where one member runs: its client and peer URLs, and the host's namespace (none: this one).
struct Place {
    client: String,
    peer: String,
    namespace: Option<String>,
}

/// Starts a member from its whole command line, quiet.
fn launch(argv: &[String]) -> Child {
    std::process::Command::new(&argv[0]).args(&argv[1..]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().expect("spawn etcd")
}

fn signal(pid: u32, which: &str) {
    let status = std::process::Command::new("kill").arg(which).arg(pid.to_string()).status().expect("run kill");
    assert!(status.success(), "kill {which} {pid} failed");
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for child in &mut self.members {
            // A frozen member dies of SIGKILL as well; CONT first only so it is reaped at once.
            let _ = std::process::Command::new("kill").arg("-CONT").arg(child.id().to_string()).stderr(std::process::Stdio::null()).status();
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A member whose disk is slow: its writes throttled to a number of operations per second by
/// the cgroup-v1 blkio controller, as a failing or overloaded device is (RFC 0016). The member
/// goes back to full speed when this is dropped. Its data must be on a real block device (a
/// cluster started on tmpfs has none to throttle).
pub struct SlowDisk {
    group: PathBuf,
    pid: u32,
}

impl EtcdCluster {
    /// Throttles member `i`'s writes to its data's disk to `write_iops` operations per second.
    pub fn slow_disk(&self, i: usize, write_iops: u32) -> SlowDisk {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(self.dir.join(format!("m{i}"))).expect("the member's data").dev();
        let (major, minor) = (libc_major(dev), libc_minor(dev));
        // Throttling applies to whole disks: a partition is throttled through its disk.
        let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
        let disk = if sys.join("partition").exists() { std::fs::read_to_string(sys.join("../dev")).expect("the partition's disk").trim().to_owned() } else { format!("{major}:{minor}") };
        let group = PathBuf::from(format!("/sys/fs/cgroup/blkio/shardplane-slow-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&group).expect("a blkio cgroup (cgroup v1, as root)");
        std::fs::write(group.join("blkio.throttle.write_iops_device"), format!("{disk} {write_iops}")).expect("set the write throttle");
        let pid = self.members[i].id();
        std::fs::write(group.join("cgroup.procs"), pid.to_string()).expect("move the member into the cgroup");
        SlowDisk { group, pid }
    }
}

impl Drop for SlowDisk {
    fn drop(&mut self) {
        // Back to the root group (the process may be gone), then the group itself.
        let _ = std::fs::write("/sys/fs/cgroup/blkio/cgroup.procs", self.pid.to_string());
        for _ in 0..50 {
            if std::fs::remove_dir(&self.group).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The major number of a device id (glibc's encoding).
fn libc_major(dev: u64) -> u64 {
    ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0000_0fff)
}

/// The minor number of a device id (glibc's encoding).
fn libc_minor(dev: u64) -> u64 {
    ((dev >> 12) & 0xffff_ff00) | (dev & 0x0000_00ff)
}
