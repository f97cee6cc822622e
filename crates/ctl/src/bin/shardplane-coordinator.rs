//! `shardplane-coordinator`: the coordinator as its own process (RFC 0006). Any number may
//! run; one leads at a time (an etcd lease), and each router runs one too unless told not to.

use clap::Parser;
use shardplane_coordinator::rebalance::Config;
use shardplane_coordinator::service::{self, CoordinatorMetrics, ServiceConfig};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
#[command(name = "shardplane-coordinator", about = "Keeps shardplane's range map: membership, reassignment and rebalancing")]
struct Args {
    /// etcd endpoints (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    etcd_endpoints: Vec<String>,
    #[command(flatten)]
    store_tls: shardplane_storage::StoreTlsFlags,
    /// This coordinator's name (default: a random one).
    #[arg(long)]
    id: Option<String>,
    /// Seconds of the leadership lease.
    #[arg(long, default_value_t = 10)]
    lease_ttl_seconds: u64,
    /// Move ranges by load without being asked (above 1.2× the mean, until 1.1×).
    #[arg(long)]
    automatic: bool,
    /// Moves started at once.
    #[arg(long, default_value_t = 1)]
    max_moves: usize,
    /// Serve Prometheus metrics at `http://ADDR/metrics` (moves, epoch, load per shard; the
    /// move metrics count while this coordinator leads).
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into())).init();
    let args = Args::parse();
    if let Err(e) = args.store_tls.install() {
        eprintln!("shardplane-coordinator: {e}");
        return std::process::ExitCode::from(2);
    }
    let storage = match shardplane_storage::Storage::connect(&args.etcd_endpoints).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("shardplane-coordinator: etcd: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        token.cancel();
    });
    let metrics = match args.metrics_listen {
        None => None,
        Some(addr) => {
            let registry = prometheus::Registry::new();
            let metrics = CoordinatorMetrics::new(&registry);
            let listener = match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("shardplane-coordinator: --metrics-listen {addr}: {e}");
                    return std::process::ExitCode::from(1);
                }
            };
            println!("metrics on {}", listener.local_addr().map_or_else(|_| addr.to_string(), |a| a.to_string()));
            let app = axum::Router::new().route("/metrics", axum::routing::get(move || async move { prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap_or_default() }));
            let token = stop.clone();
            tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(token.cancelled_owned()).await });
            Some(metrics)
        }
    };
    let cfg = ServiceConfig {
        id: args.id.unwrap_or_else(|| format!("coordinator-{}", uuid::Uuid::new_v4())),
        ttl: Duration::from_secs(args.lease_ttl_seconds.max(1)),
        period: Duration::from_secs(1),
        plan: Config { automatic: args.automatic, max_moves: args.max_moves.max(1), ..Config::default() },
        metrics,
    };
    service::run(storage, cfg, stop).await;
    std::process::ExitCode::SUCCESS
}
