//! # shardplane-testkit
//!
//! Owns the test harness every suite, benchmark and chaos test shares (a dev-dependency only):
//! the store a test talks to ([`Etcd`]: a real etcd 3.5 process on a free loopback port with
//! its data on tmpfs, or the embedded store; [`EtcdCluster`]: several real members), shards and routers served in-process on free
//! ports ([`TestShard`], with `SHARDPLANE_ROUTER_SHARDS=K` a router over K shards), kubectl
//! ([`Kubectl`]), workload objects as their controllers make them ([`deployment_family`]), the client-go and Python client runners ([`build_go_program`], [`run_python`]),
//! watch readers, and etcd's own history of a resource to compare streams with
//! ([`etcd_history`]). Everything is torn down on drop.
//!
//! It must never stand in for etcd or a client: what it starts is the real thing, and it only
//! waits on conditions with deadlines.

use serde_json::Value;
use shardplane_keyspace::RangeSet;
use shardplane_shard::{serve, ShardConfig};
use shardplane_watchcache::CacheConfig;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

mod clients;
mod etcd;
mod etcd_cluster;
mod history;
mod hosts;
mod kubectl;
pub mod simulator;
mod workloads;

pub use clients::*;
pub use etcd::*;
pub use etcd_cluster::*;
pub use history::*;
pub use hosts::*;
pub use kubectl::*;
pub use workloads::*;

/// A shard served in-process (or, with `SHARDPLANE_ROUTER_SHARDS=K`, a router in front of K).
pub struct TestShard {
    pub url: String,
    pub addr: SocketAddr,
    shutdown: CancellationToken,
    /// The shards behind a router.
    behind: Vec<TestShard>,
    /// This server's client, keeping its connections between requests as client libraries do
    /// (a new client per request would open a connection and load root certificates each time,
    /// which at a simulated cluster's request rates costs more than the server does).
    http: reqwest::Client,
}

impl Drop for TestShard {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.behind.clear();
    }
}

/// Shard settings used by tests: fast bookmarks and namespace sweeps.
pub fn test_config(etcd: &Etcd, ranges: RangeSet) -> ShardConfig {
    test_config_on(std::slice::from_ref(&etcd.endpoint), ranges)
}

/// [`test_config`] for a store at `endpoints` (the members of an [`EtcdCluster`], say).
pub fn test_config_on(endpoints: &[String], ranges: RangeSet) -> ShardConfig {
    ShardConfig {
        // Distinct per range: a router refuses two shards with one name.
        id: format!("test-{ranges}"),
        etcd_endpoints: endpoints.to_vec(),
        listen: "127.0.0.1:0".parse().unwrap(),
        ranges,
        cache: CacheConfig::default(),
        compaction_interval: None,
        bookmark_interval: Duration::from_millis(500),
        namespace_sweep: Duration::from_millis(200),
        min_request_timeout: Duration::from_secs(1800),
        flow_control: Default::default(),
        service_network: Default::default(),
        address_repair: Duration::from_secs(1),
        quota_sync: Duration::from_secs(2),
        disruption_sync: Duration::from_secs(1),
        event_ttl: Duration::from_secs(3600),
        member_ttl: Duration::from_secs(10),
        standalone: false,
        storage_contract: Default::default(),
        access: Default::default(),
    }
}

impl TestShard {
    /// Starts a shard with `config` and waits until /readyz says its caches synced. With
    /// `SHARDPLANE_ROUTER_SHARDS=K` and the full range, starts K shards on equal slices and a
    /// router in front of them instead, so one suite runs against both.
    pub async fn start(config: ShardConfig) -> Self {
        match std::env::var("SHARDPLANE_ROUTER_SHARDS").ok().and_then(|k| k.parse::<u32>().ok()) {
            Some(k) if config.ranges.is_full() => Box::pin(Self::start_routed(config, k)).await,
            _ => Self::start_one(config).await,
        }
    }

    async fn start_routed(config: ShardConfig, k: u32) -> Self {
        let mut behind = Vec::new();
        for r in shardplane_keyspace::HashRange::split_even(k) {
            behind.push(Self::start_one(ShardConfig { ranges: RangeSet::from_disjoint(vec![r]).unwrap(), id: format!("{}-{r}", config.id), ..config.clone() }).await);
        }
        let mut s = Self::start_router_with(&config.etcd_endpoints, behind.iter().map(|s| s.url.clone()).collect(), config.bookmark_interval, config.storage_contract.clone()).await;
        s.behind = behind;
        wait_for(Duration::from_secs(20), || async { client().get(format!("{}/readyz", s.url)).send().await.is_ok_and(|r| r.status() == 200) }).await;
        s
    }

