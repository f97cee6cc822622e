//! `shard-server`: one shard process (see `shardplane_shard::cli`).

// jemalloc: its heap statistics are the shard's `shardplane_heap_allocated_bytes`.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    shardplane_http::metrics::heap_is_jemalloc();
    shardplane_shard::cli::run(std::env::args().collect())
}
