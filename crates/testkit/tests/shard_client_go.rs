//! client-go's typed clientset (Debian's client-go 0.32, built by this test) against a shard on
//! real etcd. It sends protobuf bodies for creates, updates, a status update and DeleteOptions;
//! the objects the server stored are checked here through the JSON API.


use shardplane_testkit::*;
use serde_json::{json, Value};
use shardplane_keyspace::RangeSet;
use std::path::PathBuf;
use std::process::Command;

/// Builds tests/clientgo into the target directory.
fn build_client() -> PathBuf {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clientgo/main.go");
    build_go_program(&source, &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("clientgo"))
}

#[tokio::test]
async fn client_go_protobuf_writes_store_the_intended_objects() {
    let bin = tokio::task::spawn_blocking(build_client).await.unwrap();
    let etcd = Etcd::start().await;
    let s = TestShard::start(test_config(&etcd, RangeSet::full())).await;
    let url = s.url.clone();
    let out = tokio::task::spawn_blocking(move || Command::new(bin).arg(url).output().unwrap()).await.unwrap();
    assert!(out.status.success(), "client-go run failed: {}", String::from_utf8_lossy(&out.stderr));
    let steps: Vec<Value> = String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let step = |name: &str| steps.iter().find(|s| s["step"] == name).unwrap_or_else(|| panic!("no step {name}"))["object"].clone();

    // ConfigMap: maps with empty values and binary data survive; update moved the RV.
    let created = step("create-configmap");
    assert_eq!(created["data"], json!({"a": "1", "empty": ""}));
    assert_eq!(created["binaryData"], json!({"bin": "AAEC/w=="}));
    assert_eq!(created["metadata"]["annotations"], json!({"note": ""}));
    let updated = step("update-configmap");
    assert_eq!(updated["data"]["a"], "2");
    let rv = |v: &Value| v["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap();
    assert!(rv(&updated) > rv(&created));

    // Deployment: stored as sent; a pointer set to zero stays; generation tracks spec only.
    let (_, d) = s.get("/apis/apps/v1/namespaces/clientgo/deployments/web").await;
    assert_eq!(d["spec"]["replicas"], 0);
    assert_eq!(d["metadata"]["generation"], 2);
    assert_eq!(d["status"]["replicas"], 3);
    // maxUnavailable was not sent: upstream's default fills it in.
    assert_eq!(d["spec"]["strategy"], json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}));
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"],
        json!([{"name": "web", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent", "ports": [{"containerPort": 80, "protocol": "TCP"}], "resources": {}, "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}])
    );
    assert_eq!(d["spec"]["template"]["metadata"]["creationTimestamp"], Value::Null);
    assert_eq!(step("update-deployment")["metadata"]["generation"], 2);
    assert_eq!(step("update-deployment-status")["spec"]["replicas"], 0);

    // Lease: MicroTime keeps microseconds.
    let (_, l) = s.get("/apis/coordination.k8s.io/v1/namespaces/clientgo/leases/lock").await;
    assert_eq!(l["spec"]["holderIdentity"], "me");
    let renew = l["spec"]["renewTime"].as_str().unwrap();
    assert!(renew.len() == "2026-01-01T00:00:00.000000Z".len() && renew.ends_with('Z'), "{renew}");

    // Service: IntOrString as a number; protocol, type and session affinity defaulted.
    let (_, svc) = s.get("/api/v1/namespaces/clientgo/services/web").await;
    assert_eq!(svc["spec"]["ports"], json!([{"port": 80, "protocol": "TCP", "targetPort": 8080}]));
    assert_eq!((&svc["spec"]["type"], &svc["spec"]["sessionAffinity"]), (&json!("ClusterIP"), &json!("None")));

    // DeleteOptions in protobuf: a wrong uid precondition conflicts, the right one deletes.
    assert!(step("delete-configmap-wrong-uid")["error"].as_str().unwrap().contains("Precondition failed: UID in precondition: wrong"));
    assert_eq!(step("get-deleted-configmap")["error"], "configmaps \"cm\" not found");
    assert_eq!(s.get("/api/v1/namespaces/clientgo/configmaps/cm").await.0, 404);
}