    /// A router served in-process in front of `shard_urls` (it publishes their range map to
    /// etcd); it stops when the handle is dropped. Does not wait for the shards' caches.
    pub async fn start_router(etcd_endpoints: &[String], shard_urls: Vec<String>, bookmark_interval: Duration) -> Self {
        Self::start_router_with(etcd_endpoints, shard_urls, bookmark_interval, Default::default()).await
    }

    /// A router as [`TestShard::start_router`] starts one, reading revisions by `storage_contract`.
    pub async fn start_router_with(etcd_endpoints: &[String], shard_urls: Vec<String>, bookmark_interval: Duration, storage_contract: shardplane_storage::StorageContract) -> Self {
        let shutdown = CancellationToken::new();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let rc = shardplane_router::RouterConfig { listen: "127.0.0.1:0".parse().unwrap(), shard_urls, etcd_endpoints: etcd_endpoints.to_vec(), bookmark_interval, storage_contract, client_facing: Default::default(), shard_tls: None };
        let token = shutdown.clone();
        tokio::spawn(async move {
            shardplane_router::serve(rc, token, move |a| {
                let _ = tx.send(a);
            })
            .await
            .expect("router serves")
        });
        let addr = rx.await.expect("router bound");
        Self { url: format!("http://{addr}"), addr, shutdown, behind: Vec::new(), http: client() }
    }

    /// Always a shard, never a router: for tests of a shard's own surface (its progress side
    /// channel, its metrics, its in-flight bounds).
    pub async fn start_shard(config: ShardConfig) -> Self {
        Self::start_one(config).await
    }

    async fn start_one(config: ShardConfig) -> Self {
        let shutdown = CancellationToken::new();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let token = shutdown.clone();
        tokio::spawn(async move {
            serve(config, token, move |a| {
                let _ = tx.send(a);
            })
            .await
            .expect("shard serves");
        });
        let addr = rx.await.expect("shard bound");
        let s = Self { url: format!("http://{addr}"), addr, shutdown, behind: Vec::new(), http: client() };
        wait_for(Duration::from_secs(20), || async { client().get(format!("{}/readyz", s.url)).send().await.is_ok_and(|r| r.status() == 200) }).await;
        s
    }

    /// A handle on a server started elsewhere (a router), driven through the same helpers.
    pub fn attach(url: String, addr: SocketAddr) -> Self {
        Self { url, addr, shutdown: CancellationToken::new(), behind: Vec::new(), http: client() }
    }

    /// The client its helpers send with (its connections are kept and reused).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// GET returning (status, JSON body).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.http.get(format!("{}{path}", self.url)).send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// A request with a JSON body and content type.
    pub async fn send(&self, method: &str, path: &str, content_type: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        self.try_send(method, path, content_type, body).await.unwrap()
    }

    /// [`TestShard::send`], with a failure to get an answer returned rather than failing the
    /// test (for load generators, which count it).
    pub async fn try_send(&self, method: &str, path: &str, content_type: &str, body: impl Into<reqwest::Body>) -> reqwest::Result<(u16, Value)> {
        let r = self.http.request(method.parse().unwrap(), format!("{}{path}", self.url)).header("content-type", content_type).body(body).send().await?;
        Ok((r.status().as_u16(), r.json().await.unwrap_or(Value::Null)))
    }

    /// POST of a JSON object.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send("POST", path, "application/json", serde_json::to_vec(body).unwrap()).await
    }

    /// PUT of a JSON object.
    pub async fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send("PUT", path, "application/json", serde_json::to_vec(body).unwrap()).await
    }

    /// DELETE with an optional DeleteOptions body.
    pub async fn delete(&self, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.send("DELETE", path, "application/json", body.map(|b| serde_json::to_vec(b).unwrap()).unwrap_or_default()).await
    }

    /// Creates a namespace.
    pub async fn namespace(&self, name: &str) {
        let (code, body) = self.post("/api/v1/namespaces", &serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})).await;
        assert_eq!(code, 201, "{body}");
    }

    /// Opens a watch and returns a line reader.
    pub async fn watch(&self, path: &str) -> WatchReader {
        let r = self.http.get(format!("{}{path}", self.url)).send().await.unwrap();
        assert_eq!(r.status(), 200, "watch {path}");
        WatchReader { resp: r, buf: Vec::new() }
    }
}

