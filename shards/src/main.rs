//! `shard-server`: one shard process (see `shardplane_shard::cli`).

fn main() -> std::process::ExitCode {
    shardplane_shard::cli::run(std::env::args().collect())
}
