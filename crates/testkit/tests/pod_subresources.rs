//! A pod's kubelet subresources and ephemeral containers through a router over two shards
//! (the pod and its node on whichever shards own them), answered as upstream answers them
//! when no kubelet can be reached (RFC 0011).

use serde_json::{json, Value};
use shardplane_testkit::*;

const PODS: &str = "/api/v1/namespaces/default/pods";

async fn text(router: &TestShard, path: &str, method: reqwest::Method) -> (u16, String) {
    let r = client().request(method, format!("{}{path}", router.url)).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_subresources_and_ephemeral_containers() {
    let (_etcd, _shards, router) = routed_cluster(2).await;
    let pod = json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "app", "image": "nginx"}, {"name": "sidecar", "image": "envoy"}]}});
    assert_eq!(router.post(PODS, &pod).await.0, 201);

    // Not scheduled: the container must be named; the log is empty; streams need a host.
    let (code, body) = router.get(&format!("{PODS}/web/log")).await;
    assert_eq!((code, body["message"].as_str()), (400, Some("a container name must be specified for pod web, choose one of: [app sidecar]")));
    assert_eq!(text(&router, &format!("{PODS}/web/log?container=app"), reqwest::Method::GET).await, (200, String::new()));
    let (code, body) = router.get(&format!("{PODS}/web/log?container=nope")).await;
    assert_eq!((code, body["message"].as_str()), (400, Some("container nope is not valid for pod web")));
    let (code, body) = router.get(&format!("{PODS}/web/log?container=app&tailLines=-1")).await;
    assert_eq!((code, body["reason"].as_str(), body["details"]["causes"][0]["field"].as_str()), (422, Some("Invalid"), Some("tailLines")));
    let (code, body) = router.send("POST", &format!("{PODS}/web/exec?container=app&command=ls"), "application/json", "").await;
    assert_eq!((code, body["message"].as_str()), (400, Some("pod web does not have a host assigned")));
    let (code, body) = router.get(&format!("{PODS}/web:8080/proxy/healthz")).await;
    assert_eq!((code, body["message"].as_str()), (400, Some("address not allowed")), "a pod without an address");

    // Bound to a node whose kubelet port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (code, node) = router.post("/api/v1/nodes", &json!({"metadata": {"name": "n1"}})).await;
    assert_eq!(code, 201);
    let mut node: Value = node;
    node["status"] = json!({"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}], "daemonEndpoints": {"kubeletEndpoint": {"Port": closed}}});
    assert_eq!(router.put("/api/v1/nodes/n1/status", &node).await.0, 200);
    let (code, _) = router.post(&format!("{PODS}/web/binding"), &json!({"metadata": {"name": "web"}, "target": {"kind": "Node", "name": "n1"}})).await;
    assert_eq!(code, 201);
    let (code, body) = router.get(&format!("{PODS}/web/log?container=app")).await;
    assert_eq!(code, 500);
    assert_eq!(body["message"], format!("Get \"https://127.0.0.1:{closed}/containerLogs/default/web/app\": dial tcp 127.0.0.1:{closed}: connect: connection refused"));
    assert!(body.get("reason").is_none(), "an unclassified error, as upstream's: {body}");
    let (code, body) = router.send("POST", &format!("{PODS}/web/exec?container=sidecar&command=ls"), "application/json", "").await;
    assert_eq!((code, body["message"].as_str()), (500, Some(format!("error dialing backend: dial tcp 127.0.0.1:{closed}: connect: connection refused").as_str())));
    let (code, _) = router.send("DELETE", &format!("{PODS}/web/log"), "application/json", "").await;
    assert_eq!(code, 405);

    // Ephemeral containers: added through their subresource only, never changed or reused.
    let debug = json!({"spec": {"ephemeralContainers": [{"name": "debugger", "image": "busybox", "targetContainerName": "app"}]}});
    let (code, patched) = router.send("PATCH", &format!("{PODS}/web/ephemeralcontainers"), "application/strategic-merge-patch+json", debug.to_string()).await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["spec"]["ephemeralContainers"][0]["name"], "debugger");
    let (_, read) = router.get(&format!("{PODS}/web/ephemeralcontainers")).await;
    assert_eq!((read["kind"].as_str(), read["spec"]["ephemeralContainers"].as_array().map(Vec::len)), (Some("Pod"), Some(1)));
    let clash = json!({"spec": {"ephemeralContainers": [{"name": "app", "image": "busybox", "ports": [{"containerPort": 80}]}]}});
    let (code, body) = router.send("PATCH", &format!("{PODS}/web/ephemeralcontainers"), "application/strategic-merge-patch+json", clash.to_string()).await;
    assert_eq!(code, 422, "{body}");
    let causes: Vec<(String, String)> = body["details"]["causes"].as_array().unwrap().iter().map(|c| (c["field"].as_str().unwrap().to_owned(), c["message"].as_str().unwrap().to_owned())).collect();
    assert!(causes.contains(&("spec.ephemeralContainers[1].name".into(), "Duplicate value: \"app\"".into())), "{causes:?}");
    assert!(causes.contains(&("spec.ephemeralContainers[1].ports".into(), "Forbidden: cannot be set for an Ephemeral Container".into())), "{causes:?}");
    // A main-resource update cannot add one.
    let (_, mut current) = router.get(&format!("{PODS}/web")).await;
    current["spec"]["ephemeralContainers"] = json!([]);
    let (code, kept) = router.put(&format!("{PODS}/web"), &current).await;
    assert_eq!((code, kept["spec"]["ephemeralContainers"].as_array().map(Vec::len)), (200, Some(1)), "{kept}");
    let (_, discovery) = router.get("/api/v1").await;
    let subs: Vec<&str> = discovery["resources"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).filter(|n| n.starts_with("pods/")).collect();
    assert_eq!(subs, ["pods/attach", "pods/binding", "pods/ephemeralcontainers", "pods/eviction", "pods/exec", "pods/log", "pods/portforward", "pods/proxy", "pods/status"]);
}
