//! The Kubernetes manifests in deploy/kubernetes (RFC 0016) pass a server-side dry run against
//! shardplane itself, through its router (`kubectl apply --dry-run=server`): every object is
//! decoded, defaulted, validated and admitted as a real apply would be, and nothing is stored.
//! The namespace is made first for real (a dry run of the Namespace does not make it, and the
//! objects in it would be refused).

use shardplane_testkit::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_manifests_pass_a_server_side_dry_run_against_shardplane() {
    let (_etcd, _shards, router) = routed_cluster(2).await;
    let kubectl = Kubectl { bin: kubectl_path("1.33"), server: router.url.clone(), home: Default::default() };
    kubectl.ok(&["create", "namespace", "shardplane"], None);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes");
    let out = kubectl.ok(&["apply", "--dry-run=server", "-f", dir.to_str().unwrap()], None);
    let mut applied: Vec<&str> = out.lines().collect();
    applied.sort();
    assert_eq!(
        applied,
        [
            "configmap/shardplane created (server dry run)",
            "deployment.apps/coordinator created (server dry run)",
            "deployment.apps/router created (server dry run)",
            "namespace/shardplane configured (server dry run)",
            "poddisruptionbudget.policy/router created (server dry run)",
            "poddisruptionbudget.policy/shard created (server dry run)",
            "service/shardplane created (server dry run)",
            "service/shards created (server dry run)",
            "statefulset.apps/shard created (server dry run)",
        ],
        "{out}"
    );
    // Nothing was stored.
    assert_eq!(kubectl.ok(&["get", "statefulsets,deployments,services,configmaps,poddisruptionbudgets", "-n", "shardplane", "-o", "name"], None).lines().filter(|l| !l.starts_with("configmap/kube-root-ca.crt")).count(), 0);
}
