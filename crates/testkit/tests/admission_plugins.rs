//! The admission plugins that read other objects, through a router over two shards: each
//! class is stored on whichever shard owns its key and must be seen by the shard that admits
//! the pod, claim or ingress (RFC 0011, "Admission plugins"). Every assertion is on what a
//! client reads back, as upstream answers it.

use serde_json::{json, Value};
use shardplane_testkit::*;
use std::time::Duration;

async fn cluster() -> (Etcd, Vec<TestShard>, TestShard) {
    routed_cluster(2).await
}

fn pod(name: &str, spec_extra: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "nginx"}]});
    for (k, v) in spec_extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

const PODS: &str = "/api/v1/namespaces/default/pods";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_is_decided_by_the_pods_class() {
    let (_etcd, _shards, router) = cluster().await;
    // No class and no default class: priority 0, upstream's preemption policy.
    let (code, plain) = router.post(PODS, &pod("plain", json!({}))).await;
    assert_eq!(code, 201, "{plain}");
    assert_eq!((plain["spec"]["priority"].clone(), plain["spec"]["preemptionPolicy"].clone()), (json!(0), json!("PreemptLowerPriority")));
    // A system class (created at start) and a user's class, on any shard.
    let (code, critical) = router.post(PODS, &pod("critical", json!({"priorityClassName": "system-node-critical"}))).await;
    assert_eq!((code, critical["spec"]["priority"].clone()), (201, json!(2_000_001_000)), "{critical}");
    let (code, _) = router.post("/apis/scheduling.k8s.io/v1/priorityclasses", &json!({"metadata": {"name": "batch-low"}, "value": 10, "preemptionPolicy": "Never"})).await;
    assert_eq!(code, 201);
    // Named right after it was created: found even before the informer hears of it.
    let (code, low) = router.post(PODS, &pod("low", json!({"priorityClassName": "batch-low"}))).await;
    assert_eq!((code, low["spec"]["priority"].clone(), low["spec"]["preemptionPolicy"].clone()), (201, json!(10), json!("Never")), "{low}");
    let (code, missing) = router.post(PODS, &pod("missing", json!({"priorityClassName": "nope"}))).await;
    assert_eq!((code, missing["reason"].as_str(), missing["message"].as_str()), (403, Some("Forbidden"), Some("pods \"missing\" is forbidden: no PriorityClass with name nope was found")));
    let (code, given) = router.post(PODS, &pod("given", json!({"priorityClassName": "batch-low", "priority": 5}))).await;
    assert_eq!(code, 403, "{given}");
    assert_eq!(given["message"], "pods \"given\" is forbidden: the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 10 from the given PriorityClass name");
    // A global default applies to pods that name none; only one may exist.
    let (code, _) = router.post("/apis/scheduling.k8s.io/v1/priorityclasses", &json!({"metadata": {"name": "base"}, "value": 100, "globalDefault": true})).await;
    assert_eq!(code, 201);
    let (code, second) = router.post("/apis/scheduling.k8s.io/v1/priorityclasses", &json!({"metadata": {"name": "base-2"}, "value": 200, "globalDefault": true})).await;
    assert_eq!((code, second["message"].as_str()), (403, Some("priorityclasses.scheduling.k8s.io \"base-2\" is forbidden: PriorityClass base is already marked as default. Only one default can exist")));
    wait_for(Duration::from_secs(10), || async {
        let name = format!("defaulted-{}", uuid::Uuid::new_v4().simple());
        let (_, p) = router.post(PODS, &pod(&name, json!({}))).await;
        p["spec"]["priority"] == 100 && p["spec"]["priorityClassName"] == "base"
    })
    .await;
    // An update that leaves priority out keeps it.
    let (_, mut current) = router.get(&format!("{PODS}/low")).await;
    current["spec"].as_object_mut().unwrap().remove("priority");
    current["metadata"]["labels"] = json!({"a": "b"});
    let (code, updated) = router.put(&format!("{PODS}/low"), &current).await;
    assert_eq!((code, updated["spec"]["priority"].clone()), (200, json!(10)), "{updated}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_classes_and_runtime_classes_are_applied() {
    let (_etcd, _shards, router) = cluster().await;
    // Without a default class, a claim keeps naming none.
    let claim = |name: &str| json!({"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    let (code, before) = router.post("/api/v1/namespaces/default/persistentvolumeclaims", &claim("before")).await;
    assert_eq!(code, 201);
    assert!(before["spec"].get("storageClassName").is_none(), "{before}");
    for (name, default) in [("slow", "false"), ("fast", "true")] {
        let sc = json!({"metadata": {"name": name, "annotations": {"storageclass.kubernetes.io/is-default-class": default}}, "provisioner": "example.com/disk"});
        assert_eq!(router.post("/apis/storage.k8s.io/v1/storageclasses", &sc).await.0, 201);
    }
    wait_for(Duration::from_secs(10), || async {
        let (_, c) = router.post("/api/v1/namespaces/default/persistentvolumeclaims", &claim(&format!("c-{}", uuid::Uuid::new_v4().simple()))).await;
        c["spec"]["storageClassName"] == "fast"
    })
    .await;
    let mut explicit = claim("explicit");
    explicit["spec"]["storageClassName"] = json!("");
    let (_, explicit) = router.post("/api/v1/namespaces/default/persistentvolumeclaims", &explicit).await;
    assert_eq!(explicit["spec"]["storageClassName"], "", "an empty class name means none, and is kept");

    let ic = json!({"metadata": {"name": "nginx", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}}, "spec": {"controller": "k8s.io/ingress-nginx"}});
    assert_eq!(router.post("/apis/networking.k8s.io/v1/ingressclasses", &ic).await.0, 201);
    let ingress = |name: &str| json!({"metadata": {"name": name}, "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}});
    wait_for(Duration::from_secs(10), || async {
        let (_, i) = router.post("/apis/networking.k8s.io/v1/namespaces/default/ingresses", &ingress(&format!("i-{}", uuid::Uuid::new_v4().simple()))).await;
        i["spec"]["ingressClassName"] == "nginx"
    })
    .await;

    let rc = json!({"metadata": {"name": "kata"}, "handler": "kata", "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}}, "scheduling": {"nodeSelector": {"sandbox": "kata"}}});
    assert_eq!(router.post("/apis/node.k8s.io/v1/runtimeclasses", &rc).await.0, 201);
    let (code, sandboxed) = router.post(PODS, &pod("sandboxed", json!({"runtimeClassName": "kata"}))).await;
    assert_eq!(code, 201, "{sandboxed}");
    assert_eq!((sandboxed["spec"]["overhead"].clone(), sandboxed["spec"]["nodeSelector"].clone()), (json!({"cpu": "250m", "memory": "120Mi"}), json!({"sandbox": "kata"})));
    let (code, missing) = router.post(PODS, &pod("no-runtime", json!({"runtimeClassName": "gvisor"}))).await;
    assert_eq!((code, missing["message"].as_str()), (403, Some("pods \"no-runtime\" is forbidden: pod rejected: RuntimeClass \"gvisor\" not found")));
    let (code, conflict) = router.post(PODS, &pod("conflict", json!({"runtimeClassName": "kata", "nodeSelector": {"sandbox": "none"}}))).await;
    assert_eq!(code, 403, "{conflict}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_node_is_tainted_not_ready() {
    let (_etcd, _shards, router) = cluster().await;
    let (code, node) = router.post("/api/v1/nodes", &json!({"metadata": {"name": "n1"}})).await;
    assert_eq!(code, 201);
    assert_eq!(node["spec"]["taints"], json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_ranges_default_and_bound_what_a_namespace_runs() {
    let (_etcd, _shards, router) = cluster().await;
    router.namespace("limited").await;
    let lr = json!({"metadata": {"name": "bounds"}, "spec": {"limits": [
        {"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"}, "defaultRequest": {"cpu": "100m"}, "max": {"cpu": "1"}},
        {"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}},
    ]}});
    assert_eq!(router.post("/api/v1/namespaces/limited/limitranges", &lr).await.0, 201);
    let pods = "/api/v1/namespaces/limited/pods";
    // The range lives on whichever shard owns its key; the pod's shard hears of it.
    wait_for(Duration::from_secs(10), || async {
        let (_, p) = router.post(pods, &pod(&format!("p-{}", uuid::Uuid::new_v4().simple()), json!({}))).await;
        // The range's own defaults gave it a memory request equal to its default limit.
        p["spec"]["containers"][0]["resources"] == json!({"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "256Mi"}})
            && p["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == "LimitRanger plugin set: cpu, memory request for container c; cpu, memory limit for container c"
    })
    .await;
    let (code, big) = router.post(pods, &pod("big", json!({"containers": [{"name": "c", "image": "nginx", "resources": {"limits": {"cpu": "2"}}}]}))).await;
    assert_eq!((code, big["message"].as_str()), (403, Some("pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2")));
    let claim = json!({"metadata": {"name": "small"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "500Mi"}}}});
    let (code, small) = router.post("/api/v1/namespaces/limited/persistentvolumeclaims", &claim).await;
    assert_eq!((code, small["message"].as_str()), (403, Some("persistentvolumeclaims \"small\" is forbidden: minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi")));
    // Other namespaces are not bound by it.
    let (code, free) = router.post(PODS, &pod("free", json!({"containers": [{"name": "c", "image": "nginx", "resources": {"limits": {"cpu": "2"}}}]}))).await;
    assert_eq!(code, 201, "{free}");
}

/// The ServiceAccount plugin, with the `default` accounts the shards keep: a new namespace has
/// its account before its create is answered, a pod runs as `default` and every container mounts
/// the API access volume, a missing account is upstream's 403, an account's opt-out and pull
/// secrets apply, and a deleted `default` account comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_as_a_service_account_and_mount_its_token() {
    let (_etcd, _shards, router) = cluster().await;
    wait_for(Duration::from_secs(10), || async { router.get("/api/v1/namespaces/default/serviceaccounts/default").await.0 == 200 }).await;
    router.namespace("robots").await;
    let (code, account) = router.get("/api/v1/namespaces/robots/serviceaccounts/default").await;
    assert_eq!(code, 200, "created with the namespace: {account}");
    let pods = "/api/v1/namespaces/robots/pods";
    let spec = json!({"initContainers": [{"name": "init", "image": "busybox"}], "containers": [{"name": "c", "image": "nginx"}]});
    let (code, p) = router.post(pods, &json!({"metadata": {"name": "web"}, "spec": spec})).await;
    assert_eq!(code, 201, "{p}");
    assert_eq!((p["spec"]["serviceAccountName"].as_str(), p["spec"]["serviceAccount"].as_str()), (Some("default"), Some("default")));
    let volume = p["spec"]["volumes"][0]["name"].as_str().unwrap().to_owned();
    assert!(volume.starts_with("kube-api-access-") && volume.len() == "kube-api-access-".len() + 5, "{volume}");
    assert_eq!(p["spec"]["volumes"][0]["projected"]["sources"][1]["configMap"]["name"], "kube-root-ca.crt");
    for c in ["initContainers", "containers"] {
        assert_eq!(p["spec"][c][0]["volumeMounts"], json!([{"name": volume, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]), "{c}");
    }

    let (code, body) = router.post(pods, &json!({"metadata": {"name": "lost"}, "spec": {"serviceAccountName": "robot", "containers": [{"name": "c", "image": "nginx"}]}})).await;
    assert_eq!((code, body["reason"].as_str()), (403, Some("Forbidden")));
    assert_eq!(body["message"], "pods \"lost\" is forbidden: error looking up service account robots/robot: serviceaccount \"robot\" not found");

    let robot = json!({"metadata": {"name": "robot"}, "automountServiceAccountToken": false, "imagePullSecrets": [{"name": "registry"}]});
    assert_eq!(router.post("/api/v1/namespaces/robots/serviceaccounts", &robot).await.0, 201);
    let (code, p) = router.post(pods, &json!({"metadata": {"name": "quiet"}, "spec": {"serviceAccountName": "robot", "containers": [{"name": "c", "image": "nginx"}]}})).await;
    assert_eq!(code, 201, "{p}");
    assert!(p["spec"].get("volumes").is_none() && p["spec"]["containers"][0].get("volumeMounts").is_none_or(|m| m == &json!([])), "the account opted out: {p}");
    assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "registry"}]));

    // A deleted default account is created again (a new object).
    let old_uid = account["metadata"]["uid"].clone();
    let (code, _) = router.send("DELETE", "/api/v1/namespaces/robots/serviceaccounts/default", "application/json", "").await;
    assert_eq!(code, 200);
    wait_for(Duration::from_secs(10), || async {
        let (code, again) = router.get("/api/v1/namespaces/robots/serviceaccounts/default").await;
        code == 200 && again["metadata"]["uid"] != old_uid
    })
    .await;
}
