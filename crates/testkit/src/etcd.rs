//! The store a test talks to: a real etcd 3.5 process on a free loopback port with its data on
//! tmpfs, or, with `SHARDPLANE_STORE=embedded`, the router's embedded etcd-compatible store
//! (RFC 0007), so every suite can run against either.


use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

pub struct Etcd {
    backend: Backend,
    dir: PathBuf,
    pub endpoint: String,
}

/// What serves the endpoint.
enum Backend {
    /// A real etcd 3.5 process.
    Process(Child),
    /// The embedded store (`SHARDPLANE_STORE=embedded`), on a thread of its own until dropped.
    Embedded(CancellationToken, Option<std::thread::JoinHandle<()>>),
}

/// Whether tests run against the embedded store instead of etcd (`SHARDPLANE_STORE=embedded`).
pub fn embedded_store() -> bool {
    std::env::var("SHARDPLANE_STORE").is_ok_and(|v| v == "embedded")
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One etcd member's command as the harness runs every member: `name`, its data in `dir`,
/// serving clients at `client` and peers at `peer`, in the cluster `initial` names
/// (`name=peer-url,…`), quiet, with 5 s progress marks (an idle range's cache advances only on
/// them), then `extra`.
pub(crate) fn member_command(name: &str, dir: &std::path::Path, client: &str, peer: &str, initial: &str, extra: &[&str]) -> Command {
    let mut command = Command::new(etcd_binary());
    command
        .args(["--name", name, "--data-dir", dir.to_str().unwrap()])
        .args(["--listen-client-urls", client, "--advertise-client-urls", client])
        .args(["--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer])
        .args(["--initial-cluster", initial])
        .args(["--log-level", "error", "--experimental-watch-progress-notify-interval", "5s"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// The store tests and benchmarks run on, as a report names it: etcd's own version line, or the
/// embedded store.
pub fn store_description() -> String {
    if embedded_store() {
        return "the embedded etcd-compatible store (SHARDPLANE_STORE=embedded), not etcd".into();
    }
    let out = std::process::Command::new(etcd_binary()).arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let version = out.lines().find_map(|l| l.strip_prefix("etcd Version: ")).unwrap_or("(version unknown)").trim().to_owned();
    format!("etcd {version}")
}

/// The etcd binary: `SHARDPLANE_ETCD`, or the one install-deps.sh put under `.tools/`.
pub(crate) fn etcd_binary() -> PathBuf {
    if let Ok(p) = std::env::var("SHARDPLANE_ETCD") {
        return p.into();
    }
    // .tools/ sits at the workspace root, above whichever crate runs the tests.
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    loop {
        let local = dir.join(".tools/etcd/usr/bin/etcd");
        if local.exists() {
            return local;
        }
        if !dir.pop() {
            break;
        }
    }
    panic!("etcd 3.5 not found: run deploy/local/install-deps.sh (or set SHARDPLANE_ETCD)");
}

impl Etcd {
    /// Starts etcd and waits until it answers. Free ports are found by binding port 0 and
    /// releasing it, so a parallel test can take the same port first: when etcd exits at start,
    /// it is started again on fresh ports.
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// [`Etcd::start`] with extra etcd flags (e.g. a larger `--quota-backend-bytes`; the embedded
    /// store takes none).
    pub async fn start_with(extra: &[&str]) -> Self {
        if embedded_store() {
            return Self::start_embedded().await;
        }
        Self::start_process(extra).await
    }

    /// A real etcd process, whatever `SHARDPLANE_STORE` says.
    pub async fn start_process(extra: &[&str]) -> Self {
        Self::start_as("http", extra).await
    }

    /// Starts etcd serving `scheme` with `extra` flags, on fresh ports each attempt.
    async fn start_as(scheme: &str, extra: &[&str]) -> Self {
        for _attempt in 0..5 {
            if let Some(etcd) = Self::try_start_as(scheme, extra).await {
                return etcd;
            }
        }
        panic!("etcd did not start in 5 attempts");
    }

    /// A real etcd process serving HTTPS to clients with a certificate `client_ca` signed
    /// (etcd's `--client-cert-auth`), with `cert` and `key` as its serving pair. The test's own
    /// store credentials must be installed first (`shardplane_storage::StoreTls::install`):
    /// readiness is checked with them.
    pub async fn start_tls(cert: &std::path::Path, key: &std::path::Path, client_ca: &std::path::Path) -> Self {
        let flags = ["--cert-file", cert.to_str().unwrap(), "--key-file", key.to_str().unwrap(), "--client-cert-auth", "--trusted-ca-file", client_ca.to_str().unwrap()];
        Self::start_as("https", &flags).await
    }

    async fn try_start_as(scheme: &str, extra: &[&str]) -> Option<Self> {
        let base = if PathBuf::from("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let dir = base.join(format!("shardplane-etcd-{}", uuid::Uuid::new_v4()));
        let (client, peer) = (free_port(), free_port());
        let endpoint = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = member_command("test", &dir, &endpoint, &peer_url, &format!("test={peer_url}"), extra).spawn().expect("spawn etcd");
        let mut etcd = Self { backend: Backend::Process(child), dir, endpoint };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let Backend::Process(child) = &mut etcd.backend else { unreachable!() };
            if child.try_wait().ok().flatten().is_some() {
                return None; // exited: most likely a port taken meanwhile; Drop cleans up
            }
            if let Ok(s) = shardplane_storage::Storage::connect(std::slice::from_ref(&etcd.endpoint)).await && s.current_revision().await.is_ok() {
                return Some(etcd);
            }
            assert!(Instant::now() < deadline, "etcd did not answer within 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Etcd {
    /// The embedded store on a free loopback port, its data on tmpfs.
    pub async fn start_embedded() -> Self {
        Self::start_embedded_at("127.0.0.1:0")
    }

    /// The embedded store on a unix socket in its data directory, its data on tmpfs.
    pub async fn start_embedded_unix() -> Self {
        Self::start_embedded_at("unix")
    }

    /// The embedded store on a free loopback port with a space quota of `quota` bytes.
    pub async fn start_embedded_with_quota(quota: u64) -> Self {
        Self::start_embedded_at_with("127.0.0.1:0", quota)
    }

    /// `at`: a TCP address, or `unix` for a socket in the data directory.
    fn start_embedded_at(at: &str) -> Self {
        Self::start_embedded_at_with(at, shardplane_kvstore::server::DEFAULT_QUOTA_BYTES)
    }

    fn start_embedded_at_with(at: &str, quota: u64) -> Self {
        let base = if PathBuf::from("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let dir = base.join(format!("shardplane-store-{}", uuid::Uuid::new_v4()));
        let server = shardplane_kvstore::server::EtcdServer::open_with_quota(&dir, quota).expect("open the embedded store");
        let addr = if at == "unix" { format!("unix:{}", dir.join("etcd.sock").display()) } else { at.to_owned() };
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let stop = CancellationToken::new();
        let token = stop.clone();
        // Its own runtime: a test's runtime may be single-threaded or end before the store.
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = shardplane_kvstore::server::Listener::bind(&addr).await.expect("bind the embedded store");
                ready_tx.send(listener.endpoint().unwrap()).unwrap();
                // Stopped outright, not gracefully: clients' watch streams may outlive the test.
                tokio::select! {
                    _ = shardplane_kvstore::server::serve(server, listener, token.clone()) => {}
                    _ = token.cancelled() => {}
                }
            });
        });
        let endpoint = ready.recv().expect("the embedded store's endpoint");
        Self { backend: Backend::Embedded(stop, Some(thread)), dir, endpoint }
    }

    /// The etcd process's pid (this test process's with the embedded store).
    pub fn pid(&self) -> u32 {
        match &self.backend {
            Backend::Process(c) => c.id(),
            Backend::Embedded(..) => std::process::id(),
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        match &mut self.backend {
            Backend::Process(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Backend::Embedded(stop, thread) => {
                stop.cancel();
                if let Some(t) = thread.take() {
                    let _ = t.join();
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

