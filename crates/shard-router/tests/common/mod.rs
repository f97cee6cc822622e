//! What the process-level tests share: `shard-router` started as a user starts it, read for
//! what it prints, and killed when the test ends however it ends.

#![allow(dead_code)] // each test binary uses its own part of this

pub mod churn;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

pub use shardplane_testkit::tempdir::Dir as TempDir;

/// A process killed when the test ends, however it ends (a failed assertion included).
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A started `shard-router` (a router with its shards, or one shard) and what it printed
/// before it listened.
pub struct Started {
    pub process: KillOnDrop,
    /// The address it listens on (`127.0.0.1:port`).
    pub addr: String,
    /// The shard processes a router started: (pid, url), in the order it printed them.
    pub shards: Vec<(u32, String)>,
}

impl Started {
    /// `http://` and its address.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Starts `shard-router` with `args` and reads its output until it listens; the rest of its
/// output is drained so it never blocks on a full pipe.
pub fn spawn(args: &[&str]) -> Started {
    spawn_in(&std::env::current_dir().unwrap(), args)
}

/// [`spawn`] with `dir` as the working directory (where the default `.shardplane/` paths are).
/// Its standard error is dropped, or shown with `DEBUG_STDERR` set (when a test needs reading).
pub fn spawn_in(dir: &std::path::Path, args: &[&str]) -> Started {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shard-router"));
    command.current_dir(dir).args(args);
    start(command)
}

/// The `shard-router` binary's path.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_shard-router")
}

/// Starts a prepared `shard-router` command (one run on another host, say) and reads its
/// output until it listens, as [`spawn`] does.
pub fn start(mut command: Command) -> Started {
    let mut child = command.stdout(Stdio::piped()).stderr(if std::env::var_os("DEBUG_STDERR").is_some() { Stdio::inherit() } else { Stdio::null() }).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut shards = Vec::new();
    let addr = loop {
        let line = lines.next().expect("the process printed its address").unwrap();
        if let Some(rest) = line.strip_prefix("shard ") {
            // "shard {i} pid {pid} {url}"
            let words: Vec<&str> = rest.split_whitespace().collect();
            shards.push((words[2].parse().unwrap(), words[3].to_owned()));
        }
        if let Some(a) = line.strip_prefix("listening on ") {
            break a.to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Started { process: KillOnDrop(child), addr, shards }
}

/// `shard-router --shards k` on `etcd`, writing `kubeconfig`: the local topology a user runs,
/// over plain HTTP (`--insecure-plain-http`, what these tests speak).
pub fn spawn_topology(etcd: &str, k: u32, kubeconfig: &std::path::Path) -> Started {
    spawn(&["--etcd-endpoints", etcd, "--shards", &k.to_string(), "--listen", "127.0.0.1:0", "--kubeconfig", kubeconfig.to_str().unwrap(), "--insecure-plain-http"])
}

/// Sends a signal with the `kill` command (no libc dependency in tests).
pub fn send_signal(pid: u32, signal: i32) {
    let status = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().unwrap();
    assert!(status.success());
}

/// The resident memory of `pid` in MiB (0 once it is gone).
pub fn rss_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status")).ok().and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())).unwrap_or(0) / 1024
}

/// shard-router processes (router or shard) whose command line mentions `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c);
                c.contains("shard-router") && c.contains(needle)
            })
        })
        .collect()
}

/// The loopback TCP ports `pid` listens on (its socket inodes matched in /proc/net/tcp), for a
/// process started on port 0 whose output the test does not see.
pub fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok()?.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_owned)).collect())
        .unwrap_or_default();
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // local address, state (0A: LISTEN), inode
            (f.len() > 9 && f[3] == "0A" && inodes.iter().any(|i| i == f[9])).then(|| u16::from_str_radix(f[1].rsplit(':').next()?, 16).ok()).flatten()
        })
        .collect()
}

/// `shard-router --shards k` processes on etcd at `etcd` (with `extra` flags), its kubeconfig in a
/// directory removed when this is dropped, and a client for it once it serves `default`.
pub struct Topology {
    pub started: Started,
    pub router: shardplane_testkit::TestShard,
    _dir: TempDir,
}

impl Topology {
    pub async fn start(etcd: &str, k: u32, extra: &[&str]) -> Self {
        let dir = TempDir::named("shardplane-topology");
        let kubeconfig = dir.join("kubeconfig");
        let shards = k.to_string();
        let mut args = vec!["--etcd-endpoints", etcd, "--shards", &shards, "--listen", "127.0.0.1:0", "--insecure-plain-http", "--kubeconfig", kubeconfig.to_str().unwrap()];
        args.extend_from_slice(extra);
        let started = spawn(&args);
        let router = shardplane_testkit::TestShard::attach(started.url(), started.addr.parse().unwrap());
        shardplane_testkit::wait_for(std::time::Duration::from_secs(60), || async { router.get("/api/v1/namespaces/default").await.0 == 200 }).await;
        Self { started, router, _dir: dir }
    }
}

/// Sends `send` until its answer's code is one of `definite`; answers while a shard is down (5xx,
/// 429, a dropped connection: code 0) are retried and counted in `retried`; anything else fails
/// the test.
pub async fn until_definite<F, Fut>(what: &str, retried: &std::sync::atomic::AtomicUsize, definite: &[u16], send: F) -> (u16, serde_json::Value)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = (u16, serde_json::Value)>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (code, body) = send().await;
        if definite.contains(&code) {
            return (code, body);
        }
        assert!(std::time::Instant::now() < deadline, "{what}: no answer: {code} {body}");
        assert!(code == 0 || code >= 500 || code == 429, "{what}: {code} {body}");
        retried.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
