//! The `shard-server` command line, as a library so that `shard-router` can run shards as child
//! processes of its own binary (`shard-router shard ...`) with no separate build step.

use clap::Parser;
use shardplane_keyspace::{HashRange, RangeSet};
use crate::{serve, ShardConfig};
use shardplane_storage::StorageContract;
use shardplane_watchcache::CacheConfig;
use shardplane_http::protocol::EXIT_WITH_STDIN;
use std::net::SocketAddr;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a shard whose parent is gone may take to shut down before it exits outright.
const ORPHAN_GRACE: Duration = Duration::from_secs(5);

/// `--event-ttl`: a positive Go duration.
fn parse_ttl(s: &str) -> Result<Duration, String> {
    match shardplane_apimachinery::go_duration::parse(s)? {
        shardplane_apimachinery::go_duration::GoDuration::NonNegative(d) if d >= Duration::from_secs(1) => Ok(d),
        _ => Err(format!("{s:?}: must be at least 1s")),
    }
}

/// One shardplane shard: the Kubernetes API for the object keys in its hash ranges.
#[derive(Parser, Debug)]
#[command(name = "shard-server", version)]
struct Args {
    /// etcd endpoints, comma-separated.
    #[arg(long, default_value = "http://127.0.0.1:2379", value_delimiter = ',')]
    etcd_endpoints: Vec<String>,
    #[command(flatten)]
    store_tls: shardplane_storage::StoreTlsFlags,
    /// Address to serve on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Serve plain HTTP to anyone who reaches the port, the router's internal headers believed
    /// from any caller. For tests and benchmarks on a machine of one's own, never anything
    /// shared; otherwise `--tls-cert-file` is needed (RFC 0012).
    #[arg(long, conflicts_with_all = ["tls_cert_file", "requestheader_client_ca_file", "client_ca_file", "token_auth_file"])]
    insecure_plain_http: bool,
    /// The serving certificate (PEM), as kube-apiserver's flag.
    #[arg(long, requires = "tls_private_key_file")]
    tls_cert_file: Option<std::path::PathBuf>,
    /// The serving certificate's key (PEM).
    #[arg(long, requires = "tls_cert_file")]
    tls_private_key_file: Option<std::path::PathBuf>,
    /// The lowest TLS version served: VersionTLS12 (the default) or VersionTLS13.
    #[arg(long, default_value = "VersionTLS12")]
    tls_min_version: String,
    /// Serve the routers alone: every connection must present a client certificate this CA
    /// (the front proxy's) signed, and only then are the user it names (`X-Remote-User`,
    /// `X-Remote-Group`, …) and the router's other headers believed; as kube-apiserver's flag.
    #[arg(long, requires = "tls_cert_file", conflicts_with_all = ["client_ca_file", "token_auth_file"])]
    requestheader_client_ca_file: Option<std::path::PathBuf>,
    /// The common names a front-proxy certificate may have (comma-separated; any when empty).
    #[arg(long, value_delimiter = ',', requires = "requestheader_client_ca_file")]
    requestheader_allowed_names: Vec<String>,
    /// A standalone shard's clients: certificates this CA signed name their user (CN) and
    /// groups (O).
    #[arg(long, requires = "tls_cert_file")]
    client_ca_file: Option<std::path::PathBuf>,
    /// A standalone shard's clients: bearer tokens and their users, as kube-apiserver's file
    /// (`token,user,uid[,"group1,group2"]`).
    #[arg(long, requires = "tls_cert_file")]
    token_auth_file: Option<std::path::PathBuf>,
    /// Hash range owned, `0xLO-0xHI` (16 hex digits; the end may be 0x10000000000000000). Repeatable.
    #[arg(long = "range")]
    ranges: Vec<HashRange>,
    /// Start with no range (a shard joining a running cluster): it holds what the coordinator
    /// moves to it (`shardctl add`, RFC 0006).
    #[arg(long, conflicts_with = "ranges")]
    empty: bool,
    /// Own range i of K equal ranges, i being the number that ends `--id` (`shard-2` with
    /// `--range-of-ordinal 4` takes the third quarter): a StatefulSet's pods, whose names end in
    /// their ordinal, cover the hash space once between them (RFC 0016).
    #[arg(long, value_name = "K", conflicts_with_all = ["ranges", "empty"])]
    range_of_ordinal: Option<u32>,
    /// Ignore the range map and stay out of membership: own exactly `--range` (a single shard
    /// on its own, or a baseline beside a cluster on the same etcd).
    #[arg(long)]
    standalone: bool,
    /// Shard name in logs and metrics.
    #[arg(long, default_value = "shard-0")]
    id: String,
    /// etcd compaction interval in seconds, as kube-apiserver's --etcd-compaction-interval (0: off).
    #[arg(long, default_value_t = 300)]
    compaction_interval: u64,
    /// How long Events are kept after their last write, as kube-apiserver's flag (a Go
    /// duration: `1h`, `90m`, `30s`); they are stored on shared etcd leases (RFC 0015).
    #[arg(long, default_value = "1h", value_parser = parse_ttl)]
    event_ttl: Duration,
    /// Seconds between watch bookmarks to clients that allow them.
    #[arg(long, default_value_t = 60)]
    bookmark_interval: u64,
    /// Seconds of watch history kept (at least 75).
    #[arg(long, default_value_t = 150)]
    watch_history_seconds: u64,
    /// Most events kept in each watch cache's history.
    #[arg(long, default_value_t = 100_000)]
    watch_history_events: usize,
    /// Events buffered per watcher before a slow watcher is closed.
    #[arg(long, default_value_t = 1024)]
    watcher_buffer: usize,
    /// Priority and fairness (`--enable-priority-and-fairness`) and the in-flight bounds.
    #[command(flatten)]
    flow_control: shardplane_flowcontrol::Flags,
    /// The service IP and node-port ranges (RFC 0014).
    #[command(flatten)]
    service_network: crate::service_addresses::flags::ServiceNetworkFlags,
    /// Seconds: a watch without timeoutSeconds runs a random time between this and twice this.
    #[arg(long, default_value_t = 1800)]
    min_request_timeout: u64,
    /// Seconds of the membership lease: the coordinator takes a shard that stops renewing it
    /// for dead this long after (RFC 0006).
    #[arg(long, default_value_t = 10)]
    member_ttl_seconds: u64,
    /// A storage contract (JSON): resources that live on an etcd of their own, each with its
    /// endpoints (RFC 0008). Every shard and router of a cluster must read the same file.
    #[arg(long)]
    storage_config: Option<std::path::PathBuf>,
}

