//! The system under test, as a user runs it: the `shard-router` binary (release build) starting
//! K shard processes on one etcd; plus what a benchmark reads from it (each shard's /metrics,
//! its process's CPU time).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The servers' log filter: `SHARDPLANE_BENCH_LOG` when set (to see what a server does during a
/// case, on the bench's stderr), errors only otherwise (logging costs CPU the figures count).
pub fn server_log() -> String {
    std::env::var("SHARDPLANE_BENCH_LOG").unwrap_or_else(|_| "error".to_owned())
}

/// Builds `shard-router` in the profile the benchmark itself was built in and returns its path
/// (next to this binary).
pub fn build_router() -> PathBuf {
    let mut args = vec!["build", "-q", "--bin", "shard-router"];
    if !cfg!(debug_assertions) {
        args.push("--release");
    }
    let status = shardplane_testkit::nested_cargo().args(&args).current_dir(workspace_root()).status().expect("cargo");
    assert!(status.success(), "building shard-router failed");
    std::env::current_exe().expect("own path").with_file_name("shard-router")
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// One shard process of a running topology.
#[derive(Clone, Debug)]
pub struct ShardProcess {
    pub pid: u32,
    pub url: String,
}

/// `shard-router --shards K` on `etcd` (or on its embedded store): the router's URL and its
/// shard processes. Killing the router (on drop) stops the shards too (each exits when its
/// stdin pipe closes); drop waits until they are gone.
pub struct Topology {
    child: Child,
    pub url: String,
    pub shards: Vec<ShardProcess>,
    /// The embedded store's endpoint, when the router serves one.
    pub store: Option<String>,
    /// Where the router writes its kubeconfig; removed with the topology.
    dir: PathBuf,
}

impl Drop for Topology {
    fn drop(&mut self) {
        // One per topology, and a full run starts dozens of them.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Topology {
    pub async fn start(router: &Path, etcd: &str, k: u32) -> Self {
        Self::spawn(router, &["--etcd-endpoints", etcd], k, None).await
    }

    /// [`Topology::start`] with more flags for the router (which passes its own on to its shards).
    pub async fn start_with(router: &Path, etcd: &str, k: u32, flags: &[&str]) -> Self {
        let args: Vec<&str> = ["--etcd-endpoints", etcd].into_iter().chain(flags.iter().copied()).collect();
        Self::spawn(router, &args, k, None).await
    }

    /// The router as a user runs it (RFC 0012): HTTPS with the PKI it makes in `dir`, RBAC, and
    /// `dir/tokens.csv` as its token file (written by the caller first). Its shards serve the
    /// router alone, so readiness is the router's `/readyz`, asked as the admin; returns the
    /// topology and the admin's client.
    pub async fn start_secure(router: &Path, etcd: &str, k: u32, dir: &Path) -> (Self, reqwest::Client) {
        let t = Self::spawn(router, &["--etcd-endpoints", etcd], k, Some(dir)).await;
        let pki = dir.join("pki");
        let tls = shardplane_identity::tls::client_config(&pki.join("ca.crt"), &pki.join("admin.crt"), &pki.join("admin.key")).expect("the admin's credentials");
        let admin = shardplane_http::outbound::client_builder().pool_max_idle_per_host(1024).http1_only().tls_backend_preconfigured(tls).build().expect("client");
        let deadline = Instant::now() + Duration::from_secs(900);
        while !admin.get(format!("{}/readyz", t.url)).send().await.is_ok_and(|r| r.status().is_success()) {
            assert!(Instant::now() < deadline, "the secure router is not ready in time");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (t, admin)
    }

    /// The router with no `--etcd-endpoints`: it serves its embedded store (RFC 0007), kept in
    /// `data_dir`.
    pub async fn start_embedded(router: &Path, data_dir: &Path, k: u32) -> Self {
        // On loopback TCP, as etcd is, so raw clients reach both alike (its default is a unix
        // socket).
        Self::spawn(router, &["--data-dir", data_dir.to_str().expect("a UTF-8 path"), "--store-listen", "127.0.0.1:0"], k, None).await
    }

    /// `secure`: the directory of [`Topology::start_secure`]; otherwise plain HTTP.
    async fn spawn(router: &Path, store_args: &[&str], k: u32, secure: Option<&Path>) -> Self {
        let dir = std::env::temp_dir().join(format!("shardplane-bench-{}", uuid::Uuid::new_v4()));
        let access: Vec<String> = match secure {
            Some(d) => vec!["--pki-dir".into(), d.join("pki").display().to_string(), "--token-auth-file".into(), d.join("tokens.csv").display().to_string(), "--authorization-mode".into(), "RBAC".into()],
            // The benchmarks speak plain HTTP to the router; the cost of TLS, authentication and
            // RBAC is the `access` scenario's comparison.
            None => vec!["--insecure-plain-http".into()],
        };
        let mut child = Command::new(router)
            .args(store_args)
            .args(["--shards", &k.to_string(), "--listen", "127.0.0.1:0"])
            .args(["--compaction-interval", "0", "--bookmark-interval", "60"])
            .args(&access)
            .arg("--kubeconfig")
            .arg(dir.join("kubeconfig"))
            .env("RUST_LOG", server_log())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn shard-router");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let (mut shards, mut store) = (Vec::new(), None);
        let url = tokio::time::timeout(Duration::from_secs(120), async {
            while let Some(line) = lines.next_line().await.expect("router stdout") {
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["shard", _, "pid", pid, url] => shards.push(ShardProcess { pid: pid.parse().expect("pid"), url: (*url).to_owned() }),
                    ["embedded", "store", _, "at", endpoint] => store = Some((*endpoint).to_owned()),
                    ["listening", "on", addr] => return format!("{}://{addr}", if secure.is_some() { "https" } else { "http" }),
                    _ => {}
                }
            }
            panic!("shard-router exited before listening");
        })
        .await
        .expect("shard-router listens within 120 s");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        assert_eq!(shards.len(), k as usize);
        let t = Self { child, url, shards, store, dir };
        if secure.is_none() {
            t.wait_ready(Duration::from_secs(900)).await;
        }
        t
    }

    /// Waits until every shard's caches have loaded (`/readyz`).
    async fn wait_ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        for s in &self.shards {
            wait_ready(&s.url, deadline).await;
        }
    }

    /// The router process's pid.
    pub fn router_pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Stops the router and waits until every shard process has exited.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        let deadline = Instant::now() + Duration::from_secs(30);
        for s in &self.shards {
            while Path::new(&format!("/proc/{}", s.pid)).exists() && !is_zombie(s.pid) {
                assert!(Instant::now() < deadline, "shard {} still running", s.pid);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// One shard outside any cluster (`--standalone`, the whole hash space) on `etcd`: the
/// baseline a router is measured against. It owns exactly what it caches whatever range map the
/// topologies on the same etcd publish. Stops when dropped (its stdin pipe closes).
pub struct StandaloneShard {
    child: Child,
    pub url: String,
}

impl StandaloneShard {
    pub async fn start(router: &Path, etcd: &str) -> Self {
        let mut child = Command::new(router)
            .args(["shard", "--standalone", "--insecure-plain-http", "--id", "bench-baseline", "--etcd-endpoints", etcd, "--listen", "127.0.0.1:0", "--compaction-interval", "0", "--bookmark-interval", "60"])
            .env(shardplane_http::protocol::EXIT_WITH_STDIN, "1")
            .env("RUST_LOG", server_log())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn a standalone shard");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let url = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.expect("shard stdout") {
                if let Some(addr) = line.strip_prefix("listening on ") {
                    return format!("http://{addr}");
                }
            }
            panic!("the standalone shard exited before listening");
        })
        .await
        .expect("the standalone shard listens within 60 s");
        wait_ready(&url, Instant::now() + Duration::from_secs(900)).await;
        Self { child, url }
    }

    /// The shard process's pid.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }
}

/// Waits until `k` shards have registered as members with their ranges loaded (a coordinator
/// moves ranges only between such shards), failing past `within`.
pub async fn wait_members_loaded(storage: &shardplane_storage::Storage, k: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while storage.members().await.expect("members").shards.iter().filter(|m| !m.loaded.is_empty()).count() < k {
        assert!(Instant::now() < deadline, "{k} shards did not register with their ranges loaded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the shard at `url` says its caches have loaded (`/readyz`), failing past `deadline`.
pub async fn wait_ready(url: &str, deadline: Instant) {
    while !http().get(format!("{url}/readyz")).send().await.is_ok_and(|r| r.status().is_success()) {
        assert!(Instant::now() < deadline, "shard {url} not ready in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z')).unwrap_or(true)
}

/// An HTTP client for benchmark traffic (no proxy, pooled).
pub fn http() -> reqwest::Client {
    shardplane_http::outbound::client_builder().pool_max_idle_per_host(1024).build().expect("client")
}

/// A shard's metrics: name{labels} -> value, for the series the benchmarks read.
pub async fn metrics(url: &str) -> HashMap<String, f64> {
    try_metrics(url).await.expect("metrics")
}

/// The same, or None when `url` serves no metrics (the embedded store's endpoint).
pub async fn try_metrics(url: &str) -> Option<HashMap<String, f64>> {
    let text = http().get(format!("{url}/metrics")).send().await.ok()?.error_for_status().ok()?.text().await.ok()?;
    Some(
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_owned(), v.parse().ok()?))
            })
            .collect(),
    )
}

/// Sum of a metric's series whose name (with labels) starts with `prefix`.
pub fn sum(m: &HashMap<String, f64>, prefix: &str) -> f64 {
    m.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, v)| v).sum()
}

