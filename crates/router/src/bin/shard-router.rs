//! `shard-router`: one Kubernetes endpoint over K shards.

use clap::Parser;
use shardplane_router::{serve, RouterConfig};
use std::net::SocketAddr;
use tokio_util::sync::CancellationToken;

/// One Kubernetes endpoint over K shardplane shards.
#[derive(Parser, Debug)]
#[command(name = "shard-router", version)]
struct Args {
    /// Address to serve on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Base URLs of running shards, comma-separated; shard i must own the i-th of K equal ranges.
    #[arg(long, value_delimiter = ',')]
    shard_urls: Vec<String>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into())).init();
    let args = Args::parse();
    if args.shard_urls.is_empty() {
        eprintln!("shard-router: --shard-urls is required (starting a local topology on --etcd-endpoints is not implemented yet)");
        return std::process::ExitCode::from(2);
    }
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        token.cancel();
    });
    match serve(RouterConfig { listen: args.listen, shard_urls: args.shard_urls }, shutdown, |a| println!("listening on {a}")).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shard-router: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
