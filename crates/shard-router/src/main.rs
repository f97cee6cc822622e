//! `shard-router`: one Kubernetes endpoint over K shards. With `--shard-urls` it fronts running
//! shards; otherwise it starts K shard processes (this binary run as `shard-router shard ...`).

use clap::Parser;
use shardplane_router::topology::{self, ShardLaunch};
use shardplane_router::{serve_shards, RouterState};
use std::net::SocketAddr;
use std::path::PathBuf;

/// One Kubernetes endpoint over K shardplane shards.
#[derive(Parser, Debug)]
#[command(name = "shard-router", version)]
struct Args {
    /// Address to serve on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Base URLs of running shards, comma-separated; each says which ranges it caches, and
    /// together they must cover the hash space once.
    #[arg(long, value_delimiter = ',')]
    shard_urls: Vec<String>,
    /// etcd endpoints: where the objects and the range map are stored, and what the shards this
    /// router starts use. Without it, the router serves an embedded etcd-compatible store
    /// itself, kept in `--data-dir` (RFC 0007).
    #[arg(long, value_delimiter = ',')]
    etcd_endpoints: Vec<String>,
    /// The store's TLS (for `https://` endpoints): the router and the shards it starts use it.
    #[command(flatten)]
    store_tls: shardplane_storage::StoreTlsFlags,
    /// The store certificate the shards this router starts present instead of the router's
    /// (PEM; with `shardctl store-roles`, one with `CN=shardplane-shard`, which may not write
    /// the range map).
    #[arg(long, requires_all = ["shard_etcd_keyfile", "etcd_cafile"])]
    shard_etcd_certfile: Option<PathBuf>,
    /// Its key (PEM).
    #[arg(long, requires = "shard_etcd_certfile")]
    shard_etcd_keyfile: Option<PathBuf>,
    /// Where the embedded store keeps its data (without `--etcd-endpoints`).
    #[arg(long, default_value = ".shardplane/store")]
    data_dir: PathBuf,
    /// Where the embedded store listens for the shards: `unix:PATH` (a socket only this user
    /// can open; by default `etcd.sock` in `--data-dir`) or `127.0.0.1:PORT` (0: a free port;
    /// plain gRPC that anyone on the machine can reach).
    #[arg(long)]
    store_listen: Option<String>,
    /// The embedded store's space quota in bytes (etcd's flag and default, 2 GiB): past it the
    /// NOSPACE alarm refuses writes until `shardctl recover-space` (RFC 0010).
    #[arg(long, default_value_t = shardplane_kvstore::server::DEFAULT_QUOTA_BYTES)]
    quota_backend_bytes: u64,
    /// Serve only the embedded store (in `--data-dir`, on `--store-listen`, a free loopback
    /// port by default): no router and no shards. A store of its own for the resources a
    /// storage contract puts there, such as the liveness tier (RFC 0015).
    #[arg(long)]
    store_only: bool,
    /// The embedded store makes its writes durable in groups, this often (milliseconds), and
    /// acknowledges each write before (RFC 0015, the liveness tier): a crash loses at most
    /// the writes of the last interval, and the store comes back above every revision it handed
    /// out. 0: each write is durable before it is acknowledged.
    #[arg(long, default_value_t = 0)]
    store_commit_interval_ms: u64,
    /// How many shard processes to start.
    #[arg(long = "shards", default_value_t = 4)]
    shard_count: u32,
    /// Seconds between bookmarks to watch clients that allow them.
    #[arg(long, default_value_t = 60)]
    bookmark_interval: u64,
    /// etcd compaction interval in seconds for the shards this router starts (0: off), as
    /// kube-apiserver's --etcd-compaction-interval.
    #[arg(long, default_value_t = 300)]
    compaction_interval: u64,
    /// How long Events are kept after their last write, by the shards it starts (a Go
    /// duration, as kube-apiserver's `--event-ttl`; RFC 0015).
    #[arg(long, default_value = "1h")]
    event_ttl: String,
    /// Where to write a kubeconfig for this endpoint.
    #[arg(long, default_value = ".shardplane/kubeconfig")]
    kubeconfig: PathBuf,
    /// A storage contract (JSON): resources on an etcd of their own, each with its endpoints
    /// (RFC 0008). The shards this router starts read the same file; shards it fronts
    /// (`--shard-urls`) must be given it too.
    #[arg(long)]
    storage_config: Option<PathBuf>,
    /// Serve HTTPS with the cluster PKI in this directory, made there on first start (a CA, the
    /// serving certificate, the admin's client certificate, the ServiceAccount key; RFC 0012),
    /// and write a kubeconfig that uses them.
    #[arg(long, default_value = ".shardplane/pki")]
    pki_dir: PathBuf,
    /// Serve plain HTTP, with no TLS and no client certificates: anyone who reaches the port is
    /// served (as `system:anonymous`, allowed everything unless `--authorization-mode` says
    /// otherwise). For tests and benchmarks on a machine of one's own, never anything shared.
    #[arg(long, conflicts_with_all = ["tls_cert_file", "client_ca_file"])]
    insecure_plain_http: bool,
    /// The serving certificate (PEM), as kube-apiserver's flag; overrides `--pki-dir`'s.
    #[arg(long, requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// The serving certificate's key (PEM).
    #[arg(long, requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// Client certificates signed by this CA (PEM) are verified and name their user; with
    /// `--pki-dir`, its CA.
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// The lowest TLS version served: VersionTLS12 (the default) or VersionTLS13.
    #[arg(long, default_value = "VersionTLS12")]
    tls_min_version: String,
    /// Bearer tokens and the users they name, as kube-apiserver's file: CSV records
    /// `token,user,uid[,"group1,group2"]`.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// Whether a request without credentials is served, as `system:anonymous`
    /// (`--anonymous-auth=false`: upstream's 401 instead).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    anonymous_auth: bool,
    /// How requests are authorized, in order, as kube-apiserver's flag: AlwaysAllow, AlwaysDeny,
    /// RBAC (RFC 0012), comma-separated. By default RBAC over HTTPS (as kubeadm and k3s set
    /// it), AlwaysAllow with `--insecure-plain-http`.
    #[arg(long)]
    authorization_mode: Option<String>,
    /// The issuer of ServiceAccount tokens (their `iss` claim), as kube-apiserver's flag.
    #[arg(long, default_value = shardplane_identity::service_accounts::DEFAULT_ISSUER)]
    service_account_issuer: String,
    /// The key ServiceAccount tokens are signed with (PEM, ECDSA P-256); with `--pki-dir`, its
    /// `sa.key`. Without either, no tokens are issued or accepted.
    #[arg(long)]
    service_account_signing_key_file: Option<PathBuf>,
    /// More keys tokens are verified with (PEM, ECDSA P-256, public or private; repeatable), as
    /// kube-apiserver's flag: list the previous signing key here while its tokens are still
    /// out. The signing key always verifies.
    #[arg(long)]
    service_account_key_file: Vec<PathBuf>,
    /// The audiences a token must be for to authenticate to this API (comma-separated; the
    /// issuer by default, as upstream).
    #[arg(long, value_delimiter = ',')]
    api_audiences: Vec<String>,
    /// The audit policy (audit.k8s.io/v1 Policy, YAML or JSON), as kube-apiserver's flag: which
    /// requests are recorded, at what level and stages. Needs `--audit-log-path`.
    #[arg(long, requires = "audit_log_path")]
    audit_policy_file: Option<PathBuf>,
    /// Where audit events are appended as JSON lines (`-`: standard output).
    #[arg(long, requires = "audit_policy_file")]
    audit_log_path: Option<PathBuf>,
    /// Megabytes of audit log before it is rotated (0: never).
    #[arg(long, default_value_t = 0)]
    audit_log_maxsize: u64,
    /// Rotated audit logs kept (0: all).
    #[arg(long, default_value_t = 0)]
    audit_log_maxbackup: usize,
    /// Days a rotated audit log is kept (0: forever).
    #[arg(long, default_value_t = 0)]
    audit_log_maxage: u64,
    /// How events reach the log: `blocking` (upstream's default for the log backend: a request
    /// waits while the log's queue is full) or `blocking-strict`, the same here.
    #[arg(long, default_value = "blocking")]
    audit_log_mode: String,
    /// The audit log's format: `json`, upstream's default (`legacy` is not served).
    #[arg(long, default_value = "json")]
    audit_log_format: String,
    /// Priority and fairness (`--enable-priority-and-fairness`, RFC 0013) and the in-flight
    /// bounds, at the router and at the shards it starts.
    #[command(flatten)]
    flow_control: shardplane_flowcontrol::Flags,
    /// The service IP and node-port ranges of the shards it starts (RFC 0014).
    #[command(flatten)]
    service_network: shardplane_shard::service_addresses::flags::ServiceNetworkFlags,
}