/// Reads newline-delimited watch events.
pub struct WatchReader {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl WatchReader {
    /// A reader over an already-open watch response (one opened with custom headers).
    pub fn from_response(resp: reqwest::Response) -> Self {
        assert_eq!(resp.status(), 200);
        Self { resp, buf: Vec::new() }
    }

    /// The next event, or None when the stream ends or `within` passes.
    pub async fn next(&mut self, within: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).expect("watch line is JSON"));
            }
            match tokio::time::timeout_at(deadline, self.resp.chunk()).await {
                Ok(Ok(Some(c))) => self.buf.extend_from_slice(&c),
                _ => return None,
            }
        }
    }

    /// The next event, or None when the stream ends or `stop` is cancelled.
    pub async fn next_or_stop(&mut self, stop: &CancellationToken) -> Option<Value> {
        tokio::select! {
            n = self.next(Duration::from_secs(3600)) => n,
            _ = stop.cancelled() => None,
        }
    }

    /// The next non-BOOKMARK event.
    pub async fn next_change(&mut self, within: Duration) -> Option<Value> {
        loop {
            let e = self.next(within).await?;
            if e["type"] != "BOOKMARK" {
                return Some(e);
            }
        }
    }
}

/// An object's resourceVersion as a number (panics on an object without one: a test's bug).
pub fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"].as_str().expect("resourceVersion").parse().expect("integer RV")
}

/// A watch event's object's resourceVersion (0 when it has none).
pub fn event_rv(e: &Value) -> u64 {
    e["object"]["metadata"]["resourceVersion"].as_str().and_then(|r| r.parse().ok()).unwrap_or(0)
}

/// The seconds a refusal's `Retry-After` header asks a client to wait (1 when it names none, as
/// upstream's 429s and 504s always name one), for a client that backs off as a reflector does.
pub fn retry_after_seconds(headers: &reqwest::header::HeaderMap) -> u64 {
    headers.get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()?.parse::<u64>().ok()).unwrap_or(1)
}

/// A plain HTTP client (no proxies, no TLS).
pub fn client() -> reqwest::Client {
    shardplane_http::outbound::client_builder().build().unwrap()
}

/// Polls `cond` until it holds, failing the test after `deadline`.
/// etcd, `k` shard processes' worth of shards (one even hash range each) and a router over
/// them, once the router serves the `default` namespace (created at start by its owner).
pub async fn routed_cluster(k: u32) -> (Etcd, Vec<TestShard>, TestShard) {
    routed_cluster_with(k, |_| {}).await
}

/// [`routed_cluster`] with each shard's settings changed by `configure`.
pub async fn routed_cluster_with(k: u32, configure: impl Fn(&mut ShardConfig)) -> (Etcd, Vec<TestShard>, TestShard) {
    let etcd = Etcd::start().await;
    let mut shards = Vec::new();
    for r in shardplane_keyspace::HashRange::split_even(k) {
        let mut config = test_config(&etcd, RangeSet::from_disjoint(vec![r]).unwrap());
        configure(&mut config);
        shards.push(TestShard::start_shard(config).await);
    }
    let router = TestShard::start_router(std::slice::from_ref(&etcd.endpoint), shards.iter().map(|s| s.url.clone()).collect(), Duration::from_millis(500)).await;
    wait_for(Duration::from_secs(20), || async { router.get("/api/v1/namespaces/default").await.0 == 200 }).await;
    (etcd, shards, router)
}