/// Who may reach the shard, from the flags: the routers alone (`--requestheader-client-ca-file`),
/// clients it authenticates, or (`--insecure-plain-http`) anyone over plain HTTP.
fn access(args: &Args) -> Result<crate::access::Access, String> {
    use crate::access::Access;
    use shardplane_identity::tls::{server_config, TlsFlags};
    if args.insecure_plain_http {
        return Ok(Access::Insecure);
    }
    let (Some(cert_file), Some(key_file)) = (args.tls_cert_file.clone(), args.tls_private_key_file.clone()) else {
        return Err("a shard serves HTTPS: give --tls-cert-file and --tls-private-key-file (with --requestheader-client-ca-file behind a router), or --insecure-plain-http".into());
    };
    let flags = |client_ca_file, require_client_certificate| TlsFlags { cert_file: cert_file.clone(), key_file: key_file.clone(), client_ca_file, min_version: args.tls_min_version.clone(), require_client_certificate };
    if let Some(ca) = &args.requestheader_client_ca_file {
        let tls = server_config(&flags(Some(ca.clone()), true)).map_err(|e| e.to_string())?;
        return Ok(Access::FrontProxy { tls, allowed_names: args.requestheader_allowed_names.clone() });
    }
    let tokens = args.token_auth_file.as_deref().map(shardplane_identity::authn::TokenFile::load).transpose().map_err(|e| format!("--token-auth-file {e}"))?;
    let tls = server_config(&flags(args.client_ca_file.clone(), false)).map_err(|e| e.to_string())?;
    let authenticator = shardplane_identity::authn::Authenticator { tokens, service_accounts: None, anonymous: true };
    Ok(Access::Clients { tls, authenticator: std::sync::Arc::new(authenticator) })
}

/// A token cancelled on SIGINT (Ctrl-C) or SIGTERM. Call inside a tokio runtime.
pub fn shutdown_on_signal() -> CancellationToken {
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        token.cancel();
    });
    shutdown
}

/// Runs a shard from command-line arguments (the first is the program name) until SIGINT/SIGTERM.
pub fn run(argv: Vec<String>) -> std::process::ExitCode {
    let args = match Args::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into())).try_init();
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime").block_on(run_async(args))
}