/// The store credentials of the shards this router starts: its own, or the shard certificate.
fn shard_store_tls(args: &Args) -> shardplane_storage::StoreTlsFlags {
    let mut flags = args.store_tls.clone();
    if let (Some(cert), Some(key)) = (&args.shard_etcd_certfile, &args.shard_etcd_keyfile) {
        flags.etcd_certfile = Some(cert.clone());
        flags.etcd_keyfile = Some(key.clone());
    }
    flags
}

/// The auditor, when both audit flags are given.
fn auditor(args: &Args) -> Result<Option<std::sync::Arc<shardplane_router::audit::Auditor>>, String> {
    if !matches!(args.audit_log_mode.as_str(), "blocking" | "blocking-strict") {
        return Err(format!("--audit-log-mode {:?}: blocking and blocking-strict are served (batch is not)", args.audit_log_mode));
    }
    if args.audit_log_format != "json" {
        return Err(format!("--audit-log-format {:?}: json is served", args.audit_log_format));
    }
    let (Some(policy), Some(path)) = (&args.audit_policy_file, &args.audit_log_path) else { return Ok(None) };
    let rotation = shardplane_router::audit::log::Rotation { max_size_mb: args.audit_log_maxsize, max_backups: args.audit_log_maxbackup, max_age_days: args.audit_log_maxage };
    shardplane_router::audit::Auditor::start(policy, path, rotation).map(Some)
}

