//! Workload objects as their controllers would make them, for tests of what acts on owner
//! references (no workload controller runs in a test cluster).

use crate::TestShard;
use serde_json::{json, Value};

/// An owner reference to `obj` (of `kind` in `api_version`), as a controller sets it.
pub fn owner_ref(kind: &str, api_version: &str, obj: &Value, block: bool) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"], "controller": true, "blockOwnerDeletion": block})
}

/// A pod template labelled `app`.
pub fn pod_template(app: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
}

/// A Deployment `name` in `ns` with one ReplicaSet (`{name}-rs`) and two Pods (`{name}-rs-0`,
/// `-1`), each owned as the controllers own them (blocking their owner's deletion); returns the
/// Deployment.
pub async fn deployment_family(router: &TestShard, ns: &str, name: &str) -> Value {
    let (code, d) = router.post(&format!("/apis/apps/v1/namespaces/{ns}/deployments"), &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": name}}, "template": pod_template(name)}})).await;
    assert_eq!(code, 201, "{d}");
    let (code, rs) = router.post(&format!("/apis/apps/v1/namespaces/{ns}/replicasets"), &json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": format!("{name}-rs"), "ownerReferences": [owner_ref("Deployment", "apps/v1", &d, true)]}, "spec": {"selector": {"matchLabels": {"app": name}}, "template": pod_template(name)}})).await;
    assert_eq!(code, 201, "{rs}");
    for i in 0..2 {
        let mut pod = pod_template(name);
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        pod["metadata"]["name"] = json!(format!("{name}-rs-{i}"));
        pod["metadata"]["ownerReferences"] = json!([owner_ref("ReplicaSet", "apps/v1", &rs, true)]);
        let (code, p) = router.post(&format!("/api/v1/namespaces/{ns}/pods"), &pod).await;
        assert_eq!(code, 201, "{p}");
    }
    d
}