/// CPU seconds (user + system) a process has used so far (clock ticks of USER_HZ = 100, as on
/// every Linux platform shardplane builds for).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    // After the command: state is field 3, utime 14, stime 15 (1-based) → index 11, 12 here.
    let ticks: f64 = fields.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0) + fields.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// A process's resident set (bytes), 0 if it is gone.
pub fn rss_bytes(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok()).map_or(0.0, |kib| kib * 1024.0)
}

/// A fixed share of the machine's CPU for the processes put in it (a cgroup's CPU quota,
/// cgroup v1 `cpu.cfs_quota_us` or v2 `cpu.max`): `bench cluster` gives each store one, as a
/// store has its own fixed-size hosts while the API layer scales out (RFC 0015). Removed on
/// drop, once the processes in it are gone.
pub struct CpuBudget {
    dir: PathBuf,
}

impl CpuBudget {
    /// A new group allowed `cores` CPUs' worth of time, or why none can be made here (not
    /// root, no cpu controller).
    pub fn new(cores: f64) -> Result<Self, String> {
        let name = format!("shardplane-bench-{}", uuid::Uuid::new_v4().simple());
        // A short period spreads the quota thin: a throttled store waits milliseconds, not the
        // default period's 100.
        let period = 20_000u64;
        let quota = ((cores * period as f64) as u64).max(1_000);
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        let v2 = Path::new("/sys/fs/cgroup");
        let (dir, files): (PathBuf, Vec<(&str, String)>) = if v1.join("cpu.cfs_quota_us").exists() {
            (v1.join(&name), vec![("cpu.cfs_period_us", period.to_string()), ("cpu.cfs_quota_us", quota.to_string())])
        } else if std::fs::read_to_string(v2.join("cgroup.controllers")).is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu")) {
            (v2.join(&name), vec![("cpu.max", format!("{quota} {period}"))])
        } else {
            return Err("no cgroup cpu controller at /sys/fs/cgroup".into());
        };
        std::fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let budget = Self { dir };
        for (file, value) in files {
            std::fs::write(budget.dir.join(file), value).map_err(|e| format!("setting {file}: {e}"))?;
        }
        Ok(budget)
    }

    /// Puts process `pid` (all its threads) in the group.
    pub fn add(&self, pid: u32) -> Result<(), String> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).map_err(|e| format!("moving {pid} into {}: {e}", self.dir.display()))
    }
}

impl Drop for CpuBudget {
    fn drop(&mut self) {
        // A group can be removed only when empty; its processes may take a moment to go.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