async fn run_async(args: Args) -> std::process::ExitCode {
    let ranges = match (args.empty, args.ranges.is_empty(), args.range_of_ordinal) {
        (_, _, Some(k)) => ordinal_range(&args.id, k),
        (true, _, None) => Ok(RangeSet::default()),
        (false, true, None) => Ok(RangeSet::full()),
        (false, false, None) => RangeSet::from_disjoint(args.ranges.clone()).map_err(|e| e.to_string()),
    };
    let ranges = match ranges {
        Ok(r) => r,
        Err(e) => {
            eprintln!("shard-server: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let service_network = match args.service_network.network() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("shard-server: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let storage_contract = match StorageContract::from_flag(args.storage_config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shard-server: --storage-config {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Err(e) = args.store_tls.install() {
        eprintln!("shard-server: {e}");
        return std::process::ExitCode::from(2);
    }
    let access = match access(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("shard-server: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let config = ShardConfig {
        id: args.id,
        etcd_endpoints: args.etcd_endpoints,
        listen: args.listen,
        ranges,
        cache: CacheConfig {
            history_max_events: args.watch_history_events,
            history_window: Duration::from_secs(args.watch_history_seconds.max(75)),
            watcher_buffer: args.watcher_buffer,
        },
        compaction_interval: (args.compaction_interval > 0).then(|| Duration::from_secs(args.compaction_interval)),
        bookmark_interval: Duration::from_secs(args.bookmark_interval.max(1)),
        namespace_sweep: Duration::from_secs(1),
        min_request_timeout: Duration::from_secs(args.min_request_timeout.max(1)),
        flow_control: args.flow_control,
        member_ttl: Duration::from_secs(args.member_ttl_seconds.max(1)),
        standalone: args.standalone,
        storage_contract,
        access,
        service_network,
        address_repair: crate::service_addresses::repair::PERIOD,
        quota_sync: crate::resource_quota::controller::PERIOD,
        disruption_sync: crate::disruption::PERIOD,
        event_ttl: args.event_ttl,
    };
    let shutdown = shutdown_on_signal();
    if std::env::var_os(EXIT_WITH_STDIN).is_some() {
        // Started by a parent that holds our stdin open: when it dies, even by SIGKILL, the pipe
        // closes and this shard stops too. Its death is also seen as this process being given
        // another parent, in case the pipe stays open (a child that inherited the other end).
        let parent_gone = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (token, gone) = (shutdown.clone(), parent_gone.clone());
        tokio::spawn(async move {
            let mut stdin = tokio::io::stdin();
            let mut buf = [0u8; 64];
            while matches!(tokio::io::AsyncReadExt::read(&mut stdin, &mut buf).await, Ok(n) if n > 0) {}
            gone.store(true, std::sync::atomic::Ordering::SeqCst);
            token.cancel();
        });
        // The watchdog is a thread of its own, not a task: a runtime stuck shutting down (an
        // orphan was once seen idle for minutes after its router was SIGKILLed) cannot hold it.
        let (token, parent) = (shutdown.clone(), std::os::unix::process::parent_id());
        std::thread::spawn(move || {
            while std::os::unix::process::parent_id() == parent && !parent_gone.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(500));
            }
            tracing::warn!("parent process is gone; shutting down");
            token.cancel();
            // A shard still starting (its store unreachable, say: an embedded store dies with
            // the parent) may not reach a point that sees the token; it must not outlive the
            // parent either.
            std::thread::sleep(ORPHAN_GRACE);
            tracing::warn!("still running {ORPHAN_GRACE:?} after the parent went; exiting");
            std::process::exit(1);
        });
    }
    match serve(config, shutdown, |addr| println!("listening on {addr}")).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shard-server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Range i of `k` equal ranges, i the number ending `id` (`--range-of-ordinal`).
fn ordinal_range(id: &str, k: u32) -> Result<RangeSet, String> {
    let ordinal = id.rsplit('-').next().and_then(|n| n.parse::<u32>().ok()).ok_or_else(|| format!("--range-of-ordinal: --id {id:?} does not end in -N"))?;
    if k == 0 || ordinal >= k {
        return Err(format!("--range-of-ordinal {k}: --id {id:?} names ordinal {ordinal}, outside 0..{k}"));
    }
    RangeSet::from_disjoint(vec![HashRange::split_even(k)[ordinal as usize]]).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statefulset_ordinal_names_its_share_of_the_hash_space() {
        let k = 4;
        let all: Vec<RangeSet> = (0..k).map(|i| ordinal_range(&format!("shard-{i}"), k).unwrap()).collect();
        for (i, r) in all.iter().enumerate() {
            assert_eq!(r.ranges(), &[HashRange::split_even(k)[i]]);
        }
        assert!(ordinal_range("shard-4", 4).unwrap_err().contains("outside 0..4"));
        assert!(ordinal_range("shard", 4).unwrap_err().contains("does not end in -N"));
        assert!(ordinal_range("shard-0", 0).is_err());
    }
}