pub async fn wait_for<F, Fut>(deadline: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = Instant::now() + deadline;
    while !cond().await {
        assert!(Instant::now() < end, "condition not met within {deadline:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A ConfigMap body.
pub fn configmap(name: &str, labels: Value) -> Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": name}})
}

/// `cargo`, to run from inside a test or benchmark, without the variables cargo set for that
/// binary's own package (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`, …). Some build scripts (ring's)
/// rerun when those change, so a nested build that inherited them rebuilt those crates, and the
/// next ordinary build rebuilt them again.
pub fn nested_cargo() -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (key, _) in std::env::vars_os() {
        let Some(k) = key.to_str() else { continue };
        if k.starts_with("CARGO_PKG_") || k.starts_with("CARGO_MANIFEST_") || matches!(k, "CARGO_CRATE_NAME" | "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR" | "CARGO_BIN_NAME" | "OUT_DIR") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// The path of a workspace binary (`shard-server`, `shard-router`, `shardctl`) built in the
/// profile the running test was, built first if it is not up to date: tests outside the
/// binary's own package have no `CARGO_BIN_EXE_*` for it. With `SHARDPLANE_PREBUILT` set (the
/// test command sets it after building the whole workspace) the binary already there is
/// used: `cargo build --bin X` resolves one package's features apart from the workspace's and
/// would compile a second copy of its dependencies in the middle of the tests.
pub fn workspace_binary(name: &str) -> std::path::PathBuf {
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    // A test binary runs from target/<profile>/deps/.
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target/<profile>/deps");
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    let prebuilt = std::env::var_os("SHARDPLANE_PREBUILT").is_some() && dir.join(name).exists();
    if !prebuilt && !built.iter().any(|b| b == name) {
        let mut cmd = nested_cargo();
        // From the workspace root, where every package's binaries are in reach.
        cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).args(["build", "-q", "--bin", name]);
        if dir.file_name().is_some_and(|p| p == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cargo runs");
        assert!(status.success(), "cargo build --bin {name} failed");
        built.push(name.to_owned());
    }
    let path = dir.join(name);
    assert!(path.exists(), "{} missing after cargo build --bin {name}", path.display());
    path
}

/// Runs `shardctl --etcd-endpoints endpoint args…` and returns what it printed, failing the test
/// if it fails (off the runtime's thread: a server under test may serve on it).
pub async fn shardctl(endpoint: &str, args: &[&str]) -> String {
    let (endpoint, args): (String, Vec<String>) = (endpoint.to_owned(), args.iter().map(|a| a.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(workspace_binary("shardctl")).arg("--etcd-endpoints").arg(&endpoint).args(&args).output().unwrap();
        assert!(out.status.success(), "shardctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    })
    .await
    .unwrap()
}

/// `/readyz` of the server at `url`: its status and the check lines.
pub async fn readyz(url: &str) -> (u16, String) {
    let r = client().get(format!("{url}/readyz")).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// How many Range calls the etcd at `endpoint` has served (its own Prometheus metrics): what a
/// test reads to show that something cost the store nothing.
pub async fn etcd_range_calls(endpoint: &str) -> f64 {
    let text = client().get(format!("{endpoint}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines().filter(|l| l.starts_with("grpc_server_handled_total{") && l.contains("grpc_method=\"Range\"")).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// What filling a store up to its space quota left ([`fill_until_refused`]).
pub struct Filled {
    /// The large object as its last acknowledged write left it.
    pub big: Value,
    /// The resourceVersion of every acknowledged write of it, in order.
    pub acknowledged: Vec<u64>,
}

/// Fills the store behind `s` (one with a small `--quota-backend-bytes`, 8 MiB in the drills)
/// by creating a 900 KiB ConfigMap `big` in `collection` and rewriting it until a write is
/// refused; checks that the refusal is upstream's answer to etcd's NOSPACE (500, "database
/// space exceeded"). Old revisions of `big` are what compaction frees afterwards.
pub async fn fill_until_refused(s: &TestShard, collection: &str) -> Filled {
    let (code, mut big) = s.post(collection, &serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"v": "x".repeat(900 * 1024), "n": "0"}})).await;
    assert_eq!(code, 201, "{big}");
    let mut acknowledged = vec![rv(&big)];
    let refused = loop {
        assert!(acknowledged.len() < 40, "an 8 MiB quota took {} writes of 900 KiB without an alarm", acknowledged.len());
        big["data"]["n"] = serde_json::json!(acknowledged.len().to_string());
        let (code, body) = s.put(&format!("{collection}/big"), &big).await;
        if code != 200 {
            break (code, body);
        }
        big = body;
        acknowledged.push(rv(&big));
    };
    assert_eq!(refused.0, 500, "{}", refused.1);
    assert!(refused.1["message"].as_str().unwrap().contains("database space exceeded"), "{}", refused.1);
    Filled { big, acknowledged }
}