/// ServiceAccount tokens, when there is a key to sign them with.
fn service_account_tokens(args: &Args, pki: Option<&shardplane_identity::pki::Pki>) -> Result<Option<std::sync::Arc<shardplane_identity::service_accounts::Tokens>>, String> {
    let Some(file) = args.service_account_signing_key_file.clone().or_else(|| pki.map(|p| p.service_account_key())) else { return Ok(None) };
    let pem = std::fs::read_to_string(&file).map_err(|e| format!("--service-account-signing-key-file {}: {e}", file.display()))?;
    let mut tokens = shardplane_identity::service_accounts::Tokens::new(&pem, &args.service_account_issuer, args.api_audiences.clone()).map_err(|e| format!("--service-account-signing-key-file {}: {e}", file.display()))?;
    for file in &args.service_account_key_file {
        let text = std::fs::read_to_string(file).map_err(|e| format!("--service-account-key-file {}: {e}", file.display()))?;
        tokens = tokens.with_verification_keys(&text).map_err(|e| format!("--service-account-key-file {}: {e}", file.display()))?;
    }
    Ok(Some(std::sync::Arc::new(tokens)))
}

/// What the router serves TLS with, and the PKI when it made or found one.
fn tls_setup(args: &Args) -> Result<Option<(shardplane_identity::tls::TlsFlags, Option<shardplane_identity::pki::Pki>)>, String> {
    use shardplane_identity::{pki::Pki, tls::TlsFlags};
    if args.insecure_plain_http {
        return Ok(None);
    }
    let ip = if args.listen.ip().is_unspecified() { "127.0.0.1".to_owned() } else { args.listen.ip().to_string() };
    let pki = Pki::ensure(&args.pki_dir, &[&ip, "127.0.0.1", "localhost"]).map_err(|e| format!("--pki-dir: {e}"))?;
    let (cert_file, key_file) = match (&args.tls_cert_file, &args.tls_private_key_file) {
        (Some(c), Some(k)) => (c.clone(), k.clone()),
        _ => (pki.serving_cert(), pki.serving_key()),
    };
    let client_ca_file = Some(args.client_ca_file.clone().unwrap_or_else(|| pki.ca_cert()));
    Ok(Some((TlsFlags { cert_file, key_file, client_ca_file, min_version: args.tls_min_version.clone(), require_client_certificate: false }, Some(pki))))
}

// jemalloc: its heap statistics are each shard's `shardplane_heap_allocated_bytes`.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    shardplane_http::metrics::heap_is_jemalloc();
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("shard") {
        // A child shard process.
        return shardplane_shard::cli::run(std::iter::once("shard-server".to_owned()).chain(argv[2..].iter().cloned()).collect());
    }
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into())).init();
    let args = Args::parse_from(argv);
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime").block_on(run(args))
}

