//! The PyPI `kubernetes` client (installed by deploy/local/install-deps.sh), unmodified, against
//! a shard on real etcd: tests/python/client_scenario.py makes the assertions.


use shardplane_testkit::*;
use shardplane_keyspace::RangeSet;

#[tokio::test]
async fn pypi_kubernetes_client_scenario() {
    let etcd = Etcd::start().await;
    let s = TestShard::start(test_config(&etcd, RangeSet::full())).await;
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/client_scenario.py");
    let url = s.url.clone();
    let out = tokio::task::spawn_blocking(move || run_python(&script, &[&url])).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "python client scenario failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("python client scenario passed"));
}
