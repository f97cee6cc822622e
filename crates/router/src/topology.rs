//! The local topology: K shard processes, each this binary run as `<exe> shard ...` on one
//! equal slice of the hash space, supervised: one that dies is started again on the same range
//! and the range map in etcd gets its new address (same epoch); on shutdown all are asked to stop
//! (their stdin closes) and killed if they do not within seconds, and if the router
//! itself dies (even by SIGKILL) each shard sees its stdin pipe close and stops. The shards are
//! separate OS processes (the memory-per-shard claim depends on it), yet `cargo run --bin
//! shard-router` needs no separate build step.

use crate::state::RouterState;
use shardplane_keyspace::HashRange;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

/// How to start a shard process.
#[derive(Clone, Debug)]
pub struct ShardLaunch {
    /// The binary that runs a shard when its first argument is `shard`.
    pub exe: PathBuf,
    pub etcd_endpoints: Vec<String>,
    /// Extra arguments for every shard (e.g. `--compaction-interval 10`).
    pub shard_args: Vec<String>,
    /// The storage contract file every shard reads (`--storage-config`), and what it says.
    pub storage_config: Option<(PathBuf, shardplane_storage::StorageContract)>,
    /// How the router proves itself to the shards when they serve HTTPS (their TLS flags are
    /// in `shard_args`).
    pub shard_tls: Option<Arc<rustls::ClientConfig>>,
}

/// How long a shard has to stop on its own at shutdown before it is killed.
const GRACEFUL_STOP: Duration = Duration::from_secs(5);

/// Starts `k` shards and their supervisors; returns the router's view of them and the
/// supervisors, which end (with their child stopped) once `shutdown` is cancelled.
pub async fn start(launch: ShardLaunch, k: u32, bookmark_interval: Duration, shutdown: CancellationToken) -> std::io::Result<(Arc<RouterState>, Vec<tokio::task::JoinHandle<()>>, Vec<u32>)> {
    let ranges = HashRange::split_even(k);
    let mut started = Vec::new();
    for (i, r) in ranges.iter().enumerate() {
        started.push(spawn_shard(&launch, i, *r).await?);
    }
    // The shards describe themselves; the map they make is published (a new epoch only if the
    // ranges changed owner since the last run) before the router serves.
    let contract = launch.storage_config.as_ref().map(|(_, c)| c.clone()).unwrap_or_default();
    let stores = crate::server::connect_stores(&launch.etcd_endpoints, &contract).await?;
    let shards = RouterState::connect(stores, started.iter().map(|(_, url)| url.clone()).collect(), bookmark_interval, launch.shard_tls.clone()).await?;
    let pids = started.iter().map(|(c, _)| c.id().unwrap_or(0)).collect();
    let supervisors = started
        .into_iter()
        .zip(ranges)
        .enumerate()
        .map(|(i, ((child, _), range))| tokio::spawn(supervise(i, child, range, launch.clone(), shards.clone(), shutdown.clone())))
        .collect();
    Ok((shards, supervisors, pids))
}

/// Starts one shard process and waits for the address it listens on.
async fn spawn_shard(launch: &ShardLaunch, i: usize, range: HashRange) -> std::io::Result<(Child, String)> {
    let mut child = Command::new(&launch.exe)
        .arg("shard")
        .args(["--etcd-endpoints", &launch.etcd_endpoints.join(","), "--listen", "127.0.0.1:0", "--range", &range.to_string(), "--id", &shard_id(i)])
        .args(&launch.shard_args)
        .args(launch.storage_config.iter().flat_map(|(path, _)| [std::ffi::OsStr::new("--storage-config"), path.as_os_str()]))
        .env(shardplane_http::protocol::EXIT_WITH_STDIN, "1")
        .stdin(Stdio::piped()) // held open by the Child; closes when this process dies
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let url = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await? {
            if let Some(addr) = line.strip_prefix("listening on ") {
                let scheme = if launch.shard_tls.is_some() { "https" } else { "http" };
                return Ok(format!("{scheme}://{addr}"));
            }
        }
        Err(std::io::Error::other(format!("shard {i} exited before listening")))
    })
    .await
    .map_err(|_| std::io::Error::other(format!("shard {i} did not listen within 60 s")))??;
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    tracing::info!(shard = i, %url, %range, pid = child.id(), "shard started");
    Ok((child, url))
}

async fn supervise(i: usize, mut child: Child, range: HashRange, launch: ShardLaunch, shards: Arc<RouterState>, shutdown: CancellationToken) {
    // Hold the child's stdin outside the Child: `Child::wait` closes stdin before waiting, and a
    // closed stdin tells the shard its parent is gone.
    let mut _stdin = child.stdin.take();
    loop {
        tokio::select! {
            status = child.wait() => {
                if shutdown.is_cancelled() {
                    return;
                }
                tracing::warn!(shard = i, status = ?status, "shard exited; restarting it on the same range");
                let id = shard_id(i);
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = shutdown.cancelled() => return,
                    }
                    match spawn_shard(&launch, i, range).await {
                        Ok((mut c, url)) => {
                            // Same ranges, new address: the map keeps its epoch.
                            while let Err(e) = shards.set_url(&id, url.clone()).await {
                                tracing::warn!(shard = i, error = %e.message, "publishing the new address failed; retrying");
                                tokio::select! {
                                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                                    _ = shutdown.cancelled() => return,
                                }
                            }
                            _stdin = c.stdin.take();
                            child = c;
                            break;
                        }
                        Err(e) => tracing::warn!(shard = i, error = %e, "restart failed; retrying"),
                    }
                }
            }
            _ = shutdown.cancelled() => {
                // Closing its stdin asks the shard to stop: it ends its watches and revokes its
                // membership lease, so a coordinator never takes it for a live shard that joined
                // (the next run may have fewer shards). One that does not stop in time is killed.
                drop(_stdin.take());
                if tokio::time::timeout(GRACEFUL_STOP, child.wait()).await.is_err() {
                    tracing::warn!(shard = i, "shard did not stop within {GRACEFUL_STOP:?}; killing it");
                }
                // SIGKILL (if still running) and reap: nothing is left running.
                let _ = child.kill().await;
                return;
            }
        }
    }
}

/// The name of the i-th shard of the local topology: stable across restarts, so a restarted
/// shard keeps its ranges and the map its epoch.
fn shard_id(i: usize) -> String {
    format!("shard-{i}")
}

/// A kubeconfig for an HTTPS `server` whose certificate `ca_pem` signs, as the admin whose
/// client certificate and key are `cert_pem` and `key_pem` (each carried inline, base64).
pub fn kubeconfig_tls(server: &str, ca_pem: &[u8], cert_pem: &[u8], key_pem: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: shardplane\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\ncontexts:\n- name: shardplane\n  context:\n    cluster: shardplane\n    user: admin\ncurrent-context: shardplane\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(ca_pem),
        b64(cert_pem),
        b64(key_pem)
    )
}

/// A kubeconfig for `server` (plain HTTP on loopback, no credentials).
pub fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: shardplane\n  cluster:\n    server: {server}\ncontexts:\n- name: shardplane\n  context:\n    cluster: shardplane\n    user: shardplane\ncurrent-context: shardplane\nusers:\n- name: shardplane\n  user: {{}}\n"
    )
}