/// Opens the embedded store in `dir` and serves it on `listen` until `stop`; returns its
/// endpoint.
async fn start_embedded_store(args: &Args, listen: &str, stop: tokio_util::sync::CancellationToken) -> Result<(String, tokio::task::JoinHandle<()>), String> {
    let every = (args.store_commit_interval_ms > 0).then(|| std::time::Duration::from_millis(args.store_commit_interval_ms));
    let server = shardplane_kvstore::server::EtcdServer::open_with(&args.data_dir, args.quota_backend_bytes, every).map_err(|e| e.to_string())?;
    let listener = shardplane_kvstore::server::Listener::bind(listen).await.map_err(|e| format!("--store-listen {listen}: {e}"))?;
    let endpoint = listener.endpoint().map_err(|e| e.to_string())?;
    let served = tokio::spawn(async move {
        if let Err(e) = shardplane_kvstore::server::serve(server, listener, stop).await {
            tracing::error!(error = %e, "the embedded store stopped");
        }
    });
    Ok((endpoint, served))
}

/// `--store-only`: the embedded store alone, until a signal stops it (its last group committed).
async fn serve_store_only(args: &Args) -> std::process::ExitCode {
    let shutdown = shardplane_shard::cli::shutdown_on_signal();
    let listen = args.store_listen.clone().unwrap_or_else(|| "127.0.0.1:0".to_owned());
    match start_embedded_store(args, &listen, shutdown).await {
        Ok((endpoint, served)) => {
            println!("listening on {endpoint}");
            let _ = served.await;
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shard-router: embedded store in {}: {e}", args.data_dir.display());
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(mut args: Args) -> std::process::ExitCode {
    if args.store_only {
        return serve_store_only(&args).await;
    }
    // Checked here too, so a bad range stops the router rather than every shard it starts.
    if let Err(e) = args.service_network.network() {
        eprintln!("shard-router: {e}");
        return std::process::ExitCode::from(2);
    }
    let (tls, pki) = match tls_setup(&args).and_then(|s| match s {
        None => Ok((None, None)),
        Some((flags, pki)) => shardplane_identity::tls::server_config(&flags).map(|c| (Some(c), pki)).map_err(|e| e.to_string()),
    }) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("shard-router: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let tokens = match args.token_auth_file.as_deref().map(shardplane_identity::authn::TokenFile::load).transpose() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("shard-router: --token-auth-file {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let service_accounts = match service_account_tokens(&args, pki.as_ref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("shard-router: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let default_mode = if args.insecure_plain_http { "AlwaysAllow" } else { "RBAC" };
    let authorization = match shardplane_router::authz::parse_modes(args.authorization_mode.as_deref().unwrap_or(default_mode)) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("shard-router: --authorization-mode: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Err(e) = args.store_tls.install() {
        eprintln!("shard-router: {e}");
        return std::process::ExitCode::from(2);
    }
    let auditor = match auditor(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("shard-router: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let shutdown = shardplane_shard::cli::shutdown_on_signal();
    let contract = match shardplane_storage::StorageContract::from_flag(args.storage_config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shard-router: --storage-config {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if args.etcd_endpoints.is_empty() {
        if !args.shard_urls.is_empty() {
            eprintln!("shard-router: --shard-urls needs --etcd-endpoints: the shards it fronts must use the same etcd");
            return std::process::ExitCode::from(2);
        }
        let listen = args.store_listen.clone().unwrap_or_else(|| format!("unix:{}", std::path::absolute(&args.data_dir).unwrap_or_else(|_| args.data_dir.clone()).join("etcd.sock").display()));
        match start_embedded_store(&args, &listen, shutdown.clone()).await {
            Ok((endpoint, _)) => {
                println!("embedded store {} at {endpoint}", args.data_dir.display());
                args.etcd_endpoints = vec![endpoint];
            }
            Err(e) => {
                eprintln!("shard-router: embedded store in {}: {e}", args.data_dir.display());
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    // The shards serve the routers alone over HTTPS, when the router serves HTTPS: with the
    // PKI's serving pair, trusting the front proxy's CA, whose client certificate the router
    // presents (RFC 0012, "Inside the cluster").
    let (shard_access_args, shard_tls) = match &pki {
        None => (vec!["--insecure-plain-http".to_owned()], None),
        Some(p) => match shardplane_identity::tls::client_config(&p.ca_cert(), &p.front_proxy_client_cert(), &p.front_proxy_client_key()) {
            Ok(c) => {
                let path = |f: std::path::PathBuf| f.to_string_lossy().into_owned();
                let flags = vec![
                    "--tls-cert-file".to_owned(),
                    path(p.serving_cert()),
                    "--tls-private-key-file".to_owned(),
                    path(p.serving_key()),
                    "--requestheader-client-ca-file".to_owned(),
                    path(p.front_proxy_ca_cert()),
                    "--requestheader-allowed-names".to_owned(),
                    shardplane_identity::pki::FRONT_PROXY_CLIENT.to_owned(),
                ];
                (flags, Some(std::sync::Arc::new(c)))
            }
            Err(e) => {
                eprintln!("shard-router: the front proxy's client certificate: {e}");
                return std::process::ExitCode::from(2);
            }
        },
    };
    let mut supervisors = Vec::new();
    let shards = if args.shard_urls.is_empty() {
        if args.shard_count == 0 {
            eprintln!("shard-router: --shards must be at least 1");
            return std::process::ExitCode::from(2);
        }
        let launch = ShardLaunch { exe: std::env::current_exe().expect("own executable"), etcd_endpoints: args.etcd_endpoints.clone(), shard_args: ["--compaction-interval".to_owned(), args.compaction_interval.to_string(), "--event-ttl".to_owned(), args.event_ttl.clone()].into_iter().chain(args.flow_control.to_args()).chain(args.service_network.to_args()).chain(shard_access_args).chain(shard_store_tls(&args).to_args()).collect(), storage_config: args.storage_config.clone().map(|p| (p, contract.clone())), shard_tls };
        match topology::start(launch, args.shard_count, std::time::Duration::from_secs(args.bookmark_interval.max(1)), shutdown.clone()).await {
            Ok((s, sup, pids)) => {
                supervisors = sup;
                for (i, (pid, url)) in pids.iter().zip(s.urls()).enumerate() {
                    println!("shard {i} pid {pid} {url}");
                }
                s
            }
            Err(e) => {
                eprintln!("shard-router: starting shards: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    } else {
        let connected = match shardplane_router::connect_stores(&args.etcd_endpoints, &contract).await {
            Ok(stores) => RouterState::connect(stores, args.shard_urls.clone(), std::time::Duration::from_secs(args.bookmark_interval.max(1)), shard_tls).await,
            Err(e) => Err(std::io::Error::other(format!("etcd: {e}"))),
        };
        match connected {
            Ok(s) => s,
            Err(e) => {
                eprintln!("shard-router: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    };
    let kubeconfig = args.kubeconfig.clone();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let clients = shardplane_router::ClientFacing { tls, authenticator: std::sync::Arc::new(shardplane_identity::authn::Authenticator { tokens, service_accounts, anonymous: args.anonymous_auth }), authorization, auditor, flow_control: args.flow_control };
    let result = serve_shards(shards, args.listen, clients, shutdown.clone(), move |addr| {
        let server = format!("{scheme}://{addr}");
        if let Some(dir) = kubeconfig.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = std::fs::create_dir_all(dir);
        }
        let text = match &pki {
            Some(p) => match (std::fs::read(p.ca_cert()), std::fs::read(p.admin_cert()), std::fs::read(p.admin_key())) {
                (Ok(ca), Ok(cert), Ok(key)) => topology::kubeconfig_tls(&server, &ca, &cert, &key),
                _ => topology::kubeconfig(&server),
            },
            None => topology::kubeconfig(&server),
        };
        // The kubeconfig carries the admin's key when there is one: readable by its owner only.
        let written = shardplane_identity::pki::write_private(&kubeconfig, text.as_bytes()).map_err(|e| e.to_string());
        match written {
            Ok(()) => println!("listening on {addr}\nkubectl --kubeconfig {} get namespaces", kubeconfig.display()),
            Err(e) => println!("listening on {addr} (kubeconfig not written: {e})"),
        }
    })
    .await;
    shutdown.cancel();
    for s in supervisors {
        let _ = s.await;
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shard-router: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
