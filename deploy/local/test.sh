#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what the tests need, then runs every
# test. Integration tests start their own etcd 3.5 (from .tools/etcd) on free loopback ports with
# data on /dev/shm; nothing else needs to be running.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bash deploy/local/install-deps.sh
# The build needs no protoc (RFC 0009): build every target with any protoc hidden from PATH and
# PROTOC unset, so that a dependency on one cannot creep back in. The test runs below reuse this
# build.
echo "== build with no protoc"
no_protoc_path=$(tr ':' '\n' <<<"$PATH" | while read -r d; do [ -n "$d" ] && [ ! -x "$d/protoc" ] && echo "$d"; done | paste -sd: -)
env -u PROTOC PATH="$no_protoc_path" bash -c '! command -v protoc >/dev/null && cargo build --workspace --all-targets'
# Every binary is built now, with the workspace's features: tests use these rather than build
# one package's copy of them (crates/testkit's workspace_binary).
export SHARDPLANE_PREBUILT=1
# The crate graph README.md shows is cargo metadata's, and has no cycle, dev-dependencies included.
python3 deploy/local/crate-graph.py --check
run() {
  if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --no-fail-fast "$@"
  else
    cargo test --no-fail-fast "$@"
  fi
}
run --workspace
# The single-shard suite (crates/testkit/tests/shard_*.rs) again, unchanged, through a router in
# front of K shards. With nextest the suite is picked by a filter over the workspace build, so
# nothing is built again: `-p` alone unifies dependency features differently and would build a
# second copy of every test binary.
for k in 1 2 4; do
  echo "== shard suite through a router over $k shards"
  if cargo nextest --version >/dev/null 2>&1; then
    SHARDPLANE_ROUTER_SHARDS=$k run --workspace -E 'package(shardplane-testkit) & binary(/^shard_/)'
  else
    for t in crates/testkit/tests/shard_*.rs; do
      SHARDPLANE_ROUTER_SHARDS=$k run -p shardplane-testkit --test "$(basename "$t" .rs)"
    done
  fi
done
# The whole suite again on the router's embedded etcd-compatible store instead of etcd (RFC 0007).
echo "== the workspace's tests on the embedded store"
# The outage drill (RFC 0013) measures priority and fairness, which no store changes; it runs
# once, on etcd, above. So do the tests of an etcd cluster's failures (RFC 0016), which start
# an etcd cluster of their own whatever the store.
if cargo nextest --version >/dev/null 2>&1; then
  SHARDPLANE_STORE=embedded run --workspace -E 'not (binary(outage_drill) | binary(etcd_failover) | binary(multihost) | binary(restore_drill) | binary(etcd_cluster) | test(=shardctl_store_shows_defragments_and_snapshots_a_cluster))'
else
  SHARDPLANE_STORE=embedded run --workspace
fi
# Every benchmark scenario at tiny sizes in the debug build, so none of them rots (its report
# goes to target/bench-smoke/ and measures nothing; benches/RESULTS.md comes from release runs).
echo "== benchmarks, smoke run"
cargo run -q -p shardplane-benches -- all --smoke
# The conformance suite (conformance/README.md) through the router over 4 shards on real etcd;
# it fails on any failure not listed in conformance/expected-failures.txt and rewrites
# conformance/RESULTS.md.
if [ "${PY_CLIENT:-1}" = 1 ]; then
  echo "== conformance suite through a router over 4 shards"
  CONFORMANCE_NO_EVENT_SECONDS=3 python3 conformance/run.py --topology router-4 --per-test-timeout 120
else
  echo "== conformance suite skipped (PY_CLIENT=0: no Python clients installed)"
fi
